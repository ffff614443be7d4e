//! Prometheus metrics of the gitops controllers (registered into the process registry by
//! [`Metrics::register`]).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabel {
    pub controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WriteLabel {
    pub controller: String,
    pub kind: String,
    pub verb: String,
}

#[derive(Clone)]
pub struct Metrics {
    pub reconciles: Family<ControllerLabel, Counter>,
    pub failures: Family<ControllerLabel, Counter>,
    pub writes: Family<WriteLabel, Counter>,
    pub reconcile_seconds: Family<ControllerLabel, Histogram>,
    /// Works currently indexed by the report aggregator.
    pub report_works: Gauge,
    /// ApplicationSets with a report.
    pub report_appsets: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            reconciles: Family::default(),
            failures: Family::default(),
            writes: Family::default(),
            reconcile_seconds: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.0005, 2.0, 14))
            }),
            report_works: Gauge::default(),
            report_appsets: Gauge::default(),
        }
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    /// Registers everything under the prefix `argocd_pull_gitops`.
    pub fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("argocd_pull_gitops");
        r.register("reconciles", "Reconciles run", self.reconciles.clone());
        r.register(
            "reconcile_failures",
            "Reconciles that failed",
            self.failures.clone(),
        );
        r.register("writes", "API writes made", self.writes.clone());
        r.register(
            "reconcile_duration_seconds",
            "Reconcile / aggregation duration",
            self.reconcile_seconds.clone(),
        );
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

    pub(crate) fn write(&self, controller: &str, kind: &str, verb: &str) {
        self.writes
            .get_or_create(&WriteLabel {
                controller: controller.into(),
                kind: kind.into(),
                verb: verb.into(),
            })
            .inc();
    }

    pub(crate) fn reconciled(&self, controller: &str, seconds: f64, ok: bool) {
        let l = ControllerLabel {
            controller: controller.into(),
        };
        self.reconciles.get_or_create(&l).inc();
        self.reconcile_seconds.get_or_create(&l).observe(seconds);
        // the failure series starts at 0 with the first reconcile, so that `rate()` and the
        // chart's alert see the first failure too
        let failures = self.failures.get_or_create(&l);
        if !ok {
            failures.inc();
        }
    }
}
