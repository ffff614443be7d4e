//! Destination-based mapping on the wire (peer `acb60cd`: principal/callbacks.go
//! `getAgentNameForApp`, principal/event.go L240, agent/inbound.go `getTargetNamespaceForApp`,
//! internal/resync/resync.go `newRequestUpdateFromObject`, internal/event/event.go
//! `ApplicationEvent`): a peer agent with `--destination-based-mapping` against OUR principal,
//! and OUR agent against a peer principal.

use std::sync::Arc;
use std::time::Duration;

use argocd_pull_agent::local::LocalPki;

use argocd_pull_agent_core::Mode;
use argocd_pull_agent_core::auth::throwaway_jwt_key;
use argocd_pull_agent_core::metrics::Metrics;
use argocd_pull_agent_core::store::{Kind, MemStore, Store};
use argocd_pull_agent_interop::emitter::{self, ty};
use argocd_pull_agent_interop::peer_agent::{self, PeerStream, T};
use argocd_pull_agent_interop::sdk::Event;
use argocd_pull_principal::{Principal, PrincipalConfig};
use argocd_pull_spoke::{Agent, AgentConfig};
use serde_json::{Value, json};

use crate::common::*;

/// The peer's `NamespaceRemappedAnnotation` (internal/manager/manager.go).
const REMAPPED: &str = "argocd.argoproj.io/namespace-remapped";

fn is(e: &Event, t: &str, target: &str) -> bool {
    e.typ == ty(t) && e.dataschema == target
}

fn mapped_app(ns: &str, name: &str, dest: &str) -> Value {
    let mut a = app(ns, name, "guestbook");
    a["spec"]["destination"] = json!({"name": dest, "namespace": "guestbook"});
    a
}

/// OUR principal with `--destination-based-mapping`.
async fn mapped_principal(pki: &LocalPki, hub: &MemStore) -> Principal {
    init();
    let mut cfg = PrincipalConfig::new(
        "127.0.0.1:0".parse().expect("addr"),
        pki.principal.clone(),
        throwaway_jwt_key(),
    );
    cfg.destination_based_mapping = true;
    Principal::start(cfg, Arc::new(hub.clone()), Metrics::new("argocd_principal"))
        .await
        .expect("principal starts")
}

/// A managed peer agent whose Argo CD lives in `agent_ns` (its `AuthRequest.agentNamespace`).
async fn mapped_peer_agent(
    pki: &LocalPki,
    p: &Principal,
    name: &str,
    agent_ns: &str,
) -> PeerStream {
    let mut cfg = peer_agent_cfg(pki, p, name, "managed");
    cfg.namespace = agent_ns.into();
    let login = tokio::time::timeout(T, peer_agent::login(&cfg))
        .await
        .expect("login in time")
        .unwrap_or_else(|s| panic!("peer agent login refused: {s:?}"));
    PeerStream::subscribe(&login, emitter::Emitter::new(emitter::AGENT_SOURCE))
        .await
        .expect("subscribe")
}

/// What a peer agent with mapping holds locally for a hub app it remapped into `agent_ns`
/// (`getTargetNamespaceForApp` stamps the annotation; `createApplication` sets in-cluster).
fn remapped_local(hub: &Value, agent_ns: &str) -> Value {
    let mut c = hub.clone();
    c["metadata"] = json!({
        "name": hub["metadata"]["name"], "namespace": agent_ns,
        "uid": "0b1c2d3e-0000-4a2b-9c1d-0e9f8a7b6c5d", "resourceVersion": "41",
        "annotations": {"argocd.argoproj.io/source-uid": hub["metadata"]["uid"], REMAPPED: "true"}
    });
    c["spec"]["destination"] = json!({"name": "in-cluster", "namespace": "guestbook"});
    c
}

