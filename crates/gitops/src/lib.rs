//! GitOpsCluster (Placement → Argo CD cluster secrets) and the ApplicationSet report.
//!
//! * [`secrets`], [`status`], [`report`] — pure logic (what to write), table-tested.
//! * [`gitopscluster`] — the `GitOpsCluster` v1beta1 controller (ACM schema, non-agent mode).
//! * [`basic`] — the upstream basic mode: every ManagedCluster → `<cluster>-secret` (opt-in).
//! * [`aggregator`] — `MulticlusterApplicationSetReport` per ApplicationSet from ManifestWork
//!   feedback, and the `AdditionalStatusReport` condition on hub Applications.
//!
//! Entry point: [`start`] with a [`GitOpsConfig`] (from [`GitOpsArgs`] on the command line).

pub mod aggregator;
pub mod basic;
pub mod gitopscluster;
pub mod metrics;
pub mod report;
pub mod secrets;
pub mod status;

use std::time::Duration;

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
    /// Metrics to update (register them in the admin server's registry first).
    pub metrics: metrics::Metrics,
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
}

impl From<GitOpsArgs> for GitOpsConfig {
    fn from(a: GitOpsArgs) -> Self {
        GitOpsConfig {
            gitopscluster: a.gitopscluster,
            report: a.appset_report,
            basic_secrets_namespace: a.basic_cluster_secrets_namespace.filter(|s| !s.is_empty()),
            stale_secret_policy: a.stale_secret_policy,
            report_debounce: Duration::from_millis(a.appset_report_debounce_ms),
            ..GitOpsConfig::default()
        }
    }
}

/// The running controllers.
pub struct Running {
    shutdown: CancellationToken,
    tasks: Vec<(&'static str, JoinHandle<()>)>,
    pub metrics: metrics::Metrics,
}

impl Running {
    /// Stops every controller and waits for them (in-flight writes finish).
    pub async fn shutdown(self) {
        self.shutdown.cancel();
        for (name, t) in self.tasks {
            if let Err(e) = t.await {
                tracing::warn!(controller = name, error = %e, "controller task failed");
            }
        }
    }

    /// A token that stops the controllers when cancelled.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }
}

/// Starts the configured controllers on `client`.
pub async fn start(client: kube::Client, config: GitOpsConfig) -> anyhow::Result<Running> {
    let shutdown = CancellationToken::new();
    let metrics = config.metrics.clone();
    let mut tasks = Vec::new();
    if config.gitopscluster {
        let fut = gitopscluster::run(
            client.clone(),
            config.clone(),
            metrics.clone(),
            shutdown.clone(),
        );
        tasks.push(("gitopscluster", tokio::spawn(fut)));
    }
    if let Some(ns) = &config.basic_secrets_namespace {
        let fut = basic::run(
            client.clone(),
            ns.clone(),
            metrics.clone(),
            shutdown.clone(),
        );
        tasks.push(("basic-cluster-secrets", tokio::spawn(fut)));
    }
    if config.report {
        let fut = aggregator::run(
            client.clone(),
            config.clone(),
            metrics.clone(),
            shutdown.clone(),
        );
        tasks.push(("appset-report", tokio::spawn(fut)));
        let fut = aggregator::run_app_conditions(client.clone(), metrics.clone(), shutdown.clone());
        tasks.push(("appset-report-app-conditions", tokio::spawn(fut)));
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
