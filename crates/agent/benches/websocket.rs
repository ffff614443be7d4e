//! Events per second through one agent over WebSocket (`--enable-websocket`) against native gRPC,
//! on one principal with `--enable-websocket` over loopback mTLS (one listener serves both).
//! `BENCH_EVENTS` (default 5000) creates per run, `BENCH_ROUNDS` (default 3) alternating rounds
//! per transport; then hub → agent latency over 300 sequential updates. Results:
//! docs/perf/websocket.md.

use std::sync::Arc;
use std::time::{Duration, Instant};

use argocd_pull_agent::Mode;
use argocd_pull_agent::agent::{Agent, AgentConfig};
use argocd_pull_agent::local::{LocalPki, throwaway_jwt_key};
use argocd_pull_agent::metrics::Metrics;
use argocd_pull_agent::principal::{Principal, PrincipalConfig};
use argocd_pull_agent::store::{Kind, MemStore, Store, StoreEvent};
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
            Some(Ok(StoreEvent::Restarted(l))) => seen = l.iter().map(name).collect(),
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
    let hub = MemStore::with_capacity(65536);
    let mut cfg = PrincipalConfig::new(
        "127.0.0.1:0".parse().unwrap(),
        pki.principal.clone(),
        throwaway_jwt_key(),
    );
    cfg.enable_websocket = true;
    let p: Principal =
        Principal::start(cfg, Arc::new(hub.clone()), Metrics::new("argocd_principal"))
            .await
            .unwrap();
    let mut agents = Vec::new();
    for (name, ws) in [("native", false), ("websocket", true)] {
        let mut c = AgentConfig::new(p.local_addr(), pki.agent(name).unwrap(), Mode::Managed);
        c.enable_websocket = ws;
        let s = MemStore::with_capacity(65536);
        let a = Agent::start(c, Arc::new(s.clone()), Metrics::new("argocd_agent"))
            .await
            .unwrap();
        a.wait_connected(0).await;
        agents.push((name, s, a));
    }
    let mut rates: Vec<(&str, Vec<f64>)> = vec![("native", vec![]), ("websocket", vec![])];
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
            rates[i].1.push(rate);
        }
    }
    for (name, mut v) in rates {
        v.sort_by(f64::total_cmp);
        println!(
            "{name}: median {:.0} events/s, best {:.0} over {} rounds",
            v[v.len() / 2],
            v[v.len() - 1],
            v.len()
        );
    }
    for (name, spoke, _) in &agents {
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
    for (_, _, a) in agents {
        a.shutdown().await;
    }
    tokio::time::sleep(Duration::from_millis(10)).await;
    p.shutdown().await;
}
