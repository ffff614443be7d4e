//! The simulated fleet: an OCM hub and N managed clusters, each an in-memory [`Hub`].

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};

use anyhow::Context as _;
use argocd_pull_api::argocd::Application;
use argocd_pull_api::crds;
use argocd_pull_api::ocm::cluster::ManagedCluster;
use argocd_pull_api::ocm::work::ManifestWork;
use argocd_pull_hub::{Hub, HubOptions, HubServer};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use tracing::info;

use crate::agent::{self, AgentHandle, WORK_FINALIZER, WorkAgentConfig};
use crate::argo::{self, ArgoSim, ArgoSimConfig};
use crate::placement::{self, PlacementSim};
use crate::replicaset::{self, ReplicaSetSim};

/// Computes a cluster's labels from its 1-based index and name.
pub type LabelFn = Arc<dyn Fn(usize, &str) -> BTreeMap<String, String> + Send + Sync>;

/// The hub namespaces every fleet has.
pub const HUB_NAMESPACES: &[&str] = &["argocd", "open-cluster-management"];

/// Which Argo CD CRDs a cluster gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrdFlavor {
    /// The vendored upstream CRDs (1.8 MB of YAML schema; ~1 s to install in a debug build).
    Full,
    /// The same names, scope, short names and printer columns, with a schema that accepts any
    /// object (no pruning or validation).
    Slim,
}

fn install_argocd_crds(hub: &Hub, flavor: CrdFlavor) -> anyhow::Result<()> {
    match flavor {
        CrdFlavor::Full => {
            for yaml in crds::ARGOCD {
                hub.install_crds_yaml(yaml)?;
            }
        }
        CrdFlavor::Slim => {
            for yaml in slim_argocd_crds() {
                hub.install_crds_yaml(&yaml)?;
            }
        }
    }
    Ok(())
}

/// What to start.
#[derive(Clone)]
pub struct FleetConfig {
    /// Managed clusters created at start: `<name_prefix>1` … `<name_prefix>N`.
    pub clusters: usize,
    pub name_prefix: String,
    pub argo: ArgoSimConfig,
    pub agent: WorkAgentConfig,
    /// Labels of the clusters created at start (default: [`default_labels`]).
    pub cluster_labels: LabelFn,
    /// Run the work agent (default true).
    pub work_agent: bool,
    /// Run an Argo CD simulator on every managed cluster (default true).
    pub argo_sim: bool,
    /// Run the placement evaluator on the hub (default true).
    pub placement: bool,
    /// Run the ManifestWorkReplicaSet controller on the hub (default true).
    pub replicasets: bool,
    /// Argo CD CRDs of the hub (default [`CrdFlavor::Full`]).
    pub hub_argocd_crds: CrdFlavor,
    /// Argo CD CRDs of every managed cluster (default [`CrdFlavor::Slim`], so that 1,000
    /// clusters stay cheap).
    pub spoke_argocd_crds: CrdFlavor,
    /// Clusters started at the same time during [`Fleet::start`].
    pub start_concurrency: usize,
}

impl std::fmt::Debug for FleetConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FleetConfig")
            .field("clusters", &self.clusters)
            .field("name_prefix", &self.name_prefix)
            .field("argo", &self.argo)
            .field("agent", &self.agent)
            .field("work_agent", &self.work_agent)
            .field("argo_sim", &self.argo_sim)
            .field("placement", &self.placement)
            .field("replicasets", &self.replicasets)
            .field("hub_argocd_crds", &self.hub_argocd_crds)
            .field("spoke_argocd_crds", &self.spoke_argocd_crds)
            .finish_non_exhaustive()
    }
}

impl Default for FleetConfig {
    fn default() -> Self {
        FleetConfig {
            clusters: 3,
            name_prefix: "cluster".into(),
            argo: ArgoSimConfig::default(),
            agent: WorkAgentConfig::default(),
            cluster_labels: Arc::new(default_labels),
            work_agent: true,
            argo_sim: true,
            placement: true,
            replicasets: true,
            hub_argocd_crds: CrdFlavor::Full,
            spoke_argocd_crds: CrdFlavor::Slim,
            start_concurrency: 16,
        }
    }
}

