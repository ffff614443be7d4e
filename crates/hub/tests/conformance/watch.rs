//! watch: resourceVersion semantics, history, bookmarks, timeouts, selectors, streaming lists.

use std::time::Duration;

use argocd_pull_hub::{Hub, HubOptions};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, WatchEvent, WatchParams};
use kube::runtime::watcher;
use serde_json::json;

use crate::common::*;
use crate::list::mk_cm;

fn name(e: &WatchEvent<ConfigMap>) -> (String, String) {
    match e {
        WatchEvent::Added(o) => ("ADDED".into(), o.metadata.name.clone().unwrap()),
        WatchEvent::Modified(o) => ("MODIFIED".into(), o.metadata.name.clone().unwrap()),
        WatchEvent::Deleted(o) => ("DELETED".into(), o.metadata.name.clone().unwrap()),
        WatchEvent::Bookmark(_) => ("BOOKMARK".into(), String::new()),
        WatchEvent::Error(e) => ("ERROR".into(), e.code.to_string()),
    }
}

#[tokio::test]
async fn rv_zero_lists_current_state_then_follows() {
    let hub = Hub::new();
    mk_cm(&hub, "default", "a", json!({})).await;
    let api: Api<ConfigMap> = Api::default_namespaced(hub.client());
    let mut s = api
        .watch(&WatchParams::default().disable_bookmarks(), "0")
        .await
        .unwrap()
        .boxed();
    assert_eq!(
        name(&within(s.try_next()).await.unwrap().unwrap()),
        ("ADDED".into(), "a".into())
    );
    mk_cm(&hub, "default", "b", json!({})).await;
    assert_eq!(
        name(&within(s.try_next()).await.unwrap().unwrap()),
        ("ADDED".into(), "b".into())
    );
}

#[tokio::test]
async fn specific_rv_replays_history() {
    let hub = Hub::new();
    let a = mk_cm(&hub, "default", "a", json!({})).await;
    let rv_a = a.metadata.resource_version.clone().unwrap();
    mk_cm(&hub, "default", "b", json!({})).await;
    let api: Api<ConfigMap> = Api::default_namespaced(hub.client());
    api.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"x": "1"}})),
    )
    .await
    .unwrap();
    let mut s = api
        .watch(&WatchParams::default().disable_bookmarks(), &rv_a)
        .await
        .unwrap()
        .boxed();
    assert_eq!(
        name(&within(s.try_next()).await.unwrap().unwrap()),
        ("ADDED".into(), "b".into())
    );
    assert_eq!(
        name(&within(s.try_next()).await.unwrap().unwrap()),
        ("MODIFIED".into(), "a".into())
    );
    // Event resourceVersions increase (one global counter per Hub, like etcd).
    api.patch(
        "b",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"x": "2"}})),
    )
    .await
    .unwrap();
    match within(s.try_next()).await.unwrap().unwrap() {
        WatchEvent::Modified(o) => {
            assert_eq!(
                o.metadata.resource_version,
                Some(hub.resource_version().to_string())
            )
        }
        e => panic!("{e:?}"),
    }
}

#[tokio::test]
async fn too_old_rv_is_200_then_410_error_event() {
    let hub = Hub::with_options(HubOptions {
        history_per_type: 2,
        ..Default::default()
    });
    for i in 0..5 {
        mk_cm(&hub, "default", &format!("c{i}"), json!({})).await;
    }
    let req =
        http::Request::get("/api/v1/namespaces/default/configmaps?watch=true&resourceVersion=1")
            .body(bytes::Bytes::new())
            .unwrap();
    let (status, _, body) = within(hub.raw_request(req)).await;
    assert_eq!(status.as_u16(), 200);
    let ev: serde_json::Value =
        serde_json::from_slice(body.split(|b| *b == b'\n').next().unwrap()).unwrap();
    assert_eq!(ev["type"], "ERROR");
    assert_eq!(ev["object"]["code"], 410);
    assert_eq!(ev["object"]["reason"], "Expired");
    // kube-rs sees it as an Error event.
    let api: Api<ConfigMap> = Api::default_namespaced(hub.client());
    let mut s = api
        .watch(&WatchParams::default(), "1")
        .await
        .unwrap()
        .boxed();
    assert_eq!(
        name(&within(s.try_next()).await.unwrap().unwrap()),
        ("ERROR".into(), "410".into())
    );
}

