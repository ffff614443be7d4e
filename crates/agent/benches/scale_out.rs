//! Active/active principal replicas at fleet scale (issue 29): `BENCH_AGENTS` (default 10,000)
//! managed agents with real TLS gRPC streams, `BENCH_APPS` (default 10) Applications each, reach
//! the replicas through one round-robin TCP balancer (a Service). Run with 1 replica and then
//! with `BENCH_REPLICAS` (default 3) side by side, so the gain is a ratio:
//!
//! * connected and resynced, every Application delivered, each replica's share of the agents;
//! * each replica's RSS (its own process: this binary re-executed) idle, with its agents, and at
//!   peak, against a process holding only the same hub store (the API server's data in a real
//!   deployment);
//! * an update of every Application, delivered (events/s), before and after one replica is
//!   SIGKILLed; the killed replica's agents back and resynced, and a new Application reaching
//!   every agent afterwards: nothing lost, nothing re-created.
//!
//! The replicas share shard Leases on an embedded hub served over HTTP; each holds the hub's
//! Applications in its own store (as each would watch the API server). The agents live in
//! processes of `BENCH_PER_HOST` (5,000) each, each with its own balancer (a process may hold
//! 20,000 descriptors here, and an agent takes three with the balancer; more processes of fewer
//! agents cost more CPU than two cores have), started at `BENCH_RATE` agents a second
//! (default 2,000).
//! Replicas and agents run on the allocator the `argocd-pull` binary ships with (mimalloc, built
//! with the settings of `.cargo/config.toml`), the replicas with `MIMALLOC_PURGE_DELAY=0` as the
//! principal's chart sets it, so that memory figures are the deployed binary's.
//! `BENCH_WINDOW`: the replicas' `--max-events-in-flight` (default 32).
//! `BENCH_CONCURRENCY`: the replicas' handlers of received events per agent (default 64).
//! `BENCH_HUB=served`: the Applications in the driver's embedded API server, watched and written
//! by the replicas over HTTP (each replica's memory is then its own; slower on one machine).
//! `cargo bench -p argocd-pull-agent --bench scale_out`. Results: docs/performance.md.

use std::io::{BufRead, Write};
use std::net::SocketAddr;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use argocd_pull_agent::local::LocalPki;

use argocd_pull_agent_core::Mode;
use argocd_pull_agent_core::auth::throwaway_jwt_key;
use argocd_pull_agent_core::metrics::Metrics;
use argocd_pull_agent_core::store::{Kind, KubeStore, MemStore, Store};
use argocd_pull_agent_core::tls::TlsMaterial;
use argocd_pull_principal::PrincipalConfig;
use argocd_pull_principal::ha::active_active::{self, ActiveActive};
use argocd_pull_principal::ha::{Replica, Role};
use argocd_pull_spoke::{Agent, AgentConfig};
use serde_json::json;

/// The `argocd-pull` binary's allocator (crates/cli/src/main.rs).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn app(ns: &str, name: &str) -> serde_json::Value {
    json!({
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": name, "namespace": ns,
                     "labels": {"team": "platform", "app.kubernetes.io/part-of": "fleet"}},
        "spec": {"project": "default",
                 "source": {"repoURL": "https://github.com/argoproj/argocd-example-apps.git",
                            "path": format!("guestbook/{name}"), "targetRevision": "HEAD"},
                 "destination": {"server": "https://kubernetes.default.svc", "namespace": name},
                 "syncPolicy": {"automated": {"prune": true, "selfHeal": true}}}
    })
}

async fn hub(agents: usize, apps: usize) -> MemStore {
    let hub = MemStore::new();
    fill(&hub, agents, apps).await;
    hub
}

/// `apps` Applications for each of `agents` agents, 64 writes at a time.
async fn fill(hub: &dyn Store, agents: usize, apps: usize) {
    use futures::StreamExt;
    for a in 0..agents {
        hub.ensure_namespace(&format!("agent-{a}")).await.unwrap();
    }
    futures::stream::iter((0..agents).flat_map(|a| (0..apps).map(move |i| (a, i))))
        .for_each_concurrent(64, |(a, i)| async move {
            hub.create(
                Kind::Application,
                app(&format!("agent-{a}"), &format!("app-{i}")),
            )
            .await
            .unwrap();
        })
        .await;
}

