//! Throughput/latency/scale benchmark of the agent model over loopback mTLS.
//! `BENCH_AGENTS` (default 1000), `BENCH_EVENTS` (default 5000), `BENCH_HUB_BUFFER` (hub store
//! watch buffer, default 65536). Results: docs/perf/agent.md.
//!
//! Phase 0 measures the principal's memory per idle agent connection honestly: the agents run
//! in a child process (this binary re-executed with `BENCH_ROLE=agents`), the principal alone in
//! this one, and the principal process's VmRSS is read before and after they connect.
//!
//! `BENCH_OTLP=1`: OTLP tracing on (as `--otlp-address ... --otlp-insecure`), the spans sent to
//! an OTLP gRPC sink in a child process (`BENCH_ROLE=otlp-sink`) that counts them;
//! `BENCH_OTLP=down`: tracing on with nothing listening at the address (every export fails).
//! Unset: tracing off, as a principal or agent without `--otlp-address`.
//!
//! Like the `argocd-pull` binary, the benchmark runs on mimalloc (the system allocator cost a
//! third of the CPU per event here).

use std::sync::Arc;
use std::time::{Duration, Instant};

/// The allocator the `argocd-pull` binary ships with (crates/cli/src/main.rs; its build settings
/// come from `.cargo/config.toml`), so that the figures are the binary's, not the C library's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use argocd_pull_agent::local::LocalPki;

use argocd_pull_agent_core::Mode;
use argocd_pull_agent_core::auth::throwaway_jwt_key;
use argocd_pull_agent_core::metrics::Metrics;
use argocd_pull_agent_core::store::{Kind, MemStore, Store, StoreEvent};
use argocd_pull_principal::{Principal, PrincipalConfig};
use argocd_pull_spoke::{Agent, AgentConfig};
use futures::StreamExt;
use serde_json::json;

fn rss_kib() -> u64 {
    rss_kib_of("self")
}

fn rss_kib_of(pid: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap()
        .parse()
        .unwrap()
}

fn app(ns: &str, name: &str, rev: u64) -> serde_json::Value {
    json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
           "metadata": {"name": name, "namespace": ns},
           "spec": {"project": "default", "source": {"repoURL": "https://example.com/r.git", "path": "p", "targetRevision": rev.to_string()},
                    "destination": {"server": "https://kubernetes.default.svc", "namespace": "x"}}})
}

async fn principal(pki: &LocalPki, hub: &MemStore, addr: &str) -> Principal {
    let cfg = PrincipalConfig::new(
        addr.parse().unwrap(),
        pki.principal.clone(),
        throwaway_jwt_key(),
    );
    Principal::start(cfg, Arc::new(hub.clone()), Metrics::new("argocd_principal"))
        .await
        .unwrap()
}

/// Waits until `n` objects exist in `ns`, following one watch (no re-listing: listing a large
/// in-memory store under its lock was the benchmark's own biggest cost).
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

/// CPU time (user + system) this process has used so far, in seconds.
fn cpu_seconds() -> f64 {
    let s = std::fs::read_to_string("/proc/self/stat").unwrap();
    let rest = &s[s.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // fields 14 and 15 of stat (utime, stime) are 11 and 12 after the command
    let ticks: f64 = f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap();
    ticks / 100.0
}

fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    if std::env::var("BENCH_ROLE").as_deref() == Ok("agents") {
        rt.block_on(agents_child());
        return;
    }
    if std::env::var("BENCH_ROLE").as_deref() == Ok("otlp-sink") {
        rt.block_on(otlp::sink());
        return;
    }
    if std::env::var("BENCH_ROLE").as_deref() == Ok("otlp-nothing") {
        return;
    }
    let tracing = match std::env::var("BENCH_OTLP").as_deref() {
        Ok("1") => Some(rt.block_on(otlp::start(true))),
        Ok("down") => Some(rt.block_on(otlp::start(false))),
        _ => None,
    };
    rt.block_on(rss_phase());
    rt.block_on(run());
    if let Some((telemetry, mut sink, count)) = tracing {
        rt.block_on(telemetry.shutdown());
        let n = std::fs::read_to_string(count.path()).unwrap_or_default();
        println!("OTLP tracing on: spans received by the sink: {}", n.trim());
        let _ = sink.kill();
        let _ = sink.wait();
    }
}

