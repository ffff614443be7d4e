//! Discovery documents and CRD-driven serving.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use kube::discovery::{ApiResource, Discovery};
use serde_json::{Value, json};

use crate::common::*;
use argocd_pull_hub::Hub;

fn names(list: &Value) -> Vec<String> {
    list["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn version_and_core_discovery() {
    let hub = Hub::new();
    let (c, v) = raw(&hub, "GET", "/version", None, "").await;
    assert_eq!(c, 200);
    assert_eq!(v["major"], "1");
    let (_, v) = raw(&hub, "GET", "/api", None, "").await;
    assert_eq!(v["versions"], json!(["v1"]));
    let (c, v) = raw(&hub, "GET", "/api/v1", None, "").await;
    assert_eq!(c, 200);
    assert_eq!(v["kind"], "APIResourceList");
    let n = names(&v);
    for r in [
        "namespaces",
        "namespaces/status",
        "secrets",
        "configmaps",
        "events",
        "serviceaccounts",
        "services",
        "services/status",
    ] {
        assert!(n.contains(&r.to_string()), "{r} missing from {n:?}");
    }
    let ns = v["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "namespaces")
        .unwrap();
    assert_eq!(ns["namespaced"], false);
    let cm = v["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "configmaps")
        .unwrap();
    assert_eq!(cm["shortNames"], json!(["cm"]));
    assert_eq!(cm["kind"], "ConfigMap");
}

#[tokio::test]
async fn group_discovery() {
    let hub = Hub::new();
    let (_, v) = raw(&hub, "GET", "/apis", None, "").await;
    let groups: Vec<&str> = v["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["name"].as_str().unwrap())
        .collect();
    for g in [
        "apps",
        "rbac.authorization.k8s.io",
        "coordination.k8s.io",
        "events.k8s.io",
        "apiextensions.k8s.io",
    ] {
        assert!(groups.contains(&g), "{g} missing from {groups:?}");
    }
    let (_, v) = raw(&hub, "GET", "/apis/rbac.authorization.k8s.io/v1", None, "").await;
    assert_eq!(
        names(&v),
        vec![
            "clusterrolebindings",
            "clusterroles",
            "rolebindings",
            "roles"
        ]
    );
    let (_, v) = raw(&hub, "GET", "/apis/apps/v1", None, "").await;
    assert_eq!(
        names(&v),
        vec![
            "deployments",
            "deployments/status",
            "statefulsets",
            "statefulsets/status"
        ]
    );
    let (_, v) = raw(&hub, "GET", "/apis/coordination.k8s.io/v1", None, "").await;
    assert_eq!(names(&v), vec!["leases"]);
    let (_, v) = raw(&hub, "GET", "/apis/events.k8s.io/v1", None, "").await;
    assert_eq!(names(&v), vec!["events"]);
    let (c, _) = raw(&hub, "GET", "/apis/nope.example.com/v1", None, "").await;
    assert_eq!(c, 404);
    for p in ["/healthz", "/readyz", "/livez"] {
        let req = http::Request::get(p).body(bytes::Bytes::new()).unwrap();
        let (s, _, b) = hub.raw_request(req).await;
        assert_eq!((s.as_u16(), &b[..]), (200, &b"ok"[..]), "{p}");
    }
}

pub fn widget_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"kind": "Widget", "plural": "widgets", "singular": "widget", "shortNames": ["wd"], "categories": ["all"]},
            "versions": [
                {"name": "v1beta1", "served": true, "storage": false,
                 "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}},
                {"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
                 "additionalPrinterColumns": [{"name": "Size", "type": "integer", "jsonPath": ".spec.size"}],
                 "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object", "properties": {
                     "size": {"type": "integer"},
                     "ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                               "items": {"type": "object", "properties": {"name": {"type": "string"}, "port": {"type": "integer"}}}},
                     "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}}
                 }}, "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}
            ]
        }
    })
}

pub fn widget_resource(version: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("example.com", version, "Widget"),
        "widgets",
    )
}

