//! The metrics every controller keeps of its reconciles, in one shape: reconciles run by
//! `controller`, failed reconciles by `controller` and `reason`, and reconcile durations by
//! `controller` ([`ReconcileMetrics`]); and the convention their `reason` label follows
//! ([`Reason`]: each error type names its short snake_case reasons, all listed up front, so the
//! series exist at zero from the controller's start).
//!
//! The series are registered under names the caller chooses ([`Names`]), so a component keeps
//! the names its dashboards and alerts already read.

use std::collections::HashSet;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Why a reconcile failed, as the `reason` label of the failed-reconciles series.
pub trait Reason {
    /// Every value [`Reason::reason`] can return (their series are created at zero).
    const REASONS: &'static [&'static str];

    /// A short snake_case label naming what to look at, e.g. `conflict` (another writer changed
    /// the object), `api` (the API server refused the request), `transport` (no answer, or one
    /// that could not be read), or one of the error type's own.
    fn reason(&self) -> &'static str;
}

/// The reasons of a failed Kubernetes API request ([`Reason`] of [`kube::Error`]).
pub const KUBE_REASONS: &[&str] = &["conflict", "api", "transport"];

impl Reason for kube::Error {
    const REASONS: &'static [&'static str] = KUBE_REASONS;

    /// `conflict` for the API server's 409, `api` for its other refusals, `transport` for the
    /// rest (connection, TLS, decoding).
    fn reason(&self) -> &'static str {
        match self {
            kube::Error::Api(s) if s.code == 409 => "conflict",
            kube::Error::Api(_) => "api",
            _ => "transport",
        }
    }
}

/// Whether `E` follows the convention, judged by `examples` (one of each kind of `E`): every
/// example's reason is listed in [`Reason::REASONS`], every listed reason is some example's, and
/// the list holds distinct snake_case labels. For the error types' tests.
pub fn check_reasons<E: Reason>(examples: impl IntoIterator<Item = E>) -> Result<(), String> {
    let mut listed = HashSet::new();
    for r in E::REASONS {
        let snake = !r.is_empty()
            && r.starts_with(|c: char| c.is_ascii_lowercase())
            && r.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !snake {
            return Err(format!("reason {r:?} is not a snake_case label"));
        }
        if !listed.insert(*r) {
            return Err(format!("reason {r:?} is listed twice"));
        }
    }
    let mut seen = HashSet::new();
    for e in examples {
        let r = e.reason();
        if !listed.contains(r) {
            return Err(format!("reason {r:?} is not in REASONS {:?}", E::REASONS));
        }
        seen.insert(r);
    }
    match E::REASONS.iter().find(|r| !seen.contains(*r)) {
        Some(r) => Err(format!("no example has the listed reason {r:?}")),
        None => Ok(()),
    }
}

