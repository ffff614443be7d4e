//! Metrics of one side (prometheus-client), registered into an [`argocd_pull_ops::metrics::Registry`],
//! and readiness ([`argocd_pull_ops::admin::Readiness`]). The admin server (`/metrics`,
//! `/healthz`, `/readyz`) is `argocd_pull_ops::admin`: see [`Metrics::serve_admin`].
//!
//! Two sets of names are exported:
//! * the peer's (argoproj-labs/argocd-agent internal/metrics/metrics.go, docs/operations/metrics.md)
//!   with its exact names and labels, so its Grafana dashboards (examples/o11y/*.json) work:
//!   e.g. `principal_events_sent`, `agent_event_processing_time{status,agent_mode,resource_type}`,
//!   `argocd_principal_agent_connections_total{agent_name}`. The peer's plain counters without a
//!   `_total` suffix (`principal_events_received`, `agent_errors`, …) are exported as OpenMetrics
//!   `unknown` so the sample name is exactly the peer's (an OpenMetrics `counter` would get `_total`);
//! * our own, more detailed ones under `argocd_principal_` / `argocd_agent_` (queue, coalescing,
//!   deferral, ACKs, …), kept as additions.
//!
//! This file: [`Metrics`] and what the principal and the agent record through it; `peer`: the
//! peer's families and metric types; `handles`: the handles kept for the per-event paths.

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

mod ha;
mod handles;
mod peer;
mod shards;
#[cfg(test)]
mod tests;

pub use ha::{ClientMetrics, ForwarderMetrics, HaMetrics};
pub use handles::PeerProcessing;
use handles::PerEvent;
pub use peer::{AvgConnectionTime, PeerMetrics, PlainCounter, Side};
use peer::{Labels, l};

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
    /// Principal: `argocd_principal_agent_connected{agent_name}`, the agent's open event streams
    /// (1 while it is connected, 0 once it went away; the fleet dashboard and the
    /// "agent disconnected" alert read it).
    pub agent_streams: Family<Labels, Gauge>,
    pub queue_pending: Gauge,
    pub queue_inflight: Gauge,
    pub queue_deferred: Gauge,
    pub propagation_latency: Histogram,
    /// Periodic resync rounds: the principal's `accepted`/`refused` (`--resync-min-interval`),
    /// the agent's `sent` (`--resync-interval`).
    pub resync_requests: Family<Labels, Counter>,
    /// `/readyz`: principal listening; agent connected and authenticated.
    pub ready: Readiness,
    /// The peer's metrics (exact names and labels).
    pub peer: PeerMetrics,
    /// Principal HA (`--leader-elect`), under the peer's HA metric names.
    pub ha: HaMetrics,
    /// `grpc_server_*` (principal) or `grpc_client_*` (agent), as go-grpc-middleware's
    pub grpc: crate::grpc_metrics::GrpcMetrics,
    /// `<prefix>_workqueue_*{queue}` of the send and receive queues.
    pub workqueues: crate::workqueue_metrics::Workqueues,
    per_event: PerEvent,
}

/// `reason`s of `argocd_agent_auth_failures_total`: the principal refused the login (`rejected`)
/// or the agent's version (`version`).
pub const AGENT_AUTH_FAILURE_REASONS: [&str; 2] = ["rejected", "version"];

impl Metrics {
    /// `prefix`: `argocd_principal` or `argocd_agent` (our own metrics' prefix; it also selects
    /// which of the peer's metrics are exported). The metrics get their own registry.
    pub fn new(prefix: &str) -> Arc<Self> {
        let side = if prefix.contains("principal") {
            Side::Principal
        } else {
            Side::Agent
        };
        let mut reg = Registry::default();
        let mut m = Self::unregistered(side);
        m.register(reg.sub_registry_with_prefix(prefix));
        m.peer.register(&mut reg, &m.connected_agents);
        m.grpc = match side {
            Side::Principal => crate::grpc_metrics::GrpcMetrics::server(&mut reg),
            Side::Agent => crate::grpc_metrics::GrpcMetrics::client(&mut reg),
        };
        m.workqueues = crate::workqueue_metrics::Workqueues::register(&mut reg, prefix);
        // `rest_client_*` of every Kubernetes client (crate::kube_client)
        crate::rest_metrics::register(&mut reg);
        // `process_*` of the Go client's process collector, read when scraped
        reg.register_collector(Box::new(crate::process_metrics::ProcessCollector));
        if side == Side::Principal {
            m.ha.register(&mut reg);
            reg.register(
                "argocd_principal_agent_connected",
                "Open event streams of an agent (1 while it is connected, 0 after it disconnected)",
                m.agent_streams.clone(),
            );
        }
        // `/healthz` as the peer's: the agent's is 503 unless it is connected to its principal
        // (agent/agent.go `healthzHandler`); the principal's answers once it serves (the peer
        // starts its health server after its informers synced).
        // the peer's plain counter `argocd_agent_auth_failures_total` is exposed from start: ours
        // carries a `reason`, so every reason the agent counts starts at zero
        if side == Side::Agent {
            for r in AGENT_AUTH_FAILURE_REASONS {
                let _ = m.auth_failures.get_or_create(&l("reason", r));
            }
        }
        m.ready.health_follows_readiness(match side {
            Side::Agent => "not connected to the principal",
            Side::Principal => "the principal is not serving yet",
        });
        m.registry = Arc::new(reg);
        Arc::new(m)
    }