#[tokio::test]
async fn bookmarks_and_timeout() {
    let hub = Hub::with_options(HubOptions {
        bookmark_interval: Duration::from_millis(50),
        ..Default::default()
    });
    mk_cm(&hub, "default", "a", json!({})).await;
    let api: Api<ConfigMap> = Api::default_namespaced(hub.client());
    let rv = hub.resource_version().to_string();
    let mut s = api
        .watch(&WatchParams::default().timeout(1), &rv)
        .await
        .unwrap()
        .boxed();
    match within(s.try_next()).await.unwrap().unwrap() {
        WatchEvent::Bookmark(b) => assert_eq!(b.metadata.resource_version, rv),
        e => panic!("expected a bookmark, got {e:?}"),
    }
    // timeoutSeconds ends the stream.
    within(async { while let Some(Ok(_)) = s.next().await {} }).await;
}

#[tokio::test]
async fn label_selector_transitions() {
    let hub = Hub::new();
    let api: Api<ConfigMap> = Api::default_namespaced(hub.client());
    let mut s = api
        .watch(
            &WatchParams::default().labels("app=x").disable_bookmarks(),
            "0",
        )
        .await
        .unwrap()
        .boxed();
    mk_cm(&hub, "default", "skip", json!({"app": "y"})).await;
    mk_cm(&hub, "default", "m", json!({"app": "x"})).await;
    assert_eq!(
        name(&within(s.try_next()).await.unwrap().unwrap()),
        ("ADDED".into(), "m".into())
    );
    api.patch(
        "m",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "y"}}})),
    )
    .await
    .unwrap();
    match within(s.try_next()).await.unwrap().unwrap() {
        WatchEvent::Deleted(o) => {
            // The last state that matched, at the new resourceVersion (like the watch cache).
            assert_eq!(o.metadata.name.as_deref(), Some("m"));
            assert_eq!(o.metadata.labels.unwrap()["app"], "x");
            assert_eq!(
                o.metadata.resource_version,
                Some(hub.resource_version().to_string())
            );
        }
        e => panic!("{e:?}"),
    }
    api.patch(
        "skip",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "x"}}})),
    )
    .await
    .unwrap();
    assert_eq!(
        name(&within(s.try_next()).await.unwrap().unwrap()),
        ("ADDED".into(), "skip".into())
    );
}

#[tokio::test]
async fn field_selector_and_single_object_watch() {
    let hub = Hub::new();
    let api: Api<ConfigMap> = Api::default_namespaced(hub.client());
    let mut s = api
        .watch(
            &WatchParams::default()
                .fields("metadata.name=two")
                .disable_bookmarks(),
            "0",
        )
        .await
        .unwrap()
        .boxed();
    mk_cm(&hub, "default", "one", json!({})).await;
    mk_cm(&hub, "default", "two", json!({})).await;
    assert_eq!(
        name(&within(s.try_next()).await.unwrap().unwrap()),
        ("ADDED".into(), "two".into())
    );
}

