//! Resync after restarts, counted on the wire (the principal's `events_sent` by type): with
//! nothing changed nothing is resent; a copy changed while the agent was down is resent alone.

use argocd_pull_agent::local::LocalPki;
use argocd_pull_agent_core::Mode;
use argocd_pull_agent_core::metrics::Metrics;
use argocd_pull_agent_core::store::{Kind, MemStore, Store};
use argocd_pull_principal::Principal;
use serde_json::json;

use crate::harness::*;

/// Object events the principal put on the wire, and its `response-synced-resource` answers.
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

/// Two managed apps and an AppProject delivered and settled (the set checksum covers both kinds).
async fn settled_pair(pki: &LocalPki, hub: &MemStore, spoke: &MemStore) -> Principal {
    let p = principal(pki, hub, "127.0.0.1:0").await;
    let a = agent(pki, &p, "c1", Mode::Managed, spoke).await;
    put(hub, app("c1", "one", "v1")).await;
    put(hub, app("c1", "two", "v1")).await;
    hub.create(
        Kind::AppProject,
        json!({
            "apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject",
            "metadata": {"name": "team", "namespace": "argocd"},
            "spec": {"sourceRepos": ["*"], "destinations": [{"name": "c1", "server": "*", "namespace": "*"}], "sourceNamespaces": ["c1"]}
        }),
    )
    .await
    .unwrap();
    wait_for(spoke, "argocd", "one", "created", |o| o.is_some()).await;
    wait_for(spoke, "argocd", "two", "created", |o| o.is_some()).await;
    wait_for_kind(spoke, Kind::AppProject, "argocd", "team", "created", |o| {
        o.is_some()
    })
    .await;
    wait_idle(|| p.agent_idle("c1") && a.idle()).await;
    a.shutdown().await;
    p
}

#[tokio::test]
async fn managed_agent_restart_with_nothing_changed_resends_nothing() {
    let pki = LocalPki::new().unwrap();
    let (hub, spoke) = (MemStore::new(), MemStore::new());
    let p = settled_pair(&pki, &hub, &spoke).await;
    let (before, acks) = (object_events(&p), acks_sent(&p));
    let a = agent(&pki, &p, "c1", Mode::Managed, &spoke).await;
    // the restarted agent sends 3 request-updates (2 apps, 1 project) and 1
    // request-synced-resource-list; the principal ACKs each after handling it, so anything it
    // resends is queued by then
    wait_idle(|| acks_sent(&p) >= acks + 4 && p.agent_idle("c1") && a.idle()).await;
    assert_eq!(
        object_events(&p),
        before,
        "[create, spec-update, delete] resent"
    );
    a.shutdown().await;
    p.shutdown().await;
}

#[tokio::test]
async fn managed_principal_restart_with_nothing_changed_resends_nothing() {
    let pki = LocalPki::new().unwrap();
    let (hub, spoke) = (MemStore::new(), MemStore::new());
    let p = principal(&pki, &hub, "127.0.0.1:0").await;
    let addr = p.local_addr().to_string();
    let a = agent(&pki, &p, "c1", Mode::Managed, &spoke).await;
    put(&hub, app("c1", "one", "v1")).await;
    wait_for(&spoke, "argocd", "one", "created", |o| o.is_some()).await;
    wait_idle(|| p.agent_idle("c1") && a.idle()).await;
    let n = a.connections();
    p.shutdown().await;
    let p2 = principal(&pki, &hub, &addr).await;
    tokio::time::timeout(T, a.wait_connected(n))
        .await
        .expect("agent reconnects");
    // first stream of this principal: request-resource-resync → the agent's request-update and
    // request-synced-resource-list, each ACKed after handling
    wait_idle(|| acks_sent(&p2) >= 2 && p2.agent_idle("c1") && a.idle()).await;
    assert_eq!(
        object_events(&p2),
        [0, 0, 0, 0],
        "[create, spec-update, delete, response-synced-resource] resent"
    );
    assert_eq!(
        Metrics::total(&p2.metrics().events_sent, "request-resource-resync"),
        1,
        "the principal asks once, on the first stream"
    );
    a.shutdown().await;
    p2.shutdown().await;
}

#[tokio::test]
async fn managed_agent_restart_resends_exactly_the_changed_copy() {
    let pki = LocalPki::new().unwrap();
    let (hub, spoke) = (MemStore::new(), MemStore::new());
    let p = settled_pair(&pki, &hub, &spoke).await;
    // edited while the agent was down: the restarted agent's request-update carries its checksum
    patch(
        &spoke,
        "argocd",
        "two",
        json!({"spec": {"source": {"path": "edited"}}}),
    )
    .await;
    let ([create, spec, delete, synced], acks) = (object_events(&p), acks_sent(&p));
    let a = agent(&pki, &p, "c1", Mode::Managed, &spoke).await;
    wait_for(&spoke, "argocd", "two", "reverted", |o| {
        o.is_some_and(|o| o["spec"]["source"]["path"] == "v1")
    })
    .await;
    wait_idle(|| acks_sent(&p) >= acks + 4 && p.agent_idle("c1") && a.idle()).await;
    assert_eq!(
        object_events(&p),
        [create, spec + 1, delete, synced],
        "one spec-update, for the changed copy only"
    );
    assert_eq!(
        spoke_path(&spoke, "one").await,
        "v1",
        "the unchanged copy is untouched"
    );
    a.shutdown().await;
    p.shutdown().await;
}

