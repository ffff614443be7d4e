//! Per-agent cluster status as the peer keeps it for Argo CD (internal/argocd/cluster/cluster.go):
//! the connection state (`SetAgentConnectionStatus`) and the agent's cache counts from
//! `clusterCacheInfoUpdate` events (`SetClusterCacheStats`), in the shape of Argo CD's
//! `v1alpha1.ClusterInfo`; beyond the peer, `serverVersion` (the managed cluster's Kubernetes
//! version, which our agent adds to its `clusterCacheInfoUpdate`) and the reason of a `Failed`.
//!
//! Our agent's `clusterCacheInfoUpdate` payload is the peer's `event.ClusterCacheInfo` plus
//! `agentVersion`, and `serverVersion` (its API server's `gitVersion`) or `serverVersionError`;
//! a peer principal ignores the extra fields (Go's `json.Unmarshal`). Without the counts (no local
//! Argo CD cache to read yet) the last counts are kept.

use serde_json::{Map, Value, json};

use argocd_pull_agent_core::Mode;
use argocd_pull_agent_core::agent_status::{self, AgentStatus, AppMapping, Connection, Reported};
use argocd_pull_agent_core::event::Event;
use argocd_pull_agent_core::session::HandleError;

/// The peer's `event.ClusterCacheInfo`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheCounts {
    pub applications: i64,
    pub apis: i64,
    pub resources: i64,
}

impl CacheCounts {
    /// Reads `{"applicationsCount", "apisCount", "resourcesCount"}`; `Err` names the bad field.
    pub fn from_json(v: &Value) -> Result<CacheCounts, String> {
        let n = |k: &str| match v.get(k) {
            None | Some(Value::Null) => Ok(0),
            Some(x) => x
                .as_i64()
                .ok_or_else(|| format!("cluster cache info field {k:?} is not an integer")),
        };
        if !v.is_object() {
            return Err("cluster cache info payload is not a JSON object".into());
        }
        Ok(CacheCounts {
            applications: n("applicationsCount")?,
            apis: n("apisCount")?,
            resources: n("resourcesCount")?,
        })
    }
}

/// What one `clusterCacheInfoUpdate` tells.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentInfo {
    /// `None`: the payload has none of the three counts.
    pub counts: Option<CacheCounts>,
    pub agent_version: Option<Reported>,
    /// `None`: the agent does not report it (a peer agent).
    pub kubernetes_version: Option<Reported>,
}

impl AgentInfo {
    pub fn from_json(v: &Value) -> Result<AgentInfo, String> {
        let counts = CacheCounts::from_json(v)?;
        let has_counts = ["applicationsCount", "apisCount", "resourcesCount"]
            .iter()
            .any(|k| v.get(*k).is_some_and(|x| !x.is_null()));
        let text = |k: &str| v.get(k).filter(|x| !x.is_null());
        let agent_version = text("agentVersion").map(|x| match x.as_str() {
            Some(s) => agent_status::agent_version(s),
            None => Reported::Unknown(format!("the agent reported version {x}, not a string")),
        });
        let kubernetes_version = match (text("serverVersion"), text("serverVersionError")) {
            (Some(x), _) => Some(match x.as_str() {
                Some(s) => agent_status::kubernetes_version(s),
                None => Reported::Unknown(format!(
                    "the agent reported Kubernetes version {x}, not a string"
                )),
            }),
            (None, Some(e)) => Some(Reported::Unknown(format!(
                "the agent could not read its cluster's version: {}",
                e.as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| e.to_string())
            ))),
            (None, None) => None,
        };
        Ok(AgentInfo {
            counts: has_counts.then_some(counts),
            agent_version,
            kubernetes_version,
        })
    }
}

/// The stream of an agent to this principal.
#[derive(Debug, Clone, PartialEq)]
pub enum Stream {
    /// Never connected to this principal process.
    Never,
    Up,
    /// Down since then, for that reason; `epoch` tells this drop from a later one.
    Down {
        since: jiff::Timestamp,
        why: String,
        epoch: u64,
    },
}

