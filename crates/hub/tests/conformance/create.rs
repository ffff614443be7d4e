//! create: generated fields, generateName, AlreadyExists, NamespaceLifecycle, dryRun, validation.

use argocd_pull_hub::Hub;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use serde_json::json;

use crate::common::*;

fn cm(v: serde_json::Value) -> ConfigMap {
    serde_json::from_value(v).unwrap()
}

fn api_err(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test]
async fn generated_metadata_and_generate_name() {
    let hub = Hub::new();
    let api: Api<ConfigMap> = Api::default_namespaced(hub.client());
    let c = api
        .create(
            &PostParams::default(),
            &cm(json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"generateName":"gen-"}})),
        )
        .await
        .unwrap();
    let name = c.metadata.name.unwrap();
    assert!(name.starts_with("gen-") && name.len() == 9, "{name}");
    assert_eq!(c.metadata.namespace.as_deref(), Some("default"));
    assert_eq!(c.metadata.uid.as_ref().map(|u| u.len()), Some(36));
    assert!(c.metadata.resource_version.unwrap().parse::<u64>().is_ok());
    assert_eq!(c.metadata.generation, Some(1));
}

#[tokio::test]
async fn already_exists_is_409() {
    let hub = Hub::new();
    let api: Api<ConfigMap> = Api::default_namespaced(hub.client());
    let o = cm(json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"}}));
    api.create(&PostParams::default(), &o).await.unwrap();
    let s = api_err(api.create(&PostParams::default(), &o).await.unwrap_err());
    assert_eq!((s.code, s.reason.as_str()), (409, "AlreadyExists"));
    assert_eq!(s.message, "configmaps \"a\" already exists");
    let d = s.details.unwrap();
    assert_eq!((d.name.as_str(), d.kind.as_str()), ("a", "configmaps"));
}

#[tokio::test]
async fn create_in_missing_namespace_is_404_naming_the_namespace() {
    let hub = hub();
    let api: Api<ConfigMap> = Api::namespaced(hub.client(), "nope");
    let s = api_err(
        api.create(
            &PostParams::default(),
            &cm(json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!((s.code, s.reason.as_str()), (404, "NotFound"));
    assert_eq!(s.message, "namespaces \"nope\" not found");
    // Same for custom resources.
    let apps: Api<kube::api::DynamicObject> =
        Api::namespaced_with(hub.client(), "nope", &app_resource());
    let s = api_err(
        apps.create(&PostParams::default(), &app("x"))
            .await
            .unwrap_err(),
    );
    assert_eq!(s.message, "namespaces \"nope\" not found");
}

#[tokio::test]
async fn dry_run_all_does_not_persist() {
    let hub = Hub::new();
    let api: Api<ConfigMap> = Api::default_namespaced(hub.client());
    let before = hub.resource_version();
    let pp = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let c = api
        .create(
            &pp,
            &cm(json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"dry"}})),
        )
        .await
        .unwrap();
    assert_eq!(c.metadata.name.as_deref(), Some("dry"));
    assert_eq!(hub.resource_version(), before);
    assert!(api.get_opt("dry").await.unwrap().is_none());
    let (code, body) = raw(
        &hub,
        "POST",
        "/api/v1/namespaces/default/configmaps?dryRun=Some",
        Some("application/json"),
        r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"}}"#,
    )
    .await;
    assert_eq!(code, 400, "{body}");
    assert!(body["message"].as_str().unwrap().contains("dryRun"));
}

#[tokio::test]
async fn name_validation_is_422() {
    let hub = Hub::new();
    let post = |path: &'static str, body: serde_json::Value| {
        let hub = hub.clone();
        async move {
            raw(
                &hub,
                "POST",
                path,
                Some("application/json"),
                &body.to_string(),
            )
            .await
        }
    };
    let (c, b) = post(
        "/api/v1/namespaces/default/configmaps",
        json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"Bad_Name"}}),
    )
    .await;
    assert_eq!(c, 422);
    assert_eq!(b["reason"], "Invalid");
    assert!(b["message"].as_str().unwrap().starts_with("ConfigMap \"Bad_Name\" is invalid: metadata.name: Invalid value: \"Bad_Name\": a lowercase RFC 1123 subdomain"), "{b}");
    assert_eq!(b["details"]["causes"][0]["field"], "metadata.name");
    let (c, b) = post(
        "/api/v1/namespaces",
        json!({"apiVersion":"v1","kind":"Namespace","metadata":{"name":"a.b"}}),
    )
    .await;
    assert_eq!(c, 422);
    assert!(
        b["message"].as_str().unwrap().contains("RFC 1123 label"),
        "{b}"
    );
    let (c, b) = post(
        "/api/v1/namespaces/default/configmaps",
        json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{}}),
    )
    .await;
    assert_eq!(c, 422);
    assert!(
        b["message"]
            .as_str()
            .unwrap()
            .contains("name or generateName is required"),
        "{b}"
    );
    let (c, b) = post("/api/v1/namespaces/default/configmaps", json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"ok","labels":{"a":"not valid!"}}})).await;
    assert_eq!(c, 422, "{b}");
}