/// `touch <revision>`: every Application's targetRevision; `add <name>`: one more Application
/// per agent.
async fn write_hub(hub: &dyn Store, cmd: &str, agents: usize, apps: usize) {
    use futures::StreamExt;
    if let Some(rev) = cmd.strip_prefix("touch ") {
        futures::stream::iter((0..agents).flat_map(|a| (0..apps).map(move |i| (a, i))))
            .for_each_concurrent(64, |(a, i)| async move {
                hub.merge_patch(
                    Kind::Application,
                    &format!("agent-{a}"),
                    &format!("app-{i}"),
                    json!({"spec": {"source": {"targetRevision": rev}}}),
                )
                .await
                .unwrap();
            })
            .await;
    } else if let Some(name) = cmd.strip_prefix("add ") {
        futures::stream::iter(0..agents)
            .for_each_concurrent(64, |a| async move {
                hub.create(Kind::Application, app(&format!("agent-{a}"), name))
                    .await
                    .unwrap();
            })
            .await;
    }
}

/// `BENCH_HUB=served`: the hub's Applications live in the driver's embedded API server, which
/// the replicas watch and write over HTTP as they would a real one; a replica's memory is then
/// its own, with nothing to subtract.
fn hub_served() -> bool {
    std::env::var("BENCH_HUB").as_deref() == Ok("served")
}

fn status_kib(pid: &str, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

/// One metric's value, read as a scrape of `/metrics` reads it (the text rendered in chunks).
fn metric(m: &Metrics, name: &str) -> f64 {
    argocd_pull_ops::metrics::render_chunks(&m.registry)
        .iter()
        .flat_map(|c| std::str::from_utf8(c).unwrap().lines())
        .filter_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse::<f64>().ok())
        .sum()
}

/// A child: one replica (`BENCH_ROLE=replica`) or only the hub store (`store-only`). Commands on
/// stdin, each answered by one line: `stats`, `touch <revision>` (every Application's
/// targetRevision), `add <name>` (one more Application per agent); EOF stops it (SIGTERM-like).
async fn child(role: &str) {
    let (agents, apps) = (env("BENCH_AGENTS", 10_000), env("BENCH_APPS", 10));
    let hub = match hub_served() {
        true => None,
        false => Some(hub(agents, apps).await),
    };
    let metrics = Metrics::new("argocd_principal");
    let token = argocd_pull_ops::CancellationToken::new();
    let mut run = None;
    if role == "replica" {
        let dir = std::path::PathBuf::from(std::env::var("BENCH_DIR").unwrap());
        let read = |f: &str| std::fs::read(dir.join(f)).unwrap();
        let tls = TlsMaterial {
            cert_pem: read("tls.crt"),
            key_pem: read("tls.key"),
            ca_pem: read("ca.crt"),
        };
        let jwt = String::from_utf8(read("jwt.key")).unwrap();
        let i = env("BENCH_INDEX", 0);
        let host = format!("127.0.0.{}", i + 2);
        let mut cfg = PrincipalConfig::new(
            format!("{host}:{}", env("BENCH_GRPC_PORT", 0))
                .parse()
                .unwrap(),
            tls,
            jwt,
        );
        cfg.namespace = "argocd".into();
        // `BENCH_WINDOW`: the replicas' --max-events-in-flight
        cfg.max_in_flight = env("BENCH_WINDOW", cfg.max_in_flight);
        // `BENCH_CONCURRENCY`: the replicas' handlers per agent (`--event-processors`)
        cfg.concurrency = env("BENCH_CONCURRENCY", cfg.concurrency);
        let aa = ActiveActive::new(
            "argocd-agent-principal",
            "argocd",
            &format!("principal-{i}"),
            &host,
            Duration::from_secs(3),
            32,
            env("BENCH_REPLICA_PORT", 0) as u16,
        )
        .unwrap();
        let kc = kube::config::Kubeconfig::read_from(dir.join("hub.kubeconfig")).unwrap();
        let kcfg =
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .unwrap();
        let client = kube::Client::try_from(kcfg.clone()).unwrap();
        let store: Arc<dyn Store> = match &hub {
            Some(h) => Arc::new(h.clone()),
            None => Arc::new(KubeStore::new(client.clone())),
        };
        let deps = Replica {
            client,
            store,
            metrics: metrics.clone(),
            role: tokio::sync::watch::channel(Role::Recovering).0,
            tls: None,
            lease_config: Some(kcfg),
        };
        run = Some(tokio::spawn(active_active::run(
            aa,
            cfg,
            deps,
            token.clone(),
        )));
    }
    println!("ready");
    std::io::stdout().flush().unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    std::thread::spawn(move || {
        let mut s = String::new();
        while std::io::stdin().read_line(&mut s).unwrap_or(0) > 0 {
            let _ = tx.send(std::mem::take(&mut s));
        }
    });
    while let Some(line) = rx.recv().await {
        let line = line.trim();
        if line == "stats" {
            println!(
                "stats {} {} {} {} {} {}",
                metrics.connected_agents.get(),
                metric(&metrics, "argocd_principal_ha_shards_held"),
                status_kib("self", "VmRSS:"),
                status_kib("self", "VmHWM:"),
                metric(
                    &metrics,
                    "argocd_principal_ha_streams_forwarded_total{call=\"subscribe\"}"
                ),
                metrics.events_resent.get(),
            );
        } else if line.starts_with("touch ") || line.starts_with("add ") {
            // with the hub served, the driver writes it once
            if let Some(hub) = &hub {
                write_hub(hub, line, agents, apps).await;
            }
            println!("done");
        }
        std::io::stdout().flush().unwrap();
    }
    token.cancel();
    if let Some(r) = run {
        let _ = r.await;
    }
}