/// The API server's refusal with HTTP status `code`, for the error types' tests of their
/// reasons ([`check_reasons`]).
pub fn api_refusal(code: u16) -> kube::Error {
    kube::Error::Api(
        kube::core::Status::failure("x", "y")
            .with_code(code)
            .boxed(),
    )
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabel {
    pub controller: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabel {
    pub controller: &'static str,
    pub reason: &'static str,
}

/// The name and help text of one series.
#[derive(Clone, Copy, Debug)]
pub struct Series {
    pub name: &'static str,
    pub help: &'static str,
}

/// What the three series of [`ReconcileMetrics`] are registered as (under the registry's
/// prefix; counters get `_total`, the histogram `_bucket`, `_sum`, `_count`).
#[derive(Clone, Copy, Debug)]
pub struct Names {
    pub reconciles: Series,
    pub errors: Series,
    pub duration: Series,
}

impl Names {
    /// `reconciles`, `reconcile_errors`, `reconcile_duration_seconds`.
    pub const DEFAULT: Names = Names {
        reconciles: Series {
            name: "reconciles",
            help: "Reconciles run",
        },
        errors: Series {
            name: "reconcile_errors",
            help: "Failed reconciles by reason",
        },
        duration: Series {
            name: "reconcile_duration_seconds",
            help: "Reconcile duration",
        },
    };
}

impl Default for Names {
    fn default() -> Self {
        Names::DEFAULT
    }
}

fn duration_histogram() -> Histogram {
    // 0.5 ms to 4 s
    Histogram::new(exponential_buckets(0.0005, 2.0, 14))
}

/// Reconciles, failed reconciles by reason and reconcile durations, by controller (cheap to
/// clone: every field is shared).
#[derive(Clone, Debug)]
pub struct ReconcileMetrics {
    /// Reconciles run.
    pub reconciles: Family<ControllerLabel, Counter>,
    /// Failed reconciles, by [`Reason::reason`].
    pub errors: Family<ErrorLabel, Counter>,
    /// Reconcile durations in seconds.
    pub duration: Family<ControllerLabel, Histogram>,
}

impl Default for ReconcileMetrics {
    fn default() -> Self {
        ReconcileMetrics {
            reconciles: Family::default(),
            errors: Family::default(),
            duration: Family::new_with_constructor(duration_histogram),
        }
    }
}

impl ReconcileMetrics {
    /// Registers the series as [`Names::DEFAULT`].
    pub fn register(&self, registry: &mut Registry) {
        self.register_as(registry, &Names::DEFAULT);
    }

    /// Registers the series as `names`.
    pub fn register_as(&self, registry: &mut Registry, names: &Names) {
        let Names {
            reconciles,
            errors,
            duration,
        } = names;
        registry.register(reconciles.name, reconciles.help, self.reconciles.clone());
        registry.register(errors.name, errors.help, self.errors.clone());
        registry.register(duration.name, duration.help, self.duration.clone());
    }

    /// Creates `controller`'s series at zero, its failed reconciles for every reason of `E`: a
    /// counter whose series appears with its first increment loses that increment to `rate()`
    /// and `increase()` (and an alert on reconcile errors would miss the first one).
    pub fn init<E: Reason>(&self, controller: &'static str) {
        let label = ControllerLabel { controller };
        let _ = self.reconciles.get_or_create(&label);
        let _ = self.duration.get_or_create(&label);
        for reason in E::REASONS {
            let _ = self
                .errors
                .get_or_create(&ErrorLabel { controller, reason });
        }
    }

    /// One reconcile of `controller` started (counted).
    pub fn started(&self, controller: &'static str) {
        self.reconciles
            .get_or_create(&ControllerLabel { controller })
            .inc();
    }

    /// One reconcile of `controller` ended after `elapsed`, failed with `error` if any.
    pub fn finished<E: Reason>(
        &self,
        controller: &'static str,
        elapsed: Duration,
        error: Option<&E>,
    ) {
        self.duration
            .get_or_create(&ControllerLabel { controller })
            .observe(elapsed.as_secs_f64());
        if let Some(e) = error {
            self.errors
                .get_or_create(&ErrorLabel {
                    controller,
                    reason: e.reason(),
                })
                .inc();
        }
    }

    /// One reconcile of `controller` ran (counted once it ended): [`Self::started`] and
    /// [`Self::finished`] at once.
    pub fn reconciled<E: Reason>(
        &self,
        controller: &'static str,
        elapsed: Duration,
        error: Option<&E>,
    ) {
        self.started(controller);
        self.finished(controller, elapsed, error);
    }

    /// Reconciles of `controller` so far.
    pub fn reconciles(&self, controller: &'static str) -> u64 {
        self.reconciles
            .get_or_create(&ControllerLabel { controller })
            .get()
    }

    /// Failed reconciles of `controller` for `reason` so far.
    pub fn errors(&self, controller: &'static str, reason: &'static str) -> u64 {
        self.errors
            .get_or_create(&ErrorLabel { controller, reason })
            .get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::render;

    use api_refusal as api;

    #[derive(Debug)]
    enum Toy {
        Kube(kube::Error),
        Odd,
    }

    impl Reason for Toy {
        const REASONS: &'static [&'static str] = &["conflict", "api", "transport", "odd"];
        fn reason(&self) -> &'static str {
            match self {
                Toy::Kube(e) => e.reason(),
                Toy::Odd => "odd",
            }
        }
    }

    #[test]
    fn kube_errors_are_conflict_api_or_transport() {
        assert_eq!(api(409).reason(), "conflict");
        assert_eq!(api(500).reason(), "api");
        assert_eq!(api(404).reason(), "api");
        assert_eq!(
            kube::Error::LinesCodecMaxLineLengthExceeded.reason(),
            "transport"
        );
        check_reasons([
            api(409),
            api(422),
            kube::Error::LinesCodecMaxLineLengthExceeded,
        ])
        .unwrap();
    }

    #[test]
    fn check_reasons_finds_unlisted_missing_duplicate_and_odd_labels() {
        assert!(check_reasons([Toy::Kube(api(409)), Toy::Odd]).is_err_and(|e| e.contains("api")));
        check_reasons([
            Toy::Kube(api(409)),
            Toy::Kube(api(500)),
            Toy::Kube(kube::Error::LinesCodecMaxLineLengthExceeded),
            Toy::Odd,
        ])
        .unwrap();

        struct Unlisted;
        impl Reason for Unlisted {
            const REASONS: &'static [&'static str] = &[];
            fn reason(&self) -> &'static str {
                "nope"
            }
        }
        assert!(check_reasons([Unlisted]).is_err_and(|e| e.contains("not in REASONS")));

        struct Twice;
        impl Reason for Twice {
            const REASONS: &'static [&'static str] = &["a", "a"];
            fn reason(&self) -> &'static str {
                "a"
            }
        }
        assert!(check_reasons([Twice]).is_err_and(|e| e.contains("twice")));

        struct Shouting;
        impl Reason for Shouting {
            const REASONS: &'static [&'static str] = &["Api-Error"];
            fn reason(&self) -> &'static str {
                "Api-Error"
            }
        }
        assert!(check_reasons([Shouting]).is_err_and(|e| e.contains("snake_case")));
    }

    #[test]
    fn series_exist_at_zero_and_count_reconciles_errors_and_durations() {
        let m = ReconcileMetrics::default();
        let mut registry = Registry::with_prefix("p");
        m.register(&mut registry);
        m.init::<Toy>("c");
        let body = render(&registry);
        for line in [
            "p_reconciles_total{controller=\"c\"} 0",
            "p_reconcile_errors_total{controller=\"c\",reason=\"conflict\"} 0",
            "p_reconcile_errors_total{controller=\"c\",reason=\"odd\"} 0",
            "p_reconcile_duration_seconds_count{controller=\"c\"} 0",
        ] {
            assert!(body.lines().any(|l| l == line), "{line} in\n{body}");
        }

        m.started("c");
        m.finished::<Toy>("c", Duration::from_millis(3), None);
        m.reconciled("c", Duration::from_secs(1), Some(&Toy::Odd));
        m.reconciled("c", Duration::from_secs(1), Some(&Toy::Kube(api(409))));
        assert_eq!(m.reconciles("c"), 3);
        assert_eq!(m.errors("c", "odd"), 1);
        assert_eq!(m.errors("c", "conflict"), 1);
        assert_eq!(m.errors("c", "api"), 0);
        let body = render(&registry);
        for line in [
            "p_reconciles_total{controller=\"c\"} 3",
            "p_reconcile_errors_total{controller=\"c\",reason=\"odd\"} 1",
            "p_reconcile_duration_seconds_count{controller=\"c\"} 3",
            "p_reconcile_duration_seconds_bucket{le=\"0.004\",controller=\"c\"} 1",
        ] {
            assert!(body.lines().any(|l| l == line), "{line} in\n{body}");
        }
    }

    #[test]
    fn series_are_registered_under_the_callers_names() {
        let m = ReconcileMetrics::default();
        let mut registry = Registry::default();
        let names = Names {
            errors: Series {
                name: "failed",
                help: "Failed",
            },
            ..Names::DEFAULT
        };
        m.register_as(&mut registry, &names);
        m.init::<Toy>("c");
        let body = render(&registry);
        assert!(body.contains("# TYPE failed counter"), "{body}");
        assert!(body.contains("# HELP failed Failed."), "{body}");
        assert!(!body.contains("reconcile_errors"), "{body}");
        assert!(body.contains("# TYPE reconciles counter"), "{body}");
    }
}
