//! Metrics of one side (prometheus-client), registered into an [`argocd_pull_ops::metrics::Registry`],
//! and readiness ([`argocd_pull_ops::admin::Readiness`]). The admin server (`/metrics`,
//! `/healthz`, `/readyz`) is `argocd_pull_ops::admin`: see [`Metrics::serve_admin`].

use std::net::SocketAddr;
use std::sync::Arc;

use argocd_pull_ops::CancellationToken;
use argocd_pull_ops::admin::{self, Readiness};
use argocd_pull_ops::metrics::Registry;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

type Labels = Vec<(String, String)>;

/// Counters of one side (principal or agent).
pub struct Metrics {
    /// The registry these metrics are registered in (served by the admin server).
    pub registry: Arc<Registry>,
    pub events_queued: Family<Labels, Counter>,
    pub events_coalesced: Counter,
    pub events_deferred: Counter,
    pub events_sent: Family<Labels, Counter>,
    pub events_resent: Counter,
    pub events_acked: Counter,
    pub events_failed: Family<Labels, Counter>,
    pub events_received: Family<Labels, Counter>,
    pub events_processed: Counter,
    pub events_retry_later: Counter,
    pub error_replies: Family<Labels, Counter>,
    pub local_edits_reverted: Counter,
    pub auth_failures: Family<Labels, Counter>,
    pub tls_handshake_failures: Counter,
    pub connected_agents: Gauge,
    pub queue_pending: Gauge,
    pub queue_inflight: Gauge,
    pub queue_deferred: Gauge,
    pub propagation_latency: Histogram,
    /// `/readyz`: principal listening; agent connected and authenticated.
    pub ready: Readiness,
}

fn l(k: &str, v: &str) -> Labels {
    vec![(k.to_string(), v.to_string())]
}

impl Metrics {
    /// `prefix`: `argocd_principal` or `argocd_agent`. The metrics get their own registry.
    pub fn new(prefix: &str) -> Arc<Self> {
        let mut reg = Registry::default();
        let mut m = Self::unregistered();
        m.register(reg.sub_registry_with_prefix(prefix));
        m.registry = Arc::new(reg);
        Arc::new(m)
    }

    fn unregistered() -> Self {
        Self {
            registry: Arc::new(Registry::default()),
            events_queued: Default::default(),
            events_coalesced: Default::default(),
            events_deferred: Default::default(),
            events_sent: Default::default(),
            events_resent: Default::default(),
            events_acked: Default::default(),
            events_failed: Default::default(),
            events_received: Default::default(),
            events_processed: Default::default(),
            events_retry_later: Default::default(),
            error_replies: Default::default(),
            local_edits_reverted: Default::default(),
            auth_failures: Default::default(),
            tls_handshake_failures: Default::default(),
            connected_agents: Default::default(),
            queue_pending: Default::default(),
            queue_inflight: Default::default(),
            queue_deferred: Default::default(),
            propagation_latency: Histogram::new(exponential_buckets(0.0005, 2.0, 16)),
            ready: Readiness::default(),
        }
    }

    fn register(&self, reg: &mut Registry) {
        let m = self;
        reg.register(
            "events_queued",
            "Events put into a send queue, by type",
            m.events_queued.clone(),
        );
        reg.register(
            "events_coalesced",
            "Queued updates replaced by a newer one",
            m.events_coalesced.clone(),
        );
        reg.register(
            "events_deferred",
            "Pushes into a full queue deferred for regeneration (backpressure)",
            m.events_deferred.clone(),
        );
        reg.register(
            "events_sent",
            "Events put on the wire, by type",
            m.events_sent.clone(),
        );
        reg.register(
            "events_resent",
            "Events resent because no ACK arrived",
            m.events_resent.clone(),
        );
        reg.register(
            "events_acked",
            "Sent events ACKed by the peer",
            m.events_acked.clone(),
        );
        reg.register(
            "events_failed",
            "Events given up, by reason (oversized, peer error)",
            m.events_failed.clone(),
        );
        reg.register(
            "events_received",
            "Events received, by type",
            m.events_received.clone(),
        );
        reg.register(
            "events_processed",
            "Received resource events applied and ACKed",
            m.events_processed.clone(),
        );
        reg.register(
            "events_retry_later",
            "Received events not ACKed after a retryable error",
            m.events_retry_later.clone(),
        );
        reg.register(
            "error_replies",
            "Error events sent to the peer, by reason",
            m.error_replies.clone(),
        );
        reg.register(
            "local_edits_reverted",
            "Edits of the replica reverted to the source of truth",
            m.local_edits_reverted.clone(),
        );
        reg.register(
            "auth_failures",
            "Rejected authentications, by reason",
            m.auth_failures.clone(),
        );
        reg.register(
            "tls_handshake_failures",
            "Rejected TLS handshakes",
            m.tls_handshake_failures.clone(),
        );
        reg.register(
            "connected_agents",
            "Agents with a live event stream",
            m.connected_agents.clone(),
        );
        reg.register(
            "queue_pending",
            "Events queued, not yet sent",
            m.queue_pending.clone(),
        );
        reg.register(
            "queue_inflight",
            "Events sent, awaiting ACK",
            m.queue_inflight.clone(),
        );
        reg.register(
            "queue_deferred",
            "Resources deferred by backpressure",
            m.queue_deferred.clone(),
        );
        reg.register(
            "event_propagation_latency_seconds",
            "Time from sentat to receipt",
            m.propagation_latency.clone(),
        );
    }

    pub fn queued(&self, ty: &str) {
        self.events_queued.get_or_create(&l("type", ty)).inc();
    }
    pub fn sent(&self, ty: &str) {
        self.events_sent.get_or_create(&l("type", ty)).inc();
    }
    pub fn received(&self, ty: &str) {
        self.events_received.get_or_create(&l("type", ty)).inc();
    }
    pub fn failed(&self, reason: &str) {
        self.events_failed.get_or_create(&l("reason", reason)).inc();
    }
    pub fn error_reply(&self, reason: &str) {
        self.error_replies.get_or_create(&l("reason", reason)).inc();
    }
    pub fn auth_failure(&self, reason: &str) {
        self.auth_failures.get_or_create(&l("reason", reason)).inc();
    }
    /// Sum of a counter family over all labels.
    pub fn total(f: &Family<Labels, Counter>, label_value: &str) -> u64 {
        // prometheus-client has no iteration API; encode and parse (tests and the benchmark only)
        let mut reg = Registry::default();
        reg.register("x", "x", f.clone());
        let mut s = String::new();
        encode(&mut s, &reg).expect("encode");
        s.lines()
            .filter(|line| {
                line.starts_with("x_total{")
                    && (label_value.is_empty() || line.contains(&format!("\"{label_value}\"")))
            })
            .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64
    }

    /// Text exposition.
    pub fn encode(&self) -> String {
        argocd_pull_ops::metrics::render(&self.registry)
    }

    /// Binds the shared admin server (`argocd_pull_ops::admin`: `/metrics`, `/healthz`, `/readyz`)
    /// for these metrics until `shutdown` is cancelled. Returns the bound address and the server
    /// task.
    pub async fn serve_admin(
        &self,
        addr: SocketAddr,
        shutdown: CancellationToken,
    ) -> anyhow::Result<(SocketAddr, tokio::task::JoinHandle<anyhow::Result<()>>)> {
        let (bound, fut) =
            admin::bind(addr, self.registry.clone(), self.ready.clone(), shutdown).await?;
        Ok((bound, tokio::spawn(fut)))
    }
}
