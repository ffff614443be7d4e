//! `--enable-websocket`: the event stream and every other call over WebSockets (gRPC over
//! HTTP/1.1, the peer's grpc-http1 protocol), through a real nginx that does not speak HTTP/2;
//! without the flag the agent says why it cannot connect. The peer's wire is pinned from both
//! sides: a hand-written client and server that speak it byte for byte as stackrox's code does.

use std::io::Write;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use argocd_pull_agent::local::LocalPki;
use argocd_pull_agent_core::Mode;
use argocd_pull_agent_core::proto::versionapi::{self, version_client::VersionClient};
use argocd_pull_agent_core::store::MemStore;
use argocd_pull_agent_core::ws;
use argocd_pull_spoke::AgentConfig;
use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use prost::Message as _;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

use crate::harness::*;
use crate::mesh::{Nginx, nginx};

/// nginx as an HTTP/1.1-only reverse proxy (no `http2`) that allows WebSocket upgrades, in front
/// of `upstream`: a TLS port that verifies the agent's certificate and passes its subject in
/// `x-client-id`, and a plaintext port.
struct Proxy {
    _nginx: Nginx,
    dir: tempfile::TempDir,
    tls_port: u16,
    plain_port: u16,
    /// plaintext, proxying HTTP/1.1 without passing the upgrade on (a common misconfiguration)
    no_upgrade_port: u16,
}