#[tokio::test]
async fn namespace_and_type_mismatch_are_400() {
    let hub = Hub::new();
    let (c, b) = raw(
        &hub,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        Some("application/json"),
        r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"other"}}"#,
    )
    .await;
    assert_eq!(c, 400);
    assert_eq!(
        b["message"],
        "the namespace of the provided object does not match the namespace sent on the request"
    );
    let (c, b) = raw(
        &hub,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        Some("application/json"),
        r#"{"apiVersion":"apps/v1","kind":"ConfigMap","metadata":{"name":"a"}}"#,
    )
    .await;
    assert_eq!(c, 400);
    assert!(
        b["message"]
            .as_str()
            .unwrap()
            .contains("does not match the expected API version"),
        "{b}"
    );
    let (c, b) = raw(
        &hub,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        Some("application/json"),
        r#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"a"}}"#,
    )
    .await;
    assert_eq!(c, 400);
    assert!(
        b["message"]
            .as_str()
            .unwrap()
            .contains("does not match the expected kind"),
        "{b}"
    );
    let (c, b) = raw(
        &hub,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        Some("application/json"),
        r#"{"metadata":{"name":"a"}}"#,
    )
    .await;
    assert_eq!(c, 400);
    assert!(
        b["message"]
            .as_str()
            .unwrap()
            .contains("Object 'Kind' is missing"),
        "{b}"
    );
}

#[tokio::test]
async fn secret_string_data_is_folded_into_data() {
    use k8s_openapi::api::core::v1::Secret;
    use kube::api::{Patch, PatchParams};
    let hub = Hub::new();
    let api: Api<Secret> = Api::default_namespaced(hub.client());
    let s: Secret = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "cluster1-secret"},
        "data": {"kept": "a2VwdA==", "server": "b2xk"},
        "stringData": {"name": "cluster1", "server": "https://cluster1-control-plane"}
    }))
    .unwrap();
    api.create(&PostParams::default(), &s).await.unwrap();
    let got = api.get("cluster1-secret").await.unwrap();
    assert_eq!(got.string_data, None, "stringData is write-only");
    assert_eq!(
        got.type_.as_deref(),
        Some("Opaque"),
        "type defaults to Opaque"
    );
    let data = got.data.unwrap();
    let text = |k: &str| String::from_utf8(data[k].0.clone()).unwrap();
    assert_eq!(text("name"), "cluster1");
    assert_eq!(
        text("server"),
        "https://cluster1-control-plane",
        "stringData wins over data"
    );
    assert_eq!(text("kept"), "kept");

    // The same on a patch.
    let patch = json!({"stringData": {"name": "renamed"}});
    api.patch(
        "cluster1-secret",
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .unwrap();
    let got = api.get("cluster1-secret").await.unwrap();
    assert_eq!(got.string_data, None);
    assert_eq!(got.data.unwrap()["name"].0, b"renamed");
}
