//! An agent's connection as Argo CD and the hub show it (**beyond the peer**, whose principal
//! writes `Failed` the moment a stream ends and nothing when it restarts):
//!
//! * `Successful` from the moment the agent's stream is up;
//! * `Failed` with the reason once the stream has been down for half the heartbeat interval
//!   (`--heartbeat-interval`): an agent that reconnects within that time — its pod restarted, a
//!   load balancer cut the connection, the principal failed over — is never shown `Failed`. A
//!   silent drop is noticed by the HTTP/2 keepalive within the interval plus its timeout, so the
//!   state turns `Failed` within 2 × the interval of any drop;
//! * a principal starts from what the hub shows (the annotations a principal published on the
//!   cluster secrets): an agent that reconnects keeps its `Successful` and its "since" — no write,
//!   no flap across principal restarts and failovers; one that does not come back within twice
//!   the interval turns `Failed` ("not connected since this principal started");
//! * the events queued for each agent are sampled every interval; a new range is published once
//!   two samples in a row agree, so a busy queue does not cause a write per event.

use std::sync::Arc;
use std::time::Duration;

use argocd_pull_agent_core::Mode;
use argocd_pull_agent_core::agent_status::{self, AgentStatus, AppMapping, Connection};

use super::Inner;
use super::cluster_info::Stream;

/// The HTTP/2 keepalive timeout for a heartbeat interval: a third of it, between 1 s and 10 s
/// (10 s at the default 30 s, as before the interval became a flag).
pub fn keepalive_timeout(heartbeat: Duration) -> Duration {
    (heartbeat / 3).clamp(Duration::from_secs(1), Duration::from_secs(10))
}

/// Why a stream ended, in a few words for Argo CD's message and the hub (the log line has it all).
pub fn drop_reason(end: &argocd_pull_agent_core::session::SessionEnd) -> String {
    use argocd_pull_agent_core::session::SessionEnd;
    match end {
        SessionEnd::Closed => "the agent closed the stream".into(),
        SessionEnd::OutboundClosed => "the stream to the agent closed".into(),
        SessionEnd::Status(s) if s.message().is_empty() => {
            format!("the stream failed ({:?})", s.code())
        }
        SessionEnd::Status(s) => format!("the stream failed: {}", s.message()),
    }
}

impl Inner {
    /// Drops an agent's stream (it may log in again, subject to the blocklist): requests, log
    /// streams and terminals waiting on it end now, not at a timeout.
    pub(super) fn disconnect(&self, agent: &str) -> bool {
        if !self.sessions.end_stream(agent) {
            return false;
        }
        self.relays.agent_gone(agent);
        self.metrics.agent_disconnected(agent);
        true
    }

    /// How long a dropped stream may stay down before the agent is shown `Failed`.
    pub(super) fn disconnect_grace(&self) -> Duration {
        self.cfg.heartbeat / 2
    }

    /// An agent logged in: its mode, which hub Applications are its, and its version as the
    /// login tells it (its own report, when it sends one, wins).
    pub(super) fn agent_logged_in(&self, agent: &str, mode: Mode, version: Option<&str>) {
        let mapping = match self.cfg.destination_based_mapping && mode == Mode::Managed {
            true => AppMapping::Destination,
            false => AppMapping::Namespace,
        };
        let changed = self.clusters.with(agent, |s| {
            let before = s.clone();
            s.mode = Some(mode);
            s.mapping = Some(mapping);
            if let (Some(v), false) = (version, s.agent_version_reported) {
                s.agent_version = agent_status::agent_version(v);
            }
            // before its first stream an agent is not shown (its stream shows it)
            *s != before && s.stream != Stream::Never
        });
        if changed {
            self.cluster_changed(agent);
        }
    }

    /// `agent`'s stream is up.
    pub(super) fn stream_up(&self, agent: &str) {
        self.clusters.with(agent, |s| {
            s.stream = Stream::Up;
            if !s.connected {
                s.connected = true;
                s.modified_at = jiff::Timestamp::now();
                s.reason.clear();
            }
        });
        // Argo CD's cache is written on every stream (the peer's `SetAgentConnectionStatus`); the
        // hub only when what it shows changed (the writer compares)
        self.cluster_changed(agent);
    }

