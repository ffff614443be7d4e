//! What the agent tells the principal about itself (**beyond the peer**): its own version and its
//! cluster's Kubernetes version (`GET /version` on its API server), added to the peer's
//! `clusterCacheInfoUpdate` payload as `agentVersion` and `serverVersion` (the raw `gitVersion`),
//! or `serverVersionError` when the API server does not answer — only towards our principal (it
//! names the extension in its login's response metadata, see [`Features`]): a peer principal gets
//! the peer's exact payloads. Sent when the stream comes up and whenever it changes; the version is asked again
//! every [`RECHECK`] ([`RETRY`] while it fails). The cache counts go with it when the local Argo
//! CD's cache was read (see `cache_info`).

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::{Map, Value, json};

use argocd_pull_agent_core::event::{Event, EventType, Target};
use argocd_pull_agent_core::session::Outbox;

use super::Inner;

/// The extensions the principal of the current stream understands (its login's response).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Features {
    /// versions in `clusterCacheInfoUpdate`
    pub agent_info: bool,
    /// `includeSyncedResourceList` in `request-resource-resync`
    pub resync_synced_list: bool,
}

impl Features {
    pub fn of(md: &tonic::metadata::MetadataMap) -> Features {
        use argocd_pull_agent_core::agent_status::{
            FEATURE_AGENT_INFO, FEATURE_RESYNC_SYNCED_LIST, FEATURES_HEADER,
        };
        let v = md
            .get(FEATURES_HEADER)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        let has = |f: &str| v.split(',').any(|x| x.trim() == f);
        Features {
            agent_info: has(FEATURE_AGENT_INFO),
            resync_synced_list: has(FEATURE_RESYNC_SYNCED_LIST),
        }
    }
}

/// How often a known version is asked for again (clusters are upgraded in place).
pub const RECHECK: Duration = Duration::from_secs(300);
/// How often a version that could not be read is asked for again.
pub const RETRY: Duration = Duration::from_secs(30);
/// How long the API server may take to answer.
const TIMEOUT: Duration = Duration::from_secs(10);

type Fetch = dyn Fn() -> BoxFuture<'static, Result<String, String>> + Send + Sync;

/// Where the agent reads its cluster's Kubernetes version (`gitVersion`).
#[derive(Clone)]
pub struct KubeVersionSource(Arc<Fetch>);

impl std::fmt::Debug for KubeVersionSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KubeVersionSource")
    }
}

impl KubeVersionSource {
    /// The local API server's `GET /version`.
    pub fn from_client(client: kube::Client) -> Self {
        KubeVersionSource::from_fn(move || {
            let c = client.clone();
            Box::pin(async move {
                c.apiserver_version()
                    .await
                    .map(|v| v.git_version)
                    .map_err(|e| format!("GET /version on the agent's API server failed: {e}"))
            })
        })
    }

    /// Any function (tests: a version, or an error).
    pub fn from_fn(
        f: impl Fn() -> BoxFuture<'static, Result<String, String>> + Send + Sync + 'static,
    ) -> Self {
        KubeVersionSource(Arc::new(f))
    }

    /// The `gitVersion`, or why there is none.
    pub async fn get(&self) -> Result<String, String> {
        match tokio::time::timeout(TIMEOUT, (self.0)()).await {
            Ok(r) => r,
            Err(_) => Err(format!(
                "GET /version on the agent's API server did not answer within {TIMEOUT:?}"
            )),
        }
    }
}

/// The `clusterCacheInfoUpdate` payload: the counts when known (`counts`: the peer's three
/// fields), the agent's version, the Kubernetes version or why it is unknown.
pub fn payload(
    counts: Option<&Value>,
    agent_version: &str,
    kube: &Result<String, String>,
) -> Value {
    let mut m = Map::new();
    if let Some(Value::Object(c)) = counts {
        m.extend(c.clone());
    }
    m.insert("agentVersion".into(), json!(agent_version));
    match kube {
        Ok(v) => m.insert("serverVersion".into(), json!(v)),
        Err(e) => m.insert("serverVersionError".into(), json!(e)),
    };
    Value::Object(m)
}

impl Inner {
    /// The cluster's Kubernetes version, asked now.
    async fn read_kube_version(&self) -> Result<String, String> {
        match &self.cfg.kube_version {
            Some(s) => s.get().await,
            None => Err("the agent has no Kubernetes client to ask its API server".into()),
        }
    }

    /// The info event with what is known now.
    pub(super) fn agent_info_event(&self) -> Option<Event> {
        let kube = self.kube_version.lock().expect("poisoned").clone()?;
        let counts = self.cache_counts.lock().expect("poisoned").clone();
        Some(Event::request(
            &self.source(),
            EventType::ClusterCacheInfoUpdate,
            Target::ClusterCacheInfoUpdate,
            payload(counts.as_ref(), argocd_pull_agent_core::VERSION, &kube),
        ))
    }

    /// While the stream is up: the info once, then again whenever the version changes (only to
    /// a principal that understands it: a peer principal gets the peer's payloads only).
    pub(super) async fn report_agent_info(&self, out: &Outbox) {
        if !self.principal_features.lock().expect("poisoned").agent_info {
            return;
        }
        let mut sent: Option<Result<String, String>> = None;
        loop {
            let kube = self.read_kube_version().await;
            if let Err(e) = &kube
                && sent.as_ref().is_none_or(|s| s.is_ok())
            {
                tracing::warn!(error = %e, "the cluster's Kubernetes version is unknown; the principal shows it as unknown with this reason");
            }
            let wait = if kube.is_ok() { RECHECK } else { RETRY };
            *self.kube_version.lock().expect("poisoned") = Some(kube.clone());
            if sent.as_ref() != Some(&kube)
                && let Some(ev) = self.agent_info_event()
            {
                out.send(ev).await;
                sent = Some(kube);
            }
            tokio::time::sleep(wait).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_is_the_peers_counts_plus_versions() {
        let counts = json!({"applicationsCount": 5, "apisCount": 40, "resourcesCount": 812});
        assert_eq!(
            argocd_pull_agent_core::event::gojson::to_vec(&payload(
                Some(&counts),
                "0.1.0",
                &Ok("v1.24.17".into())
            )),
            br#"{"applicationsCount":5,"apisCount":40,"resourcesCount":812,"agentVersion":"0.1.0","serverVersion":"v1.24.17"}"#
        );
        assert_eq!(
            payload(None, "0.1.0", &Err("no answer".into())),
            json!({"agentVersion": "0.1.0", "serverVersionError": "no answer"})
        );
    }
}
