//! A peer agent (argocd-agent's behaviour on the wire) against OUR principal.

use std::time::Duration;

use argocd_pull_agent::local::LocalPki;
use argocd_pull_agent_core::store::{Kind, MemStore, Store};
use argocd_pull_agent_interop::emitter::{self, ty};
use argocd_pull_agent_interop::peer_agent::{self, PEER_VERSION, PeerStream};
use argocd_pull_agent_interop::sdk::{self, Event};
use base64::Engine;
use prost::Message;
use serde_json::{Value, json};

use crate::common::*;
use crate::golden::fixture;

fn is(e: &Event, t: &str, target: &str) -> bool {
    e.typ == ty(t) && e.dataschema == target
}

/// The ACK the peer agent needs to stop resending `sent`: target `eventProcessed` (as the SDK
/// reads it) with the same `resourceid` and `eventid` (event_writer.go `Remove`).
async fn expect_ack(s: &mut PeerStream, sent: &Event, what: &str) -> Event {
    let (rid, eid) = (sent.ext("resourceid"), sent.ext("eventid"));
    s.expect(what, |e| {
        e.dataschema == "eventProcessed" && e.ext("resourceid") == rid && e.ext("eventid") == eid
    })
    .await
}

/// The agent's local copy of a hub Application, as a managed peer agent holds it.
fn local_copy(hub: &Value, local_uid: &str, rv: &str) -> Value {
    let mut c = hub.clone();
    c["metadata"] = json!({
        "name": hub["metadata"]["name"], "namespace": "argocd", "uid": local_uid,
        "resourceVersion": rv,
        "annotations": {"argocd.argoproj.io/source-uid": hub["metadata"]["uid"]}
    });
    c["spec"]["destination"] = json!({"name": "in-cluster", "namespace": "guestbook"});
    c
}

#[tokio::test]
async fn peer_agent_with_the_peer_version_string_logs_in() {
    init();
    let pki = LocalPki::new().expect("pki");
    let hub = MemStore::new();
    // `argocd-pull principal --report-version 99.9.9-unreleased` in a fleet of peer agents
    let p = our_principal_reporting(&pki, &hub, PEER_VERSION).await;
    let mut cfg = peer_agent_cfg(&pki, &p, "agent-v", "managed");
    cfg.version = PEER_VERSION.into();
    let login = peer_agent::login(&cfg)
        .await
        .unwrap_or_else(|s| panic!("refused: {s:?}"));
    assert_eq!(login.auth.version, PEER_VERSION);
    assert_eq!(login.principal_version, PEER_VERSION);
    p.shutdown().await;
}

#[tokio::test]
async fn a_peer_agent_of_another_version_is_refused_as_the_peer_principal_does() {
    init();
    let pki = LocalPki::new().expect("pki");
    let hub = MemStore::new();
    let p = our_principal(&pki, &hub).await;
    // same major.minor is not enough: the peer demands string equality
    let mut cfg = peer_agent_cfg(&pki, &p, "agent-vm", "managed");
    cfg.version = format!("{}-other", argocd_pull_agent_core::VERSION);
    let st = peer_agent::login(&cfg).await.err().expect("refused");
    assert_eq!(st.code(), tonic::Code::FailedPrecondition);
    assert_eq!(st.message(), "version mismatch");
    cfg.version = String::new();
    let st = peer_agent::login(&cfg).await.err().expect("refused");
    assert_eq!(st.code(), tonic::Code::InvalidArgument);
    assert_eq!(st.message(), "agent version is required");
    p.shutdown().await;
}