    /// `agent`'s (current) stream ended for `why`: `Failed` after the grace period unless it is
    /// back by then.
    pub(super) fn stream_down(self: &Arc<Self>, agent: &str, why: String) {
        let epoch = self.clusters.with(agent, |s| {
            s.drops += 1;
            s.stream = Stream::Down {
                since: jiff::Timestamp::now(),
                why,
                epoch: s.drops,
            };
            s.drops
        });
        let me = Arc::downgrade(self);
        let agent = agent.to_string();
        let grace = self.disconnect_grace();
        // a timer, not a task of the principal: it holds no reference, and the writers that
        // would publish its outcome stop with the principal
        tokio::spawn(async move {
            tokio::time::sleep(grace).await;
            if let Some(me) = me.upgrade() {
                me.grace_expired(&agent, epoch);
            }
        });
    }

    fn grace_expired(&self, agent: &str, epoch: u64) {
        let changed = self.clusters.with(agent, |s| match &s.stream {
            Stream::Down {
                since,
                why,
                epoch: e,
            } if *e == epoch && s.connected => {
                s.connected = false;
                s.modified_at = *since;
                s.reason = why.clone();
                true
            }
            _ => false,
        });
        if changed {
            tracing::info!(agent, grace = ?self.disconnect_grace(), "agent did not reconnect in time: shown as disconnected");
            self.cluster_changed(agent);
        }
    }

    /// Twice the heartbeat interval after start: agents the hub shows connected that have not
    /// connected to this principal are shown `Failed`.
    pub(super) async fn sweep_after_start(self: Arc<Self>) {
        tokio::time::sleep(self.cfg.heartbeat * 2).await;
        self.sweep_unconnected(self.started_at, |a| self.writes_for(a));
    }

    /// Agents of `select` the hub shows connected that have not connected to this principal
    /// since `since` are shown `Failed`.
    pub(super) fn sweep_unconnected(&self, since: jiff::Timestamp, select: impl Fn(&str) -> bool) {
        let shown: Vec<String> = self
            .clusters
            .secrets
            .lock()
            .expect("poisoned")
            .iter()
            .filter(|(a, s)| {
                select(a)
                    && AgentStatus::from_annotations(&s.annotations)
                        .is_some_and(|p| p.connection == Connection::Successful)
            })
            .map(|(a, _)| a.clone())
            .collect();
        for agent in shown {
            let changed = self.clusters.with(&agent, |s| {
                if s.stream == Stream::Up || !s.connected {
                    return false;
                }
                s.connected = false;
                s.modified_at = since;
                s.reason = format!(
                    "the agent has not connected to this principal since it started at {}",
                    agent_status::rfc3339(since)
                );
                true
            });
            if changed {
                tracing::info!(
                    agent,
                    "agent shown connected on the hub has not connected to this principal: shown as disconnected"
                );
                self.cluster_changed(&agent);
            }
        }
    }

    /// Samples every agent's send queue; returns the agents whose published range changed (a
    /// range is published once two samples in a row agree).
    pub(super) fn sample_queues(&self) -> Vec<String> {
        let depths: Vec<(String, usize)> = self
            .sessions
            .all()
            .iter()
            .map(|a| {
                let q = a.queue.stats();
                (a.name.clone(), q.pending + q.inflight + q.deferred)
            })
            .collect();
        let mut changed = Vec::new();
        for (agent, depth) in depths {
            let r = agent_status::queue_range(depth);
            let c = self.clusters.with(&agent, |s| {
                let stable = s.sampled == r;
                s.sampled = r;
                if stable && s.queued != r {
                    s.queued = r;
                    return true;
                }
                false
            });
            if c {
                changed.push(agent);
            }
        }
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drop_reasons_are_short() {
        use argocd_pull_agent_core::session::SessionEnd;
        let s = tonic::Status::unknown("h2 protocol error: error reading a body from connection");
        assert_eq!(
            drop_reason(&SessionEnd::Status(s)),
            "the stream failed: h2 protocol error: error reading a body from connection"
        );
        assert_eq!(
            drop_reason(&SessionEnd::Closed),
            "the agent closed the stream"
        );
    }

    #[test]
    fn keepalive_timeout_is_a_third_of_the_interval_within_bounds() {
        let s = Duration::from_secs;
        assert_eq!(keepalive_timeout(s(30)), s(10), "the former fixed values");
        assert_eq!(keepalive_timeout(s(2)), s(1));
        assert_eq!(keepalive_timeout(s(6)), s(2));
        assert_eq!(keepalive_timeout(s(600)), s(10));
        // a silent drop is noticed within interval + timeout, Failed half an interval later:
        // within 2 × the interval
        for h in [2, 5, 30, 120] {
            let h = s(h);
            assert!(h + keepalive_timeout(h) + h / 2 <= h * 2, "{h:?}");
        }
    }
}
