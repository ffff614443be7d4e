//! Request counters and fault injection.

use argocd_pull_hub::{Fault, Hub, Verb};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::common::*;

#[tokio::test]
async fn counters_are_exact() {
    let hub = Hub::new();
    let base = hub.counters();
    assert_eq!(
        base.writes(),
        0,
        "creating the default namespaces is not an API request"
    );
    let api: Api<ConfigMap> = Api::default_namespaced(hub.client());
    let cm: ConfigMap = serde_json::from_value(
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}),
    )
    .unwrap();
    api.create(&PostParams::default(), &cm).await.unwrap();
    api.get("a").await.unwrap();
    api.get("a").await.unwrap();
    api.list(&ListParams::default()).await.unwrap();
    api.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "v"}})),
    )
    .await
    .unwrap();
    let cur = api.get("a").await.unwrap();
    api.replace("a", &PostParams::default(), &cur)
        .await
        .unwrap();
    api.delete("a", &DeleteParams::default()).await.unwrap();
    let _ = api.get("a").await.unwrap_err();
    let c = hub.counters();
    assert_eq!(c.get(Verb::Create, "configmaps"), 1);
    assert_eq!(
        c.get(Verb::Get, "configmaps"),
        4,
        "failed requests count too"
    );
    assert_eq!(c.get(Verb::List, "configmaps"), 1);
    assert_eq!(c.get(Verb::Patch, "configmaps"), 1);
    assert_eq!(c.get(Verb::Update, "configmaps"), 1);
    assert_eq!(c.get(Verb::Delete, "configmaps"), 1);
    assert_eq!(c.writes(), 4);
    assert_eq!(c.writes_to("configmaps"), 4);
    assert_eq!(c.writes_to("secrets"), 0);
    // "No write since": a snapshot difference.
    let before = hub.counters();
    api.list(&ListParams::default()).await.unwrap();
    assert_eq!(hub.counters().since(&before).writes(), 0);
    assert_eq!(
        hub.counters().since(&before).get(Verb::List, "configmaps"),
        1
    );
}

#[tokio::test]
async fn status_subresource_requests_count_under_the_plural_once() {
    let hub = hub();
    let works: Api<DynamicObject> = Api::default_namespaced_with(hub.client(), &work_resource());
    works
        .create(&PostParams::default(), &serde_json::from_value(json!({"apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork", "metadata": {"name": "w"}, "spec": {}})).unwrap())
        .await
        .unwrap();
    works
        .patch_status(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"conditions": []}})),
        )
        .await
        .unwrap();
    let c = hub.counters();
    assert_eq!(c.get(Verb::Patch, "manifestworks"), 1);
    assert_eq!(c.get(Verb::Patch, "manifestworks/status"), 1);
    assert_eq!(c.writes_to("manifestworks"), 2);
    assert_eq!(c.writes(), 2);
}

#[tokio::test]
async fn injected_conflict_is_answered_then_cleared() {
    let hub = hub();
    let apps: Api<DynamicObject> = Api::default_namespaced_with(hub.client(), &app_resource());
    apps.create(&PostParams::default(), &app("a"))
        .await
        .unwrap();
    hub.inject_fault(Fault::conflict("applications", 1));
    let rv = hub.resource_version();
    let err = apps
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"project": "x"}})),
        )
        .await
        .unwrap_err();
    match err {
        kube::Error::Api(s) => {
            assert_eq!((s.code, s.reason.as_str()), (409, "Conflict"));
            assert!(s.message.contains("the object has been modified"));
        }
        e => panic!("{e:?}"),
    }
    assert_eq!(
        hub.resource_version(),
        rv,
        "an injected fault writes nothing"
    );
    // A retry succeeds.
    apps.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"project": "x"}})),
    )
    .await
    .unwrap();
    assert_eq!(hub.counters().get(Verb::Patch, "applications"), 2);
    // 500s, on other verbs.
    hub.inject_fault(Fault::server_error("applications", 2));
    for _ in 0..2 {
        let e = apps
            .patch("a", &PatchParams::default(), &Patch::Merge(json!({})))
            .await
            .unwrap_err();
        assert!(
            matches!(e, kube::Error::Api(ref s) if s.code == 500),
            "{e:?}"
        );
    }
    apps.patch("a", &PatchParams::default(), &Patch::Merge(json!({})))
        .await
        .unwrap();
    hub.inject_fault(Fault::new(&[Verb::Get], "applications", 503, 1));
    assert!(apps.get("a").await.is_err());
    assert!(apps.get("a").await.is_ok());
    // Faults on other plurals do not interfere.
    hub.inject_fault(Fault::conflict("configmaps", 5));
    apps.patch("a", &PatchParams::default(), &Patch::Merge(json!({})))
        .await
        .unwrap();
    hub.clear_faults();
}
