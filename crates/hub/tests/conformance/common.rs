#![allow(dead_code)]

use std::time::Duration;

use argocd_pull_hub::Hub;
use bytes::Bytes;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::Value;

pub const ARGOCD_CRDS: &[&str] = &[
    include_str!("../../../api/crds/argocd/application-crd.yaml"),
    include_str!("../../../api/crds/argocd/applicationset-crd.yaml"),
    include_str!("../../../api/crds/argocd/appproject-crd.yaml"),
];

pub const OCM_CRDS: &[&str] = &[
    include_str!("../../../api/crds/ocm/work.open-cluster-management.io_manifestworks.crd.yaml"),
    include_str!(
        "../../../api/crds/ocm/work.open-cluster-management.io_manifestworkreplicasets.crd.yaml"
    ),
    include_str!(
        "../../../api/crds/ocm/clusters.open-cluster-management.io_managedclusters.crd.yaml"
    ),
    include_str!(
        "../../../api/crds/ocm/clusters.open-cluster-management.io_placementdecisions.crd.yaml"
    ),
];

/// A Hub with the Argo CD and OCM CRDs installed.
pub fn hub() -> Hub {
    let hub = Hub::new();
    for y in ARGOCD_CRDS.iter().chain(OCM_CRDS) {
        hub.install_crds_yaml(y).expect("CRD installs");
    }
    hub
}

pub fn app_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("argoproj.io", "v1alpha1", "Application"),
        "applications",
    )
}

pub fn work_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("work.open-cluster-management.io", "v1", "ManifestWork"),
        "manifestworks",
    )
}

pub fn app(name: &str) -> DynamicObject {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Application",
        "metadata": {"name": name},
        "spec": {
            "project": "default",
            "source": {"repoURL": "https://example.com/repo.git", "path": "guestbook", "targetRevision": "HEAD"},
            "destination": {"server": "https://kubernetes.default.svc", "namespace": "guestbook"}
        }
    }))
    .expect("valid Application")
}

pub async fn raw(
    hub: &Hub,
    method: &str,
    path: &str,
    ct: Option<&str>,
    body: &str,
) -> (u16, Value) {
    let mut b = http::Request::builder().method(method).uri(path);
    if let Some(ct) = ct {
        b = b.header("content-type", ct);
    }
    let req = b.body(Bytes::from(body.to_string())).expect("request");
    let (status, _h, bytes) = hub.raw_request(req).await;
    let v = serde_json::from_slice(&bytes)
        .unwrap_or(Value::String(String::from_utf8_lossy(&bytes).into()));
    (status.as_u16(), v)
}

/// Awaits a future with a generous timeout (tests never sleep for synchronisation).
pub async fn within<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(10), f)
        .await
        .expect("timed out waiting")
}
