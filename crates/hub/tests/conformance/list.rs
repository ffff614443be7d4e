//! list: selectors, pagination, cluster-wide lists.

use argocd_pull_hub::{Hub, HubOptions};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

use crate::common::*;

pub async fn mk_ns(hub: &Hub, name: &str) {
    let api: Api<Namespace> = Api::all(hub.client());
    let ns: Namespace = serde_json::from_value(
        json!({"apiVersion":"v1","kind":"Namespace","metadata":{"name":name}}),
    )
    .unwrap();
    api.create(&PostParams::default(), &ns).await.unwrap();
}

pub async fn mk_cm(hub: &Hub, ns: &str, name: &str, labels: serde_json::Value) -> ConfigMap {
    let api: Api<ConfigMap> = Api::namespaced(hub.client(), ns);
    let cm: ConfigMap = serde_json::from_value(
        json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":name,"labels":labels}}),
    )
    .unwrap();
    api.create(&PostParams::default(), &cm).await.unwrap()
}

fn names(l: &kube::core::ObjectList<ConfigMap>) -> Vec<String> {
    l.items
        .iter()
        .map(|c| c.metadata.name.clone().unwrap())
        .collect()
}

#[tokio::test]
async fn label_selectors_full_syntax() {
    let hub = Hub::new();
    mk_cm(&hub, "default", "a", json!({"app": "web", "tier": "fe"})).await;
    mk_cm(&hub, "default", "b", json!({"app": "db"})).await;
    mk_cm(&hub, "default", "c", json!({})).await;
    let api: Api<ConfigMap> = Api::default_namespaced(hub.client());
    for (sel, want) in [
        ("app=web", vec!["a"]),
        ("app==db", vec!["b"]),
        ("app!=web", vec!["b", "c"]),
        ("app in (web,db)", vec!["a", "b"]),
        ("app notin (web)", vec!["b", "c"]),
        ("app", vec!["a", "b"]),
        ("!app", vec!["c"]),
        ("app,tier=fe", vec!["a"]),
    ] {
        let l = api.list(&ListParams::default().labels(sel)).await.unwrap();
        assert_eq!(names(&l), want, "selector {sel}");
    }
    let err = api
        .list(&ListParams::default().labels("app in web"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 400),
        "{err:?}"
    );
}

#[tokio::test]
async fn field_selectors() {
    let hub = Hub::new();
    mk_ns(&hub, "other").await;
    mk_cm(&hub, "default", "a", json!({})).await;
    mk_cm(&hub, "default", "b", json!({})).await;
    mk_cm(&hub, "other", "a", json!({})).await;
    let all: Api<ConfigMap> = Api::all(hub.client());
    let l = all
        .list(&ListParams::default().fields("metadata.name=a"))
        .await
        .unwrap();
    assert_eq!(l.items.len(), 2);
    let l = all
        .list(&ListParams::default().fields("metadata.namespace=other"))
        .await
        .unwrap();
    assert_eq!(names(&l), vec!["a"]);
    let l = all
        .list(&ListParams::default().fields("metadata.name!=a"))
        .await
        .unwrap();
    assert_eq!(names(&l), vec!["b"]);
    let err = all
        .list(&ListParams::default().fields("spec.foo=1"))
        .await
        .unwrap_err();
    match err {
        kube::Error::Api(s) => {
            assert_eq!(s.code, 400);
            assert_eq!(s.message, "field label not supported: spec.foo");
        }
        e => panic!("{e:?}"),
    }
}

#[tokio::test]
async fn cluster_wide_list_and_resource_version() {
    let hub = Hub::new();
    mk_ns(&hub, "x1").await;
    mk_ns(&hub, "x2").await;
    mk_cm(&hub, "x2", "b", json!({})).await;
    mk_cm(&hub, "x1", "a", json!({})).await;
    let all: Api<ConfigMap> = Api::all(hub.client());
    let l = all.list(&ListParams::default()).await.unwrap();
    let ns: Vec<String> = l
        .items
        .iter()
        .map(|c| c.metadata.namespace.clone().unwrap())
        .collect();
    assert_eq!(ns, vec!["x1", "x2"], "sorted by namespace/name");
    assert_eq!(
        l.metadata.resource_version,
        Some(hub.resource_version().to_string())
    );
}

#[tokio::test]
async fn pagination_is_a_consistent_snapshot() {
    let hub = Hub::new();
    for i in 0..25 {
        mk_cm(&hub, "default", &format!("cm-{i:02}"), json!({})).await;
    }
    let api: Api<ConfigMap> = Api::default_namespaced(hub.client());
    let p1 = api.list(&ListParams::default().limit(10)).await.unwrap();
    assert_eq!(p1.items.len(), 10);
    assert_eq!(p1.metadata.remaining_item_count, Some(15));
    let token = p1.metadata.continue_.clone().unwrap();
    // Changes after the first page do not show up in later pages.
    api.delete("cm-20", &DeleteParams::default()).await.unwrap();
    mk_cm(&hub, "default", "cm-99", json!({})).await;
    let p2 = api
        .list(&ListParams::default().limit(10).continue_token(&token))
        .await
        .unwrap();
    let p3 = api
        .list(
            &ListParams::default()
                .limit(10)
                .continue_token(p2.metadata.continue_.as_deref().unwrap()),
        )
        .await
        .unwrap();
    assert_eq!(p2.items.len(), 10);
    assert_eq!(p3.items.len(), 5);
    assert!(p3.metadata.continue_.is_none() || p3.metadata.continue_.as_deref() == Some(""));
    assert_eq!(p1.metadata.resource_version, p3.metadata.resource_version);
    let all: Vec<String> = [p1, p2, p3].iter().flat_map(names).collect();
    assert!(all.contains(&"cm-20".to_string()));
    assert!(!all.contains(&"cm-99".to_string()));
    assert_eq!(all.len(), 25);
}

#[tokio::test]
async fn bad_and_expired_continue_tokens() {
    let hub = Hub::with_options(HubOptions {
        list_snapshots: 1,
        ..Default::default()
    });
    for i in 0..5 {
        mk_cm(&hub, "default", &format!("c{i}"), json!({})).await;
    }
    let api: Api<ConfigMap> = Api::default_namespaced(hub.client());
    let err = api
        .list(&ListParams::default().limit(2).continue_token("%%%garbage"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 400 && s.message.contains("continue key is not valid")),
        "{err:?}"
    );
    let first = api.list(&ListParams::default().limit(2)).await.unwrap();
    let _second_list = api.list(&ListParams::default().limit(2)).await.unwrap();
    let err = api
        .list(
            &ListParams::default()
                .limit(2)
                .continue_token(first.metadata.continue_.as_deref().unwrap()),
        )
        .await
        .unwrap_err();
    match err {
        kube::Error::Api(s) => {
            assert_eq!((s.code, s.reason.as_str()), (410, "Expired"));
            assert!(s.message.contains("continue parameter is too old"));
        }
        e => panic!("{e:?}"),
    }
    let _ = within(async {}).await;
}
