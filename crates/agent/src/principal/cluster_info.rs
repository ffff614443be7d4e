//! Per-agent cluster status as the peer keeps it for Argo CD (internal/argocd/cluster/cluster.go):
//! the connection state (`SetAgentConnectionStatus`) and the agent's cache counts from
//! `clusterCacheInfoUpdate` events (`SetClusterCacheStats`), in the shape of Argo CD's
//! `v1alpha1.ClusterInfo`.

use serde_json::{Map, Value, json};

use crate::event::Event;
use crate::session::HandleError;

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

/// What the principal knows about one agent's cluster.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterState {
    pub connected: bool,
    /// When the connection state last changed.
    pub modified_at: jiff::Timestamp,
    /// The last counts the agent reported.
    pub cache: Option<CacheCounts>,
}

impl Default for ClusterState {
    fn default() -> Self {
        Self {
            connected: false,
            modified_at: jiff::Timestamp::now(),
            cache: None,
        }
    }
}

impl ClusterState {
    /// Argo CD's `ClusterInfo` JSON as the peer writes it for `agent`: `connectionState`
    /// (`Successful` / `Failed`, "Agent: '<agent>' is connected with principal"), the cache counts
    /// and `applicationsCount`.
    pub fn argocd_cluster_info(&self, agent: &str) -> Value {
        let (status, state) = if self.connected {
            ("Successful", "connected")
        } else {
            ("Failed", "disconnected")
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
        json!({
            "connectionState": {
                "status": status,
                "message": format!("Agent: '{agent}' is {state} with principal"),
                "attemptedAt": self.modified_at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
            },
            "cacheInfo": Value::Object(cache),
            "applicationsCount": c.applications,
        })
    }
}

impl super::Inner {
    /// A `clusterCacheInfoUpdate` from `a` (the peer's `processClusterCacheInfoUpdateEvent`).
    pub(super) fn cluster_cache_info(
        &self,
        a: &super::AgentState,
        ev: &Event,
    ) -> Result<(), HandleError> {
        let counts = CacheCounts::from_json(&ev.data).map_err(HandleError::Permanent)?;
        tracing::debug!(agent = %a.name, applications = counts.applications, apis = counts.apis, resources = counts.resources, "cluster cache info updated");
        a.cluster.lock().expect("poisoned").cache = Some(counts);
        self.cluster_changed(&a.name);
        Ok(())
    }

    /// Queues `agent`'s cluster info for the Argo CD cache writer (when one is configured).
    pub(super) fn cluster_changed(&self, agent: &str) {
        if let Some(tx) = &self.cluster_changed {
            let _ = tx.send(agent.to_string());
        }
    }

    /// Writes changed agents' cluster info at once and every agent's every
    /// [`crate::argocd_cache::REFRESH`] (before Argo CD's 10 minute expiry).
    pub(super) async fn write_cluster_info(
        self: std::sync::Arc<Self>,
        cfg: crate::argocd_cache::ArgoCacheConfig,
        mut rx: tokio::sync::mpsc::UnboundedReceiver<String>,
    ) {
        let w = crate::argocd_cache::ClusterInfoWriter::new(cfg);
        let mut tick = tokio::time::interval(crate::argocd_cache::REFRESH);
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
                _ = tick.tick() => self.agents.lock().expect("poisoned").keys().cloned().collect(),
            };
            for n in names {
                let Some(a) = self.agent(&n) else { continue };
                let info = a.cluster.lock().expect("poisoned").argocd_cluster_info(&n);
                let server = self
                    .cluster_server(&n)
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
        };
        assert_eq!(
            s.argocd_cluster_info("c1"),
            json!({"connectionState": {"status": "Successful", "message": "Agent: 'c1' is connected with principal", "attemptedAt": "2026-11-25T10:00:00Z"},
                   "cacheInfo": {"resourcesCount": 900, "apisCount": 40}, "applicationsCount": 3})
        );
        s.connected = false;
        assert_eq!(
            s.argocd_cluster_info("c1")["connectionState"]["status"],
            "Failed"
        );
        assert!(
            CacheCounts::from_json(&json!({"apisCount": "x"}))
                .unwrap_err()
                .contains("apisCount")
        );
    }
}
