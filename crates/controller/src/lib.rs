//! argocd-pull's hub controllers for the basic pull model.
//!
//! * **propagation** — a selected Argo CD `Application` (label
//!   `apps.open-cluster-management.io/pull-to-ocm-managed-cluster: "true"` and annotation
//!   `apps.open-cluster-management.io/ocm-managed-cluster: <cluster>`) is wrapped in a
//!   `ManifestWork` in the cluster's namespace; written only when it differs; the hub
//!   Application's `operation` and refresh annotation are stripped once propagated; deletion
//!   removes the work and then `resources-finalizer.argocd.argoproj.io`.
//! * **status** — ManifestWork status feedback is written back to the hub Application's `.status`
//!   (merge patch, only on change).
//! * **cleanup** — works whose Application is gone (or no longer selects them) are deleted when the
//!   Application's delete is observed, after every re-list, and by a periodic sweep, all answered
//!   from the watch caches (no per-work GET).
//!
//! The rules live in [`argocd_pull_domain`]; this crate is the Kubernetes plumbing: one watch per
//! resource type (Applications, ManifestWorks, ManagedClusters, PlacementDecisions when the binding
//! gate is on) shared by the controllers, kube-runtime [`Controller`](kube::runtime::Controller)s
//! for the work queues, merge patches with a field manager (never a PUT of a foreign object).
//!
//! Entry points: [`start`] (library: demo, tests, benchmarks) and [`cli::ControllerArgs`] (flags of `argocd-pull
//! controller`).

mod cache;
#[doc(hidden)]
pub mod cache_probe;
pub mod cli;
mod config;
mod context;
mod error;
mod fingerprint;
pub mod metrics;
mod propagation;
mod pumps;
mod recent;
mod status;
mod sweep;
mod write;

use std::sync::Arc;

use argocd_pull_api::argocd::Application;
use argocd_pull_api::ocm::cluster::{ManagedCluster, PlacementDecision};
use argocd_pull_api::ocm::work::ManifestWork;
use argocd_pull_ops::CancellationToken;
use argocd_pull_ops::admin::Readiness;
use kube::api::ListParams;
use kube::{Api, Client};
use tokio::task::JoinHandle;

pub use config::ControllerConfig;
pub use error::Error;
pub use metrics::Metrics;
pub use sweep::SweepReport;

use context::Ctx;

/// What a forced full pass ([`RunningControllers::resync`]) did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResyncReport {
    /// Applications reconciled by the propagation controller.
    pub applications: usize,
    /// ManifestWorks reconciled by the status controller.
    pub works: usize,
    /// Reconciles that failed (they are retried by the controllers with backoff).
    pub errors: usize,
    pub sweep: SweepReport,
}

/// The running hub controllers. Dropping it without [`RunningControllers::shutdown`] stops them
/// abruptly (their tasks are aborted).
pub struct RunningControllers {
    ctx: Arc<Ctx>,
    token: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

impl RunningControllers {
    /// Resolves once every watch cache has been filled by its first full list (the readiness the
    /// admin server reports on `/readyz`).
    pub async fn wait_ready(&self) {
        self.ctx.readiness.wait().await;
    }

    pub fn is_ready(&self) -> bool {
        self.ctx.readiness.get()
    }

    /// The readiness flag (shared with an admin server).
    pub fn readiness(&self) -> Readiness {
        self.ctx.readiness.clone()
    }

    pub fn metrics(&self) -> &Metrics {
        &self.ctx.metrics
    }

    /// Runs a cleanup sweep now and returns what it did (waits for readiness first).
    pub async fn sweep_now(&self) -> anyhow::Result<SweepReport> {
        self.wait_ready().await;
        Ok(sweep::sweep(&self.ctx).await?)
    }

    /// A forced full pass: reconciles every cached Application (propagation) and ManifestWork
    /// (status), then sweeps — each only where enabled — and returns when all of it is done. In a
    /// converged fleet this makes no API write.
    pub async fn resync(&self) -> anyhow::Result<ResyncReport> {
        self.wait_ready().await;
        let mut report = ResyncReport::default();
        if self.ctx.config.propagation {
            for app in self.ctx.apps.state() {
                report.applications += 1;
                if propagation::reconcile(app, self.ctx.clone()).await.is_err() {
                    report.errors += 1;
                }
            }
        }
        if self.ctx.config.status {
            for work in self.ctx.works.state() {
                report.works += 1;
                if status::reconcile(work, self.ctx.clone()).await.is_err() {
                    report.errors += 1;
                }
            }
        }
        if self.ctx.config.cleanup {
            report.sweep = sweep::sweep(&self.ctx).await?;
        }
        Ok(report)
    }

