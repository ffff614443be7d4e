//! Issue 30's performance targets: `BENCH_AGENTS` (default 1000) managed agents connected to one
//! principal that publishes their state on their cluster secrets (the embedded hub, in this
//! process); `BENCH_APPS` (default 10) Applications per agent on the hub with sync and health
//! status. Measures:
//!
//! * secret writes while the fleet connects (one per agent expected) and then in a steady state
//!   over `BENCH_STEADY_S` seconds (default 12, six of the principal's 2 s heartbeat intervals,
//!   i.e. six queue samples): the target is 0;
//! * `ctl agent list` (`-o json`, `-o wide`, and the default names) against the hub served over
//!   HTTP, as the binary runs it (`run_ctl_output` with a kubeconfig): the target is ≤ 2 s.
//!
//! `cargo bench -p argocd-pull-agent --bench fleet_status`. Results: docs/performance.md.

use std::sync::Arc;
use std::time::{Duration, Instant};

use argocd_pull_agent::local::LocalPki;

use argocd_pull_agent_core::Mode;
use argocd_pull_agent_core::agent_status::{AgentStatus, Connection};
use argocd_pull_agent_core::auth::throwaway_jwt_key;
use argocd_pull_agent_core::metrics::Metrics;
use argocd_pull_agent_core::store::{KubeStore, MemStore, Store};
use argocd_pull_ctl::CtlArgs;
use argocd_pull_principal::cluster_secrets::SecretsClient;
use argocd_pull_principal::{Principal, PrincipalConfig};
use argocd_pull_spoke::{Agent, AgentConfig, KubeVersionSource};
use clap::Parser;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{ListParams, PostParams};

#[derive(Parser)]
struct Ctl {
    #[command(flatten)]
    ctl: CtlArgs,
}

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run());
}

/// Agents the hub shows connected with a Kubernetes version.
async fn shown(secrets: &Api<Secret>) -> usize {
    secrets
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter_map(|s| {
            AgentStatus::from_annotations(&s.metadata.annotations.clone().unwrap_or_default())
        })
        .filter(|p| {
            p.connection == Connection::Successful && p.kubernetes_version.known().is_some()
        })
        .count()
}

async fn ctl(kubeconfig: &std::path::Path, args: &[&str]) -> (Duration, usize) {
    let mut argv = vec!["ctl", "--kubeconfig", kubeconfig.to_str().unwrap()];
    argv.extend(args);
    let c = Ctl::try_parse_from(argv).unwrap();
    let t0 = Instant::now();
    let out = argocd_pull_ctl::run_ctl_output(&c.ctl).await.unwrap();
    (t0.elapsed(), out.len())
}

