//! Deletion through deletionTimestamp: the hub Application is marked for deletion, the agent
//! deletes its copy in the foreground and reports `delete`, the principal then removes the Argo CD
//! finalizers from the hub object.
use argocd_pull_agent::local::LocalPki;
use argocd_pull_agent_core::Mode;
use argocd_pull_agent_core::store::MemStore;
use serde_json::{Value, json};

use crate::harness::*;

const RESOURCES_FINALIZER: &str = "resources-finalizer.argocd.argoproj.io";

fn app_with_finalizers(ns: &str, name: &str, fins: &[&str]) -> Value {
    let mut a = app(ns, name, "v1");
    a["metadata"]["finalizers"] = json!(fins);
    a
}

/// What the managed cluster's Argo CD application controller does once the workload is gone.
async fn local_controller_finishes(spoke: &MemStore, name: &str) {
    patch(
        spoke,
        "argocd",
        name,
        json!({"metadata": {"finalizers": null}}),
    )
    .await;
}

#[tokio::test]
async fn managed_delete_with_resources_finalizer_completes_on_both_sides() {
    let pki = LocalPki::new().unwrap();
    let (hub, spoke) = (MemStore::new(), MemStore::new());
    let p = principal(&pki, &hub, "127.0.0.1:0").await;
    let a = agent(&pki, &p, "c1", Mode::Managed, &spoke).await;
    put(
        &hub,
        app_with_finalizers("c1", "guestbook", &[RESOURCES_FINALIZER]),
    )
    .await;
    put(
        &hub,
        app_with_finalizers("c1", "shared", &[RESOURCES_FINALIZER, "example.com/audit"]),
    )
    .await;
    for n in ["guestbook", "shared"] {
        let l = wait_for(&spoke, "argocd", n, "created", |o| o.is_some())
            .await
            .unwrap();
        assert!(
            l["metadata"]["finalizers"]
                .as_array()
                .unwrap()
                .contains(&json!(RESOURCES_FINALIZER)),
            "the local copy carries the resources finalizer: the local Argo CD cascades"
        );
    }

    del(&hub, "c1", "guestbook").await;
    // the hub object is only marked; the agent deletes in the foreground
    wait_for(
        &spoke,
        "argocd",
        "guestbook",
        "local copy terminating",
        |o| o.is_some_and(|o| o["metadata"]["deletionTimestamp"].is_string()),
    )
    .await;
    let h = wait_for(&hub, "c1", "guestbook", "hub still terminating", |o| {
        o.is_some()
    })
    .await
    .unwrap();
    assert!(
        h["metadata"]["deletionTimestamp"].is_string(),
        "the hub object waits for the managed cluster"
    );
    local_controller_finishes(&spoke, "guestbook").await;
    wait_for(&spoke, "argocd", "guestbook", "local copy gone", |o| {
        o.is_none()
    })
    .await;
    wait_for(
        &hub,
        "c1",
        "guestbook",
        "hub object gone (finalizer removed)",
        |o| o.is_none(),
    )
    .await;

    // a foreign finalizer stays for its owner
    del(&hub, "c1", "shared").await;
    wait_for(&spoke, "argocd", "shared", "local terminating", |o| {
        o.is_some_and(|o| o["metadata"]["deletionTimestamp"].is_string())
    })
    .await;
    local_controller_finishes(&spoke, "shared").await;
    let h = wait_for(&hub, "c1", "shared", "argocd finalizer removed", |o| {
        o.is_some_and(|o| o["metadata"]["finalizers"] == json!(["example.com/audit"]))
    })
    .await
    .unwrap();
    assert!(h["metadata"]["deletionTimestamp"].is_string());
    patch(
        &hub,
        "c1",
        "shared",
        json!({"metadata": {"finalizers": null}}),
    )
    .await;
    wait_for(&hub, "c1", "shared", "gone", |o| o.is_none()).await;
    wait_idle(|| p.agent_idle("c1") && a.idle()).await;
    a.shutdown().await;
    p.shutdown().await;
}

#[tokio::test]
async fn managed_delete_with_finalizer_while_the_agent_is_down_is_not_stuck() {
    let pki = LocalPki::new().unwrap();
    let (hub, spoke) = (MemStore::new(), MemStore::new());
    let p = principal(&pki, &hub, "127.0.0.1:0").await;
    let a = agent(&pki, &p, "c1", Mode::Managed, &spoke).await;
    put(
        &hub,
        app_with_finalizers("c1", "app", &[RESOURCES_FINALIZER]),
    )
    .await;
    wait_for(&spoke, "argocd", "app", "created", |o| o.is_some()).await;
    wait_idle(|| p.agent_idle("c1") && a.idle()).await;
    a.shutdown().await;

    del(&hub, "c1", "app").await;
    let a = agent(&pki, &p, "c1", Mode::Managed, &spoke).await;
    wait_for(
        &spoke,
        "argocd",
        "app",
        "local terminating after resync",
        |o| o.is_some_and(|o| o["metadata"]["deletionTimestamp"].is_string()),
    )
    .await;
    local_controller_finishes(&spoke, "app").await;
    wait_for(&hub, "c1", "app", "hub deletion completes", |o| o.is_none()).await;
    a.shutdown().await;
    p.shutdown().await;
}