#[tokio::test]
async fn peer_agent_login_token_is_what_the_peer_parses_and_subscribe_takes_it_raw() {
    init();
    let pki = LocalPki::new().expect("pki");
    let hub = MemStore::new();
    let p = our_principal(&pki, &hub).await;
    let (login, _s) = peer_agent(&pki, &p, "agent-login", "autonomous").await;
    assert_eq!(
        login.subject,
        json!({"clientID": "agent-login", "mode": "autonomous"}),
        "the peer agent reads clientID from the token's sub claim"
    );
    assert_eq!(login.principal_version, argocd_pull_agent_core::VERSION);
    assert_eq!(login.auth.principal_namespace, "argocd");
    assert!(!login.auth.refresh_token.is_empty());
    // a refresh (the peer agent's `refreshToken`) answers a new access token and, while the
    // refresh token has more than 10 minutes left, no refresh token (the peer principal's
    // `RefreshToken`; the peer agent then keeps its own)
    use argocd_pull_agent_interop::pb::authapi::{
        RefreshTokenRequest, authentication_client::AuthenticationClient,
    };
    let refreshed = AuthenticationClient::new(login.channel.clone())
        .refresh_token(RefreshTokenRequest {
            refresh_token: login.auth.refresh_token.clone(),
        })
        .await
        .expect("refresh")
        .into_inner();
    assert_eq!(
        peer_agent::token_subject(&refreshed.access_token).unwrap(),
        json!({"clientID": "agent-login", "mode": "autonomous"})
    );
    assert_eq!(
        refreshed.refresh_token, "",
        "the agent keeps its refresh token"
    );
    // a wrong mode is refused before any token is issued
    let mut cfg = peer_agent_cfg(&pki, &p, "agent-login", "readonly");
    cfg.version = argocd_pull_agent_core::VERSION.into();
    assert!(peer_agent::login(&cfg).await.is_err());
    p.shutdown().await;
}

/// `--max-events-in-flight 3`: the peer agent gets three events (its resync request and
/// Applications) and no more until it ACKs one; then one more; ACKing as it goes, every
/// Application arrives.
#[tokio::test]
async fn a_principal_sends_no_more_than_its_window_of_unacknowledged_events() {
    let pki = LocalPki::new().expect("pki");
    let hub = MemStore::new();
    let p = our_principal_with(&pki, &hub, |cfg| cfg.max_in_flight = 3).await;
    let (_l, mut s) = peer_agent(&pki, &p, "agent-w", "managed").await;
    s.auto_ack = false;
    for i in 0..8 {
        hub.create(Kind::Application, app("agent-w", &format!("w{i}"), "w"))
            .await
            .expect("create");
    }
    let mut got = Vec::new();
    for _ in 0..3 {
        got.push(s.expect("one of the first three", |_| true).await);
    }
    // nothing beyond the window while none is ACKed (a bounded wait for an absence, well
    // before the first resend after 5 s)
    let more = tokio::time::timeout(Duration::from_secs(1), s.next()).await;
    assert!(
        more.is_err(),
        "a fourth event before any ACK: {more:?}\n{}",
        s.describe()
    );
    let ack = s.emitter.processed(&got[0]);
    s.send(&ack).await;
    got.push(s.expect("one more after one ACK", |_| true).await);
    let more = tokio::time::timeout(Duration::from_secs(1), s.next()).await;
    assert!(
        more.is_err(),
        "two events for one ACK: {more:?}\n{}",
        s.describe()
    );
    // ACKing as it goes, every Application arrives
    for e in &got[1..] {
        let ack = s.emitter.processed(e);
        s.send(&ack).await;
    }
    s.auto_ack = true;
    let mut names: Vec<String> = got
        .iter()
        .filter(|e| is(e, "create", "application"))
        .map(|e| e.subject.clone())
        .collect();
    while names.len() < 8 {
        let e = s
            .expect("the rest", |e| is(e, "create", "application"))
            .await;
        if !names.contains(&e.subject) {
            names.push(e.subject);
        }
    }
    p.shutdown().await;
}

