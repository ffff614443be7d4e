//! Operability: admin endpoints on both sides (via the CLI entry points), graceful shutdown,
//! gzip compression on the wire, TLS 1.2 refused by default.
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use argocd_pull_agent::cli::{AgentArgs, PrincipalArgs, run_agent_until, run_principal_until};
use argocd_pull_agent::local::LocalPki;
use argocd_pull_agent_core::Mode;
use argocd_pull_agent_core::store::MemStore;
use argocd_pull_agent_core::tls;
use argocd_pull_ops::CancellationToken;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::harness::*;

fn free_addr() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

/// `GET path` over plain HTTP/1.1: (status, body). `None` when nothing listens.
async fn get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
    s.write_all(format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").as_bytes())
        .await
        .ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).await.ok()?;
    let status = buf.split_whitespace().nth(1)?.parse().ok()?;
    let body = buf
        .split_once("\r\n\r\n")
        .map(|x| x.1)
        .unwrap_or("")
        .to_string();
    Some((status, body))
}

/// Polls an HTTP endpoint until it answers `status` (the admin server has no event to await).
async fn until_status(addr: SocketAddr, path: &str, status: u16) {
    tokio::time::timeout(T, async {
        loop {
            if get(addr, path).await.is_some_and(|(s, _)| s == status) {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{addr}{path} never answered {status}"));
}

#[tokio::test]
async fn admin_endpoints_answer_on_both_sides_and_shutdown_is_graceful() {
    init();
    let dir = tempfile::tempdir().unwrap();
    argocd_pull_agent_core::pki::write_local_pki(dir.path(), &["edge".into()], &[], false).unwrap();
    let f = |n: &str| dir.path().join(n);
    let (grpc, padmin, aadmin) = (free_addr(), free_addr(), free_addr());
    let (phealth, ahealth) = (free_addr(), free_addr());
    let (hub, spoke) = (MemStore::new(), MemStore::new());

    // the agent first: serving /healthz and /readyz with 503 while the principal is unreachable
    let agent_args = AgentArgs::try_parse_flags([
        "--server-address".to_string(),
        grpc.to_string(),
        "--server-name=localhost".into(),
        "--agent-mode=managed".into(),
        format!("--tls-client-cert={}", f("edge.crt").display()),
        format!("--tls-client-key={}", f("edge.key").display()),
        format!("--root-ca-path={}", f("ca.crt").display()),
        "--tls-min-version=tls1.3".into(),
        "--queue-capacity=1000".into(),
        // both sides report a peer release's version: they log in only if both flags apply
        "--report-version=0.5.0".into(),
        format!("--metrics-port={}", aadmin.port()),
        format!("--healthz-port={}", ahealth.port()),
    ])
    .unwrap();
    let atoken = CancellationToken::new();
    let atask = tokio::spawn(run_agent_until(
        agent_args,
        Some(Arc::new(spoke.clone())),
        atoken.clone(),
    ));
    // serving, but neither healthy (the peer's healthzHandler) nor ready before it is connected
    until_status(aadmin, "/healthz", 503).await;
    assert_eq!(
        get(aadmin, "/readyz").await.unwrap().0,
        503,
        "agent not ready before it is connected"
    );

    let principal_args = PrincipalArgs::try_parse_flags([
        "--listen-host=127.0.0.1".to_string(),
        format!("--listen-port={}", grpc.port()),
        "--disable-redis-proxy".into(),
        format!("--tls-cert={}", f("principal.crt").display()),
        format!("--tls-key={}", f("principal.key").display()),
        format!("--root-ca-path={}", f("ca.crt").display()),
        format!("--auth=mtls:subject:{}", tls::DEFAULT_IDENTITY_REGEX),
        format!("--jwt-key={}", f("jwt.key").display()),
        "--namespace=argocd".into(),
        "--queue-capacity=1000".into(),
        "--report-version=0.5.0".into(),
        "--event-processors=8".into(),
        format!("--metrics-port={}", padmin.port()),
        format!("--healthz-port={}", phealth.port()),
    ])
    .unwrap();
    let ptoken = CancellationToken::new();
    let ptask = tokio::spawn(run_principal_until(
        principal_args,
        Some(Arc::new(hub.clone())),
        ptoken.clone(),
    ));
    until_status(padmin, "/readyz", 200).await;
    assert_eq!(get(padmin, "/healthz").await.unwrap().0, 200);
    until_status(aadmin, "/readyz", 200).await;

    put(&hub, app("edge", "guestbook", "v1")).await;
    wait_for(&spoke, "argocd", "guestbook", "delivered", |o| o.is_some()).await;
    let (s, body) = get(padmin, "/metrics").await.unwrap();
    assert_eq!(s, 200);
    assert!(
        body.contains("argocd_principal_connected_agents 1"),
        "{body}"
    );
    assert!(
        body.contains("argocd_principal_events_sent_total{type=\"create\"}"),
        "{body}"
    );
    // the peer's names beside ours, and its separate health port
    assert!(body.contains("\nprincipal_events_sent "), "{body}");
    assert_eq!(get(phealth, "/healthz").await.unwrap().0, 200);
    assert_eq!(get(ahealth, "/healthz").await.unwrap().0, 200);
    let (s, body) = get(aadmin, "/metrics").await.unwrap();
    assert_eq!(s, 200);
    assert!(body.contains("\nagent_events_received "), "{body}");
    assert!(
        body.contains("argocd_agent_events_processed_total"),
        "{body}"
    );

    // graceful shutdown (what SIGTERM / Ctrl-C trigger through argocd_pull_ops::shutdown)
    ptoken.cancel();
    tokio::time::timeout(T, ptask)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(
        get(padmin, "/healthz").await.is_none(),
        "admin server stopped"
    );
    until_status(aadmin, "/readyz", 503).await; // agent lost its principal: not ready
    atoken.cancel();
    tokio::time::timeout(T, atask)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(get(aadmin, "/healthz").await.is_none());
}

/// A TCP relay counting the bytes it forwards from the upstream (principal) to the client.
async fn counting_relay(upstream: SocketAddr, down_bytes: Arc<AtomicU64>) -> SocketAddr {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((client, _)) = l.accept().await {
            let n = down_bytes.clone();
            tokio::spawn(async move {
                let Ok(server) = tokio::net::TcpStream::connect(upstream).await else {
                    return;
                };
                let (mut cr, mut cw) = client.into_split();
                let (mut sr, mut sw) = server.into_split();
                let up = tokio::spawn(async move { tokio::io::copy(&mut cr, &mut sw).await });
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    match sr.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(k) => {
                            n.fetch_add(k as u64, Ordering::Relaxed);
                            if cw.write_all(&buf[..k]).await.is_err() {
                                break;
                            }
                        }
                    }
                }
                up.abort();
            });
        }
    });
    addr
}

