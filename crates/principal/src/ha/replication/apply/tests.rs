use super::*;

#[test]
fn replica_form_keeps_what_a_hub_needs_and_marks_it() {
    let primary = json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": "a", "namespace": "edge", "uid": "u", "resourceVersion": "7",
            "labels": {"l": "1"}, "finalizers": ["resources-finalizer.argocd.argoproj.io"],
            "ownerReferences": [{"uid": "x"}], "managedFields": []},
        "spec": {"project": "default"}, "status": {"health": {"status": "Healthy"}}, "operation": {"sync": {}}});
    let r = replica_form(RKind::Application, &primary);
    assert_eq!(
        r["metadata"],
        json!({"name": "a", "namespace": "edge", "labels": {"l": "1"},
        "finalizers": ["resources-finalizer.argocd.argoproj.io"],
        "annotations": {REPLICATED: "true"}})
    );
    assert_eq!(r["status"], primary["status"]);
    assert_eq!(r["operation"], primary["operation"]);
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": "r", "namespace": "argocd"}, "data": {"url": "aHR0cA=="}});
    let r = replica_form(RKind::Repository, &secret);
    assert_eq!(
        (r["kind"].as_str(), r["data"]["url"].as_str()),
        (Some("Secret"), Some("aHR0cA=="))
    );
}

#[test]
fn events_map_to_writes_in_both_directions() {
    let hub = json!({"metadata": {"name": "a", "namespace": "edge"}, "spec": {"project": "p"}});
    match for_event(
        RKind::Application,
        EventType::SpecUpdate,
        false,
        "edge",
        &hub,
        "argocd",
    ) {
        Write::Upsert {
            keep_operation,
            obj,
            ..
        } => {
            assert!(keep_operation, "the peer strips operation from spec-update");
            assert_eq!(obj["metadata"]["namespace"], "edge");
        }
        w => panic!("{w:?}"),
    }
    // a managed agent's status: its own namespace on the agent, the agent's on the hub
    let local = json!({"metadata": {"name": "a", "namespace": "argocd"}, "status": {"sync": {}}});
    assert_eq!(
        for_event(
            RKind::Application,
            EventType::StatusUpdate,
            true,
            "edge",
            &local,
            "argocd"
        ),
        Write::Status {
            namespace: "edge".into(),
            name: "a".into(),
            obj: local.clone()
        }
    );
    // an autonomous agent's own Application: the principal's hub form
    let own = json!({"metadata": {"name": "a", "namespace": "argocd", "uid": "agent-uid"},
        "spec": {"project": "default", "destination": {"server": "https://kubernetes.default.svc", "namespace": "x"}}});
    match for_event(
        RKind::Application,
        EventType::Create,
        true,
        "edge",
        &own,
        "argocd",
    ) {
        Write::Upsert { obj, .. } => {
            assert_eq!(obj["metadata"]["namespace"], "edge");
            assert_eq!(obj["spec"]["project"], "edge-default");
            assert_eq!(
                obj["spec"]["destination"],
                json!({"name": "edge", "namespace": "x"})
            );
            assert_eq!(o::source_uid(&obj), "agent-uid");
        }
        w => panic!("{w:?}"),
    }
    assert_eq!(
        for_event(
            RKind::AppProject,
            EventType::Delete,
            true,
            "edge",
            &json!({"metadata": {"name": "p"}}),
            "argocd"
        ),
        Write::Delete {
            kind: RKind::AppProject,
            namespace: "argocd".into(),
            name: "edge-p".into()
        }
    );
    assert!(matches!(
        for_event(
            RKind::Application,
            EventType::Create,
            false,
            "",
            &json!({}),
            "argocd"
        ),
        Write::Skip(_)
    ));
}

#[test]
fn merge_keeps_the_operation_only_when_asked_and_drops_owner_references() {
    let cur = json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": "a", "namespace": "edge", "resourceVersion": "3", "uid": "local",
            "ownerReferences": [{"uid": "x"}], "labels": {"old": "1"}},
        "spec": {"v": 1}, "operation": {"sync": {}}, "status": {"s": 1}});
    let want = json!({"metadata": {"name": "a", "namespace": "edge", "annotations": {REPLICATED: "true"}},
        "spec": {"v": 2}, "status": {"s": 2}});
    let n = merged(&cur, &want, true);
    assert_eq!(n["operation"], json!({"sync": {}}));
    assert_eq!(n["spec"], json!({"v": 2}));
    assert_eq!(n["metadata"]["uid"], "local");
    assert!(
        n["metadata"].get("labels").is_none() && n["metadata"].get("ownerReferences").is_none()
    );
    assert!(merged(&cur, &want, false).get("operation").is_none());
    let s = with_status(&cur, &json!({"metadata": {}, "status": {"s": 9}}));
    assert_eq!(s["status"], json!({"s": 9}));
    assert!(
        s.get("operation").is_none(),
        "a status-update without operation clears it"
    );
}

/// The embedded hub with the Application CRD, its request log on, and a writer into it.
fn hub_writer() -> (argocd_pull_hub::Hub, Writer) {
    let h = argocd_pull_hub::Hub::new();
    h.install_crds_yaml(include_str!(
        "../../../../../api/crds/argocd/application-crd.yaml"
    ))
    .unwrap();
    let store: Arc<dyn Store> = Arc::new(argocd_pull_agent_core::store::KubeStore::new(h.client()));
    (h, Writer::new(store, Metrics::new("principal")))
}

fn app(v: u32) -> Write {
    for_resource(
        RKind::Application,
        &json!({"metadata": {"name": "a", "namespace": "edge"}, "spec": {"project": "default", "v": v}}),
    )
}

#[tokio::test]
async fn a_change_of_an_object_it_wrote_costs_one_request() {
    let (hub, w) = hub_writer();
    w.apply(&app(1)).await.unwrap();
    hub.record_requests(true);
    for v in 2..=5 {
        w.apply(&app(v)).await.unwrap();
    }
    let log: Vec<String> = hub.requests().iter().map(|r| r.to_string()).collect();
    assert_eq!(log.len(), 4, "one update per change, no reads: {log:?}");
    assert!(
        log.iter().all(|l| l.starts_with("update applications")),
        "{log:?}"
    );
    let store = argocd_pull_agent_core::store::KubeStore::new(hub.client());
    let got = store
        .get(Kind::Application, "edge", "a")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got["spec"]["v"], 5);
}

#[tokio::test]
async fn a_write_by_someone_else_or_a_deleted_namespace_is_read_again_not_lost() {
    let (hub, w) = hub_writer();
    w.apply(&app(1)).await.unwrap();
    let store = argocd_pull_agent_core::store::KubeStore::new(hub.client());
    // someone else updates the object: the remembered resourceVersion is stale
    store
        .merge_patch(
            Kind::Application,
            "edge",
            "a",
            json!({"metadata": {"labels": {"x": "1"}}}),
        )
        .await
        .unwrap();
    w.apply(&app(2)).await.unwrap();
    let got = store
        .get(Kind::Application, "edge", "a")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got["spec"]["v"], 2);
    // the object is deleted behind the writer's back: the next change creates it again
    store.delete(Kind::Application, "edge", "a").await.unwrap();
    w.apply(&app(3)).await.unwrap();
    let got = store
        .get(Kind::Application, "edge", "a")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got["spec"]["v"], 3);
}