#[tokio::test]
async fn managed_hub_application_lifecycle_reaches_the_peer_agent() {
    init();
    let pki = LocalPki::new().expect("pki");
    let hub = MemStore::new();
    let p = our_principal(&pki, &hub).await;
    let (_l, mut s) = peer_agent(&pki, &p, "agent-m1", "managed").await;
    let created = hub
        .create(Kind::Application, app("agent-m1", "guestbook", "guestbook"))
        .await
        .expect("create");
    let (rid, _) = ids(&created);
    let e = s
        .expect("create of guestbook", |e| is(e, "create", "application"))
        .await;
    assert_eq!(e.ext("resourceid"), Some(rid.as_str()));
    assert!(
        e.ext("eventid")
            .is_some_and(|id| id.starts_with(&format!("{rid}_"))),
        "eventid = name_uid_resourceVersion: {e:?}"
    );
    assert_eq!(e.subject, "agent-m1/guestbook");
    assert_eq!(e.datacontenttype, "application/json");
    assert!(
        e.ext("sentat").is_some(),
        "the peer stamps sentat on every sent event"
    );
    assert_eq!(
        e.json().expect("json")["spec"]["source"]["path"],
        "guestbook"
    );
    hub.merge_patch(
        Kind::Application,
        "agent-m1",
        "guestbook",
        json!({"spec": {"source": {"path": "v2"}}}),
    )
    .await
    .expect("patch");
    let e = s
        .expect("spec-update", |e| is(e, "spec-update", "application"))
        .await;
    assert_eq!(e.json().expect("json")["spec"]["source"]["path"], "v2");
    hub.delete(Kind::Application, "agent-m1", "guestbook")
        .await
        .expect("delete");
    s.expect("delete", |e| is(e, "delete", "application")).await;
    assert!(s.unreadable.is_empty(), "{}", s.describe());
    p.shutdown().await;
}

#[tokio::test]
async fn managed_status_update_from_the_peer_agent_reaches_the_hub() {
    init();
    let pki = LocalPki::new().expect("pki");
    let hub = MemStore::new();
    let p = our_principal(&pki, &hub).await;
    let (_l, s) = peer_agent(&pki, &p, "agent-m2", "managed").await;
    let created = hub
        .create(Kind::Application, app("agent-m2", "guestbook", "guestbook"))
        .await
        .expect("create");
    let mut local = local_copy(&created, "8a7b6c5d-0000-4a2b-9c1d-0e9f8a7b6c5d", "2231");
    local["status"] = json!({"sync": {"status": "Synced", "revision": "53e28ff"}, "health": {"status": "Healthy"}});
    let ev = emitter::sent(
        s.emitter
            .object_event(&ty("status-update"), "application", &local),
        SENT_AT,
    );
    s.send(&ev).await;
    wait_for(
        &hub,
        Kind::Application,
        "agent-m2",
        "guestbook",
        "status from the peer agent",
        |o| o.is_some_and(|o| o["status"]["health"]["status"] == "Healthy"),
    )
    .await;
    p.shutdown().await;
}

#[tokio::test]
async fn managed_status_update_is_acked_the_way_the_peer_agent_needs() {
    init();
    let pki = LocalPki::new().expect("pki");
    let hub = MemStore::new();
    let p = our_principal(&pki, &hub).await;
    let (_l, mut s) = peer_agent(&pki, &p, "agent-m3", "managed").await;
    let created = hub
        .create(Kind::Application, app("agent-m3", "guestbook", "guestbook"))
        .await
        .expect("create");
    let mut local = local_copy(&created, "8a7b6c5d-1111-4a2b-9c1d-0e9f8a7b6c5d", "77");
    local["status"] = json!({"health": {"status": "Progressing"}});
    let ev = emitter::sent(
        s.emitter
            .object_event(&ty("status-update"), "application", &local),
        SENT_AT,
    );
    s.send(&ev).await;
    let ack = expect_ack(&mut s, &ev, "ACK of the status-update").await;
    assert_eq!(ack.typ, ty("processed"));
    assert_eq!(
        without_sentat(&ack),
        without_sentat(&ev),
        "an ACK copies every extension"
    );
    p.shutdown().await;
}

