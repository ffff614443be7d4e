//! The peer agent's periodic `clusterCacheInfoUpdate` (agent/outbound.go
//! `addClusterCacheInfoUpdateToQueue`, managed mode): the local Argo CD's cluster info for
//! `https://kubernetes.default.svc`, read from the local Redis, sent as counts to the principal.
//! Nothing is sent while the local cache has no entry (as the peer). Our additions ride along
//! (the agent's and the cluster's versions, see `agent_info`).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use argocd_pull_agent_core::argocd_cache::{RedisClient, cluster_info_key, decode_value};
use argocd_pull_agent_core::event::{Event, EventType, Target};

use super::Inner;

/// The in-cluster server Argo CD caches the local cluster's info under.
pub const IN_CLUSTER: &str = "https://kubernetes.default.svc";

/// Where the local Argo CD keeps its cache.
#[derive(Clone, Debug)]
pub struct LocalRedis {
    /// `host:port` (the peer's `--redis-addr`).
    pub address: String,
    pub password: Option<String>,
}

/// The peer's `ClusterCacheInfo` payload from Argo CD's `ClusterInfo`.
pub fn counts_payload(info: &Value) -> Value {
    let n = |v: &Value| v.as_i64().unwrap_or(0);
    json!({
        "applicationsCount": n(&info["applicationsCount"]),
        "apisCount": n(&info["cacheInfo"]["apisCount"]),
        "resourcesCount": n(&info["cacheInfo"]["resourcesCount"]),
    })
}

impl Inner {
    /// Every `interval`: read the local cluster info and send it when the stream is up.
    pub(super) async fn send_cache_info_loop(
        self: Arc<Self>,
        redis: LocalRedis,
        interval: Duration,
    ) {
        let client = RedisClient::new(&redis.address, redis.password.clone());
        let key = cluster_info_key(IN_CLUSTER, true);
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await; // the peer's ticker fires first after one interval
        let mut failing = false;
        loop {
            tick.tick().await;
            let out = self.outbox.lock().expect("poisoned").clone();
            let Some(out) = out else { continue };
            let raw = match client.call(&[b"GET", key.as_bytes()]).await {
                Ok(v) => {
                    failing = false;
                    match v {
                        Some(raw) => raw,
                        None => continue, // cache miss: nothing to report
                    }
                }
                Err(e) => {
                    // warned once per outage, not every interval
                    if !failing {
                        tracing::warn!(address = %redis.address, error = %format!("{e:#}"), "reading the local Argo CD cluster info failed (no cluster cache info is sent until it works)");
                    }
                    failing = true;
                    continue;
                }
            };
            let info = match decode_value(&raw, true) {
                Ok(v) => v,
                Err(e) => {
                    tracing::warn!(error = %format!("{e:#}"), "the local Argo CD cluster info is unreadable");
                    continue;
                }
            };
            let counts = counts_payload(&info);
            *self.cache_counts.lock().expect("poisoned") = Some(counts.clone());
            let ours = self.principal_features.lock().expect("poisoned").agent_info;
            let data = match self.kube_version.lock().expect("poisoned").clone() {
                Some(kube) if ours => super::agent_info::payload(
                    Some(&counts),
                    argocd_pull_agent_core::VERSION,
                    &kube,
                ),
                _ => counts,
            };
            let ev = Event::request(
                &self.source(),
                EventType::ClusterCacheInfoUpdate,
                Target::ClusterCacheInfoUpdate,
                data,
            );
            out.send(ev).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_come_from_argocds_cluster_info() {
        let info = json!({"connectionState": {"status": "Successful"}, "cacheInfo": {"apisCount": 40, "resourcesCount": 812}, "applicationsCount": 5});
        assert_eq!(
            argocd_pull_agent_core::event::gojson::to_vec(&counts_payload(&info)),
            br#"{"applicationsCount":5,"apisCount":40,"resourcesCount":812}"#
        );
    }
}
