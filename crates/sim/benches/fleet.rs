//! Fleet benchmark: start time and idle RSS of a large fleet, and work-agent throughput
//! (ManifestWorks wrapping Applications, from create to `Applied` and to `Healthy` feedback).
//!
//! `cargo bench -p argocd-pull-sim` — sizes via `SIM_BENCH_CLUSTERS` (default 1000) and
//! `SIM_BENCH_WORKS_PER_CLUSTER` (default 10). Prints a Markdown table.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use argocd_pull_api::ocm::work::ManifestWork;
use argocd_pull_sim::{ArgoSimConfig, Fleet, FleetConfig};
use futures::StreamExt;
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use kube::runtime::watcher::{self, Event};
use serde_json::json;

fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map(|kb| kb / 1024.0)
        .unwrap_or(0.0)
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn work(cluster: &str, app: &str) -> ManifestWork {
    serde_json::from_value(json!({
        "metadata": {"name": format!("{app}-abcde"), "namespace": cluster,
                     "labels": {"apps.open-cluster-management.io/pull-to-ocm-managed-cluster": "true"}},
        "spec": {
            "workload": {"manifests": [{
                "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
                "metadata": {"name": app, "namespace": "argocd", "finalizers": ["resources-finalizer.argocd.argoproj.io"]},
                "spec": {"project": "default",
                         "source": {"repoURL": "https://github.com/argoproj/argocd-example-apps", "path": "guestbook", "targetRevision": "HEAD"},
                         "destination": {"server": "https://kubernetes.default.svc", "namespace": "guestbook"},
                         "syncPolicy": {"automated": {}}}
            }]},
            "manifestConfigs": [{
                "resourceIdentifier": {"group": "argoproj.io", "resource": "applications", "namespace": "argocd", "name": app},
                "feedbackRules": [{"type": "JSONPaths", "jsonPaths": [
                    {"name": "healthStatus", "path": ".status.health.status"},
                    {"name": "syncStatus", "path": ".status.sync.status"},
                    {"name": "operationStateStartedAt", "path": ".status.operationState.startedAt"},
                    {"name": "operationStatePhase", "path": ".status.operationState.phase"},
                    {"name": "syncRevision", "path": ".status.sync.revision"}]}],
                "updateStrategy": {"type": "ServerSideApply", "serverSideApply": {"force": true, "ignoreFields": [
                    {"condition": "OnSpokeChange", "jsonPaths": [".operation"]}]}}
            }]
        }
    }))
    .expect("valid work")
}

fn healthy(w: &ManifestWork) -> bool {
    w.status
        .as_ref()
        .and_then(|s| s.resource_status.as_ref())
        .and_then(|r| r.manifests.first())
        .and_then(|m| m.status_feedback.as_ref())
        .is_some_and(|f| {
            f.values.iter().any(|v| {
                v.name == "healthStatus" && v.field_value.string.as_deref() == Some("Healthy")
            })
        })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let clusters = env_usize("SIM_BENCH_CLUSTERS", 1000);
    let per = env_usize("SIM_BENCH_WORKS_PER_CLUSTER", 10);
    let rss0 = rss_mib();

    let mut cfg = FleetConfig::with_clusters(clusters);
    cfg.argo = ArgoSimConfig {
        sync_delay: Duration::ZERO,
        health_delay: Duration::ZERO,
        ..Default::default()
    };
    let t = Instant::now();
    let fleet = Fleet::start(cfg).await?;
    let start = t.elapsed();
    // Let the initial lists and watches settle.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let rss_idle = rss_mib();

    // Throughput.
    let total = clusters * per;
    let works_all: Api<ManifestWork> = Api::all(fleet.hub_client());
    let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel::<(usize, usize)>();
    let watch = tokio::spawn(async move {
        let mut applied = HashSet::new();
        let mut healthy_set = HashSet::new();
        let stream = watcher::watcher(works_all, watcher::Config::default());
        futures::pin_mut!(stream);
        while let Some(ev) = stream.next().await {
            let w = match ev {
                Ok(Event::Apply(w)) | Ok(Event::InitApply(w)) => w,
                _ => continue,
            };
            let key = (w.namespace().unwrap_or_default(), w.name_any());
            if w.condition_true("Applied") {
                applied.insert(key.clone());
            }
            if healthy(&w) {
                healthy_set.insert(key);
            }
            let _ = done_tx.send((applied.len(), healthy_set.len()));
        }
    });
    let t = Instant::now();
    let names = fleet.cluster_names();
    let hub = fleet.hub_client();
    futures::stream::iter(
        names
            .iter()
            .flat_map(|c| (0..per).map(move |j| (c.clone(), j))),
    )
    .map(|(c, j)| {
        let hub = hub.clone();
        async move {
            let api: Api<ManifestWork> = Api::namespaced(hub, &c);
            api.create(&PostParams::default(), &work(&c, &format!("app{j}")))
                .await
                .map(|_| ())
        }
    })
    .buffer_unordered(64)
    .for_each(|r| {
        if let Err(e) = r {
            eprintln!("create failed: {e}");
        }
        std::future::ready(())
    })
    .await;
    let created = t.elapsed();
    let mut t_applied = None;
    let mut t_healthy = None;
    let deadline = Duration::from_secs(600);
    while t_healthy.is_none() {
        let Ok(Some((a, h))) = tokio::time::timeout(deadline, done_rx.recv()).await else {
            anyhow::bail!("timed out waiting for {total} works");
        };
        if a >= total && t_applied.is_none() {
            t_applied = Some(t.elapsed());
        }
        if h >= total {
            t_healthy = Some(t.elapsed());
        }
    }
    watch.abort();
    let (t_applied, t_healthy) = (t_applied.unwrap_or_default(), t_healthy.unwrap_or_default());
    let rss_loaded = rss_mib();
    let counts = fleet.agent_counts();

    println!("| metric | value |");
    println!("|---|---|");
    println!("| clusters | {clusters} |");
    println!(
        "| fleet start | {:.2} s ({:.2} ms/cluster) |",
        start.as_secs_f64(),
        start.as_secs_f64() * 1000.0 / clusters as f64
    );
    println!("| RSS before start | {rss0:.0} MiB |");
    println!(
        "| RSS idle fleet | {rss_idle:.0} MiB ({:.0} KiB/cluster) |",
        (rss_idle - rss0) * 1024.0 / clusters as f64
    );
    println!("| works | {total} ({per}/cluster, one Application each) |");
    println!(
        "| create (bench client, 64 in flight) | {:.2} s ({:.0}/s) |",
        created.as_secs_f64(),
        total as f64 / created.as_secs_f64()
    );
    println!(
        "| all Applied | {:.2} s ({:.0} works/s) |",
        t_applied.as_secs_f64(),
        total as f64 / t_applied.as_secs_f64()
    );
    println!(
        "| all with Healthy feedback | {:.2} s ({:.0} works/s) |",
        t_healthy.as_secs_f64(),
        total as f64 / t_healthy.as_secs_f64()
    );
    println!("| RSS with {total} works | {rss_loaded:.0} MiB |");
    println!(
        "| agent reconciles / spoke writes / status writes | {} / {} / {} |",
        counts.reconciles, counts.spoke_writes, counts.status_writes
    );
    fleet.shutdown().await;
    Ok(())
}
