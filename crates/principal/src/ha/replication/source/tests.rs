use super::*;
use argocd_pull_agent_core::event::Target;
use serde_json::json;

fn app(ns: &str, name: &str, uid: &str, spec: Value, status: Value) -> Value {
    json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
           "metadata": {"name": name, "namespace": ns, "uid": uid, "resourceVersion": "1"},
           "spec": spec, "status": status})
}

#[test]
fn changes_become_the_peers_events_in_sequence_and_a_snapshot_matches_the_sequence() {
    let m = Metrics::new("argocd_principal");
    let s = Source::new(m.clone(), "argocd");
    let mut feed = s.subscribe();
    let a1 = app(
        "edge",
        "guestbook",
        "u1",
        json!({"project": "default"}),
        json!({}),
    );
    s.apply(
        Kind::Application,
        StoreEvent::Restarted(vec![a1.clone().into()]),
    );
    // the hub's own Applications (principal namespace) are not replicated
    s.apply(
        Kind::Application,
        StoreEvent::Applied(app("argocd", "x", "u0", json!({}), json!({})).into()),
    );
    let mut a2 = a1.clone();
    a2["status"] = json!({"sync": {"status": "Synced"}});
    s.apply(Kind::Application, StoreEvent::Applied(a2.clone().into()));
    let mut a3 = a2.clone();
    a3["spec"]["project"] = json!("p2");
    a3["operation"] = json!({"sync": {}});
    s.apply(Kind::Application, StoreEvent::Applied(a3.clone().into()));
    s.apply(Kind::Application, StoreEvent::Deleted(a3.clone().into()));
    let mut got = Vec::new();
    while let Ok(e) = feed.rx.try_recv() {
        let ce = e.event.as_ref().unwrap();
        let ev = Event::from_sdk(argocd_pull_agent_core::event::SdkEvent::from_proto(ce).unwrap())
            .unwrap();
        got.push((
            e.sequence_num,
            ev.ty.short(),
            e.direction.clone(),
            e.agent_name.clone(),
            ev.data,
        ));
    }
    let kinds: Vec<_> = got
        .iter()
        .map(|g| (g.0, g.1, g.2.as_str(), g.3.as_str()))
        .collect();
    assert_eq!(
        kinds,
        vec![
            (1, "create", "outbound", "edge"),
            (2, "status-update", "inbound", "edge"),
            (3, "spec-update", "outbound", "edge"),
            (4, "status-update", "inbound", "edge"),
            (5, "delete", "outbound", "edge"),
        ]
    );
    assert!(
        got[2].4.get("operation").is_none(),
        "spec-update without operation"
    );
    assert_eq!(
        got[3].4["operation"],
        json!({"sync": {}}),
        "status-update carries it"
    );
    assert_eq!(s.sequence(), 5);
    assert!(
        m.encode()
            .contains("argocd_agent_replication_last_sequence_number 5")
    );

    // a snapshot is cut at the sequence it reports
    s.apply(Kind::Application, StoreEvent::Applied(a1.clone().into()));
    let snap = s.snapshot(&|| vec!["other".to_string()]);
    assert_eq!(snap.last_sequence_num, 6);
    let names: Vec<_> = snap
        .agents
        .iter()
        .map(|a| (a.name.as_str(), a.resources.len(), a.connected))
        .collect();
    assert_eq!(names, vec![("edge", 1, false), ("other", 0, true)]);
    let data: Value = serde_json::from_slice(&snap.agents[0].resources[0].data).unwrap();
    assert_eq!(data, a1);

    // what a replica holds but the snapshot lacks: deleted, or here (with its data)
    let r = s.confirm_missing(&api::ConfirmMissingResourcesRequest {
        agent_name: "edge".into(),
        snapshot_sequence_num: 1,
        resources: vec![
            api::Resource {
                name: "guestbook".into(),
                namespace: "edge".into(),
                kind: "Application".into(),
                ..Default::default()
            },
            api::Resource {
                name: "gone".into(),
                namespace: "edge".into(),
                kind: "Application".into(),
                ..Default::default()
            },
        ],
    });
    assert_eq!(r[0].status, "exists");
    assert!(!r[0].resource.as_ref().unwrap().data.is_empty());
    assert_eq!(r[1].status, "deleted");
}

#[test]
fn a_relist_emits_deletes_for_what_vanished_and_nothing_for_what_did_not_change() {
    let s = Source::new(Metrics::new("argocd_principal"), "argocd");
    let a = app("edge", "a", "u1", json!({}), json!({}));
    let b = app("edge", "b", "u2", json!({}), json!({}));
    s.apply(
        Kind::Application,
        StoreEvent::Restarted(vec![a.clone().into(), b.into()]),
    );
    let mut feed = s.subscribe();
    s.apply(Kind::Application, StoreEvent::Restarted(vec![a.into()]));
    let e = feed.rx.try_recv().unwrap();
    assert_eq!(e.sequence_num, 3);
    assert!(feed.rx.try_recv().is_err());
    let repo = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "r", "namespace": "argocd",
        "labels": {"argocd.argoproj.io/secret-type": "repository"}}, "data": {}});
    s.apply(Kind::Secret, StoreEvent::Applied(repo.clone().into()));
    let other = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "tls", "namespace": "argocd"}});
    s.apply(Kind::Secret, StoreEvent::Applied(other.into()));
    let e = feed.rx.try_recv().unwrap();
    let ev = Event::from_sdk(
        argocd_pull_agent_core::event::SdkEvent::from_proto(e.event.as_ref().unwrap()).unwrap(),
    )
    .unwrap();
    assert_eq!((ev.ty, ev.target), (EventType::Create, Target::Repository));
    assert!(
        feed.rx.try_recv().is_err(),
        "an unrelated Secret is not replicated"
    );
}
