//! The agents this principal serves, by name: each one's state ([`AgentState`]: its mode, send
//! queue, live session and what it was sent) and its own namespace. Per-agent state lives here only, and only on the
//! replica that serves the agent ([`super::forward`] forgets the agents of shards given up).

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use super::AgentState;

#[derive(Default)]
pub(super) struct Sessions {
    agents: Mutex<HashMap<String, Arc<AgentState>>>,
    /// each agent's own namespace, from its `AuthRequest.agentNamespace` (peer:
    /// `setAgentNamespace`)
    namespaces: Mutex<HashMap<String, String>>,
}

impl Sessions {
    pub(super) fn get(&self, name: &str) -> Option<Arc<AgentState>> {
        self.agents.lock().expect("poisoned").get(name).cloned()
    }

    /// `name`'s state, or the one `new` makes for it (listed before the lock is released: two
    /// logins of one agent share one state).
    pub(super) fn get_or_insert(
        &self,
        name: &str,
        new: impl FnOnce() -> Arc<AgentState>,
    ) -> (Arc<AgentState>, bool) {
        let mut g = self.agents.lock().expect("poisoned");
        if let Some(a) = g.get(name) {
            return (a.clone(), false);
        }
        let a = new();
        g.insert(name.to_string(), a.clone());
        (a, true)
    }

    /// Every agent's state (a snapshot: the lock is not held while the caller works).
    pub(super) fn all(&self) -> Vec<Arc<AgentState>> {
        self.agents
            .lock()
            .expect("poisoned")
            .values()
            .cloned()
            .collect()
    }

    /// The agents with a live stream, sorted.
    pub(super) fn connected(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .all()
            .iter()
            .filter(|a| a.connected.load(Ordering::Relaxed))
            .map(|a| a.name.clone())
            .collect();
        v.sort();
        v
    }

    /// Drops everything kept of `name` (its state and namespace).
    pub(super) fn remove(&self, name: &str) {
        self.agents.lock().expect("poisoned").remove(name);
        self.namespaces.lock().expect("poisoned").remove(name);
    }

    /// The agent's own namespace from its last login (`AuthRequest.agentNamespace`).
    pub(super) fn namespace(&self, agent: &str) -> Option<String> {
        self.namespaces
            .lock()
            .expect("poisoned")
            .get(agent)
            .cloned()
    }

    pub(super) fn set_namespace(&self, agent: &str, ns: &str) {
        let mut g = self.namespaces.lock().expect("poisoned");
        if ns.is_empty() {
            g.remove(agent);
        } else {
            g.insert(agent.to_string(), ns.to_string());
        }
    }

    /// Ends `agent`'s live stream; whether it had one.
    pub(super) fn end_stream(&self, agent: &str) -> bool {
        let Some(a) = self.get(agent) else {
            return false;
        };
        let Some((_, h)) = a.session.lock().expect("poisoned").take() else {
            return false;
        };
        h.abort();
        a.connected.store(false, Ordering::SeqCst);
        true
    }

    /// Ends every agent's session task (the principal stops).
    pub(super) fn abort_all(&self) {
        // not `expect`: this also runs while a panic unwinds (`Drop`)
        let Ok(g) = self.agents.lock() else { return };
        for a in g.values() {
            if let Some((_, h)) = a.session.lock().expect("poisoned").take() {
                h.abort();
            }
        }
    }
}
