//! AppProjects: managed (principal -> agents matched by destinations) and autonomous
//! (agent -> principal as `<agent>-<name>`).
use argocd_pull_agent::local::LocalPki;
use argocd_pull_agent_core::Mode;
use argocd_pull_agent_core::store::{Kind, MemStore, Store};
use serde_json::{Value, json};

use crate::harness::*;

fn project(name: &str, dest_names: &[&str]) -> Value {
    with_sources(name, dest_names, dest_names)
}

/// A project with explicit `sourceNamespaces` (argocd-agent sends a managed agent only the
/// projects whose destinations *and* source namespaces match its name).
fn with_sources(name: &str, dest_names: &[&str], sources: &[&str]) -> Value {
    let dests: Vec<Value> = dest_names
        .iter()
        .map(|n| json!({"name": n, "server": "https://remote.example", "namespace": "guestbook"}))
        .collect();
    json!({
        "apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject",
        "metadata": {"name": name, "namespace": "argocd", "labels": {"team": "a"}},
        "spec": {"sourceRepos": ["*"], "destinations": dests, "sourceNamespaces": sources}
    })
}

/// Waits (on watch events) until `pred` holds for the AppProject (None = absent).
pub async fn wait_project(
    store: &MemStore,
    ns: &str,
    name: &str,
    what: &str,
    pred: impl Fn(Option<&Value>) -> bool,
) -> Option<Value> {
    wait_for_kind(store, Kind::AppProject, ns, name, what, pred).await
}

async fn patch_project(store: &MemStore, name: &str, p: Value) {
    store
        .merge_patch(Kind::AppProject, "argocd", name, p)
        .await
        .unwrap();
}

#[tokio::test]
async fn managed_projects_follow_destinations_update_and_delete() {
    let pki = LocalPki::new().unwrap();
    let (hub, spoke_a, spoke_b) = (MemStore::new(), MemStore::new(), MemStore::new());
    // one project exists before the principal starts, one is created afterwards
    hub.create(Kind::AppProject, project("team", &["cluster-*"]))
        .await
        .unwrap();
    let p = principal(&pki, &hub, "127.0.0.1:0").await;
    let a = agent(&pki, &p, "cluster-a", Mode::Managed, &spoke_a).await;
    let b = agent(&pki, &p, "other-b", Mode::Managed, &spoke_b).await;
    let h = hub
        .create(Kind::AppProject, project("only-b", &["other-b"]))
        .await
        .unwrap();
    // destinations match both, but a deny pattern excludes b, and a project whose source
    // namespaces do not name the agent reaches nobody
    hub.create(
        Kind::AppProject,
        with_sources("not-b", &["*", "!other-*"], &["*"]),
    )
    .await
    .unwrap();
    hub.create(
        Kind::AppProject,
        with_sources("no-source", &["*"], &["elsewhere", "/^x-/"]),
    )
    .await
    .unwrap();

    let l = wait_project(
        &spoke_a,
        "argocd",
        "team",
        "sent to the matched agent",
        |o| o.is_some(),
    )
    .await
    .unwrap();
    assert_eq!(
        l["spec"]["destinations"],
        json!([{"name": "in-cluster", "server": "https://kubernetes.default.svc", "namespace": "guestbook"}]),
        "destinations rewritten to in-cluster"
    );
    assert!(l["spec"].get("sourceNamespaces").is_none());
    assert_eq!(l["metadata"]["labels"]["team"], "a");
    let lb = wait_project(&spoke_b, "argocd", "only-b", "sent to b", |o| o.is_some())
        .await
        .unwrap();
    assert_eq!(
        lb["metadata"]["annotations"]["argocd.argoproj.io/source-uid"],
        h["metadata"]["uid"]
    );

    // update flows down; a local edit is reverted
    patch_project(
        &hub,
        "team",
        json!({"spec": {"sourceRepos": ["https://a.example/*"]}}),
    )
    .await;
    wait_project(&spoke_a, "argocd", "team", "spec updated", |o| {
        o.is_some_and(|o| o["spec"]["sourceRepos"] == json!(["https://a.example/*"]))
    })
    .await;
    spoke_a
        .merge_patch(
            Kind::AppProject,
            "argocd",
            "team",
            json!({"spec": {"sourceRepos": ["*"]}}),
        )
        .await
        .unwrap();
    wait_project(&spoke_a, "argocd", "team", "local edit reverted", |o| {
        o.is_some_and(|o| o["spec"]["sourceRepos"] == json!(["https://a.example/*"]))
    })
    .await;

    // no longer matched by a's name: deleted there
    patch_project(
        &hub,
        "team",
        json!({"spec": {"destinations": [{"name": "nobody", "namespace": "x"}]}}),
    )
    .await;
    wait_project(&spoke_a, "argocd", "team", "unmatched -> deleted", |o| {
        o.is_none()
    })
    .await;
    // deleted on the hub: deleted on the agent
    hub.delete(Kind::AppProject, "argocd", "only-b")
        .await
        .unwrap();
    wait_project(&spoke_b, "argocd", "only-b", "hub deletion", |o| {
        o.is_none()
    })
    .await;
    wait_idle(|| p.agent_idle("cluster-a") && p.agent_idle("other-b") && a.idle() && b.idle())
        .await;
    assert!(
        spoke_a
            .get(Kind::AppProject, "argocd", "only-b")
            .await
            .unwrap()
            .is_none(),
        "a project is only sent to agents its destinations match"
    );
    assert!(
        spoke_a
            .get(Kind::AppProject, "argocd", "not-b")
            .await
            .unwrap()
            .is_some(),
        "a deny pattern for other agents does not exclude this one"
    );
    for (spoke, name) in [
        (&spoke_b, "not-b"),
        (&spoke_a, "no-source"),
        (&spoke_b, "no-source"),
    ] {
        assert!(
            spoke
                .get(Kind::AppProject, "argocd", name)
                .await
                .unwrap()
                .is_none(),
            "{name} must not reach this agent (deny pattern / source namespaces)"
        );
    }
    a.shutdown().await;
    b.shutdown().await;
    p.shutdown().await;
}

