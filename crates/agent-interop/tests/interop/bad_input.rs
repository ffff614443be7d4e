//! Bad input from a peer agent never reaches the hub (issue 12, point 7): payloads that are not
//! a valid Application for their target are refused with an `error` reply the peer reads as the
//! end of the event, counted, and nothing is written; an agent cannot reach another agent's
//! namespace.

use argocd_pull_agent::local::LocalPki;
use argocd_pull_agent_core::metrics::Metrics;
use argocd_pull_agent_core::store::{Kind, MemStore, Store};
use argocd_pull_agent_interop::emitter::{self, ty};
use argocd_pull_agent_interop::peer_agent::PeerStream;
use argocd_pull_agent_interop::sdk::Event;
use serde_json::{Value, json};

use crate::common::*;

async fn refusal(s: &mut PeerStream, sent: &Event, what: &str) -> Value {
    let (rid, eid) = (sent.ext("resourceid"), sent.ext("eventid"));
    let r = s
        .expect(what, |e| {
            e.dataschema == "eventProcessed"
                && e.ext("resourceid") == rid
                && e.ext("eventid") == eid
        })
        .await;
    assert_eq!(
        r.typ,
        ty("error"),
        "{what}: refused, not ACKed as processed"
    );
    serde_json::from_slice(&r.data).expect("ErrorData JSON")
}

#[tokio::test]
async fn malformed_managed_status_update_is_refused_and_the_hub_status_is_kept() {
    init();
    let pki = LocalPki::new().expect("pki");
    let hub = MemStore::new();
    let p = our_principal(&pki, &hub).await;
    let (_l, mut s) = peer_agent(&pki, &p, "agent-st", "managed").await;
    let mut a = app("agent-st", "guestbook", "guestbook");
    a["status"] = json!({"health": {"status": "Healthy"}});
    let created = hub.create(Kind::Application, a).await.expect("create");
    let mut local = created.clone();
    local["metadata"] = json!({"name": "guestbook", "namespace": "argocd",
        "uid": "1b2c3d4e-0000-4000-8000-000000000001", "resourceVersion": "9"});
    // status of the wrong type
    local["status"] = json!("garbage");
    let ev = emitter::sent(
        s.emitter
            .object_event(&ty("status-update"), "application", &local),
        SENT_AT,
    );
    s.send(&ev).await;
    let data = refusal(&mut s, &ev, "refusal of a string status").await;
    assert_eq!(data["resourceName"], "guestbook");
    assert_eq!(data["resourceNamespace"], "argocd");
    assert!(
        data["message"]
            .as_str()
            .is_some_and(|m| m.contains("status must be an object")),
        "{data}"
    );
    // a payload naming another Application than the event is about
    let mut other = local.clone();
    other["status"] = json!({"health": {"status": "Degraded"}});
    other["metadata"]["resourceVersion"] = json!("10");
    let mut foreign = other.clone();
    foreign["metadata"]["name"] = json!("someone-elses");
    let ev = emitter::sent(
        s.emitter.object_event_bytes(
            &ty("status-update"),
            "application",
            &other,
            serde_json::to_vec(&foreign).expect("json"),
        ),
        SENT_AT,
    );
    s.send(&ev).await;
    let data = refusal(&mut s, &ev, "refusal of a payload for another object").await;
    assert!(
        data["message"]
            .as_str()
            .is_some_and(|m| m.contains("differs from the event subject")),
        "{data}"
    );
    let h = hub
        .get(Kind::Application, "agent-st", "guestbook")
        .await
        .expect("get")
        .expect("present");
    assert_eq!(
        h["status"], created["status"],
        "the hub status is untouched"
    );
    assert_eq!(Metrics::total(&p.metrics().error_replies, "invalid"), 2);
    p.shutdown().await;
}

#[tokio::test]
async fn an_autonomous_agent_cannot_write_into_another_agents_namespace() {
    init();
    let pki = LocalPki::new().expect("pki");
    let hub = MemStore::new();
    let p = our_principal(&pki, &hub).await;
    let victim = hub
        .create(Kind::Application, app("agent-victim", "podinfo", "victim"))
        .await
        .expect("create");
    let (_l, mut s) = peer_agent(&pki, &p, "agent-evil", "autonomous").await;
    // the payload claims the victim's namespace on the hub
    let mut a = app("agent-victim", "podinfo", "evil");
    a["metadata"]["uid"] = json!("2b2c3d4e-0000-4000-8000-000000000002");
    a["metadata"]["resourceVersion"] = json!("1");
    let ev = emitter::sent(
        s.emitter.object_event(&ty("create"), "application", &a),
        SENT_AT,
    );
    s.send(&ev).await;
    let (rid, eid) = (ev.ext("resourceid"), ev.ext("eventid"));
    s.expect("ACK of the create", |e| {
        e.dataschema == "eventProcessed" && e.ext("resourceid") == rid && e.ext("eventid") == eid
    })
    .await;
    // it lands in the sender's own namespace, the victim's object is untouched
    let own = hub
        .get(Kind::Application, "agent-evil", "podinfo")
        .await
        .expect("get")
        .expect("written in the agent's own namespace");
    assert_eq!(own["spec"]["source"]["path"], "evil");
    let v = hub
        .get(Kind::Application, "agent-victim", "podinfo")
        .await
        .expect("get")
        .expect("present");
    assert_eq!(v["spec"], victim["spec"]);
    assert_eq!(
        v["metadata"]["resourceVersion"],
        victim["metadata"]["resourceVersion"]
    );
    p.shutdown().await;
}

#[tokio::test]
async fn invalid_names_and_kinds_are_refused_before_anything_is_written() {
    init();
    let pki = LocalPki::new().expect("pki");
    let hub = MemStore::new();
    let p = our_principal(&pki, &hub).await;
    let (_l, mut s) = peer_agent(&pki, &p, "agent-nm", "autonomous").await;
    let base = |name: &str, rv: &str| {
        let mut a = app("argocd", name, "x");
        a["metadata"]["uid"] = json!("3b2c3d4e-0000-4000-8000-000000000003");
        a["metadata"]["resourceVersion"] = json!(rv);
        a
    };
    let mut cases = vec![
        (base("Not_A_Name", "1"), "not a valid Kubernetes name"),
        (base(&"a".repeat(254), "2"), "253"),
    ];
    let mut wrong_kind = base("kinded", "3");
    wrong_kind["kind"] = json!("AppProject");
    cases.push((wrong_kind, "does not match the event target"));
    let mut bad_dest = base("dest", "4");
    bad_dest["spec"]["destination"] = json!("in-cluster");
    cases.push((bad_dest, "spec.destination must be an object"));
    for (obj, want) in cases {
        let ev = emitter::sent(
            s.emitter.object_event(&ty("create"), "application", &obj),
            SENT_AT,
        );
        s.send(&ev).await;
        let data = refusal(&mut s, &ev, want).await;
        assert!(
            data["message"].as_str().is_some_and(|m| m.contains(want)),
            "want {want:?}: {data}"
        );
    }
    assert!(
        hub.list(Kind::Application, Some("agent-nm"))
            .await
            .expect("list")
            .is_empty()
    );
    assert!(
        hub.list(Kind::AppProject, Some("agent-nm"))
            .await
            .expect("list")
            .is_empty()
    );
    p.shutdown().await;
}