async fn bytes_for_large_app(compression: bool) -> u64 {
    let pki = LocalPki::new().unwrap();
    let (hub, spoke) = (MemStore::new(), MemStore::new());
    let p = principal_with(&pki, &hub, "127.0.0.1:0", |c| c.compression = compression).await;
    let n = Arc::new(AtomicU64::new(0));
    let relay = counting_relay(p.local_addr(), n.clone()).await;
    let mut c = argocd_pull_spoke::AgentConfig::new(relay, pki.agent("c1").unwrap(), Mode::Managed);
    c.compression = compression;
    let a = argocd_pull_spoke::Agent::start(
        c,
        Arc::new(spoke.clone()),
        argocd_pull_agent_core::metrics::Metrics::new("argocd_agent"),
    )
    .await
    .unwrap();
    tokio::time::timeout(T, a.wait_connected(0)).await.unwrap();
    let before = n.load(Ordering::Relaxed);
    let mut big = app("c1", "big", "v1");
    big["metadata"]["annotations"]["blob"] = json!("abcdefgh".repeat(64 * 1024)); // 512 KiB
    put(&hub, big).await;
    let l = wait_for(&spoke, "argocd", "big", "delivered", |o| o.is_some())
        .await
        .unwrap();
    assert_eq!(
        l["metadata"]["annotations"]["blob"].as_str().unwrap().len(),
        512 * 1024
    );
    let sent = n.load(Ordering::Relaxed) - before;
    a.shutdown().await;
    p.shutdown().await;
    sent
}

#[tokio::test]
async fn compression_shrinks_what_goes_on_the_wire() {
    init();
    let plain = bytes_for_large_app(false).await;
    let gz = bytes_for_large_app(true).await;
    assert!(plain > 512 * 1024, "uncompressed: {plain} bytes");
    assert!(
        gz < 64 * 1024,
        "gzip: a 512 KiB compressible event takes {gz} bytes on the wire"
    );
}

