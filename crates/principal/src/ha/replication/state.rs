//! The HA state machine (peer: pkg/ha/state.go, pkg/ha/controller.go): the five states, which
//! moves are valid, and the operator's promote / demote rules. Pure, plus a small controller that
//! publishes the current state on a watch channel.

use std::fmt;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use argocd_pull_agent_core::metrics::HaMetrics;

/// A principal's HA state (the peer's names, lower case on the wire and in metrics).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum State {
    /// Just started, determining its role.
    Recovering,
    /// A replica catching up with the primary (subscribing, applying its snapshot).
    Syncing,
    /// A replica receiving the primary's events.
    Replicating,
    /// A replica that lost (or never got) its replication stream.
    Disconnected,
    /// Serving agents.
    Active,
}

impl State {
    pub const ALL: [State; 5] = [
        State::Replicating,
        State::Disconnected,
        State::Active,
        State::Recovering,
        State::Syncing,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            State::Recovering => "recovering",
            State::Syncing => "syncing",
            State::Replicating => "replicating",
            State::Disconnected => "disconnected",
            State::Active => "active",
        }
    }

    /// Whether GSLB should send agents here (`/healthz` 200): only when active.
    pub fn is_healthy(self) -> bool {
        self == State::Active
    }

    /// Whether agents are accepted: only when active.
    pub fn accepts_agents(self) -> bool {
        self == State::Active
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `--ha-preferred-role`: the role a principal takes when it starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PreferredRole {
    Primary,
    Replica,
}

impl PreferredRole {
    pub fn as_str(self) -> &'static str {
        match self {
            PreferredRole::Primary => "primary",
            PreferredRole::Replica => "replica",
        }
    }

    /// The peer's `ParseRole`.
    pub fn parse(s: &str) -> anyhow::Result<Self> {
        match s {
            "primary" => Ok(PreferredRole::Primary),
            "replica" => Ok(PreferredRole::Replica),
            other => {
                anyhow::bail!("--ha-preferred-role: unknown role: {other} (use primary or replica)")
            }
        }
    }

    /// The state a principal starts in after `recovering`.
    pub fn initial_state(self) -> State {
        match self {
            PreferredRole::Primary => State::Active,
            PreferredRole::Replica => State::Syncing,
        }
    }
}

/// The peer's `ValidTransition`, plus `syncing → disconnected` (ours: a replica that has not
/// reached its primary within `--ha-failover-timeout` of starting counts it as unreachable, so
/// that an operator can promote it; the peer's replica stays `syncing` and cannot be promoted).
pub fn valid_transition(from: State, to: State) -> bool {
    use State::*;
    matches!(
        (from, to),
        (Recovering, Active | Syncing | Replicating | Disconnected)
            | (Replicating, Disconnected | Active)
            | (Disconnected, Replicating | Active)
            | (Active, Replicating)
            | (Syncing, Replicating | Disconnected)
    )
}

/// Why a promote or demote was refused (the peer's messages, with the fix named).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("already active")]
    AlreadyActive,
    #[error(
        "can only promote from replicating or disconnected state, current: {0}{hint}",
        hint = if *.0 == State::Syncing {
            " (this replica has not reached its peer since it started; it becomes disconnected after --ha-failover-timeout, or restart it with --ha-preferred-role=primary)"
        } else { "" }
    )]
    NotPromotable(State),
    #[error(
        "still replicating from peer {0} — its stream is up, so it is active: demote the peer first (argocd-pull ctl ha demote against it), or use --force if you are sure it must not serve"
    )]
    PeerActive(String),
    #[error("can only demote from active state, current: {0}")]
    NotActive(State),
}

/// The peer's `Controller.Promote` rule.
pub fn check_promote(state: State, force: bool, peer: &str) -> Result<(), Refused> {
    match state {
        State::Active => Err(Refused::AlreadyActive),
        State::Replicating if !force => Err(Refused::PeerActive(peer.to_string())),
        State::Replicating | State::Disconnected => Ok(()),
        s => Err(Refused::NotPromotable(s)),
    }
}

