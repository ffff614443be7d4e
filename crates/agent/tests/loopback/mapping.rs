//! Destination-based mapping (`--destination-based-mapping` on principal and agents, as
//! argocd-agent's docs/concepts/agent-mapping.md): hub Applications go to the managed agent
//! their `spec.destination.name` names and keep their namespace there.

use argocd_pull_agent::local::LocalPki;
use argocd_pull_agent_core::Mode;
use argocd_pull_agent_core::metrics::Metrics;
use argocd_pull_agent_core::store::{Kind, MemStore, Store};
use argocd_pull_principal::Principal;
use argocd_pull_spoke::{Agent, AgentConfig};
use serde_json::{Value, json};

use crate::harness::*;

const REMAPPED: &str = "argocd.argoproj.io/namespace-remapped";

fn mapped_app(ns: &str, name: &str, dest: &str, path: &str) -> Value {
    let mut a = app(ns, name, path);
    a["spec"]["destination"] = json!({"name": dest, "namespace": "guestbook"});
    a
}

async fn mapped_principal(pki: &LocalPki, hub: &MemStore, addr: &str) -> Principal {
    principal_with(pki, hub, addr, |c| c.destination_based_mapping = true).await
}

async fn mapped_agent(
    pki: &LocalPki,
    p: &Principal,
    name: &str,
    spoke: &MemStore,
    f: impl FnOnce(&mut AgentConfig),
) -> Agent {
    agent_with(pki, p, name, Mode::Managed, spoke, |c| {
        c.destination_based_mapping = true;
        f(c)
    })
    .await
}

/// Object events the principal put on the wire.
fn object_events(p: &Principal) -> [u64; 4] {
    let m = p.metrics();
    [
        "create",
        "spec-update",
        "delete",
        "response-synced-resource",
    ]
    .map(|t| Metrics::total(&m.events_sent, t))
}

fn acks_sent(p: &Principal) -> u64 {
    Metrics::total(&p.metrics().events_sent, "processed")
}

async fn count(store: &MemStore) -> usize {
    store.list(Kind::Application, None).await.unwrap().len()
}

#[tokio::test]
async fn a_hub_app_reaches_the_agent_its_destination_names_in_its_own_namespace() {
    let pki = LocalPki::new().unwrap();
    let (hub, sx, sy) = (MemStore::new(), MemStore::new(), MemStore::new());
    let p = mapped_principal(&pki, &hub, "127.0.0.1:0").await;
    let ax = mapped_agent(&pki, &p, "agent-x", &sx, |c| {
        c.create_namespace = true;
        c.allowed_namespaces = vec!["team-*".into()];
    })
    .await;
    let ay = mapped_agent(&pki, &p, "agent-y", &sy, |_| {}).await;

    let h = put(&hub, mapped_app("team-a", "guestbook", "agent-x", "v1")).await;
    // for an agent that does not exist, for in-cluster, and in a namespace agent-x does not allow
    put(&hub, mapped_app("team-a", "stray", "agent-z", "v1")).await;
    put(&hub, mapped_app("team-a", "local", "in-cluster", "v1")).await;
    put(&hub, mapped_app("other", "outside", "agent-x", "v1")).await;
    let l = wait_for(&sx, "team-a", "guestbook", "created in team-a", |o| {
        o.is_some()
    })
    .await
    .unwrap();
    assert_eq!(sx.namespaces(), vec!["team-a"], "--create-namespace");
    assert_eq!(
        l["spec"]["destination"],
        json!({"name": "in-cluster", "namespace": "guestbook"})
    );
    assert_eq!(
        l["metadata"]["annotations"]["argocd.argoproj.io/source-uid"],
        h["metadata"]["uid"]
    );
    assert!(
        l["metadata"]["annotations"][REMAPPED].is_null(),
        "not the principal's namespace: not remapped"
    );
    wait_idle(|| p.agent_idle("agent-x") && p.agent_idle("agent-y") && ax.idle() && ay.idle())
        .await;
    assert_eq!(
        count(&sx).await,
        1,
        "only its own app, not {:?}",
        sx.list(Kind::Application, None).await
    );
    assert_eq!(count(&sy).await, 0, "agent-y is named by nothing");

    // spec changes follow, status flows back to team-a/guestbook on the hub
    patch(
        &hub,
        "team-a",
        "guestbook",
        json!({"spec": {"source": {"path": "v2"}}}),
    )
    .await;
    wait_for(&sx, "team-a", "guestbook", "spec updated", |o| {
        o.is_some_and(|o| o["spec"]["source"]["path"] == "v2")
    })
    .await;
    patch(
        &sx,
        "team-a",
        "guestbook",
        json!({"status": {"health": {"status": "Healthy"}}}),
    )
    .await;
    let h = wait_for(&hub, "team-a", "guestbook", "status copied", |o| {
        o.is_some_and(|o| o["status"]["health"]["status"] == "Healthy")
    })
    .await
    .unwrap();
    assert_eq!(h["spec"]["destination"]["name"], "agent-x", "hub spec kept");

    // a local edit is reverted in its namespace
    patch(
        &sx,
        "team-a",
        "guestbook",
        json!({"spec": {"source": {"path": "local-edit"}}}),
    )
    .await;
    wait_for(&sx, "team-a", "guestbook", "edit reverted", |o| {
        o.is_some_and(|o| o["spec"]["source"]["path"] == "v2")
    })
    .await;

    del(&hub, "team-a", "guestbook").await;
    wait_for(&sx, "team-a", "guestbook", "deleted", |o| o.is_none()).await;
    ax.shutdown().await;
    ay.shutdown().await;
    p.shutdown().await;
}

