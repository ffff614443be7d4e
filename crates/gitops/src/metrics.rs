//! Prometheus metrics of the gitops controllers (registered into the process registry by
//! [`Metrics::register`]).

use std::time::Duration;

use argocd_pull_ops::reconcile_metrics::{
    ControllerLabel, Names, Reason, ReconcileMetrics, Series,
};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WriteLabel {
    pub controller: String,
    pub kind: String,
    pub verb: String,
}

/// What the reconcile series are registered as (the duration's help also covers the report
/// aggregator's flushes).
const RECONCILE_NAMES: Names = Names {
    duration: Series {
        name: "reconcile_duration_seconds",
        help: "Reconcile / aggregation duration",
    },
    ..Names::DEFAULT
};

#[derive(Clone, Debug, Default)]
pub struct Metrics {
    /// Reconciles run, failed reconciles by reason and reconcile durations, by controller:
    /// `reconciles_total`, `reconcile_errors_total`, `reconcile_duration_seconds`.
    pub reconcile: ReconcileMetrics,
    /// Failed reconciles by controller (`reconcile_failures_total`: the sum of
    /// `reconcile_errors_total` over its reasons, kept for the dashboards and alerts that read it).
    pub failures: Family<ControllerLabel, Counter>,
    pub writes: Family<WriteLabel, Counter>,
    /// Works currently indexed by the report aggregator.
    pub report_works: Gauge,
    /// ApplicationSets with a report.
    pub report_appsets: Gauge,
}

impl Metrics {
    /// Registers everything under the prefix `argocd_pull_gitops`.
    pub fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("argocd_pull_gitops");
        self.reconcile.register_as(r, &RECONCILE_NAMES);
        r.register(
            "reconcile_failures",
            "Reconciles that failed",
            self.failures.clone(),
        );
        r.register("writes", "API writes made", self.writes.clone());
        r.register(
            "report_works",
            "ManifestWorks indexed for reports",
            self.report_works.clone(),
        );
        r.register(
            "report_appsets",
            "ApplicationSets with works",
            self.report_appsets.clone(),
        );
    }

    /// `controller` starts, failing with `E`: its reconcile series exist at zero from now on (so
    /// that `rate()` and the chart's alert see the first failure too).
    pub(crate) fn controller<E: Reason>(&self, controller: &'static str) {
        self.reconcile.init::<E>(controller);
        let _ = self.failures.get_or_create(&ControllerLabel { controller });
    }

    pub(crate) fn write(&self, controller: &str, kind: &str, verb: &str) {
        self.writes
            .get_or_create(&WriteLabel {
                controller: controller.into(),
                kind: kind.into(),
                verb: verb.into(),
            })
            .inc();
    }

    /// One reconcile of `controller` ended after `elapsed`, failed with `error` if any.
    pub(crate) fn reconciled<E: Reason>(
        &self,
        controller: &'static str,
        elapsed: Duration,
        error: Option<&E>,
    ) {
        self.reconcile.reconciled(controller, elapsed, error);
        let failures = self.failures.get_or_create(&ControllerLabel { controller });
        if error.is_some() {
            failures.inc();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names the chart's dashboard and alerts read, unchanged, and the errors by reason.
    #[test]
    fn rendered_names_and_series_at_zero() {
        let m = Metrics::default();
        let mut registry = Registry::with_prefix("argocd_pull");
        m.register(&mut registry);
        m.controller::<kube::Error>("c");
        m.write("c", "Secret", "create");
        let body = argocd_pull_ops::metrics::render(&registry);
        let types: Vec<&str> = body
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .collect();
        assert_eq!(
            types,
            [
                "argocd_pull_argocd_pull_gitops_reconciles counter",
                "argocd_pull_argocd_pull_gitops_reconcile_errors counter",
                "argocd_pull_argocd_pull_gitops_reconcile_duration_seconds histogram",
                "argocd_pull_argocd_pull_gitops_reconcile_failures counter",
                "argocd_pull_argocd_pull_gitops_writes counter",
                "argocd_pull_argocd_pull_gitops_report_works gauge",
                "argocd_pull_argocd_pull_gitops_report_appsets gauge",
            ]
        );
        for line in [
            r#"argocd_pull_argocd_pull_gitops_reconciles_total{controller="c"} 0"#,
            r#"argocd_pull_argocd_pull_gitops_reconcile_failures_total{controller="c"} 0"#,
            r#"argocd_pull_argocd_pull_gitops_reconcile_errors_total{controller="c",reason="conflict"} 0"#,
            r#"argocd_pull_argocd_pull_gitops_reconcile_errors_total{controller="c",reason="api"} 0"#,
            r#"argocd_pull_argocd_pull_gitops_reconcile_errors_total{controller="c",reason="transport"} 0"#,
            r#"argocd_pull_argocd_pull_gitops_reconcile_duration_seconds_count{controller="c"} 0"#,
            "# HELP argocd_pull_argocd_pull_gitops_reconcile_duration_seconds Reconcile / aggregation duration.",
            "# HELP argocd_pull_argocd_pull_gitops_reconcile_failures Reconciles that failed.",
        ] {
            assert!(body.lines().any(|l| l == line), "{line} in\n{body}");
        }

        let conflict = kube::Error::Api(
            kube::core::Status::failure("changed", "Conflict")
                .with_code(409)
                .boxed(),
        );
        m.reconciled("c", Duration::from_millis(1), Some(&conflict));
        m.reconciled::<kube::Error>("c", Duration::from_millis(1), None);
        let body = argocd_pull_ops::metrics::render(&registry);
        for line in [
            r#"argocd_pull_argocd_pull_gitops_reconciles_total{controller="c"} 2"#,
            r#"argocd_pull_argocd_pull_gitops_reconcile_failures_total{controller="c"} 1"#,
            r#"argocd_pull_argocd_pull_gitops_reconcile_errors_total{controller="c",reason="conflict"} 1"#,
            r#"argocd_pull_argocd_pull_gitops_reconcile_errors_total{controller="c",reason="api"} 0"#,
            r#"argocd_pull_argocd_pull_gitops_reconcile_duration_seconds_count{controller="c"} 2"#,
        ] {
            assert!(body.lines().any(|l| l == line), "{line} in\n{body}");
        }
    }
}
