//! GitOpsCluster (Placement → Argo CD cluster secrets) and the ApplicationSet report.
//!
//! * [`secrets`], [`status`], [`report`] — pure logic (what to write), table-tested.
//! * [`gitopscluster`] — the `GitOpsCluster` v1beta1 controller (ACM schema, non-agent mode).
//! * [`addon`] — the `GitOpsCluster` v1alpha1 controller (`spec.argoCDAgentAddon`: the advanced
//!   pull model's agent CA, certificates, cluster secrets and OCM addon).
//! * [`basic`] — the upstream basic mode: every ManagedCluster → `<cluster>-secret` (opt-in).
//! * [`aggregator`] — `MulticlusterApplicationSetReport` per ApplicationSet from ManifestWork
//!   feedback, and the `AdditionalStatusReport` condition on hub Applications.
//!
//! Entry point: [`start`] with a [`GitOpsConfig`] (from [`GitOpsArgs`] on the command line);
//! [`start_gated`] runs each controller only while the CRDs it needs ([`features`]) are served.

pub mod addon;
pub mod aggregator;
pub mod basic;
pub mod gitopscluster;
pub mod metrics;
pub mod report;
pub mod secrets;
pub mod status;

use argocd_pull_ops::api_health::ApiHealth;
use std::time::Duration;

use argocd_pull_ops::apis::{ApiGate, Feature, known};
use futures::FutureExt;
use futures::future::BoxFuture;
use kube::runtime::reflector::Store;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// The field manager of every write of this crate.
pub const FIELD_MANAGER: &str = "argocd-pull-gitops";

/// When a cluster Secret written by a GitOpsCluster is deleted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum StaleSecretPolicy {
    /// Only when its ManagedCluster is gone (ACM's behaviour).
    #[default]
    ClusterDeleted,
    /// Also as soon as the cluster leaves the Placement.
    LeftPlacement,
}

/// What to run, and how.
#[derive(Clone, Debug)]
pub struct GitOpsConfig {
    /// The GitOpsCluster controller.
    pub gitopscluster: bool,
    /// The MulticlusterApplicationSetReport aggregator (and the `AdditionalStatusReport`
    /// condition on ApplicationSet-owned hub Applications).
    pub report: bool,
    /// Basic mode: every ManagedCluster → `<cluster>-secret` in this namespace (`None`: off).
    pub basic_secrets_namespace: Option<String>,
    pub stale_secret_policy: StaleSecretPolicy,
    /// How long report recomputation waits for more changes after the first one (bounded: a
    /// continuous stream of changes still produces a write every `report_debounce`).
    pub report_debounce: Duration,
    /// Concurrent report writes.
    pub report_write_concurrency: usize,
    /// The GitOpsCluster `argoCDAgentAddon` controller.
    pub addon: bool,
    /// The image its AddOnTemplate deploys as the agent.
    pub addon_agent_image: String,
    /// Metrics to update (register them in the admin server's registry first).
    pub metrics: metrics::Metrics,
}

/// The image the addon deploys by default: this release's.
pub fn default_agent_image() -> String {
    format!(
        "ghcr.io/argocd-pull/argocd-pull:{}",
        env!("CARGO_PKG_VERSION")
    )
}

impl Default for GitOpsConfig {
    fn default() -> Self {
        GitOpsConfig {
            gitopscluster: true,
            report: true,
            basic_secrets_namespace: None,
            stale_secret_policy: StaleSecretPolicy::ClusterDeleted,
            report_debounce: Duration::from_millis(200),
            report_write_concurrency: 8,
            addon: true,
            addon_agent_image: default_agent_image(),
            metrics: metrics::Metrics::default(),
        }
    }
}

/// Command-line flags (flatten into `argocd-pull controller`).
#[derive(Clone, Debug, clap::Args)]
pub struct GitOpsArgs {
    /// Run the GitOpsCluster controller (Placement → Argo CD cluster secrets).
    #[arg(long, env = "ARGOCD_PULL_GITOPSCLUSTER", default_value_t = true, action = clap::ArgAction::Set)]
    pub gitopscluster: bool,
    /// Run the MulticlusterApplicationSetReport aggregator.
    #[arg(long, env = "ARGOCD_PULL_APPSET_REPORT", default_value_t = true, action = clap::ArgAction::Set)]
    pub appset_report: bool,
    /// Basic mode (upstream `--mode=basic`): write `<cluster>-secret` for every ManagedCluster
    /// into this namespace. Off when not given.
    #[arg(long, env = "ARGOCD_PULL_BASIC_CLUSTER_SECRETS_NAMESPACE")]
    pub basic_cluster_secrets_namespace: Option<String>,
    /// When a GitOpsCluster's cluster Secret is deleted: `cluster-deleted` (ACM) or also
    /// `left-placement`.
    #[arg(long, env = "ARGOCD_PULL_STALE_SECRET_POLICY", value_enum, default_value_t = StaleSecretPolicy::ClusterDeleted)]
    pub stale_secret_policy: StaleSecretPolicy,
    /// Report debounce in milliseconds (changes arriving within it are written together).
    #[arg(
        long,
        env = "ARGOCD_PULL_APPSET_REPORT_DEBOUNCE_MS",
        default_value_t = 200
    )]
    pub appset_report_debounce_ms: u64,
    /// Run the GitOpsCluster `argoCDAgentAddon` controller (v1alpha1: agent CA, certificates,
    /// cluster secrets and the `argocd-agent-addon` OCM addon).
    #[arg(long, env = "ARGOCD_PULL_ARGOCD_AGENT_ADDON", default_value_t = true, action = clap::ArgAction::Set)]
    pub argocd_agent_addon: bool,
    /// The image the `argocd-agent-addon` AddOnTemplate deploys as the agent (`argocd-pull agent`).
    /// Default: this release's image.
    #[arg(long, env = "ARGOCD_PULL_ADDON_AGENT_IMAGE")]
    pub addon_agent_image: Option<String>,
}

