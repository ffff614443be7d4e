//! Principal memory with a fleet: `BENCH_AGENTS` (default 1000) managed agents connected, each
//! with `BENCH_APPS` (default 100) Applications on the hub, all delivered. The principal runs in
//! its own process (this binary re-executed), so its peak RSS (`VmHWM`) is its own; a second
//! child holds only the same hub store, to separate the hub's data (the API server's, in a real
//! deployment) from what the principal adds.
//! `cargo bench -p argocd-pull-agent --bench principal_memory`. Results: docs/performance.md.

use std::io::{BufRead, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use argocd_pull_agent::local::LocalPki;

use argocd_pull_agent_core::Mode;
use argocd_pull_agent_core::auth::throwaway_jwt_key;
use argocd_pull_agent_core::metrics::Metrics;
use argocd_pull_agent_core::store::{Kind, MemStore, Store};
use argocd_pull_agent_core::tls::TlsMaterial;
use argocd_pull_principal::{Principal, PrincipalConfig};
use argocd_pull_spoke::{Agent, AgentConfig};
use serde_json::json;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn app(ns: &str, i: usize) -> serde_json::Value {
    json!({
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": format!("app-{i}"), "namespace": ns,
                     "labels": {"team": "platform", "app.kubernetes.io/part-of": "fleet"},
                     "annotations": {"argocd.argoproj.io/sync-wave": "1"}},
        "spec": {"project": "default",
                 "source": {"repoURL": "https://github.com/argoproj/argocd-example-apps.git",
                            "path": format!("guestbook-{i}"), "targetRevision": "HEAD"},
                 "destination": {"server": "https://kubernetes.default.svc", "namespace": format!("guestbook-{i}")},
                 "syncPolicy": {"automated": {"prune": true, "selfHeal": true},
                                "syncOptions": ["CreateNamespace=true"]}}
    })
}

async fn hub(agents: usize, apps: usize) -> MemStore {
    let hub = MemStore::new();
    for a in 0..agents {
        for i in 0..apps {
            hub.create(Kind::Application, app(&format!("agent-{a}"), i))
                .await
                .unwrap();
        }
    }
    hub
}

fn rss_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap()
}

/// The child: the hub store (and the principal unless `store-only`), then waits for stdin EOF.
async fn child(role: &str) {
    let (agents, apps) = (env("BENCH_AGENTS", 1000), env("BENCH_APPS", 100));
    let hub = hub(agents, apps).await;
    let mut principal = None;
    let mut addr = String::from("-");
    if role == "principal" {
        let dir = std::path::PathBuf::from(std::env::var("BENCH_DIR").unwrap());
        let read = |f: &str| std::fs::read(dir.join(f)).unwrap();
        let tls = TlsMaterial {
            cert_pem: read("tls.crt"),
            key_pem: read("tls.key"),
            ca_pem: read("ca.crt"),
        };
        let jwt = String::from_utf8(read("jwt.key")).unwrap();
        let cfg = PrincipalConfig::new("127.0.0.1:0".parse().unwrap(), tls, jwt);
        let p = Principal::start(cfg, Arc::new(hub.clone()), Metrics::new("argocd_principal"))
            .await
            .unwrap();
        addr = p.local_addr().to_string();
        principal = Some(p);
    }
    println!("ready {addr}");
    std::io::stdout().flush().unwrap();
    // stdin: `dump <agent>…` prints the principal's state of those agents, then `end`; EOF stops
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    std::thread::spawn(move || {
        let mut s = String::new();
        while std::io::stdin().read_line(&mut s).unwrap_or(0) > 0 {
            let _ = tx.send(std::mem::take(&mut s));
        }
    });
    while let Some(line) = rx.recv().await {
        if let (Some(p), Some(names)) = (&principal, line.trim().strip_prefix("dump ")) {
            for n in names.split_whitespace() {
                println!("{}", p.agent_debug(n));
            }
        }
        println!("end");
        std::io::stdout().flush().unwrap();
    }
    if let Some(p) = principal {
        p.shutdown().await;
    }
}

fn spawn(
    role: &str,
    dir: &std::path::Path,
) -> (
    std::process::Child,
    String,
    std::io::BufReader<std::process::ChildStdout>,
) {
    let mut c = Command::new(std::env::current_exe().unwrap())
        .env("BENCH_ROLE", role)
        .env("BENCH_DIR", dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    let mut out = std::io::BufReader::new(c.stdout.take().unwrap());
    out.read_line(&mut line).unwrap();
    let addr = line.trim().strip_prefix("ready ").unwrap().to_string();
    (c, addr, out)
}

fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    match std::env::var("BENCH_ROLE") {
        Ok(role) => rt.block_on(child(&role)),
        Err(_) => rt.block_on(drive()),
    }
}

