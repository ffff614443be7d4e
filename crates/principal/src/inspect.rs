//! What a running principal tells about itself: where its proxies listen, what waits on agents,
//! and each agent's state (for the binary, tests, benchmarks and diagnostics).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use serde_json::Value;

use super::Principal;
use argocd_pull_agent_core::metrics::Metrics;

impl Principal {
    /// Where the resource proxy listens (`None`: disabled).
    pub fn resource_proxy_addr(&self) -> Option<SocketAddr> {
        self.resource_proxy_addr
    }

    /// Where the Redis proxy listens (`None`: disabled).
    pub fn redis_proxy_addr(&self) -> Option<SocketAddr> {
        self.redis_proxy_addr
    }

    /// Redis-proxy requests waiting for an agent's answer, and open Argo CD connections.
    pub fn redis_proxy_load(&self) -> (usize, usize) {
        (
            self.inner.relays.redis.pending(),
            self.inner.relays.redis.connections(),
        )
    }

    /// Argo CD's `ClusterInfo` for `agent` (connection state and cache counts), as the peer
    /// writes it to Argo CD's cache; `None` for an agent never seen.
    pub fn cluster_info(&self, agent: &str) -> Option<Value> {
        let s = self.inner.clusters.get(agent)?;
        Some(s.argocd_cluster_info(agent))
    }

    /// What this principal shows of `agent` on the hub (its cluster secret's annotations);
    /// `None` for an agent it knows nothing of.
    pub fn agent_status(
        &self,
        agent: &str,
    ) -> Option<argocd_pull_agent_core::agent_status::AgentStatus> {
        Some(self.inner.clusters.get(agent)?.status(agent))
    }

    /// Resource-proxy requests waiting for an agent's answer.
    pub fn pending_resource_requests(&self) -> usize {
        self.inner.relays.requests.len()
    }

    /// Container-log requests and web-terminal sessions in flight.
    pub fn log_and_terminal_sessions(&self) -> (usize, usize) {
        (
            self.inner.relays.logs.len(),
            self.inner.relays.terminals.len(),
        )
    }

    pub fn metrics(&self) -> Arc<Metrics> {
        self.inner.metrics.clone()
    }

    /// Agents with a live stream.
    pub fn connected_agents(&self) -> Vec<String> {
        self.inner.sessions.connected()
    }

    /// Whether an agent's send queue is empty (everything ACKed).
    pub fn agent_idle(&self, agent: &str) -> bool {
        self.inner.agent(agent).is_none_or(|a| a.queue.is_idle())
    }

    /// One line about an agent's state here (for diagnostics: benchmarks, support).
    pub fn agent_debug(&self, agent: &str) -> String {
        let Some(a) = self.inner.agent(agent) else {
            return format!("{agent}: never seen");
        };
        let q = a.queue.stats();
        format!(
            "{agent}: mode={} connected={} generation={} session={:?} resynced={} outbox={:?} queue(pending={} inflight={} deferred={}) views={}",
            a.mode.lock().expect("poisoned").as_str(),
            a.connected.load(Ordering::SeqCst),
            a.generation.load(Ordering::SeqCst),
            a.session
                .lock()
                .expect("poisoned")
                .as_ref()
                .map(|(g, _)| *g),
            a.resynced.load(Ordering::SeqCst),
            a.outbox.lock().expect("poisoned").as_ref().map(|(g, _)| *g),
            q.pending,
            q.inflight,
            q.deferred,
            a.views.lock().expect("poisoned").len(),
        )
    }
}
