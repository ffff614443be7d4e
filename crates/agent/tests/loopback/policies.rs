//! A managed agent's policies for Applications it did not create itself (argocd-agent's
//! `--adoption-policy`, `--source-uid-mismatch-policy`, `--on-application-recreate`).
use argocd_pull_agent::local::LocalPki;
use argocd_pull_agent_core::Mode;
use argocd_pull_agent_core::policy::{AdoptionPolicy, RecreateAction};
use argocd_pull_agent_core::store::{Kind, MemStore, Store};
use serde_json::json;

use crate::harness::*;

const SOURCE_UID: &str = "argocd.argoproj.io/source-uid";

#[tokio::test]
async fn adoption_never_leaves_the_existing_app_and_marks_the_hub_app_degraded() {
    let pki = LocalPki::new().unwrap();
    let (hub, spoke) = (MemStore::new(), MemStore::new());
    // the managed cluster already runs "mine" and "theirs", created there by hand
    let mine = put(&spoke, app("argocd", "mine", "local")).await;
    let mut theirs = app("argocd", "theirs", "local");
    theirs["metadata"]["annotations"]["argocd.argoproj.io/adoption-policy"] = json!("always");
    put(&spoke, theirs).await;
    let p = principal(&pki, &hub, "127.0.0.1:0").await;
    let a = agent_with(&pki, &p, "ad", Mode::Managed, &spoke, |c| {
        c.adoption_policy = AdoptionPolicy::Never
    })
    .await;
    put(&hub, app("ad", "mine", "hub")).await;
    put(&hub, app("ad", "theirs", "hub")).await;

    let h = wait_for(&hub, "ad", "mine", "refusal reported on the hub", |o| {
        o.is_some_and(|o| o["status"]["health"]["status"] == "Degraded")
    })
    .await
    .unwrap();
    let msg = h["status"]["conditions"][0]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        msg.contains("Adoption policy for application is set to never"),
        "{msg}"
    );
    // the annotation on the existing app overrides the flag: adopted
    wait_for(&spoke, "argocd", "theirs", "adopted", |o| {
        o.is_some_and(|o| o["spec"]["source"]["path"] == "hub")
    })
    .await;
    wait_idle(|| p.agent_idle("ad") && a.idle()).await;
    let local = spoke
        .get(Kind::Application, "argocd", "mine")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(local["spec"]["source"]["path"], "local", "not adopted");
    assert_eq!(local["metadata"]["uid"], mine["metadata"]["uid"]);
    assert!(local["metadata"]["annotations"].get(SOURCE_UID).is_none());
    a.shutdown().await;
    p.shutdown().await;
}

#[tokio::test]
async fn a_recreated_hub_app_replaces_the_agents_copy_by_policy() {
    let pki = LocalPki::new().unwrap();
    let (hub, spoke) = (MemStore::new(), MemStore::new());
    // copies of hub apps that were since deleted and recreated on the hub (other UIDs)
    for (name, path) in [("web", "old"), ("api", "old")] {
        let mut l = app("argocd", name, path);
        l["metadata"]["annotations"][SOURCE_UID] = json!("uid-of-a-deleted-hub-app");
        put(&spoke, l).await;
    }
    let old_api = spoke
        .get(Kind::Application, "argocd", "api")
        .await
        .unwrap()
        .unwrap();
    let old_web = spoke
        .get(Kind::Application, "argocd", "web")
        .await
        .unwrap()
        .unwrap();
    let p = principal(&pki, &hub, "127.0.0.1:0").await;
    let a = agent(&pki, &p, "mm", Mode::Managed, &spoke).await;
    let web = put(&hub, app("mm", "web", "new")).await;
    let mut api = app("mm", "api", "new");
    api["metadata"]["annotations"]["argocd.argoproj.io/source-uid-mismatch-policy"] =
        json!("upsert");
    let api = put(&hub, api).await;

    // default recreate: a new object carrying the new source UID
    let w = wait_for(&spoke, "argocd", "web", "recreated", |o| {
        o.is_some_and(|o| o["metadata"]["annotations"][SOURCE_UID] == web["metadata"]["uid"])
    })
    .await
    .unwrap();
    assert_ne!(
        w["metadata"]["uid"], old_web["metadata"]["uid"],
        "recreated"
    );
    assert_eq!(w["spec"]["source"]["path"], "new");
    // upsert by annotation: the same object, updated in place
    let u = wait_for(&spoke, "argocd", "api", "updated in place", |o| {
        o.is_some_and(|o| o["metadata"]["annotations"][SOURCE_UID] == api["metadata"]["uid"])
    })
    .await
    .unwrap();
    assert_eq!(u["metadata"]["uid"], old_api["metadata"]["uid"], "kept");
    assert_eq!(u["spec"]["source"]["path"], "new");
    a.shutdown().await;
    p.shutdown().await;
}

#[tokio::test]
async fn on_application_recreate_resync_requests_a_sync_of_the_recreated_app() {
    let pki = LocalPki::new().unwrap();
    let (hub, spoke) = (MemStore::new(), MemStore::new());
    let p = principal(&pki, &hub, "127.0.0.1:0").await;
    let a = agent_with(&pki, &p, "rr", Mode::Managed, &spoke, |c| {
        c.on_recreate = RecreateAction::Resync
    })
    .await;
    put(&hub, app("rr", "web", "v1")).await;
    let first = wait_for(&spoke, "argocd", "web", "created", |o| o.is_some())
        .await
        .unwrap();
    assert!(
        first.get("operation").is_none(),
        "no sync on a normal create"
    );
    spoke
        .delete(Kind::Application, "argocd", "web")
        .await
        .unwrap();
    let again = wait_for(&spoke, "argocd", "web", "recreated with a sync", |o| {
        o.is_some_and(|o| o["operation"]["sync"].is_object())
    })
    .await
    .unwrap();
    assert_ne!(again["metadata"]["uid"], first["metadata"]["uid"]);
    a.shutdown().await;
    p.shutdown().await;
}