impl Proxy {
    fn access_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("access.log")).unwrap_or_default()
    }

    /// Waits until the access log holds `line` (nginx writes a line when a request ends).
    async fn wait_logged(&self, line: &str) {
        let ok = tokio::time::timeout(T, async {
            while !self.access_log().contains(line) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        assert!(ok.is_ok(), "nginx logged {line:?}: {}", self.access_log());
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

async fn http1_nginx(test: &str, pki: &LocalPki, upstream: std::net::SocketAddr) -> Option<Proxy> {
    let Some(bin) = nginx() else {
        let _ = writeln!(
            std::io::stderr(),
            "SKIP: {test} needs nginx (apt-get install nginx-light)"
        );
        return None;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("server.crt"), &pki.principal.cert_pem).unwrap();
    std::fs::write(d.join("server.key"), &pki.principal.key_pem).unwrap();
    std::fs::write(d.join("ca.crt"), &pki.principal.ca_pem).unwrap();
    let (tls_port, plain_port, no_upgrade_port) = (free_port(), free_port(), free_port());
    let location = |extra: &str| {
        format!(
            r#"location / {{
      proxy_pass http://{upstream};
      proxy_http_version 1.1;
      proxy_set_header Upgrade $http_upgrade;
      proxy_set_header Connection "upgrade";
      {extra}
      proxy_read_timeout 1h;
      proxy_send_timeout 1h;
    }}"#
        )
    };
    let conf = format!(
        r#"user root;
daemon off;
master_process off;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log info;
events {{}}
http {{
  access_log {d}/access.log;
  client_body_temp_path {d}/body;
  proxy_temp_path {d}/proxy;
  fastcgi_temp_path {d}/fastcgi;
  uwsgi_temp_path {d}/uwsgi;
  scgi_temp_path {d}/scgi;
  server {{
    listen 127.0.0.1:{tls_port} ssl;
    ssl_certificate {d}/server.crt;
    ssl_certificate_key {d}/server.key;
    ssl_client_certificate {d}/ca.crt;
    ssl_verify_client on;
    ssl_protocols TLSv1.3;
    {tls_location}
  }}
  server {{
    listen 127.0.0.1:{plain_port};
    {plain_location}
  }}
  server {{
    listen 127.0.0.1:{no_upgrade_port};
    location / {{
      proxy_pass http://{upstream};
      proxy_http_version 1.1;
    }}
  }}
}}
"#,
        d = d.display(),
        tls_location = location("proxy_set_header x-client-id $ssl_client_s_dn;"),
        plain_location = location(""),
    );
    std::fs::write(d.join("nginx.conf"), conf).unwrap();
    let child = std::process::Command::new(bin)
        .arg("-p")
        .arg(d)
        .arg("-c")
        .arg(d.join("nginx.conf"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("nginx starts");
    let nginx = Nginx(child);
    wait_idle(|| {
        [tls_port, plain_port, no_upgrade_port]
            .iter()
            .all(|p| std::net::TcpStream::connect(("127.0.0.1", *p)).is_ok())
    })
    .await;
    Some(Proxy {
        _nginx: nginx,
        dir,
        tls_port,
        plain_port,
        no_upgrade_port,
    })
}

/// The issue's proof: agent → nginx (HTTP/1.1 only, mTLS terminated, identity header) →
/// plaintext principal, every call a WebSocket.
#[tokio::test]
async fn agent_over_websocket_through_an_http1_only_nginx_terminating_mtls() {
    let test = "agent_over_websocket_through_an_http1_only_nginx_terminating_mtls";
    let pki = LocalPki::new().unwrap();
    let (hub, spoke) = (MemStore::new(), MemStore::new());
    let p = principal_with(&pki, &hub, "127.0.0.1:0", |c| {
        c.insecure_plaintext = true;
        c.identity_header = Some("x-client-id".into());
        c.identity_regex = "^CN=(.+)$".into();
        c.enable_websocket = true;
    })
    .await;
    let Some(nginx) = http1_nginx(test, &pki, p.local_addr()).await else {
        return;
    };
    let a = agent_with(&pki, &p, "edge-ws", Mode::Managed, &spoke, |c| {
        c.principal = ([127, 0, 0, 1], nginx.tls_port).into();
        c.auth_method = "header".into();
        c.enable_websocket = true;
    })
    .await;
    assert_eq!(p.connected_agents(), ["edge-ws"]);
    put(&hub, app("edge-ws", "web", "v1")).await;
    wait_for(
        &spoke,
        "argocd",
        "web",
        "through nginx over WebSocket",
        |o| o.is_some(),
    )
    .await;
    // the agent's status comes back over the same stream
    try_patch(
        &spoke,
        "argocd",
        "web",
        serde_json::json!({"status": {"health": {"status": "Healthy"}}}),
    )
    .await;
    wait_for(&hub, "edge-ws", "web", "status on the hub", |o| {
        o.is_some_and(|o| o["status"]["health"]["status"] == "Healthy")
    })
    .await;
    // the login went through nginx as a WebSocket upgrade (HTTP/1.1, 101)
    nginx
        .wait_logged("\"GET /authapi.Authentication/Authenticate HTTP/1.1\" 101")
        .await;
    a.shutdown().await;
    // the event stream too (logged when it ends)
    nginx
        .wait_logged("\"GET /eventstreamapi.EventStream/Subscribe HTTP/1.1\" 101")
        .await;
    assert!(
        !nginx.access_log().contains("HTTP/2.0"),
        "nothing reached nginx as HTTP/2: {}",
        nginx.access_log()
    );
    p.shutdown().await;
}

/// Without `--enable-websocket` an agent behind an HTTP/1.1-only proxy says why it cannot
/// connect and how to fix it, over TLS (ALPN) and in plaintext (the HTTP/2 preface answered
/// with HTTP/1.1).
#[tokio::test]
async fn without_websocket_an_agent_behind_an_http1_only_proxy_says_why() {
    let test = "without_websocket_an_agent_behind_an_http1_only_proxy_says_why";
    let pki = LocalPki::new().unwrap();
    let (hub, spoke) = (MemStore::new(), MemStore::new());
    let p = principal_with(&pki, &hub, "127.0.0.1:0", |c| {
        c.insecure_plaintext = true;
        c.identity_header = Some("x-client-id".into());
        c.identity_regex = "^CN=(.+)$".into();
        c.enable_websocket = true;
    })
    .await;
    let Some(nginx) = http1_nginx(test, &pki, p.local_addr()).await else {
        return;
    };
    let want = "answered HTTP/1.1, it does not speak HTTP/2 (gRPC)";
    for (port, plaintext) in [(nginx.tls_port, false), (nginx.plain_port, true)] {
        let mut c = AgentConfig::new(
            ([127, 0, 0, 1], port).into(),
            pki.agent("edge-h2").unwrap(),
            Mode::Managed,
        );
        c.auth_method = "header".into();
        c.insecure_plaintext = plaintext;
        let a = refused_agent(c, &spoke, want).await;
        let e = a.last_error().unwrap();
        assert!(
            e.contains(&format!("the server at 127.0.0.1:{port}"))
                && e.contains("if a proxy in between only speaks HTTP/1.1 set --enable-websocket on agent and principal"),
            "{e}"
        );
        a.shutdown().await;
    }
    p.shutdown().await;
}

/// A proxy that does not pass the upgrade on (nginx without `proxy_set_header Upgrade` /
/// `Connection "upgrade"`): the principal answers the peer's 400 and the agent reports it.
#[tokio::test]
async fn a_proxy_that_drops_the_upgrade_headers_is_named_in_the_agents_error() {
    let test = "a_proxy_that_drops_the_upgrade_headers_is_named_in_the_agents_error";
    let pki = LocalPki::new().unwrap();
    let (hub, spoke) = (MemStore::new(), MemStore::new());
    let p = principal_with(&pki, &hub, "127.0.0.1:0", |c| {
        c.insecure_plaintext = true;
        c.identity_header = Some("x-client-id".into());
        c.identity_regex = "^CN=(.+)$".into();
        c.enable_websocket = true;
    })
    .await;
    let Some(nginx) = http1_nginx(test, &pki, p.local_addr()).await else {
        return;
    };
    let mut c = AgentConfig::new(
        ([127, 0, 0, 1], nginx.no_upgrade_port).into(),
        pki.agent("edge-x").unwrap(),
        Mode::Managed,
    );
    c.auth_method = "header".into();
    c.insecure_plaintext = true;
    c.enable_websocket = true;
    let a = refused_agent(
        c,
        &spoke,
        "400 Bad Request instead of 101 Switching Protocols",
    )
    .await;
    let e = a.last_error().unwrap();
    assert!(
        e.contains("missing 'Connection: Upgrade' header in gRPC-websocket request (this usually means your proxy or load balancer does not support websockets)"),
        "{e}"
    );
    a.shutdown().await;
    p.shutdown().await;
}

/// One mTLS listener serves a WebSocket agent and a native gRPC agent; identities come from
/// the client certificates on both paths.
#[tokio::test]
async fn websocket_and_native_agents_share_the_principals_mtls_listener() {
    let pki = LocalPki::new().unwrap();
    let hub = MemStore::new();
    let (s1, s2) = (MemStore::new(), MemStore::new());
    let p = principal_with(&pki, &hub, "127.0.0.1:0", |c| c.enable_websocket = true).await;
    let ws = agent_with(&pki, &p, "over-ws", Mode::Managed, &s1, |c| {
        c.enable_websocket = true;
    })
    .await;
    let native = agent(&pki, &p, "over-h2", Mode::Managed, &s2).await;
    assert_eq!(p.connected_agents(), ["over-h2", "over-ws"]);
    put(&hub, app("over-ws", "a", "v1")).await;
    put(&hub, app("over-h2", "b", "v1")).await;
    wait_for(&s1, "argocd", "a", "over WebSocket", |o| o.is_some()).await;
    wait_for(&s2, "argocd", "b", "over HTTP/2", |o| o.is_some()).await;
    // an autonomous agent's objects travel the other way over WebSocket
    let s3 = MemStore::new();
    let au = agent_with(&pki, &p, "au-ws", Mode::Autonomous, &s3, |c| {
        c.enable_websocket = true;
    })
    .await;
    put(&s3, app("argocd", "mine", "v1")).await;
    wait_for(&hub, "au-ws", "mine", "autonomous over WebSocket", |o| {
        o.is_some()
    })
    .await;
    for a in [ws, native, au] {
        a.shutdown().await;
    }
    p.shutdown().await;
}

/// An agent with `--enable-websocket` and a principal without it: the agent names the fix.
#[tokio::test]
async fn a_websocket_agent_names_the_principal_flag_it_needs() {
    let pki = LocalPki::new().unwrap();
    let (hub, spoke) = (MemStore::new(), MemStore::new());
    let p = principal(&pki, &hub, "127.0.0.1:0").await;
    let mut c = AgentConfig::new(p.local_addr(), pki.agent("lonely").unwrap(), Mode::Managed);
    c.enable_websocket = true;
    let a = refused_agent(c, &spoke, "set --enable-websocket on the principal").await;
    a.shutdown().await;
    p.shutdown().await;
}

/// Our principal as the peer's agent sees it: a client written from stackrox's client code
/// (ws_proxy.go) calls Version: the upgrade carries the call's headers, request messages go as
/// one binary message each and end with `80 00 00 00 00`; the answer is a headers frame, data
/// frames, a trailers frame, then a normal close.
#[tokio::test]
async fn our_principal_speaks_the_peers_grpc_websocket_wire() {
    let pki = LocalPki::new().unwrap();
    let hub = MemStore::new();
    let p = principal_with(&pki, &hub, "127.0.0.1:0", |c| {
        c.insecure_plaintext = true;
        c.identity_header = Some("x-client-id".into());
        c.identity_regex = "^CN=(.+)$".into();
        c.enable_websocket = true;
        c.version = "v0.9.0-ours".into();
    })
    .await;
    let mut req = format!("ws://{}/versionapi.Version/Version", p.local_addr())
        .into_client_request()
        .unwrap();
    for (k, v) in [
        ("Sec-WebSocket-Protocol", "grpc-ws"),
        ("Content-Type", "application/grpc"),
        ("Te", "trailers"),
        ("User-Agent", "grpc-go/1.75.0"),
    ] {
        req.headers_mut().insert(k, v.parse().unwrap());
    }
    let tcp = tokio::net::TcpStream::connect(p.local_addr())
        .await
        .unwrap();
    let (mut ws, resp) = tokio_tungstenite::client_async(req, tcp).await.unwrap();
    assert_eq!(resp.status(), 101);
    ws.send(Message::Binary(Bytes::from_static(&[0, 0, 0, 0, 0])))
        .await
        .unwrap();
    ws.send(Message::Binary(Bytes::from_static(
        &ws::frame::END_OF_STREAM,
    )))
    .await
    .unwrap();
    let mut next = async || loop {
        match tokio::time::timeout(T, ws.next()).await.unwrap() {
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
            m => return m.unwrap().unwrap(),
        }
    };
    let Message::Binary(h) = next().await else {
        panic!("headers in a binary message")
    };
    assert_eq!(h[0], 0x80, "a metadata frame");
    let ws::frame::Frame::Metadata(h) = ws::frame::decode(h).unwrap() else {
        panic!("headers")
    };
    assert_eq!(h["content-type"], "application/grpc");
    assert!(!h.contains_key("grpc-status"), "not trailers-only: {h:?}");
    let Message::Binary(d) = next().await else {
        panic!("data in a binary message")
    };
    let ws::frame::Frame::Data(d) = ws::frame::decode(d).unwrap() else {
        panic!("data")
    };
    let v = versionapi::VersionResponse::decode(&d[5..]).unwrap();
    assert_eq!(v.version, "v0.9.0-ours");
    let Message::Binary(t) = next().await else {
        panic!("trailers in a binary message")
    };
    assert_eq!(
        &t[..],
        b"\x80\x00\x00\x00\x10Grpc-Status: 0\r\n",
        "the trailers as Go's http.Header.Write writes them"
    );
    let Message::Close(Some(c)) = next().await else {
        panic!("a close frame")
    };
    assert_eq!(c.code, CloseCode::Normal);
    p.shutdown().await;
}

/// The answer of tungstenite's handshake callback (its type, not ours).
#[allow(clippy::result_large_err)]
fn record(
    rec: &Mutex<Seen>,
    req: &tokio_tungstenite::tungstenite::handshake::server::Request,
    resp: tokio_tungstenite::tungstenite::handshake::server::Response,
) -> Result<
    tokio_tungstenite::tungstenite::handshake::server::Response,
    tokio_tungstenite::tungstenite::handshake::server::ErrorResponse,
> {
    let mut r = rec.lock().unwrap();
    r.path = req.uri().path().to_string();
    r.headers = req
        .headers()
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_str().unwrap().to_string()))
        .collect();
    Ok(resp)
}

/// What a fake peer principal saw of a call.
#[derive(Clone, Debug, Default)]
struct Seen {
    path: String,
    headers: Vec<(String, String)>,
    messages: Vec<Vec<u8>>,
}

/// Our agent's client against a server written from stackrox's server code (coder/websocket
/// accepts without naming a subprotocol; grpc-go's ServeHTTP headers and trailers as
/// wsResponseWriter frames them): a successful call and a failed one.
#[tokio::test]
#[allow(clippy::result_large_err)] // tungstenite's handshake callback type
async fn our_agent_speaks_the_peers_grpc_websocket_wire() {
    init();
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let s2 = seen.clone();
    let server = tokio::spawn(async move {
        for call in 0..2 {
            let (tcp, _) = l.accept().await.unwrap();
            let rec = Arc::new(Mutex::new(Seen::default()));
            let r2 = rec.clone();
            let mut ws = tokio_tungstenite::accept_hdr_async(tcp, move |req: &_, resp| {
                record(&r2, req, resp)
            })
            .await
            .unwrap();
            // request messages up to the end of stream
            loop {
                let Some(Ok(Message::Binary(m))) = ws.next().await else {
                    panic!("binary messages")
                };
                if m[..] == ws::frame::END_OF_STREAM {
                    break;
                }
                rec.lock().unwrap().messages.push(m.to_vec());
            }
            s2.lock().unwrap().push(rec.lock().unwrap().clone());
            let send = |b: Vec<u8>| Message::Binary(Bytes::from(b));
            if call == 0 {
                // a length and connection-specific headers (which an HTTP/1.1 server may add,
                // and HTTP/2 forbids or would enforce) are dropped on the way to tonic
                let block = b"Connection: keep-alive\r\nContent-Length: 0\r\nContent-Type: application/grpc\r\n";
                let mut m = vec![0x80, 0, 0, 0, block.len() as u8];
                m.extend_from_slice(block);
                ws.send(send(m)).await.unwrap();
                let body = versionapi::VersionResponse {
                    version: "v0.5.0-peer".into(),
                }
                .encode_to_vec();
                let mut m = vec![0, 0, 0, 0, body.len() as u8];
                m.extend_from_slice(&body);
                ws.send(send(m)).await.unwrap();
                ws.send(send(b"\x80\x00\x00\x00\x10Grpc-Status: 0\r\n".to_vec()))
                    .await
                    .unwrap();
            } else {
                ws.send(send(
                    b"\x80\x00\x00\x00\x20Content-Type: application/grpc\r\n".to_vec(),
                ))
                .await
                .unwrap();
                let block = b"Grpc-Message: version mismatch\r\nGrpc-Status: 9\r\n";
                let mut m = vec![0x80, 0, 0, 0, block.len() as u8];
                m.extend_from_slice(block);
                ws.send(send(m)).await.unwrap();
            }
            let _ = ws.close(None).await;
        }
    });
    let channel = ws::client::channel(
        tonic::transport::Endpoint::from_static("http://peer-principal"),
        ws::client::Target {
            addr,
            host: "localhost".into(),
            tls: None,
            keepalive: Duration::ZERO,
            keepalive_timeout: Duration::from_secs(20),
        },
    )
    .await
    .unwrap();
    let mut c = VersionClient::new(channel);
    let mut req = tonic::Request::new(versionapi::VersionRequest {});
    req.metadata_mut()
        .insert("authorization", "Bearer t0k3n".parse().unwrap());
    let v = tokio::time::timeout(T, c.version(req))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(v.into_inner().version, "v0.5.0-peer");
    let e = tokio::time::timeout(T, c.version(versionapi::VersionRequest {}))
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition);
    assert_eq!(e.message(), "version mismatch");
    server.await.unwrap();
    let seen = seen.lock().unwrap();
    let first = &seen[0];
    assert_eq!(first.path, "/versionapi.Version/Version");
    let h = |k: &str| {
        first
            .headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(k))
            .map(|(_, v)| v.as_str())
    };
    assert_eq!(h("sec-websocket-protocol"), Some("grpc-ws"));
    assert_eq!(h("content-type"), Some("application/grpc"));
    assert_eq!(h("te"), Some("trailers"));
    assert_eq!(
        h("authorization"),
        Some("Bearer t0k3n"),
        "metadata rides the upgrade"
    );
    assert_eq!(
        h("host"),
        Some(format!("localhost:{}", addr.port()).as_str())
    );
    assert_eq!(
        first.messages,
        [vec![0u8, 0, 0, 0, 0]],
        "the empty VersionRequest, one message"
    );
}