async fn tls12_handshake(allow_tls12: bool) -> Result<(), String> {
    let pki = LocalPki::new().unwrap();
    let hub = MemStore::new();
    let p = principal_with(&pki, &hub, "127.0.0.1:0", |c| c.allow_tls12 = allow_tls12).await;
    let m = pki.agent("c1").unwrap();
    let mut roots = rustls::RootCertStore::empty();
    for c in tls::parse_certs(&m.ca_pem).unwrap() {
        roots.add(c).unwrap();
    }
    let mut cfg = rustls::ClientConfig::builder_with_provider(tls::provider())
        .with_protocol_versions(&[&rustls::version::TLS12])
        .unwrap()
        .with_root_certificates(roots)
        .with_client_auth_cert(
            tls::parse_certs(&m.cert_pem).unwrap(),
            tls::parse_key(&m.key_pem).unwrap(),
        )
        .unwrap();
    cfg.alpn_protocols = vec![b"h2".to_vec()];
    let tcp = tokio::net::TcpStream::connect(p.local_addr())
        .await
        .unwrap();
    let r = tokio_rustls::TlsConnector::from(Arc::new(cfg))
        .connect(
            rustls::pki_types::ServerName::try_from("localhost").unwrap(),
            tcp,
        )
        .await;
    let out = match r {
        Ok(s) => {
            assert_eq!(
                s.get_ref().1.protocol_version(),
                Some(rustls::ProtocolVersion::TLSv1_2)
            );
            Ok(())
        }
        Err(e) => Err(e.to_string()),
    };
    p.shutdown().await;
    out
}

#[tokio::test]
async fn tls12_is_refused_by_default_and_allowed_on_request() {
    init();
    let e = tls12_handshake(false)
        .await
        .expect_err("a TLS 1.2-only client must be refused");
    assert!(e.to_lowercase().contains("version"), "{e}");
    tls12_handshake(true)
        .await
        .expect("TLS 1.2 works when allowed");
}

/// `--heartbeat-interval`: the agent pings on its stream (the peer's `HeartbeatEvent(Ping)`) and
/// the principal ACKs every ping.
#[tokio::test]
async fn agent_heartbeats_are_sent_at_the_interval_and_acked() {
    use argocd_pull_agent_core::metrics::Metrics;
    let pki = LocalPki::new().unwrap();
    let (hub, spoke) = (MemStore::new(), MemStore::new());
    let p = principal(&pki, &hub, "127.0.0.1:0").await;
    let quiet = agent(&pki, &p, "hb-off", Mode::Managed, &spoke).await;
    let a = agent_with(&pki, &p, "hb", Mode::Managed, &spoke, |c| {
        c.heartbeat_interval = std::time::Duration::from_millis(50)
    })
    .await;
    let pings = |m: &Metrics| Metrics::total(&m.events_sent, "ping");
    // The agent's "processed" count is not only ACKs of pings, so the principal's own count of
    // pings received is part of the wait (asserted after it, it raced).
    wait_idle(|| {
        pings(&a.metrics()) >= 3
            && Metrics::total(&a.metrics().events_received, "processed") >= 3
            && Metrics::total(&p.metrics().events_received, "ping") >= 3
    })
    .await;
    assert_eq!(pings(&quiet.metrics()), 0, "no heartbeats by default");
    a.shutdown().await;
    quiet.shutdown().await;
    p.shutdown().await;
}

