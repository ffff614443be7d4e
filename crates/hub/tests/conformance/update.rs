//! update: optimistic concurrency, generation, status subresource isolation, no-op writes.

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;

use crate::common::*;
use crate::list::mk_cm;

fn work(name: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
        "metadata": {"name": name},
        "spec": {"workload": {"manifests": []}},
        "status": {"conditions": [{"type": "Applied", "status": "True", "reason": "x", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    }))
    .unwrap()
}

#[tokio::test]
async fn stale_resource_version_is_409_with_the_real_message() {
    let hub = hub();
    let c = mk_cm(&hub, "default", "a", json!({})).await;
    let api: Api<ConfigMap> = Api::default_namespaced(hub.client());
    api.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"x": "1"}})),
    )
    .await
    .unwrap();
    let err = api
        .replace("a", &PostParams::default(), &c)
        .await
        .unwrap_err();
    match err {
        kube::Error::Api(s) => {
            assert_eq!((s.code, s.reason.as_str()), (409, "Conflict"));
            assert_eq!(
                s.message,
                "Operation cannot be fulfilled on configmaps \"a\": the object has been modified; please apply your changes to the latest version and try again"
            );
        }
        e => panic!("{e:?}"),
    }
    // Empty resourceVersion: unconditional.
    let mut c2 = c.clone();
    c2.metadata.resource_version = None;
    c2.data = Some([("y".to_string(), "2".to_string())].into());
    let r = api.replace("a", &PostParams::default(), &c2).await.unwrap();
    assert_eq!(r.data.unwrap().get("y").map(String::as_str), Some("2"));
    // A custom resource conflict names the group.
    let apps: Api<DynamicObject> = Api::default_namespaced_with(hub.client(), &app_resource());
    let a = apps
        .create(&PostParams::default(), &app("g"))
        .await
        .unwrap();
    apps.patch(
        "g",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"project": "p"}})),
    )
    .await
    .unwrap();
    match apps
        .replace("g", &PostParams::default(), &a)
        .await
        .unwrap_err()
    {
        kube::Error::Api(s) => assert!(
            s.message
                .starts_with("Operation cannot be fulfilled on applications.argoproj.io \"g\""),
            "{}",
            s.message
        ),
        e => panic!("{e:?}"),
    }
}

#[tokio::test]
async fn generation_and_status_subresource_isolation() {
    let hub = hub();
    let works: Api<DynamicObject> = Api::default_namespaced_with(hub.client(), &work_resource());
    let w = works
        .create(&PostParams::default(), &work("w"))
        .await
        .unwrap();
    assert_eq!(w.metadata.generation, Some(1));
    assert!(
        w.data.get("status").is_none(),
        "status is dropped on create when the subresource exists"
    );
    // Metadata-only change: no generation bump.
    let w = works
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}})),
        )
        .await
        .unwrap();
    assert_eq!(w.metadata.generation, Some(1));
    // Main-resource writes ignore .status.
    let w = works
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"x": 1}})),
        )
        .await
        .unwrap();
    assert!(w.data.get("status").is_none());
    assert_eq!(w.metadata.generation, Some(1));
    // /status writes change only .status.
    let w = works
        .patch_status("w", &PatchParams::default(), &Patch::Merge(json!({"spec": {"deleteOption": {"propagationPolicy": "Orphan"}}, "status": {"conditions": []}})))
        .await
        .unwrap();
    assert_eq!(w.data["status"], json!({"conditions": []}));
    assert!(w.data["spec"].get("deleteOption").is_none());
    assert_eq!(w.metadata.generation, Some(1));
    // Spec change bumps generation.
    let w = works
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"deleteOption": {"propagationPolicy": "Orphan"}}})),
        )
        .await
        .unwrap();
    assert_eq!(w.metadata.generation, Some(2));
    assert_eq!(
        w.data["status"],
        json!({"conditions": []}),
        "status survives a main-resource write"
    );
    // replace_status works too.
    let mut w2 = w.clone();
    w2.data["status"] = json!({"conditions": [{"type": "Available", "status": "True", "reason": "r", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]});
    let w3 = works
        .replace_status("w", &PostParams::default(), &w2)
        .await
        .unwrap();
    assert_eq!(w3.data["status"]["conditions"][0]["type"], "Available");
}

#[tokio::test]
async fn application_has_no_status_subresource() {
    let hub = hub();
    let apps: Api<DynamicObject> = Api::default_namespaced_with(hub.client(), &app_resource());
    let a = apps
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Application", "metadata": {"name": "s"},
        "spec": {"project": "default"}, "status": {"sync": {"status": "Unknown"}}}))
            .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(
        a.data["status"]["sync"]["status"], "Unknown",
        "status is an ordinary field"
    );
    let err = apps
        .patch_status(
            "s",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {}})),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 404),
        "{err:?}"
    );
    // Without the subresource, a status change is a change of the object (generation bumps).
    let a = apps
        .patch(
            "s",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"sync": {"status": "Synced"}}})),
        )
        .await
        .unwrap();
    assert_eq!(a.data["status"]["sync"]["status"], "Synced");
    assert_eq!(a.metadata.generation, Some(2));
}

#[tokio::test]
async fn noop_update_writes_nothing() {
    let hub = hub();
    let c = mk_cm(&hub, "default", "same", json!({"k": "v"})).await;
    let api: Api<ConfigMap> = Api::default_namespaced(hub.client());
    let rv = hub.resource_version().to_string();
    let mut s = api
        .watch(&WatchParams::default().disable_bookmarks(), &rv)
        .await
        .unwrap()
        .boxed();
    let r = api
        .replace("same", &PostParams::default(), &c)
        .await
        .unwrap();
    assert_eq!(r.metadata.resource_version, c.metadata.resource_version);
    let p = api
        .patch(
            "same",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"k": "v"}}})),
        )
        .await
        .unwrap();
    assert_eq!(p.metadata.resource_version, c.metadata.resource_version);
    assert_eq!(hub.resource_version().to_string(), rv);
    // The next real change is the first event the watcher sees.
    api.patch(
        "same",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"n": "1"}})),
    )
    .await
    .unwrap();
    match within(s.try_next()).await.unwrap().unwrap() {
        WatchEvent::Modified(o) => assert_eq!(o.data.unwrap()["n"], "1"),
        e => panic!("{e:?}"),
    }
}

#[tokio::test]
async fn update_of_missing_object_and_name_mismatch() {
    let hub = hub();
    let c = mk_cm(&hub, "default", "a", json!({})).await;
    let api: Api<ConfigMap> = Api::default_namespaced(hub.client());
    let err = api
        .replace("b", &PostParams::default(), &c)
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 400 && s.message.contains("does not match the name on the URL")),
        "{err:?}"
    );
    let mut d = c.clone();
    d.metadata.name = Some("zzz".into());
    d.metadata.resource_version = None;
    let err = api
        .replace("zzz", &PostParams::default(), &d)
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 404 && s.message == "configmaps \"zzz\" not found"),
        "{err:?}"
    );
}
