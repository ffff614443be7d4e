//! OUR agent against a peer principal (argocd-agent's behaviour on the wire).

use argocd_pull_agent::local::LocalPki;
use argocd_pull_agent_core::Mode;
use argocd_pull_agent_core::store::{Kind, MemStore, Store};
use argocd_pull_agent_interop::emitter::{self, ty};
use argocd_pull_agent_interop::peer_agent::{PEER_VERSION, T, token_subject};
use argocd_pull_agent_interop::peer_principal::{Inbound, PeerPrincipal};
use argocd_pull_agent_interop::sdk::Event;
use base64::Engine;
use prost::Message;
use serde_json::{Value, json};

use crate::common::*;
use crate::golden::fixture;

const OURS: &str = argocd_pull_agent_core::VERSION;

/// A hub Application as the peer principal holds it (namespace = agent name).
fn hub_app(agent: &str, name: &str, uid: &str, rv: &str, path: &str) -> Value {
    let mut a = app(agent, name, path);
    a["metadata"]["uid"] = json!(uid);
    a["metadata"]["resourceVersion"] = json!(rv);
    a
}

fn principal_event(pp: &PeerPrincipal, t: &str, target: &str, obj: &Value) -> Event {
    emitter::stamped(
        emitter::sent(pp.emitter.object_event(&ty(t), target, obj), SENT_AT),
        PRINCIPAL_UID,
    )
}

fn is_ack_of(i: &Inbound, sent: &Event) -> bool {
    i.event.dataschema == "eventProcessed"
        && i.event.ext("resourceid") == sent.ext("resourceid")
        && i.event.ext("eventid") == sent.ext("eventid")
}

#[tokio::test]
async fn our_agent_logs_in_to_a_peer_principal_of_the_peer_version() {
    let pki = LocalPki::new().expect("pki");
    let pp = peer_principal(&pki, PEER_VERSION).await;
    let store = MemStore::new();
    // `argocd-pull agent --report-version 99.9.9-unreleased` against a peer principal
    let a = our_agent_reporting(&pki, &pp, "agent-pv", Mode::Managed, &store, PEER_VERSION).await;
    pp.wait_streams(1).await;
    assert_eq!(pp.auth_requests()[0].version, PEER_VERSION);
    a.shutdown().await;
    pp.shutdown().await;
}

#[tokio::test]
async fn our_agent_logs_in_the_way_the_peer_principal_expects() {
    let pki = LocalPki::new().expect("pki");
    let pp = peer_principal(&pki, OURS).await;
    let store = MemStore::new();
    let a = our_agent(&pki, &pp, "agent-li", Mode::Autonomous, &store).await;
    pp.wait_streams(1).await;
    let auth = pp.auth_requests();
    let first = auth.first().expect("an Authenticate call");
    assert_eq!(first.method, "mtls");
    assert_eq!(first.mode, "autonomous");
    assert_eq!(first.version, OURS);
    assert!(first.credentials.is_empty(), "mTLS sends no credentials");
    let sub = pp.subscribe_calls();
    let tok = sub
        .last()
        .cloned()
        .flatten()
        .expect("authorization metadata on Subscribe");
    assert!(!tok.starts_with("Bearer "), "the peer sends the raw JWT");
    assert_eq!(
        token_subject(&tok).expect("JWT"),
        json!({"clientID": "agent-li", "mode": "autonomous"})
    );
    a.shutdown().await;
    pp.shutdown().await;
}

