use argocd_pull_agent::local::LocalPki;
use argocd_pull_agent_core::Mode;
use argocd_pull_agent_core::store::MemStore;
use serde_json::json;

use crate::harness::*;

#[tokio::test]
async fn managed_agent_down_while_hub_changes_then_restarts() {
    let pki = LocalPki::new().unwrap();
    let (hub, spoke) = (MemStore::new(), MemStore::new());
    let p = principal(&pki, &hub, "127.0.0.1:0").await;
    let a = agent(&pki, &p, "c1", Mode::Managed, &spoke).await;
    put(&hub, app("c1", "keep", "v1")).await;
    put(&hub, app("c1", "gone", "v1")).await;
    wait_for(&spoke, "argocd", "keep", "created", |o| o.is_some()).await;
    wait_for(&spoke, "argocd", "gone", "created", |o| o.is_some()).await;
    wait_idle(|| p.agent_idle("c1")).await;
    a.shutdown().await; // agent process gone: its memory is lost
    patch(
        &hub,
        "c1",
        "keep",
        json!({"spec": {"source": {"path": "v2"}}, "operation": {"sync": {"revision": "r9"}}}),
    )
    .await;
    del(&hub, "c1", "gone").await;
    put(&hub, app("c1", "new", "v1")).await;
    let _a = agent(&pki, &p, "c1", Mode::Managed, &spoke).await;
    wait_for(&spoke, "argocd", "keep", "updated", |o| {
        o.is_some_and(|o| {
            o["spec"]["source"]["path"] == "v2" && o["operation"]["sync"]["revision"] == "r9"
        })
    })
    .await;
    wait_for(&spoke, "argocd", "gone", "deleted", |o| o.is_none()).await;
    wait_for(&spoke, "argocd", "new", "created", |o| o.is_some()).await;
}

#[tokio::test]
async fn managed_principal_restart_with_changes_on_both_sides() {
    let pki = LocalPki::new().unwrap();
    let (hub, spoke) = (MemStore::new(), MemStore::new());
    let p = principal(&pki, &hub, "127.0.0.1:0").await;
    let addr = p.local_addr().to_string();
    let a = agent(&pki, &p, "c1", Mode::Managed, &spoke).await;
    put(&hub, app("c1", "one", "v1")).await;
    put(&hub, app("c1", "two", "v1")).await;
    wait_for(&spoke, "argocd", "one", "created", |o| o.is_some()).await;
    wait_for(&spoke, "argocd", "two", "created", |o| o.is_some()).await;
    wait_idle(|| p.agent_idle("c1") && a.idle()).await;
    let n = a.connections();
    p.shutdown().await;
    // changes while the principal is down: hub side and agent side
    patch(
        &hub,
        "c1",
        "one",
        json!({"spec": {"source": {"path": "v2"}}}),
    )
    .await;
    del(&hub, "c1", "two").await;
    put(&hub, app("c1", "three", "v1")).await;
    patch(
        &spoke,
        "argocd",
        "one",
        json!({"status": {"health": {"status": "Progressing"}}}),
    )
    .await;
    let p2 = principal(&pki, &hub, &addr).await;
    tokio::time::timeout(T, a.wait_connected(n))
        .await
        .expect("agent reconnects");
    wait_for(&spoke, "argocd", "one", "updated", |o| {
        o.is_some_and(|o| o["spec"]["source"]["path"] == "v2")
    })
    .await;
    wait_for(&spoke, "argocd", "two", "deleted", |o| o.is_none()).await;
    wait_for(&spoke, "argocd", "three", "created", |o| o.is_some()).await;
    wait_for(&hub, "c1", "one", "status arrived", |o| {
        o.is_some_and(|o| o["status"]["health"]["status"] == "Progressing")
    })
    .await;
    drop(p2);
}

#[tokio::test]
async fn autonomous_principal_restart_and_agent_restart() {
    let pki = LocalPki::new().unwrap();
    let (hub, spoke) = (MemStore::new(), MemStore::new());
    let p = principal(&pki, &hub, "127.0.0.1:0").await;
    let addr = p.local_addr().to_string();
    let a = agent(&pki, &p, "au", Mode::Autonomous, &spoke).await;
    put(&spoke, app("argocd", "one", "v1")).await;
    put(&spoke, app("argocd", "two", "v1")).await;
    wait_for(&hub, "au", "one", "created", |o| o.is_some()).await;
    wait_for(&hub, "au", "two", "created", |o| o.is_some()).await;
    let n = a.connections();
    p.shutdown().await;
    patch(
        &spoke,
        "argocd",
        "one",
        json!({"spec": {"source": {"path": "v2"}}}),
    )
    .await;
    del(&spoke, "argocd", "two").await;
    put(&spoke, app("argocd", "three", "v1")).await;
    let p2 = principal(&pki, &hub, &addr).await;
    tokio::time::timeout(T, a.wait_connected(n))
        .await
        .expect("agent reconnects");
    wait_for(&hub, "au", "one", "updated", |o| {
        o.is_some_and(|o| o["spec"]["source"]["path"] == "v2")
    })
    .await;
    wait_for(&hub, "au", "two", "deleted", |o| o.is_none()).await;
    wait_for(&hub, "au", "three", "created", |o| o.is_some()).await;
    // agent restart with a change made while it was down
    a.shutdown().await;
    patch(
        &spoke,
        "argocd",
        "three",
        json!({"spec": {"source": {"path": "v3"}}}),
    )
    .await;
    del(&spoke, "argocd", "one").await;
    let _a2 = agent(&pki, &p2, "au", Mode::Autonomous, &spoke).await;
    wait_for(&hub, "au", "three", "updated", |o| {
        o.is_some_and(|o| o["spec"]["source"]["path"] == "v3")
    })
    .await;
    wait_for(&hub, "au", "one", "deleted after agent restart", |o| {
        o.is_none()
    })
    .await;
}

/// The principal drops a managed agent's first stream right after its first Application arrived;
/// after the reconnect every Application arrives. (A cut earlier, during the resync exchange, is
/// `cuts::first_stream_cut_mid_resync_still_delivers_everything`; see docs/reliability.md.)
#[tokio::test]
async fn managed_agent_cut_during_its_first_delivery_gets_everything_after_reconnecting() {
    let pki = LocalPki::new().unwrap();
    let (hub, spoke) = (MemStore::new(), MemStore::new());
    for i in 0..100 {
        put(&hub, app("c1", &format!("app-{i}"), "v1")).await;
    }
    let p = principal(&pki, &hub, "127.0.0.1:0").await;
    let a = agent(&pki, &p, "c1", Mode::Managed, &spoke).await;
    // cut as soon as something arrived
    wait_for(&spoke, "argocd", "app-0", "first delivered", |o| {
        o.is_some()
    })
    .await;
    let n = a.connections();
    assert!(p.disconnect_agent("c1"));
    tokio::time::timeout(T, a.wait_connected(n))
        .await
        .expect("agent reconnects");
    for i in 0..100 {
        wait_for(&spoke, "argocd", &format!("app-{i}"), "delivered", |o| {
            o.is_some()
        })
        .await;
    }
}
