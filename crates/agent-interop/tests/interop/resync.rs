//! Resync against the peer, both directions: every resync request is ACKed the way the peer's
//! event writer needs (`processed`, same `resourceid`/`eventid`), who sends which request on a
//! (re)connect is the peer's, and a checksum mismatch resends exactly that object.

use argocd_pull_agent::local::LocalPki;
use argocd_pull_agent_core::Mode;
use argocd_pull_agent_core::store::{Kind, MemStore, Store};
use argocd_pull_agent_interop::emitter::{self, ty};
use argocd_pull_agent_interop::peer_agent::PeerStream;
use argocd_pull_agent_interop::peer_principal::{Inbound, PeerPrincipal};
use argocd_pull_agent_interop::sdk::Event;
use serde_json::{Value, json};

use crate::common::*;

const OURS: &str = argocd_pull_agent_core::VERSION;

fn is(e: &Event, t: &str, target: &str) -> bool {
    e.typ == ty(t) && e.dataschema == target
}

fn acks(e: &Event, sent: &Event) -> bool {
    e.dataschema == "eventProcessed"
        && e.ext("resourceid") == sent.ext("resourceid")
        && e.ext("eventid") == sent.ext("eventid")
}

/// The ACK of `sent`, already seen or still to come (it may precede or follow the answers the
/// event triggers: answers are queued, ACKs go out directly).
async fn expect_ack(s: &mut PeerStream, sent: &Event, what: &str) {
    if !s.seen.iter().any(|e| acks(e, sent)) {
        s.expect(what, |e| acks(e, sent)).await;
    }
}

async fn expect_ack_from(pp: &PeerPrincipal, sent: &Event, what: &str) {
    let seen = pp
        .seen
        .lock()
        .expect("poisoned")
        .iter()
        .any(|i| acks(&i.event, sent));
    if !seen {
        pp.expect(what, |i| acks(&i.event, sent)).await;
    }
}

fn name_of(e: &Event) -> String {
    e.json()
        .ok()
        .and_then(|d| {
            d["metadata"]["name"]
                .as_str()
                .or(d["name"].as_str())
                .map(str::to_string)
        })
        .unwrap_or_default()
}

fn count(seen: &[Event], t: &str, name: &str) -> usize {
    seen.iter()
        .filter(|e| e.typ == ty(t) && name_of(e) == name)
        .count()
}

fn count_in(pp: &PeerPrincipal, t: &str, name: &str) -> usize {
    let seen: Vec<Event> = pp
        .seen
        .lock()
        .expect("poisoned")
        .iter()
        .map(|i: &Inbound| i.event.clone())
        .collect();
    count(&seen, t, name)
}

/// The managed peer agent's local copy of a hub Application.
fn local_copy(hub: &Value, path: &str) -> Value {
    let mut c = hub.clone();
    c["metadata"] = json!({
        "name": hub["metadata"]["name"], "namespace": "argocd",
        "uid": "9a9b9c9d-0000-4000-8000-0000000000aa", "resourceVersion": "3",
        "annotations": {"argocd.argoproj.io/source-uid": hub["metadata"]["uid"]}
    });
    c["spec"]["source"]["path"] = json!(path);
    c["spec"]["destination"] = json!({"name": "in-cluster", "namespace": "guestbook"});
    c
}