struct Proc {
    child: Child,
    out: std::io::BufReader<ChildStdout>,
}

impl Proc {
    fn spawn(role: &str, dir: &std::path::Path, vars: &[(&str, String)]) -> Proc {
        // `BENCH_REPLICA_WRAPPER`: a command the replicas run under, e.g. `heaptrack -o /tmp/r.%p`
        let wrapper = std::env::var("BENCH_REPLICA_WRAPPER").unwrap_or_default();
        let mut words = wrapper.split_whitespace().filter(|_| role == "replica");
        let mut cmd = match words.next() {
            Some(w) => {
                let mut c = Command::new(w);
                c.args(words).arg(std::env::current_exe().unwrap());
                c
            }
            None => Command::new(std::env::current_exe().unwrap()),
        };
        if role == "replica" && std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
            // as the principal's chart runs it (`principal.allocatorPurgeDelay`)
            cmd.env("MIMALLOC_PURGE_DELAY", "0");
        }
        cmd.env("BENCH_ROLE", role)
            .env("BENCH_DIR", dir)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        for (k, v) in vars {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "ready", "{role} started");
        Proc { child, out }
    }

    fn send(&mut self, cmd: &str) {
        let stdin = self.child.stdin.as_mut().unwrap();
        writeln!(stdin, "{cmd}").unwrap();
        stdin.flush().unwrap();
    }

    fn answer(&mut self) -> String {
        let mut line = String::new();
        self.out.read_line(&mut line).unwrap();
        line.trim().to_string()
    }

    fn ask(&mut self, cmd: &str) -> String {
        self.send(cmd);
        self.answer()
    }

    /// connected agents, shards held, RSS and peak (KiB), subscribes forwarded, events resent
    /// for want of an ACK
    fn stats(&mut self) -> (i64, f64, u64, u64, f64, u64) {
        let s = self.ask("stats");
        let f: Vec<&str> = s.split_whitespace().skip(1).collect();
        (
            f[0].parse().unwrap(),
            f[1].parse().unwrap(),
            f[2].parse().unwrap(),
            f[3].parse().unwrap(),
            f[4].parse().unwrap(),
            f[5].parse().unwrap(),
        )
    }

    fn stop(mut self) {
        drop(self.child.stdin.take());
        self.child.wait().unwrap();
    }
}

fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    match std::env::var("BENCH_ROLE").as_deref() {
        Ok("agents") => rt.block_on(agent_host()),
        Ok(role) => rt.block_on(child(role)),
        Err(_) => rt.block_on(drive()),
    }
}