/// What the principal knows about one agent's cluster.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterState {
    /// What Argo CD and the hub show: true while the stream is up, and for a grace period after
    /// it dropped (an agent that reconnects in time is never shown `Failed`).
    pub connected: bool,
    /// When `connected` last changed (for `Failed`: when the agent was last seen).
    pub modified_at: jiff::Timestamp,
    /// Why it is `Failed` (empty while connected).
    pub reason: String,
    /// The last counts the agent reported.
    pub cache: Option<CacheCounts>,
    pub mode: Option<Mode>,
    pub mapping: Option<AppMapping>,
    pub agent_version: Reported,
    /// `agent_version` comes from the agent's own report (it then wins over its login's).
    pub agent_version_reported: bool,
    pub kubernetes_version: Reported,
    /// The published range of events queued for the agent, and the last sample's.
    pub queued: &'static str,
    pub sampled: &'static str,
    pub stream: Stream,
    /// Counts drops, so a grace timer knows whether its drop is still the current one.
    pub drops: u64,
}

impl Default for ClusterState {
    fn default() -> Self {
        Self {
            connected: false,
            modified_at: jiff::Timestamp::now(),
            reason: String::new(),
            cache: None,
            mode: None,
            mapping: None,
            agent_version: Reported::default(),
            agent_version_reported: false,
            kubernetes_version: Reported::default(),
            queued: "0",
            sampled: "0",
            stream: Stream::Never,
            drops: 0,
        }
    }
}

impl ClusterState {
    /// The state a principal starts from for an agent whose status a principal published on the
    /// hub: its connection since then, its versions and mode.
    pub fn from_published(p: &AgentStatus) -> ClusterState {
        let connected = p.connection == Connection::Successful;
        ClusterState {
            connected,
            modified_at: p.since,
            // the reason of a Failed, as the message carries it
            reason: match connected {
                true => String::new(),
                false => p
                    .message
                    .split_once(" with principal: ")
                    .map(|(_, r)| r.to_string())
                    .unwrap_or_default(),
            },
            mode: p.mode,
            mapping: p.mapping,
            agent_version: p.agent_version.clone(),
            kubernetes_version: p.kubernetes_version.clone(),
            queued: p.events_queued,
            sampled: p.events_queued,
            ..Default::default()
        }
    }

    /// Argo CD's connection message: the peer's, with the reason of a `Failed`.
    pub fn message(&self, agent: &str) -> String {
        match (self.connected, self.reason.is_empty()) {
            (true, _) => format!("Agent: '{agent}' is connected with principal"),
            (false, true) => format!("Agent: '{agent}' is disconnected with principal"),
            (false, false) => format!(
                "Agent: '{agent}' is disconnected with principal: {}",
                self.reason
            ),
        }
    }

    /// Argo CD's `ClusterInfo` JSON for `agent`: `connectionState` (`Successful` / `Failed`, the
    /// peer's message, when), `serverVersion` when known, the cache counts and
    /// `applicationsCount`.
    pub fn argocd_cluster_info(&self, agent: &str) -> Value {
        let status = if self.connected {
            "Successful"
        } else {
            "Failed"
        };
        let mut cache = Map::new();
        let c = self.cache.unwrap_or_default();
        // omitempty in Argo CD's ClusterCacheInfo
        if c.resources != 0 {
            cache.insert("resourcesCount".into(), json!(c.resources));
        }
        if c.apis != 0 {
            cache.insert("apisCount".into(), json!(c.apis));
        }
        let mut info = json!({
            "connectionState": {
                "status": status,
                "message": self.message(agent),
                "attemptedAt": agent_status::rfc3339(self.modified_at),
            },
        });
        // Argo CD's field order: serverVersion before cacheInfo (omitempty)
        if let Some(v) = self.kubernetes_version.known() {
            info["serverVersion"] = json!(v);
        }
        info["cacheInfo"] = Value::Object(cache);
        info["applicationsCount"] = json!(c.applications);
        info
    }