async fn spoke_path(spoke: &MemStore, name: &str) -> String {
    wait_for(spoke, "argocd", name, "present", |o| o.is_some())
        .await
        .unwrap()["spec"]["source"]["path"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Object events an agent put on the wire.
fn agent_object_events(a: &argocd_pull_spoke::Agent) -> [u64; 3] {
    let m = a.metrics();
    ["create", "spec-update", "delete"].map(|t| Metrics::total(&m.events_sent, t))
}

#[tokio::test]
async fn autonomous_principal_restart_with_nothing_changed_resends_nothing() {
    let pki = LocalPki::new().unwrap();
    let (hub, spoke) = (MemStore::new(), MemStore::new());
    let p = principal(&pki, &hub, "127.0.0.1:0").await;
    let addr = p.local_addr().to_string();
    let a = agent(&pki, &p, "au", Mode::Autonomous, &spoke).await;
    put(&spoke, app("argocd", "one", "v1")).await;
    put(&spoke, app("argocd", "two", "v1")).await;
    wait_for(&hub, "au", "one", "created", |o| o.is_some()).await;
    wait_for(&hub, "au", "two", "created", |o| o.is_some()).await;
    wait_idle(|| p.agent_idle("au") && a.idle()).await;
    let before = agent_object_events(&a);
    let acks = Metrics::total(&a.metrics().events_sent, "processed");
    let n = a.connections();
    p.shutdown().await;
    let p2 = principal(&pki, &hub, &addr).await;
    tokio::time::timeout(T, a.wait_connected(n))
        .await
        .expect("agent reconnects");
    // first stream of this principal: 2 request-updates and 1 request-synced-resource-list,
    // each ACKed by the agent after handling
    wait_idle(|| {
        Metrics::total(&a.metrics().events_sent, "processed") >= acks + 3
            && p2.agent_idle("au")
            && a.idle()
    })
    .await;
    assert_eq!(
        agent_object_events(&a),
        before,
        "[create, spec-update, delete] resent by the agent"
    );
    assert_eq!(
        Metrics::total(&a.metrics().events_sent, "response-synced-resource"),
        0,
        "the sets match"
    );
    a.shutdown().await;
    p2.shutdown().await;
}

/// A managed agent connecting for the first time to a principal with 30 hub Applications gets
/// them all through the resync exchange (its set checksum differs, the principal answers with
/// the synced resources, the agent asks for each) answered from the principal's hub watch: no
/// hub `get` or `list` of an Application per agent or per Application, as the peer's
/// informer-first reads (a restarted principal with 1,000 agents would otherwise send their
/// 100,000 GETs to the API server at once).
#[tokio::test]
async fn a_fresh_managed_agent_is_resynced_from_the_hub_cache() {
    let pki = LocalPki::new().unwrap();
    let (hub, spoke) = (MemStore::new(), MemStore::new());
    for i in 0..30 {
        put(&hub, app("c1", &format!("app-{i}"), "v1")).await;
    }
    let p = principal(&pki, &hub, "127.0.0.1:0").await;
    let reads_before = hub.reads(Kind::Application);
    let a = agent(&pki, &p, "c1", Mode::Managed, &spoke).await;
    for i in 0..30 {
        wait_for(&spoke, "argocd", &format!("app-{i}"), "delivered", |o| {
            o.is_some()
        })
        .await;
    }
    wait_idle(|| p.agent_idle("c1") && a.idle()).await;
    assert_eq!(
        object_events(&p)[3],
        30,
        "the principal answered the agent's set with one response-synced-resource per Application"
    );
    assert_eq!(
        hub.reads(Kind::Application) - reads_before,
        0,
        "the resync read hub Applications from the API instead of the principal's cache"
    );
    a.shutdown().await;
    p.shutdown().await;
}

/// Applications the principal creates on a connected managed agent cost its cluster one read
/// each (the identity check of the adoption and UID-mismatch policies) and one write: the write
/// is not preceded by a second read of the same object (on a real cluster, a GET answered 404).
#[tokio::test]
async fn a_created_application_costs_the_agent_one_read_and_one_write() {
    use argocd_pull_agent_core::store::StoreEvent;
    use futures::StreamExt;
    let pki = LocalPki::new().unwrap();
    let (hub, spoke) = (MemStore::new(), MemStore::new());
    let p = principal(&pki, &hub, "127.0.0.1:0").await;
    let a = agent(&pki, &p, "c1", Mode::Managed, &spoke).await;
    wait_idle(|| p.agent_idle("c1") && a.idle()).await;
    let mut w = spoke.watch(Kind::Application, Some("argocd"));
    let reads_before = spoke.reads(Kind::Application);
    for i in 0..20 {
        put(&hub, app("c1", &format!("app-{i}"), "v1")).await;
    }
    let mut created = std::collections::HashSet::new();
    tokio::time::timeout(std::time::Duration::from_secs(20), async {
        while created.len() < 20 {
            if let Some(Ok(StoreEvent::Applied(o))) = w.next().await {
                created.insert(o["metadata"]["name"].as_str().unwrap_or("").to_string());
            }
        }
    })
    .await
    .expect("the 20 Applications reach the agent's cluster");
    wait_idle(|| p.agent_idle("c1") && a.idle()).await;
    assert_eq!(
        spoke.reads(Kind::Application) - reads_before,
        20,
        "reads of local Applications for 20 creates: one identity check each, nothing more"
    );
    a.shutdown().await;
    p.shutdown().await;
}
