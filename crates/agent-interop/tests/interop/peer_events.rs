//! The peer's `error` events, `request-update`s for kinds we do not sync, and the events we do
//! not handle: each gets the reply the peer's logic implies, never silence.

use argocd_pull_agent::local::LocalPki;
use argocd_pull_agent_core::Mode;
use argocd_pull_agent_core::store::{Kind, MemStore, Store};
use argocd_pull_agent_interop::emitter::{self, ty};
use argocd_pull_agent_interop::peer_agent::PeerStream;
use argocd_pull_agent_interop::sdk::Event;
use serde_json::{Value, json};

use crate::common::*;

async fn reply_to(s: &mut PeerStream, sent: &Event, what: &str) -> Event {
    let (rid, eid) = (sent.ext("resourceid"), sent.ext("eventid"));
    s.expect(what, |e| {
        e.dataschema == "eventProcessed" && e.ext("resourceid") == rid && e.ext("eventid") == eid
    })
    .await
}

fn message(e: &Event) -> String {
    let v: Value = serde_json::from_slice(&e.data).unwrap_or_default();
    v["message"].as_str().unwrap_or_default().to_string()
}

#[tokio::test]
async fn an_error_event_from_a_managed_agent_marks_the_hub_application_degraded() {
    init();
    let pki = LocalPki::new().expect("pki");
    let hub = MemStore::new();
    let p = our_principal(&pki, &hub).await;
    let (_l, mut s) = peer_agent(&pki, &p, "agent-er", "managed").await;
    let mut a = app("agent-er", "guestbook", "guestbook");
    a["status"] = json!({"health": {"status": "Healthy"}, "sync": {"status": "Synced"}});
    hub.create(Kind::Application, a).await.expect("create");
    // the peer agent's addErrorEventToQueue (adoption policy "never")
    let ev = emitter::sent(
        s.emitter.error(
            &emitter::new_uuid(),
            "application",
            "guestbook",
            "argocd",
            "Adoption policy for application is set to never.",
        ),
        SENT_AT,
    );
    s.send(&ev).await;
    let ack = reply_to(&mut s, &ev, "ACK of the error event").await;
    assert_eq!(
        ack.typ,
        ty("processed"),
        "the peer ACKs a processed error event"
    );
    let h = hub
        .get(Kind::Application, "agent-er", "guestbook")
        .await
        .expect("get")
        .expect("present");
    assert_eq!(h["status"]["health"]["status"], "Degraded");
    assert_eq!(
        h["status"]["conditions"],
        json!([{"type": "AgentError",
                "message": "Error occurred on cluster managed by agent agent-er: Adoption policy for application is set to never."}])
    );
    // an error naming an Application the hub does not have is refused, nothing is created
    let ev = emitter::sent(
        s.emitter
            .error(&emitter::new_uuid(), "application", "nope", "argocd", "x"),
        SENT_AT,
    );
    s.send(&ev).await;
    let r = reply_to(&mut s, &ev, "refusal of an error for an unknown app").await;
    assert_eq!(r.typ, ty("error"));
    assert!(message(&r).contains("does not exist on the hub"), "{r:?}");
    assert!(
        hub.get(Kind::Application, "agent-er", "nope")
            .await
            .expect("get")
            .is_none()
    );
    p.shutdown().await;
}

#[tokio::test]
async fn a_request_update_for_a_repository_or_gpg_key_never_deletes_an_application() {
    init();
    let pki = LocalPki::new().expect("pki");
    let hub = MemStore::new();
    let p = our_principal(&pki, &hub).await;
    let (_l, mut s) = peer_agent(&pki, &p, "agent-ru", "managed").await;
    // the hub has no Application "guestbook": a request-update of kind Application for it would
    // rightly be answered with `delete`; one of kind Repository / GPGKey is answered with the
    // delete of the orphaned repository / ConfigMap (as the peer's resync)
    for (kind, reply) in [("Repository", "processed"), ("GPGKey", "processed")] {
        let ev = emitter::sent(
            s.emitter.request_update(
                &emitter::new_uuid(),
                "guestbook",
                "argocd",
                "7b2c3d4e-0000-4000-8000-000000000007",
                kind,
                Some(b"0123456789abcdef0123456789abcdef"),
            ),
            SENT_AT,
        );
        s.send(&ev).await;
        let r = reply_to(&mut s, &ev, kind).await;
        assert_eq!(r.typ, ty(reply), "{kind}: {r:?}");
        if reply == "error" {
            assert!(message(&r).contains(kind), "{r:?}");
        }
    }
    // a ping after them: once its ACK is in, anything they caused has been sent before it
    let ping = s.emitter.heartbeat("ping", &emitter::new_uuid());
    s.send(&ping).await;
    reply_to(&mut s, &ping, "ACK of the ping").await;
    let deletes: Vec<&str> = s
        .seen
        .iter()
        .filter(|e| e.typ == ty("delete"))
        .map(|e| e.dataschema.as_str())
        .collect();
    assert_eq!(deletes, ["repository", "gpgkey"], "{}", s.describe());
    p.shutdown().await;
}