/// `BENCH_OTLP=1`: the pipeline of `--otlp-address`, and the receiving end in another process.
mod otlp {
    use std::sync::atomic::{AtomicU64, Ordering};

    use argocd_pull_ops::otel::{OtlpSettings, Telemetry};
    use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
        TraceService, TraceServiceServer,
    };
    use opentelemetry_proto::tonic::collector::trace::v1::{
        ExportTraceServiceRequest, ExportTraceServiceResponse,
    };

    /// Starts the sink process (`sink`; else a process that listens nowhere) and the exporter
    /// pointing at it.
    pub async fn start(sink: bool) -> (Telemetry, std::process::Child, tempfile::NamedTempFile) {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let count = tempfile::NamedTempFile::new().unwrap();
        let role = if sink { "otlp-sink" } else { "otlp-nothing" };
        let sink = std::process::Command::new(std::env::current_exe().unwrap())
            .env("BENCH_ROLE", role)
            .env("BENCH_ADDR", format!("127.0.0.1:{port}"))
            .env("BENCH_SINK_COUNT", count.path())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let t = Telemetry::start(OtlpSettings {
            address: format!("127.0.0.1:{port}"),
            insecure: true,
            service_name: "bench".into(),
            env_prefix: "BENCH",
        })
        .unwrap();
        argocd_pull_ops::logging::LogArgs {
            log_level: Some("warn".into()),
            log_format: None,
        }
        .init_with_layer(Some(t.layer()))
        .unwrap();
        (t, sink, count)
    }

    struct Sink {
        n: AtomicU64,
        path: String,
    }

    #[tonic::async_trait]
    impl TraceService for Sink {
        async fn export(
            &self,
            req: tonic::Request<ExportTraceServiceRequest>,
        ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
            let k: usize = req
                .get_ref()
                .resource_spans
                .iter()
                .flat_map(|r| &r.scope_spans)
                .map(|s| s.spans.len())
                .sum();
            let n = self.n.fetch_add(k as u64, Ordering::Relaxed) + k as u64;
            let _ = std::fs::write(&self.path, n.to_string());
            Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
        }
    }

    /// Child process: an OTLP gRPC receiver on `BENCH_ADDR` counting spans into
    /// `BENCH_SINK_COUNT`.
    pub async fn sink() {
        let addr = std::env::var("BENCH_ADDR").unwrap().parse().unwrap();
        let sink = Sink {
            n: AtomicU64::new(0),
            path: std::env::var("BENCH_SINK_COUNT").unwrap(),
        };
        tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(sink))
            .serve(addr)
            .await
            .unwrap();
    }
}

/// Child process: connects `BENCH_AGENTS` idle managed agents to `BENCH_ADDR`, with the
/// certificates in `BENCH_PKI_DIR`, and stays until killed.
async fn agents_child() {
    let n: usize = std::env::var("BENCH_AGENTS").unwrap().parse().unwrap();
    let addr = std::env::var("BENCH_ADDR").unwrap().parse().unwrap();
    let dir = std::path::PathBuf::from(std::env::var("BENCH_PKI_DIR").unwrap());
    let ca = std::fs::read(dir.join("ca.crt")).unwrap();
    let mut agents = Vec::new();
    for i in 0..n {
        let m = argocd_pull_agent_core::tls::TlsMaterial {
            cert_pem: std::fs::read(dir.join(format!("a{i}.crt"))).unwrap(),
            key_pem: std::fs::read(dir.join(format!("a{i}.key"))).unwrap(),
            ca_pem: ca.clone(),
        };
        let mut c = AgentConfig::new(addr, m, Mode::Managed);
        c.reconnect_max = Duration::from_secs(2);
        let s = MemStore::with_capacity(16);
        agents.push(
            Agent::start(c, Arc::new(s), Metrics::new("argocd_agent"))
                .await
                .unwrap(),
        );
    }
    std::future::pending::<()>().await;
}

