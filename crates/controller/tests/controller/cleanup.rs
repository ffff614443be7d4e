use argocd_pull_api::names::FINALIZER_ARGOCD_RESOURCES;
use kube::ResourceExt;
use kube::api::DeleteParams;
use serde_json::json;

use crate::support::*;

#[tokio::test]
async fn delete_without_finalizer_removes_the_work() {
    let env = Env::new().await;
    env.cluster("cluster1", true).await;
    let running = env.start().await;
    let app = env.create_app("app1", "cluster1", json!({})).await;
    eventually("work created", || env.work_of(&app, "cluster1")).await;
    env.apps()
        .delete("app1", &DeleteParams::default())
        .await
        .unwrap();
    eventually("work deleted", || async {
        env.work_of(&app, "cluster1").await.is_none().then_some(())
    })
    .await;
    running.shutdown().await;
}

#[tokio::test]
async fn delete_with_resources_finalizer_removes_work_then_only_that_finalizer() {
    let env = Env::new().await;
    env.cluster("cluster1", true).await;
    let running = env.start().await;
    let app = env
        .create_app(
            "app1",
            "cluster1",
            json!({"metadata": {"finalizers": [FINALIZER_ARGOCD_RESOURCES, "example.com/keep"]}}),
        )
        .await;
    let work = eventually("work created", || env.work_of(&app, "cluster1")).await;
    // the payload carries the finalizer so that the spoke cascades
    assert_eq!(
        work.spec.workload.manifests[0]["metadata"]["finalizers"],
        json!([FINALIZER_ARGOCD_RESOURCES, "example.com/keep"])
    );
    env.apps()
        .delete("app1", &DeleteParams::default())
        .await
        .unwrap();
    eventually("work deleted", || async {
        env.work_of(&app, "cluster1").await.is_none().then_some(())
    })
    .await;
    let remaining = eventually("resources finalizer removed", || async {
        let a = env.get_app("app1").await?;
        (!a.finalizers()
            .iter()
            .any(|f| f == FINALIZER_ARGOCD_RESOURCES))
        .then_some(a)
    })
    .await;
    assert_eq!(remaining.finalizers(), ["example.com/keep"]);
    running.shutdown().await;
}

#[tokio::test]
async fn delete_with_finalizer_when_work_is_already_gone() {
    let env = Env::new().await;
    env.cluster("cluster1", true).await;
    let app = env
        .create_app(
            "app1",
            "cluster1",
            json!({"metadata": {"finalizers": [FINALIZER_ARGOCD_RESOURCES]}}),
        )
        .await;
    env.apps()
        .delete("app1", &DeleteParams::default())
        .await
        .unwrap();
    let running = env.start().await;
    eventually("Application gone", || async {
        env.get_app("app1").await.is_none().then_some(())
    })
    .await;
    assert!(env.work_of(&app, "cluster1").await.is_none());
    running.shutdown().await;
}

#[tokio::test]
async fn application_deleted_while_stopped_is_swept_at_restart() {
    let env = Env::new().await;
    env.cluster("cluster1", true).await;
    let running = env.start().await;
    let app = env.create_app("app1", "cluster1", json!({})).await;
    let keep = env.create_app("keep", "cluster1", json!({})).await;
    eventually("works created", || async {
        (env.work_of(&app, "cluster1").await.is_some()
            && env.work_of(&keep, "cluster1").await.is_some())
        .then_some(())
    })
    .await;
    running.shutdown().await;

    env.apps()
        .delete("app1", &DeleteParams::default())
        .await
        .unwrap();
    assert!(
        env.work_of(&app, "cluster1").await.is_some(),
        "nobody cleaned up while stopped"
    );

    let running = env.start().await;
    eventually("startup sweep deleted the orphan", || async {
        env.work_of(&app, "cluster1").await.is_none().then_some(())
    })
    .await;
    assert!(env.work_of(&keep, "cluster1").await.is_some());
    running.shutdown().await;
}

#[tokio::test]
async fn moving_to_another_cluster_removes_the_old_work() {
    let env = Env::new().await;
    env.cluster("cluster1", true).await;
    env.cluster("cluster2", true).await;
    let running = env.start().await;
    let app = env.create_app("app1", "cluster1", json!({})).await;
    eventually("work in cluster1", || env.work_of(&app, "cluster1")).await;
    env.patch_app(
        "app1",
        json!({"metadata": {"annotations": {argocd_pull_api::names::ANNOTATION_OCM_MANAGED_CLUSTER: "cluster2"}}}),
    )
    .await;
    eventually("work in cluster2", || env.work_of(&app, "cluster2")).await;
    eventually("old work removed", || async {
        env.work_of(&app, "cluster1").await.is_none().then_some(())
    })
    .await;
    running.shutdown().await;
}

/// A sweep walks every work: new Applications do not request one (they cannot have left a stale
/// work), or creating N of them would cost O(N²). A change of a known one still does (above).
#[tokio::test]
async fn new_applications_do_not_sweep() {
    let env = Env::new().await;
    env.cluster("cluster1", true).await;
    let running = env.start().await;
    // the sweep after the first list
    eventually("the first sweep", || async {
        (running.metrics().sweeps.get() >= 1).then_some(())
    })
    .await;
    let before = running.metrics().sweeps.get();
    for i in 0..20 {
        let app = env
            .create_app(&format!("app{i}"), "cluster1", json!({}))
            .await;
        eventually("its work", || env.work_of(&app, "cluster1")).await;
    }
    // at most the sweep the first list requested (it may still have been pending)
    let after = running.metrics().sweeps.get();
    assert!(
        after <= before + 1,
        "{} sweeps for 20 new Applications",
        after - before
    );
    // a deleted one still sweeps its work away
    env.apps()
        .delete("app0", &DeleteParams::default())
        .await
        .unwrap();
    eventually("a sweep after the delete", || async {
        (running.metrics().sweeps.get() > after).then_some(())
    })
    .await;
    running.shutdown().await;
}

#[tokio::test]
async fn disabled_cleanup_leaves_works() {
    let env = Env::new().await;
    env.cluster("cluster1", true).await;
    let mut config = Env::config();
    config.cleanup = false;
    let running = env.start_with(config).await;
    let app = env.create_app("app1", "cluster1", json!({})).await;
    eventually("work created", || env.work_of(&app, "cluster1")).await;
    env.apps()
        .delete("app1", &DeleteParams::default())
        .await
        .unwrap();
    let report = running.resync().await.unwrap();
    assert_eq!(report.sweep.deleted, 0);
    assert!(env.work_of(&app, "cluster1").await.is_some());
    running.shutdown().await;
}