/// The peer's `Controller.Demote` rule.
pub fn check_demote(state: State) -> Result<(), Refused> {
    match state {
        State::Active => Ok(()),
        s => Err(Refused::NotActive(s)),
    }
}

/// Holds the state; every change is published on a watch channel and recorded in the metrics.
#[derive(Clone)]
pub struct Controller {
    inner: Arc<Inner>,
}

struct Inner {
    state: Mutex<State>,
    tx: watch::Sender<State>,
    metrics: Arc<argocd_pull_agent_core::metrics::Metrics>,
    peer: String,
}

impl Controller {
    pub fn new(metrics: Arc<argocd_pull_agent_core::metrics::Metrics>, peer: &str) -> Self {
        metrics.ha.record_state(
            &State::ALL.map(State::as_str),
            State::Recovering.as_str(),
            State::Recovering.as_str(),
        );
        Controller {
            inner: Arc::new(Inner {
                state: Mutex::new(State::Recovering),
                tx: watch::channel(State::Recovering).0,
                metrics,
                peer: peer.to_string(),
            }),
        }
    }

    pub fn state(&self) -> State {
        *self.inner.state.lock().expect("poisoned")
    }

    pub fn subscribe(&self) -> watch::Receiver<State> {
        self.inner.tx.subscribe()
    }

    fn metrics(&self) -> &HaMetrics {
        &self.inner.metrics.ha
    }

    /// Moves to `to` when that is a valid transition; returns whether the state changed.
    pub fn transition(&self, to: State) -> bool {
        let mut s = self.inner.state.lock().expect("poisoned");
        self.transition_locked(&mut s, to)
    }

    fn transition_locked(&self, s: &mut State, to: State) -> bool {
        let from = *s;
        if from == to {
            return false;
        }
        if !valid_transition(from, to) {
            tracing::warn!(%from, %to, "invalid HA state transition attempted");
            return false;
        }
        *s = to;
        self.metrics()
            .record_state(&State::ALL.map(State::as_str), from.as_str(), to.as_str());
        tracing::info!(%from, %to, "HA state transition");
        self.inner.tx.send_replace(to);
        true
    }

    /// The replication stream is up and its snapshot applied (`syncing`/`disconnected` →
    /// `replicating`).
    pub fn on_replication_connected(&self) {
        let mut s = self.inner.state.lock().expect("poisoned");
        if matches!(*s, State::Syncing | State::Disconnected) {
            self.transition_locked(&mut s, State::Replicating);
        }
    }

    /// The replication stream broke (`replicating` → `disconnected`).
    pub fn on_replication_disconnected(&self) {
        let mut s = self.inner.state.lock().expect("poisoned");
        if *s == State::Replicating {
            self.transition_locked(&mut s, State::Disconnected);
        }
    }

    /// `--ha-failover-timeout` passed without reaching the primary (`syncing` →
    /// `disconnected`).
    pub fn on_peer_unreachable(&self) {
        let mut s = self.inner.state.lock().expect("poisoned");
        if *s == State::Syncing {
            self.transition_locked(&mut s, State::Disconnected);
        }
    }

    /// `ha promote [--force]`.
    pub fn promote(&self, force: bool) -> Result<State, Refused> {
        let mut s = self.inner.state.lock().expect("poisoned");
        check_promote(*s, force, &self.inner.peer)?;
        tracing::info!(force, "operator triggered: promoting to active");
        self.transition_locked(&mut s, State::Active);
        self.metrics().failovers.inc();
        Ok(*s)
    }

    /// `ha demote`.
    pub fn demote(&self) -> Result<State, Refused> {
        let mut s = self.inner.state.lock().expect("poisoned");
        check_demote(*s)?;
        tracing::info!("operator triggered: demoting to replica");
        self.transition_locked(&mut s, State::Replicating);
        self.metrics().failbacks.inc();
        Ok(*s)
    }