/// The peer principal's gRPC-Web downgrade (`PreferGRPCWeb(true)`): a gRPC-Web call over plain
/// HTTP/1.1 is answered in gRPC-Web (data frames, then the trailers as a `0x80` frame in the body).
#[tokio::test]
async fn a_grpc_web_call_over_http1_is_answered_in_grpc_web() {
    use http_body_util::BodyExt;
    let pki = LocalPki::new().unwrap();
    let hub = MemStore::new();
    let p = principal_with(&pki, &hub, "127.0.0.1:0", |c| {
        c.insecure_plaintext = true;
        c.identity_header = Some("x-client-id".into());
        c.identity_regex = "^CN=(.+)$".into();
        c.enable_websocket = true;
        c.version = "v0.9.0-web".into();
    })
    .await;
    let tcp = tokio::net::TcpStream::connect(p.local_addr())
        .await
        .unwrap();
    let (mut send, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp))
        .await
        .unwrap();
    tokio::spawn(conn);
    let call = |path: &str, ct: &str| {
        http::Request::post(path)
            .header("host", "principal")
            .header("content-type", ct)
            .header("accept", "application/grpc-web")
            .body(http_body_util::Full::new(Bytes::from_static(&[
                0, 0, 0, 0, 0,
            ])))
            .unwrap()
    };
    let resp = send
        .send_request(call(
            "/versionapi.Version/Version",
            "application/grpc-web+proto",
        ))
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "application/grpc-web+proto");
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    let len = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
    assert_eq!(body[0], 0, "a data frame first");
    let v = versionapi::VersionResponse::decode(&body[5..5 + len]).unwrap();
    assert_eq!(v.version, "v0.9.0-web");
    let trailers = &body[5 + len..];
    assert_eq!(trailers[0], 0x80, "then the trailers frame");
    let text = String::from_utf8_lossy(&trailers[5..]).to_ascii_lowercase();
    assert!(text.contains("grpc-status:0"), "{text}");
    // a plain HTTP/1.1 request that is neither gRPC-Web nor an upgrade: 404 naming the port's use
    let resp = send
        .send_request(call("/versionapi.Version/Version", "application/grpc"))
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
    p.shutdown().await;
}

/// A principal that stops answering (a stalled proxy, a dead peer) fails the call once neither a
/// message nor a pong came back for the keep-alive interval plus its timeout: the agent then
/// reconnects instead of waiting forever.
#[tokio::test]
async fn a_silent_principal_fails_the_call_after_the_keepalive_timeout() {
    init();
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let (tcp, _) = l.accept().await.unwrap();
        let _ws = tokio_tungstenite::accept_async(tcp).await.unwrap();
        // accepted, then never read from or written to again (no pong either)
        std::future::pending::<()>().await;
    });
    let channel = ws::client::channel(
        tonic::transport::Endpoint::from_static("http://silent"),
        ws::client::Target {
            addr,
            host: "localhost".into(),
            tls: None,
            keepalive: Duration::from_millis(100),
            keepalive_timeout: Duration::from_millis(200),
        },
    )
    .await
    .unwrap();
    let e = tokio::time::timeout(
        T,
        VersionClient::new(channel).version(versionapi::VersionRequest {}),
    )
    .await
    .expect("the call ends on its own")
    .unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unavailable);
    assert!(
        e.message()
            .contains("no message or pong from the principal for 300ms"),
        "{}",
        e.message()
    );
    server.abort();
}
