//! Scale benchmark: N Applications over M clusters on the embedded hub (served over HTTP); the
//! controller runs in a child process (this binary re-executed) so that its CPU time and peak RSS
//! are its own. The parent plays the OCM work agent by writing feedback.
//!
//! `cargo bench -p argocd-pull-controller` (env: `BENCH_APPS`, default 10000; `BENCH_CLUSTERS`,
//! default 1000).

use std::time::{Duration, Instant};

use argocd_pull_api::argocd::Application;
use argocd_pull_api::crds;
use argocd_pull_api::names::{ANNOTATION_OCM_MANAGED_CLUSTER, LABEL_PULL_TO_OCM};
use argocd_pull_api::ocm::cluster::ManagedCluster;
use argocd_pull_api::ocm::work::ManifestWork;
use argocd_pull_hub::Hub;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

const CHILD_ENV: &str = "ARGOCD_PULL_BENCH_CHILD_URL";

fn main() -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    if let Ok(url) = std::env::var(CHILD_ENV) {
        return rt.block_on(child(url));
    }
    if std::env::args().any(|a| a == "--list") {
        return Ok(()); // `cargo bench -- --list`
    }
    rt.block_on(parent())
}

async fn child(url: String) -> anyhow::Result<()> {
    argocd_pull_controller::install_crypto_provider();
    let config = kube::Config::new(url.parse()?);
    let client = Client::try_from(config)?;
    let running = argocd_pull_controller::start(
        client,
        argocd_pull_controller::ControllerConfig {
            concurrency: 16,
            ..Default::default()
        },
    )
    .await?;
    running.wait_ready().await;
    std::future::pending::<()>().await;
    Ok(())
}

/// (CPU seconds, VmHWM KiB, VmRSS KiB) of `pid`.
fn proc_stats(pid: u32) -> (f64, u64, u64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    // fields after ")": state(0) … utime(11) stime(12); clock ticks are 100/s on Linux
    let ticks: u64 = f.get(11).and_then(|x| x.parse().ok()).unwrap_or(0)
        + f.get(12).and_then(|x| x.parse().ok()).unwrap_or(0);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib = |key: &str| {
        status
            .lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|x| x.parse().ok())
            .unwrap_or(0u64)
    };
    (ticks as f64 / 100.0, kib("VmHWM:"), kib("VmRSS:"))
}

