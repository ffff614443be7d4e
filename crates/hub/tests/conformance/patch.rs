//! patch: JSON merge, JSON patch, strategic merge, server-side apply.

use argocd_pull_hub::Hub;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::common::*;
use crate::discovery::{widget_crd, widget_resource};
use crate::list::mk_cm;

fn status(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

async fn widget_hub() -> (Hub, Api<DynamicObject>) {
    let hub = Hub::new();
    hub.install_crds_yaml(&serde_json::to_string(&widget_crd()).unwrap())
        .unwrap();
    let api = Api::default_namespaced_with(hub.client(), &widget_resource("v1"));
    (hub, api)
}

fn widget(spec: serde_json::Value) -> serde_json::Value {
    json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": spec})
}

#[tokio::test]
async fn json_merge_and_json_patch() {
    let hub = Hub::new();
    mk_cm(&hub, "default", "a", json!({"x": "1"})).await;
    let api: Api<ConfigMap> = Api::default_namespaced(hub.client());
    let p: json_patch::Patch = serde_json::from_value(json!([
        {"op": "add", "path": "/data", "value": {"k": "v"}},
        {"op": "replace", "path": "/metadata/labels/x", "value": "2"}
    ]))
    .unwrap();
    let c = api
        .patch("a", &PatchParams::default(), &Patch::<()>::Json(p))
        .await
        .unwrap();
    assert_eq!(c.data.unwrap()["k"], "v");
    assert_eq!(c.metadata.labels.unwrap()["x"], "2");
    // A failing `test` operation is rejected, nothing is written.
    let rv = hub.resource_version();
    let p: json_patch::Patch =
        serde_json::from_value(json!([{"op": "test", "path": "/data/k", "value": "other"}]))
            .unwrap();
    let s = status(
        api.patch("a", &PatchParams::default(), &Patch::<()>::Json(p))
            .await
            .unwrap_err(),
    );
    assert_eq!(s.code, 422);
    assert_eq!(hub.resource_version(), rv);
    // Merge patch: null removes.
    let c = api
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"x": null}}})),
        )
        .await
        .unwrap();
    assert!(c.metadata.labels.unwrap_or_default().is_empty());
    // Patch of a missing object.
    let s = status(
        api.patch("nope", &PatchParams::default(), &Patch::Merge(json!({})))
            .await
            .unwrap_err(),
    );
    assert_eq!(
        (s.code, s.message.as_str()),
        (404, "configmaps \"nope\" not found")
    );
}

#[tokio::test]
async fn strategic_merge_is_415_for_custom_resources() {
    let hub = hub();
    let apps: Api<DynamicObject> = Api::default_namespaced_with(hub.client(), &app_resource());
    apps.create(&PostParams::default(), &app("a"))
        .await
        .unwrap();
    let s = status(
        apps.patch(
            "a",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"project": "x"}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!((s.code, s.reason.as_str()), (415, "UnsupportedMediaType"));
}

#[tokio::test]
async fn strategic_merge_merges_containers_by_name() {
    let hub = Hub::new();
    let api: Api<Deployment> = Api::default_namespaced(hub.client());
    let d: Deployment = serde_json::from_value(json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
        "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [
            {"name": "app", "image": "app:1"}, {"name": "side", "image": "side:1"}]}}}})).unwrap();
    api.create(&PostParams::default(), &d).await.unwrap();
    let d = api
        .patch("d", &PatchParams::default(), &Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [{"name": "side", "image": "side:2"}]}}}})))
        .await
        .unwrap();
    let cs = d.spec.template.spec.unwrap().containers;
    assert_eq!(cs.len(), 2);
    assert_eq!(cs[0].image.as_deref(), Some("app:1"));
    assert_eq!(cs[1].image.as_deref(), Some("side:2"));
}

#[tokio::test]
async fn server_side_apply_creates_and_tracks_managed_fields() {
    let (_hub, api) = widget_hub().await;
    let w = api
        .patch(
            "w",
            &PatchParams::apply("alice"),
            &Patch::Apply(widget(json!({"size": 1, "tags": ["a"]}))),
        )
        .await
        .unwrap();
    assert_eq!(w.data["spec"]["size"], 1);
    let mf = w.metadata.managed_fields.clone().unwrap();
    assert_eq!(mf.len(), 1);
    assert_eq!(mf[0].manager.as_deref(), Some("alice"));
    assert_eq!(mf[0].operation.as_deref(), Some("Apply"));
    let fields = serde_json::to_value(&mf[0].fields_v1).unwrap();
    assert_eq!(
        fields,
        json!({"f:spec": {"f:size": {}, "f:tags": {"v:\"a\"": {}}}})
    );
    // Re-applying the same configuration changes nothing.
    let again = api
        .patch(
            "w",
            &PatchParams::apply("alice"),
            &Patch::Apply(widget(json!({"size": 1, "tags": ["a"]}))),
        )
        .await
        .unwrap();
    assert_eq!(again.metadata.resource_version, w.metadata.resource_version);
    // Even in a later second: an old entry timestamp is kept by a no-op apply.
    let mut mf = serde_json::to_value(w.metadata.managed_fields.clone().unwrap()).unwrap();
    mf[0]["time"] = json!("2020-01-01T00:00:00Z");
    let aged = api
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"managedFields": mf}})),
        )
        .await
        .unwrap();
    let again = api
        .patch(
            "w",
            &PatchParams::apply("alice"),
            &Patch::Apply(widget(json!({"size": 1, "tags": ["a"]}))),
        )
        .await
        .unwrap();
    assert_eq!(
        again.metadata.resource_version,
        aged.metadata.resource_version
    );
    // A real change updates the timestamp.
    let changed = api
        .patch(
            "w",
            &PatchParams::apply("alice"),
            &Patch::Apply(widget(json!({"size": 2, "tags": ["a"]}))),
        )
        .await
        .unwrap();
    let t = changed.metadata.managed_fields.unwrap()[0]
        .time
        .clone()
        .unwrap();
    assert!(*serde_json::to_string(&t).unwrap() > *"\"2020", "{t:?}");
}

