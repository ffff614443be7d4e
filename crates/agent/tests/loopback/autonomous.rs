use argocd_pull_agent::local::LocalPki;
use argocd_pull_agent_core::Mode;
use argocd_pull_agent_core::store::{Kind, MemStore, Store};
use serde_json::json;

use crate::harness::*;

#[tokio::test]
async fn autonomous_create_update_delete_and_operations() {
    let pki = LocalPki::new().unwrap();
    let (hub, spoke) = (MemStore::new(), MemStore::new());
    let p = principal(&pki, &hub, "127.0.0.1:0").await;
    let a = agent(&pki, &p, "auto-1", Mode::Autonomous, &spoke).await;
    let l = put(&spoke, app("argocd", "web", "v1")).await;
    let h = wait_for(&hub, "auto-1", "web", "created on hub", |o| o.is_some())
        .await
        .unwrap();
    assert_eq!(
        h["spec"]["project"], "auto-1-default",
        "project prefixed with the agent name"
    );
    assert_eq!(
        h["metadata"]["annotations"]["argocd.argoproj.io/source-uid"],
        l["metadata"]["uid"]
    );
    assert_eq!(
        h["spec"]["destination"],
        json!({"name": "auto-1", "namespace": "guestbook"}),
        "the hub copy targets the agent's cluster by name (no cluster secret: the agent name)"
    );

    patch(
        &spoke,
        "argocd",
        "web",
        json!({"spec": {"source": {"path": "v2"}}, "status": {"health": {"status": "Healthy"}}}),
    )
    .await;
    wait_for(&hub, "auto-1", "web", "updated", |o| {
        o.is_some_and(|o| {
            o["spec"]["source"]["path"] == "v2" && o["status"]["health"]["status"] == "Healthy"
        })
    })
    .await;

    // hub edits are reverted
    patch(
        &hub,
        "auto-1",
        "web",
        json!({"spec": {"source": {"path": "hub-edit"}}}),
    )
    .await;
    wait_for(&hub, "auto-1", "web", "hub edit reverted", |o| {
        o.is_some_and(|o| o["spec"]["source"]["path"] == "v2")
    })
    .await;

    // sync and terminate still flow down
    patch(
        &hub,
        "auto-1",
        "web",
        json!({"operation": {"sync": {"revision": "r1"}}}),
    )
    .await;
    wait_for(&spoke, "argocd", "web", "operation on agent", |o| {
        o.is_some_and(|o| o["operation"]["sync"]["revision"] == "r1")
    })
    .await;
    patch(
        &hub,
        "auto-1",
        "web",
        json!({"status": {"operationState": {"phase": "Terminating"}}}),
    )
    .await;
    wait_for(&spoke, "argocd", "web", "terminating on agent", |o| {
        o.is_some_and(|o| o["status"]["operationState"]["phase"] == "Terminating")
    })
    .await;

    del(&spoke, "argocd", "web").await;
    wait_for(&hub, "auto-1", "web", "deleted on hub", |o| o.is_none()).await;
    wait_idle(|| p.agent_idle("auto-1") && a.idle()).await;
    assert!(
        hub.get(Kind::Application, "auto-1", "web")
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn autonomous_delete_race_agent_delete_during_hub_edit() {
    let pki = LocalPki::new().unwrap();
    let (hub, spoke) = (MemStore::new(), MemStore::new());
    let p = principal(&pki, &hub, "127.0.0.1:0").await;
    let a = agent(&pki, &p, "auto-2", Mode::Autonomous, &spoke).await;
    for i in 0..10 {
        put(&spoke, app("argocd", &format!("x{i}"), "v1")).await;
    }
    for i in 0..10 {
        wait_for(&hub, "auto-2", &format!("x{i}"), "created", |o| o.is_some()).await;
    }
    for i in 0..10 {
        let n = format!("x{i}");
        tokio::join!(
            try_patch(
                &hub,
                "auto-2",
                &n,
                json!({"spec": {"source": {"path": "hub"}}})
            ),
            del(&spoke, "argocd", &n)
        );
    }
    for i in 0..10 {
        wait_for(&hub, "auto-2", &format!("x{i}"), "deleted on hub", |o| {
            o.is_none()
        })
        .await;
    }
    wait_idle(|| p.agent_idle("auto-2") && a.idle()).await;
    for i in 0..10 {
        assert!(
            hub.get(Kind::Application, "auto-2", &format!("x{i}"))
                .await
                .unwrap()
                .is_none(),
            "no resurrection"
        );
    }
}

#[tokio::test]
async fn autonomous_hub_copy_targets_the_mapped_cluster_and_child_apps_in_the_agent_namespace() {
    use base64::Engine;
    let pki = LocalPki::new().unwrap();
    let (hub, spoke) = (MemStore::new(), MemStore::new());
    // the agent's cluster secret, as `argocd-agentctl agent create` writes it
    hub.create(
        Kind::Secret,
        json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "cluster-auto-2", "namespace": "argocd",
                "labels": {"argocd.argoproj.io/secret-type": "cluster",
                           "argocd-agent.argoproj-labs.io/agent-name": "auto-2"}},
            "data": {"name": base64::engine::general_purpose::STANDARD.encode("edge-paris")}}),
    )
    .await
    .unwrap();
    let p = principal(&pki, &hub, "127.0.0.1:0").await;
    let a = agent(&pki, &p, "auto-2", Mode::Autonomous, &spoke).await;
    let mut parent = app("argocd", "parent", "apps");
    parent["status"] = json!({"resources": [
        {"group": "argoproj.io", "kind": "Application", "namespace": "argocd", "name": "child"},
        {"group": "apps", "kind": "Deployment", "namespace": "web", "name": "web"}]});
    put(&spoke, parent).await;
    let h = wait_for(&hub, "auto-2", "parent", "created on hub", |o| {
        o.is_some_and(|o| o["status"]["resources"].is_array())
    })
    .await
    .unwrap();
    assert_eq!(
        h["spec"]["destination"],
        json!({"name": "edge-paris", "namespace": "guestbook"})
    );
    assert_eq!(
        h["status"]["resources"],
        json!([{"group": "argoproj.io", "kind": "Application", "namespace": "auto-2", "name": "child"},
               {"group": "apps", "kind": "Deployment", "namespace": "web", "name": "web"}]),
        "child Applications point at their hub copies (app-of-apps in the UI)"
    );
    a.shutdown().await;
    p.shutdown().await;
}