#[tokio::test]
async fn an_app_moved_to_another_destination_leaves_the_first_agent_and_reaches_the_second() {
    let pki = LocalPki::new().unwrap();
    let (hub, sx, sy) = (MemStore::new(), MemStore::new(), MemStore::new());
    let p = mapped_principal(&pki, &hub, "127.0.0.1:0").await;
    let ax = mapped_agent(&pki, &p, "agent-x", &sx, |c| {
        c.allowed_namespaces = vec!["team-a".into()]
    })
    .await;
    let ay = mapped_agent(&pki, &p, "agent-y", &sy, |c| {
        c.allowed_namespaces = vec!["team-a".into()]
    })
    .await;
    put(&hub, mapped_app("team-a", "gb", "agent-x", "v1")).await;
    wait_for(&sx, "team-a", "gb", "on agent-x", |o| o.is_some()).await;

    patch(
        &hub,
        "team-a",
        "gb",
        json!({"spec": {"destination": {"name": "agent-y"}}}),
    )
    .await;
    wait_for(&sx, "team-a", "gb", "left agent-x", |o| o.is_none()).await;
    wait_for(&sy, "team-a", "gb", "reached agent-y", |o| o.is_some()).await;

    // status now comes from agent-y
    patch(
        &sy,
        "team-a",
        "gb",
        json!({"status": {"health": {"status": "Healthy"}}}),
    )
    .await;
    wait_for(&hub, "team-a", "gb", "agent-y's status", |o| {
        o.is_some_and(|o| o["status"]["health"]["status"] == "Healthy")
    })
    .await;
    // the ignore-sync label takes it away from its agent, as without mapping
    patch(
        &hub,
        "team-a",
        "gb",
        json!({"metadata": {"labels": {"argocd-agent.argoproj-labs.io/ignore-sync": "true"}}}),
    )
    .await;
    wait_for(&sy, "team-a", "gb", "ignore-sync removes it", |o| {
        o.is_none()
    })
    .await;
    ax.shutdown().await;
    ay.shutdown().await;
    p.shutdown().await;
}

/// An agent whose Argo CD lives in another namespace than the principal's gets the principal
/// namespace's Applications in its own, marked remapped; what it reports goes back to them.
#[tokio::test]
async fn principal_namespace_apps_are_remapped_into_the_agent_namespace_and_back() {
    let pki = LocalPki::new().unwrap();
    let (hub, sx) = (MemStore::new(), MemStore::new());
    let p = mapped_principal(&pki, &hub, "127.0.0.1:0").await;
    let ax = mapped_agent(&pki, &p, "agent-x", &sx, |c| {
        c.namespace = "agent-ns".into()
    })
    .await;
    put(&hub, mapped_app("argocd", "gb", "agent-x", "v1")).await;
    let l = wait_for(&sx, "agent-ns", "gb", "remapped", |o| o.is_some())
        .await
        .unwrap();
    assert_eq!(l["metadata"]["annotations"][REMAPPED], "true");
    patch(
        &sx,
        "agent-ns",
        "gb",
        json!({"status": {"health": {"status": "Healthy"}}}),
    )
    .await;
    let h = wait_for(&hub, "argocd", "gb", "status of the remapped app", |o| {
        o.is_some_and(|o| o["status"]["health"]["status"] == "Healthy")
    })
    .await
    .unwrap();
    assert!(
        h["metadata"]["annotations"][REMAPPED].is_null(),
        "the mark stays on the agent"
    );
    // the hub's deletion flows down and the agent's confirmation releases the hub finalizer
    patch(
        &hub,
        "argocd",
        "gb",
        json!({"metadata": {"finalizers": ["resources-finalizer.argocd.argoproj.io"]}}),
    )
    .await;
    del(&hub, "argocd", "gb").await;
    wait_for(&sx, "agent-ns", "gb", "deleted on the agent", |o| {
        o.is_none()
    })
    .await;
    wait_for(&hub, "argocd", "gb", "hub deletion completed", |o| {
        o.is_none()
    })
    .await;
    ax.shutdown().await;
    p.shutdown().await;
}