impl From<GitOpsArgs> for GitOpsConfig {
    fn from(a: GitOpsArgs) -> Self {
        GitOpsConfig {
            gitopscluster: a.gitopscluster,
            report: a.appset_report,
            basic_secrets_namespace: a.basic_cluster_secrets_namespace.filter(|s| !s.is_empty()),
            stale_secret_policy: a.stale_secret_policy,
            report_debounce: Duration::from_millis(a.appset_report_debounce_ms),
            addon: a.argocd_agent_addon,
            addon_agent_image: a
                .addon_agent_image
                .filter(|s| !s.is_empty())
                .unwrap_or_else(default_agent_image),
            ..GitOpsConfig::default()
        }
    }
}

/// Feature names of the controllers (log field `feature`, metric label, [`features`]).
pub const FEATURE_GITOPSCLUSTER: &str = "gitopscluster";
pub const FEATURE_BASIC_SECRETS: &str = "basic-cluster-secrets";
pub const FEATURE_REPORT: &str = "appset-report";
pub const FEATURE_ADDON: &str = "argocd-agent-addon";

/// The enabled controllers and the CRDs each one needs.
pub fn features(config: &GitOpsConfig) -> Vec<Feature> {
    let mut out = Vec::new();
    if config.gitopscluster {
        out.push(Feature {
            name: FEATURE_GITOPSCLUSTER,
            description: "GitOpsCluster → Argo CD cluster secrets",
            apis: vec![
                known::GITOPS_CLUSTERS,
                known::PLACEMENT_DECISIONS,
                known::MANAGED_CLUSTERS,
            ],
            disable: "--gitopscluster=false",
        });
    }
    if config.addon {
        out.push(Feature {
            name: FEATURE_ADDON,
            description: "GitOpsCluster argoCDAgentAddon → agent certificates, cluster secrets, OCM addon",
            apis: vec![
                known::GITOPS_CLUSTERS,
                known::PLACEMENT_DECISIONS,
                known::MANIFEST_WORKS,
            ],
            disable: "--argocd-agent-addon=false",
        });
    }
    if config.basic_secrets_namespace.is_some() {
        out.push(Feature {
            name: FEATURE_BASIC_SECRETS,
            description: "ManagedCluster → basic-mode cluster secrets",
            apis: vec![known::MANAGED_CLUSTERS],
            disable: "no --basic-cluster-secrets-namespace",
        });
    }
    if config.report {
        out.push(Feature {
            name: FEATURE_REPORT,
            description: "the MulticlusterApplicationSetReport of each ApplicationSet",
            apis: vec![
                known::APPSET_REPORTS,
                known::MANIFEST_WORKS,
                known::APPLICATION_SETS,
                known::APPLICATIONS,
            ],
            disable: "--appset-report=false",
        });
    }
    out
}

/// How long [`Running::shutdown`] waits for the controllers before abandoning them.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(6);

/// The running controllers.
pub struct Running {
    shutdown: CancellationToken,
    tasks: Vec<(&'static str, JoinHandle<()>)>,
    pub metrics: metrics::Metrics,
}

impl Running {
    /// Stops every controller and waits for them (in-flight writes finish) for at most
    /// [`SHUTDOWN_GRACE`]; a controller still running then is abandoned (named in a WARN).
    pub async fn shutdown(self) {
        self.shutdown_within(SHUTDOWN_GRACE).await;
    }

    /// [`Running::shutdown`] with another bound; returns whether every controller stopped by
    /// itself.
    pub async fn shutdown_within(self, within: Duration) -> bool {
        self.shutdown.cancel();
        let tasks = self
            .tasks
            .into_iter()
            .map(|(n, t)| (n.to_string(), t))
            .collect();
        argocd_pull_ops::shutdown::join_within(tasks, within).await
    }

