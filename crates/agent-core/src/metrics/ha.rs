//! The peer's HA and replication metrics (argocd-agent pkg/ha/metrics.go,
//! pkg/replication/forwarder.go, pkg/replication/client.go), exact names and labels.
//!
//! `argocd_agent_ha_state{state}` (1 for the current state), `argocd_agent_ha_transitions_total
//! {from_state,to_state}` and `argocd_agent_ha_failovers_total` also serve our Lease-based
//! failover (`--leader-elect`), whose states are `recovering`, `active` and `standby`.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

type Labels = Vec<(String, String)>;

/// Every HA metric of the peer. Families without labels are exposed from the start (at zero);
/// labelled ones once a label value is seen, as the peer's.
#[derive(Debug, Default)]
pub struct HaMetrics {
    state: Family<Labels, Gauge>,
    transitions: Family<Labels, Counter>,
    /// Promotions (`ha promote`; with `--leader-elect`, `standby` → `active`).
    pub failovers: Counter,
    /// Demotions (`ha demote`).
    pub failbacks: Counter,
    /// Seconds between the primary processing the last replicated event and now (replica).
    pub replication_lag: Gauge<f64, std::sync::atomic::AtomicU64>,
    pub replication_events: Counter,
    pub replication_errors: Counter,
    rejected: Family<Labels, Counter>,
    resource_errors: Family<Labels, Counter>,
    /// The primary's forwarder (`argocd_agent_replication_*`).
    pub forwarder: ForwarderMetrics,
    /// The replica's client (`argocd_agent_replication_client_*`).
    pub client: ClientMetrics,
    /// Active/active replicas (ours, `argocd_principal_ha_*`).
    pub shards: super::shards::ShardMetrics,
}

/// pkg/replication/forwarder.go `ForwarderMetrics`.
#[derive(Debug, Default)]
pub struct ForwarderMetrics {
    pub events_queued: Counter,
    pub events_dropped: Counter,
    pub events_forwarded: Counter,
    pub replicas_connected: Gauge,
    pub queue_size: Gauge,
    pub forwarding_errors: Counter,
    pub last_sequence_number: Gauge,
}

/// pkg/replication/client.go `ClientMetrics`.
#[derive(Debug, Default)]
pub struct ClientMetrics {
    pub connected: Gauge,
    pub events_received: Counter,
    pub events_processed: Counter,
    pub events_errors: Counter,
    pub events_dropped: Counter,
    pub lag_seconds: Gauge<f64, std::sync::atomic::AtomicU64>,
    pub reconnect_attempts: Counter,
    pub last_sequence_number: Gauge,
    pub snapshot_agents: Gauge,
    pub reconciliations: Counter,
    pub sequence_gaps: Counter,
    pub snapshot_fetch_errors: Counter,
    pub snapshot_apply_errors: Counter,
}

/// The Lease-based roles (`--leader-elect`).
pub const LEASE_STATES: [&str; 3] = ["recovering", "active", "standby"];