#[tokio::test]
async fn the_peer_agent_gets_mapped_apps_with_their_hub_namespace_as_the_peer_principal_sends_them()
{
    let pki = LocalPki::new().expect("pki");
    let hub = MemStore::new();
    let p = mapped_principal(&pki, &hub).await;
    let mut s = mapped_peer_agent(&pki, &p, "agent-dm", "argocd").await;
    hub.create(
        Kind::Application,
        mapped_app("team-a", "stray", "agent-other"),
    )
    .await
    .expect("create");
    let created = hub
        .create(Kind::Application, mapped_app("team-a", "gb", "agent-dm"))
        .await
        .expect("create");
    let (rid, eid) = ids(&created);
    let e = s
        .expect("create of team-a/gb", |e| is(e, "create", "application"))
        .await;
    // ApplicationEvent: subject namespace/name, ids name_uid(_rv), the hub object as data
    assert_eq!(e.subject, "team-a/gb");
    assert_eq!(e.ext("resourceid"), Some(rid.as_str()));
    assert_eq!(e.ext("eventid"), Some(eid.as_str()));
    let d = e.json().expect("json");
    assert_eq!(
        d["metadata"]["namespace"], "team-a",
        "the peer agent keeps this namespace (getTargetNamespaceForApp)"
    );
    assert_eq!(d["spec"]["destination"]["name"], "agent-dm");
    hub.merge_patch(
        Kind::Application,
        "team-a",
        "gb",
        json!({"spec": {"destination": {"name": "agent-other"}}}),
    )
    .await
    .expect("patch");
    let e = s
        .expect("delete after the destination moved", |e| {
            is(e, "delete", "application")
        })
        .await;
    assert_eq!(e.subject, "team-a/gb");
    assert!(
        s.seen.iter().all(|e| !e.subject.ends_with("/stray")),
        "another agent's app never reaches this one: {}",
        s.describe()
    );
    assert!(s.unreadable.is_empty(), "{}", s.describe());
    p.shutdown().await;
}

/// A peer agent in `agent-ns` remaps the principal namespace's app and reports it there with the
/// annotation; its status, resync and error events all reach `argocd/<name>` on the hub.
#[tokio::test]
async fn a_remapped_peer_agent_reports_to_the_principal_namespace_app() {
    let pki = LocalPki::new().expect("pki");
    let hub = MemStore::new();
    let p = mapped_principal(&pki, &hub).await;
    let mut s = mapped_peer_agent(&pki, &p, "agent-rm", "agent-ns").await;
    let created = hub
        .create(Kind::Application, mapped_app("argocd", "top", "agent-rm"))
        .await
        .expect("create");
    s.expect("create of argocd/top", |e| is(e, "create", "application"))
        .await;

    // status-update of the remapped copy (outbound.go sends the local object)
    let mut local = remapped_local(&created, "agent-ns");
    local["status"] = json!({"health": {"status": "Healthy"}});
    let ev = emitter::sent(
        s.emitter
            .object_event(&ty("status-update"), "application", &local),
        SENT_AT,
    );
    s.send(&ev).await;
    let h = wait_for(
        &hub,
        Kind::Application,
        "argocd",
        "top",
        "status of the remapped app",
        |o| o.is_some_and(|o| o["status"]["health"]["status"] == "Healthy"),
    )
    .await
    .expect("present");
    assert!(h["metadata"]["annotations"][REMAPPED].is_null());

    // request-update names the remapped app by the principal's namespace
    // (newRequestUpdateFromObject); a stale checksum gets the spec back
    let stale = emitter::spec_checksum(&json!({"spec": {"source": {"path": "old"}}}));
    let uid = created["metadata"]["uid"].as_str().expect("uid");
    let ru = s.emitter.request_update(
        &emitter::new_uuid(),
        "top",
        "argocd",
        uid,
        "Application",
        Some(&stale),
    );
    s.send(&ru).await;
    let e = s
        .expect("spec-update answering the request-update", |e| {
            is(e, "spec-update", "application")
        })
        .await;
    assert_eq!(e.subject, "argocd/top");

    // a request-update for an app of another agent is answered with delete
    hub.create(
        Kind::Application,
        mapped_app("team-b", "theirs", "agent-other"),
    )
    .await
    .expect("create");
    let ru = s.emitter.request_update(
        &emitter::new_uuid(),
        "theirs",
        "team-b",
        "f00dfeed-0000-4000-8000-000000000000",
        "Application",
        Some(&stale),
    );
    s.send(&ru).await;
    let e = s
        .expect("delete of another agent's app", |e| {
            is(e, "delete", "application")
        })
        .await;
    assert_eq!(e.subject, "team-b/theirs");
    assert!(
        hub.get(Kind::Application, "team-b", "theirs")
            .await
            .expect("get")
            .is_some_and(|h| h["status"].is_null()),
        "the other agent's hub app is untouched"
    );

    // ErrorData names the agent's namespace for a remapped app
    let err = s.emitter.error(
        &emitter::new_uuid(),
        "application",
        "top",
        "agent-ns",
        "namespace agent-ns is not permitted",
    );
    s.send(&err).await;
    wait_for(
        &hub,
        Kind::Application,
        "argocd",
        "top",
        "Degraded by the agent's error",
        |o| o.is_some_and(|o| o["status"]["health"]["status"] == "Degraded"),
    )
    .await;
    p.shutdown().await;
}

