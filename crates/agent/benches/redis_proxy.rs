//! Redis-proxy benchmark: GET latency of an agent's resource-tree key through the proxy (client →
//! principal RESP → agent stream → agent → the agent's redis-server) against a direct GET to
//! the same redis-server, the same for a hub key (byte-for-byte pass-through), and one 25 MB
//! value. Needs Debian's `redis-server`. `BENCH_GETS` (default 5000 sequential GETs per path),
//! `BENCH_VALUE` (default 8192 bytes, a gzipped resource tree of a mid-size app).
//! Results: docs/perf/redis-proxy.md.

#[path = "../tests/loopback/redis_server.rs"]
mod redis_server;

use std::sync::Arc;
use std::time::{Duration, Instant};

use argocd_pull_agent::local::LocalPki;

use argocd_pull_agent_core::Mode;
use argocd_pull_agent_core::auth::throwaway_jwt_key;
use argocd_pull_agent_core::metrics::Metrics;
use argocd_pull_agent_core::store::MemStore;
use argocd_pull_principal::{Principal, PrincipalConfig, RedisProxyConfig};
use argocd_pull_spoke::{Agent, AgentConfig, LocalRedisProxy};
use redis::AsyncCommands;
use redis::aio::MultiplexedConnection;

use redis_server::RedisServer;

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

async fn sequential(
    c: &mut MultiplexedConnection,
    key: &str,
    n: usize,
    want: usize,
) -> Vec<Duration> {
    for _ in 0..n / 10 {
        let v: Vec<u8> = c.get(key).await.unwrap();
        assert_eq!(v.len(), want);
    }
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let v: Vec<u8> = c.get(key).await.unwrap();
        out.push(t.elapsed());
        assert_eq!(v.len(), want);
    }
    out.sort();
    out
}

fn line(name: &str, v: &[Duration]) {
    println!(
        "{name:<12} p50 {:>7.0} µs  p90 {:>7.0} µs  p99 {:>7.0} µs  max {:>7.0} µs  (n={})",
        us(pct(v, 0.5)),
        us(pct(v, 0.9)),
        us(pct(v, 0.99)),
        us(*v.last().unwrap()),
        v.len()
    );
}

fn overhead(name: &str, proxied: &[Duration], direct: &[Duration]) {
    println!(
        "{name:<12} overhead p50 {:.0} µs  p90 {:.0} µs  p99 {:.0} µs",
        us(pct(proxied, 0.5)) - us(pct(direct, 0.5)),
        us(pct(proxied, 0.9)) - us(pct(direct, 0.9)),
        us(pct(proxied, 0.99)) - us(pct(direct, 0.99)),
    );
}

async fn client(addr: &str) -> MultiplexedConnection {
    let cfg =
        redis::AsyncConnectionConfig::new().set_response_timeout(Some(Duration::from_secs(120)));
    redis::Client::open(format!("redis://{addr}/"))
        .unwrap()
        .get_multiplexed_async_connection_with_config(&cfg)
        .await
        .unwrap()
}

fn main() {
    if !redis_server::available() {
        println!("SKIP: redis-server is not installed (apt-get install redis-server)");
        return;
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run());
}

async fn run() {
    let gets = env("BENCH_GETS", 5000);
    let size = env("BENCH_VALUE", 8192);
    let big = 200 * 1024 * 1024;
    let hub = RedisServer::start().await;
    let local = RedisServer::start().await;

    let pki = LocalPki::new().unwrap();
    let mut cfg = PrincipalConfig::new(
        "127.0.0.1:0".parse().unwrap(),
        pki.principal.clone(),
        throwaway_jwt_key(),
    );
    cfg.max_event_size = big;
    cfg.redis_proxy = Some(RedisProxyConfig::new(
        "127.0.0.1:0".parse().unwrap(),
        &hub.addr,
    ));
    let p = Principal::start(
        cfg,
        Arc::new(MemStore::new()),
        Metrics::new("argocd_principal"),
    )
    .await
    .unwrap();
    let mut c = AgentConfig::new(p.local_addr(), pki.agent("agent-a").unwrap(), Mode::Managed);
    c.max_event_size = big;
    c.redis_proxy = Some(LocalRedisProxy::new(&local.addr.clone()));
    let agent: Agent = Agent::start(c, Arc::new(MemStore::new()), Metrics::new("argocd_agent"))
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(60), agent.wait_connected(0))
        .await
        .expect("agent connects");
    while p.connected_agents().is_empty() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    let value: Vec<u8> = (0..size as u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 24) as u8)
        .collect();
    let mut l = local.conn().await;
    let _: () = l
        .set("app|resources-tree|guestbook|1.8.3.gz", value.as_slice())
        .await
        .unwrap();
    let mut h = hub.conn().await;
    let _: () = h
        .set("cluster|info|x|1.8.3.gz", value.as_slice())
        .await
        .unwrap();
    let proxy = p.redis_proxy_addr().unwrap().to_string();
    let mut via = client(&proxy).await;
    let mut direct_agent = client(&local.addr).await;
    let mut direct_hub = client(&hub.addr).await;
    let agent_key = "app|resources-tree|agent-a_guestbook|1.8.3.gz";

    println!("value: {size} bytes, {gets} sequential GETs per path");
    let d = sequential(
        &mut direct_agent,
        "app|resources-tree|guestbook|1.8.3.gz",
        gets,
        size,
    )
    .await;
    let pr = sequential(&mut via, agent_key, gets, size).await;
    line("direct agent", &d);
    line("proxy agent", &pr);
    overhead("agent key", &pr, &d);
    let dh = sequential(&mut direct_hub, "cluster|info|x|1.8.3.gz", gets, size).await;
    let ph = sequential(&mut via, "cluster|info|x|1.8.3.gz", gets, size).await;
    line("direct hub", &dh);
    line("proxy hub", &ph);
    overhead("hub key", &ph, &dh);

    // one 25 MB resource tree
    let huge: Vec<u8> = (0..25 * 1024 * 1024u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 24) as u8)
        .collect();
    let _: () = l
        .set("app|resources-tree|huge|1.8.3.gz", huge.as_slice())
        .await
        .unwrap();
    let t = Instant::now();
    let v: Vec<u8> = direct_agent
        .get("app|resources-tree|huge|1.8.3.gz")
        .await
        .unwrap();
    let td = t.elapsed();
    assert_eq!(v.len(), huge.len());
    let t = Instant::now();
    let v: Vec<u8> = via
        .get("app|resources-tree|agent-a_huge|1.8.3.gz")
        .await
        .unwrap();
    let tp = t.elapsed();
    assert!(v == huge, "25 MB value unchanged");
    println!(
        "25 MB value: direct {:.1} ms, through the proxy {:.1} ms",
        td.as_secs_f64() * 1e3,
        tp.as_secs_f64() * 1e3
    );
}
