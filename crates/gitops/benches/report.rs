//! Report benchmark: 1,000 clusters × 100 ApplicationSets = 100,000 ManifestWorks with feedback.
//!
//! `cargo bench -p argocd-pull-gitops` (env `BENCH_CLUSTERS`, `BENCH_APPSETS` to scale down).
//! 1. Pure: the aggregator's index fed 100,000 works in memory → 100 reports.
//! 2. Embedded hub: works created directly (with status feedback), then the aggregator started:
//!    time to the complete report set, time to reflect one cluster's change, memory.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use argocd_pull_api::names;
use argocd_pull_api::ocm::work::{
    FeedbackValue, FieldValue, ManifestCondition, ManifestResourceMeta, ManifestResourceStatus,
    ManifestWorkStatus, StatusFeedbackResult,
};
use argocd_pull_gitops::aggregator::{Decision, Index};
use argocd_pull_gitops::{GitOpsConfig, metrics::WriteLabel};
use futures::StreamExt;
use kube::api::{Api, DynamicObject, ObjectMeta, Patch, PatchParams, PostParams};
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
    let rss_before = proc_status("VmRSS:");

    let t = Instant::now();
    let running = argocd_pull_gitops::start(
        client.clone(),
        GitOpsConfig {
            gitopscluster: false,
            ..GitOpsConfig::default()
        },
    )
    .await
    .unwrap();
    let applies = || {
        running
            .metrics
            .writes
            .get_or_create(&WriteLabel {
                controller: "appset-report".into(),
                kind: "MulticlusterApplicationSetReport".into(),
                verb: "apply".into(),
            })
            .get()
    };
    tokio::time::timeout(Duration::from_secs(600), async {
        while applies() < appsets as u64 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("complete report set");
    let complete = t.elapsed();
    let report_api: Api<argocd_pull_api::report::MulticlusterApplicationSetReport> =
        Api::namespaced(client.clone(), "argocd");
    let r = report_api.get("appset-000").await.unwrap();
    assert_eq!(
        r.statuses.unwrap().summary.unwrap().clusters,
        clusters.to_string()
    );
    println!(
        "hub: complete report set ({appsets} reports × {clusters} clusters) {complete:?} after start"
    );

    // One cluster's status changes.
    let mut worst = Duration::ZERO;
    for round in 0..5 {
        let before = applies();
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
            while applies() <= before {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
        .await
        .expect("change reflected");
        let took = t.elapsed();
        worst = worst.max(took);
        println!("hub: one cluster's change reflected in {took:?} (debounce 200 ms included)");
    }
    println!("hub: worst change {worst:?}");
    let rss_after = proc_status("VmRSS:");
    println!(
        "memory: process peak RSS (hub + controller) {:.0} MiB; RSS before the controller started {:.0} MiB, after {:.0} MiB (controller share ≈ {:.0} MiB)",
        mib(proc_status("VmHWM:")),
        mib(rss_before),
        mib(rss_after),
        mib(rss_after.saturating_sub(rss_before))
    );
    running.shutdown().await;
}

fn main() {
    let clusters = env_usize("BENCH_CLUSTERS", 1000);
    let appsets = env_usize("BENCH_APPSETS", 100);
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    pure(clusters, appsets);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(on_hub(clusters, appsets));
}