/// The Applications a host's agents hold, counted from their stores' watches (listing 50,000
/// objects for every progress check would cost more than the delivery it waits for).
#[derive(Default)]
struct Tally {
    total: usize,
    by_name: std::collections::HashMap<String, usize>,
    by_rev: std::collections::HashMap<String, usize>,
}

impl Tally {
    fn count(&self, name: &str, rev: &str) -> usize {
        match (name, rev) {
            ("*", "*") => self.total,
            ("*", r) => self.by_rev.get(r).copied().unwrap_or(0),
            (n, "*") => self.by_name.get(n).copied().unwrap_or(0),
            _ => usize::MAX,
        }
    }
}

/// Keeps `tally` up to date with what `store` holds.
fn follow(store: &MemStore, tally: Arc<std::sync::Mutex<Tally>>) {
    use argocd_pull_agent_core::store::StoreEvent;
    use futures::StreamExt;
    let mut w = store.watch(Kind::Application, Some("argocd"));
    tokio::spawn(async move {
        let mut seen: std::collections::HashMap<String, String> = Default::default();
        let apply = |o: &serde_json::Value,
                     seen: &mut std::collections::HashMap<String, String>| {
            let name = o["metadata"]["name"].as_str().unwrap_or("").to_string();
            let rev = o["spec"]["source"]["targetRevision"]
                .as_str()
                .unwrap_or("")
                .to_string();
            let mut t = tally.lock().unwrap();
            match seen.insert(name.clone(), rev.clone()) {
                Some(old) => *t.by_rev.entry(old).or_default() -= 1,
                None => {
                    t.total += 1;
                    *t.by_name.entry(name).or_default() += 1;
                }
            }
            *t.by_rev.entry(rev).or_default() += 1;
        };
        while let Some(Ok(ev)) = w.next().await {
            match ev {
                StoreEvent::Applied(o) => apply(&o, &mut seen),
                StoreEvent::Restarted(all) => {
                    for o in all.iter() {
                        apply(o, &mut seen);
                    }
                }
                StoreEvent::Deleted(_) => {}
            }
        }
    });
}

/// How many of `agents` hold Application `name` at `revision` (`*`: any).
async fn holding(agents: &[(Agent, MemStore)], name: &str, revision: &str) -> usize {
    let mut n = 0;
    for (_, s) in agents {
        for o in s.list(Kind::Application, Some("argocd")).await.unwrap() {
            if (name == "*" || o["metadata"]["name"] == name)
                && (revision == "*" || o["spec"]["source"]["targetRevision"] == revision)
            {
                n += 1;
            }
        }
    }
    n
}