#[tokio::test]
async fn principal_managed_restart_resends_exactly_the_changed_copy_and_acks_every_request() {
    init();
    let pki = LocalPki::new().expect("pki");
    let hub = MemStore::new();
    let p = our_principal(&pki, &hub).await;
    let same = hub
        .create(Kind::Application, app("agent-rc", "same", "v1"))
        .await
        .expect("create");
    let changed = hub
        .create(Kind::Application, app("agent-rc", "changed", "v1"))
        .await
        .expect("create");
    let (_l, mut s) = peer_agent(&pki, &p, "agent-rc", "managed").await;
    // first stream of a managed agent: the principal asks for a resource resync
    let rr = s
        .expect("request-resource-resync", |e| {
            is(e, "request-resource-resync", "resourceResync")
        })
        .await;
    assert_eq!(rr.json().expect("json"), json!({}));
    // the peer agent's resyncOnStart: one request-update per resource, then the set checksum
    let mut sent = Vec::new();
    for (h, path) in [(&same, "v1"), (&changed, "edited-on-the-agent")] {
        let uid = h["metadata"]["uid"].as_str().expect("uid");
        let ru = emitter::sent(
            s.emitter.request_update(
                &emitter::new_uuid(),
                h["metadata"]["name"].as_str().expect("name"),
                "argocd",
                uid,
                "Application",
                Some(&emitter::spec_checksum(&local_copy(h, path))),
            ),
            SENT_AT,
        );
        s.send(&ru).await;
        sent.push(ru);
    }
    let uid = |h: &Value| h["metadata"]["uid"].as_str().expect("uid").to_string();
    let (su, cu) = (uid(&same), uid(&changed));
    let set = emitter::set_checksum(&[
        ("Application", "same", su.as_str()),
        ("Application", "changed", cu.as_str()),
    ]);
    let rl = emitter::sent(
        s.emitter
            .request_synced_resource_list(&emitter::new_uuid(), set.as_deref()),
        SENT_AT,
    );
    s.send(&rl).await;
    sent.push(rl);
    for (i, e) in sent.iter().enumerate() {
        expect_ack(&mut s, e, &format!("ACK of resync request #{i}")).await;
    }
    let e = s
        .expect("spec-update of the changed copy", |e| {
            is(e, "spec-update", "application") && name_of(e) == "changed"
        })
        .await;
    assert_eq!(e.json().expect("json")["spec"]["source"]["path"], "v1");
    // a marker after the resync: whatever the principal resends comes before it
    hub.create(Kind::Application, app("agent-rc", "marker", "m"))
        .await
        .expect("marker");
    s.expect("create of the marker", |e| {
        is(e, "create", "application") && name_of(e) == "marker"
    })
    .await;
    for t in ["create", "spec-update", "delete"] {
        assert_eq!(count(&s.seen, t, "same"), 0, "{t} of the unchanged copy");
    }
    assert_eq!(count(&s.seen, "spec-update", "changed"), 1);
    assert_eq!(count(&s.seen, "response-synced-resource", "same"), 0);
    p.shutdown().await;
}

#[tokio::test]
async fn principal_autonomous_resync_requests_are_acked_and_answered_as_the_peer_does() {
    init();
    let pki = LocalPki::new().expect("pki");
    let hub = MemStore::new();
    let p = our_principal(&pki, &hub).await;
    let mut local = app("argocd", "podinfo", "kustomize");
    local["metadata"]["uid"] = json!("4d2c3b4a-5f6e-4d7c-8b9a-0e1f2a3b4c5d");
    local["metadata"]["resourceVersion"] = json!("1");
    {
        // first stream: the principal (replica) sends its request-updates (none yet) and the set
        // checksum of nothing (null)
        let (_l, mut s) = peer_agent(&pki, &p, "agent-aa", "autonomous").await;
        let e = s
            .expect("request-synced-resource-list", |e| {
                is(e, "request-synced-resource-list", "resourceResync")
            })
            .await;
        assert_eq!(e.json().expect("json"), json!({"checksum": null}));
        let c = emitter::sent(
            s.emitter.object_event(&ty("create"), "application", &local),
            SENT_AT,
        );
        s.send(&c).await;
        expect_ack(&mut s, &c, "ACK of the create").await;
    }
    // restart of the peer agent: resyncOnStart sends request-resource-resync
    let (_l, mut s) = peer_agent(&pki, &p, "agent-aa", "autonomous").await;
    let rr = emitter::sent(
        s.emitter.request_resource_resync(&emitter::new_uuid()),
        SENT_AT,
    );
    s.send(&rr).await;
    let e = s
        .expect("request-update for podinfo", |e| {
            is(e, "request-update", "resourceResync")
        })
        .await;
    let d = e.json().expect("json");
    assert_eq!(
        (d["name"].as_str(), d["kind"].as_str()),
        (Some("podinfo"), Some("Application"))
    );
    assert_eq!(
        d["uid"], local["metadata"]["uid"],
        "the agent's UID (source-uid)"
    );
    assert_eq!(
        d["checksum"],
        json!(base64_of(&emitter::spec_checksum(&local))),
        "the spec checksum the peer agent computes for its own object"
    );
    expect_ack(&mut s, &rr, "ACK of request-resource-resync").await;
    // the peer agent's answer to a synced list: one response per resource; the hub lacks "lost"
    let rs = emitter::sent(
        s.emitter.synced_resource(
            &emitter::new_uuid(),
            "lost",
            "argocd",
            "5e2c3b4a-5f6e-4d7c-8b9a-0e1f2a3b4c5d",
            "Application",
        ),
        SENT_AT,
    );
    s.send(&rs).await;
    let e = s
        .expect("request-update for lost", |e| {
            is(e, "request-update", "resourceResync") && name_of(e) == "lost"
        })
        .await;
    assert_eq!(e.json().expect("json")["checksum"], Value::Null);
    expect_ack(&mut s, &rs, "ACK of response-synced-resource").await;
    assert_eq!(
        count(&s.seen, "request-update", "podinfo"),
        1,
        "one request-update per hub copy"
    );
    assert!(
        !s.seen
            .iter()
            .any(|e| e.typ == ty("request-synced-resource-list")),
        "a later stream of the same principal process gets no synced list: {}",
        s.describe()
    );
    p.shutdown().await;
}

