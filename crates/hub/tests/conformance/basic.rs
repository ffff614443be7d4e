//! First milestone: CRUD, watcher() and Controller through `Hub::client()`.

use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::{Controller, WatchStreamExt, watcher};
use serde_json::json;

use crate::common::*;

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(
        json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":name},"data":{"k":"v"}}),
    )
    .unwrap()
}

#[tokio::test]
async fn configmap_crud() {
    let hub = hub();
    let api: Api<ConfigMap> = Api::default_namespaced(hub.client());
    let c = api.create(&PostParams::default(), &cm("a")).await.unwrap();
    assert_eq!(c.metadata.generation, Some(1));
    assert!(c.metadata.uid.is_some());
    assert!(c.metadata.creation_timestamp.is_some());
    let got = api.get("a").await.unwrap();
    assert_eq!(got.data.unwrap()["k"], "v");
    let p = api
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"data":{"k":"w"}})),
        )
        .await
        .unwrap();
    assert_eq!(p.data.as_ref().unwrap()["k"], "w");
    assert_ne!(p.metadata.resource_version, c.metadata.resource_version);
    let mut u = p.clone();
    u.data.as_mut().unwrap().insert("x".into(), "y".into());
    let u = api.replace("a", &PostParams::default(), &u).await.unwrap();
    assert_eq!(u.data.unwrap()["x"], "y");
    let list = api.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    api.delete("a", &DeleteParams::default()).await.unwrap();
    let err = api.get("a").await.unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 404),
        "{err:?}"
    );
}

#[tokio::test]
async fn application_via_dynamic_api() {
    let hub = hub();
    let api: Api<DynamicObject> = Api::namespaced_with(hub.client(), "default", &app_resource());
    api.create(&PostParams::default(), &app("guestbook"))
        .await
        .unwrap();
    // No status subresource on Application: status is written through the main resource.
    let p = api
        .patch(
            "guestbook",
            &PatchParams::default(),
            &Patch::Merge(json!({"status":{"sync":{"status":"Synced"}}})),
        )
        .await
        .unwrap();
    assert_eq!(p.data["status"]["sync"]["status"], "Synced");
    let all: Api<DynamicObject> = Api::all_with(hub.client(), &app_resource());
    assert_eq!(
        all.list(&ListParams::default()).await.unwrap().items.len(),
        1
    );
}

#[tokio::test]
async fn watcher_sees_changes() {
    let hub = hub();
    let api: Api<ConfigMap> = Api::default_namespaced(hub.client());
    let mut stream = watcher(api.clone(), watcher::Config::default())
        .applied_objects()
        .boxed();
    api.create(&PostParams::default(), &cm("w1")).await.unwrap();
    let first = within(stream.try_next()).await.unwrap().unwrap();
    assert_eq!(first.metadata.name.as_deref(), Some("w1"));
    api.patch(
        "w1",
        &PatchParams::default(),
        &Patch::Merge(json!({"data":{"k":"2"}})),
    )
    .await
    .unwrap();
    let second = within(stream.try_next()).await.unwrap().unwrap();
    assert_eq!(second.data.unwrap()["k"], "2");
}

#[tokio::test]
async fn controller_reconciles() {
    let hub = hub();
    let client = hub.client();
    let api: Api<ConfigMap> = Api::default_namespaced(client.clone());
    api.create(&PostParams::default(), &cm("ctl"))
        .await
        .unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let ctx = Arc::new((api.clone(), tx));
    let ctl = Controller::new(api.clone(), watcher::Config::default()).run(
        |obj: Arc<ConfigMap>,
         ctx: Arc<(Api<ConfigMap>, tokio::sync::mpsc::UnboundedSender<String>)>| async move {
            let name = obj.metadata.name.clone().unwrap();
            if obj
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("seen"))
                .is_none()
            {
                ctx.0
                    .patch(
                        &name,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"metadata":{"labels":{"seen":"yes"}}})),
                    )
                    .await?;
            } else {
                let _ = ctx.1.send(name);
            }
            Ok::<_, kube::Error>(Action::await_change())
        },
        |_, _: &kube::Error, _| Action::await_change(),
        ctx,
    );
    let handle = tokio::spawn(ctl.for_each(|_| async {}));
    let name = within(rx.recv()).await.unwrap();
    assert_eq!(name, "ctl");
    handle.abort();
}
