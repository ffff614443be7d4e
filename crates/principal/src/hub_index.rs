//! What the principal knows of the hub, kept by its watches (hub.rs for Applications,
//! namespace_watch.rs for the rest): read here, never fetched per request.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::Value;

use super::mapping;
use super::state::HubCache;

#[derive(Default)]
pub(super) struct HubIndex {
    /// hub Applications by namespace and name, as compact JSON: a parsed `Value` takes ~5× the
    /// bytes, and 100,000 Applications are read only to rebuild a deferred key's events (with
    /// active/active, only those of the agents of the shards held)
    pub(super) apps: Mutex<HubCache>,
    /// AppProjects in the principal's namespace by name
    pub(super) projects: Mutex<HashMap<String, Value>>,
    /// Secrets of the principal's namespace that matter to agents, by name: repository /
    /// repo-creds Secrets and agent cluster secrets (see
    /// `argocd_pull_agent_core::repository::is_watched`)
    pub(super) secrets: Mutex<HashMap<String, Value>>,
    /// the GPG keys ConfigMap of the principal's namespace (at most one entry)
    pub(super) gpg: Mutex<HashMap<String, Value>>,
    /// blocked client certificates (ConfigMap `argocd-agent-tls-blocklist`)
    pub(super) blocklist: argocd_pull_agent_core::blocklist::Blocklist,
    /// destination-based mapping: the agent each hub Application was routed to
    pub(super) routes: Mutex<mapping::Routes>,
}

impl HubIndex {
    /// Hub Application `ns/name` as its wire bytes, if the watch has it.
    pub(super) fn app(&self, ns: &str, name: &str) -> Option<Arc<[u8]>> {
        let g = self.apps.lock().expect("poisoned");
        g.get(ns).and_then(|m| m.get(name)).cloned()
    }

    /// AppProject `name` of the principal's namespace, if the watch has it.
    pub(super) fn project(&self, name: &str) -> Option<Value> {
        self.projects.lock().expect("poisoned").get(name).cloned()
    }

    /// The Argo CD cluster an agent is mapped to: `data.name` of the cluster secret labelled
    /// with the agent's name (peer: internal/argocd/cluster `Manager.Mapping`); the agent's own
    /// name when there is none (the name `argocd-agentctl agent create` gives the cluster).
    pub(super) fn cluster_name(&self, agent: &str) -> String {
        self.secrets
            .lock()
            .expect("poisoned")
            .values()
            .find(|s| argocd_pull_agent_core::repository::cluster_agent(s) == Some(agent))
            .and_then(argocd_pull_agent_core::repository::cluster_name)
            .unwrap_or_else(|| agent.to_string())
    }
}