#[tokio::test]
async fn streaming_list_with_initial_events_end_bookmark() {
    let hub = Hub::new();
    mk_cm(&hub, "default", "a", json!({})).await;
    mk_cm(&hub, "default", "b", json!({})).await;
    let req = http::Request::get(
        "/api/v1/namespaces/default/configmaps?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=1",
    )
    .body(bytes::Bytes::new())
    .unwrap();
    let (status, _, body) = within(hub.raw_request(req)).await;
    assert_eq!(status.as_u16(), 200);
    let evs: Vec<serde_json::Value> = body
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect();
    assert_eq!(evs[0]["type"], "ADDED");
    assert_eq!(evs[1]["type"], "ADDED");
    assert_eq!(evs[2]["type"], "BOOKMARK");
    assert_eq!(
        evs[2]["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    assert_eq!(
        evs[2]["object"]["metadata"]["resourceVersion"],
        hub.resource_version().to_string()
    );
    // Without resourceVersionMatch=NotOlderThan the request is invalid, like the real server.
    let (c, _) = raw(
        &hub,
        "GET",
        "/api/v1/namespaces/default/configmaps?watch=true&sendInitialEvents=true",
        None,
        "",
    )
    .await;
    assert_eq!(c, 422);
    // kube-rs streaming lists work end to end.
    let api: Api<ConfigMap> = Api::default_namespaced(hub.client());
    let mut w = watcher(api, watcher::Config::default().streaming_lists()).boxed();
    let mut seen = Vec::new();
    loop {
        match within(w.try_next()).await.unwrap().unwrap() {
            watcher::Event::InitApply(o) => seen.push(o.metadata.name.unwrap()),
            watcher::Event::InitDone => break,
            _ => {}
        }
    }
    assert_eq!(seen, vec!["a", "b"]);
}

#[tokio::test]
async fn slow_watcher_is_closed_and_writers_never_block() {
    let hub = Hub::with_options(HubOptions {
        history_per_type: 10,
        ..Default::default()
    });
    let api: Api<ConfigMap> = Api::default_namespaced(hub.client());
    let rv = hub.resource_version().to_string();
    let mut s = api
        .watch(&WatchParams::default().disable_bookmarks(), &rv)
        .await
        .unwrap()
        .boxed();
    // The watcher reads nothing while 50 writes complete.
    within(async {
        for i in 0..50 {
            mk_cm(&hub, "default", &format!("c{i}"), json!({})).await;
        }
    })
    .await;
    // It fell behind the bounded history: the stream ends (the client relists).
    let mut n = 0;
    within(async {
        while let Some(Ok(_)) = s.next().await {
            n += 1;
        }
    })
    .await;
    assert!(n < 50, "a lagging watcher must be closed, got {n} events");
}

#[tokio::test]
async fn watcher_recovers_after_being_closed() {
    let hub = Hub::with_options(HubOptions {
        history_per_type: 5,
        ..Default::default()
    });
    let api: Api<ConfigMap> = Api::default_namespaced(hub.client());
    let (reader, writer) = kube::runtime::reflector::store();
    let mut refl =
        kube::runtime::reflector(writer, watcher(api.clone(), watcher::Config::default())).boxed();
    // Establish list + watch.
    within(async {
        loop {
            if let Some(Ok(watcher::Event::InitDone)) = refl.next().await {
                break;
            }
        }
    })
    .await;
    // 40 writes while the reflector does not read: its watch falls out of the history.
    for i in 0..40 {
        mk_cm(&hub, "default", &format!("c{i}"), json!({})).await;
    }
    within(async {
        while reader.state().len() < 40 {
            refl.next().await.unwrap().ok();
        }
    })
    .await;
    assert_eq!(reader.state().len(), 40);
}

#[tokio::test]
async fn metadata_only_get_list_and_watch() {
    use kube::core::PartialObjectMeta;
    let hub = Hub::new();
    mk_cm(&hub, "default", "m1", json!({"a": "b"})).await;
    let api: Api<PartialObjectMeta<ConfigMap>> = Api::default_namespaced(hub.client());
    let m = api.get("m1").await.unwrap();
    assert_eq!(m.metadata.labels.unwrap()["a"], "b");
    assert_eq!(m.types.unwrap().kind, "PartialObjectMetadata");
    let l = api.list(&kube::api::ListParams::default()).await.unwrap();
    assert_eq!(l.items.len(), 1);
    let mut w = watcher(api.clone(), watcher::Config::default()).boxed();
    let mut seen = Vec::new();
    loop {
        match within(w.try_next()).await.unwrap().unwrap() {
            watcher::Event::InitApply(o) => seen.push(o.metadata.name.unwrap()),
            watcher::Event::InitDone => break,
            _ => {}
        }
    }
    assert_eq!(seen, vec!["m1"]);
    mk_cm(&hub, "default", "m2", json!({})).await;
    match within(w.try_next()).await.unwrap().unwrap() {
        watcher::Event::Apply(o) => assert_eq!(o.metadata.name.as_deref(), Some("m2")),
        e => panic!("{e:?}"),
    }
    // The raw body is the metadata-only form.
    let req = http::Request::get("/api/v1/namespaces/default/configmaps/m1")
        .header(
            "accept",
            "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1",
        )
        .body(bytes::Bytes::new())
        .unwrap();
    let (_, _, b) = hub.raw_request(req).await;
    let v: serde_json::Value = serde_json::from_slice(&b).unwrap();
    assert_eq!(v["kind"], "PartialObjectMetadata");
    assert!(v.get("data").is_none());
}