#[tokio::test]
async fn autonomous_application_lifecycle_from_the_peer_agent_reaches_the_hub() {
    init();
    let pki = LocalPki::new().expect("pki");
    let hub = MemStore::new();
    let p = our_principal(&pki, &hub).await;
    let (_l, s) = peer_agent(&pki, &p, "agent-a1", "autonomous").await;
    let mut local = app("argocd", "podinfo", "kustomize");
    local["metadata"]["uid"] = json!("1d2c3b4a-5f6e-4d7c-8b9a-0e1f2a3b4c5d");
    local["metadata"]["resourceVersion"] = json!("3310");
    local["spec"]["project"] = json!("team-a");
    s.send(&emitter::sent(
        s.emitter.object_event(&ty("create"), "application", &local),
        SENT_AT,
    ))
    .await;
    let h = wait_for(
        &hub,
        Kind::Application,
        "agent-a1",
        "podinfo",
        "created",
        |o| o.is_some(),
    )
    .await
    .expect("present");
    assert_eq!(h["spec"]["project"], "agent-a1-team-a");
    local["metadata"]["resourceVersion"] = json!("3342");
    local["spec"]["source"]["targetRevision"] = json!("6.9.0");
    local["status"] = json!({"sync": {"status": "Synced"}, "health": {"status": "Healthy"}});
    s.send(&emitter::sent(
        s.emitter
            .object_event(&ty("spec-update"), "application", &local),
        SENT_AT,
    ))
    .await;
    wait_for(
        &hub,
        Kind::Application,
        "agent-a1",
        "podinfo",
        "spec + status updated",
        |o| {
            o.is_some_and(|o| {
                o["spec"]["source"]["targetRevision"] == "6.9.0"
                    && o["status"]["health"]["status"] == "Healthy"
            })
        },
    )
    .await;
    s.send(&emitter::sent(
        s.emitter.object_event(&ty("delete"), "application", &local),
        SENT_AT,
    ))
    .await;
    wait_for(
        &hub,
        Kind::Application,
        "agent-a1",
        "podinfo",
        "deleted",
        |o| o.is_none(),
    )
    .await;
    p.shutdown().await;
}

#[tokio::test]
async fn autonomous_events_are_acked_the_way_the_peer_agent_needs() {
    init();
    let pki = LocalPki::new().expect("pki");
    let hub = MemStore::new();
    let p = our_principal(&pki, &hub).await;
    let (_l, mut s) = peer_agent(&pki, &p, "agent-a2", "autonomous").await;
    let mut local = app("argocd", "podinfo", "kustomize");
    local["metadata"]["uid"] = json!("2d2c3b4a-5f6e-4d7c-8b9a-0e1f2a3b4c5d");
    local["metadata"]["resourceVersion"] = json!("1");
    let ev = emitter::sent(
        s.emitter.object_event(&ty("create"), "application", &local),
        SENT_AT,
    );
    s.send(&ev).await;
    let ack = expect_ack(&mut s, &ev, "ACK of the create").await;
    assert_eq!(ack.typ, ty("processed"));
    assert_eq!(
        without_sentat(&ack),
        without_sentat(&ev),
        "the peer's ProcessedEvent copies every extension"
    );
    p.shutdown().await;
}

/// Extensions other than `sentat` (see `acks_carry_the_sentat_of_the_acknowledged_event`).
pub fn without_sentat(e: &Event) -> std::collections::BTreeMap<String, sdk::Value> {
    let mut x = e.extensions.clone();
    x.remove("sentat");
    x
}