/// A child holding agents `BENCH_FROM..BENCH_TO` behind its own round-robin balancer over
/// `BENCH_BACKENDS` (a process has 20,000 file descriptors here: an agent takes three with the
/// balancer, and more while a fleet reconnects and the old connections close, so the fleet is
/// spread over processes of `BENCH_PER_HOST`). Started at `BENCH_RATE` (default
/// 2,000) agents a second over all hosts. Commands, one line each: `connected`, `count <name|*> <revision|*>`, `mark`,
/// `moved` (agents reconnected since the mark).
async fn agent_host() {
    let (from, to) = (env("BENCH_FROM", 0), env("BENCH_TO", 0));
    let hosts = env("BENCH_HOSTS", 1);
    let apps = env("BENCH_APPS", 10);
    let dir = std::path::PathBuf::from(std::env::var("BENCH_DIR").unwrap());
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap();
    let ca = argocd_pull_agent_core::pki::Ca::from_pem(&read("ca.crt"), &read("ca.key")).unwrap();
    let backends: Vec<SocketAddr> = std::env::var("BENCH_BACKENDS")
        .unwrap()
        .split(',')
        .map(|a| a.parse().unwrap())
        .collect();
    let svc = argocd_pull_agent::local::balancer(backends).await.unwrap();
    println!("ready");
    std::io::stdout().flush().unwrap();
    let mut agents: Vec<(Agent, MemStore)> = Vec::with_capacity(to - from);
    let tally = Arc::new(std::sync::Mutex::new(Tally::default()));
    // `BENCH_RATE` agents a second over all hosts, in steps of 50 ms
    let step = (env("BENCH_RATE", 2000) / 20 / hosts.max(1)).max(1);
    for i in from..to {
        if i > from && (i - from).is_multiple_of(step) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let name = format!("agent-{i}");
        let issued = ca.issue_agent(&name).unwrap();
        let tls = TlsMaterial {
            cert_pem: issued.cert_pem.into(),
            key_pem: issued.key_pem.into(),
            ca_pem: ca.cert_pem.clone().into(),
        };
        let c = AgentConfig::new(svc, tls, Mode::Managed);
        let store = MemStore::with_capacity(apps + 1);
        follow(&store, tally.clone());
        let a = Agent::start(c, Arc::new(store.clone()), Metrics::new("argocd_agent"))
            .await
            .unwrap();
        agents.push((a, store));
    }
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    std::thread::spawn(move || {
        let mut s = String::new();
        while std::io::stdin().read_line(&mut s).unwrap_or(0) > 0 {
            let _ = tx.send(std::mem::take(&mut s));
        }
    });
    let mut mark: Vec<u64> = Vec::new();
    while let Some(line) = rx.recv().await {
        let w: Vec<&str> = line.split_whitespace().collect();
        let answer = match w.as_slice() {
            ["connected"] => agents.iter().filter(|(a, _)| a.is_connected()).count(),
            ["count", name, rev] => tally.lock().unwrap().count(name, rev),
            ["list", name, rev] => holding(&agents, name, rev).await,
            ["mark"] => {
                mark = agents.iter().map(|(a, _)| a.connections()).collect();
                0
            }
            ["errors"] => {
                // why the agents not connected are not (a diagnosis, on stderr)
                let mut why: std::collections::BTreeMap<String, usize> = Default::default();
                for (a, _) in agents.iter().filter(|(a, _)| !a.is_connected()) {
                    let e = a.last_error().unwrap_or_else(|| "none yet".into());
                    *why.entry(e.chars().take(160).collect()).or_default() += 1;
                }
                for (e, k) in &why {
                    eprintln!("{k} agents: {e}");
                }
                why.values().sum()
            }
            ["moved"] => agents
                .iter()
                .zip(&mark)
                .filter(|((a, _), m)| a.connections() > **m)
                .count(),
            _ => usize::MAX,
        };
        println!("{answer}");
        std::io::stdout().flush().unwrap();
    }
    futures::future::join_all(agents.into_iter().map(|(a, _)| a.shutdown())).await;
}

/// The agent hosts, asked together.
struct Hosts(Vec<Proc>);

impl Hosts {
    /// The sum of every host's answer to `cmd`.
    fn sum(&mut self, cmd: &str) -> usize {
        for h in &mut self.0 {
            h.send(cmd);
        }
        self.0
            .iter_mut()
            .map(|h| h.answer().parse::<usize>().unwrap())
            .sum()
    }

    fn stop(self) {
        for h in self.0 {
            h.stop();
        }
    }
}

async fn drive() {
    let (n, apps) = (env("BENCH_AGENTS", 10_000), env("BENCH_APPS", 10));
    let replicas = env("BENCH_REPLICAS", 3);
    let pki = LocalPki::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    for (f, b) in [
        ("tls.crt", &pki.principal.cert_pem),
        ("tls.key", &pki.principal.key_pem),
        ("ca.crt", &pki.principal.ca_pem),
    ] {
        std::fs::write(dir.path().join(f), b).unwrap();
    }
    std::fs::write(dir.path().join("ca.key"), &pki.ca.key_pem).unwrap();
    std::fs::write(dir.path().join("jwt.key"), throwaway_jwt_key()).unwrap();
    let store_kib = match hub_served() {
        true => 0,
        false => {
            let store_only = Proc::spawn("store-only", dir.path(), &[]);
            let kib = status_kib(&store_only.child.id().to_string(), "VmHWM:");
            store_only.stop();
            kib
        }
    };
    println!(
        "agents={n} apps_per_agent={apps} hub_store_alone_mib={:.0}{}",
        store_kib as f64 / 1024.0,
        if hub_served() {
            " (hub served: BENCH_HUB=served)"
        } else {
            ""
        }
    );
    // `BENCH_COUNTS`: the replica counts to run, e.g. `3` (default `1,<BENCH_REPLICAS>`)
    let counts: Vec<usize> = std::env::var("BENCH_COUNTS")
        .ok()
        .map(|v| v.split(',').filter_map(|c| c.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1, replicas]);
    for count in counts {
        run(dir.path(), n, apps, count, store_kib).await;
    }
}

