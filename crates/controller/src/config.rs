use std::time::Duration;

use argocd_pull_domain::WorkOptions;
use argocd_pull_ops::admin::Readiness;

use crate::Metrics;

/// What the hub controllers do. `ControllerConfig::default()` runs every controller with the
/// upstream-compatible behaviour.
#[derive(Clone, Debug)]
pub struct ControllerConfig {
    /// Application → ManifestWork.
    pub propagation: bool,
    /// ManifestWork feedback → Application status.
    pub status: bool,
    /// Delete works whose Application is gone (on delete events, after re-lists, periodically).
    pub cleanup: bool,
    /// ACM's binding gate: propagate only when a PlacementDecision in the Application's namespace
    /// lists the cluster.
    pub binding_gate: bool,
    /// How works are built (ACM extras, extra feedback rules).
    pub work: WorkOptions,
    /// Period of the cleanup sweep (upstream: 5 minutes).
    pub sweep_interval: Duration,
    /// Concurrent reconciles per controller. 32: on the real API server the time until 1,000
    /// works exist fell from 7.8–9.1 s at 8 to 5.4 s at 32 at the same CPU per Application and
    /// < 30 MiB (docs/performance.md, "Basic pull model on a real API server").
    pub concurrency: u16,
    /// Field manager of every write.
    pub field_manager: String,
    /// First retry delay after a failed reconcile; doubles per failure up to `retry_max`.
    pub retry_base: Duration,
    pub retry_max: Duration,
    /// Events' reporting controller and instance.
    pub reporter: String,
    pub instance: Option<String>,
    /// Metrics to update (register them in the admin server's registry first).
    pub metrics: Metrics,
    /// Set once every cache is filled (share it with the admin server's `/readyz`).
    pub readiness: Readiness,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        ControllerConfig {
            propagation: true,
            status: true,
            cleanup: true,
            binding_gate: false,
            work: WorkOptions::default(),
            sweep_interval: Duration::from_secs(300),
            concurrency: 32,
            field_manager: "argocd-pull-controller".into(),
            retry_base: Duration::from_secs(1),
            retry_max: Duration::from_secs(300),
            reporter: "argocd-pull-controller".into(),
            instance: std::env::var("POD_NAME").ok(),
            metrics: Metrics::default(),
            readiness: Readiness::default(),
        }
    }
}