async fn rss_phase() {
    let n: usize = std::env::var("BENCH_RSS_AGENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    if n == 0 {
        return;
    }
    let pki = LocalPki::new().unwrap();
    let _ = throwaway_jwt_key();
    let dir = tempfile::tempdir().unwrap();
    for i in 0..n {
        let m = pki.agent(&format!("a{i}")).unwrap();
        std::fs::write(dir.path().join(format!("a{i}.crt")), &m.cert_pem).unwrap();
        std::fs::write(dir.path().join(format!("a{i}.key")), &m.key_pem).unwrap();
        if i == 0 {
            std::fs::write(dir.path().join("ca.crt"), &m.ca_pem).unwrap();
        }
    }
    let hub = MemStore::new();
    let p = principal(&pki, &hub, "127.0.0.1:0").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = rss_kib();
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .env("BENCH_ROLE", "agents")
        .env("BENCH_AGENTS", n.to_string())
        .env("BENCH_ADDR", p.local_addr().to_string())
        .env("BENCH_PKI_DIR", dir.path())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while p.connected_agents().len() < n {
        assert!(
            t.elapsed() < Duration::from_secs(300),
            "agents did not connect"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let connected = t.elapsed();
    // idle: let handshakes, auth and resync traffic settle
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = rss_kib();
    let child_rss = rss_kib_of(&child.id().to_string());
    println!(
        "principal process alone: {n} idle agents (in a child process) connected in {connected:?}; \
         principal VmRSS {before} KiB -> {after} KiB: {:.1} KiB per idle connection (agents' process: {child_rss} KiB)",
        (after.saturating_sub(before)) as f64 / n as f64
    );
    let _ = child.kill();
    let _ = child.wait();
    p.shutdown().await;
}

async fn run() {
    let n_agents: usize = std::env::var("BENCH_AGENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let n_events: u64 = std::env::var("BENCH_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5000);
    let pki = LocalPki::new().unwrap();
    let _ = throwaway_jwt_key();
    let hub_buffer: usize = std::env::var("BENCH_HUB_BUFFER")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(65536);
    let hub = MemStore::with_capacity(hub_buffer);
    let p = principal(&pki, &hub, "127.0.0.1:0").await;
    let addr = p.local_addr();
    let mats: Vec<_> = (0..n_agents)
        .map(|i| pki.agent(&format!("a{i}")).unwrap())
        .collect();
    let rss0 = rss_kib();
    let t = Instant::now();
    let mut agents: Vec<(MemStore, Agent)> = Vec::new();
    for (i, m) in mats.into_iter().enumerate() {
        let s = MemStore::new();
        let mut c = AgentConfig::new(addr, m, Mode::Managed);
        c.reconnect_max = Duration::from_secs(2);
        let _ = i;
        let a = Agent::start(c, Arc::new(s.clone()), Metrics::new("argocd_agent"))
            .await
            .unwrap();
        agents.push((s, a));
    }
    for (_, a) in &agents {
        a.wait_connected(0).await;
    }
    let connect = t.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss1 = rss_kib();
    println!(
        "agents connected: {n_agents} in {connect:?}; process RSS {rss0} KiB -> {rss1} KiB: {:.1} KiB per connection (principal + agent side together)",
        (rss1 - rss0) as f64 / n_agents as f64
    );
    assert_eq!(p.connected_agents().len(), n_agents);

    // single agent throughput: n_events creates for a0
    let t = Instant::now();
    for i in 0..n_events {
        hub.create_only(Kind::Application, app("a0", &format!("app{i}"), 1))
            .await
            .unwrap();
    }
    until_count(&agents[0].0, "argocd", n_events as usize).await;
    let d = t.elapsed();
    println!(
        "single agent: {n_events} creates delivered in {d:?}: {:.0} events/s",
        n_events as f64 / d.as_secs_f64()
    );

    // aggregate: 100 agents (or fewer) x events
    let k = n_agents.min(100);
    let per = (n_events / 10).max(1);
    let t = Instant::now();
    let cpu0 = cpu_seconds();
    for j in 0..per {
        for i in 1..=k.min(n_agents - 1) {
            hub.create_only(
                Kind::Application,
                app(&format!("a{i}"), &format!("b{j}"), 1),
            )
            .await
            .unwrap();
        }
    }
    let writes = t.elapsed();
    for (s, _) in agents.iter().skip(1).take(k.min(n_agents - 1)) {
        until_count(s, "argocd", per as usize).await;
    }
    let d = t.elapsed();
    let total = per as usize * k.min(n_agents - 1);
    let cpu = cpu_seconds() - cpu0;
    println!(
        "aggregate: {total} creates over {} agents in {d:?} (hub writes done after {writes:?}): \
         {:.0} events/s; CPU {cpu:.1} s (all of principal, agents, stores, TLS): {:.0} events per CPU-second",
        k.min(n_agents - 1),
        total as f64 / d.as_secs_f64(),
        total as f64 / cpu
    );

    // latency: sequential updates of one app on a1, hub write -> agent watch event
    let mut w = agents[1].0.watch(Kind::Application, Some("argocd"));
    let _ = w.next().await; // Restarted
    let mut lats = Vec::new();
    for r in 2..502u64 {
        let rs = r.to_string();
        let t = Instant::now();
        hub.merge_patch(
            Kind::Application,
            "a1",
            "b0",
            json!({"spec": {"source": {"targetRevision": r.to_string()}}}),
        )
        .await
        .unwrap();
        loop {
            match w.next().await {
                Some(Ok(StoreEvent::Applied(o)))
                    if o["metadata"]["name"] == "b0"
                        && o["spec"]["source"]["targetRevision"] == rs.as_str() =>
                {
                    break;
                }
                _ => {}
            }
        }
        lats.push(t.elapsed());
    }
    lats.sort();
    println!(
        "hub->agent latency over 500 updates: p50 {:?} p99 {:?} max {:?}",
        lats[250], lats[495], lats[499]
    );

    // principal restart: time for all agents to reconnect and resync
    let conns: Vec<u64> = agents.iter().map(|(_, a)| a.connections()).collect();
    p.shutdown().await;
    let t = Instant::now();
    let p2 = principal(&pki, &hub, &addr.to_string()).await;
    for ((_, a), n) in agents.iter().zip(conns) {
        a.wait_connected(n).await;
    }
    let reconnect = t.elapsed();
    while !(0..n_agents).all(|i| p2.agent_idle(&format!("a{i}")))
        || !agents.iter().all(|(_, a)| a.idle())
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!(
        "principal restart: {n_agents} agents reconnected in {reconnect:?}, resynced and idle in {:?}",
        t.elapsed()
    );

    // zero lost events: every hub object present on its agent with the hub's spec
    let mut lost = 0;
    for (i, (s, _)) in agents.iter().enumerate() {
        let want = hub
            .list(Kind::Application, Some(&format!("a{i}")))
            .await
            .unwrap();
        for h in want {
            let name = h["metadata"]["name"].as_str().unwrap();
            match s.get(Kind::Application, "argocd", name).await.unwrap() {
                Some(l) if l["spec"]["source"] == h["spec"]["source"] => {}
                _ => lost += 1,
            }
        }
    }
    let m = p2.metrics();
    println!(
        "lost events: {lost}; failed: {}",
        Metrics::total(&m.events_failed, "")
    );
    assert_eq!(lost, 0);
    println!("process RSS at the end: {} KiB", rss_kib());
}