#[tokio::test]
async fn acks_carry_the_sentat_of_the_acknowledged_event() {
    init();
    let pki = LocalPki::new().expect("pki");
    let hub = MemStore::new();
    let p = our_principal(&pki, &hub).await;
    let (_l, mut s) = peer_agent(&pki, &p, "agent-sa", "autonomous").await;
    let mut local = app("argocd", "podinfo", "kustomize");
    local["metadata"]["uid"] = json!("4d2c3b4a-5f6e-4d7c-8b9a-0e1f2a3b4c5d");
    local["metadata"]["resourceVersion"] = json!("1");
    let ev = emitter::sent(
        s.emitter.object_event(&ty("create"), "application", &local),
        SENT_AT,
    );
    s.send(&ev).await;
    let ack = expect_ack(&mut s, &ev, "ACK of the create").await;
    assert_eq!(ack.extensions, ev.extensions);
    p.shutdown().await;
}

#[tokio::test]
async fn golden_bytes_of_an_autonomous_create_are_accepted() {
    init();
    let pki = LocalPki::new().expect("pki");
    let hub = MemStore::new();
    let p = our_principal(&pki, &hub).await;
    let (_l, s) = peer_agent(&pki, &p, "agent-gold", "autonomous").await;
    let f = fixture("application-create-autonomous");
    let raw =
        argocd_pull_agent_interop::pb::io::cloudevents::v1::CloudEvent::decode(f.bytes.as_slice())
            .expect("decode");
    s.send_raw(raw).await;
    let h = wait_for(
        &hub,
        Kind::Application,
        "agent-gold",
        "podinfo",
        "created from Go bytes",
        |o| o.is_some(),
    )
    .await
    .expect("present");
    assert_eq!(
        h["metadata"]["annotations"]["example.com/note"], "a<b && c>d",
        "Go's \\u003c escapes decode"
    );
    assert_eq!(
        h["spec"]["source"]["repoURL"],
        "https://github.com/stefanprodan/podinfo"
    );
    p.shutdown().await;
}

#[tokio::test]
async fn bad_payload_from_the_peer_agent_is_refused_and_nothing_is_written() {
    init();
    let pki = LocalPki::new().expect("pki");
    let hub = MemStore::new();
    let p = our_principal(&pki, &hub).await;
    let (_l, mut s) = peer_agent(&pki, &p, "agent-bad", "autonomous").await;
    let meta = json!({"metadata": {"name": "broken", "namespace": "argocd", "uid": "u-1", "resourceVersion": "1"}});
    for (i, data) in [
        b"{\"metadata\":{\"name\":\"broken\"".to_vec(),
        br#"{"metadata":{"name":"broken"},"spec":"not an object"}"#.to_vec(),
    ]
    .into_iter()
    .enumerate()
    {
        let mut m = meta.clone();
        m["metadata"]["resourceVersion"] = json!(i.to_string());
        let ev = emitter::sent(
            s.emitter
                .object_event_bytes(&ty("create"), "application", &m, data),
            SENT_AT,
        );
        s.send(&ev).await;
        let reply = expect_ack(
            &mut s,
            &ev,
            "refusal the peer reads as the end of this event",
        )
        .await;
        assert!(
            reply.typ == ty("error") || reply.typ == ty("processed"),
            "{reply:?}"
        );
        let written = hub
            .list(Kind::Application, Some("agent-bad"))
            .await
            .expect("list");
        assert!(
            written.is_empty(),
            "nothing may be written for payload {:?}, found {written:?}",
            String::from_utf8_lossy(&ev.data)
        );
    }
    p.shutdown().await;
}

#[tokio::test]
async fn heartbeat_ping_is_acked_like_the_peer_principal_does() {
    init();
    let pki = LocalPki::new().expect("pki");
    let hub = MemStore::new();
    let p = our_principal(&pki, &hub).await;
    let (_l, mut s) = peer_agent(&pki, &p, "agent-hb", "managed").await;
    let ping = s.emitter.heartbeat("ping", &emitter::new_uuid());
    s.send(&ping).await;
    let ack = expect_ack(&mut s, &ping, "ACK of the ping").await;
    assert_eq!(ack.typ, ty("processed"));
    assert!(
        !s.seen.iter().any(|e| e.typ == ty("pong")),
        "the peer principal never sends pong: {}",
        s.describe()
    );
    p.shutdown().await;
}

