//! Shared helpers: an embedded hub with the CRDs, object builders, and awaiting states.

use std::future::Future;
use std::time::Duration;

use argocd_pull_api::crds;
use argocd_pull_gitops::{GitOpsConfig, Running};
use argocd_pull_hub::Hub;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ObjectMeta, PostParams};
use serde_json::json;

pub const TIMEOUT: Duration = Duration::from_secs(10);

pub struct Env {
    pub hub: Hub,
    pub client: kube::Client,
    pub running: Option<Running>,
}

impl Env {
    pub async fn start(config: GitOpsConfig) -> Env {
        let hub = Hub::new();
        for set in [crds::OCM_HUB, crds::ARGOCD, crds::OWN] {
            for crd in set {
                hub.install_crds_yaml(crd).expect("CRD installs");
            }
        }
        let client = hub.client();
        let running = argocd_pull_gitops::start(client.clone(), config)
            .await
            .expect("controllers start");
        Env {
            hub,
            client,
            running: Some(running),
        }
    }

    pub fn reconciles(&self, controller: &'static str) -> u64 {
        self.metrics().reconcile.reconciles(controller)
    }

    /// The controllers' metrics, shared with the running controllers.
    pub fn metrics(&self) -> &argocd_pull_gitops::metrics::Metrics {
        &self.running.as_ref().unwrap().metrics
    }

    /// The value of the series `series` (name and labels, as `argocd-pull controller`'s
    /// `/metrics` renders it).
    pub fn metric(&self, series: &str) -> u64 {
        let mut registry = argocd_pull_ops::metrics::Registry::with_prefix("argocd_pull");
        self.metrics().register(&mut registry);
        let body = argocd_pull_ops::metrics::render(&registry);
        let line = body
            .lines()
            .find(|l| l.strip_prefix(series).is_some_and(|v| v.starts_with(' ')))
            .unwrap_or_else(|| panic!("{series} in\n{body}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    }

    pub async fn stop(mut self) {
        if let Some(r) = self.running.take() {
            tokio::time::timeout(TIMEOUT, r.shutdown())
                .await
                .expect("controllers stop");
        }
    }

    pub async fn namespace(&self, name: &str, labels: &[(&str, &str)]) {
        let api: Api<Namespace> = Api::all(self.client.clone());
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..Default::default()
            },
            ..Default::default()
        };
        api.create(&PostParams::default(), &ns)
            .await
            .expect("namespace created");
    }

    /// Creates any object from JSON (apiVersion/kind decide the resource).
    pub async fn create(&self, obj: serde_json::Value) -> serde_json::Value {
        let (ar, ns) = resource_of(&obj);
        let api: Api<kube::api::DynamicObject> = match &ns {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &ar),
            None => Api::all_with(self.client.clone(), &ar),
        };
        let o: kube::api::DynamicObject = serde_json::from_value(obj.clone()).unwrap();
        let created = api
            .create(&PostParams::default(), &o)
            .await
            .unwrap_or_else(|e| panic!("creating {obj}: {e}"));
        serde_json::to_value(created).unwrap()
    }

