//! Resource-proxy benchmark: GET latency through the proxy (client → principal HTTPS → agent
//! stream → agent → API server) against a direct GET to the same API server (the embedded hub
//! served over loopback HTTP), and 1,000 concurrent GETs across 100 agents.
//! `BENCH_GETS` (default 2000 sequential GETs per path), `BENCH_AGENTS` (default 100),
//! `BENCH_CONCURRENT` (default 1000). Results: docs/perf/resource-proxy.md.

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
use http_body_util::BodyExt;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

const PATH: &str = "/api/v1/namespaces/default/configmaps/web";

async fn get(c: &kube::Client, uri: &str) -> Result<usize, String> {
    let req = http::Request::builder()
        .uri(uri)
        .body(kube::client::Body::from(Vec::new()))
        .unwrap();
    let resp = c.send(req).await.map_err(|e| e.to_string())?;
    let st = resp.status();
    let b = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    if st.as_u16() != 200 {
        return Err(format!("HTTP {st}: {}", String::from_utf8_lossy(&b)));
    }
    Ok(b.len())
}

async fn sequential(c: &kube::Client, n: usize) -> Vec<Duration> {
    for _ in 0..n / 10 {
        get(c, PATH).await.unwrap();
    }
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        get(c, PATH).await.unwrap();
        v.push(t.elapsed());
    }
    v.sort();
    v
}

fn line(name: &str, v: &[Duration]) {
    println!(
        "{name:<8} p50 {:>8.0} µs  p90 {:>8.0} µs  p99 {:>8.0} µs  max {:>8.0} µs  (n={})",
        us(pct(v, 0.5)),
        us(pct(v, 0.9)),
        us(pct(v, 0.99)),
        us(*v.last().unwrap()),
        v.len()
    );
}

fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run());
}

async fn run() {
    let gets = env("BENCH_GETS", 2000);
    let n_agents = env("BENCH_AGENTS", 100);
    let concurrent = env("BENCH_CONCURRENT", 1000);

    // the API server: the embedded hub over loopback HTTP, one ConfigMap
    let hub = argocd_pull_hub::Hub::new();
    let server = hub.serve("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let api = || {
        let mut cfg = kube::Config::new(server.url().parse().unwrap());
        cfg.default_retry = false;
        kube::Client::try_from(cfg).unwrap()
    };
    let direct = api();
    let create = http::Request::builder()
        .method("POST")
        .uri("/api/v1/namespaces/default/configmaps")
        .header("content-type", "application/json")
        .body(kube::client::Body::from(
            serde_json::to_vec(&serde_json::json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}},
                "data": {"index.html": "<h1>hello</h1>", "nginx.conf": "server { listen 80; }"}
            }))
            .unwrap(),
        ))
        .unwrap();
    direct.send(create).await.unwrap();

    let pki = LocalPki::new().unwrap();
    let mut cfg = PrincipalConfig::new(
        "127.0.0.1:0".parse().unwrap(),
        pki.principal.clone(),
        throwaway_jwt_key(),
    );
    cfg.resource_proxy = Some(ResourceProxyConfig::new(
        "127.0.0.1:0".parse().unwrap(),
        pki.principal.clone(),
    ));
    let p = Principal::start(
        cfg,
        Arc::new(MemStore::new()),
        Metrics::new("argocd_principal"),
    )
    .await
    .unwrap();
    let url = format!("https://{}", p.resource_proxy_addr().unwrap());
    let mut agents: Vec<Agent> = Vec::new();
    let t0 = Instant::now();
    for i in 0..n_agents {
        let name = format!("agent-{i:03}");
        let mut c = AgentConfig::new(p.local_addr(), pki.agent(&name).unwrap(), Mode::Managed);
        c.resource_proxy = Some(ResourceProxyClient(api()));
        agents.push(
            Agent::start(c, Arc::new(MemStore::new()), Metrics::new("argocd_agent"))
                .await
                .unwrap(),
        );
    }
    for a in &agents {
        tokio::time::timeout(Duration::from_secs(60), a.wait_connected(0))
            .await
            .expect("agents connect");
    }
    println!("{n_agents} agents connected in {:?}", t0.elapsed());

    // 1. latency, one caller at a time
    let proxied = proxy_client(&url, &pki.agent("agent-000").unwrap(), "agent-000")
        .await
        .unwrap();
    let size = get(&proxied, PATH).await.unwrap();
    println!("object: {size} bytes through the proxy");
    let d = sequential(&direct, gets).await;
    let pr = sequential(&proxied, gets).await;
    line("direct", &d);
    line("proxy", &pr);
    println!(
        "overhead p50 {:.0} µs  p90 {:.0} µs  p99 {:.0} µs",
        us(pct(&pr, 0.5)) - us(pct(&d, 0.5)),
        us(pct(&pr, 0.9)) - us(pct(&d, 0.9)),
        us(pct(&pr, 0.99)) - us(pct(&d, 0.99)),
    );

    // 2. concurrent GETs spread over every agent (one client per agent, as Argo CD holds one
    // per cluster)
    let mut clients = Vec::new();
    for i in 0..n_agents {
        let name = format!("agent-{i:03}");
        let c = proxy_client(&url, &pki.agent(&name).unwrap(), &name)
            .await
            .unwrap();
        get(&c, PATH).await.unwrap(); // connection up
        clients.push(c);
    }
    let t = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..concurrent {
        let c = clients[i % n_agents].clone();
        tasks.push(tokio::spawn(async move {
            let t = Instant::now();
            get(&c, PATH).await.map(|_| t.elapsed())
        }));
    }
    let mut lat = Vec::new();
    let mut errors = Vec::new();
    for t in tasks {
        match t.await.unwrap() {
            Ok(d) => lat.push(d),
            Err(e) => errors.push(e),
        }
    }
    let wall = t.elapsed();
    lat.sort();
    println!(
        "{concurrent} concurrent GETs across {n_agents} agents: {} ok, {} errors, wall {:?} ({:.0} GET/s)",
        lat.len(),
        errors.len(),
        wall,
        concurrent as f64 / wall.as_secs_f64()
    );
    if !lat.is_empty() {
        line("each", &lat);
    }
    for e in errors.iter().take(5) {
        println!("error: {e}");
    }
    println!(
        "pending after the run: {} (must be 0)",
        p.pending_resource_requests()
    );
    assert!(errors.is_empty(), "errors: {errors:?}");
    for a in agents {
        a.shutdown().await;
    }
    p.shutdown().await;
    drop(server);
}
