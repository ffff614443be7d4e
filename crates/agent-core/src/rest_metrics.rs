//! `rest_client_*`: the client-go REST client metrics the peer wires into its principal's and
//! agent's `/metrics` (argocd-agent internal/metrics/k8sclient.go `RegisterK8sClientMetrics`,
//! called by principal/server.go and agent/agent.go), with the same names, help, labels and
//! buckets (`prometheus.DefBuckets`):
//! * `rest_client_requests_total{code,method,host}`: every HTTP attempt (a retry is one more),
//!   `code` the status (`"200"`, `"404"`, …) or `<error>` when no answer came;
//! * `rest_client_request_retries_total{code,method,host}`: every attempt after a call's first;
//! * `rest_client_request_duration_seconds{verb,host}`: one per call (not watches, not pod log
//!   streams, as client-go's `Request.request`), from the call to the end of its answer's body,
//!   throttling and retries included;
//! * `rest_client_rate_limiter_duration_seconds{verb,host}`: each wait of the client-side rate
//!   limiter (`ARGOCD_AGENT_KUBE_QPS` / `ARGOCD_AGENT_KUBE_BURST`; a watch's first attempt is not
//!   throttled, as client-go's `Request.Watch`).
//!
//! `host` is the API server's `host[:port]` as the client's URL has it, `method`/`verb` the HTTP
//! method. The families are process-wide (client-go's `metrics.Register` is global too) and
//! filled by every client [`crate::kube_client`] builds; [`register`] adds them to a side's
//! registry. Series appear with their first request.

use std::sync::LazyLock;

use argocd_pull_ops::metrics::Registry;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;

/// `prometheus.DefBuckets`.
const DEF_BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

fn histogram() -> Histogram {
    Histogram::new(DEF_BUCKETS)
}

/// `{code, host, method}` (printed sorted by name, as Go's client prints labels).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub code: String,
    pub host: String,
    pub method: String,
}

/// `{host, verb}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LatencyLabels {
    pub host: String,
    pub verb: String,
}

type Histograms = Family<LatencyLabels, Histogram, fn() -> Histogram>;

/// The four families (clones share their series).
#[derive(Clone)]
pub struct RestClientMetrics {
    pub requests: Family<ResultLabels, Counter>,
    pub retries: Family<ResultLabels, Counter>,
    pub request_duration: Histograms,
    pub rate_limiter_duration: Histograms,
}

static METRICS: LazyLock<RestClientMetrics> = LazyLock::new(|| RestClientMetrics {
    requests: Family::default(),
    retries: Family::default(),
    request_duration: Family::new_with_constructor(histogram),
    rate_limiter_duration: Family::new_with_constructor(histogram),
});

/// The process-wide families.
pub fn global() -> &'static RestClientMetrics {
    &METRICS
}

/// Adds the process-wide families to `reg`, with the peer's help texts as they are.
pub fn register(reg: &mut Registry) {
    let m = global();
    reg.register_collector(Box::new(ExactHelp(vec![
        (
            "rest_client_request_duration_seconds".into(),
            "Request latency in seconds. Broken down by verb and host.",
            Box::new(m.request_duration.clone()),
        ),
        (
            "rest_client_rate_limiter_duration_seconds".into(),
            "Client-side rate limiter latency in seconds. Broken down by verb and host.",
            Box::new(m.rate_limiter_duration.clone()),
        ),
        // counters are named without `_total` (the encoder appends it to the samples)
        (
            "rest_client_requests".into(),
            "Number of HTTP requests, partitioned by status code, method, and host.",
            Box::new(m.requests.clone()),
        ),
        (
            "rest_client_request_retries".into(),
            "Number of request retries, partitioned by status code, method, and host.",
            Box::new(m.retries.clone()),
        ),
    ])));
}

/// Metrics whose help text is exported exactly as given (`Registry::register` appends a period
/// to every help text; the peer's have none, or their own).
pub struct ExactHelp(pub Vec<(String, &'static str, Box<dyn EncodeMetric + Send + Sync>)>);

impl std::fmt::Debug for ExactHelp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|(n, _, _)| n))
            .finish()
    }
}

impl Collector for ExactHelp {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for (name, help, m) in &self.0 {
            m.encode(enc.encode_descriptor(name, help, None, m.metric_type())?)?;
        }
        Ok(())
    }
}

impl RestClientMetrics {
    /// One attempt's answer (`status`: `None` when the request failed without one).
    pub fn attempt(&self, status: Option<u16>, method: &str, host: &str, retry: bool) {
        let labels = ResultLabels {
            code: status.map_or_else(|| "<error>".to_string(), |s| s.to_string()),
            host: host.to_string(),
            method: method.to_string(),
        };
        if retry {
            self.retries.get_or_create(&labels).inc();
        }
        self.requests.get_or_create(&labels).inc();
    }

    /// A finished call.
    pub fn call(&self, verb: &str, host: &str, seconds: f64) {
        self.request_duration
            .get_or_create(&latency(verb, host))
            .observe(seconds);
    }

    /// A rate limiter wait.
    pub fn throttled(&self, verb: &str, host: &str, seconds: f64) {
        self.rate_limiter_duration
            .get_or_create(&latency(verb, host))
            .observe(seconds);
    }
}

fn latency(verb: &str, host: &str) -> LatencyLabels {
    LatencyLabels {
        host: host.to_string(),
        verb: verb.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_have_the_peers_names_help_and_buckets() {
        let mut reg = Registry::default();
        register(&mut reg);
        let m = global();
        m.attempt(Some(200), "GET", "rest-metrics-test:6443", false);
        m.attempt(None, "GET", "rest-metrics-test:6443", true);
        m.call("GET", "rest-metrics-test:6443", 0.02);
        m.throttled("GET", "rest-metrics-test:6443", 0.0);
        let body = argocd_pull_ops::metrics::render(&reg);
        for help in [
            "# TYPE rest_client_requests counter\n",
            "# HELP rest_client_request_duration_seconds Request latency in seconds. Broken down by verb and host.\n",
            "# HELP rest_client_rate_limiter_duration_seconds Client-side rate limiter latency in seconds. Broken down by verb and host.\n",
            "# HELP rest_client_requests Number of HTTP requests, partitioned by status code, method, and host.\n",
            "# HELP rest_client_request_retries Number of request retries, partitioned by status code, method, and host.\n",
        ] {
            assert!(body.contains(help), "{help}\n{body}");
        }
        assert!(body.contains(
            "rest_client_requests_total{code=\"200\",host=\"rest-metrics-test:6443\",method=\"GET\"} 1\n"
        ));
        assert!(body.contains(
            "rest_client_request_retries_total{code=\"<error>\",host=\"rest-metrics-test:6443\",method=\"GET\"} 1\n"
        ));
        assert!(body.contains("rest_client_request_duration_seconds_bucket{le=\"0.025\",host=\"rest-metrics-test:6443\",verb=\"GET\"} 1\n"), "{body}");
        assert!(body.contains("rest_client_rate_limiter_duration_seconds_bucket{le=\"0.005\",host=\"rest-metrics-test:6443\",verb=\"GET\"} 1\n"), "{body}");
        assert!(body.contains("le=\"10.0\""), "DefBuckets end at 10 s");
    }
}