/// The peer's agent and principal flags of this release parse (a user keeps their manifests);
/// destination-based mapping is refused where the peer refuses it: on an autonomous agent, and
/// `--create-namespace` without it.
#[tokio::test]
async fn the_peers_policy_flags_parse_and_destination_mapping_is_refused_where_the_peer_refuses_it()
{
    let agent_flags = [
        "--server-address=localhost",
        "--source-uid-mismatch-policy=upsert",
        "--adoption-policy=never",
        "--on-application-recreate=clear-status",
        "--heartbeat-interval=30s",
        "--label-selector=team=a,tier in (web)",
        "--ignore-unmanaged-apps",
        "--create-namespace=false",
        "--allowed-namespaces=team-a,team-b",
    ];
    let a = AgentArgs::try_parse_flags(agent_flags).unwrap();
    assert_eq!(
        a.adoption_policy,
        argocd_pull_agent_core::policy::AdoptionPolicy::Never
    );
    assert_eq!(a.heartbeat_interval, std::time::Duration::from_secs(30));
    let bad = AgentArgs::try_parse_flags(["--adoption-policy=sometimes"]).unwrap_err();
    assert!(bad.to_string().contains("sometimes"), "{bad}");

    for (flags, want) in [
        (
            vec![
                "--server-address=localhost",
                "--destination-based-mapping",
                "--agent-mode=autonomous",
            ],
            "destination-based mapping is not supported for autonomous agents",
        ),
        (
            vec!["--server-address=localhost", "--create-namespace"],
            "cannot create namespaces if destination based mapping is disabled",
        ),
    ] {
        let a = AgentArgs::try_parse_flags(flags).unwrap();
        let e = run_agent_until(a, Some(Arc::new(MemStore::new())), CancellationToken::new())
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains(want), "{e}");
    }
    let p = PrincipalArgs::try_parse_flags([
        "--destination-based-mapping=true",
        "--namespace-create-enable",
        "--namespace-create-pattern=^agent-",
        "--namespace-create-labels=a=b",
        "--allowed-namespaces=agent-*",
        "--label-selector=x!=y",
    ])
    .unwrap();
    assert!(p.destination_based_mapping);
    // auth and transport must pair as the peer's validateAuthTLSPairing demands
    for (flags, want) in [
        (
            vec!["--auth=header:l5d-client-id:^(.+)$"],
            "requires --insecure-plaintext",
        ),
        (
            vec!["--insecure-plaintext", "--auth=mtls:subject:^CN=(.+)$"],
            "cannot be used with --insecure-plaintext",
        ),
        (
            vec!["--enable-self-cluster-registration"],
            "requires --self-registration-client-cert-secret",
        ),
    ] {
        let p = PrincipalArgs::try_parse_flags(flags).unwrap();
        let e = run_principal_until(p, Some(Arc::new(MemStore::new())), CancellationToken::new())
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains(want), "{e}");
    }
    let p = PrincipalArgs::try_parse_flags(["--label-selector=a>1"]).unwrap();
    let e = run_principal_until(p, Some(Arc::new(MemStore::new())), CancellationToken::new())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("--label-selector") && e.contains("not supported"),
        "{e}"
    );
}

/// The TLS blocklist: adding the agent's certificate fingerprint to ConfigMap
/// `argocd-agent-tls-blocklist` drops its stream and refuses its logins; removing it lets the
/// agent back in.
#[tokio::test]
async fn a_blocklisted_certificate_is_disconnected_and_refused_until_removed() {
    use argocd_pull_agent_core::store::{Kind, Store};
    let pki = LocalPki::new().unwrap();
    let (hub, spoke, other) = (MemStore::new(), MemStore::new(), MemStore::new());
    let p = principal(&pki, &hub, "127.0.0.1:0").await;
    let tls = pki.agent("blocked").unwrap();
    let pem = tls.cert_pem.clone();
    let a = agent_with(&pki, &p, "blocked", Mode::Managed, &spoke, |c| c.tls = tls).await;
    let b = agent(&pki, &p, "fine", Mode::Managed, &other).await;
    let der = rustls_pemfile::certs(&mut pem.as_slice())
        .next()
        .unwrap()
        .unwrap();
    let fp = argocd_pull_agent_core::blocklist::fingerprint(der.as_ref());
    hub.create(
        Kind::ConfigMap,
        serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "argocd-agent-tls-blocklist", "namespace": "argocd"},
            "data": {fp.clone(): ""}}),
    )
    .await
    .unwrap();
    wait_idle(|| p.connected_agents() == ["fine"]).await;
    // it keeps trying and is refused by name
    wait_idle(|| {
        a.last_error()
            .is_some_and(|e| e.contains("certificate is blocklisted"))
    })
    .await;
    assert!(b.is_connected(), "other agents are untouched");
    let n = a.connections();
    hub.delete(Kind::ConfigMap, "argocd", "argocd-agent-tls-blocklist")
        .await
        .unwrap();
    tokio::time::timeout(T, a.wait_connected(n))
        .await
        .expect("back in once removed from the blocklist");
    a.shutdown().await;
    b.shutdown().await;
    p.shutdown().await;
}