    /// Counts an agent refused because this principal is not active.
    pub fn record_rejected_agent(&self) {
        let s = self.state();
        self.metrics()
            .record_rejected(s.as_str(), "not accepting connections");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transitions_are_the_peers_plus_syncing_to_disconnected() {
        use State::*;
        let allowed: Vec<(State, State)> = State::ALL
            .iter()
            .flat_map(|a| State::ALL.iter().map(move |b| (*a, *b)))
            .filter(|(a, b)| valid_transition(*a, *b))
            .collect();
        let want = [
            (Replicating, Disconnected),
            (Replicating, Active),
            (Disconnected, Replicating),
            (Disconnected, Active),
            (Active, Replicating),
            (Recovering, Replicating),
            (Recovering, Disconnected),
            (Recovering, Active),
            (Recovering, Syncing),
            (Syncing, Replicating),
            (Syncing, Disconnected),
        ];
        assert_eq!(allowed.len(), want.len(), "{allowed:?}");
        for w in want {
            assert!(allowed.contains(&w), "{w:?}");
        }
        assert!(
            !valid_transition(Active, Disconnected),
            "an active principal never drops to disconnected on its own"
        );
    }

    #[test]
    fn promote_and_demote_follow_the_peer_and_name_the_fix() {
        use State::*;
        assert_eq!(
            check_promote(Active, false, "b:8443"),
            Err(Refused::AlreadyActive)
        );
        let e = check_promote(Replicating, false, "b:8443").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("still replicating from peer b:8443")
        );
        assert!(e.to_string().contains("--force"), "{e}");
        assert!(e.to_string().contains("demote the peer first"), "{e}");
        assert_eq!(check_promote(Replicating, true, "b"), Ok(()));
        assert_eq!(check_promote(Disconnected, false, "b"), Ok(()));
        let e = check_promote(Syncing, true, "b").unwrap_err();
        assert!(
            e.to_string().starts_with(
                "can only promote from replicating or disconnected state, current: syncing"
            ),
            "{e}"
        );
        assert!(e.to_string().contains("--ha-preferred-role=primary"), "{e}");
        assert_eq!(check_demote(Active), Ok(()));
        assert_eq!(
            check_demote(Disconnected).unwrap_err().to_string(),
            "can only demote from active state, current: disconnected"
        );
        assert_eq!(
            PreferredRole::parse("replica").unwrap(),
            PreferredRole::Replica
        );
        assert!(
            PreferredRole::parse("leader")
                .unwrap_err()
                .to_string()
                .contains("unknown role: leader")
        );
    }

    #[test]
    fn the_controller_publishes_changes_and_counts_them() {
        let m = argocd_pull_agent_core::metrics::Metrics::new("argocd_principal");
        let c = Controller::new(m.clone(), "b:8443");
        let rx = c.subscribe();
        assert!(c.transition(State::Syncing));
        c.on_replication_disconnected(); // not replicating yet: nothing
        assert_eq!(c.state(), State::Syncing);
        c.on_replication_connected();
        assert_eq!(*rx.borrow(), State::Replicating);
        assert!(c.promote(false).is_err());
        c.on_replication_disconnected();
        assert_eq!(c.promote(false), Ok(State::Active));
        assert_eq!(c.demote(), Ok(State::Replicating));
        let text = m.encode();
        assert!(
            text.contains("argocd_agent_ha_state{state=\"replicating\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("argocd_agent_ha_state{state=\"active\"} 0"),
            "{text}"
        );
        assert!(text.contains("argocd_agent_ha_failovers_total 1"), "{text}");
        assert!(text.contains("argocd_agent_ha_failbacks_total 1"), "{text}");
        assert!(
            text.contains("argocd_agent_ha_transitions_total{from_state=\"disconnected\",to_state=\"active\"} 1"),
            "{text}"
        );
    }
}
