//! Container logs and web terminal through the principal and an agent, against the same calls
//! made directly to the agent's API server (a loopback fake serving one pod's `log` and `exec`):
//! * log throughput: `BENCH_LOG_MIB` (default 64) MiB of static log;
//! * log latency: time to the whole body of a small static log, `BENCH_LOGS` (default 500) times;
//! * terminal round trip: a line on stdin until its echo on stdout, `BENCH_ECHOS` (default 1000).
//!
//! Results: docs/perf/pod-streams.md.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use argocd_pull_agent::local::LocalPki;

use argocd_pull_agent_core::Mode;
use argocd_pull_agent_core::auth::throwaway_jwt_key;
use argocd_pull_agent_core::metrics::Metrics;
use argocd_pull_agent_core::resource::proxy_client;
use argocd_pull_agent_core::store::MemStore;
use argocd_pull_principal::{Principal, PrincipalConfig, ResourceProxyConfig};
use argocd_pull_spoke::{Agent, AgentConfig, ResourceProxyClient};
use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, AttachParams, LogParams};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::Role;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn line(name: &str, v: &mut [Duration]) {
    v.sort();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!(
        "{name:<22} p50 {:>8.0} µs  p90 {:>8.0} µs  p99 {:>8.0} µs  (n={})",
        us(pct(v, 0.5)),
        us(pct(v, 0.9)),
        us(pct(v, 0.99)),
        v.len()
    );
}

type Body = http_body_util::combinators::BoxBody<Bytes, Infallible>;

/// The fake API server: `big/log` streams `mib` MiB, `small/log` one line, `*/exec` echoes stdin.
async fn fake(mib: usize) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(
                    move |req: http::Request<hyper::body::Incoming>| async move {
                        Ok::<_, Infallible>(serve(req, mib).await)
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(s), svc)
                    .with_upgrades()
                    .await;
            });
        }
    });
    url
}

async fn serve(req: http::Request<hyper::body::Incoming>, mib: usize) -> http::Response<Body> {
    let path = req.uri().path().to_string();
    if path.ends_with("/big/log") {
        let chunk = Bytes::from(vec![b'x'; 64 * 1024]);
        let n = mib * 16;
        let body = futures::stream::iter((0..n).map(move |_| Ok(Frame::data(chunk.clone()))));
        return http::Response::new(BodyExt::boxed(StreamBody::new(body)));
    }
    if path.ends_with("/log") {
        return http::Response::new(Full::new(Bytes::from_static(b"one line\n")).boxed());
    }
    let key = req
        .headers()
        .get("sec-websocket-key")
        .unwrap()
        .as_bytes()
        .to_vec();
    tokio::spawn(async move {
        let up = hyper::upgrade::on(req).await.unwrap();
        let ws = WebSocketStream::from_raw_socket(TokioIo::new(up), Role::Server, None).await;
        let (mut tx, mut rx) = ws.split();
        while let Some(Ok(Message::Binary(d))) = rx.next().await {
            if d.first() == Some(&0) {
                let mut out = d.to_vec();
                out[0] = 1;
                if tx.send(Message::binary(out)).await.is_err() {
                    return;
                }
            }
        }
    });
    let mut r = http::Response::new(Full::new(Bytes::new()).boxed());
    *r.status_mut() = http::StatusCode::SWITCHING_PROTOCOLS;
    let h = r.headers_mut();
    h.insert("upgrade", "websocket".parse().unwrap());
    h.insert("connection", "Upgrade".parse().unwrap());
    let accept = tokio_tungstenite::tungstenite::handshake::derive_accept_key(&key);
    h.insert("sec-websocket-accept", accept.parse().unwrap());
    h.insert(
        "sec-websocket-protocol",
        "v5.channel.k8s.io".parse().unwrap(),
    );
    r
}

async fn throughput(api: &Api<Pod>) -> f64 {
    let t = Instant::now();
    let mut r = api.log_stream("big", &LogParams::default()).await.unwrap();
    let mut n = 0usize;
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let k = futures::AsyncReadExt::read(&mut r, &mut buf).await.unwrap();
        if k == 0 {
            break;
        }
        n += k;
    }
    n as f64 / (1024.0 * 1024.0) / t.elapsed().as_secs_f64()
}

async fn logs(api: &Api<Pod>, n: usize) -> Vec<Duration> {
    let mut v = Vec::with_capacity(n);
    for i in 0..n + n / 10 {
        let t = Instant::now();
        assert_eq!(
            api.logs("small", &LogParams::default()).await.unwrap(),
            "one line\n"
        );
        if i >= n / 10 {
            v.push(t.elapsed());
        }
    }
    v
}

async fn echos(api: &Api<Pod>, n: usize) -> Vec<Duration> {
    let mut p = api
        .exec("sh", ["sh"], &AttachParams::interactive_tty())
        .await
        .unwrap();
    let mut stdin = p.stdin().unwrap();
    let mut stdout = p.stdout().unwrap();
    let mut buf = [0u8; 64];
    let mut v = Vec::with_capacity(n);
    for i in 0..n + n / 10 {
        let t = Instant::now();
        stdin.write_all(b"ping\n").await.unwrap();
        let mut got = 0;
        while got < 5 {
            got += stdout.read(&mut buf[got..]).await.unwrap();
        }
        if i >= n / 10 {
            v.push(t.elapsed());
        }
    }
    p.abort();
    v
}

fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mib = env("BENCH_LOG_MIB", 64);
        let url = fake(mib).await;
        let mut cfg = kube::Config::new(url.parse().unwrap());
        cfg.default_retry = false;
        let direct_client = kube::Client::try_from(cfg).unwrap();

        let pki = LocalPki::new().unwrap();
        let mut pc = PrincipalConfig::new(
            "127.0.0.1:0".parse().unwrap(),
            pki.principal.clone(),
            throwaway_jwt_key(),
        );
        pc.resource_proxy = Some(ResourceProxyConfig::new(
            "127.0.0.1:0".parse().unwrap(),
            pki.principal.clone(),
        ));
        let p = Principal::start(
            pc,
            Arc::new(MemStore::new()),
            Metrics::new("argocd_principal"),
        )
        .await
        .unwrap();
        let mut ac = AgentConfig::new(p.local_addr(), pki.agent("bench").unwrap(), Mode::Managed);
        ac.resource_proxy = Some(ResourceProxyClient(direct_client.clone()));
        let a = Agent::start(ac, Arc::new(MemStore::new()), Metrics::new("argocd_agent"))
            .await
            .unwrap();
        tokio::time::timeout(Duration::from_secs(20), a.wait_connected(0))
            .await
            .unwrap();
        let proxy = format!("https://{}", p.resource_proxy_addr().unwrap());
        let proxied_client = proxy_client(&proxy, &pki.agent("bench").unwrap(), "bench")
            .await
            .unwrap();
        let direct = Api::<Pod>::namespaced(direct_client, "default");
        let proxied = Api::<Pod>::namespaced(proxied_client, "default");

        println!("static log of {mib} MiB:");
        println!("  direct   {:>8.1} MiB/s", throughput(&direct).await);
        println!("  proxied  {:>8.1} MiB/s", throughput(&proxied).await);
        let n = env("BENCH_LOGS", 500);
        line("small log, direct", &mut logs(&direct, n).await);
        line("small log, proxied", &mut logs(&proxied, n).await);
        let n = env("BENCH_ECHOS", 1000);
        line("terminal echo, direct", &mut echos(&direct, n).await);
        line("terminal echo, proxied", &mut echos(&proxied, n).await);
        a.shutdown().await;
    });
}