/// OUR agent with mapping against a peer principal (namespace `argocd`): the principal
/// namespace's app lands in the agent's namespace marked remapped, a team namespace's app keeps
/// its namespace; the status-update carries the local namespace and the mark, which the peer
/// principal maps back (event.go L240).
#[tokio::test]
async fn our_mapped_agent_remaps_and_reports_as_the_peer_agent_does() {
    let pki = LocalPki::new().expect("pki");
    let pp = peer_principal(&pki, argocd_pull_agent_core::VERSION).await;
    let store = MemStore::new();
    let mut c = AgentConfig::new(pp.addr, pki.agent("agent-om").expect("cert"), Mode::Managed);
    c.reconnect_max = Duration::from_millis(500);
    c.namespace = "agent-ns".into();
    c.destination_based_mapping = true;
    c.create_namespace = true;
    c.allowed_namespaces = vec!["team-*".into()];
    let a = Agent::start(c, Arc::new(store.clone()), Metrics::new("argocd_agent"))
        .await
        .expect("agent starts");
    pp.wait_streams(1).await;
    assert_eq!(pp.auth_requests()[0].agent_namespace, "agent-ns");
    for (ns, uid) in [
        ("argocd", "5c1a7e0b-8d2f-4c3e-9a61-000000000001"),
        ("team-a", "5c1a7e0b-8d2f-4c3e-9a61-000000000002"),
        ("denied", "5c1a7e0b-8d2f-4c3e-9a61-000000000003"),
    ] {
        let mut h = mapped_app(ns, "gb", "agent-om");
        h["metadata"]["uid"] = json!(uid);
        h["metadata"]["resourceVersion"] = json!("10");
        pp.send(&emitter::stamped(
            emitter::sent(
                pp.emitter.object_event(&ty("create"), "application", &h),
                SENT_AT,
            ),
            PRINCIPAL_UID,
        ))
        .await;
    }
    let l = wait_for(
        &store,
        Kind::Application,
        "agent-ns",
        "gb",
        "remapped",
        |o| o.is_some(),
    )
    .await
    .expect("present");
    assert_eq!(l["metadata"]["annotations"][REMAPPED], "true");
    wait_for(&store, Kind::Application, "team-a", "gb", "kept", |o| {
        o.is_some()
    })
    .await;
    assert_eq!(
        store.namespaces(),
        vec!["agent-ns", "team-a"],
        "--create-namespace ensures each target namespace (the peer's too), never a refused one"
    );
    // the not-allowed namespace is refused with an error reply (ErrorData) naming it
    let refused = pp
        .expect("error for the denied namespace", |i| {
            i.event.typ == ty("error")
                && i.event.json().is_ok_and(|d| {
                    d["message"]
                        .as_str()
                        .is_some_and(|m| m.contains("not permitted"))
                })
        })
        .await;
    let d = refused.event.json().expect("json");
    assert!(
        d["message"]
            .as_str()
            .is_some_and(|m| m.contains("namespace denied")),
        "{d}"
    );
    assert!(
        store
            .get(Kind::Application, "denied", "gb")
            .await
            .expect("get")
            .is_none()
    );

    store
        .merge_patch(
            Kind::Application,
            "agent-ns",
            "gb",
            json!({"status": {"health": {"status": "Healthy"}}}),
        )
        .await
        .expect("patch");
    let st = pp
        .expect("status-update of the remapped app", |i| {
            i.event.typ == ty("status-update")
                && i.event
                    .json()
                    .is_ok_and(|d| d["metadata"]["namespace"] == "agent-ns")
        })
        .await;
    let d = st.event.json().expect("json");
    assert_eq!(d["metadata"]["annotations"][REMAPPED], "true");
    assert_eq!(st.event.subject, "agent-ns/gb");
    a.shutdown().await;
    pp.shutdown().await;
}
