//! Report benchmark: 1,000 clusters × 100 ApplicationSets = 100,000 ManifestWorks with feedback.
//!
//! `cargo bench -p argocd-pull-gitops --bench report` (env `BENCH_CLUSTERS`, `BENCH_APPSETS` to
//! scale down).
//! 1. Pure: the aggregator's index fed 100,000 works in memory → 100 reports.
//! 2. Embedded hub served over HTTP: works created directly (with status feedback), then the
//!    aggregator started in a child process (this binary re-executed), so that its CPU time and
//!    RSS are its own: time to the complete report set, time to reflect one cluster's change,
//!    the controller's CPU and memory. The parent watches the reports to see them complete.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use argocd_pull_api::names;
use argocd_pull_api::ocm::work::{
    FeedbackValue, FieldValue, ManifestCondition, ManifestResourceMeta, ManifestResourceStatus,
    ManifestWorkStatus, StatusFeedbackResult,
};
use argocd_pull_api::report::MulticlusterApplicationSetReport;
use argocd_pull_gitops::GitOpsConfig;
use argocd_pull_gitops::aggregator::{Decision, Index};
use futures::StreamExt;
use kube::api::{Api, DynamicObject, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn proc_status(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn health(c: usize, a: usize) -> &'static str {
    match (c + a) % 10 {
        0 => "Progressing",
        1 => "Degraded",
        _ => "Healthy",
    }
}

fn status_of(app: &str, health: &str) -> ManifestWorkStatus {
    let s = |n: &str, v: &str| FeedbackValue {
        name: n.into(),
        field_value: FieldValue::string(v),
    };
    ManifestWorkStatus {
        conditions: vec![],
        resource_status: Some(ManifestResourceStatus {
            manifests: vec![ManifestCondition {
                resource_meta: ManifestResourceMeta {
                    ordinal: 0,
                    group: "argoproj.io".into(),
                    version: "v1alpha1".into(),
                    kind: "Application".into(),
                    resource: "applications".into(),
                    name: app.into(),
                    namespace: "argocd".into(),
                },
                status_feedback: Some(StatusFeedbackResult {
                    values: vec![
                        s("healthStatus", health),
                        s(
                            "syncStatus",
                            if health == "Healthy" {
                                "Synced"
                            } else {
                                "OutOfSync"
                            },
                        ),
                        s("operationStatePhase", "Succeeded"),
                        s("operationStateStartedAt", "2026-01-01T00:00:00Z"),
                        s("syncRevision", "0123456789abcdef0123456789abcdef01234567"),
                    ],
                }),
                conditions: vec![],
            }],
        }),
    }
}

fn meta(c: usize, a: usize) -> ObjectMeta {
    let cluster = format!("cluster-{c:04}");
    let appset = format!("appset-{a:03}");
    ObjectMeta {
        name: Some(format!("{cluster}-{appset}-abcde")),
        namespace: Some(cluster.clone()),
        labels: Some(BTreeMap::from([
            (names::LABEL_APPLICATION_SET.to_string(), "true".to_string()),
            (names::LABEL_PULL_TO_OCM.to_string(), "true".to_string()),
        ])),
        annotations: Some(BTreeMap::from([
            (
                names::HOSTING_APPLICATIONSET.to_string(),
                format!("argocd/{appset}"),
            ),
            (
                names::ANNOTATION_HUB_APPLICATION_NAME.to_string(),
                format!("{cluster}-{appset}"),
            ),
            (
                names::ANNOTATION_HUB_APPLICATION_NAMESPACE.to_string(),
                "argocd".to_string(),
            ),
        ])),
        ..Default::default()
    }
}

fn pure(clusters: usize, appsets: usize) {
    let works: Vec<(ObjectMeta, ManifestWorkStatus)> = (0..clusters)
        .flat_map(|c| (0..appsets).map(move |a| (c, a)))
        .map(|(c, a)| {
            let m = meta(c, a);
            let app =
                m.annotations.as_ref().unwrap()[names::ANNOTATION_HUB_APPLICATION_NAME].clone();
            (m, status_of(&app, health(c, a)))
        })
        .collect();
    let rss0 = proc_status("VmRSS:");
    let t = Instant::now();
    let mut index = Index::default();
    for (m, s) in &works {
        index.apply_work(m, Some(s));
    }
    let indexed = t.elapsed();
    let decisions = index.flush(false);
    let total = t.elapsed();
    assert_eq!(decisions.len(), appsets);
    let rss1 = proc_status("VmRSS:");
    // One change.
    let (m, _) = &works[0];
    let t2 = Instant::now();
    index.apply_work(m, Some(&status_of("x", "Unknown")));
    let d = index.flush(false);
    let one = t2.elapsed();
    assert!(matches!(d.as_slice(), [Decision::Write(..)]));
    println!(
        "pure: {} works indexed in {:?}, all {} reports computed in {:?} total; one change recomputed in {:?}; index + reports ≈ {:.0} MiB",
        works.len(),
        indexed,
        appsets,
        total,
        one,
        mib(rss1.saturating_sub(rss0))
    );
}

async fn on_hub(clusters: usize, appsets: usize) {
    let hub = argocd_pull_hub::Hub::new();
    for set in [
        argocd_pull_api::crds::OCM_HUB,
        argocd_pull_api::crds::ARGOCD,
        argocd_pull_api::crds::OWN,
    ] {
        for crd in set {
            hub.install_crds_yaml(crd).unwrap();
        }
    }
    let client = hub.client();
    let ns_api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    for c in std::iter::once("argocd".to_string())
        .chain((0..clusters).map(|c| format!("cluster-{c:04}")))
    {
        let ns = serde_json::from_value(json!({"metadata": {"name": c}})).unwrap();
        ns_api.create(&PostParams::default(), &ns).await.unwrap();
    }
    let gvk = |g: &str, v: &str, k: &str, p: &str| {
        kube::api::ApiResource::from_gvk_with_plural(&kube::api::GroupVersionKind::gvk(g, v, k), p)
    };
    let appset_ar = gvk(
        "argoproj.io",
        "v1alpha1",
        "ApplicationSet",
        "applicationsets",
    );
    let appset_api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "argocd", &appset_ar);
    for a in 0..appsets {
        let o = serde_json::from_value(json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "ApplicationSet",
            "metadata": {"name": format!("appset-{a:03}"), "namespace": "argocd"},
            "spec": {"generators": [], "template": {"metadata": {}, "spec": {"project": "default", "destination": {}}}}}))
            .unwrap();
        appset_api.create(&PostParams::default(), &o).await.unwrap();
    }
    let work_ar = gvk(
        "work.open-cluster-management.io",
        "v1",
        "ManifestWork",
        "manifestworks",
    );
    let t = Instant::now();
    let total = clusters * appsets;
    futures::stream::iter((0..clusters).flat_map(|c| (0..appsets).map(move |a| (c, a))))
        .map(|(c, a)| {
            let client = client.clone();
            let work_ar = work_ar.clone();
            async move {
                let m = meta(c, a);
                let ns = m.namespace.clone().unwrap();
                let name = m.name.clone().unwrap();
                let app = m.annotations.as_ref().unwrap()[names::ANNOTATION_HUB_APPLICATION_NAME].clone();
                let api: Api<DynamicObject> = Api::namespaced_with(client, &ns, &work_ar);
                let o = serde_json::from_value(json!({"apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
                    "metadata": m, "spec": {"workload": {"manifests": [{"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
                        "metadata": {"name": app, "namespace": "argocd"}, "spec": {"project": "default",
                        "source": {"repoURL": "https://github.com/argoproj/argocd-example-apps", "path": "guestbook"},
                        "destination": {"server": "https://kubernetes.default.svc", "namespace": "guestbook"}}}]}}}))
                    .unwrap();
                api.create(&PostParams::default(), &o).await.unwrap();
                let status = json!({"status": status_of(&app, health(c, a))});
                api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status)).await.unwrap();
            }
        })
        .buffer_unordered(32)
        .collect::<Vec<()>>()
        .await;
    println!(
        "hub: {total} works with feedback created in {:?}",
        t.elapsed()
    );

    let server = hub.serve("127.0.0.1:0".parse().unwrap()).await.unwrap();
    // The parent sees the reports through a watch (in process).
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<MulticlusterApplicationSetReport>();
    let report_api: Api<MulticlusterApplicationSetReport> = Api::all(client.clone());
    let watch = tokio::spawn(async move {
        let mut s = std::pin::pin!(
            watcher(report_api, watcher::Config::default())
                .default_backoff()
                .applied_objects()
        );
        while let Some(r) = s.next().await {
            if let Ok(r) = r
                && tx.send(r).is_err()
            {
                break;
            }
        }
    });

    let t = Instant::now();
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .env(CHILD_ENV, server.url())
        .spawn()
        .unwrap();
    let pid = child.id();
    let complete_reports = |r: &MulticlusterApplicationSetReport| {
        r.statuses
            .as_ref()
            .and_then(|s| s.summary.as_ref())
            .is_some_and(|s| s.clusters == clusters.to_string())
    };
    let mut complete = std::collections::HashSet::new();
    tokio::time::timeout(Duration::from_secs(600), async {
        while complete.len() < appsets {
            let r = rx.recv().await.expect("report watch");
            if complete_reports(&r) {
                complete.insert(r.metadata.name.clone().unwrap_or_default());
            }
        }
    })
    .await
    .expect("complete report set");
    let took = t.elapsed();
    let (cpu_start, rss_start, _) = proc_stats(pid);
    println!(
        "hub: complete report set ({appsets} reports × {clusters} clusters) {took:?} after the controller process started; controller CPU {cpu_start:.2} s, RSS {:.0} MiB",
        mib(rss_start)
    );
    // Let the echoes of the writes settle before the change rounds.
    tokio::time::sleep(Duration::from_secs(2)).await;
    while rx.try_recv().is_ok() {}

    // One cluster's status changes.
    let (cpu_before_changes, _, _) = proc_stats(pid);
    let mut worst = Duration::ZERO;
    for round in 0..5 {
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), "cluster-0007", &work_ar);
        let h = if round % 2 == 0 {
            "Degraded"
        } else {
            "Healthy"
        };
        let status = json!({"status": status_of("cluster-0007-appset-003", h)});
        let t = Instant::now();
        api.patch_status(
            "cluster-0007-appset-003-abcde",
            &PatchParams::default(),
            &Patch::Merge(&status),
        )
        .await
        .unwrap();
        tokio::time::timeout(Duration::from_secs(30), async {
            loop {
                let r = rx.recv().await.expect("report watch");
                let reflected = r.metadata.name.as_deref() == Some("appset-003")
                    && r.statuses.as_ref().is_some_and(|s| {
                        s.cluster_conditions
                            .iter()
                            .any(|c| c.cluster == "cluster-0007" && c.health_status == h)
                    });
                if reflected {
                    break;
                }
            }
        })
        .await
        .expect("change reflected");
        let took = t.elapsed();
        worst = worst.max(took);
        println!("hub: one cluster's change reflected in {took:?} (debounce 200 ms included)");
    }
    let (cpu_end, rss_end, hwm) = proc_stats(pid);
    println!(
        "hub: worst change {worst:?}; controller CPU for the 5 changes {:.2} s",
        cpu_end - cpu_before_changes
    );
    println!(
        "memory: controller process RSS {:.0} MiB at the end, peak {:.0} MiB; hub (parent) peak RSS {:.0} MiB",
        mib(rss_end),
        mib(hwm),
        mib(proc_status("VmHWM:"))
    );
    let _ = child.kill();
    let _ = child.wait();
    watch.abort();
    server.shutdown().await;
}

