use std::future::Future;
use std::time::Duration;

use argocd_pull_api::argocd::Application;
use argocd_pull_api::crds;
use argocd_pull_api::names::{ANNOTATION_OCM_MANAGED_CLUSTER, LABEL_PULL_TO_OCM};
use argocd_pull_api::ocm::work::ManifestWork;
use argocd_pull_controller::{ControllerConfig, RunningControllers, start};
use argocd_pull_hub::Hub;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};

pub const TIMEOUT: Duration = Duration::from_secs(20);

/// Held by every test of this binary that runs a controller against the real env (`e2e`,
/// `faults`): a controller reconciles every pull-labelled Application of the hub, so two at once
/// would fight over each other's Applications.
pub static REAL_ENV: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

pub struct Env {
    pub hub: Hub,
    pub client: Client,
}

impl Env {
    pub async fn new() -> Env {
        let _ = tracing_subscriber_init();
        let hub = Hub::new();
        for yaml in [
            crds::ARGOCD_APPLICATION,
            crds::OCM_MANAGED_CLUSTERS,
            crds::OCM_MANIFESTWORKS,
            crds::OCM_PLACEMENT_DECISIONS,
        ] {
            hub.install_crds_yaml(yaml).unwrap();
        }
        let client = hub.client();
        let env = Env { hub, client };
        env.namespace("argocd").await;
        env
    }

    pub fn config() -> ControllerConfig {
        ControllerConfig {
            retry_base: Duration::from_millis(20),
            retry_max: Duration::from_millis(200),
            // sweeps in tests are explicit or event-driven
            sweep_interval: Duration::from_secs(3600),
            ..Default::default()
        }
    }

    pub async fn start(&self) -> RunningControllers {
        self.start_with(Self::config()).await
    }

    pub async fn start_with(&self, config: ControllerConfig) -> RunningControllers {
        let running = start(self.client.clone(), config).await.unwrap();
        tokio::time::timeout(TIMEOUT, running.wait_ready())
            .await
            .expect("controllers become ready");
        running
    }

    pub async fn namespace(&self, name: &str) {
        let api: Api<Namespace> = Api::all(self.client.clone());
        let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        api.create(&PostParams::default(), &ns).await.unwrap();
    }

    /// A ManagedCluster and (optionally) its namespace.
    pub async fn cluster(&self, name: &str, with_namespace: bool) {
        let api: Api<argocd_pull_api::ocm::cluster::ManagedCluster> = Api::all(self.client.clone());
        let c = serde_json::from_value(json!({
            "apiVersion": "cluster.open-cluster-management.io/v1", "kind": "ManagedCluster",
            "metadata": {"name": name}, "spec": {"hubAcceptsClient": true}
        }))
        .unwrap();
        api.create(&PostParams::default(), &c).await.unwrap();
        if with_namespace {
            self.namespace(name).await;
        }
    }

    pub fn apps(&self) -> Api<Application> {
        Api::namespaced(self.client.clone(), "argocd")
    }

    pub fn works(&self, cluster: &str) -> Api<ManifestWork> {
        Api::namespaced(self.client.clone(), cluster)
    }

    pub async fn create_app(&self, name: &str, cluster: &str, extra: Value) -> Application {
        let mut v = app_json(name, cluster);
        merge(&mut v, &extra);
        let app: Application = serde_json::from_value(v).unwrap();
        self.apps()
            .create(&PostParams::default(), &app)
            .await
            .unwrap()
    }

    pub async fn patch_app(&self, name: &str, patch: Value) -> Application {
        self.apps()
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap()
    }

    pub async fn get_app(&self, name: &str) -> Option<Application> {
        self.apps().get_opt(name).await.unwrap()
    }

    pub async fn work_of(&self, app: &Application, cluster: &str) -> Option<ManifestWork> {
        let name = argocd_pull_domain::work_name(
            app.metadata.name.as_deref().unwrap(),
            app.metadata.uid.as_deref().unwrap(),
        );
        self.works(cluster).get_opt(&name).await.unwrap()
    }

    pub async fn works_in(&self, cluster: &str) -> Vec<ManifestWork> {
        self.works(cluster)
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
    }

    /// Writes the work agent's status feedback for the payload Application.
    pub async fn feedback(&self, work: &ManifestWork, values: Value) {
        let name = work.metadata.name.clone().unwrap();
        let ns = work.metadata.namespace.clone().unwrap();
        let payload = work
            .spec
            .workload
            .manifests
            .iter()
            .position(|m| m["kind"] == "Application")
            .unwrap();
        let app_ns = work.spec.workload.manifests[payload]["metadata"]["namespace"].clone();
        let app_name = work.spec.workload.manifests[payload]["metadata"]["name"].clone();
        let status = json!({"status": {"resourceStatus": {"manifests": [{
            "resourceMeta": {"ordinal": payload, "group": "argoproj.io", "version": "v1alpha1",
                "kind": "Application", "resource": "applications", "name": app_name, "namespace": app_ns},
            "statusFeedback": {"values": values},
            "conditions": []
        }]}}});
        self.works(&ns)
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .unwrap();
    }
}

pub fn string_feedback(pairs: &[(&str, &str)]) -> Value {
    Value::Array(
        pairs
            .iter()
            .map(|(k, v)| json!({"name": k, "fieldValue": {"type": "String", "string": v}}))
            .collect(),
    )
}

pub fn app_json(name: &str, cluster: &str) -> Value {
    json!({
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Application",
        "metadata": {
            "name": name,
            "namespace": "argocd",
            "labels": {LABEL_PULL_TO_OCM: "true"},
            "annotations": {
                ANNOTATION_OCM_MANAGED_CLUSTER: cluster,
                "argocd.argoproj.io/skip-reconcile": "true"
            }
        },
        "spec": {
            "project": "default",
            "destination": {"server": "https://hub.example:6443", "namespace": "guestbook"},
            "source": {"repoURL": "https://github.com/argoproj/argocd-example-apps", "path": "guestbook", "targetRevision": "HEAD"}
        }
    })
}

pub fn merge(target: &mut Value, patch: &Value) {
    argocd_pull_domain::json::merge_apply(target, patch);
}

/// Polls `probe` until it yields `Some`, failing after [`TIMEOUT`] with `what`.
pub async fn eventually<T, F, Fut>(what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let fut = async {
        loop {
            if let Some(v) = probe().await {
                return v;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    match tokio::time::timeout(TIMEOUT, fut).await {
        Ok(v) => v,
        Err(_) => panic!("timed out waiting for: {what}"),
    }
}

/// Logs go through libtest's capture (shown for failing tests only); `RUST_LOG` sets the level.
fn tracing_subscriber_init() -> anyhow::Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_test_writer()
        .try_init()
        .map_err(|e| anyhow::anyhow!("{e}"))
}
