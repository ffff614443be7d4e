//! Agent → cluster server URL from Argo CD cluster secrets, as the peer's cluster manager maps
//! them (internal/argocd/cluster/informer.go): Secrets in the principal's namespace labelled
//! `argocd.argoproj.io/secret-type=cluster` with `argocd-agent.argoproj-labs.io/agent-name`; the
//! cluster info for Argo CD is written under that secret's `server`. Agents without a secret keep
//! the URL `argocd-pull ctl agent create` would write. The watch also keeps what each secret
//! shows of its agent (our status annotations, see [`argocd_pull_agent_core::agent_status`]): a principal starts
//! from it and writes only what differs.

use std::collections::HashMap;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event as W};

use argocd_pull_agent_core::agent_status::SecretState;
use argocd_pull_agent_core::cluster_secret::{LABEL_AGENT_NAME, LABEL_SECRET_TYPE};

/// A kube client for the hub's Secrets (a newtype so the config stays `Debug`).
#[derive(Clone)]
pub struct SecretsClient(pub kube::Client);

impl std::fmt::Debug for SecretsClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretsClient")
    }
}

/// (agent, server URL) of a cluster secret; `None` when it is not an agent's cluster secret.
pub fn mapping(s: &Secret) -> Option<(String, String)> {
    let labels = s.metadata.labels.as_ref()?;
    if labels.get(LABEL_SECRET_TYPE).map(String::as_str) != Some("cluster") {
        return None;
    }
    let agent = labels.get(LABEL_AGENT_NAME).filter(|a| !a.is_empty())?;
    let server = s.data.as_ref()?.get("server")?;
    let server = String::from_utf8(server.0.clone()).ok()?;
    Some((agent.clone(), server.trim_end_matches('/').to_string()))
}

/// What an agent's cluster secret carries of its status.
fn secret_state(s: &Secret) -> SecretState {
    SecretState::from_meta(
        s.metadata.name.as_deref().unwrap_or_default(),
        s.metadata.labels.as_ref(),
        s.metadata.annotations.as_ref(),
    )
}

impl super::Inner {
    /// Follows the cluster secrets; a changed mapping rewrites that agent's cluster info.
    pub(super) async fn watch_cluster_secrets(self: Arc<Self>, client: kube::Client) {
        let api = kube::Api::<Secret>::namespaced(client, &self.cfg.namespace);
        let cfg = watcher::Config::default().labels(&format!("{LABEL_SECRET_TYPE}=cluster"));
        let mut init: HashMap<String, String> = HashMap::new();
        let mut init_states: HashMap<String, SecretState> = HashMap::new();
        let mut names: HashMap<String, String> = HashMap::new(); // secret → agent
        // errors back off (kube's default) instead of retrying in a tight loop
        let mut w = watcher::watcher(api, cfg).default_backoff().boxed();
        while let Some(e) = w.next().await {
            let changed: Vec<String> = match e {
                Ok(W::Init) => {
                    init.clear();
                    init_states.clear();
                    vec![]
                }
                Ok(W::InitApply(s)) => {
                    if let Some((a, server)) = mapping(&s) {
                        names.insert(s.metadata.name.clone().unwrap_or_default(), a.clone());
                        init_states.insert(a.clone(), secret_state(&s));
                        init.insert(a, server);
                    }
                    vec![]
                }
                Ok(W::InitDone) => {
                    *self.clusters.secrets.lock().expect("poisoned") =
                        std::mem::take(&mut init_states);
                    self.clusters.secrets_synced.send_replace(true);
                    // what a secret shows is compared with what this principal knows
                    for a in self.clusters.agents() {
                        self.status_changed(&a);
                    }
                    let mut m = self.clusters.servers.lock().expect("poisoned");
                    let mut changed: Vec<String> = init
                        .iter()
                        .filter(|(a, s)| m.get(*a) != Some(*s))
                        .map(|(a, _)| a.clone())
                        .collect();
                    changed.extend(m.keys().filter(|a| !init.contains_key(*a)).cloned());
                    *m = std::mem::take(&mut init);
                    changed
                }
                Ok(W::Apply(s)) => match mapping(&s) {
                    Some((a, server)) => {
                        names.insert(s.metadata.name.clone().unwrap_or_default(), a.clone());
                        let st = secret_state(&s);
                        let old_state = self
                            .clusters
                            .secrets
                            .lock()
                            .expect("poisoned")
                            .insert(a.clone(), st.clone());
                        if old_state.as_ref() != Some(&st) {
                            self.status_changed(&a);
                        }
                        let old = self
                            .clusters
                            .servers
                            .lock()
                            .expect("poisoned")
                            .insert(a.clone(), server.clone());
                        if old.as_deref() == Some(server.as_str()) {
                            vec![]
                        } else {
                            vec![a]
                        }
                    }
                    None => vec![],
                },
                Ok(W::Delete(s)) => {
                    let name = s.metadata.name.clone().unwrap_or_default();
                    match names.remove(&name) {
                        Some(a) => {
                            self.clusters.servers.lock().expect("poisoned").remove(&a);
                            self.clusters.secrets.lock().expect("poisoned").remove(&a);
                            vec![a]
                        }
                        None => vec![],
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "watching Argo CD cluster secrets failed; retrying");
                    vec![]
                }
            };
            for a in changed {
                tracing::info!(agent = %a, server = ?self.clusters.server(&a), "cluster secret mapping changed");
                self.cluster_changed(&a);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_labelled_cluster_secrets_map_an_agent() {
        let s: Secret = serde_json::from_value(json!({
            "metadata": {"name": "cluster-a", "labels": {"argocd.argoproj.io/secret-type": "cluster", "argocd-agent.argoproj-labs.io/agent-name": "a"}},
            "data": {"server": "aHR0cHM6Ly9ycDo5MDkwP2FnZW50TmFtZT1hLw=="}
        }))
        .unwrap();
        assert_eq!(
            mapping(&s),
            Some(("a".into(), "https://rp:9090?agentName=a".into()))
        );
        let mut other = s.clone();
        other
            .metadata
            .labels
            .as_mut()
            .unwrap()
            .remove(LABEL_AGENT_NAME);
        assert_eq!(mapping(&other), None);
    }
}