#[tokio::test]
async fn restarts_with_nothing_changed_resend_nothing_and_a_missed_app_arrives() {
    let pki = LocalPki::new().unwrap();
    let (hub, sx) = (MemStore::new(), MemStore::new());
    let p = mapped_principal(&pki, &hub, "127.0.0.1:0").await;
    let addr = p.local_addr().to_string();
    let ax = mapped_agent(&pki, &p, "agent-x", &sx, |c| {
        c.allowed_namespaces = vec!["team-*".into()]
    })
    .await;
    put(&hub, mapped_app("team-a", "one", "agent-x", "v1")).await;
    put(&hub, mapped_app("team-b", "one", "agent-x", "v1")).await;
    wait_for(&sx, "team-a", "one", "created", |o| o.is_some()).await;
    wait_for(&sx, "team-b", "one", "created", |o| o.is_some()).await;
    wait_idle(|| p.agent_idle("agent-x") && ax.idle()).await;
    ax.shutdown().await;

    // agent restart: 2 request-updates + 1 request-synced-resource-list, nothing resent
    let (before, acks) = (object_events(&p), acks_sent(&p));
    let ax = mapped_agent(&pki, &p, "agent-x", &sx, |c| {
        c.allowed_namespaces = vec!["team-*".into()]
    })
    .await;
    wait_idle(|| acks_sent(&p) >= acks + 3 && p.agent_idle("agent-x") && ax.idle()).await;
    assert_eq!(
        object_events(&p),
        before,
        "[create, spec-update, delete, synced] resent"
    );

    // principal restart: nothing resent either
    let n = ax.connections();
    p.shutdown().await;
    let p2 = mapped_principal(&pki, &hub, &addr).await;
    tokio::time::timeout(T, ax.wait_connected(n))
        .await
        .expect("agent reconnects");
    wait_idle(|| acks_sent(&p2) >= 3 && p2.agent_idle("agent-x") && ax.idle()).await;
    assert_eq!(
        object_events(&p2),
        [0, 0, 0, 0],
        "resent after a principal restart"
    );

    // an app created while the agent is down arrives through the set checksum
    ax.shutdown().await;
    put(&hub, mapped_app("team-c", "late", "agent-x", "v1")).await;
    let ax = mapped_agent(&pki, &p2, "agent-x", &sx, |c| {
        c.allowed_namespaces = vec!["team-*".into()]
    })
    .await;
    wait_for(&sx, "team-c", "late", "missed app delivered", |o| {
        o.is_some()
    })
    .await;
    ax.shutdown().await;
    p2.shutdown().await;
}

/// Mapping is for managed agents (as the peer): an autonomous agent refuses it, and under a
/// mapping principal an autonomous agent's Applications still live in namespace `<agent>`.
#[tokio::test]
async fn autonomous_agents_refuse_mapping_and_keep_their_hub_namespace() {
    let pki = LocalPki::new().unwrap();
    let (hub, spoke) = (MemStore::new(), MemStore::new());
    let p = mapped_principal(&pki, &hub, "127.0.0.1:0").await;
    let mut c = AgentConfig::new(p.local_addr(), pki.agent("au").unwrap(), Mode::Autonomous);
    c.destination_based_mapping = true;
    let e = Agent::start(
        c,
        std::sync::Arc::new(spoke.clone()),
        Metrics::new("argocd_agent"),
    )
    .await
    .err()
    .expect("refused")
    .to_string();
    assert!(e.contains("not supported for autonomous agents"), "{e}");

    let a = agent(&pki, &p, "au", Mode::Autonomous, &spoke).await;
    put(&spoke, app("argocd", "mine", "v1")).await;
    let h = wait_for(&hub, "au", "mine", "copied to the hub", |o| o.is_some())
        .await
        .unwrap();
    assert_eq!(h["spec"]["project"], "au-default");
    // a hub edit of the copy is reverted, as without mapping
    patch(
        &hub,
        "au",
        "mine",
        json!({"spec": {"source": {"path": "hub-edit"}}}),
    )
    .await;
    wait_for(&hub, "au", "mine", "hub edit reverted", |o| {
        o.is_some_and(|o| o["spec"]["source"]["path"] == "v1")
    })
    .await;
    a.shutdown().await;
    p.shutdown().await;
}

/// AppProjects under mapping (peer: `DoesAgentMatchWithProject`/`AgentSpecificAppProject` with
/// destination-based mapping): a destination naming the agent suffices, and `sourceNamespaces`
/// (the hub namespaces of its Applications) is kept for the agent's Argo CD.
#[tokio::test]
async fn projects_match_by_destination_and_keep_their_source_namespaces() {
    let pki = LocalPki::new().unwrap();
    let (hub, sx) = (MemStore::new(), MemStore::new());
    let p = mapped_principal(&pki, &hub, "127.0.0.1:0").await;
    let ax = mapped_agent(&pki, &p, "agent-x", &sx, |_| {}).await;
    hub.create(
        Kind::AppProject,
        json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject",
               "metadata": {"name": "team", "namespace": "argocd"},
               "spec": {"sourceRepos": ["*"],
                        "destinations": [{"name": "agent-x", "namespace": "*"}],
                        "sourceNamespaces": ["team-a", "team-b"]}}),
    )
    .await
    .unwrap();
    let l = wait_for_kind(&sx, Kind::AppProject, "argocd", "team", "delivered", |o| {
        o.is_some()
    })
    .await
    .unwrap();
    assert_eq!(l["spec"]["sourceNamespaces"], json!(["team-a", "team-b"]));
    assert_eq!(l["spec"]["destinations"][0]["name"], "in-cluster");
    ax.shutdown().await;
    p.shutdown().await;
}
