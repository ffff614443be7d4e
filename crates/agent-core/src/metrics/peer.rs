//! The peer's metric families (argocd-agent's names and labels) and the metric types they need.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use prometheus_client::encoding::{EncodeMetric, MetricEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::{MetricType, TypedMetric};

use argocd_pull_ops::metrics::Registry;

/// A family's label set.
pub(super) type Labels = Vec<(String, String)>;

/// The label set of one label.
pub(super) fn l(k: &str, v: &str) -> Labels {
    vec![(k.to_string(), v.to_string())]
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

impl AvgConnectionTime {
    pub(super) fn connected(&self, agent: &str) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(agent.to_string(), Instant::now());
    }
    pub(super) fn disconnected(&self, agent: &str) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(agent);
    }
}

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

pub(super) fn go_histogram() -> Histogram {
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
    pub(super) fn new(side: Side) -> Self {
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

    pub(super) fn register(&self, reg: &mut Registry, connected_agents: &Gauge) {
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
