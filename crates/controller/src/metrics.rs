use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// The `controller` label of the propagation controller's series.
pub(crate) const PROPAGATION: &str = "propagation";
/// The `controller` label of the status controller's series.
pub(crate) const STATUS: &str = "status";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    pub controller: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub controller: &'static str,
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OpLabels {
    pub op: &'static str,
}

/// The controllers' metrics (cheap to clone: every field is shared).
#[derive(Clone, Debug, Default)]
pub struct Metrics {
    /// Reconciles run, by controller (`propagation`, `status`).
    pub reconciles: Family<ControllerLabels, Counter>,
    /// Failed reconciles, by controller and reason.
    pub reconcile_errors: Family<ErrorLabels, Counter>,
    /// Reconcile requests waiting for a controller, by controller.
    pub queue_depth: Family<ControllerLabels, Gauge>,
    /// ManifestWork writes, by op (`create`, `update`).
    pub works_written: Family<OpLabels, Counter>,
    /// ManifestWork deletes (deleted Applications and sweeps).
    pub works_deleted: Counter,
    /// Hub Application status patches.
    pub status_patches: Counter,
    /// Other hub Application patches, by op (`strip_operation`, `remove_finalizer`).
    pub app_patches: Family<OpLabels, Counter>,
    /// Cleanup sweeps run.
    pub sweeps: Counter,
}

impl Metrics {
    /// Registers every metric into `registry` (prefix it, e.g. `Registry::with_prefix("argocd_pull")`).
    pub fn register(&self, registry: &mut Registry) {
        registry.register("reconciles", "Reconciles run", self.reconciles.clone());
        registry.register(
            "reconcile_errors",
            "Failed reconciles by reason",
            self.reconcile_errors.clone(),
        );
        registry.register(
            "queue_depth",
            "Reconcile requests waiting for a controller",
            self.queue_depth.clone(),
        );
        registry.register(
            "works_written",
            "ManifestWork writes",
            self.works_written.clone(),
        );
        registry.register(
            "works_deleted",
            "ManifestWork deletes",
            self.works_deleted.clone(),
        );
        registry.register(
            "status_patches",
            "Hub Application status patches",
            self.status_patches.clone(),
        );
        registry.register(
            "application_patches",
            "Other hub Application patches",
            self.app_patches.clone(),
        );
        registry.register("sweeps", "Cleanup sweeps", self.sweeps.clone());
        self.init_series();
    }

    /// Every labelled series the charts' dashboards and alerts read, at zero from the start: a
    /// counter whose series appears with its first increment loses that increment to `rate()`
    /// and `increase()` (and the alert on reconcile errors would miss the first one).
    fn init_series(&self) {
        for controller in [PROPAGATION, STATUS] {
            for reason in crate::error::Error::REASONS {
                let _ = self
                    .reconcile_errors
                    .get_or_create(&ErrorLabels { controller, reason });
            }
        }
        for op in ["create", "update"] {
            let _ = self.works_written.get_or_create(&OpLabels { op });
        }
        for op in ["strip_operation", "remove_finalizer"] {
            let _ = self.app_patches.get_or_create(&OpLabels { op });
        }
    }

    pub(crate) fn queue(&self, controller: &'static str) -> Gauge {
        self.queue_depth
            .get_or_create(&ControllerLabels { controller })
            .clone()
    }

    /// Total ManifestWork writes (creates and updates) so far.
    pub fn works_written_total(&self) -> u64 {
        ["create", "update"]
            .into_iter()
            .map(|op| self.works_written.get_or_create(&OpLabels { op }).get())
            .sum()
    }
}
