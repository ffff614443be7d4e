//! delete: finalizers, preconditions, namespace lifecycle, garbage collection, deletecollection.

use argocd_pull_hub::Hub;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{
    Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams, Preconditions,
    WatchEvent, WatchParams,
};
use serde_json::json;

use crate::common::*;
use crate::list::{mk_cm, mk_ns};

fn status(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

async fn cm_with(hub: &Hub, ns: &str, meta: serde_json::Value) -> ConfigMap {
    let api: Api<ConfigMap> = Api::namespaced(hub.client(), ns);
    api.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}))
            .unwrap(),
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn finalizers_hold_the_object_until_removed() {
    let hub = Hub::new();
    cm_with(
        &hub,
        "default",
        json!({"name": "f", "finalizers": ["example.com/hold"]}),
    )
    .await;
    let api: Api<ConfigMap> = Api::default_namespaced(hub.client());
    let rv = hub.resource_version().to_string();
    let mut s = api
        .watch(&WatchParams::default().disable_bookmarks(), &rv)
        .await
        .unwrap()
        .boxed();
    api.delete("f", &DeleteParams::default()).await.unwrap();
    let o = api.get("f").await.unwrap();
    assert!(o.metadata.deletion_timestamp.is_some());
    assert_eq!(o.metadata.deletion_grace_period_seconds, Some(0));
    assert!(matches!(
        within(s.try_next()).await.unwrap().unwrap(),
        WatchEvent::Modified(_)
    ));
    // New finalizers cannot be added while deleting.
    let err = api
        .patch(
            "f",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": ["example.com/hold", "x/y"]}})),
        )
        .await
        .unwrap_err();
    assert_eq!(status(err).code, 422);
    api.patch(
        "f",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert!(api.get_opt("f").await.unwrap().is_none());
    assert!(matches!(
        within(s.try_next()).await.unwrap().unwrap(),
        WatchEvent::Deleted(_)
    ));
}

#[tokio::test]
async fn delete_preconditions() {
    let hub = Hub::new();
    let c = mk_cm(&hub, "default", "p", json!({})).await;
    let api: Api<ConfigMap> = Api::default_namespaced(hub.client());
    let dp = DeleteParams::default().preconditions(Preconditions {
        uid: Some("wrong".into()),
        resource_version: None,
    });
    let s = status(api.delete("p", &dp).await.unwrap_err());
    assert_eq!(s.code, 409);
    assert!(
        s.message
            .contains("Precondition failed: UID in precondition: wrong"),
        "{}",
        s.message
    );
    let dp = DeleteParams::default().preconditions(Preconditions {
        uid: None,
        resource_version: Some("1".into()),
    });
    assert_eq!(status(api.delete("p", &dp).await.unwrap_err()).code, 409);
    let dp = DeleteParams::default().preconditions(Preconditions {
        uid: c.metadata.uid.clone(),
        resource_version: c.metadata.resource_version.clone(),
    });
    api.delete("p", &dp).await.unwrap();
    let s = status(api.delete("p", &DeleteParams::default()).await.unwrap_err());
    assert_eq!(
        (s.code, s.message.as_str()),
        (404, "configmaps \"p\" not found")
    );
}

#[tokio::test]
async fn namespace_deletion_removes_contents() {
    let hub = Hub::new();
    mk_ns(&hub, "doomed").await;
    mk_cm(&hub, "doomed", "plain", json!({})).await;
    cm_with(
        &hub,
        "doomed",
        json!({"name": "held", "finalizers": ["example.com/hold"]}),
    )
    .await;
    let nss: Api<Namespace> = Api::all(hub.client());
    nss.delete("doomed", &DeleteParams::default())
        .await
        .unwrap();
    let ns = nss.get("doomed").await.unwrap();
    assert_eq!(ns.status.unwrap().phase.as_deref(), Some("Terminating"));
    let cms: Api<ConfigMap> = Api::namespaced(hub.client(), "doomed");
    assert!(cms.get_opt("plain").await.unwrap().is_none());
    // No new content in a terminating namespace.
    let s = status(
        cms.create(
            &PostParams::default(),
            &serde_json::from_value(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "new"}}),
            )
            .unwrap(),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!((s.code, s.reason.as_str()), (403, "Forbidden"));
    assert!(
        s.message.contains("because it is being terminated"),
        "{}",
        s.message
    );
    cms.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert!(nss.get_opt("doomed").await.unwrap().is_none());
}