#[tokio::test]
async fn managed_resync_after_restart_with_matching_checksums_resends_nothing() {
    init();
    let pki = LocalPki::new().expect("pki");
    let hub = MemStore::new();
    let p = our_principal(&pki, &hub).await;
    let mut a = app("agent-rs", "guestbook", "guestbook");
    a["metadata"]["annotations"] = json!({"note": "a<b & c>d"});
    let created = hub.create(Kind::Application, a).await.expect("create");
    let hub_uid = created["metadata"]["uid"]
        .as_str()
        .expect("uid")
        .to_string();
    // the peer agent restarts holding its copy: resyncOnStart sends one request-update per
    // resource, then request-synced-resource-list with the set checksum
    let (_l, mut s) = peer_agent(&pki, &p, "agent-rs", "managed").await;
    let local = local_copy(&created, "9a9b9c9d-0000-4000-8000-000000000001", "5");
    let ru = emitter::sent(
        s.emitter.request_update(
            &emitter::new_uuid(),
            "guestbook",
            "argocd",
            &hub_uid,
            "Application",
            Some(&emitter::spec_checksum(&local)),
        ),
        SENT_AT,
    );
    s.send(&ru).await;
    let set = emitter::set_checksum(&[("Application", "guestbook", &hub_uid)]);
    let rl = emitter::sent(
        s.emitter
            .request_synced_resource_list(&emitter::new_uuid(), set.as_deref()),
        SENT_AT,
    );
    s.send(&rl).await;
    expect_ack(&mut s, &ru, "ACK of request-update").await;
    expect_ack(&mut s, &rl, "ACK of request-synced-resource-list").await;
    // a marker after the resync: whatever the principal resends comes before it
    hub.create(Kind::Application, app("agent-rs", "marker", "m"))
        .await
        .expect("marker");
    s.expect("create of the marker", |e| {
        is(e, "create", "application") && e.subject == "agent-rs/marker"
    })
    .await;
    let resent: Vec<_> = s
        .seen
        .iter()
        .filter(|e| e.subject == "agent-rs/guestbook" || e.typ == ty("response-synced-resource"))
        .map(peer_agent::summary)
        .collect();
    assert!(resent.is_empty(), "zero resends expected, got {resent:#?}");
    p.shutdown().await;
}

#[tokio::test]
async fn autonomous_agent_restart_gets_readable_request_updates() {
    init();
    let pki = LocalPki::new().expect("pki");
    let hub = MemStore::new();
    let p = our_principal(&pki, &hub).await;
    let mut local = app("argocd", "podinfo", "kustomize");
    local["metadata"]["uid"] = json!("3d2c3b4a-5f6e-4d7c-8b9a-0e1f2a3b4c5d");
    local["metadata"]["resourceVersion"] = json!("1");
    {
        let (_l, s) = peer_agent(&pki, &p, "agent-ar", "autonomous").await;
        s.send(&emitter::sent(
            s.emitter.object_event(&ty("create"), "application", &local),
            SENT_AT,
        ))
        .await;
        wait_for(
            &hub,
            Kind::Application,
            "agent-ar",
            "podinfo",
            "created",
            |o| o.is_some(),
        )
        .await;
    }
    // restart: the autonomous peer agent asks for a resource resync on its new stream
    let (_l, mut s) = peer_agent(&pki, &p, "agent-ar", "autonomous").await;
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
    assert_eq!(d["name"], "podinfo");
    assert_eq!(d["kind"], "Application");
    use base64::Engine;
    let sum = base64::engine::general_purpose::STANDARD
        .decode(d["checksum"].as_str().expect("checksum is a base64 string"))
        .expect("base64");
    assert_eq!(sum.len(), 32, "SHA-256");
    p.shutdown().await;
}