/// CPU seconds (user + system), current RSS and peak RSS (KiB) of a process.
fn proc_stats(pid: u32) -> (f64, u64, u64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    // fields after ")": state(0) … utime(11) stime(12); clock ticks are 100/s on Linux
    let ticks: u64 = f.get(11).and_then(|x| x.parse().ok()).unwrap_or(0)
        + f.get(12).and_then(|x| x.parse().ok()).unwrap_or(0);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|x| x.parse().ok())
            .unwrap_or(0)
    };
    (ticks as f64 / 100.0, field("VmRSS:"), field("VmHWM:"))
}

const CHILD_ENV: &str = "ARGOCD_PULL_GITOPS_BENCH_CHILD_URL";

/// The controller process: the report aggregator only, against the served hub.
async fn child(url: String) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    tracing_subscriber::fmt()
        .with_env_filter("argocd_pull_gitops=info")
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
    let client = kube::Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap();
    let _running = argocd_pull_gitops::start(
        client,
        GitOpsConfig {
            gitopscluster: false,
            ..GitOpsConfig::default()
        },
    )
    .await
    .unwrap();
    std::future::pending::<()>().await;
}

fn main() {
    let clusters = env_usize("BENCH_CLUSTERS", 1000);
    let appsets = env_usize("BENCH_APPSETS", 100);
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    if let Ok(url) = std::env::var(CHILD_ENV) {
        return rt.block_on(child(url));
    }
    pure(clusters, appsets);
    rt.block_on(on_hub(clusters, appsets));
}
