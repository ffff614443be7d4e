use argocd_pull_ops::reconcile_metrics::{ControllerLabel, ReconcileMetrics};
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
pub struct OpLabels {
    pub op: &'static str,
}

/// The controllers' metrics (cheap to clone: every field is shared).
#[derive(Clone, Debug, Default)]
pub struct Metrics {
    /// Reconciles run, failed reconciles by reason ([`crate::error::Error`]'s) and reconcile
    /// durations, by controller (`propagation`, `status`): `reconciles_total`,
    /// `reconcile_errors_total`, `reconcile_duration_seconds`.
    pub reconcile: ReconcileMetrics,
    /// Reconcile requests waiting for a controller, by controller.
    pub queue_depth: Family<ControllerLabel, Gauge>,
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
        self.reconcile.register(registry);
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
            self.reconcile.init::<crate::error::Error>(controller);
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
            .get_or_create(&ControllerLabel { controller })
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The names the chart's dashboard and alerts read (and the duration histogram), with the
    /// series that must exist before the first reconcile.
    #[test]
    fn rendered_names_and_series_at_zero() {
        let m = Metrics::default();
        let mut registry = Registry::with_prefix("argocd_pull");
        m.register(&mut registry);
        let _ = m.queue(PROPAGATION); // a family without series renders nothing
        let body = argocd_pull_ops::metrics::render(&registry);
        let types: Vec<&str> = body
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .collect();
        assert_eq!(
            types,
            [
                "argocd_pull_reconciles counter",
                "argocd_pull_reconcile_errors counter",
                "argocd_pull_reconcile_duration_seconds histogram",
                "argocd_pull_queue_depth gauge",
                "argocd_pull_works_written counter",
                "argocd_pull_works_deleted counter",
                "argocd_pull_status_patches counter",
                "argocd_pull_application_patches counter",
                "argocd_pull_sweeps counter",
            ]
        );
        for line in [
            r#"argocd_pull_reconciles_total{controller="propagation"} 0"#,
            r#"argocd_pull_reconcile_errors_total{controller="propagation",reason="cluster_missing"} 0"#,
            r#"argocd_pull_reconcile_errors_total{controller="status",reason="conflict"} 0"#,
            r#"argocd_pull_reconcile_duration_seconds_count{controller="status"} 0"#,
            r#"argocd_pull_reconcile_duration_seconds_bucket{le="+Inf",controller="propagation"} 0"#,
        ] {
            assert!(body.lines().any(|l| l == line), "{line} in\n{body}");
        }
        let errors = body
            .lines()
            .filter(|l| l.starts_with("argocd_pull_reconcile_errors_total{"))
            .count();
        assert_eq!(errors, 2 * 6, "every controller × reason\n{body}");
    }
}