    /// What the hub shows of this agent.
    pub fn status(&self, agent: &str) -> AgentStatus {
        AgentStatus {
            connection: match self.connected {
                true => Connection::Successful,
                false => Connection::Failed,
            },
            since: self.modified_at,
            message: self.message(agent),
            mode: self.mode,
            mapping: self.mapping,
            agent_version: self.agent_version.clone(),
            kubernetes_version: self.kubernetes_version.clone(),
            events_queued: self.queued,
        }
    }

    /// Takes in a `clusterCacheInfoUpdate`; whether anything shown changed.
    pub fn apply_info(&mut self, info: AgentInfo) -> bool {
        let before = self.clone();
        if let Some(c) = info.counts {
            self.cache = Some(c);
        }
        if let Some(v) = info.agent_version {
            self.agent_version = v;
            self.agent_version_reported = true;
        }
        match info.kubernetes_version {
            Some(v) => self.kubernetes_version = v,
            None if self.kubernetes_version == Reported::default() => {
                self.kubernetes_version = Reported::Unknown(
                    "the agent does not report its cluster's Kubernetes version (argocd-agent agents do not)"
                        .into(),
                )
            }
            None => {}
        }
        *self != before
    }
}

impl super::Inner {
    /// A `clusterCacheInfoUpdate` from `a` (the peer's `processClusterCacheInfoUpdateEvent`).
    pub(super) fn cluster_cache_info(
        &self,
        a: &super::AgentState,
        ev: &Event,
    ) -> Result<(), HandleError> {
        let info = AgentInfo::from_json(&ev.data).map_err(HandleError::Permanent)?;
        if let Some(c) = info.counts {
            tracing::debug!(agent = %a.name, applications = c.applications, apis = c.apis, resources = c.resources, "cluster cache info updated");
        }
        let changed = self.clusters.with(&a.name, |s| s.apply_info(info));
        if changed {
            self.cluster_changed(&a.name);
        }
        Ok(())
    }

    /// Queues `agent`'s cluster info for the writers (Argo CD's cache, the hub), when this
    /// replica writes for it.
    pub(super) fn cluster_changed(&self, agent: &str) {
        if self.writes_for(agent) {
            self.clusters.queue_changed(agent);
        }
    }

    /// Queues `agent` for the hub writer only (its cluster secret changed).
    pub(super) fn status_changed(&self, agent: &str) {
        if self.writes_for(agent) {
            self.clusters.queue_status(agent);
        }
    }

