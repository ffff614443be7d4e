//! Events per second through one agent over WebSocket (`--enable-websocket`) against native gRPC,
//! on one principal with `--enable-websocket` over loopback mTLS (one listener serves both).
//! `BENCH_EVENTS` (default 5000) creates per run, `BENCH_ROUNDS` (default 3) alternating rounds
//! per transport; then hub → agent latency over 300 sequential updates. With `nginx` on PATH
//! (Debian nginx-light) the same again through nginx: native gRPC through an `http2` server with
//! `grpc_pass`, WebSocket through an HTTP/1.1-only server with the upgrade allowed, both
//! terminating the agents' mTLS in front of a plaintext principal (`--auth header:`). Results:
//! docs/perf/websocket.md.

use std::sync::Arc;
use std::time::{Duration, Instant};

use argocd_pull_agent::local::LocalPki;

use argocd_pull_agent_core::Mode;
use argocd_pull_agent_core::auth::throwaway_jwt_key;
use argocd_pull_agent_core::metrics::Metrics;
use argocd_pull_agent_core::store::{Kind, MemStore, Store, StoreEvent};
use argocd_pull_principal::{Principal, PrincipalConfig};
use argocd_pull_spoke::{Agent, AgentConfig};
use futures::StreamExt;
use serde_json::json;

fn app(ns: &str, name: &str, rev: u64) -> serde_json::Value {
    json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
           "metadata": {"name": name, "namespace": ns},
           "spec": {"project": "default", "source": {"repoURL": "https://example.com/r.git", "path": "p", "targetRevision": rev.to_string()},
                    "destination": {"server": "https://kubernetes.default.svc", "namespace": "x"}}})
}

/// Waits until `n` objects exist in `ns`, following one watch.
async fn until_count(s: &MemStore, ns: &str, n: usize) {
    let mut w = s.watch(Kind::Application, Some(ns));
    let mut seen: std::collections::HashSet<String> = Default::default();
    let name = |o: &serde_json::Value| o["metadata"]["name"].as_str().unwrap_or("").to_string();
    while seen.len() < n {
        match w.next().await {
            Some(Ok(StoreEvent::Restarted(l))) => seen = l.iter().map(|o| name(o)).collect(),
            Some(Ok(StoreEvent::Applied(o))) => {
                seen.insert(name(&o));
            }
            Some(Ok(StoreEvent::Deleted(o))) => {
                seen.remove(&name(&o));
            }
            other => panic!("watch ended: {other:?}"),
        }
    }
}

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(run());
}

async fn run() {
    let n_events = env("BENCH_EVENTS", 5000);
    let rounds = env("BENCH_ROUNDS", 3);
    let pki = LocalPki::new().unwrap();

    // direct: one mTLS listener for both transports
    let hub = MemStore::with_capacity(65536);
    let mut cfg = PrincipalConfig::new(
        "127.0.0.1:0".parse().unwrap(),
        pki.principal.clone(),
        throwaway_jwt_key(),
    );
    cfg.enable_websocket = true;
    let p = start_principal(cfg, &hub).await;
    let agents = vec![
        start_agent(&pki, "native", p.local_addr(), false, false).await,
        start_agent(&pki, "websocket", p.local_addr(), true, false).await,
    ];
    measure(&hub, &agents, rounds, n_events).await;
    stop(agents, p).await;

    // through nginx, terminating mTLS in front of a plaintext principal
    let Some(bin) = nginx() else {
        println!("nginx: not on PATH, skipped (apt-get install nginx-light)");
        return;
    };
    let hub = MemStore::with_capacity(65536);
    let mut cfg = PrincipalConfig::new(
        "127.0.0.1:0".parse().unwrap(),
        pki.principal.clone(),
        throwaway_jwt_key(),
    );
    cfg.enable_websocket = true;
    cfg.insecure_plaintext = true;
    cfg.identity_header = Some("x-client-id".into());
    cfg.identity_regex = "^CN=(.+)$".into();
    let p = start_principal(cfg, &hub).await;
    let dir = tempfile::tempdir().unwrap();
    let (mut nginx, h2_port, h1_port) = start_nginx(&bin, dir.path(), &pki, p.local_addr());
    let agents = vec![
        start_agent(
            &pki,
            "nginx-h2",
            ([127, 0, 0, 1], h2_port).into(),
            false,
            true,
        )
        .await,
        start_agent(
            &pki,
            "nginx-ws",
            ([127, 0, 0, 1], h1_port).into(),
            true,
            true,
        )
        .await,
    ];
    measure(&hub, &agents, rounds, n_events).await;
    stop(agents, p).await;
    let _ = nginx.kill();
    let _ = nginx.wait();
}

async fn start_principal(cfg: PrincipalConfig, hub: &MemStore) -> Principal {
    Principal::start(cfg, Arc::new(hub.clone()), Metrics::new("argocd_principal"))
        .await
        .unwrap()
}

async fn start_agent(
    pki: &LocalPki,
    name: &'static str,
    addr: std::net::SocketAddr,
    websocket: bool,
    header_auth: bool,
) -> (&'static str, MemStore, Agent) {
    let mut c = AgentConfig::new(addr, pki.agent(name).unwrap(), Mode::Managed);
    c.enable_websocket = websocket;
    if header_auth {
        c.auth_method = "header".into();
    }
    let s = MemStore::with_capacity(65536);
    let a = Agent::start(c, Arc::new(s.clone()), Metrics::new("argocd_agent"))
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(30), a.wait_connected(0))
        .await
        .unwrap_or_else(|_| panic!("{name} connects: {:?}", a.last_error()));
    (name, s, a)
}