impl FleetConfig {
    /// Defaults with `clusters` managed clusters.
    pub fn with_clusters(clusters: usize) -> Self {
        FleetConfig {
            clusters,
            ..Default::default()
        }
    }

    pub fn cluster_labels(
        mut self,
        f: impl Fn(usize, &str) -> BTreeMap<String, String> + Send + Sync + 'static,
    ) -> Self {
        self.cluster_labels = Arc::new(f);
        self
    }
}

/// Default labels of cluster `index` (1-based): `name`, `cloud` (Amazon/Google/Azure in turn),
/// `region` (us-east-1/eu-west-1/ap-southeast-1/us-west-2 in turn), `env` (`prod` for every
/// fifth cluster, else `dev`), `vendor: Kubernetes` and
/// `cluster.open-cluster-management.io/clusterset: default`.
pub fn default_labels(index: usize, name: &str) -> BTreeMap<String, String> {
    let i = index.saturating_sub(1);
    let cloud = ["Amazon", "Google", "Azure"][i % 3];
    let region = ["us-east-1", "eu-west-1", "ap-southeast-1", "us-west-2"][i % 4];
    let env = if index.is_multiple_of(5) {
        "prod"
    } else {
        "dev"
    };
    [
        ("name", name),
        ("cloud", cloud),
        ("region", region),
        ("env", env),
        ("vendor", "Kubernetes"),
        (placement::LABEL_CLUSTERSET, "default"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// One managed cluster: its API store, a client, and its Argo CD simulator.
pub struct SimCluster {
    name: String,
    hub: Hub,
    client: Client,
    _argo: Option<ArgoSim>,
}

impl std::fmt::Debug for SimCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimCluster")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl SimCluster {
    pub fn name(&self) -> &str {
        &self.name
    }
    /// The cluster's API store.
    pub fn hub(&self) -> &Hub {
        &self.hub
    }
    /// An in-process client of the cluster.
    pub fn client(&self) -> Client {
        self.client.clone()
    }
    /// The cluster's Applications in `namespace`.
    pub fn applications(&self, namespace: &str) -> Api<Application> {
        Api::namespaced(self.client.clone(), namespace)
    }
    /// Serves this cluster over HTTP (for `kubectl`).
    pub async fn serve(&self, addr: SocketAddr) -> anyhow::Result<HubServer> {
        self.hub.serve(addr).await
    }
}

/// The simulated OCM environment.
pub struct Fleet {
    config: FleetConfig,
    hub: Hub,
    hub_client: Client,
    clusters: RwLock<BTreeMap<String, Arc<SimCluster>>>,
    agent: Option<AgentHandle>,
    _placement: Option<PlacementSim>,
    _replicasets: Option<ReplicaSetSim>,
}

impl std::fmt::Debug for Fleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fleet")
            .field("clusters", &self.cluster_names().len())
            .finish_non_exhaustive()
    }
}

fn slim_crd(kind: &str, plural: &str, short: &[&str], columns: serde_json::Value) -> String {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.argoproj.io")},
        "spec": {
            "group": "argoproj.io",
            "names": {"kind": kind, "listKind": format!("{kind}List"), "plural": plural,
                      "singular": kind.to_lowercase(), "shortNames": short},
            "scope": "Namespaced",
            "versions": [{
                "name": "v1alpha1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
                "additionalPrinterColumns": columns,
            }],
        }
    })
    .to_string()
}

/// Argo CD's CRDs without their schemas (names, scope, short names and columns as upstream).
fn slim_argocd_crds() -> Vec<String> {
    vec![
        slim_crd(
            "Application",
            "applications",
            &["app", "apps"],
            json!([
                {"name": "Sync Status", "type": "string", "jsonPath": ".status.sync.status"},
                {"name": "Health Status", "type": "string", "jsonPath": ".status.health.status"},
                {"name": "Revision", "type": "string", "jsonPath": ".status.sync.revision", "priority": 10},
                {"name": "Project", "type": "string", "jsonPath": ".spec.project", "priority": 10},
            ]),
        ),
        slim_crd(
            "ApplicationSet",
            "applicationsets",
            &["appset", "appsets"],
            json!([]),
        ),
        slim_crd(
            "AppProject",
            "appprojects",
            &["appproj", "appprojs"],
            json!([]),
        ),
    ]
}