fn base64_of(b: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(b)
}

#[tokio::test]
async fn agent_managed_acks_and_answers_the_peer_principals_request_resource_resync() {
    let pki = LocalPki::new().expect("pki");
    let pp = peer_principal(&pki, OURS).await;
    let store = MemStore::new();
    let mut local = app("argocd", "guestbook", "guestbook");
    local["metadata"]["annotations"] =
        json!({"argocd.argoproj.io/source-uid": "8c1a7e0b-8d2f-4c3e-9a61-0f2b3c4d5e6f"});
    store
        .create(Kind::Application, local)
        .await
        .expect("local copy");
    let a = our_agent(&pki, &pp, "agent-mq", Mode::Managed, &store).await;
    pp.expect("request-synced-resource-list on start", |i| {
        is(&i.event, "request-synced-resource-list", "resourceResync")
    })
    .await;
    assert_eq!(count_in(&pp, "request-update", "guestbook"), 1);
    // the peer principal's first-stream request (principal/server.go handleResyncOnConnect)
    let rr = emitter::sent(
        pp.emitter.request_resource_resync(&emitter::new_uuid()),
        SENT_AT,
    );
    pp.send(&rr).await;
    // the answer: one more request-update per copy (queued, so before or after the ACK)
    if count_in(&pp, "request-update", "guestbook") < 2 {
        pp.expect("the answer's request-update", |i| {
            is(&i.event, "request-update", "resourceResync") && name_of(&i.event) == "guestbook"
        })
        .await;
    }
    expect_ack_from(&pp, &rr, "ACK of request-resource-resync").await;
    assert_eq!(
        count_in(&pp, "request-update", "guestbook"),
        2,
        "{}",
        pp.describe()
    );
    a.shutdown().await;
    pp.shutdown().await;
}

#[tokio::test]
async fn agent_autonomous_acks_request_updates_and_resends_only_the_changed_object() {
    let pki = LocalPki::new().expect("pki");
    let pp = peer_principal(&pki, OURS).await;
    let store = MemStore::new();
    let mut objs = Vec::new();
    for (name, uid) in [
        ("same", "1b2c3d4e-0000-4000-8000-000000000001"),
        ("changed", "1b2c3d4e-0000-4000-8000-000000000002"),
    ] {
        let mut o = app("argocd", name, "v1");
        o["metadata"]["uid"] = json!(uid);
        objs.push(store.create(Kind::Application, o).await.expect("local"));
    }
    let a = our_agent(&pki, &pp, "agent-ab", Mode::Autonomous, &store).await;
    // on start, in any order: request-resource-resync and a create per local object
    let key = |i: &Inbound| -> Option<String> {
        if is(&i.event, "request-resource-resync", "resourceResync") {
            assert_eq!(i.event.json().expect("json"), json!({}));
            Some("resync".into())
        } else if is(&i.event, "create", "application") {
            Some(name_of(&i.event))
        } else {
            None
        }
    };
    let mut want: Vec<String> = ["resync", "same", "changed"].map(String::from).to_vec();
    while !want.is_empty() {
        let i = pp
            .expect(&format!("on start: {want:?}"), |i| {
                key(i).is_some_and(|k| want.contains(&k))
            })
            .await;
        let k = key(&i).expect("matched");
        want.retain(|w| *w != k);
    }
    // the peer principal's request-updates (hub copies): one matches, one does not
    let mut hub_changed = objs[1].clone();
    hub_changed["spec"]["source"]["path"] = json!("edited-on-the-hub");
    let mut sent = Vec::new();
    for (o, sum_of) in [(&objs[0], &objs[0]), (&objs[1], &hub_changed)] {
        let ru = emitter::sent(
            pp.emitter.request_update(
                &emitter::new_uuid(),
                o["metadata"]["name"].as_str().expect("name"),
                "agent-ab",
                o["metadata"]["uid"].as_str().expect("uid"),
                "Application",
                Some(&emitter::spec_checksum(sum_of)),
            ),
            SENT_AT,
        );
        pp.send(&ru).await;
        sent.push(ru);
    }
    for (i, e) in sent.iter().enumerate() {
        expect_ack_from(&pp, e, &format!("ACK of request-update #{i}")).await;
    }
    let e = pp
        .expect("spec-update of the changed object", |i| {
            is(&i.event, "spec-update", "application") && name_of(&i.event) == "changed"
        })
        .await;
    assert_eq!(
        e.event.json().expect("json")["spec"]["source"]["path"],
        "v1"
    );
    // a marker after the resync: whatever the agent resends comes before it
    store
        .create(Kind::Application, app("argocd", "marker", "m"))
        .await
        .expect("marker");
    pp.expect("create of the marker", |i| {
        is(&i.event, "create", "application") && name_of(&i.event) == "marker"
    })
    .await;
    assert_eq!(count_in(&pp, "spec-update", "same"), 0, "{}", pp.describe());
    assert_eq!(
        count_in(&pp, "spec-update", "changed"),
        1,
        "{}",
        pp.describe()
    );
    assert_eq!(count_in(&pp, "create", "same"), 1, "{}", pp.describe());
    a.shutdown().await;
    pp.shutdown().await;
}

