//! The peer's HA metric names (argocd-agent pkg/ha/metrics.go) for our Lease-based roles.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

type Labels = Vec<(String, String)>;

/// `argocd_agent_ha_state{state}` (1 for the current state), `argocd_agent_ha_transitions_total
/// {from_state,to_state}`, `argocd_agent_ha_failovers_total`. Our states are the peer's
/// `recovering` and `active`, and `standby` (the peer's replica states do not apply: nothing is
/// replicated, every replica reads the same hub).
#[derive(Debug, Default)]
pub struct HaMetrics {
    state: Family<Labels, Gauge>,
    transitions: Family<Labels, Counter>,
    failovers: Counter,
}

const STATES: [&str; 3] = ["recovering", "active", "standby"];

impl HaMetrics {
    pub(crate) fn register(&self, reg: &mut Registry) {
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
            "argocd_agent_ha_failovers",
            "Total number of failover events",
            self.failovers.clone(),
        );
    }

    /// Records the move to `to` (`active` after `standby` counts as a failover).
    pub(crate) fn transition(&self, from: &str, to: &str) {
        for s in STATES {
            self.state
                .get_or_create(&vec![("state".into(), s.into())])
                .set(i64::from(s == to));
        }
        if from != to {
            self.transitions
                .get_or_create(&vec![
                    ("from_state".into(), from.into()),
                    ("to_state".into(), to.into()),
                ])
                .inc();
            if to == "active" && from == "standby" {
                self.failovers.inc();
            }
        }
    }
}