#[tokio::test]
async fn managed_application_lifecycle_from_the_peer_principal_is_applied() {
    let pki = LocalPki::new().expect("pki");
    let pp = peer_principal(&pki, OURS).await;
    let store = MemStore::new();
    let a = our_agent(&pki, &pp, "agent-ma", Mode::Managed, &store).await;
    pp.wait_streams(1).await;
    let uid = "5c1a7e0b-8d2f-4c3e-9a61-0f2b3c4d5e6f";
    pp.send(&principal_event(
        &pp,
        "create",
        "application",
        &hub_app("agent-ma", "guestbook", uid, "10", "guestbook"),
    ))
    .await;
    let local = wait_for(
        &store,
        Kind::Application,
        "argocd",
        "guestbook",
        "created",
        |o| o.is_some(),
    )
    .await
    .expect("present");
    assert_eq!(
        local["metadata"]["annotations"]["argocd.argoproj.io/source-uid"], uid,
        "the agent records the principal's UID"
    );
    pp.send(&principal_event(
        &pp,
        "spec-update",
        "application",
        &hub_app("agent-ma", "guestbook", uid, "11", "v2"),
    ))
    .await;
    wait_for(
        &store,
        Kind::Application,
        "argocd",
        "guestbook",
        "spec updated",
        |o| o.is_some_and(|o| o["spec"]["source"]["path"] == "v2"),
    )
    .await;
    pp.send(&principal_event(
        &pp,
        "delete",
        "application",
        &hub_app("agent-ma", "guestbook", uid, "12", "v2"),
    ))
    .await;
    wait_for(
        &store,
        Kind::Application,
        "argocd",
        "guestbook",
        "deleted",
        |o| o.is_none(),
    )
    .await;
    a.shutdown().await;
    pp.shutdown().await;
}

#[tokio::test]
async fn managed_events_are_acked_the_way_the_peer_principal_needs() {
    let pki = LocalPki::new().expect("pki");
    let pp = peer_principal(&pki, OURS).await;
    let store = MemStore::new();
    let a = our_agent(&pki, &pp, "agent-mk", Mode::Managed, &store).await;
    pp.wait_streams(1).await;
    let ev = principal_event(
        &pp,
        "create",
        "application",
        &hub_app(
            "agent-mk",
            "guestbook",
            "5c1a7e0b-0000-4c3e-9a61-0f2b3c4d5e6f",
            "10",
            "g",
        ),
    );
    pp.send(&ev).await;
    let ack = pp.expect("ACK of the create", |i| is_ack_of(i, &ev)).await;
    assert_eq!(ack.event.typ, ty("processed"));
    assert_eq!(
        crate::principal::without_sentat(&ack.event),
        crate::principal::without_sentat(&ev),
        "the peer's ProcessedEvent copies every extension (principaluid included)"
    );
    a.shutdown().await;
    pp.shutdown().await;
}

#[tokio::test]
async fn golden_bytes_of_a_managed_create_are_applied() {
    let pki = LocalPki::new().expect("pki");
    let pp = peer_principal(&pki, OURS).await;
    let store = MemStore::new();
    // the fixture's Application lives in namespace agent-managed on the principal
    let a = our_agent(&pki, &pp, "agent-managed", Mode::Managed, &store).await;
    pp.wait_streams(1).await;
    let f = fixture("application-create");
    pp.send_raw(
        argocd_pull_agent_interop::pb::io::cloudevents::v1::CloudEvent::decode(f.bytes.as_slice())
            .expect("decode"),
    )
    .await;
    let local = wait_for(
        &store,
        Kind::Application,
        "argocd",
        "guestbook",
        "created from Go bytes",
        |o| o.is_some(),
    )
    .await
    .expect("present");
    assert_eq!(local["spec"]["source"]["path"], "guestbook");
    assert_eq!(local["spec"]["syncPolicy"]["automated"]["selfHeal"], true);
    a.shutdown().await;
    pp.shutdown().await;
}