/// `--auth mtls:uri:<regex>`: the agent's name comes from a URI SAN of its certificate (a SPIFFE
/// workload identity), not from its subject; a certificate without a matching URI is refused.
#[tokio::test]
async fn spiffe_uri_identity_names_the_agent() {
    use argocd_pull_agent_core::tls::TlsMaterial;
    let pki = LocalPki::new().unwrap();
    let (hub, spoke, other) = (MemStore::new(), MemStore::new(), MemStore::new());
    let p = principal_with(&pki, &hub, "127.0.0.1:0", |c| {
        c.identity_regex = "^spiffe://cluster\\.local/ns/[^/]+/sa/(.+)$".into();
        c.identity_from_uri = true;
    })
    .await;
    let material = |cn: &str, uri: &str| {
        let c = pki.ca.issue_client_with_uri(cn, uri).unwrap();
        TlsMaterial {
            cert_pem: c.cert_pem.into(),
            key_pem: c.key_pem.into(),
            ca_pem: pki.ca.cert_pem.clone().into(),
        }
    };
    let tls = material("workload", "spiffe://cluster.local/ns/argocd/sa/edge-7");
    let a = agent_with(&pki, &p, "edge-7", Mode::Managed, &spoke, |c| c.tls = tls).await;
    assert_eq!(
        p.connected_agents(),
        ["edge-7"],
        "named by the URI SAN, not CN=workload"
    );
    put(&hub, app("edge-7", "web", "v1")).await;
    wait_for(
        &spoke,
        "argocd",
        "web",
        "delivered to the SPIFFE-named agent",
        |o| o.is_some(),
    )
    .await;

    // a certificate whose URI does not match is refused by name
    let bad = material("edge-8", "spiffe://other.domain/ns/argocd/sa/edge-8");
    let c = argocd_pull_spoke::AgentConfig::new(p.local_addr(), bad, Mode::Managed);
    let b = refused_agent(c, &other, "no URI SAN matched the agent ID regex").await;
    a.shutdown().await;
    b.shutdown().await;
    p.shutdown().await;
}

/// Service mesh: `--insecure-plaintext` + `--auth header:<name>:<regex>`. The principal serves
/// plain HTTP/2 and takes the agent's identity only from the header the mesh sidecar sets (here
/// the test client sets it, as the sidecar would); a request without it is refused, and an agent
/// dialling in plaintext without a mesh is refused by name.
#[tokio::test]
async fn plaintext_principal_takes_the_identity_from_the_mesh_header_only() {
    use argocd_pull_agent_core::event::{Event, EventType};
    use argocd_pull_agent_core::proto::authapi::{
        AuthRequest, authentication_client::AuthenticationClient,
    };
    use argocd_pull_agent_core::proto::eventstreamapi::event_stream_client::EventStreamClient;
    use futures::StreamExt;
    use tonic::metadata::MetadataValue;

    let pki = LocalPki::new().unwrap();
    let (hub, spoke) = (MemStore::new(), MemStore::new());
    let p = principal_with(&pki, &hub, "127.0.0.1:0", |c| {
        c.insecure_plaintext = true;
        c.identity_header = Some("x-forwarded-client-cert".into());
        c.identity_regex = "^.*URI=spiffe://[^/]+/ns/[^/]+/sa/([^,;]+)".into();
    })
    .await;
    let xfcc = "By=spiffe://cluster.local/ns/argocd/sa/principal;Hash=ab;URI=spiffe://cluster.local/ns/edge/sa/mesh-1";
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", p.local_addr()))
        .unwrap()
        .connect()
        .await
        .expect("plain HTTP/2");
    let login = |with_header: bool| {
        let mut req = tonic::Request::new(AuthRequest {
            method: "header".into(),
            mode: "managed".into(),
            version: argocd_pull_agent_core::VERSION.into(),
            ..Default::default()
        });
        if with_header {
            req.metadata_mut().insert(
                "x-forwarded-client-cert",
                MetadataValue::try_from(xfcc).unwrap(),
            );
        }
        req
    };
    let e = AuthenticationClient::new(channel.clone())
        .authenticate(login(false))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unauthenticated);
    assert!(
        e.message()
            .contains("header 'x-forwarded-client-cert' not found"),
        "{e}"
    );
    let tokens = AuthenticationClient::new(channel.clone())
        .authenticate(login(true))
        .await
        .expect("identity from the mesh header")
        .into_inner();

    // the stream of agent "mesh-1" (named by the SPIFFE URI in the header) gets its hub app
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    let mut req = tonic::Request::new(tokio_stream::wrappers::ReceiverStream::new(rx));
    req.metadata_mut()
        .insert("authorization", tokens.access_token.parse().unwrap());
    req.metadata_mut().insert(
        "x-forwarded-client-cert",
        MetadataValue::try_from(xfcc).unwrap(),
    );
    let mut inbound = EventStreamClient::new(channel)
        .subscribe(req)
        .await
        .expect("subscribed")
        .into_inner();
    put(&hub, app("mesh-1", "web", "v1")).await;
    let got = tokio::time::timeout(T, async {
        while let Some(ev) = inbound.next().await {
            let ev = Event::from_wire(&ev.unwrap()).unwrap();
            if ev.ty == EventType::Create && ev.name() == "web" {
                return ev;
            }
        }
        panic!("stream ended");
    })
    .await
    .expect("the hub Application reaches the mesh agent");
    assert_eq!(got.data["spec"]["source"]["path"], "v1");
    drop(tx);

    // our agent in plaintext with --creds header: and no mesh in between: refused by name
    let mut c = argocd_pull_spoke::AgentConfig::new(
        p.local_addr(),
        pki.agent("no-mesh").unwrap(),
        Mode::Managed,
    );
    c.insecure_plaintext = true;
    c.auth_method = "header".into();
    let a = refused_agent(c, &spoke, "not found in request").await;
    a.shutdown().await;
    p.shutdown().await;
}