#[tokio::test]
async fn managed_projects_resync_after_agent_and_principal_restarts() {
    let pki = LocalPki::new().unwrap();
    let (hub, spoke) = (MemStore::new(), MemStore::new());
    hub.create(Kind::AppProject, project("keep", &["c1"]))
        .await
        .unwrap();
    hub.create(Kind::AppProject, project("gone", &["c1"]))
        .await
        .unwrap();
    let p = principal(&pki, &hub, "127.0.0.1:0").await;
    let addr = p.local_addr().to_string();
    let a = agent(&pki, &p, "c1", Mode::Managed, &spoke).await;
    wait_project(&spoke, "argocd", "gone", "sent", |o| o.is_some()).await;
    wait_project(&spoke, "argocd", "keep", "sent", |o| o.is_some()).await;
    a.shutdown().await;

    // while the agent is down: one deleted, one created, one changed
    hub.delete(Kind::AppProject, "argocd", "gone")
        .await
        .unwrap();
    hub.create(Kind::AppProject, project("new", &["c*"]))
        .await
        .unwrap();
    patch_project(
        &hub,
        "keep",
        json!({"spec": {"sourceRepos": ["https://k/*"]}}),
    )
    .await;
    let a = agent(&pki, &p, "c1", Mode::Managed, &spoke).await;
    wait_project(&spoke, "argocd", "gone", "stale copy deleted", |o| {
        o.is_none()
    })
    .await;
    wait_project(&spoke, "argocd", "new", "new one sent", |o| o.is_some()).await;
    wait_project(&spoke, "argocd", "keep", "change applied", |o| {
        o.is_some_and(|o| o["spec"]["sourceRepos"] == json!(["https://k/*"]))
    })
    .await;

    // principal restart: nothing is deleted (peer issues #660, #813), changes made meanwhile land
    let n = a.connections();
    p.shutdown().await;
    hub.delete(Kind::AppProject, "argocd", "new").await.unwrap();
    let p = principal(&pki, &hub, &addr).await;
    tokio::time::timeout(T, a.wait_connected(n)).await.unwrap();
    wait_project(
        &spoke,
        "argocd",
        "new",
        "deleted while the principal was down",
        |o| o.is_none(),
    )
    .await;
    wait_idle(|| p.agent_idle("c1") && a.idle()).await;
    let keep = spoke.get(Kind::AppProject, "argocd", "keep").await.unwrap();
    assert!(
        keep.is_some_and(|k| k["spec"]["sourceRepos"] == json!(["https://k/*"])),
        "a principal restart keeps the agent's projects"
    );
    a.shutdown().await;
    p.shutdown().await;
}

#[tokio::test]
async fn autonomous_projects_go_up_prefixed_with_the_agent_name() {
    let pki = LocalPki::new().unwrap();
    let (hub, spoke) = (MemStore::new(), MemStore::new());
    let p = principal(&pki, &hub, "127.0.0.1:0").await;
    let a = agent(&pki, &p, "edge", Mode::Autonomous, &spoke).await;
    let local = spoke
        .create(
            Kind::AppProject,
            json!({"metadata": {"name": "team", "namespace": "argocd"},
                   "spec": {"sourceRepos": ["*"], "destinations": [{"server": "https://kubernetes.default.svc", "namespace": "*"}]}}),
        )
        .await
        .unwrap();
    let h = wait_project(&hub, "argocd", "edge-team", "copied up", |o| o.is_some())
        .await
        .unwrap();
    assert_eq!(
        h["spec"]["destinations"],
        json!([{"name": "edge", "namespace": "*"}])
    );
    assert_eq!(h["spec"]["sourceNamespaces"], json!(["edge"]));
    assert_eq!(
        h["metadata"]["labels"]["argocd-agent.argoproj-labs.io/agent-name"],
        "edge"
    );
    assert_eq!(
        h["metadata"]["annotations"]["argocd.argoproj.io/source-uid"],
        local["metadata"]["uid"]
    );
    spoke
        .merge_patch(
            Kind::AppProject,
            "argocd",
            "team",
            json!({"spec": {"sourceRepos": ["https://x/*"]}}),
        )
        .await
        .unwrap();
    wait_project(&hub, "argocd", "edge-team", "update copied", |o| {
        o.is_some_and(|o| o["spec"]["sourceRepos"] == json!(["https://x/*"]))
    })
    .await;

    // deleted while the agent is down: the principal's resync removes the hub copy
    a.shutdown().await;
    spoke
        .delete(Kind::AppProject, "argocd", "team")
        .await
        .unwrap();
    let a = agent(&pki, &p, "edge", Mode::Autonomous, &spoke).await;
    wait_project(&hub, "argocd", "edge-team", "deleted on the hub", |o| {
        o.is_none()
    })
    .await;
    a.shutdown().await;
    p.shutdown().await;
}