#[tokio::test]
async fn server_side_apply_conflicts_force_and_removal() {
    let (_hub, api) = widget_hub().await;
    api.patch(
        "w",
        &PatchParams::apply("alice"),
        &Patch::Apply(widget(
            json!({"size": 1, "ports": [{"name": "http", "port": 80}]}),
        )),
    )
    .await
    .unwrap();
    // Bob adds another list-map item: merged by key, no conflict.
    let w = api
        .patch(
            "w",
            &PatchParams::apply("bob"),
            &Patch::Apply(widget(json!({"ports": [{"name": "grpc", "port": 90}]}))),
        )
        .await
        .unwrap();
    assert_eq!(w.data["spec"]["ports"].as_array().unwrap().len(), 2);
    assert_eq!(w.data["spec"]["size"], 1);
    // Bob changes Alice's field: 409 naming the manager and the field.
    let s = status(
        api.patch(
            "w",
            &PatchParams::apply("bob"),
            &Patch::Apply(widget(
                json!({"size": 2, "ports": [{"name": "grpc", "port": 90}]}),
            )),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!((s.code, s.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        s.message,
        "Apply failed with 1 conflict: conflict with \"alice\" using example.com/v1: .spec.size"
    );
    // With force he takes it over.
    let w = api
        .patch(
            "w",
            &PatchParams::apply("bob").force(),
            &Patch::Apply(widget(
                json!({"size": 2, "ports": [{"name": "grpc", "port": 90}]}),
            )),
        )
        .await
        .unwrap();
    assert_eq!(w.data["spec"]["size"], 2);
    let alice = w
        .metadata
        .managed_fields
        .as_ref()
        .unwrap()
        .iter()
        .find(|m| m.manager.as_deref() == Some("alice"))
        .unwrap();
    assert!(
        !serde_json::to_string(&alice.fields_v1)
            .unwrap()
            .contains("f:size")
    );
    // Alice stops applying her port: it is removed; Bob's stays.
    let w = api
        .patch(
            "w",
            &PatchParams::apply("alice"),
            &Patch::Apply(widget(json!({}))),
        )
        .await
        .unwrap();
    let ports: Vec<&str> = w.data["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(ports, vec!["grpc"]);
    assert_eq!(w.data["spec"]["size"], 2, "a field owned by bob stays");
}

#[tokio::test]
async fn apply_conflicts_with_update_managers_and_requires_field_manager() {
    let (hub, api) = widget_hub().await;
    api.create(
        &PostParams {
            field_manager: Some("ctl".into()),
            ..Default::default()
        },
        &serde_json::from_value(widget(json!({"size": 1}))).unwrap(),
    )
    .await
    .unwrap();
    let s = status(
        api.patch(
            "w",
            &PatchParams::apply("alice"),
            &Patch::Apply(widget(json!({"size": 5}))),
        )
        .await
        .unwrap_err(),
    );
    assert!(s.message.contains("conflict with \"ctl\""), "{}", s.message);
    let (c, b) = raw(
        &hub,
        "PATCH",
        "/apis/example.com/v1/namespaces/default/widgets/w",
        Some("application/apply-patch+yaml"),
        "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\n",
    )
    .await;
    assert_eq!(c, 400);
    assert!(
        b["message"].as_str().unwrap().contains("fieldManager"),
        "{b}"
    );
    // YAML bodies are accepted; quoted scalars stay strings.
    let (c, b) = raw(&hub, "PATCH", "/apis/example.com/v1/namespaces/default/widgets/w?fieldManager=y", Some("application/apply-patch+yaml"),
        "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w\n  labels:\n    quoted: \"yes\"\n    mode: \"0755\"\n").await;
    assert_eq!(c, 200, "{b}");
    assert_eq!(b["metadata"]["labels"]["quoted"], "yes");
    assert_eq!(b["metadata"]["labels"]["mode"], "0755");
}

#[tokio::test]
async fn apply_to_status_subresource() {
    let (_hub, api) = widget_hub().await;
    api.patch(
        "w",
        &PatchParams::apply("alice"),
        &Patch::Apply(widget(json!({"size": 1}))),
    )
    .await
    .unwrap();
    let mut cfg = widget(json!({}));
    cfg["status"] = json!({"ready": true});
    let w = api
        .patch_status("w", &PatchParams::apply("ctl"), &Patch::Apply(cfg))
        .await
        .unwrap();
    assert_eq!(w.data["status"]["ready"], true);
    assert_eq!(w.data["spec"]["size"], 1);
    let e = w
        .metadata
        .managed_fields
        .unwrap()
        .into_iter()
        .find(|m| m.manager.as_deref() == Some("ctl"))
        .unwrap();
    assert_eq!(e.subresource.as_deref(), Some("status"));
}

#[tokio::test]
async fn kube_runtime_finalizer_helper_works() {
    use kube::runtime::controller::Action;
    use kube::runtime::finalizer::{Event, finalizer};
    use std::sync::Arc;
    let hub = Hub::new();
    mk_cm(&hub, "default", "fin", json!({})).await;
    let api: Api<ConfigMap> = Api::default_namespaced(hub.client());
    // First pass adds the finalizer (JSON patch: test null + add).
    let obj = Arc::new(api.get("fin").await.unwrap());
    finalizer(
        &api,
        "example.com/cleanup",
        obj,
        |_ev: Event<ConfigMap>| async { Ok::<_, kube::Error>(Action::await_change()) },
    )
    .await
    .unwrap();
    let obj = api.get("fin").await.unwrap();
    assert_eq!(
        obj.metadata.finalizers,
        Some(vec!["example.com/cleanup".to_string()])
    );
    // Apply pass with the finalizer present.
    let applied = finalizer(
        &api,
        "example.com/cleanup",
        Arc::new(obj),
        |ev: Event<ConfigMap>| async move {
            Ok::<_, kube::Error>(if matches!(ev, Event::Apply(_)) {
                Action::await_change()
            } else {
                Action::requeue(std::time::Duration::from_secs(1))
            })
        },
    )
    .await
    .unwrap();
    assert_eq!(applied, Action::await_change());
    // Deletion: cleanup runs, the finalizer is removed (JSON patch: test + remove), the object goes.
    api.delete("fin", &Default::default()).await.unwrap();
    let obj = Arc::new(api.get("fin").await.unwrap());
    let cleaned = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let c2 = cleaned.clone();
    finalizer(
        &api,
        "example.com/cleanup",
        obj,
        |ev: Event<ConfigMap>| async move {
            if matches!(ev, Event::Cleanup(_)) {
                c2.store(true, std::sync::atomic::Ordering::SeqCst);
            }
            Ok::<_, kube::Error>(Action::await_change())
        },
    )
    .await
    .unwrap();
    assert!(cleaned.load(std::sync::atomic::Ordering::SeqCst));
    assert!(api.get_opt("fin").await.unwrap().is_none());
}

#[tokio::test]
async fn kube_runtime_event_recorder_works() {
    use kube::Resource;
    use kube::runtime::events::{Event, EventType, Recorder, Reporter};
    let hub = Hub::new();
    let cm = mk_cm(&hub, "default", "evsrc", json!({})).await;
    let reporter = Reporter {
        controller: "test-ctl".into(),
        instance: None,
    };
    let rec = Recorder::new(hub.client(), reporter);
    let ev = Event {
        type_: EventType::Normal,
        reason: "Synced".into(),
        note: Some("ok".into()),
        action: "Sync".into(),
        secondary: None,
    };
    rec.publish(&ev, &cm.object_ref(&())).await.unwrap();
    // A repeat becomes a series update of the same Event.
    rec.publish(&ev, &cm.object_ref(&())).await.unwrap();
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::default_namespaced(hub.client());
    let list = events.list(&Default::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    assert_eq!(list.items[0].reason.as_deref(), Some("Synced"));
}

/// The apiserver merges an apply configuration onto the live object before comparing names:
/// a configuration without `metadata.name` updates an existing object (kube-lease-manager sends
/// such a patch to take a Lease), and cannot create one.
#[tokio::test]
async fn apply_without_a_name_updates_an_existing_object_only() {
    let (_hub, api) = widget_hub().await;
    let nameless = json!({"apiVersion": "example.com/v1", "kind": "Widget", "spec": {"size": 3}});
    let err = api
        .patch("w", &PatchParams::apply("alice"), &Patch::Apply(&nameless))
        .await
        .unwrap_err();
    let s = status(err);
    assert_eq!(s.code, 400);
    assert_eq!(
        s.message,
        "the name of the object () does not match the name on the URL (w)"
    );
    api.create(
        &PostParams::default(),
        &serde_json::from_value(widget(json!({"size": 1}))).unwrap(),
    )
    .await
    .unwrap();
    let w = api
        .patch("w", &PatchParams::apply("alice"), &Patch::Apply(&nameless))
        .await
        .unwrap();
    assert_eq!(w.metadata.name.as_deref(), Some("w"));
    assert_eq!(w.data["spec"]["size"], 3);
}
