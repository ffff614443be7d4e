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

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use argocd_pull_ops::CancellationToken;
use argocd_pull_ops::admin::{self, Readiness};
use argocd_pull_ops::metrics::Registry;
use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::{EncodeMetric, MetricEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::metrics::{MetricType, TypedMetric};

type Labels = Vec<(String, String)>;

/// Handles of a one-label family by a static label value (event types, targets): a per-event path
/// neither builds the label set nor hashes it. A handle shares its value with the family's entry.
struct ByStatic<M>(std::sync::RwLock<Vec<(&'static str, M)>>);

impl<M> Default for ByStatic<M> {
    fn default() -> Self {
        Self(Default::default())
    }
}

impl<M: Clone> ByStatic<M> {
    fn get<C: prometheus_client::metrics::family::MetricConstructor<M>>(
        &self,
        family: &Family<Labels, M, C>,
        label: &str,
        value: &'static str,
    ) -> M {
        let found = self
            .0
            .read()
            .expect("poisoned")
            .iter()
            .find(|(v, _)| *v == value)
            .map(|(_, m)| m.clone());
        found.unwrap_or_else(|| {
            let m = family.get_or_create(&l(label, value)).clone();
            self.0.write().expect("poisoned").push((value, m.clone()));
            m
        })
    }
}

/// The `event_processing_time` handles of one peer (a session's agent name, or the agent's mode)
/// by (status, resource type): a session's events neither build the three-label set nor hash it.
pub struct PeerProcessing {
    peer: String,
    handles: std::sync::RwLock<Vec<((&'static str, &'static str), Histogram)>>,
}

impl PeerProcessing {
    pub fn new(peer: &str) -> Self {
        Self {
            peer: peer.to_string(),
            handles: Default::default(),
        }
    }
}

/// The [`ByStatic`] handles of the families every event touches.
#[derive(Default)]
struct PerEvent {
    queued: ByStatic<Counter>,
    sent: ByStatic<Counter>,
    received: ByStatic<Counter>,
    propagation: ByStatic<Histogram>,
}

/// A monotonically increasing count exported under its exact name (OpenMetrics type `unknown`):
/// the peer's Go counters that have no `_total` suffix.
#[derive(Debug, Default, Clone)]
pub struct PlainCounter(Arc<AtomicU64>);

impl PlainCounter {
    pub fn inc(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

impl EncodeMetric for PlainCounter {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        encoder.encode_gauge(&(self.get() as i64))
    }
    fn metric_type(&self) -> MetricType {
        MetricType::Unknown
    }
}

impl TypedMetric for PlainCounter {
    const TYPE: MetricType = MetricType::Unknown;
}

/// `principal_agent_avg_connection_time`: the average connected time of the connected agents in
/// whole minutes (the peer's formula), computed when scraped.
#[derive(Debug, Default, Clone)]
pub struct AvgConnectionTime(Arc<Mutex<HashMap<String, Instant>>>);

impl EncodeMetric for AvgConnectionTime {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let total: u64 = map
            .values()
            // the peer rounds each duration to the minute, then averages whole minutes
            .map(|t| (t.elapsed().as_secs() + 30) / 60)
            .sum();
        let avg = if map.is_empty() {
            0
        } else {
            total / map.len() as u64
        };
        encoder.encode_gauge(&(avg as i64))
    }
    fn metric_type(&self) -> MetricType {
        MetricType::Gauge
    }
}

/// The default buckets of the Go Prometheus client (`prometheus.DefBuckets`).
const GO_DEF_BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

fn go_histogram() -> Histogram {
    Histogram::new(GO_DEF_BUCKETS)
}

/// Which component the metrics belong to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Principal,
    Agent,
}

/// The peer's metrics (names and labels as argocd-agent exports them).
pub struct PeerMetrics {
    pub side: Side,
    pub events_received: PlainCounter,
    pub events_sent: PlainCounter,
    /// `{principal,agent}_event_processing_time{status, agent_name|agent_mode, resource_type}`
    pub event_processing_time: Family<Labels, Histogram, fn() -> Histogram>,
    /// `{principal,agent}_errors{resource_type}`
    pub errors: Family<Labels, PlainCounter>,
    /// `argocd_{principal,agent}_event_writer_events_discarded_total{[agent_name,] event_type, resource_type}`
    pub events_discarded: Family<Labels, Counter>,
    /// `argocd_agent_build_info{version, git_revision}` = 1 (both components, as in the peer)
    pub build_info: Family<Labels, Gauge>,
    // principal only
    pub avg_connection_time: AvgConnectionTime,
    pub agent_connections: Family<Labels, Counter>,
    pub event_writer_send_errors: Family<Labels, Counter>,
    pub applications_created: PlainCounter,
    pub applications_updated: PlainCounter,
    pub applications_deleted: PlainCounter,
    pub app_projects_created: PlainCounter,
    pub app_projects_updated: PlainCounter,
    pub app_projects_deleted: PlainCounter,
    pub repositories_created: PlainCounter,
    pub repositories_updated: PlainCounter,
    pub repositories_deleted: PlainCounter,
    /// `argocd_principal_appsets_{created,updated,deleted}`: the peer counts the ApplicationSets
    /// it replicates to an HA replica; argocd-pull sends none (exposed at zero, as the peer's
    /// before its first one)
    pub appsets_created: PlainCounter,
    pub appsets_updated: PlainCounter,
    pub appsets_deleted: PlainCounter,
    /// keys in the hub's GPG keys ConfigMap
    pub gpg_keys_count: Gauge,
    /// `argocd_principal_resource_proxy_requests_total{agent_name}`
    pub resource_proxy_requests: Family<Labels, Counter>,
    /// `argocd_principal_resource_proxy_errors_total{agent_name, reason}`
    pub resource_proxy_errors: Family<Labels, Counter>,
    /// `argocd_principal_redis_proxy_requests_total{agent_name, command}`
    pub redis_proxy_requests: Family<Labels, Counter>,
    /// `argocd_principal_redis_proxy_errors_total{agent_name, command}`
    pub redis_proxy_errors: Family<Labels, Counter>,
    // agent only
    /// `argocd_agent_resource_proxy_requests_total`
    pub agent_resource_proxy_requests: Counter,
    /// `argocd_agent_resource_proxy_errors_total`
    pub agent_resource_proxy_errors: Counter,
    /// `argocd_agent_redis_proxy_requests_total{command}`
    pub agent_redis_proxy_requests: Family<Labels, Counter>,
    /// `argocd_agent_redis_proxy_errors_total{command}`
    pub agent_redis_proxy_errors: Family<Labels, Counter>,
    pub propagation_latency: Family<Labels, Histogram, fn() -> Histogram>,
    pub connection_status: Gauge,
    pub connection_start_timestamp: Gauge<f64, AtomicU64>,
    pub connections: Counter,
}

impl PeerMetrics {
    fn new(side: Side) -> Self {
        Self {
            side,
            events_received: Default::default(),
            events_sent: Default::default(),
            event_processing_time: Family::new_with_constructor(go_histogram),
            errors: Default::default(),
            events_discarded: Default::default(),
            build_info: Default::default(),
            avg_connection_time: Default::default(),
            agent_connections: Default::default(),
            event_writer_send_errors: Default::default(),
            applications_created: Default::default(),
            applications_updated: Default::default(),
            applications_deleted: Default::default(),
            app_projects_created: Default::default(),
            app_projects_updated: Default::default(),
            app_projects_deleted: Default::default(),
            repositories_created: Default::default(),
            repositories_updated: Default::default(),
            repositories_deleted: Default::default(),
            appsets_created: Default::default(),
            appsets_updated: Default::default(),
            appsets_deleted: Default::default(),
            gpg_keys_count: Default::default(),
            resource_proxy_requests: Default::default(),
            resource_proxy_errors: Default::default(),
            agent_resource_proxy_requests: Default::default(),
            agent_resource_proxy_errors: Default::default(),
            redis_proxy_requests: Default::default(),
            redis_proxy_errors: Default::default(),
            agent_redis_proxy_requests: Default::default(),
            agent_redis_proxy_errors: Default::default(),
            propagation_latency: Family::new_with_constructor(go_histogram),
            connection_status: Default::default(),
            connection_start_timestamp: Default::default(),
            connections: Default::default(),
        }
    }

    fn register(&self, reg: &mut Registry, connected_agents: &Gauge) {
        let m = self;
        m.build_info
            .get_or_create(&vec![
                ("version".to_string(), crate::VERSION.to_string()),
                (
                    "git_revision".to_string(),
                    option_env!("ARGOCD_PULL_GIT_REVISION")
                        .unwrap_or("unknown")
                        .to_string(),
                ),
            ])
            .set(1);
        reg.register(
            "argocd_agent_build_info",
            "Build metadata for the running binary",
            m.build_info.clone(),
        );
        match m.side {
            Side::Principal => {
                reg.register(
                    "argocd_principal_connected_agents",
                    "The total number of agents connected with principal",
                    connected_agents.clone(),
                );
                reg.register(
                    "argocd_principal_gpg_keys_count",
                    "The current number of GPG keys on the control plane",
                    m.gpg_keys_count.clone(),
                );
                reg.register(
                    "principal_agent_avg_connection_time",
                    "The average time all agents are connected for (in minutes)",
                    m.avg_connection_time.clone(),
                );
                reg.register(
                    "argocd_principal_agent_connections",
                    "The total number of successful connections from each agent to the principal",
                    m.agent_connections.clone(),
                );
                for (name, help, c) in [
                    (
                        "principal_applications_created",
                        "The total number of applications created on the control plane",
                        &m.applications_created,
                    ),
                    (
                        "principal_applications_updated",
                        "The total number of applications updated on the control plane",
                        &m.applications_updated,
                    ),
                    (
                        "principal_applications_deleted",
                        "The total number of applications deleted on the control plane",
                        &m.applications_deleted,
                    ),
                    (
                        "principal_app_projects_created",
                        "The total number of app project created on the control plane",
                        &m.app_projects_created,
                    ),
                    (
                        "principal_app_projects_updated",
                        "The total number of app project updated on the control plane",
                        &m.app_projects_updated,
                    ),
                    (
                        "principal_app_projects_deleted",
                        "The total number of app project deleted on the control plane",
                        &m.app_projects_deleted,
                    ),
                    (
                        "principal_repositories_created",
                        "The total number of repositories created on the control plane",
                        &m.repositories_created,
                    ),
                    (
                        "principal_repositories_updated",
                        "The total number of repositories updated on the control plane",
                        &m.repositories_updated,
                    ),
                    (
                        "principal_repositories_deleted",
                        "The total number of repositories deleted on the control plane",
                        &m.repositories_deleted,
                    ),
                    (
                        "argocd_principal_appsets_created",
                        "The total number of ApplicationSets created on the control plane",
                        &m.appsets_created,
                    ),
                    (
                        "argocd_principal_appsets_updated",
                        "The total number of ApplicationSets updated on the control plane",
                        &m.appsets_updated,
                    ),
                    (
                        "argocd_principal_appsets_deleted",
                        "The total number of ApplicationSets deleted on the control plane",
                        &m.appsets_deleted,
                    ),
                    (
                        "principal_events_received",
                        "The total number of events received by principal",
                        &m.events_received,
                    ),
                    (
                        "principal_events_sent",
                        "The total number of events sent by principal",
                        &m.events_sent,
                    ),
                ] {
                    reg.register(name, help, c.clone());
                }
                reg.register(
                    "principal_event_processing_time",
                    "Histogram of time taken to process events (in seconds)",
                    m.event_processing_time.clone(),
                );
                reg.register(
                    "principal_event_writer_send_errors",
                    "The total number of EventWriter send errors observed by principal",
                    m.event_writer_send_errors.clone(),
                );
                reg.register(
                    "argocd_principal_event_writer_events_discarded",
                    "The total number of events discarded by the EventWriter after exhausting retries",
                    m.events_discarded.clone(),
                );
                reg.register(
                    "argocd_principal_resource_proxy_requests",
                    "The total number of resource proxy requests received",
                    m.resource_proxy_requests.clone(),
                );
                reg.register(
                    "argocd_principal_resource_proxy_errors",
                    "The total number of resource proxy request failures",
                    m.resource_proxy_errors.clone(),
                );
                reg.register(
                    "argocd_principal_redis_proxy_requests",
                    "The total number of Redis proxy requests forwarded to agents",
                    m.redis_proxy_requests.clone(),
                );
                reg.register(
                    "argocd_principal_redis_proxy_errors",
                    "The total number of Redis proxy request failures",
                    m.redis_proxy_errors.clone(),
                );
                reg.register(
                    "principal_errors",
                    "The total number of errors occurred in principal",
                    m.errors.clone(),
                );
            }
            Side::Agent => {
                reg.register(
                    "agent_events_received",
                    "The total number of events received by agent",
                    m.events_received.clone(),
                );
                reg.register(
                    "agent_events_sent",
                    "The total number of events sent by agent",
                    m.events_sent.clone(),
                );
                reg.register(
                    "agent_event_processing_time",
                    "Histogram of time taken to process events (in seconds)",
                    m.event_processing_time.clone(),
                );
                reg.register(
                    "agent_event_propagation_latency_seconds",
                    "Histogram of time from principal send to agent processing (in seconds)",
                    m.propagation_latency.clone(),
                );
                reg.register(
                    "argocd_agent_event_writer_events_discarded",
                    "The total number of events discarded by the EventWriter after exhausting retries",
                    m.events_discarded.clone(),
                );
                reg.register(
                    "argocd_agent_resource_proxy_requests",
                    "The total number of resource proxy requests processed by the agent",
                    m.agent_resource_proxy_requests.clone(),
                );
                reg.register(
                    "argocd_agent_resource_proxy_errors",
                    "The total number of resource proxy request failures on the agent",
                    m.agent_resource_proxy_errors.clone(),
                );
                reg.register(
                    "argocd_agent_redis_proxy_requests",
                    "The total number of Redis proxy requests processed by the agent",
                    m.agent_redis_proxy_requests.clone(),
                );
                reg.register(
                    "argocd_agent_redis_proxy_errors",
                    "The total number of Redis proxy request failures on the agent",
                    m.agent_redis_proxy_errors.clone(),
                );
                reg.register(
                    "agent_errors",
                    "The total number of errors occurred in agent",
                    m.errors.clone(),
                );
                reg.register(
                    "argocd_agent_connection_status",
                    "Whether the agent is currently connected to the principal (1 = connected, 0 = disconnected)",
                    m.connection_status.clone(),
                );
                reg.register(
                    "argocd_agent_connection_start_timestamp_seconds",
                    "Unix timestamp of when the current connection to the principal was established",
                    m.connection_start_timestamp.clone(),
                );
                reg.register(
                    "argocd_agent_connections",
                    "The total number of successful connections from the agent to the principal",
                    m.connections.clone(),
                );
            }
        }
    }
}

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
    pub ha: crate::ha::HaMetrics,
    /// `grpc_server_*` (principal) or `grpc_client_*` (agent), as go-grpc-middleware's
    pub grpc: crate::grpc_metrics::GrpcMetrics,
    /// `<prefix>_workqueue_*{queue}` of the send and receive queues.
    pub workqueues: crate::workqueue_metrics::Workqueues,
    per_event: PerEvent,
}

/// `reason`s of `argocd_agent_auth_failures_total`: the principal refused the login (`rejected`)
/// or the agent's version (`version`).
pub const AGENT_AUTH_FAILURE_REASONS: [&str; 2] = ["rejected", "version"];

fn l(k: &str, v: &str) -> Labels {
    vec![(k.to_string(), v.to_string())]
}

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
        self.peer
            .avg_connection_time
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(agent.to_string(), Instant::now());
    }

    /// Principal: `agent`'s event stream ended.
    pub fn agent_disconnected(&self, agent: &str) {
        self.connected_agents.dec();
        self.agent_streams
            .get_or_create(&l("agent_name", agent))
            .dec();
        self.peer
            .avg_connection_time
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(agent);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every metric the peer's example dashboards query (argocd-agent acb60cd
    /// examples/o11y/argocd-agent-{principal,agent}-dashboard.json), as (metric, labels used).
    const PRINCIPAL_DASHBOARD: &[(&str, &[&str])] = &[
        ("argocd_agent_build_info", &[]),
        ("argocd_principal_agent_connections_total", &["agent_name"]),
        ("argocd_principal_connected_agents", &[]),
        ("principal_agent_avg_connection_time", &[]),
        ("principal_app_projects_created", &[]),
        ("principal_app_projects_deleted", &[]),
        ("principal_app_projects_updated", &[]),
        ("principal_applications_created", &[]),
        ("principal_applications_deleted", &[]),
        ("principal_applications_updated", &[]),
        ("principal_events_received", &[]),
        ("principal_events_sent", &[]),
        (
            "principal_event_processing_time_bucket",
            &["status", "agent_name", "resource_type"],
        ),
        ("principal_event_processing_time_count", &["status"]),
        (
            "principal_event_writer_send_errors_total",
            &["agent_name", "reason"],
        ),
        (
            "argocd_principal_event_writer_events_discarded_total",
            &["event_type"],
        ),
        ("principal_errors", &["resource_type"]),
        (
            "argocd_principal_redis_proxy_requests_total",
            &["agent_name", "command"],
        ),
        (
            "argocd_principal_redis_proxy_errors_total",
            &["agent_name", "command"],
        ),
        ("grpc_server_started_total", &["grpc_type"]),
        ("grpc_server_handled_total", &["grpc_code"]),
        ("grpc_server_msg_received_total", &[]),
        ("grpc_server_msg_sent_total", &[]),
        ("grpc_server_handling_seconds_bucket", &["le"]),
        ("process_cpu_seconds_total", &[]),
        ("process_resident_memory_bytes", &[]),
        ("process_open_fds", &[]),
        ("rest_client_requests_total", &["code"]),
        ("rest_client_request_duration_seconds_bucket", &["le"]),
    ];
    const AGENT_DASHBOARD: &[(&str, &[&str])] = &[
        ("argocd_agent_build_info", &[]),
        ("argocd_agent_connection_status", &[]),
        ("argocd_agent_connection_start_timestamp_seconds", &[]),
        ("argocd_agent_connections_total", &[]),
        ("argocd_agent_auth_failures_total", &[]),
        ("agent_events_received", &[]),
        ("agent_events_sent", &[]),
        (
            "agent_event_processing_time_bucket",
            &["status", "agent_mode", "resource_type"],
        ),
        (
            "agent_event_propagation_latency_seconds_bucket",
            &["resource_type"],
        ),
        (
            "argocd_agent_event_writer_events_discarded_total",
            &["event_type"],
        ),
        ("agent_errors", &["resource_type"]),
        ("argocd_agent_redis_proxy_requests_total", &["command"]),
        ("argocd_agent_redis_proxy_errors_total", &["command"]),
        ("grpc_client_started_total", &["grpc_type"]),
        ("grpc_client_handled_total", &["grpc_code"]),
        ("grpc_client_msg_received_total", &[]),
        ("grpc_client_msg_sent_total", &[]),
        ("grpc_client_handling_seconds_bucket", &["le"]),
        ("process_cpu_seconds_total", &[]),
        ("process_resident_memory_bytes", &[]),
        ("process_open_fds", &[]),
        ("rest_client_requests_total", &["code"]),
        ("rest_client_request_duration_seconds_bucket", &["le"]),
    ];

    fn sample<'a>(body: &'a str, name: &str) -> Option<&'a str> {
        body.lines().find(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
    }

    fn check(body: &str, expected: &[(&str, &[&str])]) {
        for (name, labels) in expected {
            let line =
                sample(body, name).unwrap_or_else(|| panic!("metric {name} missing from:\n{body}"));
            for l in *labels {
                assert!(
                    line.contains(&format!("{l}=\"")),
                    "{name} lacks label {l}: {line}"
                );
            }
        }
    }

    #[tokio::test]
    async fn principal_exports_every_metric_of_the_peers_dashboard_with_its_labels() {
        let m = Metrics::new("argocd_principal");
        crate::kube_client::one_request().await;
        m.agent_connected("agent-a");
        m.sent("create");
        m.received("status-update");
        m.processed_for(
            &PeerProcessing::new("agent-a"),
            "failure",
            "application",
            0.01,
        );
        m.discarded("agent-a", "create", "application");
        m.peer
            .event_writer_send_errors
            .get_or_create(&vec![
                ("agent_name".into(), "agent-a".into()),
                ("reason".into(), "x".into()),
            ])
            .inc();
        for (k, op) in [
            ("Application", "created"),
            ("Application", "updated"),
            ("Application", "deleted"),
            ("AppProject", "created"),
            ("AppProject", "updated"),
            ("AppProject", "deleted"),
            ("Repository", "created"),
            ("Repository", "updated"),
            ("Repository", "deleted"),
        ] {
            m.hub_write(k, op);
        }
        for op in ["created", "updated", "deleted"] {
            assert!(
                m.encode()
                    .contains(&format!("principal_repositories_{op} 1\n")),
                "principal_repositories_{op}"
            );
        }
        m.redis_proxy_request("agent-a", "get");
        m.redis_proxy_error("agent-a", "subscribe");
        // the gRPC server's services are metered from the start (principal::run)
        m.grpc.initialize("eventstreamapi.EventStream");
        let body = m.encode();
        check(&body, PRINCIPAL_DASHBOARD);
        assert!(body.contains(
            "argocd_principal_redis_proxy_errors_total{agent_name=\"agent-a\",command=\"subscribe\"} 1\n"
        ));
        assert!(body.contains("principal_events_sent 1\n"), "{body}");
        assert!(body.contains("# TYPE principal_events_sent unknown"));
        assert!(body.contains("argocd_principal_connected_agents 1\n"));
        assert!(body.contains("principal_agent_avg_connection_time 0\n"));
        assert!(body.contains("principal_errors{resource_type=\"application\"} 1\n"));
        assert!(
            body.contains("argocd_principal_agent_connections_total{agent_name=\"agent-a\"} 1\n")
        );
        // our own metrics stay, as additions
        assert!(body.contains("argocd_principal_events_sent_total{type=\"create\"} 1\n"));
        assert!(body.contains("argocd_principal_agent_connected{agent_name=\"agent-a\"} 1\n"));
        m.agent_disconnected("agent-a");
        assert!(m.encode().contains("argocd_principal_connected_agents 0\n"));
        assert!(
            m.encode()
                .contains("argocd_principal_agent_connected{agent_name=\"agent-a\"} 0\n"),
            "a disconnected agent stays, at 0"
        );
        // agent-only metrics are not exported by the principal
        assert!(sample(&body, "agent_events_sent").is_none());
    }

    #[tokio::test]
    async fn agent_exports_every_metric_of_the_peers_dashboard_with_its_labels() {
        let m = Metrics::new("argocd_agent");
        crate::kube_client::one_request().await;
        // one call through the metered channel (agent::connect)
        {
            use tower::ServiceExt;
            let answer = tower::service_fn(|_req: http::Request<tonic::body::Body>| async {
                http::Response::builder()
                    .header("grpc-status", "16")
                    .body(tonic::body::Body::empty())
            });
            let req = http::Request::builder()
                .uri("/authapi.Authentication/Authenticate")
                .body(tonic::body::Body::empty())
                .unwrap();
            crate::grpc_metrics::MeteredClient::new(answer, &m.grpc)
                .oneshot(req)
                .await
                .unwrap();
        }
        m.connection_up();
        m.sent("status-update");
        m.received("create");
        let p = PeerProcessing::new("managed");
        m.processed_for(&p, "success", "application", 0.002);
        m.processed_for(&p, "failure", "application", 0.002);
        m.processed_for(&p, "failure", "application", 0.003);
        m.propagation("application", 0.05);
        m.discarded("", "status-update", "application");
        m.auth_failure("token");
        m.agent_redis_proxy_request("get");
        m.agent_redis_proxy_error("get");
        let body = m.encode();
        check(&body, AGENT_DASHBOARD);
        assert!(body.contains("argocd_agent_redis_proxy_requests_total{command=\"get\"} 1\n"));
        assert!(body.contains("argocd_agent_connection_status 1\n"));
        assert!(body.contains("argocd_agent_connections_total 1\n"));
        assert!(body.contains("agent_events_received 1\n"));
        // the session's cached handle counts into the exported series, one per label set
        assert!(body.contains("agent_event_processing_time_count{status=\"failure\",agent_mode=\"managed\",resource_type=\"application\"} 2\n"), "{body}");
        assert!(body.contains("agent_event_processing_time_count{status=\"success\",agent_mode=\"managed\",resource_type=\"application\"} 1\n"), "{body}");
        assert!(
            body.contains("agent_errors{resource_type=\"application\"} 2\n"),
            "{body}"
        );
        assert!(body.contains("grpc_client_handled_total{grpc_code=\"Unauthenticated\",grpc_method=\"Authenticate\",grpc_service=\"authapi.Authentication\",grpc_type=\"unary\"} 1\n"), "{body}");
        assert!(m.ready.get());
        let ts = sample(&body, "argocd_agent_connection_start_timestamp_seconds").unwrap();
        let ts: f64 = ts.rsplit(' ').next().unwrap().parse().unwrap();
        assert!(ts > 1.7e9, "a unix timestamp: {ts}");
        m.connection_down();
        assert!(m.encode().contains("argocd_agent_connection_status 0\n"));
        assert!(!m.ready.get());
        assert!(sample(&body, "principal_events_sent").is_none());
    }
}
