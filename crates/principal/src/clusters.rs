//! What Argo CD and the hub show of each agent this principal serves: its connection state,
//! versions and cache counts ([`ClusterState`]), what its cluster secret shows, the server URL
//! Argo CD knows it by, and the agents whose shown state changed, queued for the writers
//! (Argo CD's cluster cache, the hub's cluster secrets).

use std::collections::HashMap;
use std::sync::Mutex;

use tokio::sync::mpsc::UnboundedSender;

use argocd_pull_agent_core::agent_status::{AgentStatus, SecretState};

use super::cluster_info::ClusterState;

pub(super) struct Clusters {
    states: Mutex<HashMap<String, ClusterState>>,
    /// what each agent's cluster secret shows of it (kept by the cluster-secret watch)
    pub(super) secrets: Mutex<HashMap<String, SecretState>>,
    /// the cluster-secret watch has its first list
    pub(super) secrets_synced: tokio::sync::watch::Sender<bool>,
    /// agent → server URL from Argo CD cluster secrets
    pub(super) servers: Mutex<HashMap<String, String>>,
    /// agents whose cluster info changed, for the Argo CD cache writer
    to_argocd: Option<UnboundedSender<String>>,
    /// ... and for the hub writer (`--publish-agent-status`)
    to_hub: Option<UnboundedSender<String>>,
}

impl Clusters {
    /// Nothing known yet; changes are queued to the writers that run.
    pub(super) fn new(
        to_argocd: Option<UnboundedSender<String>>,
        to_hub: Option<UnboundedSender<String>>,
    ) -> Self {
        Clusters {
            states: Mutex::default(),
            secrets: Mutex::default(),
            secrets_synced: tokio::sync::watch::channel(false).0,
            servers: Mutex::default(),
            to_argocd,
            to_hub,
        }
    }

    /// What a principal published on the hub about `agent`, if anything.
    fn published(&self, agent: &str) -> Option<AgentStatus> {
        let g = self.secrets.lock().expect("poisoned");
        AgentStatus::from_annotations(&g.get(agent)?.annotations)
    }

    /// Runs `f` on `agent`'s state; an agent new to this process starts from what the hub
    /// shows, else from nothing known.
    pub(super) fn with<R>(&self, agent: &str, f: impl FnOnce(&mut ClusterState) -> R) -> R {
        let mut g = self.states.lock().expect("poisoned");
        if !g.contains_key(agent) {
            let s = self
                .published(agent)
                .map(|p| ClusterState::from_published(&p))
                .unwrap_or_default();
            g.insert(agent.to_string(), s);
        }
        f(g.get_mut(agent).expect("inserted"))
    }

    /// `agent`'s state, if this principal has one.
    pub(super) fn get(&self, agent: &str) -> Option<ClusterState> {
        self.states.lock().expect("poisoned").get(agent).cloned()
    }

    /// The agents this principal keeps a state of.
    pub(super) fn agents(&self) -> Vec<String> {
        self.states
            .lock()
            .expect("poisoned")
            .keys()
            .cloned()
            .collect()
    }

    pub(super) fn remove(&self, agent: &str) {
        self.states.lock().expect("poisoned").remove(agent);
    }

    /// The server URL Argo CD knows `agent` by (its cluster secret), if any.
    pub(super) fn server(&self, agent: &str) -> Option<String> {
        self.servers.lock().expect("poisoned").get(agent).cloned()
    }

    /// Queues `agent` for both writers.
    pub(super) fn queue_changed(&self, agent: &str) {
        for tx in [&self.to_argocd, &self.to_hub].into_iter().flatten() {
            let _ = tx.send(agent.to_string());
        }
    }

    /// Queues `agent` for the hub writer only.
    pub(super) fn queue_status(&self, agent: &str) {
        if let Some(tx) = &self.to_hub {
            let _ = tx.send(agent.to_string());
        }
    }
}