async fn parent() -> anyhow::Result<()> {
    let apps: usize = std::env::var("BENCH_APPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let clusters: usize = std::env::var("BENCH_CLUSTERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000);
    let hub = Hub::new();
    for yaml in [
        crds::ARGOCD_APPLICATION,
        crds::OCM_MANAGED_CLUSTERS,
        crds::OCM_MANIFESTWORKS,
        crds::OCM_PLACEMENT_DECISIONS,
    ] {
        hub.install_crds_yaml(yaml)?;
    }
    let server = hub.serve("127.0.0.1:0".parse()?).await?;
    let client = hub.client();
    let t = Instant::now();
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "argocd"}}))?,
        )
        .await?;
    futures::stream::iter(0..clusters)
        .map(|i| {
            let client = client.clone();
            async move {
                let name = format!("cluster{i}");
                let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}}))?;
                Api::<Namespace>::all(client.clone())
                    .create(&PostParams::default(), &ns)
                    .await?;
                let c: ManagedCluster = serde_json::from_value(json!({
                    "apiVersion": "cluster.open-cluster-management.io/v1", "kind": "ManagedCluster",
                    "metadata": {"name": name}, "spec": {"hubAcceptsClient": true}
                }))?;
                Api::<ManagedCluster>::all(client)
                    .create(&PostParams::default(), &c)
                    .await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<_>>()
        .await?;
    let app_api: Api<Application> = Api::namespaced(client.clone(), "argocd");
    futures::stream::iter(0..apps)
        .map(|i| {
            let app_api = app_api.clone();
            async move {
                let app: Application = serde_json::from_value(json!({
                    "metadata": {"name": format!("app{i}"), "namespace": "argocd",
                        "labels": {LABEL_PULL_TO_OCM: "true", "team": "bench"},
                        "annotations": {ANNOTATION_OCM_MANAGED_CLUSTER: format!("cluster{}", i % clusters),
                            "argocd.argoproj.io/skip-reconcile": "true"},
                        "finalizers": ["resources-finalizer.argocd.argoproj.io"]},
                    "spec": {"project": "default",
                        "destination": {"server": "https://kubernetes.default.svc", "namespace": "guestbook"},
                        "source": {"repoURL": "https://github.com/argoproj/argocd-example-apps", "path": "guestbook", "targetRevision": "HEAD"},
                        "syncPolicy": {"automated": {"prune": true, "selfHeal": true}}}
                }))?;
                app_api.create(&PostParams::default(), &app).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<_>>()
        .await?;
    eprintln!(
        "setup: {apps} Applications over {clusters} clusters in {:.1?}",
        t.elapsed()
    );

    // the controller, in a child process
    let exe = std::env::current_exe()?;
    // BENCH_CHILD_PREFIX, e.g. "heaptrack -o /tmp/controller": run the controller under a tool
    // (the CPU and RSS figures are then the tool's process, not the controller's)
    let prefix = std::env::var("BENCH_CHILD_PREFIX").unwrap_or_default();
    let mut words: Vec<std::ffi::OsString> = prefix.split_whitespace().map(Into::into).collect();
    words.push(exe.into());
    let mut child = std::process::Command::new(&words[0])
        .args(&words[1..])
        .env(CHILD_ENV, server.url())
        .env("RUST_LOG", "warn")
        .spawn()?;
    let pid = child.id();
    let started = Instant::now();
    loop {
        if hub.object_count("manifestworks") >= apps {
            break;
        }
        if started.elapsed() > Duration::from_secs(900) {
            anyhow::bail!(
                "works not created within 15 minutes ({} of {apps})",
                hub.object_count("manifestworks")
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let t_works = started.elapsed();
    let (cpu_propagate, hwm_propagate, rss_propagate) = proc_stats(pid);
    eprintln!(
        "all {apps} ManifestWorks exist after {t_works:.2?} (controller CPU {cpu_propagate:.2}s)"
    );

    // the work agent: feedback for every work
    let works: Vec<ManifestWork> = Api::<ManifestWork>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items;
    let fb_start = Instant::now();
    futures::stream::iter(works)
        .map(|w| {
            let client = client.clone();
            async move {
                let name = w.metadata.name.clone().unwrap_or_default();
                let ns = w.metadata.namespace.clone().unwrap_or_default();
                let p = &w.spec.workload.manifests[0];
                let status = json!({"status": {"resourceStatus": {"manifests": [{
                    "resourceMeta": {"ordinal": 0, "group": "argoproj.io", "version": "v1alpha1", "kind": "Application",
                        "resource": "applications", "name": p["metadata"]["name"], "namespace": p["metadata"]["namespace"]},
                    "statusFeedback": {"values": [
                        {"name": "healthStatus", "fieldValue": {"type": "String", "string": "Healthy"}},
                        {"name": "syncStatus", "fieldValue": {"type": "String", "string": "Synced"}},
                        {"name": "syncRevision", "fieldValue": {"type": "String", "string": "0123abcd"}},
                        {"name": "operationStatePhase", "fieldValue": {"type": "String", "string": "Succeeded"}},
                        {"name": "operationStateStartedAt", "fieldValue": {"type": "String", "string": "2024-01-01T00:00:00Z"}}
                    ]},
                    "conditions": []
                }]}}});
                Api::<ManifestWork>::namespaced(client, &ns)
                    .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
                    .await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<_>>()
        .await?;
    let fb_written = fb_start.elapsed();
    let t_status;
    loop {
        let list = app_api.list(&ListParams::default()).await?;
        let healthy = list
            .items
            .iter()
            .filter(|a| a.health_status() == Some("Healthy") && a.sync_status() == Some("Synced"))
            .count();
        if healthy >= apps {
            t_status = fb_start.elapsed();
            break;
        }
        if fb_start.elapsed() > Duration::from_secs(900) {
            anyhow::bail!("statuses not Healthy within 15 minutes ({healthy} of {apps})");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (cpu_total, hwm_status, _) = proc_stats(pid);
    eprintln!(
        "all {apps} hub statuses Synced/Healthy {t_status:.2?} after feedback started (feedback written in {fb_written:.2?})"
    );

    // steady state
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before = hub.counters();
    let (cpu_before_idle, _, _) = proc_stats(pid);
    tokio::time::sleep(Duration::from_secs(20)).await;
    let delta = hub.counters().since(&before);
    let (cpu_after_idle, hwm_kib, rss_steady) = proc_stats(pid);
    child.kill()?;
    let _ = child.wait();
    server.shutdown().await;

    println!("\n## results ({apps} Applications, {clusters} clusters)");
    println!(
        "time until every ManifestWork exists: {:.2} s",
        t_works.as_secs_f64()
    );
    println!(
        "time until every hub status is Synced/Healthy (from first feedback): {:.2} s",
        t_status.as_secs_f64()
    );
    println!(
        "controller CPU, propagation phase: {cpu_propagate:.2} s = {:.3} ms per Application",
        cpu_propagate * 1000.0 / apps as f64
    );
    println!(
        "controller CPU, total (propagation + status): {cpu_total:.2} s = {:.3} ms per Application",
        cpu_total * 1000.0 / apps as f64
    );
    println!(
        "controller CPU while idle for 20 s: {:.2} s",
        cpu_after_idle - cpu_before_idle
    );
    let mib = |kib: u64| kib as f64 / 1024.0;
    println!(
        "controller peak RSS: {:.1} MiB (peak by the end of propagation {:.1} MiB, RSS then {:.1} MiB; peak by the end of status {:.1} MiB)",
        mib(hwm_kib),
        mib(hwm_propagate),
        mib(rss_propagate),
        mib(hwm_status)
    );
    println!(
        "controller RSS in the steady state: {:.1} MiB",
        mib(rss_steady)
    );
    println!(
        "API writes in 20 s of steady state: {} (requests: {})",
        delta.writes(),
        delta.total()
    );
    Ok(())
}