async fn run() {
    let n = env("BENCH_AGENTS", 1000) as usize;
    let apps = env("BENCH_APPS", 10) as usize;
    let steady = Duration::from_secs(env("BENCH_STEADY_S", 12));
    let hub = argocd_pull_hub::Hub::new();
    hub.install_crds_yaml(include_str!("../../api/crds/argocd/application-crd.yaml"))
        .unwrap();
    let client = hub.client();
    let store = KubeStore::new(client.clone());
    store.ensure_namespace("argocd").await.unwrap();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "argocd");
    let pki = LocalPki::new().unwrap();
    let t0 = Instant::now();
    let mut tls = Vec::with_capacity(n);
    let statuses = [
        ("Synced", "Healthy"),
        ("OutOfSync", "Degraded"),
        ("OutOfSync", "Missing"),
        ("Synced", "Progressing"),
    ];
    for i in 0..n {
        let name = format!("a{i}");
        let m = pki.agent(&name).unwrap();
        let s = argocd_pull_agent_core::cluster_secret::cluster_secret(
            &name,
            "argocd",
            &format!("https://argocd-agent-resource-proxy:9090?agentName={name}"),
            Default::default(),
            &m.cert_pem,
            &m.key_pem,
            &m.ca_pem,
        )
        .unwrap();
        secrets.create(&PostParams::default(), &s).await.unwrap();
        store.ensure_namespace(&name).await.unwrap();
        for j in 0..apps {
            let (sync, health) = statuses[j % statuses.len()];
            let app = serde_json::json!({
                "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
                "metadata": {"name": format!("app-{j}"), "namespace": name},
                "spec": {"project": "default",
                         "source": {"repoURL": "https://example.com/repo.git", "path": format!("apps/{j}"), "targetRevision": "HEAD"},
                         "destination": {"name": name, "namespace": "guestbook"}},
                "status": {"sync": {"status": sync, "revision": "0123456789abcdef0123456789abcdef01234567"},
                           "health": {"status": health},
                           "reconciledAt": "2026-11-27T10:00:00Z"}
            });
            store
                .create(argocd_pull_agent_core::store::Kind::Application, app)
                .await
                .unwrap();
        }
        tls.push(m);
    }
    eprintln!(
        "hub: {n} cluster secrets, {} Applications in {:.1}s",
        n * apps,
        t0.elapsed().as_secs_f64()
    );

    let mut cfg = PrincipalConfig::new(
        "127.0.0.1:0".parse().unwrap(),
        pki.principal.clone(),
        throwaway_jwt_key(),
    );
    cfg.heartbeat = Duration::from_secs(2);
    cfg.cluster_secrets = Some(SecretsClient(client.clone()));
    // the principal's own Applications store is not what this measures
    let p = Principal::start(
        cfg,
        Arc::new(MemStore::new()),
        Metrics::new("argocd_principal"),
    )
    .await
    .unwrap();
    let w_start = hub.counters().writes_to("secrets");
    let t0 = Instant::now();
    let mut agents = Vec::with_capacity(n);
    for m in tls {
        let mut c = AgentConfig::new(p.local_addr(), m, Mode::Managed);
        c.kube_version = Some(KubeVersionSource::from_fn(|| {
            Box::pin(async { Ok("v1.30.2".to_string()) })
        }));
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
    eprintln!("{n} agents started in {:.1}s", t0.elapsed().as_secs_f64());
    // the hub's state has no event to await across 1,000 objects here: poll it (every 2 s: a
    // list of every secret costs the principal's hub too)
    let mut last = 0;
    loop {
        let s = shown(&secrets).await;
        if s == n {
            break;
        }
        if s != last {
            eprintln!(
                "{s} shown connected after {:.1}s",
                t0.elapsed().as_secs_f64()
            );
            last = s;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(900),
            "fleet never shown: {s}/{n}"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let connected_s = t0.elapsed().as_secs_f64();
    let w_connect = hub.counters().writes_to("secrets") - w_start;
    let w0 = hub.counters().writes_to("secrets");
    tokio::time::sleep(steady).await;
    let w_steady = hub.counters().writes_to("secrets") - w0;

    let server = hub.serve("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).unwrap();
    let mut report = Vec::new();
    for (label, args) in [
        ("json", &["agent", "list", "-o", "json"][..]),
        ("wide", &["agent", "list", "-o", "wide"][..]),
        ("names", &["agent", "list"][..]),
    ] {
        let mut times = Vec::new();
        let mut bytes = 0;
        for _ in 0..5 {
            let (t, b) = ctl(&kubeconfig, args).await;
            times.push(t);
            bytes = b;
        }
        times.sort();
        report.push(format!(
            "ctl_{label}_s min={:.3} median={:.3} max={:.3} ({bytes} bytes)",
            times[0].as_secs_f64(),
            times[2].as_secs_f64(),
            times[4].as_secs_f64()
        ));
    }
    println!(
        "agents={n} apps={} shown_connected_s={connected_s:.1} secret_writes_connect={w_connect} ({:.2}/agent) secret_writes_steady_{}s={w_steady} ({:.3}/agent) {}",
        n * apps,
        w_connect as f64 / n as f64,
        steady.as_secs(),
        w_steady as f64 / n as f64,
        report.join(" ")
    );
    for a in agents {
        a.shutdown().await;
    }
    p.shutdown().await;
    server.shutdown().await;
}