async fn ensure_namespace(client: &Client, name: &str) -> anyhow::Result<()> {
    let api: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}}))?;
    match api.create(&PostParams::default(), &ns).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e).with_context(|| format!("creating namespace {name}")),
    }
}

impl Fleet {
    /// Starts the hub, the simulators and `config.clusters` managed clusters.
    pub async fn start(config: FleetConfig) -> anyhow::Result<Fleet> {
        let t0 = std::time::Instant::now();
        let hub = Hub::new();
        install_argocd_crds(&hub, config.hub_argocd_crds).context("installing the hub CRDs")?;
        for yaml in crds::OCM_HUB {
            hub.install_crds_yaml(yaml)
                .context("installing the hub CRDs")?;
        }
        let hub_client = hub.client();
        for ns in HUB_NAMESPACES {
            ensure_namespace(&hub_client, ns).await?;
        }
        let agent = config
            .work_agent
            .then(|| agent::start(hub_client.clone(), config.agent.clone()));
        let placement = config
            .placement
            .then(|| placement::start(hub_client.clone()));
        let replicasets = config
            .replicasets
            .then(|| replicaset::start(hub_client.clone()));
        let fleet = Fleet {
            config: config.clone(),
            hub,
            hub_client,
            clusters: RwLock::new(BTreeMap::new()),
            agent,
            _placement: placement,
            _replicasets: replicasets,
        };
        let names: Vec<(usize, String)> = (1..=config.clusters)
            .map(|i| (i, format!("{}{i}", config.name_prefix)))
            .collect();
        futures::stream::iter(names)
            .map(|(i, name)| {
                let labels = (config.cluster_labels)(i, &name);
                let fleet = &fleet;
                async move { fleet.add_cluster(&name, labels).await.map(|_| ()) }
            })
            .buffer_unordered(config.start_concurrency.max(1))
            .try_collect::<()>()
            .await?;
        info!(
            clusters = config.clusters,
            elapsed_ms = t0.elapsed().as_millis() as u64,
            "fleet started"
        );
        Ok(fleet)
    }

    /// The hub's API store.
    pub fn hub(&self) -> &Hub {
        &self.hub
    }

    /// An in-process client of the hub.
    pub fn hub_client(&self) -> Client {
        self.hub_client.clone()
    }

    pub fn config(&self) -> &FleetConfig {
        &self.config
    }

    /// A managed cluster by name.
    pub fn cluster(&self, name: &str) -> Option<Arc<SimCluster>> {
        self.clusters
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
    }

    /// The managed clusters' names, sorted.
    pub fn cluster_names(&self) -> Vec<String> {
        self.clusters
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect()
    }