#[tokio::test]
async fn crd_created_through_the_api_is_served_and_removed() {
    let hub = Hub::new();
    let crds: Api<CustomResourceDefinition> = Api::all(hub.client());
    let crd: CustomResourceDefinition = serde_json::from_value(widget_crd()).unwrap();
    crds.create(&PostParams::default(), &crd).await.unwrap();
    let got = crds.get("widgets.example.com").await.unwrap();
    let conds = got.status.unwrap().conditions.unwrap();
    for t in ["Established", "NamesAccepted"] {
        assert!(
            conds.iter().any(|c| c.type_ == t && c.status == "True"),
            "{t}"
        );
    }
    let (_, v1) = raw(&hub, "GET", "/apis/example.com/v1", None, "").await;
    assert_eq!(names(&v1), vec!["widgets", "widgets/status"]);
    assert_eq!(v1["resources"][0]["shortNames"], json!(["wd"]));
    assert_eq!(v1["resources"][0]["categories"], json!(["all"]));
    assert_eq!(v1["resources"][0]["singularName"], "widget");
    let (_, b1) = raw(&hub, "GET", "/apis/example.com/v1beta1", None, "").await;
    assert_eq!(names(&b1), vec!["widgets"], "status only where declared");
    let (_, g) = raw(&hub, "GET", "/apis/example.com", None, "").await;
    assert_eq!(g["preferredVersion"]["version"], "v1");

    // Written through v1beta1, read through v1.
    let beta: Api<DynamicObject> =
        Api::namespaced_with(hub.client(), "default", &widget_resource("v1beta1"));
    let w: DynamicObject = serde_json::from_value(json!({"apiVersion": "example.com/v1beta1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": 1}})).unwrap();
    beta.create(&PostParams::default(), &w).await.unwrap();
    let v1api: Api<DynamicObject> =
        Api::namespaced_with(hub.client(), "default", &widget_resource("v1"));
    let back = v1api.get("w").await.unwrap();
    assert_eq!(back.types.unwrap().api_version, "example.com/v1");

    crds.delete("widgets.example.com", &DeleteParams::default())
        .await
        .unwrap();
    let (c, _) = raw(&hub, "GET", "/apis/example.com/v1", None, "").await;
    assert_eq!(c, 404);
    let (c, body) = raw(
        &hub,
        "GET",
        "/apis/example.com/v1/namespaces/default/widgets",
        None,
        "",
    )
    .await;
    assert_eq!(c, 404, "{body}");
}

#[tokio::test]
async fn cluster_scoped_crd_and_install_yaml() {
    let hub = Hub::new();
    let names = hub.install_crds_yaml(ARGOCD_CRDS[0]).unwrap();
    assert_eq!(names, vec!["applications.argoproj.io"]);
    // Re-installing replaces, no error.
    hub.install_crds_yaml(ARGOCD_CRDS[0]).unwrap();
    hub.install_crds_yaml(OCM_CRDS[2]).unwrap();
    let (_, v) = raw(
        &hub,
        "GET",
        "/apis/cluster.open-cluster-management.io/v1",
        None,
        "",
    )
    .await;
    let mc = v["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "managedclusters")
        .unwrap();
    assert_eq!(mc["namespaced"], false);
    let err = hub
        .install_crds_yaml("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("not an apiextensions.k8s.io/v1 CustomResourceDefinition"),
        "{err}"
    );
    assert!(hub.install_crds_yaml("a: [").is_err());
}

#[tokio::test]
async fn kube_discovery_finds_crds() {
    let hub = hub();
    let d = Discovery::new(hub.client()).run().await.unwrap();
    let (ar, caps) = d
        .groups()
        .flat_map(|g| g.recommended_resources())
        .find(|(ar, _)| ar.kind == "Application")
        .unwrap();
    assert_eq!(ar.plural, "applications");
    assert_eq!(caps.scope, kube::discovery::Scope::Namespaced);
}