#[tokio::test]
async fn managed_appproject_reaches_the_peer_agent() {
    init();
    let pki = LocalPki::new().expect("pki");
    let hub = MemStore::new();
    let p = our_principal(&pki, &hub).await;
    let (_l, mut s) = peer_agent(&pki, &p, "agent-pj", "managed").await;
    hub.create(Kind::AppProject, project("argocd", "team-a", "agent-pj"))
        .await
        .expect("create");
    let e = s
        .expect("appproject create", |e| {
            e.dataschema == "appproject" && (e.typ == ty("create") || e.typ == ty("spec-update"))
        })
        .await;
    assert_eq!(e.json().expect("json")["metadata"]["name"], "team-a");
    p.shutdown().await;
}

#[tokio::test]
async fn managed_repository_of_a_matching_project_reaches_the_peer_agent() {
    init();
    let pki = LocalPki::new().expect("pki");
    let hub = MemStore::new();
    let p = our_principal(&pki, &hub).await;
    let (_l, mut s) = peer_agent(&pki, &p, "agent-rq", "managed").await;
    hub.create(Kind::AppProject, project("argocd", "team-r", "agent-rq"))
        .await
        .expect("create");
    let b64 = |x: &str| base64::engine::general_purpose::STANDARD.encode(x);
    let secret = hub
        .create(
            Kind::Secret,
            json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "repo-r", "namespace": "argocd",
                    "labels": {"argocd.argoproj.io/secret-type": "repository"}},
                "type": "Opaque",
                "data": {"project": b64("team-r"), "url": b64("https://git.example/r.git")}}),
        )
        .await
        .expect("create");
    let e = s
        .expect("repository create", |e| {
            e.dataschema == "repository" && e.typ == ty("create")
        })
        .await;
    // what the peer agent's `ev.Repository()` decodes into a corev1.Secret
    let d = e.json().expect("json");
    assert_eq!(d["metadata"]["name"], "repo-r");
    assert_eq!(d["metadata"]["uid"], secret["metadata"]["uid"]);
    assert_eq!(d["data"]["project"], b64("team-r"));
    assert_eq!(e.subject, "argocd/repo-r");
    let (rid, eid) = ids(&secret);
    assert_eq!(e.ext("resourceid"), Some(rid.as_str()));
    assert_eq!(e.ext("eventid"), Some(eid.as_str()));
    p.shutdown().await;
}

#[tokio::test]
async fn autonomous_appproject_from_the_peer_agent_reaches_the_hub() {
    init();
    let pki = LocalPki::new().expect("pki");
    let hub = MemStore::new();
    let p = our_principal(&pki, &hub).await;
    let (_l, s) = peer_agent(&pki, &p, "agent-pa", "autonomous").await;
    let mut proj = project("argocd", "team-b", "in-cluster");
    proj["metadata"]["uid"] = json!("b1c2d3e4-f5a6-4b7c-8d9e-0f1a2b3c4d5e");
    proj["metadata"]["resourceVersion"] = json!("1207");
    s.send(&emitter::sent(
        s.emitter.object_event(&ty("create"), "appproject", &proj),
        SENT_AT,
    ))
    .await;
    let h = wait_for(
        &hub,
        Kind::AppProject,
        "argocd",
        "agent-pa-team-b",
        "created",
        |o| o.is_some(),
    )
    .await
    .expect("present");
    assert_eq!(h["spec"]["sourceRepos"], json!(["*"]));
    p.shutdown().await;
}

#[test]
fn the_peer_emitter_encodes_what_the_peer_decodes() {
    // sanity of the support code used above: every constructor's event survives the SDK rules
    let em = emitter::Emitter::new(emitter::AGENT_SOURCE);
    let a = app("argocd", "x", "p");
    for e in [
        em.object_event(&ty("create"), "application", &a),
        em.heartbeat("ping", "u"),
        em.request_resource_resync("u"),
        em.request_synced_resource_list("u", None),
    ] {
        let back = sdk::decode(&sdk::encode(&e)).expect("decode");
        assert_eq!(back, e);
        assert!(emitter::target(&back).is_some());
    }
    let _ = Value::Null;
}