#[tokio::test]
async fn managed_status_update_is_readable_by_the_peer_principal() {
    let pki = LocalPki::new().expect("pki");
    let pp = peer_principal(&pki, OURS).await;
    let store = MemStore::new();
    let a = our_agent(&pki, &pp, "agent-ms", Mode::Managed, &store).await;
    pp.wait_streams(1).await;
    pp.send(&principal_event(
        &pp,
        "create",
        "application",
        &hub_app(
            "agent-ms",
            "guestbook",
            "6c1a7e0b-8d2f-4c3e-9a61-0f2b3c4d5e6f",
            "1",
            "g",
        ),
    ))
    .await;
    wait_for(
        &store,
        Kind::Application,
        "argocd",
        "guestbook",
        "created",
        |o| o.is_some(),
    )
    .await;
    store
        .merge_patch(
            Kind::Application,
            "argocd",
            "guestbook",
            json!({"status": {"health": {"status": "Healthy"}, "sync": {"status": "Synced"}}}),
        )
        .await
        .expect("status");
    let i = pp
        .expect("status-update the peer can route", |i| {
            i.event.typ == ty("status-update") && i.event.dataschema == "application"
        })
        .await;
    assert_eq!(i.agent, "agent-ms");
    assert_eq!(i.event.datacontenttype, "application/json");
    assert!(i.event.ext("resourceid").is_some() && i.event.ext("eventid").is_some());
    let d = i.event.json().expect("json");
    assert_eq!(d["metadata"]["name"], "guestbook");
    assert_eq!(d["status"]["health"]["status"], "Healthy");
    a.shutdown().await;
    pp.shutdown().await;
}

#[tokio::test]
async fn autonomous_application_lifecycle_is_readable_by_the_peer_principal() {
    let pki = LocalPki::new().expect("pki");
    let pp = peer_principal(&pki, OURS).await;
    let store = MemStore::new();
    let a = our_agent(&pki, &pp, "agent-al", Mode::Autonomous, &store).await;
    pp.wait_streams(1).await;
    let created = store
        .create(Kind::Application, app("argocd", "podinfo", "kustomize"))
        .await
        .expect("create");
    let (rid, _) = ids(&created);
    let i = pp
        .expect("create", |i| {
            i.event.typ == ty("create") && i.event.dataschema == "application"
        })
        .await;
    assert_eq!(i.event.ext("resourceid"), Some(rid.as_str()));
    assert_eq!(i.event.subject, "argocd/podinfo");
    store
        .merge_patch(
            Kind::Application,
            "argocd",
            "podinfo",
            json!({"spec": {"source": {"path": "v2"}}}),
        )
        .await
        .expect("patch");
    let i = pp
        .expect("spec-update", |i| {
            i.event.typ == ty("spec-update") && i.event.dataschema == "application"
        })
        .await;
    assert_eq!(
        i.event.json().expect("json")["spec"]["source"]["path"],
        "v2"
    );
    store
        .delete(Kind::Application, "argocd", "podinfo")
        .await
        .expect("delete");
    pp.expect("delete", |i| {
        i.event.typ == ty("delete") && i.event.dataschema == "application"
    })
    .await;
    a.shutdown().await;
    pp.shutdown().await;
}

#[tokio::test]
async fn managed_agent_sends_the_peer_resync_requests_on_connect() {
    let pki = LocalPki::new().expect("pki");
    let pp = peer_principal(&pki, OURS).await;
    let store = MemStore::new();
    let hub_uid = "7c1a7e0b-8d2f-4c3e-9a61-0f2b3c4d5e6f";
    let mut local = app("argocd", "guestbook", "guestbook");
    local["metadata"]["annotations"] = json!({"argocd.argoproj.io/source-uid": hub_uid});
    local["spec"]["destination"] = json!({"name": "in-cluster", "namespace": "guestbook"});
    store
        .create(Kind::Application, local.clone())
        .await
        .expect("local copy");
    let a = our_agent(&pki, &pp, "agent-mr", Mode::Managed, &store).await;
    let i = pp
        .expect("request-update", |i| {
            i.event.typ == ty("request-update") && i.event.dataschema == "resourceResync"
        })
        .await;
    let d = i.event.json().expect("json");
    assert_eq!(d["name"], "guestbook");
    assert_eq!(d["kind"], "Application");
    assert_eq!(d["uid"], hub_uid, "the principal's UID (source-uid)");
    let b64 = base64::engine::general_purpose::STANDARD;
    assert_eq!(
        b64.decode(d["checksum"].as_str().expect("base64 string"))
            .expect("base64"),
        emitter::spec_checksum(&local),
        "spec checksum as the peer computes it"
    );
    let i = pp
        .expect("request-synced-resource-list", |i| {
            i.event.typ == ty("request-synced-resource-list")
                && i.event.dataschema == "resourceResync"
        })
        .await;
    assert_eq!(
        i.event.json().expect("json")["checksum"],
        json!(
            b64.encode(
                emitter::set_checksum(&[("Application", "guestbook", hub_uid)]).expect("sum")
            )
        )
    );
    a.shutdown().await;
    pp.shutdown().await;
}