    /// Registers a new managed cluster: its Hub (Argo CD CRDs, namespace `argocd`), its Argo CD
    /// simulator, its namespace and `ManagedCluster` on the hub (accepted, joined, available).
    pub async fn add_cluster(
        &self,
        name: &str,
        labels: BTreeMap<String, String>,
    ) -> anyhow::Result<Arc<SimCluster>> {
        if self.cluster(name).is_some() {
            anyhow::bail!("cluster {name:?} already exists in the fleet");
        }
        let spoke = Hub::with_options(HubOptions {
            history_per_type: 512,
            ..Default::default()
        });
        install_argocd_crds(&spoke, self.config.spoke_argocd_crds)?;
        let client = spoke.client();
        ensure_namespace(&client, "argocd").await?;
        ensure_namespace(&self.hub_client, name).await?;
        let mcs: Api<ManagedCluster> = Api::all(self.hub_client.clone());
        let mc: ManagedCluster = serde_json::from_value(json!({
            "apiVersion": "cluster.open-cluster-management.io/v1",
            "kind": "ManagedCluster",
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "hubAcceptsClient": true,
                "leaseDurationSeconds": 60,
                "managedClusterClientConfigs": [{"url": format!("https://{name}-control-plane:6443")}],
            }
        }))?;
        match mcs.create(&PostParams::default(), &mc).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {
                mcs.patch(
                    name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"labels": labels}})),
                )
                .await?;
            }
            Err(e) => return Err(e).context(format!("creating ManagedCluster {name}")),
        }
        let now = crate::util::now_rfc3339();
        let cond = |t: &str, reason: &str, msg: &str| json!({"type": t, "status": "True", "reason": reason, "message": msg, "lastTransitionTime": now});
        mcs.patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "conditions": [
                    cond("HubAcceptedManagedCluster", "HubClusterAdminAccepted", "Accepted by hub cluster admin"),
                    cond("ManagedClusterJoined", "ManagedClusterJoined", "Managed cluster joined"),
                    cond("ManagedClusterConditionAvailable", "ManagedClusterAvailable", "Managed cluster is available"),
                ],
                "version": {"kubernetes": "v1.37.0-sim"},
                "capacity": {"cpu": "4", "memory": "16Gi"},
                "allocatable": {"cpu": "4", "memory": "16Gi"},
            }})),
        )
        .await?;
        let argo = self
            .config
            .argo_sim
            .then(|| argo::start(client.clone(), self.config.argo.clone(), name.to_string()));
        let cluster = Arc::new(SimCluster {
            name: name.to_string(),
            hub: spoke,
            client: client.clone(),
            _argo: argo,
        });
        self.clusters
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name.to_string(), cluster.clone());
        if let Some(a) = &self.agent {
            a.agent.register_cluster(name, client);
        }
        Ok(cluster)
    }

    /// Detaches a managed cluster: its simulators stop, its `ManagedCluster` is deleted, its
    /// ManifestWorks are released (agent finalizer removed) and deleted, and its hub namespace
    /// deleted. Unknown names are an error.
    pub async fn remove_cluster(&self, name: &str) -> anyhow::Result<()> {
        let removed = self
            .clusters
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(name);
        if removed.is_none() {
            anyhow::bail!("no cluster {name:?} in the fleet");
        }
        if let Some(a) = &self.agent {
            a.agent.unregister_cluster(name);
        }
        let mcs: Api<ManagedCluster> = Api::all(self.hub_client.clone());
        match mcs.delete(name, &DeleteParams::default()).await {
            Ok(_) | Err(kube::Error::Api(_)) => {}
            Err(e) => return Err(e.into()),
        }
        let works: Api<ManifestWork> = Api::namespaced(self.hub_client.clone(), name);
        for w in works.list(&ListParams::default()).await?.items {
            let wname = w.name_any();
            if w.finalizers().iter().any(|f| f == WORK_FINALIZER) {
                let rest: Vec<&String> = w
                    .finalizers()
                    .iter()
                    .filter(|f| *f != WORK_FINALIZER)
                    .collect();
                let _ = works
                    .patch(
                        &wname,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"metadata": {"finalizers": rest}})),
                    )
                    .await;
            }
            let _ = works.delete(&wname, &DeleteParams::default()).await;
        }
        let nss: Api<Namespace> = Api::all(self.hub_client.clone());
        let _ = nss.delete(name, &DeleteParams::default()).await;
        Ok(())
    }

    /// The work agent's activity counters (zero when the agent is not running).
    pub fn agent_counts(&self) -> crate::agent::AgentCounts {
        self.agent
            .as_ref()
            .map(|a| a.agent.stats.snapshot())
            .unwrap_or_default()
    }

    /// Serves the hub over HTTP on `addr` (port 0: any free port).
    pub async fn serve(&self, addr: SocketAddr) -> anyhow::Result<HubServer> {
        self.hub.serve(addr).await
    }

    /// Stops every simulator and drops the clusters.
    pub async fn shutdown(self) {
        let Fleet {
            agent,
            _placement,
            clusters,
            ..
        } = self;
        drop(agent);
        drop(_placement);
        drop(clusters);
    }
}
