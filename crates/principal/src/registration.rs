//! Self-registration (peer: principal/registration/registration.go, internal/argocd/cluster
//! `CreateClusterWithBearerToken`, `UpdateClusterBearerTokenFromSecret`,
//! `UpdateClusterTLSFromSecret`): with `--enable-self-cluster-registration` an agent's first login
//! creates its Argo CD cluster secret `cluster-<agent>`, labelled self-registered, pointing at the
//! resource proxy with `?agentName=<agent>`, carrying a resource-proxy bearer token and the shared
//! client certificate of `--self-registration-client-cert-secret`. Later logins refresh an invalid
//! token and a changed certificate. A cluster secret made by hand (no self-registered label) is
//! never touched.

use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::PostParams;
use serde_json::Value;

use argocd_pull_agent_core::cluster_secret::{cluster_secret, cluster_secret_name, server_url};

use super::Inner;

/// The label the peer puts on self-registered cluster secrets.
pub const LABEL_SELF_REGISTERED: &str = "argocd-agent.argoproj-labs.io/self-registered-cluster";

/// `--enable-self-cluster-registration`.
#[derive(Clone, Debug)]
pub struct SelfRegistration {
    /// kubernetes.io/tls Secret (`tls.crt`, `tls.key`, `ca.crt`) in the principal's namespace.
    pub client_cert_secret: String,
    /// What cluster secrets point Argo CD at (`--resource-proxy-address`).
    pub resource_proxy_address: String,
}

fn data(s: &Secret, k: &str) -> Option<Vec<u8>> {
    s.data.as_ref()?.get(k).map(|b| b.0.clone())
}

fn config(s: &Secret) -> Value {
    data(s, "config")
        .and_then(|c| serde_json::from_slice(&c).ok())
        .unwrap_or_default()
}

fn set_config(s: &mut Secret, cfg: &Value) -> anyhow::Result<()> {
    s.data.get_or_insert_with(Default::default).insert(
        "config".into(),
        k8s_openapi::ByteString(serde_json::to_vec(cfg)?),
    );
    Ok(())
}

impl Inner {
    /// Creates or refreshes `agent`'s self-registered cluster secret.
    pub(super) async fn register_cluster(&self, agent: &str) -> anyhow::Result<()> {
        let Some(reg) = &self.cfg.self_registration else {
            return Ok(());
        };
        let Some(client) = self.cfg.cluster_secrets.clone() else {
            anyhow::bail!("self-registration needs access to the principal's Secrets");
        };
        let ns = &self.cfg.namespace;
        let api: Api<Secret> = Api::namespaced(client.0, ns);
        let shared = api.get(&reg.client_cert_secret).await.map_err(|e| {
            anyhow::anyhow!(
                "could not read client certificate from secret {ns}/{}: {e}",
                reg.client_cert_secret
            )
        })?;
        let part = |k: &str| {
            data(&shared, k).ok_or_else(|| {
                anyhow::anyhow!("secret {ns}/{} missing {k}", reg.client_cert_secret)
            })
        };
        let (cert, key, ca) = (part("tls.crt")?, part("tls.key")?, part("ca.crt")?);
        let b64 = |v: &[u8]| base64::Engine::encode(&base64::engine::general_purpose::STANDARD, v);
        let name = cluster_secret_name(agent);
        match api.get_opt(&name).await? {
            Some(existing) => {
                let self_registered = existing
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(LABEL_SELF_REGISTERED))
                    .is_some_and(|v| v == "true");
                if !self_registered {
                    tracing::debug!(
                        agent,
                        "cluster secret made by hand; self-registration leaves it alone"
                    );
                    return Ok(());
                }
                let mut cfg = config(&existing);
                let mut changed = false;
                let token_ok = cfg["bearerToken"]
                    .as_str()
                    .and_then(|t| self.tokens.verify_resource_proxy(t).ok())
                    .is_some_and(|who| who == agent);
                if !token_ok {
                    cfg["bearerToken"] = self.tokens.issue_resource_proxy(agent)?.into();
                    changed = true;
                    tracing::info!(agent, "cluster bearer token refreshed");
                }
                let tls = &mut cfg["tlsClientConfig"];
                for (k, v) in [("certData", &cert), ("keyData", &key), ("caData", &ca)] {
                    if tls[k].as_str() != Some(b64(v).as_str()) {
                        tls[k] = b64(v).into();
                        changed = true;
                    }
                }
                if changed {
                    let mut s = existing;
                    set_config(&mut s, &cfg)?;
                    api.replace(&name, &PostParams::default(), &s).await?;
                }
                Ok(())
            }
            None => {
                let labels = [(LABEL_SELF_REGISTERED.to_string(), "true".to_string())].into();
                let mut s = cluster_secret(
                    agent,
                    ns,
                    &server_url(&reg.resource_proxy_address, agent)?,
                    labels,
                    &cert,
                    &key,
                    &ca,
                )?;
                let mut cfg = config(&s);
                cfg["bearerToken"] = self.tokens.issue_resource_proxy(agent)?.into();
                set_config(&mut s, &cfg)?;
                match api.create(&PostParams::default(), &s).await {
                    Ok(_) => {
                        tracing::info!(agent, "created self-registered cluster secret");
                        Ok(())
                    }
                    Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
                    Err(e) => Err(e.into()),
                }
            }
        }
    }
}
