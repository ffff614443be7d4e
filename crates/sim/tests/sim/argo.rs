use argocd_pull_api::argocd::Application;
use argocd_pull_api::ocm::work::ManifestWork;
use argocd_pull_sim::FAIL_ANNOTATION;
use argocd_pull_sim::wait::{wait_deleted, wait_for};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::common::*;

fn phase(a: &Application) -> Option<&str> {
    a.status
        .as_ref()?
        .operation_state
        .as_ref()?
        .phase
        .as_deref()
}

#[tokio::test]
async fn sync_failure_on_request_reaches_the_hub_work() {
    let fleet = fleet(1).await;
    let works: Api<ManifestWork> = Api::namespaced(fleet.hub_client(), "cluster1");
    let mut payload = app_payload("bad");
    payload["metadata"]["annotations"] = json!({FAIL_ANNOTATION: "sync"});
    works
        .create(
            &PostParams::default(),
            &work("cluster1", "bad", vec![payload], vec![pull_config("bad")]),
        )
        .await
        .unwrap();
    let apps = fleet.cluster("cluster1").unwrap().applications("argocd");
    let app = wait_for(&apps, "bad", T, |a: &Application| {
        phase(a) == Some("Failed")
    })
    .await
    .unwrap();
    assert_eq!(app.sync_status(), Some("OutOfSync"));
    assert_eq!(app.health_status(), Some("Degraded"));
    let conds = app.status.as_ref().unwrap().conditions.clone().unwrap();
    assert_eq!(conds[0].type_, "SyncError");
    let w = wait_for(&works, "bad", T, |w: &ManifestWork| {
        feedback(w, 0, "operationStatePhase").as_deref() == Some("Failed")
    })
    .await
    .unwrap();
    assert_eq!(feedback(&w, 0, "syncStatus").as_deref(), Some("OutOfSync"));
    fleet.shutdown().await;
}

#[tokio::test]
async fn health_and_error_failures_and_revision_override() {
    let fleet = fleet(1).await;
    let apps = fleet.cluster("cluster1").unwrap().applications("argocd");
    let mut sick = app_payload("sick");
    sick["metadata"]["annotations"] =
        json!({FAIL_ANNOTATION: "health", "sim.argocd-pull.io/revision": "cafe"});
    let mut err = app_payload("err");
    err["metadata"]["annotations"] = json!({FAIL_ANNOTATION: "error"});
    for a in [sick, err] {
        apps.create(&PostParams::default(), &serde_json::from_value(a).unwrap())
            .await
            .unwrap();
    }
    let a = wait_for(&apps, "sick", T, |a: &Application| {
        a.health_status() == Some("Degraded")
    })
    .await
    .unwrap();
    assert_eq!(a.sync_status(), Some("Synced"));
    assert_eq!(phase(&a), Some("Succeeded"));
    assert_eq!(
        a.status
            .as_ref()
            .unwrap()
            .sync
            .as_ref()
            .unwrap()
            .revision
            .as_deref(),
        Some("cafe")
    );
    wait_for(&apps, "err", T, |a: &Application| phase(a) == Some("Error"))
        .await
        .unwrap();
    fleet.shutdown().await;
}

#[tokio::test]
async fn started_at_is_stable_and_spec_change_resyncs() {
    let fleet = fleet(1).await;
    let apps = fleet.cluster("cluster1").unwrap().applications("argocd");
    apps.create(
        &PostParams::default(),
        &serde_json::from_value(app_payload("s")).unwrap(),
    )
    .await
    .unwrap();
    let running = wait_for(&apps, "s", T, |a: &Application| phase(a).is_some())
        .await
        .unwrap();
    let started = running.status.unwrap().operation_state.unwrap().started_at;
    let done = wait_for(&apps, "s", T, |a: &Application| {
        a.health_status() == Some("Healthy")
    })
    .await
    .unwrap();
    assert_eq!(
        done.status
            .as_ref()
            .unwrap()
            .operation_state
            .as_ref()
            .unwrap()
            .started_at,
        started
    );
    let rev1 = done.status.unwrap().sync.unwrap().revision;

    apps.patch(
        "s",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"source": {"targetRevision": "v2"}}})),
    )
    .await
    .unwrap();
    let again = wait_for(&apps, "s", T, |a: &Application| {
        a.health_status() == Some("Healthy")
            && a.status.as_ref().unwrap().sync.as_ref().unwrap().revision != rev1
    })
    .await
    .unwrap();
    assert_eq!(again.sync_status(), Some("Synced"));
    fleet.shutdown().await;
}

#[tokio::test]
async fn resources_finalizer_cascades_and_plain_delete_orphans() {
    let fleet = fleet(1).await;
    let spoke = fleet.cluster("cluster1").unwrap();
    let apps = spoke.applications("argocd");
    let mut plain = app_payload("plain");
    plain["metadata"]["finalizers"] = json!([]);
    plain["spec"]["destination"]["namespace"] = json!("plain-ns");
    for a in [app_payload("casc"), plain] {
        apps.create(&PostParams::default(), &serde_json::from_value(a).unwrap())
            .await
            .unwrap();
    }
    let gb: Api<ConfigMap> = Api::namespaced(spoke.client(), "guestbook");
    let pl: Api<ConfigMap> = Api::namespaced(spoke.client(), "plain-ns");
    wait_for(&gb, "casc", T, |_| true).await.unwrap();
    wait_for(&pl, "plain", T, |_| true).await.unwrap();
    apps.delete("casc", &DeleteParams::default()).await.unwrap();
    apps.delete("plain", &DeleteParams::default())
        .await
        .unwrap();
    wait_deleted(&apps, "casc", T).await.unwrap();
    wait_deleted(&apps, "plain", T).await.unwrap();
    assert!(gb.get_opt("casc").await.unwrap().is_none(), "cascaded");
    assert!(
        pl.get_opt("plain").await.unwrap().is_some(),
        "no finalizer: resources stay"
    );
    fleet.shutdown().await;
}
