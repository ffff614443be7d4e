//! The HTTP listener: a kube client built from the generated kubeconfig.

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::watcher;
use serde_json::json;

use crate::common::*;

#[tokio::test]
async fn kube_client_over_http() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let hub = hub();
    let server = hub.serve(([127, 0, 0, 1], 0).into()).await.unwrap();
    assert!(server.url().starts_with("http://127.0.0.1:"));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubeconfig");
    server.write_kubeconfig(&path).unwrap();
    let kc = Kubeconfig::read_from(&path).unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .unwrap();
    assert_eq!(cfg.default_namespace, "default");
    let client = kube::Client::try_from(cfg).unwrap();
    let text = client
        .request_text(http::Request::get("/healthz").body(vec![]).unwrap())
        .await
        .unwrap();
    assert_eq!(text, "ok");
    let api: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let mut w = watcher(api.clone(), watcher::Config::default()).boxed();
    loop {
        if let watcher::Event::InitDone = within(w.try_next()).await.unwrap().unwrap() {
            break;
        }
    }
    api.create(
        &PostParams::default(),
        &serde_json::from_value(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "h"}}),
        )
        .unwrap(),
    )
    .await
    .unwrap();
    match within(w.try_next()).await.unwrap().unwrap() {
        watcher::Event::Apply(o) => assert_eq!(o.metadata.name.as_deref(), Some("h")),
        e => panic!("{e:?}"),
    }
    // The same store is visible in process.
    let local: Api<ConfigMap> = Api::default_namespaced(hub.client());
    assert_eq!(
        local
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        1
    );
    server.shutdown().await;
    assert!(api.list(&ListParams::default()).await.is_err(), "shut down");
}