#[tokio::test]
async fn autonomous_agent_requests_a_resource_resync_on_connect() {
    let pki = LocalPki::new().expect("pki");
    let pp = peer_principal(&pki, OURS).await;
    let store = MemStore::new();
    let a = our_agent(&pki, &pp, "agent-aq", Mode::Autonomous, &store).await;
    let i = pp
        .expect("request-resource-resync", |i| {
            i.event.typ == ty("request-resource-resync") && i.event.dataschema == "resourceResync"
        })
        .await;
    assert_eq!(i.event.json().expect("json"), json!({}));
    a.shutdown().await;
    pp.shutdown().await;
}

#[tokio::test]
async fn bad_payload_from_the_peer_principal_is_refused_and_nothing_is_written() {
    let pki = LocalPki::new().expect("pki");
    let pp = peer_principal(&pki, OURS).await;
    let store = MemStore::new();
    let a = our_agent(&pki, &pp, "agent-bp", Mode::Managed, &store).await;
    pp.wait_streams(1).await;
    for (rv, data) in [
        ("1", b"{\"metadata\":{\"name\":".to_vec()),
        (
            "2",
            br#"{"metadata":{"name":"broken","namespace":"agent-bp"},"spec":"not an object"}"#
                .to_vec(),
        ),
    ] {
        let m = hub_app(
            "agent-bp",
            "broken",
            "8c1a7e0b-8d2f-4c3e-9a61-0f2b3c4d5e6f",
            rv,
            "x",
        );
        let ev = emitter::sent(
            pp.emitter
                .object_event_bytes(&ty("create"), "application", &m, data),
            SENT_AT,
        );
        pp.send(&ev).await;
        let r = pp
            .expect("a reply the peer reads as the end of the bad event", |i| {
                is_ack_of(i, &ev)
            })
            .await;
        assert!(r.event.typ == ty("error") || r.event.typ == ty("processed"));
        let written = store
            .get(Kind::Application, "argocd", "broken")
            .await
            .expect("get");
        assert!(
            written.is_none(),
            "nothing may be written for payload {:?}, found {written:?}",
            String::from_utf8_lossy(&ev.data)
        );
    }
    a.shutdown().await;
    pp.shutdown().await;
}

#[tokio::test]
async fn managed_appproject_from_the_peer_principal_is_applied() {
    let pki = LocalPki::new().expect("pki");
    let pp = peer_principal(&pki, OURS).await;
    let store = MemStore::new();
    let a = our_agent(&pki, &pp, "agent-mp", Mode::Managed, &store).await;
    pp.wait_streams(1).await;
    let mut proj = project("argocd", "team-a", "in-cluster");
    proj["metadata"]["uid"] = json!("a2b3c4d5-e6f7-4a8b-9c0d-1e2f3a4b5c6d");
    proj["metadata"]["resourceVersion"] = json!("9001");
    pp.send(&principal_event(&pp, "create", "appproject", &proj))
        .await;
    let p = wait_for(
        &store,
        Kind::AppProject,
        "argocd",
        "team-a",
        "created",
        |o| o.is_some(),
    )
    .await
    .expect("present");
    assert_eq!(p["spec"]["sourceRepos"], json!(["*"]));
    let _ = T;
    a.shutdown().await;
    pp.shutdown().await;
}