/// A principal (or a proxy in front of it) that completes the TLS handshake and then never
/// answers does not hold the agent in its first attempt: the attempt is abandoned after the
/// login timeout with an error naming the step, and the agent keeps retrying.
#[tokio::test]
async fn a_principal_that_never_answers_after_tls_is_named_and_retried() {
    let pki = LocalPki::new().unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let cfg = Arc::new(tls::server_config(&pki.principal, false).unwrap());
    let (mut conns, accept) = tls::serve_tls(listener, cfg, Arc::new(|_| {})).await;
    // the TLS streams are held open and never read
    let held = tokio::spawn(async move {
        let mut keep = Vec::new();
        while let Some(c) = conns.recv().await {
            keep.push(c);
        }
    });
    let mut c =
        argocd_pull_spoke::AgentConfig::new(addr, pki.agent("patient").unwrap(), Mode::Managed);
    c.login_timeout = std::time::Duration::from_secs(2);
    let store = MemStore::new();
    let a = refused_agent(c, &store, "within 2s while authenticating").await;
    let e = a.last_error().unwrap();
    assert!(e.contains(&addr.to_string()), "{e}");
    a.shutdown().await;
    held.abort();
    accept.abort();
}

/// A stopping principal (SIGTERM: an active/active replica handing its agents to the others)
/// ends each event stream with `Unavailable` and the `x-argocd-pull-reconnect: now` trailer: our
/// agent comes back within half a second instead of over its reconnect window, and a peer agent
/// sees an ordinary `Unavailable`.
#[tokio::test]
async fn a_stopping_principal_ends_each_event_stream_asking_for_a_reconnect_now() {
    use argocd_pull_agent_core::proto::eventstreamapi::{
        self, event_stream_client::EventStreamClient,
    };
    let pki = LocalPki::new().unwrap();
    let hub = MemStore::new();
    let p = principal(&pki, &hub, "127.0.0.1:0").await;
    let addr = p.local_addr();
    let ch = mtls_channel(addr, &pki.agent("stays").unwrap())
        .await
        .unwrap();
    let token = login(ch.clone(), "managed").await.unwrap();
    let (_tx, rx) = tokio::sync::mpsc::channel::<eventstreamapi::Event>(8);
    let mut req = tonic::Request::new(tokio_stream::wrappers::ReceiverStream::new(rx));
    req.metadata_mut()
        .insert("authorization", token.parse().unwrap());
    let mut inbound = EventStreamClient::new(ch)
        .subscribe(req)
        .await
        .unwrap()
        .into_inner();
    wait_idle(|| p.connected_agents() == ["stays"]).await;
    let stop = tokio::spawn(p.shutdown());
    let end = loop {
        match tokio::time::timeout(T, inbound.message()).await.unwrap() {
            Ok(Some(_)) => continue,
            Ok(None) => panic!("the stream ended without a status"),
            Err(s) => break s,
        }
    };
    assert_eq!(end.code(), tonic::Code::Unavailable, "{end:?}");
    assert_eq!(
        end.metadata()
            .get("x-argocd-pull-reconnect")
            .map(|v| v.to_str().unwrap()),
        Some("now")
    );
    tokio::time::timeout(T, stop).await.unwrap().unwrap();
}
