use std::time::Duration;

use argocd_pull_api::ocm::work::ManifestWork;
use argocd_pull_sim::{ArgoSimConfig, CrdFlavor, Fleet, FleetConfig};
use serde_json::{Value, json};

pub const T: Duration = Duration::from_secs(15);

pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_test_writer()
        .try_init();
}

/// A fleet with fast simulators and slim hub CRDs (installing the full Argo CD CRDs takes about a
/// second in a debug build; `fleet::fleet_registers_clusters_like_ocm` uses them).
pub async fn fleet(clusters: usize) -> Fleet {
    fleet_with(clusters, CrdFlavor::Slim).await
}

pub async fn fleet_with(clusters: usize, hub_crds: CrdFlavor) -> Fleet {
    init_tracing();
    let mut cfg = FleetConfig::with_clusters(clusters);
    cfg.hub_argocd_crds = hub_crds;
    cfg.argo = ArgoSimConfig {
        sync_delay: Duration::from_millis(20),
        health_delay: Duration::from_millis(20),
        ..Default::default()
    };
    cfg.agent.retry_interval = Duration::from_millis(100);
    Fleet::start(cfg).await.expect("fleet starts")
}

/// An Argo CD Application payload as the pull controller sends it.
pub fn app_payload(name: &str) -> Value {
    json!({
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Application",
        "metadata": {
            "name": name, "namespace": "argocd",
            "finalizers": ["resources-finalizer.argocd.argoproj.io"],
            "labels": {"app": name},
        },
        "spec": {
            "project": "default",
            "source": {"repoURL": "https://github.com/argoproj/argocd-example-apps", "path": "guestbook", "targetRevision": "HEAD"},
            "destination": {"server": "https://kubernetes.default.svc", "namespace": "guestbook"},
            "syncPolicy": {"automated": {"prune": true}},
        }
    })
}

/// The manifest config of the pull model for Application `name` in `argocd`.
pub fn pull_config(name: &str) -> Value {
    json!({
        "resourceIdentifier": {"group": "argoproj.io", "resource": "applications", "namespace": "argocd", "name": name},
        "feedbackRules": [{"type": "JSONPaths", "jsonPaths": [
            {"name": "healthStatus", "path": ".status.health.status"},
            {"name": "syncStatus", "path": ".status.sync.status"},
            {"name": "operationStateStartedAt", "path": ".status.operationState.startedAt"},
            {"name": "operationStatePhase", "path": ".status.operationState.phase"},
            {"name": "syncRevision", "path": ".status.sync.revision"},
        ]}],
        "updateStrategy": {"type": "ServerSideApply", "serverSideApply": {"force": true, "ignoreFields": [
            {"condition": "OnSpokeChange", "jsonPaths": [".operation", ".metadata.annotations[\"argocd.argoproj.io/refresh\"]"]}
        ]}},
    })
}

pub fn work(cluster: &str, name: &str, manifests: Vec<Value>, configs: Vec<Value>) -> ManifestWork {
    serde_json::from_value(json!({
        "apiVersion": "work.open-cluster-management.io/v1",
        "kind": "ManifestWork",
        "metadata": {"name": name, "namespace": cluster},
        "spec": {"workload": {"manifests": manifests}, "manifestConfigs": configs},
    }))
    .unwrap()
}

pub fn configmap(ns: &str, name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns}, "data": data})
}

/// The text of feedback value `name` of the manifest `ordinal` of `w`.
pub fn feedback(w: &ManifestWork, ordinal: i32, name: &str) -> Option<String> {
    w.status
        .as_ref()?
        .resource_status
        .as_ref()?
        .manifests
        .iter()
        .find(|m| m.resource_meta.ordinal == ordinal)?
        .status_feedback
        .as_ref()?
        .values
        .iter()
        .find(|v| v.name == name)
        .and_then(|v| v.field_value.as_text())
}

pub fn manifest_condition(w: &ManifestWork, ordinal: i32, type_: &str) -> Option<(String, String)> {
    w.status
        .as_ref()?
        .resource_status
        .as_ref()?
        .manifests
        .iter()
        .find(|m| m.resource_meta.ordinal == ordinal)?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.message.clone()))
}

/// Placement `argocd/amazon`: the clusters labelled `cloud: Amazon` (cluster1, cluster4, ...).
pub fn amazon_placement() -> argocd_pull_api::ocm::cluster::Placement {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "cluster.open-cluster-management.io/v1beta1", "kind": "Placement",
        "metadata": {"name": "amazon", "namespace": "argocd"},
        "spec": {"predicates": [{"requiredClusterSelector": {"labelSelector": {"matchLabels": {"cloud": "Amazon"}}}}]}
    }))
    .expect("a placement")
}