async fn run(dir: &std::path::Path, n: usize, apps: usize, count: usize, store_kib: u64) {
    // the Leases' API server
    let hub = argocd_pull_hub::Hub::new();
    let ns: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(hub.client());
    ns.create(
        &Default::default(),
        &serde_json::from_value(json!({"metadata": {"name": "argocd"}})).unwrap(),
    )
    .await
    .unwrap();
    let served_hub = hub_served().then(|| KubeStore::new(hub.client()));
    if let Some(h) = &served_hub {
        for crd in [
            include_str!("../../api/crds/argocd/application-crd.yaml"),
            include_str!("../../api/crds/argocd/appproject-crd.yaml"),
        ] {
            hub.install_crds_yaml(crd).unwrap();
        }
        let t = Instant::now();
        fill(h, n, apps).await;
        println!(
            "hub served: {} Applications written in {:.1}s",
            n * apps,
            t.elapsed().as_secs_f64()
        );
    }
    let served = hub.serve("127.0.0.1:0".parse().unwrap()).await.unwrap();
    std::fs::write(dir.join("hub.kubeconfig"), served.kubeconfig_yaml()).unwrap();
    let free = || {
        std::net::TcpListener::bind("127.0.0.2:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    };
    let (grpc, replica_port) = (free(), free());
    let mut procs: Vec<Proc> = (0..count)
        .map(|i| {
            Proc::spawn(
                "replica",
                dir,
                &[
                    ("BENCH_INDEX", i.to_string()),
                    ("BENCH_GRPC_PORT", grpc.to_string()),
                    ("BENCH_REPLICA_PORT", replica_port.to_string()),
                ],
            )
        })
        .collect();
    // every shard held before the agents come (a fleet joining a running set of replicas)
    let t0 = Instant::now();
    loop {
        let held: f64 = procs.iter_mut().map(|p| p.stats().1).sum();
        if held == 32.0 {
            let shares: Vec<f64> = procs.iter_mut().map(|p| p.stats().1).collect();
            let fair = 32 / count;
            if shares
                .iter()
                .all(|&s| s as usize == fair || s as usize == fair + 1)
            {
                break;
            }
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "shards split");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let idle: Vec<u64> = procs.iter_mut().map(|p| p.stats().2).collect();
    let backends: Vec<String> = (0..count)
        .map(|i| format!("127.0.0.{}:{grpc}", i + 2))
        .collect();
    let per_host = env("BENCH_PER_HOST", 5_000);
    let nhosts = n.div_ceil(per_host);
    let started = Instant::now();
    let mut hosts = Hosts(
        (0..nhosts)
            .map(|h| {
                Proc::spawn(
                    "agents",
                    dir,
                    &[
                        ("BENCH_FROM", (h * per_host).to_string()),
                        ("BENCH_TO", ((h + 1) * per_host).min(n).to_string()),
                        ("BENCH_HOSTS", nhosts.to_string()),
                        ("BENCH_BACKENDS", backends.join(",")),
                    ],
                )
            })
            .collect(),
    );
    let limit = Duration::from_secs(600);
    let wait = |hosts: &mut Hosts, what: &str, cmd: &str, want: usize| {
        let t0 = Instant::now();
        loop {
            let got = hosts.sum(cmd);
            if got == want {
                return t0.elapsed();
            }
            if std::env::var("BENCH_DEBUG").is_ok() {
                eprintln!("{what}: {got}/{want}");
                if t0.elapsed().as_secs().is_multiple_of(20) {
                    hosts.sum("errors");
                }
            }
            assert!(
                t0.elapsed() < limit,
                "{what}: {got} of {want} within {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    };
    wait(&mut hosts, "every agent connected", "connected", n);
    let connected = started.elapsed();
    wait(
        &mut hosts,
        "every Application delivered",
        "count * *",
        n * apps,
    );
    let delivered = started.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await; // queues drained (not a sync: a settle)
    let stats: Vec<(i64, f64, u64, u64, f64, u64)> = procs.iter_mut().map(|p| p.stats()).collect();
    let fair = n as f64 / count as f64;
    let shares: Vec<String> = stats
        .iter()
        .map(|s| format!("{} ({:+.1} %)", s.0, (s.0 as f64 - fair) / fair * 100.0))
        .collect();
    let per_agent: Vec<String> = stats
        .iter()
        .zip(&idle)
        .map(|(s, i)| format!("{:.1}", s.2.saturating_sub(*i) as f64 / s.0.max(1) as f64))
        .collect();
    let peaks: Vec<String> = stats
        .iter()
        .map(|s| {
            format!(
                "{:.0}/{:.0}",
                s.3 as f64 / 1024.0,
                s.3.saturating_sub(store_kib) as f64 / 1024.0
            )
        })
        .collect();
    let forwarded: f64 = stats.iter().map(|s| s.4).sum();
    let resent: u64 = stats.iter().map(|s| s.5).sum();
    println!(
        "replicas={count}: connected_s={:.1} delivered_s={:.1} ({:.0} Applications/s); agents per replica {} (fair {fair:.0}); \
         RSS per connected agent KiB {}; peak MiB raw/minus hub store {}; streams forwarded {forwarded}; events resent {resent}",
        connected.as_secs_f64(),
        delivered.as_secs_f64(),
        (n * apps) as f64 / delivered.as_secs_f64(),
        shares.join(", "),
        per_agent.join(", "),
        peaks.join(", "),
    );
    // an update of every Application, delivered
    // every replica holds the whole hub (as each watches the API server): all are written at
    // once, and the one serving an agent delivers; a served hub is written once
    async fn wave(procs: &mut [Proc], hub: Option<&KubeStore>, cmd: &str, n: usize, apps: usize) {
        if let Some(h) = hub {
            write_hub(h, cmd, n, apps).await;
        }
        for p in procs.iter_mut() {
            p.send(cmd);
        }
        for p in procs.iter_mut() {
            assert_eq!(p.answer(), "done");
        }
    }
    let served_hub = served_hub.as_ref();
    let t = Instant::now();
    wave(&mut procs, served_hub, "touch v1", n, apps).await;
    wait(&mut hosts, "the update delivered", "count * v1", n * apps);
    let before = (n * apps) as f64 / t.elapsed().as_secs_f64();
    if count < 2 {
        println!("replicas=1: update of every Application delivered at {before:.0} events/s");
        for p in procs {
            p.stop();
        }
        hosts.stop();
        return;
    }
    // SIGKILL one replica
    hosts.sum("mark");
    let mut killed = procs.remove(0);
    let t = Instant::now();
    killed.child.kill().unwrap();
    killed.child.wait().unwrap();
    let taken = loop {
        let held: f64 = procs.iter_mut().map(|p| p.stats().1).sum();
        if held == 32.0 {
            break t.elapsed();
        }
        assert!(t.elapsed() < limit, "shards taken over");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // every agent connected again (the killed replica's own and those it forwarded)
    wait(
        &mut hosts,
        "the killed replica's agents back",
        "connected",
        n,
    );
    let back = t.elapsed();
    let moved = hosts.sum("moved");
    wave(&mut procs, served_hub, "add app-after", n, apps).await;
    wait(
        &mut hosts,
        "a new Application on every agent",
        "count app-after *",
        n,
    );
    let after_new = t.elapsed();
    let t2 = Instant::now();
    wave(&mut procs, served_hub, "touch v2", n, apps).await;
    wait(
        &mut hosts,
        "the second update delivered",
        "count * v2",
        n * apps,
    );
    let after = (n * apps) as f64 / t2.elapsed().as_secs_f64();
    // the final count from the stores themselves, not from the watches
    let total = hosts.sum("list * *");
    println!(
        "replicas={count}, one SIGKILLed: shards taken in {:.1}s, {} agents reconnected, all connected {:.1}s after the kill, \
         a new Application on every agent {:.1}s after it; {total} Applications held (lost {}); \
         update of every Application {before:.0} events/s before, {after:.0} after",
        taken.as_secs_f64(),
        moved,
        back.as_secs_f64(),
        after_new.as_secs_f64(),
        (n * (apps + 1)).saturating_sub(total),
    );
    for p in procs {
        p.stop();
    }
    hosts.stop();
}