async fn drive() {
    let (n, apps) = (env("BENCH_AGENTS", 1000), env("BENCH_APPS", 100));
    let pki = LocalPki::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    for (f, b) in [
        ("tls.crt", &pki.principal.cert_pem),
        ("tls.key", &pki.principal.key_pem),
        ("ca.crt", &pki.principal.ca_pem),
    ] {
        std::fs::write(dir.path().join(f), b).unwrap();
    }
    std::fs::write(dir.path().join("jwt.key"), throwaway_jwt_key()).unwrap();

    // the hub's data alone
    let (mut store_only, _, _) = spawn("store-only", dir.path());
    let store_kib = rss_kib(store_only.id(), "VmRSS:");
    drop(store_only.stdin.take());
    store_only.wait().unwrap();

    let (mut child, addr, mut child_out) = spawn("principal", dir.path());
    let pid = child.id();
    let idle_kib = rss_kib(pid, "VmRSS:");
    let started = Instant::now();
    let mut agents: Vec<(Agent, MemStore)> = Vec::new();
    for i in 0..n {
        let c = AgentConfig::new(
            addr.parse().unwrap(),
            pki.agent(&format!("agent-{i}")).unwrap(),
            Mode::Managed,
        );
        let store = MemStore::with_capacity(apps);
        let a = Agent::start(c, Arc::new(store.clone()), Metrics::new("argocd_agent"))
            .await
            .unwrap();
        agents.push((a, store));
    }
    // every agent holds its apps (waited on the stores, checked every 100 ms: a progress read)
    let mut tick = 0u64;
    loop {
        let mut have = 0;
        for (_, s) in &agents {
            have += s
                .list(Kind::Application, Some("argocd"))
                .await
                .unwrap()
                .len();
        }
        if have == n * apps {
            break;
        }
        tick += 1;
        if tick.is_multiple_of(300) {
            let connected = agents.iter().filter(|(a, _)| a.is_connected()).count();
            eprintln!(
                "t={:.0}s delivered={have}/{} agents connected={connected}/{n}",
                started.elapsed().as_secs_f64(),
                n * apps
            );
        }
        if started.elapsed() > Duration::from_secs(600) {
            let mut stuck = Vec::new();
            for (i, (a, s)) in agents.iter().enumerate() {
                let got = s
                    .list(Kind::Application, Some("argocd"))
                    .await
                    .unwrap()
                    .len();
                if got < apps {
                    eprintln!(
                        "agent-{i}: {got}/{apps} connected={} connections={} idle={} last_error={:?}",
                        a.is_connected(),
                        a.connections(),
                        a.idle(),
                        a.last_error()
                    );
                    stuck.push(format!("agent-{i}"));
                }
            }
            // the principal's side of the same agents
            let stdin = child.stdin.as_mut().unwrap();
            writeln!(stdin, "dump {}", stuck.join(" ")).unwrap();
            stdin.flush().unwrap();
            let mut line = String::new();
            while child_out.read_line(&mut line).unwrap_or(0) > 0 && line.trim() != "end" {
                eprint!("principal: {line}");
                line.clear();
            }
            panic!("only {have} of {} delivered", n * apps);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let delivered = started.elapsed();
    // steady state: every queue drained
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss = rss_kib(pid, "VmRSS:");
    // the principal's state of a few agents once delivered (every queue should be empty)
    {
        let stdin = child.stdin.as_mut().unwrap();
        writeln!(stdin, "dump agent-0 agent-{} agent-{}", n / 2, n - 1).unwrap();
        stdin.flush().unwrap();
        let mut line = String::new();
        while child_out.read_line(&mut line).unwrap_or(0) > 0 && line.trim() != "end" {
            eprint!("principal: {line}");
            line.clear();
        }
    }
    let hwm = rss_kib(pid, "VmHWM:");
    println!(
        "agents={n} apps_per_agent={apps} delivered_s={:.1} principal_rss_mib={:.0} principal_peak_mib={:.0} \
         idle_with_hub_mib={:.0} hub_store_alone_mib={:.0} principal_share_peak_mib={:.0}",
        delivered.as_secs_f64(),
        rss as f64 / 1024.0,
        hwm as f64 / 1024.0,
        idle_kib as f64 / 1024.0,
        store_kib as f64 / 1024.0,
        hwm.saturating_sub(store_kib) as f64 / 1024.0,
    );
    drop(child.stdin.take());
    child.wait().unwrap();
    for (a, _) in agents {
        a.shutdown().await;
    }
}
