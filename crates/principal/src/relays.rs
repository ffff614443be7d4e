//! What waits on an agent's answer, whatever brought it to the principal: resource-proxy
//! requests (and the log streams and terminals that answer through the same requests), the
//! container-log and web-terminal sessions, and the Redis proxy's commands and Argo CD's
//! connections. When an agent's stream ends, all of its waiting requests fail at once
//! ([`Relays::agent_gone`]), not at their timeout.

use super::{logs, redis_proxy, resource_proxy, terminal};

#[derive(Default)]
pub(super) struct Relays {
    /// resource-proxy requests (and log/terminal openings) waiting for their agent's answer
    pub(super) requests: resource_proxy::Pending,
    /// container-log requests (logs.rs)
    pub(super) logs: logs::LogSessions,
    /// web-terminal sessions (terminal.rs)
    pub(super) terminals: terminal::TerminalSessions,
    /// Redis-proxy requests waiting for their agent, and Argo CD's connections
    pub(super) redis: redis_proxy::Tracker,
}

impl Relays {
    /// `agent`'s stream ended: what waits on it fails now (502 / a Redis error).
    pub(super) fn agent_gone(&self, agent: &str) {
        self.requests.fail_agent(agent);
        self.redis.agent_gone(agent);
    }
}