    /// Merge-patches an object (`status` goes through the status subresource when `status`).
    pub async fn patch(
        &self,
        api_version: &str,
        kind: &str,
        ns: Option<&str>,
        name: &str,
        patch: serde_json::Value,
        status: bool,
    ) {
        let obj = json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": name, "namespace": ns}});
        let (ar, _) = resource_of(&obj);
        let api: Api<kube::api::DynamicObject> = match ns {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &ar),
            None => Api::all_with(self.client.clone(), &ar),
        };
        let pp = kube::api::PatchParams::default();
        let r = if status {
            api.patch_status(name, &pp, &kube::api::Patch::Merge(&patch))
                .await
        } else {
            api.patch(name, &pp, &kube::api::Patch::Merge(&patch)).await
        };
        r.unwrap_or_else(|e| panic!("patching {kind} {name}: {e}"));
    }

    pub async fn delete(&self, api_version: &str, kind: &str, ns: Option<&str>, name: &str) {
        let obj = json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": name}});
        let (ar, _) = resource_of(&obj);
        let api: Api<kube::api::DynamicObject> = match ns {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &ar),
            None => Api::all_with(self.client.clone(), &ar),
        };
        api.delete(name, &Default::default())
            .await
            .unwrap_or_else(|e| panic!("deleting {kind} {name}: {e}"));
    }

    pub async fn get(
        &self,
        api_version: &str,
        kind: &str,
        ns: Option<&str>,
        name: &str,
    ) -> Option<serde_json::Value> {
        let obj = json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": name}});
        let (ar, _) = resource_of(&obj);
        let api: Api<kube::api::DynamicObject> = match ns {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &ar),
            None => Api::all_with(self.client.clone(), &ar),
        };
        api.get_opt(name)
            .await
            .unwrap_or_else(|e| panic!("reading {kind} {name}: {e}"))
            .map(|o| serde_json::to_value(o).unwrap())
    }
}

fn resource_of(obj: &serde_json::Value) -> (kube::api::ApiResource, Option<String>) {
    let api_version = obj["apiVersion"].as_str().unwrap();
    let kind = obj["kind"].as_str().unwrap();
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let plural = match kind {
        "Namespace" => "namespaces".to_string(),
        "Secret" => "secrets".into(),
        "Service" => "services".into(),
        "ConfigMap" => "configmaps".into(),
        "Role" => "roles".into(),
        "RoleBinding" => "rolebindings".into(),
        "ManagedCluster" => "managedclusters".into(),
        "Placement" => "placements".into(),
        "PlacementDecision" => "placementdecisions".into(),
        "GitOpsCluster" => "gitopsclusters".into(),
        "ManifestWork" => "manifestworks".into(),
        "ApplicationSet" => "applicationsets".into(),
        "Application" => "applications".into(),
        "MulticlusterApplicationSetReport" => "multiclusterapplicationsetreports".into(),
        "AddOnTemplate" => "addontemplates".into(),
        "AddOnDeploymentConfig" => "addondeploymentconfigs".into(),
        "ManagedClusterAddOn" => "managedclusteraddons".into(),
        "ClusterManagementAddOn" => "clustermanagementaddons".into(),
        other => panic!("no plural for {other}"),
    };
    let gvk = kube::api::GroupVersionKind::gvk(group, version, kind);
    (
        kube::api::ApiResource::from_gvk_with_plural(&gvk, &plural),
        obj["metadata"]["namespace"].as_str().map(str::to_string),
    )
}

/// Polls `check` until it returns `Some`, under [`TIMEOUT`]; panics naming `what` otherwise.
pub async fn eventually<T, F, Fut>(what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    eventually_within(TIMEOUT, what, check).await
}

/// [`eventually`] with another bound (a first set-up that generates an RSA-4096 key).
pub async fn eventually_within<T, F, Fut>(within: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let poll = async {
        loop {
            if let Some(v) = check().await {
                return v;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    match tokio::time::timeout(within, poll).await {
        Ok(v) => v,
        Err(_) => panic!("timed out waiting for: {what}"),
    }
}

pub fn b64(s: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(s)
}

pub fn unb64(v: &serde_json::Value) -> String {
    use base64::Engine;
    String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(v.as_str().unwrap_or_default())
            .unwrap(),
    )
    .unwrap()
}

/// A Secret value whether the hub returned `data` (base64) or kept `stringData`.
pub fn secret_value(secret: &serde_json::Value, key: &str) -> Option<String> {
    if let Some(v) = secret["data"].get(key) {
        return Some(unb64(v));
    }
    secret["stringData"]
        .get(key)
        .and_then(|v| v.as_str())
        .map(str::to_string)
}