#[tokio::test]
async fn principal_request_update_for_a_repository_never_touches_a_same_named_application() {
    init();
    let pki = LocalPki::new().expect("pki");
    let hub = MemStore::new();
    let p = our_principal(&pki, &hub).await;
    hub.create(Kind::Application, app("agent-rp", "guestbook", "g"))
        .await
        .expect("create");
    let (_l, mut s) = peer_agent(&pki, &p, "agent-rp", "managed").await;
    // a managed peer agent resyncs its repository Secrets with kind Repository (and the GPG key
    // ConfigMap with kind GPGKey); the names may equal an Application's
    let mut sent = Vec::new();
    for kind in ["Repository", "GPGKey"] {
        let ru = emitter::sent(
            s.emitter.request_update(
                &emitter::new_uuid(),
                "guestbook",
                "argocd",
                "2f3e4d5c-0000-4000-8000-000000000001",
                kind,
                Some(&[7u8; 32]),
            ),
            SENT_AT,
        );
        s.send(&ru).await;
        sent.push(ru);
    }
    for (i, e) in sent.iter().enumerate() {
        // the end of the event for the peer: an ACK
        expect_ack(&mut s, e, &format!("reply to request-update #{i}")).await;
    }
    hub.create(Kind::Application, app("agent-rp", "marker", "m"))
        .await
        .expect("marker");
    s.expect("create of the marker", |e| {
        is(e, "create", "application") && name_of(e) == "marker"
    })
    .await;
    // the hub has no repository or GPG ConfigMap "guestbook": as the peer's resync, the orphans
    // are deleted on the agent — as what they are, never as the same-named Application
    let of = |t: &str, target: &str| {
        s.seen
            .iter()
            .filter(|e| is(e, t, target) && name_of(e) == "guestbook")
            .count()
    };
    assert_eq!(of("delete", "repository"), 1, "{}", s.describe());
    assert_eq!(of("delete", "gpgkey"), 1, "{}", s.describe());
    for t in ["delete", "spec-update"] {
        assert_eq!(of(t, "application"), 0, "{t}: {}", s.describe());
    }
    assert!(
        hub.get(Kind::Application, "agent-rp", "guestbook")
            .await
            .expect("get")
            .is_some(),
        "the hub Application is untouched"
    );
    p.shutdown().await;
}

#[tokio::test]
async fn agent_managed_set_checksum_covers_applications_and_appprojects_as_the_peers() {
    let pki = LocalPki::new().expect("pki");
    let pp = peer_principal(&pki, OURS).await;
    let store = MemStore::new();
    let (app_uid, proj_uid) = (
        "3c1a7e0b-8d2f-4c3e-9a61-0f2b3c4d5e6f",
        "4c1a7e0b-8d2f-4c3e-9a61-0f2b3c4d5e6f",
    );
    let mut local = app("argocd", "guestbook", "guestbook");
    local["metadata"]["annotations"] = json!({"argocd.argoproj.io/source-uid": app_uid});
    store.create(Kind::Application, local).await.expect("app");
    let mut proj = project("argocd", "team", "in-cluster");
    proj["metadata"]["annotations"] = json!({"argocd.argoproj.io/source-uid": proj_uid});
    store.create(Kind::AppProject, proj).await.expect("project");
    let a = our_agent(&pki, &pp, "agent-ms", Mode::Managed, &store).await;
    let i = pp
        .expect("request-synced-resource-list", |i| {
            is(&i.event, "request-synced-resource-list", "resourceResync")
        })
        .await;
    // the peer's AgentResources after it sent this agent one Application and one AppProject
    let want = emitter::set_checksum(&[
        ("Application", "guestbook", app_uid),
        ("AppProject", "team", proj_uid),
    ])
    .expect("sum");
    assert_eq!(
        i.event.json().expect("json")["checksum"],
        json!(base64_of(&want))
    );
    assert_eq!(
        count_in(&pp, "request-update", "team"),
        1,
        "{}",
        pp.describe()
    );
    a.shutdown().await;
    pp.shutdown().await;
}
