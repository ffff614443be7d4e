//! Reconnect storm: `BENCH_AGENTS` (default 1000) managed agents connected to a principal; the
//! principal stops and a new one starts on the same address; how fast do the agents come back,
//! and how many connect per 100 ms (the load a restarted principal sees)?
//! `cargo bench -p argocd-pull-agent --bench reconnect`. Results: docs/reliability.md.

use std::sync::Arc;
use std::time::{Duration, Instant};

use argocd_pull_agent::local::LocalPki;

use argocd_pull_agent_core::Mode;
use argocd_pull_agent_core::auth::throwaway_jwt_key;
use argocd_pull_agent_core::metrics::Metrics;
use argocd_pull_agent_core::store::MemStore;
use argocd_pull_principal::{Principal, PrincipalConfig};
use argocd_pull_spoke::{Agent, AgentConfig};

async fn principal(pki: &LocalPki, jwt: &str, addr: &str) -> Principal {
    let cfg = PrincipalConfig::new(addr.parse().unwrap(), pki.principal.clone(), jwt.into());
    Principal::start(
        cfg,
        Arc::new(MemStore::new()),
        Metrics::new("argocd_principal"),
    )
    .await
    .unwrap()
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
    let n: usize = std::env::var("BENCH_AGENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let pki = LocalPki::new().unwrap();
    let jwt = throwaway_jwt_key();
    let p = principal(&pki, &jwt, "127.0.0.1:0").await;
    let addr = p.local_addr();
    let mut agents: Vec<Agent> = Vec::new();
    for i in 0..n {
        // the product's defaults: reconnect_min 100 ms, reconnect_max 30 s
        let c = AgentConfig::new(addr, pki.agent(&format!("a{i}")).unwrap(), Mode::Managed);
        agents.push(
            Agent::start(
                c,
                Arc::new(MemStore::with_capacity(16)),
                Metrics::new("argocd_agent"),
            )
            .await
            .unwrap(),
        );
    }
    let agents = Arc::new(agents);
    for a in agents.iter() {
        tokio::time::timeout(Duration::from_secs(120), a.wait_connected(0))
            .await
            .expect("connected");
    }
    // the streams must have lived (> 10 s) for the agents to treat the loss as a restart
    tokio::time::sleep(Duration::from_secs(11)).await;
    let before: Vec<u64> = agents.iter().map(|a| a.connections()).collect();
    p.shutdown().await;
    let stopped = Instant::now();
    let p2 = principal(&pki, &jwt, &addr.to_string()).await;
    let mut waits = Vec::new();
    for (a, n0) in agents.iter().zip(before) {
        waits.push(async move {
            tokio::time::timeout(Duration::from_secs(120), a.wait_connected(n0))
                .await
                .expect("reconnected");
            stopped.elapsed()
        });
    }
    let mut times: Vec<Duration> = futures::future::join_all(waits).await;
    times.sort();
    let mut buckets = std::collections::BTreeMap::<u64, usize>::new();
    for t in &times {
        *buckets.entry(t.as_millis() as u64 / 100).or_default() += 1;
    }
    let peak = buckets.values().max().copied().unwrap_or(0);
    let pct = |q: f64| times[((times.len() as f64 * q) as usize).min(times.len() - 1)];
    println!(
        "agents={n} all_back_s={:.2} p50_s={:.2} p90_s={:.2} peak_per_100ms={peak} busiest_100ms_share={:.1}%",
        times.last().unwrap().as_secs_f64(),
        pct(0.5).as_secs_f64(),
        pct(0.9).as_secs_f64(),
        100.0 * peak as f64 / n as f64
    );
    for a in Arc::try_unwrap(agents).ok().unwrap() {
        a.shutdown().await;
    }
    p2.shutdown().await;
}
