use argocd_pull_api::names::*;
use argocd_pull_domain::{WorkOptions, appset_hash, desired_work};
use argocd_pull_hub::Fault;
use futures::StreamExt;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use kube::api::{ListParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::support::*;

#[tokio::test]
async fn create_propagates_payload_and_leaves_hub_spec_alone() {
    let env = Env::new().await;
    env.cluster("cluster1", true).await;
    let running = env.start().await;
    let app = env.create_app("app1", "cluster1", json!({})).await;
    let work = eventually("work created", || env.work_of(&app, "cluster1")).await;

    assert_eq!(
        work.name_any(),
        format!("app1-{}", &app.uid().unwrap()[..5])
    );
    assert_eq!(work.labels()[LABEL_PULL_TO_OCM], "true");
    assert_eq!(
        work.annotations()[ANNOTATION_HUB_APPLICATION_NAMESPACE],
        "argocd"
    );
    assert_eq!(work.annotations()[ANNOTATION_HUB_APPLICATION_NAME], "app1");
    let payload = &work.spec.workload.manifests[0];
    assert_eq!(
        payload["metadata"],
        json!({"name": "app1", "namespace": "argocd"})
    );
    assert_eq!(
        payload["spec"]["destination"],
        json!({"server": IN_CLUSTER_SERVER, "name": "", "namespace": "guestbook"})
    );
    let paths: Vec<_> = work.spec.manifest_configs[0].feedback_rules[0]
        .json_paths
        .iter()
        .map(|p| p.name.as_str())
        .collect();
    assert_eq!(paths.len(), 5);

    // the hub Application's spec is never modified
    let hub = env.get_app("app1").await.unwrap();
    assert_eq!(hub.spec, app.spec);
    assert_eq!(
        hub.spec.destination.server.as_deref(),
        Some("https://hub.example:6443")
    );
    assert_eq!(env.works_in("cluster1").await.len(), 1);
    running.shutdown().await;
}

#[tokio::test]
async fn update_rewrites_the_work() {
    let env = Env::new().await;
    env.cluster("cluster1", true).await;
    let running = env.start().await;
    let app = env.create_app("app1", "cluster1", json!({})).await;
    eventually("work created", || env.work_of(&app, "cluster1")).await;
    env.patch_app(
        "app1",
        json!({"spec": {"source": {"path": "helm-guestbook"}}}),
    )
    .await;
    eventually("payload updated", || async {
        let w = env.work_of(&app, "cluster1").await?;
        (w.spec.workload.manifests[0]["spec"]["source"]["path"] == "helm-guestbook").then_some(())
    })
    .await;
    running.shutdown().await;
}

#[tokio::test]
async fn status_only_updates_do_not_reconcile() {
    let env = Env::new().await;
    env.cluster("cluster1", true).await;
    let running = env.start().await;
    let app = env.create_app("app1", "cluster1", json!({})).await;
    eventually("work created", || env.work_of(&app, "cluster1")).await;
    running.resync().await.unwrap();
    let before = running.metrics().reconcile.reconciles("propagation");
    env.patch_app(
        "app1",
        json!({"status": {"reconciledAt": "2024-01-01T00:00:00Z"}}),
    )
    .await;
    // a spec change after the status change: once it is propagated, the status change was seen too
    env.patch_app("app1", json!({"spec": {"source": {"path": "p2"}}}))
        .await;
    eventually("payload updated", || async {
        let w = env.work_of(&app, "cluster1").await?;
        (w.spec.workload.manifests[0]["spec"]["source"]["path"] == "p2").then_some(())
    })
    .await;
    let after = running.metrics().reconcile.reconciles("propagation");
    // the spec change (plus the echo of our own work update) — not the status change
    assert!(after - before <= 2, "reconciles: {}", after - before);
    running.shutdown().await;
}

#[tokio::test]
async fn applicationset_owned_application() {
    let env = Env::new().await;
    env.cluster("cluster1", true).await;
    let running = env.start().await;
    let app = env
        .create_app(
            "app1",
            "cluster1",
            json!({"metadata": {"ownerReferences": [{
                "apiVersion": "argoproj.io/v1alpha1", "kind": "ApplicationSet", "name": "guestbook", "uid": "set-uid"
            }]}}),
        )
        .await;
    let work = eventually("work created", || env.work_of(&app, "cluster1")).await;
    assert_eq!(work.labels()[LABEL_APPLICATION_SET], "true");
    assert_eq!(
        work.labels()[LABEL_APPLICATION_SET_HASH],
        appset_hash("argocd", "guestbook")
    );
    assert_eq!(
        work.annotations()[HOSTING_APPLICATIONSET],
        "argocd/guestbook"
    );
    let payload = &work.spec.workload.manifests[0];
    assert_eq!(payload["metadata"]["labels"][LABEL_APPLICATION_SET], "true");
    assert_eq!(
        payload["metadata"]["annotations"][HOSTING_APPLICATIONSET],
        "argocd/guestbook"
    );
    assert!(payload["metadata"].get("ownerReferences").is_none());
    running.shutdown().await;
}

#[tokio::test]
async fn operation_and_refresh_are_handed_over_then_stripped() {
    let env = Env::new().await;
    env.cluster("cluster1", true).await;
    // record every version of works in cluster1
    let works: Api<argocd_pull_api::ocm::work::ManifestWork> = env.works("cluster1");
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let recorder = {
        let seen = seen.clone();
        tokio::spawn(async move {
            let mut s = std::pin::pin!(watcher(works, Default::default()).applied_objects());
            while let Some(Ok(w)) = s.next().await {
                seen.lock().unwrap().push(w);
            }
        })
    };
    let running = env.start().await;
    let app = env
        .create_app(
            "app1",
            "cluster1",
            json!({
                "metadata": {"annotations": {ANNOTATION_REFRESH: "hard"}},
                "operation": {"sync": {"revision": "HEAD"}, "initiatedBy": {"username": "alice"}}
            }),
        )
        .await;
    let hub = eventually("operation and refresh stripped", || async {
        let a = env.get_app("app1").await?;
        (a.operation.is_none() && !a.annotations().contains_key(ANNOTATION_REFRESH)).then_some(a)
    })
    .await;
    assert_eq!(hub.spec, app.spec);
    eventually(
        "the work carried the operation and the refresh annotation",
        || async {
            seen.lock()
                .unwrap()
                .iter()
                .any(|w| {
                    let p = &w.spec.workload.manifests[0];
                    p["operation"]["sync"]["revision"] == "HEAD"
                        && p["metadata"]["annotations"][ANNOTATION_REFRESH] == "hard"
                })
                .then_some(())
        },
    )
    .await;
    recorder.abort();
    running.shutdown().await;
}

async fn events_for(env: &Env, app: &str, reason: &str) -> Option<K8sEvent> {
    let api: Api<K8sEvent> = Api::namespaced(env.client.clone(), "argocd");
    api.list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .find(|e| {
            e.reason.as_deref() == Some(reason)
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(app)
        })
}

#[tokio::test]
async fn missing_cluster_is_reported_then_picked_up() {
    let env = Env::new().await;
    let running = env.start().await;
    let app = env.create_app("app1", "late", json!({})).await;
    let event = eventually("ManagedClusterNotFound event", || {
        events_for(&env, "app1", "ManagedClusterNotFound")
    })
    .await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert!(event.note.unwrap().contains("\"late\""));
    // the failed reconcile is counted with its reason, and timed, as /metrics renders them
    let m = running.metrics().clone();
    eventually("reconcile error counted", || async {
        (m.reconcile.errors("propagation", "cluster_missing") >= 1).then_some(())
    })
    .await;
    let mut registry = argocd_pull_ops::metrics::Registry::with_prefix("argocd_pull");
    m.register(&mut registry);
    let body = argocd_pull_ops::metrics::render(&registry);
    let value = |series: &str| -> u64 {
        let line = body
            .lines()
            .find(|l| l.starts_with(series))
            .unwrap_or_else(|| panic!("{series} in\n{body}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    assert!(
        value(
            r#"argocd_pull_reconcile_errors_total{controller="propagation",reason="cluster_missing"} "#
        ) >= 1
    );
    assert_eq!(
        value(r#"argocd_pull_reconcile_errors_total{controller="propagation",reason="api"} "#),
        0
    );
    assert!(
        value(r#"argocd_pull_reconcile_duration_seconds_count{controller="propagation"} "#) >= 1
    );
    assert!(value(r#"argocd_pull_reconciles_total{controller="propagation"} "#) >= 1);
    env.namespace("late").await;
    assert!(env.work_of(&app, "late").await.is_none());
    env.cluster("late", false).await;
    eventually("work created once the cluster exists", || {
        env.work_of(&app, "late")
    })
    .await;
    running.shutdown().await;
}

#[tokio::test]
async fn missing_cluster_namespace_is_reported_and_retried() {
    let env = Env::new().await;
    env.cluster("cluster1", false).await;
    let running = env.start().await;
    let app = env.create_app("app1", "cluster1", json!({})).await;
    eventually("ClusterNamespaceNotFound event", || {
        events_for(&env, "app1", "ClusterNamespaceNotFound")
    })
    .await;
    env.namespace("cluster1").await;
    eventually("work created once the namespace exists", || {
        env.work_of(&app, "cluster1")
    })
    .await;
    running.shutdown().await;
}

#[tokio::test]
async fn unselected_applications_are_ignored() {
    let env = Env::new().await;
    env.cluster("cluster1", true).await;
    let running = env.start().await;
    env.create_app(
        "off",
        "cluster1",
        json!({"metadata": {"labels": {LABEL_PULL_TO_OCM: "false"}}}),
    )
    .await;
    env.create_app("nocluster", "", json!({})).await;
    let on = env.create_app("on", "cluster1", json!({})).await;
    eventually("selected app propagated", || env.work_of(&on, "cluster1")).await;
    running.resync().await.unwrap();
    assert_eq!(env.works_in("cluster1").await.len(), 1);
    running.shutdown().await;
}

#[tokio::test]
async fn work_update_conflicts_are_retried() {
    let env = Env::new().await;
    env.cluster("cluster1", true).await;
    let running = env.start().await;
    let app = env.create_app("app1", "cluster1", json!({})).await;
    eventually("work created", || env.work_of(&app, "cluster1")).await;
    env.hub.inject_fault(Fault::conflict("manifestworks", 3));
    env.patch_app("app1", json!({"spec": {"source": {"path": "changed"}}}))
        .await;
    eventually("payload updated despite conflicts", || async {
        let w = env.work_of(&app, "cluster1").await?;
        (w.spec.workload.manifests[0]["spec"]["source"]["path"] == "changed").then_some(())
    })
    .await;
    running.shutdown().await;
}

#[tokio::test]
async fn go_made_work_is_adopted_without_writes() {
    let env = Env::new().await;
    env.cluster("cluster1", true).await;
    let app = env.create_app("app1", "cluster1", json!({})).await;
    // what the Go controller wrote: same name and content, without the CRD defaults we spell out
    let mut go = desired_work(&app, &WorkOptions::default()).unwrap();
    let cfg = &mut go.spec.manifest_configs[0];
    cfg.feedback_scrape_type = None;
    cfg.update_strategy
        .as_mut()
        .unwrap()
        .server_side_apply
        .as_mut()
        .unwrap()
        .field_manager = None;
    env.works("cluster1")
        .create(
            &PostParams {
                field_manager: Some("manager".into()),
                ..Default::default()
            },
            &go,
        )
        .await
        .unwrap();
    let before = env.hub.counters();
    let running = env.start().await;
    running.resync().await.unwrap();
    running.resync().await.unwrap();
    let writes = env.hub.counters().since(&before);
    assert_eq!(
        writes.writes_to("manifestworks"),
        0,
        "{:?}",
        writes.entries()
    );
    assert_eq!(env.works_in("cluster1").await.len(), 1);
    running.shutdown().await;
}

#[tokio::test]
async fn binding_gate_waits_for_a_placement_decision() {
    let env = Env::new().await;
    env.cluster("cluster1", true).await;
    let mut config = Env::config();
    config.binding_gate = true;
    let running = env.start_with(config).await;
    let app = env.create_app("app1", "cluster1", json!({})).await;
    running.resync().await.unwrap();
    assert!(env.work_of(&app, "cluster1").await.is_none());
    let pd: argocd_pull_api::ocm::cluster::PlacementDecision = serde_json::from_value(json!({
        "metadata": {"name": "p-decision-1", "namespace": "argocd",
            "labels": {LABEL_PLACEMENT: "p"}}
    }))
    .unwrap();
    let api: Api<argocd_pull_api::ocm::cluster::PlacementDecision> =
        Api::namespaced(env.client.clone(), "argocd");
    api.create(&PostParams::default(), &pd).await.unwrap();
    api.patch_status(
        "p-decision-1",
        &Default::default(),
        &kube::api::Patch::Merge(
            json!({"status": {"decisions": [{"clusterName": "cluster1", "reason": ""}]}}),
        ),
    )
    .await
    .unwrap();
    eventually("work created once bound", || env.work_of(&app, "cluster1")).await;
    running.shutdown().await;
}

#[tokio::test]
async fn acm_extras_are_sent_first() {
    let env = Env::new().await;
    env.cluster("cluster1", true).await;
    let mut config = Env::config();
    config.work.acm_extras = true;
    let running = env.start_with(config).await;
    let app = env.create_app("app1", "cluster1", json!({})).await;
    let work = eventually("work created", || env.work_of(&app, "cluster1")).await;
    let kinds: Vec<_> = work
        .spec
        .workload
        .manifests
        .iter()
        .map(|m| m["kind"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(kinds, ["Namespace", "AppProject", "Application"]);
    assert_eq!(
        work.spec
            .delete_option
            .as_ref()
            .unwrap()
            .propagation_policy
            .as_deref(),
        Some("SelectivelyOrphan")
    );
    running.shutdown().await;
}