    /// A token that stops the controllers when cancelled.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }
}

/// The probe of the controllers' [`ApiHealth`]: one ManagedCluster, read from etcd.
const HEALTH_PROBE: &str = "/apis/cluster.open-cluster-management.io/v1/managedclusters?limit=1";

/// Starts the configured controllers on `client`.
pub async fn start(client: kube::Client, config: GitOpsConfig) -> anyhow::Result<Running> {
    start_gated(client, config, None).await
}

/// Starts the configured controllers on `client`; with a `gate` (built with [`features`]), each
/// one runs only while its CRDs are served.
pub async fn start_gated(
    client: kube::Client,
    config: GitOpsConfig,
    gate: Option<ApiGate>,
) -> anyhow::Result<Running> {
    let shutdown = CancellationToken::new();
    let metrics = config.metrics.clone();
    // every controller here reads ManagedClusters (or works of them): their LIST answers once the
    // API server serves what they need
    let health = ApiHealth::new(client.clone(), HEALTH_PROBE);
    let mut tasks = Vec::new();
    let mut spawn =
        |task: &'static str,
         feature: &'static str,
         mut run: Box<dyn FnMut(CancellationToken) -> BoxFuture<'static, ()> + Send>| {
            let fut = match &gate {
                Some(gate) => {
                    let (gate, token) = (gate.clone(), shutdown.clone());
                    async move { gate.supervise(feature, token, run).await }.boxed()
                }
                None => run(shutdown.clone()),
            };
            tasks.push((task, tokio::spawn(fut)));
        };
    if config.gitopscluster {
        let (client, config, metrics) = (client.clone(), config.clone(), metrics.clone());
        let health = health.clone();
        spawn(
            "gitopscluster",
            FEATURE_GITOPSCLUSTER,
            Box::new(move |t| {
                gitopscluster::run(
                    client.clone(),
                    config.clone(),
                    metrics.clone(),
                    health.clone(),
                    t,
                )
                .boxed()
            }),
        );
    }
    if config.addon {
        let (hc, hm, hh) = (client.clone(), metrics.clone(), health.clone());
        let (client, metrics, health) = (client.clone(), metrics.clone(), health.clone());
        let addon_config = addon::reconcile::AddonConfig {
            agent_image: config.addon_agent_image.clone(),
        };
        spawn(
            "argocd-agent-addon",
            FEATURE_ADDON,
            Box::new(move |t| {
                addon::reconcile::run(
                    client.clone(),
                    addon_config.clone(),
                    metrics.clone(),
                    health.clone(),
                    t,
                )
                .boxed()
            }),
        );
        spawn(
            "argocd-agent-addon-health",
            FEATURE_ADDON,
            Box::new(move |t| addon::health::run(hc.clone(), hm.clone(), hh.clone(), t).boxed()),
        );
    }
    if let Some(ns) = &config.basic_secrets_namespace {
        let (client, ns, metrics) = (client.clone(), ns.clone(), metrics.clone());
        let health = health.clone();
        spawn(
            "basic-cluster-secrets",
            FEATURE_BASIC_SECRETS,
            Box::new(move |t| {
                basic::run(
                    client.clone(),
                    ns.clone(),
                    metrics.clone(),
                    health.clone(),
                    t,
                )
                .boxed()
            }),
        );
    }
    if config.report {
        {
            let (client, config, metrics) = (client.clone(), config.clone(), metrics.clone());
            let health = health.clone();
            spawn(
                "appset-report",
                FEATURE_REPORT,
                Box::new(move |t| {
                    aggregator::run(
                        client.clone(),
                        config.clone(),
                        metrics.clone(),
                        health.clone(),
                        t,
                    )
                    .boxed()
                }),
            );
        }
        let (client, metrics) = (client.clone(), metrics.clone());
        spawn(
            "appset-report-app-conditions",
            FEATURE_REPORT,
            Box::new(move |t| {
                aggregator::run_app_conditions(client.clone(), metrics.clone(), health.clone(), t)
                    .boxed()
            }),
        );
    }
    tracing::info!(
        gitopscluster = config.gitopscluster,
        report = config.report,
        basic = config.basic_secrets_namespace.is_some(),
        "gitops controllers started"
    );
    Ok(Running {
        shutdown,
        tasks,
        metrics,
    })
}

/// Runs a kube `Controller`'s stream until it ends — or, once `shutdown` is cancelled, at once
/// if the controller's own watch never completed a list: kube holds every reconcile until that
/// first list, so nothing is in flight, and its graceful shutdown would wait for the list forever
/// (a missing CRD, an unreachable API server).
pub(crate) async fn until_shutdown<K>(
    run: impl Future<Output = ()>,
    store: Store<K>,
    shutdown: CancellationToken,
    controller: &'static str,
) where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    let abandon = async {
        shutdown.cancelled().await;
        if store.wait_until_ready().now_or_never().is_none() {
            tracing::debug!(controller, "stopping before the first list completed");
            return;
        }
        std::future::pending::<()>().await
    };
    tokio::select! {
        _ = run => {}
        _ = abandon => {}
    }
}