#[tokio::test]
async fn garbage_collection_of_owner_references() {
    let hub = hub();
    let owner = mk_cm(&hub, "default", "owner", json!({})).await;
    let other = mk_cm(&hub, "default", "other", json!({})).await;
    let oref = |c: &ConfigMap| json!({"apiVersion": "v1", "kind": "ConfigMap", "name": c.metadata.name, "uid": c.metadata.uid});
    cm_with(
        &hub,
        "default",
        json!({"name": "child", "ownerReferences": [oref(&owner)]}),
    )
    .await;
    cm_with(&hub, "default", json!({"name": "grandchild-of-child-owner", "ownerReferences": [oref(&owner), oref(&other)]})).await;
    let secrets: Api<Secret> = Api::default_namespaced(hub.client());
    secrets
        .create(&PostParams::default(), &serde_json::from_value(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "ownerReferences": [oref(&owner)]}})).unwrap())
        .await
        .unwrap();
    // A cluster-scoped owner (ManagedCluster) of a namespaced dependent.
    let mcs: Api<DynamicObject> = Api::all_with(
        hub.client(),
        &kube::api::ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk(
                "cluster.open-cluster-management.io",
                "v1",
                "ManagedCluster",
            ),
            "managedclusters",
        ),
    );
    let mc = mcs.create(&PostParams::default(), &serde_json::from_value(json!({"apiVersion": "cluster.open-cluster-management.io/v1", "kind": "ManagedCluster", "metadata": {"name": "c1"}, "spec": {"hubAcceptsClient": true}})).unwrap()).await.unwrap();
    cm_with(&hub, "default", json!({"name": "of-cluster", "ownerReferences": [{"apiVersion": "cluster.open-cluster-management.io/v1", "kind": "ManagedCluster", "name": "c1", "uid": mc.metadata.uid}]})).await;

    let api: Api<ConfigMap> = Api::default_namespaced(hub.client());
    api.delete("owner", &DeleteParams::background())
        .await
        .unwrap();
    assert!(api.get_opt("child").await.unwrap().is_none());
    assert!(secrets.get_opt("s").await.unwrap().is_none());
    let survivor = api.get("grandchild-of-child-owner").await.unwrap();
    let refs = survivor.metadata.owner_references.unwrap();
    assert_eq!(
        refs.len(),
        1,
        "the dangling reference is dropped, the object stays with its live owner"
    );
    assert_eq!(refs[0].name, "other");
    mcs.delete("c1", &DeleteParams::default()).await.unwrap();
    assert!(api.get_opt("of-cluster").await.unwrap().is_none());
}

#[tokio::test]
async fn orphan_propagation_keeps_dependents() {
    let hub = Hub::new();
    let owner = mk_cm(&hub, "default", "owner", json!({})).await;
    cm_with(&hub, "default", json!({"name": "child", "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid}]})).await;
    let api: Api<ConfigMap> = Api::default_namespaced(hub.client());
    api.delete("owner", &DeleteParams::orphan()).await.unwrap();
    let child = api.get("child").await.unwrap();
    assert!(
        child
            .metadata
            .owner_references
            .unwrap_or_default()
            .is_empty()
    );
}

#[tokio::test]
async fn delete_collection_with_selector_and_crd_deletion() {
    let hub = hub();
    mk_cm(&hub, "default", "a", json!({"x": "1"})).await;
    mk_cm(&hub, "default", "b", json!({"x": "1"})).await;
    mk_cm(&hub, "default", "c", json!({})).await;
    let api: Api<ConfigMap> = Api::default_namespaced(hub.client());
    let r = api
        .delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels("x=1"),
        )
        .await
        .unwrap();
    let deleted = r.left().unwrap();
    assert_eq!(deleted.items.len(), 2);
    let left: Vec<String> = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|c| c.metadata.name.unwrap())
        .collect();
    assert_eq!(left, vec!["c"]);
    // Deleting a CRD deletes its objects and stops serving it.
    let apps: Api<DynamicObject> = Api::default_namespaced_with(hub.client(), &app_resource());
    apps.create(&PostParams::default(), &app("a"))
        .await
        .unwrap();
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> = Api::all(hub.client());
    crds.delete("applications.argoproj.io", &DeleteParams::default())
        .await
        .unwrap();
    assert_eq!(hub.object_count("applications.argoproj.io"), 0);
    assert_eq!(status(apps.get("a").await.unwrap_err()).code, 404);
}