impl HaMetrics {
    pub fn register(&self, reg: &mut Registry) {
        self.shards.register(reg);
        reg.register(
            "argocd_agent_ha_state",
            "Current HA state: 1 for the active state, 0 for all others",
            self.state.clone(),
        );
        reg.register(
            "argocd_agent_ha_transitions",
            "Total number of HA state transitions",
            self.transitions.clone(),
        );
        reg.register(
            "argocd_agent_ha_replication_lag_seconds",
            "Replication lag in seconds",
            self.replication_lag.clone(),
        );
        reg.register(
            "argocd_agent_ha_replication_events",
            "Total number of replication events received",
            self.replication_events.clone(),
        );
        reg.register(
            "argocd_agent_ha_replication_errors",
            "Total number of replication errors",
            self.replication_errors.clone(),
        );
        reg.register(
            "argocd_agent_ha_failovers",
            "Total number of failover events",
            self.failovers.clone(),
        );
        reg.register(
            "argocd_agent_ha_failbacks",
            "Total number of failback events",
            self.failbacks.clone(),
        );
        reg.register(
            "argocd_agent_ha_connections_rejected",
            "Total number of agent connections rejected due to HA state",
            self.rejected.clone(),
        );
        reg.register(
            "argocd_agent_ha_resource_operation_errors",
            "Total number of errors writing replicated resources, by resource kind and operation",
            self.resource_errors.clone(),
        );
        let f = &self.forwarder;
        for (name, help, c) in [
            (
                "argocd_agent_replication_events_queued",
                "Total number of events queued for replication",
                &f.events_queued,
            ),
            (
                "argocd_agent_replication_events_dropped",
                "Total number of events dropped due to full queue",
                &f.events_dropped,
            ),
            (
                "argocd_agent_replication_events_forwarded",
                "Total number of events successfully forwarded to replicas",
                &f.events_forwarded,
            ),
            (
                "argocd_agent_replication_forwarding_errors",
                "Total number of errors while forwarding events",
                &f.forwarding_errors,
            ),
        ] {
            reg.register(name, help, c.clone());
        }
        for (name, help, g) in [
            (
                "argocd_agent_replication_replicas_connected",
                "Number of replica principals currently connected",
                &f.replicas_connected,
            ),
            (
                "argocd_agent_replication_queue_size",
                "Current number of events in the replication queue",
                &f.queue_size,
            ),
            (
                "argocd_agent_replication_last_sequence_number",
                "The last sequence number assigned to an event",
                &f.last_sequence_number,
            ),
        ] {
            reg.register(name, help, g.clone());
        }
        let c = &self.client;
        for (name, help, g) in [
            (
                "argocd_agent_replication_client_connected",
                "Whether the replication client is connected (1) or not (0)",
                &c.connected,
            ),
            (
                "argocd_agent_replication_client_last_sequence_number",
                "The last sequence number received from primary",
                &c.last_sequence_number,
            ),
            (
                "argocd_agent_replication_client_snapshot_agents",
                "Number of agents in the last received snapshot",
                &c.snapshot_agents,
            ),
        ] {
            reg.register(name, help, g.clone());
        }
        reg.register(
            "argocd_agent_replication_client_lag_seconds",
            "Replication lag in seconds (time since last event was processed on primary)",
            c.lag_seconds.clone(),
        );
        for (name, help, x) in [
            (
                "argocd_agent_replication_client_events_received",
                "Total number of replication events received",
                &c.events_received,
            ),
            (
                "argocd_agent_replication_client_events_processed",
                "Total number of replication events successfully processed",
                &c.events_processed,
            ),
            (
                "argocd_agent_replication_client_events_errors",
                "Total number of errors processing replication events",
                &c.events_errors,
            ),
            (
                "argocd_agent_replication_client_events_dropped",
                "Total number of replicated events dropped due to processing failures",
                &c.events_dropped,
            ),
            (
                "argocd_agent_replication_client_reconnect_attempts",
                "Total number of reconnection attempts",
                &c.reconnect_attempts,
            ),
            (
                "argocd_agent_replication_client_reconciliations",
                "Total number of reconciliation snapshot fetches",
                &c.reconciliations,
            ),
            (
                "argocd_agent_replication_client_sequence_gaps",
                "Total number of sequence gaps detected in event stream",
                &c.sequence_gaps,
            ),
            (
                "argocd_agent_replication_client_snapshot_fetch_errors",
                "Total number of errors fetching the snapshot from the primary",
                &c.snapshot_fetch_errors,
            ),
            (
                "argocd_agent_replication_client_snapshot_apply_errors",
                "Total number of errors applying a received snapshot",
                &c.snapshot_apply_errors,
            ),
        ] {
            reg.register(name, help, x.clone());
        }
    }

    /// Lease mode: records the move to `to` (`active` after `standby` counts as a failover).
    pub fn transition(&self, from: &str, to: &str) {
        self.set_state(&LEASE_STATES, to);
        if from != to {
            self.count_transition(from, to);
            if to == "active" && from == "standby" {
                self.failovers.inc();
            }
        }
    }

    /// Cross-cluster mode: the peer's `RecordStateTransition` (the gauge of every state in `all`
    /// set, the transition counted, also `from == to` at start as the peer's `Start`).
    pub fn record_state(&self, all: &[&str], from: &str, to: &str) {
        self.set_state(all, to);
        self.count_transition(from, to);
    }

    fn set_state(&self, states: &[&str], to: &str) {
        for s in states {
            self.state
                .get_or_create(&vec![("state".into(), s.to_string())])
                .set(i64::from(*s == to));
        }
    }

    fn count_transition(&self, from: &str, to: &str) {
        self.transitions
            .get_or_create(&vec![
                ("from_state".into(), from.into()),
                ("to_state".into(), to.into()),
            ])
            .inc();
    }

    /// An agent refused because of the HA state.
    pub fn record_rejected(&self, state: &str, reason: &str) {
        self.rejected
            .get_or_create(&vec![
                ("state".into(), state.into()),
                ("reason".into(), reason.into()),
            ])
            .inc();
    }

    /// A replicated resource that could not be written.
    pub fn record_resource_error(&self, kind: &str, operation: &str) {
        self.resource_errors
            .get_or_create(&vec![
                ("kind".into(), kind.into()),
                ("operation".into(), operation.into()),
            ])
            .inc();
    }
}
