//! Publishes each agent's status on its cluster secret (see [`argocd_pull_agent_core::agent_status`]): a JSON
//! merge patch of the annotations that differ from what the secret carries (known from the
//! cluster-secret watch), nothing when they are equal — a fleet in a steady state costs no write.
//! Changes are batched for a moment and written a few at a time; a failed write is retried every
//! [`RETRY`]. Agents without a cluster secret are shown in Argo CD's cache only.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{Patch, PatchParams};

use super::Inner;

/// How long changes are gathered before they are written.
const BATCH: Duration = Duration::from_millis(100);
/// How often a failed write is tried again.
const RETRY: Duration = Duration::from_secs(10);
/// Writes in flight.
const CONCURRENT: usize = 8;

enum Outcome {
    Written,
    Unchanged,
    Retry(String),
    Forbidden(String),
}

impl Inner {
    /// The writer task: waits for the cluster-secret watch's first list, then publishes what
    /// changes (and samples the send queues every heartbeat interval).
    pub(super) async fn publish_status(
        self: Arc<Self>,
        client: kube::Client,
        mut rx: tokio::sync::mpsc::UnboundedReceiver<String>,
    ) {
        let mut synced = self.clusters.secrets_synced.subscribe();
        let _ = synced.wait_for(|s| *s).await;
        let api: Api<Secret> = Api::namespaced(client, &self.cfg.namespace);
        let mut dirty: BTreeSet<String> = BTreeSet::new();
        let start = tokio::time::Instant::now();
        let mut sample = tokio::time::interval_at(start + self.cfg.heartbeat, self.cfg.heartbeat);
        sample.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut retry = tokio::time::interval_at(start + RETRY, RETRY);
        retry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut forbidden = false;
        loop {
            tokio::select! {
                n = rx.recv() => match n {
                    Some(n) => {
                        dirty.insert(n);
                        tokio::time::sleep(BATCH).await;
                        while let Ok(n) = rx.try_recv() {
                            dirty.insert(n);
                        }
                    }
                    None => return,
                },
                _ = sample.tick() => dirty.extend(self.sample_queues()),
                _ = retry.tick() => {}
            }
            if dirty.is_empty() {
                continue;
            }
            let batch = std::mem::take(&mut dirty);
            let me = &self;
            let api = &api;
            let results: Vec<(String, Outcome)> = futures::stream::iter(batch)
                .map(|agent| async move {
                    let o = me.publish_one(api, &agent).await;
                    (agent, o)
                })
                .buffer_unordered(CONCURRENT)
                .collect()
                .await;
            for (agent, o) in results {
                match o {
                    Outcome::Written | Outcome::Unchanged => {}
                    Outcome::Retry(e) => {
                        tracing::warn!(agent, error = %e, "publishing the agent's status on its cluster secret failed; retrying");
                        dirty.insert(agent);
                    }
                    Outcome::Forbidden(e) => {
                        // RBAC without `patch` on Secrets: said once, not retried
                        if !forbidden {
                            tracing::warn!(agent, error = %e, "the principal may not patch cluster secrets: agent status is shown in Argo CD's cache only; grant `patch` on secrets in the principal's namespace or pass --publish-agent-status=false");
                        }
                        forbidden = true;
                    }
                }
            }
        }
    }

    async fn publish_one(&self, api: &Api<Secret>, agent: &str) -> Outcome {
        let Some(state) = self.clusters.get(agent) else {
            return Outcome::Unchanged;
        };
        let Some(secret) = self
            .clusters
            .secrets
            .lock()
            .expect("poisoned")
            .get(agent)
            .cloned()
        else {
            return Outcome::Unchanged; // no cluster secret: nothing to annotate
        };
        let status = state.status(agent);
        let Some(patch) = secret.patch_for(&status) else {
            return Outcome::Unchanged;
        };
        match api
            .patch(&secret.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                let mut g = self.clusters.secrets.lock().expect("poisoned");
                if let Some(s) = g.get_mut(agent).filter(|s| s.name == secret.name) {
                    *s = secret.applied(&status);
                }
                tracing::debug!(agent, %patch, "agent status published on its cluster secret");
                Outcome::Written
            }
            Err(kube::Error::Api(e)) if e.code == 404 => Outcome::Unchanged,
            Err(kube::Error::Api(e)) if e.code == 403 => Outcome::Forbidden(e.message),
            Err(e) => Outcome::Retry(e.to_string()),
        }
    }
}