async fn stop(agents: Vec<(&'static str, MemStore, Agent)>, p: Principal) {
    for (_, _, a) in agents {
        a.shutdown().await;
    }
    p.shutdown().await;
}

/// Alternating rounds of `n_events` creates per agent, then latency per agent.
async fn measure(
    hub: &MemStore,
    agents: &[(&'static str, MemStore, Agent)],
    rounds: u64,
    n_events: u64,
) {
    let mut rates: Vec<Vec<f64>> = vec![vec![]; agents.len()];
    for r in 0..rounds {
        for (i, (name, spoke, _)) in agents.iter().enumerate() {
            let t = Instant::now();
            for k in 0..n_events {
                hub.create(Kind::Application, app(name, &format!("r{r}-{k}"), 1))
                    .await
                    .unwrap();
            }
            until_count(spoke, "argocd", ((r + 1) * n_events) as usize).await;
            let rate = n_events as f64 / t.elapsed().as_secs_f64();
            println!("round {r}: {name}: {n_events} creates delivered at {rate:.0} events/s");
            rates[i].push(rate);
        }
    }
    for ((name, _, _), mut v) in agents.iter().zip(rates) {
        v.sort_by(f64::total_cmp);
        println!(
            "{name}: median {:.0} events/s, best {:.0} over {} rounds",
            v[v.len() / 2],
            v[v.len() - 1],
            v.len()
        );
    }
    for (name, spoke, _) in agents {
        let mut w = spoke.watch(Kind::Application, Some("argocd"));
        let _ = w.next().await; // Restarted
        let mut lats = Vec::new();
        for r in 2..302u64 {
            let rs = r.to_string();
            let t = Instant::now();
            hub.merge_patch(
                Kind::Application,
                name,
                "r0-0",
                json!({"spec": {"source": {"targetRevision": rs}}}),
            )
            .await
            .unwrap();
            loop {
                match w.next().await {
                    Some(Ok(StoreEvent::Applied(o)))
                        if o["metadata"]["name"] == "r0-0"
                            && o["spec"]["source"]["targetRevision"] == rs.as_str() =>
                    {
                        break;
                    }
                    Some(Ok(_)) => {}
                    other => panic!("watch ended: {other:?}"),
                }
            }
            lats.push(t.elapsed());
        }
        lats.sort();
        println!(
            "{name}: hub->agent latency over 300 updates: p50 {:?} p99 {:?} max {:?}",
            lats[150], lats[296], lats[299]
        );
    }
}

fn nginx() -> Option<std::path::PathBuf> {
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .chain(["/usr/sbin".into(), "/sbin".into()])
            .map(|d| d.join("nginx"))
            .find(|f| f.is_file())
    })
}

/// nginx terminating the agents' mTLS: an `http2` server passing gRPC on (`grpc_pass`) and an
/// HTTP/1.1-only server passing WebSocket upgrades on; both set `x-client-id`. Returns the
/// process (the caller kills it) and the two ports.
fn start_nginx(
    bin: &std::path::Path,
    d: &std::path::Path,
    pki: &LocalPki,
    upstream: std::net::SocketAddr,
) -> (std::process::Child, u16, u16) {
    std::fs::write(d.join("server.crt"), &pki.principal.cert_pem).unwrap();
    std::fs::write(d.join("server.key"), &pki.principal.key_pem).unwrap();
    std::fs::write(d.join("ca.crt"), &pki.principal.ca_pem).unwrap();
    let port = || {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    };
    let (h2, h1) = (port(), port());
    let tls = format!(
        "ssl_certificate {d}/server.crt; ssl_certificate_key {d}/server.key; \
         ssl_client_certificate {d}/ca.crt; ssl_verify_client on; ssl_protocols TLSv1.3;",
        d = d.display()
    );
    let conf = format!(
        r#"user root;
daemon off;
master_process off;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log error;
events {{}}
http {{
  access_log off;
  client_body_temp_path {d}/body;
  proxy_temp_path {d}/proxy;
  fastcgi_temp_path {d}/fastcgi;
  uwsgi_temp_path {d}/uwsgi;
  scgi_temp_path {d}/scgi;
  server {{
    listen 127.0.0.1:{h2} ssl http2;
    {tls}
    location / {{
      grpc_pass grpc://{upstream};
      grpc_set_header x-client-id $ssl_client_s_dn;
      grpc_read_timeout 1h;
      grpc_send_timeout 1h;
    }}
  }}
  server {{
    listen 127.0.0.1:{h1} ssl;
    {tls}
    location / {{
      proxy_pass http://{upstream};
      proxy_http_version 1.1;
      proxy_set_header Upgrade $http_upgrade;
      proxy_set_header Connection "upgrade";
      proxy_set_header x-client-id $ssl_client_s_dn;
      proxy_read_timeout 1h;
      proxy_send_timeout 1h;
    }}
  }}
}}
"#,
        d = d.display(),
    );
    std::fs::write(d.join("nginx.conf"), conf).unwrap();
    let child = std::process::Command::new(bin)
        .arg("-p")
        .arg(d)
        .arg("-c")
        .arg(d.join("nginx.conf"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("nginx starts");
    let t = Instant::now();
    while ![h1, h2]
        .iter()
        .all(|p| std::net::TcpStream::connect(("127.0.0.1", *p)).is_ok())
    {
        assert!(t.elapsed() < Duration::from_secs(10), "nginx listens");
        std::thread::sleep(Duration::from_millis(20));
    }
    (child, h2, h1)
}