#[tokio::test]
async fn events_our_principal_does_not_handle_get_a_reply_never_silence() {
    init();
    let pki = LocalPki::new().expect("pki");
    let hub = MemStore::new();
    let p = our_principal(&pki, &hub).await;
    let (_l, mut s) = peer_agent(&pki, &p, "agent-un", "managed").await;
    // (a `response` for the resource proxy is ACKed and dropped when no request waits for it:
    // tests/interop/resource_proxy.rs)
    // (cluster cache info is taken: tests/interop/resource_proxy.rs)
    // (a `redis-response` answers the Redis proxy: tests/interop/redis_proxy.rs)
    let cases: [(&str, &str, Value); 1] =
        [("GET", "resource", json!({"uuid": "u", "method": "GET"}))];
    for (typ, target, data) in cases {
        let id = emitter::new_uuid();
        let mut ev = Event {
            source: "argocd-agent://agent-un".into(),
            spec_version: "1.0".into(),
            typ: typ.into(),
            dataschema: target.into(),
            datacontenttype: "application/json".into(),
            data: serde_json::to_vec(&data).expect("json"),
            ..Default::default()
        };
        ev.set_ext("resourceid", id.clone());
        ev.set_ext("eventid", id);
        s.send(&ev).await;
        let r = reply_to(&mut s, &ev, typ).await;
        assert_eq!(
            r.typ,
            ty("error"),
            "{typ}/{target}: refused, not ACKed as done"
        );
        assert!(
            message(&r).contains("not supported"),
            "{typ}/{target}: {}",
            message(&r)
        );
    }
    p.shutdown().await;
}

#[tokio::test]
async fn our_autonomous_agent_answers_a_repository_request_update_without_deleting_an_application()
{
    let pki = LocalPki::new().expect("pki");
    let pp = peer_principal(&pki, argocd_pull_agent_core::VERSION).await;
    let store = MemStore::new();
    let a = our_agent(&pki, &pp, "agent-rr", Mode::Autonomous, &store).await;
    pp.wait_streams(1).await;
    // the agent has no Application "guestbook": for kind Application it would answer `delete`
    // (and the peer principal would delete the hub copy); for kind Repository it must not
    let ev = emitter::sent(
        pp.emitter.request_update(
            &emitter::new_uuid(),
            "guestbook",
            "agent-rr",
            "8b2c3d4e-0000-4000-8000-000000000008",
            "Repository",
            None,
        ),
        SENT_AT,
    );
    pp.send(&ev).await;
    let (rid, eid) = (ev.ext("resourceid"), ev.ext("eventid"));
    let r = pp
        .expect("reply to the Repository request-update", |i| {
            i.event.dataschema == "eventProcessed"
                && i.event.ext("resourceid") == rid
                && i.event.ext("eventid") == eid
        })
        .await;
    assert_eq!(r.event.typ, ty("error"));
    assert!(message(&r.event).contains("Repository"), "{:?}", r.event);
    let ping = pp.emitter.heartbeat("ping", &emitter::new_uuid());
    pp.send(&ping).await;
    let (rid, eid) = (ping.ext("resourceid"), ping.ext("eventid"));
    pp.expect("ACK of the ping", |i| {
        i.event.dataschema == "eventProcessed"
            && i.event.ext("resourceid") == rid
            && i.event.ext("eventid") == eid
    })
    .await;
    assert!(
        !pp.seen
            .lock()
            .expect("lock")
            .iter()
            .any(|i| i.event.typ == ty("delete")),
        "no delete may follow: {}",
        pp.describe()
    );
    a.shutdown().await;
    pp.shutdown().await;
}

#[tokio::test]
async fn terminal_and_log_requests_are_taken_by_our_agent() {
    let pki = LocalPki::new().expect("pki");
    let pp = peer_principal(&pki, argocd_pull_agent_core::VERSION).await;
    let store = MemStore::new();
    let a = our_agent(&pki, &pp, "agent-rq", Mode::Managed, &store).await;
    pp.wait_streams(1).await;
    // the peer principal's NewTerminalRequestEvent and NewLogRequestEvent (the last typed by the
    // raw HTTP method) are taken: ACKed `processed`, then served over their own streams
    // (crates/agent tests/loopback/pod_streams.rs); resource and redis requests are answered
    // (tests/interop/resource_proxy.rs, tests/interop/redis_proxy.rs)
    let cases: [(&str, &str, Value, &str); 2] = [
        (
            "io.argoproj.argocd-agent.event.terminal-request",
            "terminal",
            json!({"uuid": "u", "namespace": "ns", "podName": "p", "containerName": "c"}),
            "processed",
        ),
        (
            "GET",
            "containerlog",
            json!({"uuid": "u", "namespace": "ns", "podName": "p"}),
            "processed",
        ),
    ];
    for (typ, target, data, answer) in cases {
        let id = emitter::new_uuid();
        let mut ev = Event {
            source: "argocd-agent://principal".into(),
            spec_version: "1.0".into(),
            typ: typ.into(),
            dataschema: target.into(),
            datacontenttype: "application/json".into(),
            data: serde_json::to_vec(&data).expect("json"),
            ..Default::default()
        };
        ev.set_ext("resourceid", id.clone());
        ev.set_ext("eventid", id.clone());
        pp.send(&ev).await;
        let r = pp
            .expect(typ, |i| {
                i.event.dataschema == "eventProcessed"
                    && i.event.ext("resourceid") == Some(id.as_str())
                    && i.event.ext("eventid") == Some(id.as_str())
            })
            .await;
        assert_eq!(r.event.typ, ty(answer), "{typ}/{target}");
    }
    a.shutdown().await;
    pp.shutdown().await;
}
