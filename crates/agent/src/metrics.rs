//! Metrics (prometheus-client) and the admin HTTP server (`/metrics`, `/healthz`, `/readyz`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

type Labels = Vec<(String, String)>;

/// Counters of one side (principal or agent).
pub struct Metrics {
    pub registry: std::sync::Mutex<Registry>,
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
    pub ready: AtomicBool,
}

fn l(k: &str, v: &str) -> Labels {
    vec![(k.to_string(), v.to_string())]
}

impl Metrics {
    /// `prefix`: `argocd_principal` or `argocd_agent`.
    pub fn new(prefix: &str) -> Arc<Self> {
        let mut reg = Registry::with_prefix(prefix);
        let m = Self {
            registry: std::sync::Mutex::new(Registry::default()),
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
            ready: AtomicBool::new(false),
        };
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
        *m.registry.lock().expect("poisoned") = reg;
        Arc::new(m)
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
        let mut s = String::new();
        encode(&mut s, &self.registry.lock().expect("poisoned")).expect("encode");
        s
    }
}

/// Serves `/metrics`, `/healthz`, `/readyz` until the task is aborted. Returns the bound address.
pub async fn serve_admin(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
) -> anyhow::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    use axum::{Router, http::StatusCode, routing::get};
    let m1 = metrics.clone();
    let m2 = metrics.clone();
    let app = Router::new()
        .route(
            "/metrics",
            get(move || {
                let m = m1.clone();
                async move {
                    (
                        [(
                            axum::http::header::CONTENT_TYPE,
                            "application/openmetrics-text; version=1.0.0; charset=utf-8",
                        )],
                        m.encode(),
                    )
                }
            }),
        )
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(move || {
                let m = m2.clone();
                async move {
                    if m.ready.load(Ordering::Relaxed) {
                        (StatusCode::OK, "ready")
                    } else {
                        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
                    }
                }
            }),
        );
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let h = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "admin server failed");
        }
    });
    Ok((bound, h))
}