    /// Whether a controller task ended on its own (it should only end on shutdown).
    pub fn any_stopped(&self) -> bool {
        self.tasks.iter().any(|t| t.is_finished())
    }

    /// Stops the controllers gracefully: no new reconcile starts, in-flight ones finish — for at
    /// most [`SHUTDOWN_GRACE`]; what still runs then is abandoned (named in a WARN).
    pub async fn shutdown(self) {
        self.shutdown_within(SHUTDOWN_GRACE).await;
    }

    /// [`RunningControllers::shutdown`] with another bound; returns whether every task stopped
    /// by itself.
    pub async fn shutdown_within(mut self, within: std::time::Duration) -> bool {
        self.token.cancel();
        let tasks = self
            .tasks
            .drain(..)
            .enumerate()
            .map(|(i, t)| (format!("pull-model-{i}"), t))
            .collect();
        argocd_pull_ops::shutdown::join_within(tasks, within).await
    }
}

impl Drop for RunningControllers {
    fn drop(&mut self) {
        self.token.cancel();
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// How long [`RunningControllers::shutdown`] waits before abandoning the controllers.
pub const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(6);

/// The name of the basic pull-model feature (log field `feature`, metric label).
pub const FEATURE: &str = "pull-model";

/// The basic pull model as a feature of an [`ApiGate`](argocd_pull_ops::apis::ApiGate): the CRDs
/// [`start`] needs (PlacementDecisions only with the binding gate).
pub fn feature(config: &ControllerConfig) -> argocd_pull_ops::apis::Feature {
    use argocd_pull_ops::apis::known;
    let mut apis = vec![
        known::APPLICATIONS,
        known::MANIFEST_WORKS,
        known::MANAGED_CLUSTERS,
    ];
    if config.binding_gate {
        apis.push(known::PLACEMENT_DECISIONS);
    }
    argocd_pull_ops::apis::Feature {
        name: FEATURE,
        description: "Application → ManifestWork propagation, status and cleanup",
        apis,
        disable: "--disable-propagation --disable-status --disable-cleanup",
    }
}

/// Selects rustls' `ring` provider for the process (kube's TLS), unless one is installed already:
/// with both `ring` and `aws-lc-rs` compiled into a binary, rustls cannot pick one by itself.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

async fn check_api<K>(api: Api<K>, what: &str) -> anyhow::Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.list_metadata(&ListParams::default().limit(1))
        .await
        .map(|_| ())
        .map_err(|e| {
            anyhow::anyhow!(
                "cannot list {what} (is its CRD installed and may this identity list it?): {e}"
            )
        })
}

/// Starts the enabled hub controllers against `client` and returns at once; see
/// [`RunningControllers::wait_ready`]. Fails early, with the reason, when a needed API cannot be
/// listed.
pub async fn start(client: Client, config: ControllerConfig) -> anyhow::Result<RunningControllers> {
    start_split(client.clone(), client, config).await
}

/// [`start`] with the watches on `watches` and every other request (the reconciles' reads and
/// writes, the sweep, Events) on `requests`: e.g. writes multiplexed over one HTTP/2 connection
/// ([`argocd_pull_ops::client`]) and each watch on an HTTP/1.1 connection of its own.
pub async fn start_split(
    watches: Client,
    requests: Client,
    config: ControllerConfig,
) -> anyhow::Result<RunningControllers> {
    let client = requests;
    check_api(
        Api::<Application>::all(client.clone()),
        "argoproj.io/v1alpha1 Applications",
    )
    .await?;
    check_api(
        Api::<ManifestWork>::all(client.clone()),
        "work.open-cluster-management.io/v1 ManifestWorks",
    )
    .await?;
    check_api(
        Api::<ManagedCluster>::all(client.clone()),
        "cluster.open-cluster-management.io/v1 ManagedClusters",
    )
    .await?;
    if config.binding_gate {
        check_api(
            Api::<PlacementDecision>::all(client.clone()),
            "cluster.open-cluster-management.io/v1beta1 PlacementDecisions",
        )
        .await?;
    }
    let token = CancellationToken::new();
    let (ctx, receivers) = Ctx::new(client, watches, config);
    let tasks = pumps::spawn_all(ctx.clone(), receivers, token.clone());
    Ok(RunningControllers { ctx, token, tasks })
}
