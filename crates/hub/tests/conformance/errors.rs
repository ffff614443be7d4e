//! Error bodies: Kubernetes `Status` objects with the real codes, reasons and messages; bad input
//! never panics or hangs.

use argocd_pull_hub::Hub;
use proptest::prelude::*;
use serde_json::Value;

use crate::common::*;

fn assert_status(v: &Value, code: u16, reason: &str) {
    assert_eq!(v["kind"], "Status", "{v}");
    assert_eq!(v["apiVersion"], "v1");
    assert_eq!(v["status"], "Failure");
    assert_eq!(v["code"], code, "{v}");
    assert_eq!(v["reason"], reason, "{v}");
    assert!(v["message"].as_str().is_some_and(|m| !m.is_empty()));
}

#[tokio::test]
async fn status_bodies_for_each_error_class() {
    let hub = hub();
    // 400: malformed JSON, with the parse error.
    let (c, v) = raw(
        &hub,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        Some("application/json"),
        "{not json",
    )
    .await;
    assert_eq!(c, 400);
    assert_status(&v, 400, "BadRequest");
    assert!(
        v["message"].as_str().unwrap().contains("json parse error"),
        "{v}"
    );
    // 400: malformed YAML apply body.
    let (c, v) = raw(
        &hub,
        "PATCH",
        "/api/v1/namespaces/default/configmaps/x?fieldManager=m",
        Some("application/apply-patch+yaml"),
        "a: [",
    )
    .await;
    assert_eq!(c, 400, "{v}");
    // 404: unknown resource type and unknown object.
    let (c, v) = raw(
        &hub,
        "GET",
        "/apis/nope.io/v1/namespaces/default/things",
        None,
        "",
    )
    .await;
    assert_eq!(c, 404);
    assert_status(&v, 404, "NotFound");
    assert_eq!(
        v["message"],
        "the server could not find the requested resource"
    );
    let (c, v) = raw(
        &hub,
        "GET",
        "/apis/argoproj.io/v1alpha1/namespaces/default/applications/missing",
        None,
        "",
    )
    .await;
    assert_eq!(c, 404);
    assert_eq!(
        v["message"],
        "applications.argoproj.io \"missing\" not found"
    );
    assert_eq!(
        v["details"],
        serde_json::json!({"name": "missing", "group": "argoproj.io", "kind": "applications"})
    );
    // 405: create on an object path.
    let (c, v) = raw(
        &hub,
        "POST",
        "/api/v1/namespaces/default/configmaps/x",
        Some("application/json"),
        "{}",
    )
    .await;
    assert_eq!(c, 405);
    assert_status(&v, 405, "MethodNotAllowed");
    // 413: body over 3 MiB.
    let big = format!(
        "{{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{{\"name\":\"big\"}},\"data\":{{\"x\":\"{}\"}}}}",
        "a".repeat(3 * 1024 * 1024 + 10)
    );
    let (c, v) = raw(
        &hub,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        Some("application/json"),
        &big,
    )
    .await;
    assert_eq!(c, 413);
    assert_status(&v, 413, "RequestEntityTooLarge");
    // 415: protobuf bodies and unknown patch types.
    let (c, v) = raw(
        &hub,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        Some("application/vnd.kubernetes.protobuf"),
        "x",
    )
    .await;
    assert_eq!(c, 415);
    assert_status(&v, 415, "UnsupportedMediaType");
    let (c, _) = raw(
        &hub,
        "PATCH",
        "/api/v1/namespaces/default/configmaps/x",
        Some("text/plain"),
        "x",
    )
    .await;
    assert!(c == 415 || c == 404, "{c}");
    // 410 and 409 and 422 are covered per area (list, update, create).
}

#[tokio::test]
async fn namespaced_resource_needs_a_namespace_and_cluster_resource_refuses_one() {
    let hub = Hub::new();
    let (c, _) = raw(&hub, "GET", "/api/v1/configmaps/x", None, "").await;
    assert_eq!(c, 404);
    let (c, _) = raw(
        &hub,
        "GET",
        "/apis/rbac.authorization.k8s.io/v1/namespaces/default/clusterroles",
        None,
        "",
    )
    .await;
    assert_eq!(c, 404);
    let (c, _) = raw(
        &hub,
        "GET",
        "/api/v1/namespaces/default/configmaps/x/status",
        None,
        "",
    )
    .await;
    assert_eq!(c, 404, "no status subresource on ConfigMap");
}

fn method() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec!["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"])
}

fn path() -> impl Strategy<Value = String> {
    let seg = prop::sample::select(vec![
        "api",
        "apis",
        "v1",
        "namespaces",
        "default",
        "configmaps",
        "x",
        "status",
        "argoproj.io",
        "v1alpha1",
        "applications",
        "watch",
        "",
        "%",
        "..",
        "namespaces",
        "kube-system",
        "finalize",
    ]);
    let q = prop::sample::select(vec![
        "",
        "?limit=1",
        "?continue=zz",
        "?labelSelector=a%20in%20(",
        "?fieldSelector=x",
        "?dryRun=All",
        "?fieldManager=m&force=true",
        "?limit=-1",
        "?resourceVersionMatch=Exact&resourceVersion=1",
        "?propagationPolicy=Bad",
    ]);
    (prop::collection::vec(seg, 0..7), q).prop_map(|(s, q)| format!("/{}{}", s.join("/"), q))
}

fn body() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        Just("{}".to_string()),
        Just("[]".to_string()),
        Just("null".to_string()),
        Just(r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"}}"#.to_string()),
        Just(r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":"x"}"#.to_string()),
        Just(r#"[{"op":"remove","path":"/metadata"}]"#.to_string()),
        Just(r#"{"metadata":{"name":null,"finalizers":[1]}}"#.to_string()),
        ".{0,64}",
    ]
}

fn ctype() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "application/json",
        "application/merge-patch+json",
        "application/json-patch+json",
        "application/strategic-merge-patch+json",
        "application/apply-patch+yaml",
        "application/yaml",
        "x/y",
    ])
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, .. ProptestConfig::default() })]
    #[test]
    fn random_requests_never_panic_or_hang(reqs in prop::collection::vec((method(), path(), ctype(), body()), 1..8)) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let hub = Hub::new();
            hub.install_crds_yaml(ARGOCD_CRDS[0]).unwrap();
            for (m, p, ct, b) in reqs {
                if p.contains("watch") { continue; }
                let req = http::Request::builder().method(m).uri(&p).header("content-type", ct)
                    .body(bytes::Bytes::from(b)).unwrap();
                let (status, _, body) = tokio::time::timeout(std::time::Duration::from_secs(5), hub.raw_request(req)).await.expect("no hang");
                if status.as_u16() >= 400 {
                    let v: Value = serde_json::from_slice(&body).expect("error bodies are JSON Status objects");
                    assert_eq!(v["kind"], "Status");
                    assert_eq!(v["code"], status.as_u16());
                }
            }
        });
    }
}