#[tokio::test]
async fn managed_repository_from_the_peer_principal_is_applied_and_acked() {
    let pki = LocalPki::new().expect("pki");
    let pp = peer_principal(&pki, OURS).await;
    let store = MemStore::new();
    let a = our_agent(&pki, &pp, "agent-mr", Mode::Managed, &store).await;
    pp.wait_streams(1).await;
    // a corev1.Secret as the peer principal's informer holds it: no apiVersion/kind
    let b64 = |x: &str| base64::engine::general_purpose::STANDARD.encode(x);
    let secret = json!({
        "metadata": {"name": "repo-m", "namespace": "argocd",
            "uid": "5e6f7a8b-0000-4000-8000-00000000000a", "resourceVersion": "31",
            "labels": {"argocd.argoproj.io/secret-type": "repository"}},
        "data": {"project": b64("team-a"), "password": b64("pw")},
        "type": "Opaque"});
    let ev = principal_event(&pp, "create", "repository", &secret);
    pp.send(&ev).await;
    let got = wait_for(&store, Kind::Secret, "argocd", "repo-m", "created", |o| {
        o.is_some()
    })
    .await
    .expect("present");
    assert_eq!(
        got["metadata"]["annotations"]["argocd.argoproj.io/source-uid"],
        "5e6f7a8b-0000-4000-8000-00000000000a"
    );
    assert_eq!(got["data"]["password"], b64("pw"));
    pp.expect("ACK of the repository create", |i| is_ack_of(i, &ev))
        .await;
    // delete from the principal removes it
    let del = principal_event(&pp, "delete", "repository", &secret);
    pp.send(&del).await;
    wait_for(&store, Kind::Secret, "argocd", "repo-m", "deleted", |o| {
        o.is_none()
    })
    .await;
    a.shutdown().await;
    pp.shutdown().await;
}

#[tokio::test]
async fn ping_from_the_peer_principal_is_acked_and_never_answered_pong() {
    let pki = LocalPki::new().expect("pki");
    let pp = peer_principal(&pki, OURS).await;
    let store = MemStore::new();
    let a = our_agent(&pki, &pp, "agent-hb", Mode::Managed, &store).await;
    pp.wait_streams(1).await;
    let ping = pp.emitter.heartbeat("ping", &emitter::new_uuid());
    pp.send(&ping).await;
    let ack = pp.expect("ACK of the ping", |i| is_ack_of(i, &ping)).await;
    assert_eq!(ack.event.typ, ty("processed"));
    assert!(
        ack.event.ext("sentat").is_none(),
        "a fire-and-forget ACK of an event without sentat carries none"
    );
    assert!(
        !pp.seen
            .lock()
            .expect("lock")
            .iter()
            .any(|i| i.event.typ == ty("pong")),
        "the peer never answers pong: {}",
        pp.describe()
    );
    a.shutdown().await;
    pp.shutdown().await;
}

#[tokio::test]
async fn acks_of_our_agent_carry_the_extensions_of_the_acknowledged_event() {
    let pki = LocalPki::new().expect("pki");
    let pp = peer_principal(&pki, OURS).await;
    let store = MemStore::new();
    let a = our_agent(&pki, &pp, "agent-ax", Mode::Managed, &store).await;
    pp.wait_streams(1).await;
    let uid = "6d1a7e0b-8d2f-4c3e-9a61-0f2b3c4d5e6f";
    let ev = emitter::sent(
        principal_event(
            &pp,
            "create",
            "application",
            &hub_app("agent-ax", "guestbook", uid, "10", "guestbook"),
        ),
        "2026-11-25T08:00:00Z",
    );
    pp.send(&ev).await;
    let ack = pp.expect("ACK of the create", |i| is_ack_of(i, &ev)).await;
    assert_eq!(
        ack.event.extensions, ev.extensions,
        "the peer's ProcessedEvent copies every extension, sentat included"
    );
    a.shutdown().await;
    pp.shutdown().await;
}