    /// Writes changed agents' cluster info at once and every agent's every
    /// [`argocd_pull_agent_core::argocd_cache::REFRESH`] (before Argo CD's 10 minute expiry).
    pub(super) async fn write_cluster_info(
        self: std::sync::Arc<Self>,
        cfg: argocd_pull_agent_core::argocd_cache::ArgoCacheConfig,
        mut rx: tokio::sync::mpsc::UnboundedReceiver<String>,
    ) {
        let w = argocd_pull_agent_core::argocd_cache::ClusterInfoWriter::new(cfg);
        let mut tick = tokio::time::interval(argocd_pull_agent_core::argocd_cache::REFRESH);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let names: Vec<String> = tokio::select! {
                n = rx.recv() => match n {
                    Some(n) => {
                        let mut v = vec![n];
                        while let Ok(n) = rx.try_recv() {
                            if !v.contains(&n) { v.push(n); }
                        }
                        v
                    }
                    None => return,
                },
                _ = tick.tick() => self.clusters.agents(),
            };
            for n in names {
                let Some(s) = self.clusters.get(&n) else {
                    continue;
                };
                let info = s.argocd_cluster_info(&n);
                let server = self
                    .clusters
                    .server(&n)
                    .unwrap_or_else(|| w.config().server_url(&n));
                if let Err(e) = w.write_cluster_info(&server, &info).await {
                    tracing::warn!(agent = %n, error = %format!("{e:#}"), "writing the cluster info to Argo CD's Redis failed; retried at the next change or refresh");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_info_has_argocds_shape() {
        let mut s = ClusterState {
            connected: true,
            modified_at: "2026-11-25T10:00:00Z".parse().unwrap(),
            cache: Some(
                CacheCounts::from_json(
                    &json!({"applicationsCount": 3, "apisCount": 40, "resourcesCount": 900}),
                )
                .unwrap(),
            ),
            ..Default::default()
        };
        assert_eq!(
            s.argocd_cluster_info("c1"),
            json!({"connectionState": {"status": "Successful", "message": "Agent: 'c1' is connected with principal", "attemptedAt": "2026-11-25T10:00:00Z"},
                   "cacheInfo": {"resourcesCount": 900, "apisCount": 40}, "applicationsCount": 3})
        );
        s.kubernetes_version = Reported::Known("v1.24.17".into());
        assert_eq!(s.argocd_cluster_info("c1")["serverVersion"], "v1.24.17");
        s.connected = false;
        assert_eq!(
            s.argocd_cluster_info("c1")["connectionState"]["status"],
            "Failed"
        );
        assert_eq!(
            s.argocd_cluster_info("c1")["connectionState"]["message"],
            "Agent: 'c1' is disconnected with principal"
        );
        s.reason = "stream closed by peer".into();
        assert_eq!(
            s.argocd_cluster_info("c1")["connectionState"]["message"],
            "Agent: 'c1' is disconnected with principal: stream closed by peer"
        );
        assert!(
            CacheCounts::from_json(&json!({"apisCount": "x"}))
                .unwrap_err()
                .contains("apisCount")
        );
    }

    #[test]
    fn agent_info_extends_the_peers_payload_and_keeps_counts_it_lacks() {
        let peer = AgentInfo::from_json(
            &json!({"applicationsCount": 5, "apisCount": 40, "resourcesCount": 812}),
        )
        .unwrap();
        assert_eq!(peer.agent_version, None);
        assert_eq!(peer.kubernetes_version, None);
        let mut s = ClusterState::default();
        assert!(s.apply_info(peer.clone()));
        match &s.kubernetes_version {
            Reported::Unknown(why) => assert!(why.contains("does not report"), "{why}"),
            k => panic!("{k:?}"),
        }
        assert!(!s.apply_info(peer), "the same info again changes nothing");
        let ours = AgentInfo::from_json(
            &json!({"agentVersion": "0.1.0", "serverVersion": "v1.24.17+k3s1"}),
        )
        .unwrap();
        assert!(s.apply_info(ours));
        assert_eq!(s.cache.unwrap().resources, 812, "counts kept");
        assert_eq!(s.kubernetes_version, Reported::Known("v1.24.17".into()));
        assert_eq!(s.agent_version, Reported::Known("0.1.0".into()));
        // a Failed read back from the hub keeps its reason
        let mut f = s.clone();
        f.connected = false;
        f.reason = "the agent closed the stream".into();
        assert_eq!(
            ClusterState::from_published(&f.status("c1")).message("c1"),
            f.message("c1")
        );
        let failing = AgentInfo::from_json(
            &json!({"agentVersion": "0.1.0", "serverVersionError": "GET /version: 503 Service Unavailable"}),
        )
        .unwrap();
        s.apply_info(failing);
        match &s.kubernetes_version {
            Reported::Unknown(why) => assert!(why.contains("503"), "{why}"),
            k => panic!("unknown expected, never healthy: {k:?}"),
        }
        assert_eq!(s.argocd_cluster_info("c1").get("serverVersion"), None);
    }
}