    fn unregistered(side: Side) -> Self {
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
            agent_streams: Default::default(),
            queue_pending: Default::default(),
            queue_inflight: Default::default(),
            queue_deferred: Default::default(),
            propagation_latency: Histogram::new(exponential_buckets(0.0005, 2.0, 16)),
            resync_requests: Default::default(),
            ready: Readiness::default(),
            peer: PeerMetrics::new(side),
            ha: Default::default(),
            grpc: crate::grpc_metrics::GrpcMetrics::unregistered(),
            workqueues: Default::default(),
            per_event: Default::default(),
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
            "resync_requests",
            "Periodic resync rounds, by result (principal: accepted, refused; agent: sent)",
            m.resync_requests.clone(),
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

    pub fn queued(&self, ty: &'static str) {
        let e = &self.per_event;
        e.queued.get(&self.events_queued, "type", ty).inc();
    }
    pub fn sent(&self, ty: &'static str) {
        let e = &self.per_event;
        e.sent.get(&self.events_sent, "type", ty).inc();
        self.peer.events_sent.inc();
    }
    pub fn received(&self, ty: &'static str) {
        let e = &self.per_event;
        e.received.get(&self.events_received, "type", ty).inc();
        self.peer.events_received.inc();
    }

    /// A received event was processed: `{principal,agent}_event_processing_time`. `status`: the
    /// peer's values `success`, `failure`, `discarded`, `not-allowed`; `peer`: the agent name
    /// (principal side) or the agent mode (agent side), whose handles `p` keeps (one per session);
    /// `resource_type`: the event's target.
    pub fn processed_for(
        &self,
        p: &PeerProcessing,
        status: &'static str,
        resource_type: &'static str,
        secs: f64,
    ) {
        let key = (status, resource_type);
        let found = p
            .handles
            .read()
            .expect("poisoned")
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, h)| h.clone());
        let h = found.unwrap_or_else(|| {
            let h = self.processing_time(status, &p.peer, resource_type);
            p.handles.write().expect("poisoned").push((key, h.clone()));
            h
        });
        h.observe(secs);
        self.count_failure(status, resource_type);
    }

    /// The `event_processing_time` series of (status, peer, resource type).
    fn processing_time(&self, status: &str, peer: &str, resource_type: &str) -> Histogram {
        let who = match self.peer.side {
            Side::Principal => "agent_name",
            Side::Agent => "agent_mode",
        };
        self.peer
            .event_processing_time
            .get_or_create(&vec![
                ("status".to_string(), status.to_string()),
                (who.to_string(), peer.to_string()),
                ("resource_type".to_string(), resource_type.to_string()),
            ])
            .clone()
    }

    fn count_failure(&self, status: &str, resource_type: &str) {
        if status == "failure" {
            self.peer
                .errors
                .get_or_create(&l("resource_type", resource_type))
                .inc();
        }
    }

    /// A sent event was given up (`argocd_*_event_writer_events_discarded_total`). `agent`: the
    /// agent name on the principal side (ignored on the agent side).
    pub fn discarded(&self, agent: &str, event_type: &str, resource_type: &str) {
        let mut labels = Vec::new();
        if self.peer.side == Side::Principal {
            labels.push(("agent_name".to_string(), agent.to_string()));
        }
        labels.push(("event_type".to_string(), event_type.to_string()));
        labels.push(("resource_type".to_string(), resource_type.to_string()));
        self.peer.events_discarded.get_or_create(&labels).inc();
    }

    /// Propagation latency of a received event (`agent_event_propagation_latency_seconds`
    /// by `resource_type`, and our unlabelled histogram).
    pub fn propagation(&self, resource_type: &'static str, secs: f64) {
        self.propagation_latency.observe(secs);
        let e = &self.per_event;
        e.propagation
            .get(
                &self.peer.propagation_latency,
                "resource_type",
                resource_type,
            )
            .observe(secs);
    }

    /// Principal: `agent` opened an event stream (`argocd_principal_connected_agents` +1,
    /// `argocd_principal_agent_connections_total{agent_name}`, average connection time).
    /// Principal: one resource-proxy request of `agent`.
    pub fn resource_proxy_request(&self, agent: &str) {
        self.peer
            .resource_proxy_requests
            .get_or_create(&l("agent_name", agent))
            .inc();
    }

    /// Principal: a failed resource-proxy request (`reason` as the peer: `agent_disconnected`,
    /// `timeout`, `agent_error`, ...).
    pub fn resource_proxy_error(&self, agent: &str, reason: &str) {
        self.peer
            .resource_proxy_errors
            .get_or_create(&vec![
                ("agent_name".to_string(), agent.to_string()),
                ("reason".to_string(), reason.to_string()),
            ])
            .inc();
    }

    /// Principal: a GET / SUBSCRIBE of `agent`'s keys forwarded to it.
    pub fn redis_proxy_request(&self, agent: &str, command: &str) {
        self.peer
            .redis_proxy_requests
            .get_or_create(&vec![
                ("agent_name".to_string(), agent.to_string()),
                ("command".to_string(), command.to_string()),
            ])
            .inc();
    }

    /// Principal: a failed GET / SUBSCRIBE of `agent`'s keys.
    pub fn redis_proxy_error(&self, agent: &str, command: &str) {
        self.peer
            .redis_proxy_errors
            .get_or_create(&vec![
                ("agent_name".to_string(), agent.to_string()),
                ("command".to_string(), command.to_string()),
            ])
            .inc();
    }

    /// Agent: one Redis-proxy request (`get`, `subscribe`) processed.
    pub fn agent_redis_proxy_request(&self, command: &str) {
        self.peer
            .agent_redis_proxy_requests
            .get_or_create(&l("command", command))
            .inc();
    }

    /// Agent: a failed Redis-proxy request.
    pub fn agent_redis_proxy_error(&self, command: &str) {
        self.peer
            .agent_redis_proxy_errors
            .get_or_create(&l("command", command))
            .inc();
    }

    pub fn agent_connected(&self, agent: &str) {
        self.connected_agents.inc();
        self.agent_streams
            .get_or_create(&l("agent_name", agent))
            .inc();
        self.peer
            .agent_connections
            .get_or_create(&l("agent_name", agent))
            .inc();
        self.peer.avg_connection_time.connected(agent);
    }

    /// Principal: `agent`'s event stream ended.
    pub fn agent_disconnected(&self, agent: &str) {
        self.connected_agents.dec();
        self.agent_streams
            .get_or_create(&l("agent_name", agent))
            .dec();
        self.peer.avg_connection_time.disconnected(agent);
    }

    /// Agent: connected and authenticated (ready, `argocd_agent_connection_status` 1, start
    /// timestamp, `argocd_agent_connections_total` +1).
    pub fn connection_up(&self) {
        self.ready.set(true);
        self.peer.connection_status.set(1);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or_default();
        self.peer.connection_start_timestamp.set(now);
        self.peer.connections.inc();
    }

    /// Agent: the connection to the principal is gone (not ready, status 0).
    pub fn connection_down(&self) {
        self.ready.set(false);
        self.peer.connection_status.set(0);
    }

    /// A resource written on the principal's side by an event from an agent, or a repository
    /// Secret seen changing on the hub
    /// (`principal_{applications,app_projects,repositories}_{created,updated,deleted}`). `kind`:
    /// `Application`, `AppProject` or `Repository`; `op`: `created`, `updated`, `deleted`.
    pub fn hub_write(&self, kind: &str, op: &str) {
        let p = &self.peer;
        let c = match (kind, op) {
            ("Application", "created") => &p.applications_created,
            ("Application", "updated") => &p.applications_updated,
            ("Application", "deleted") => &p.applications_deleted,
            ("AppProject", "created") => &p.app_projects_created,
            ("AppProject", "updated") => &p.app_projects_updated,
            ("AppProject", "deleted") => &p.app_projects_deleted,
            ("Repository", "created") => &p.repositories_created,
            ("Repository", "updated") => &p.repositories_updated,
            ("Repository", "deleted") => &p.repositories_deleted,
            _ => return,
        };
        c.inc();
    }
    pub fn failed(&self, reason: &str) {
        self.events_failed.get_or_create(&l("reason", reason)).inc();
    }
    pub fn error_reply(&self, reason: &str) {
        self.error_replies.get_or_create(&l("reason", reason)).inc();
    }
    pub fn resync_request(&self, result: &str) {
        self.resync_requests
            .get_or_create(&l("result", result))
            .inc();
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
