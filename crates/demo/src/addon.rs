//! The managed agent model set up the way a platform team does it: one GitOpsCluster with
//! `spec.argoCDAgentAddon` and a Placement. The addon controller writes the PKI (CA, principal
//! and resource-proxy certificates, JWT key) and a `cluster-<c>` secret per selected cluster; the
//! demo then runs the principal with that material and, in place of the OCM addon's agent
//! Deployment (the simulated fleet runs no pods), one in-process agent per cluster with the client
//! certificate of its cluster secret.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use base64::Engine;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

use argocd_pull_agent_core::Mode;
use argocd_pull_agent_core::metrics::Metrics;
use argocd_pull_agent_core::store::KubeStore;
use argocd_pull_agent_core::tls::TlsMaterial;
use argocd_pull_principal::{Principal, PrincipalConfig, ResourceProxyConfig};
use argocd_pull_spoke::{Agent, AgentConfig};

use crate::workload;

pub const GITOPSCLUSTER: &str = "argocd-agents";
pub const PLACEMENT: &str = "argocd-agents";
/// The RSA-4096 JWT key and the PKI take a while in a debug build.
const SETUP: Duration = Duration::from_secs(120);

/// The principal and agents of a GitOpsCluster-driven fleet.
pub struct AddonFleet {
    pub gitops: argocd_pull_gitops::Running,
    pub principal: Principal,
    pub agents: Vec<(String, Agent)>,
    /// kubeconfig YAML of the first agent's cluster through the resource proxy
    pub proxy_kubeconfig: Option<String>,
}

impl AddonFleet {
    pub async fn shutdown(self) {
        for (_, a) in self.agents {
            a.shutdown().await;
        }
        self.principal.shutdown().await;
        self.gitops.shutdown().await;
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

async fn apply(hub: &Client, obj: Value, plural: &str) -> anyhow::Result<()> {
    let tm: kube::core::TypeMeta = serde_json::from_value(obj.clone())?;
    let gvk = kube::api::GroupVersionKind::try_from(&tm)?;
    let ar = kube::api::ApiResource::from_gvk_with_plural(&gvk, plural);
    let api: Api<DynamicObject> = Api::namespaced_with(hub.clone(), workload::ARGO_NAMESPACE, &ar);
    let name = obj["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    api.patch(
        &name,
        &PatchParams::apply("argocd-pull-demo").force(),
        &Patch::Apply(&obj),
    )
    .await
    .with_context(|| format!("applying {} {name}", obj["kind"]))?;
    Ok(())
}

/// Polls for a Secret the addon controller writes (its controller reconciles on its own
/// schedule; there is no event of ours to await).
async fn secret(api: &Api<Secret>, name: &str, deadline: Instant) -> anyhow::Result<Secret> {
    loop {
        if let Some(s) = api.get_opt(name).await? {
            return Ok(s);
        }
        if Instant::now() > deadline {
            anyhow::bail!(
                "the GitOpsCluster did not produce Secret {name} in time; see `kubectl get gitopscluster {GITOPSCLUSTER} -n argocd -o yaml` for its conditions"
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn field(s: &Secret, k: &str) -> Vec<u8> {
    s.data
        .as_ref()
        .and_then(|d| d.get(k))
        .map(|b| b.0.clone())
        .unwrap_or_default()
}

/// The agent's TLS material from its `cluster-<c>` secret (`config.tlsClientConfig`).
fn client_tls(s: &Secret) -> anyhow::Result<TlsMaterial> {
    let cfg: Value = serde_json::from_slice(&field(s, "config"))?;
    let b64 = |k: &str| -> anyhow::Result<Vec<u8>> {
        Ok(base64::engine::general_purpose::STANDARD
            .decode(cfg["tlsClientConfig"][k].as_str().unwrap_or_default())?)
    };
    Ok(TlsMaterial {
        cert_pem: b64("certData")?,
        key_pem: b64("keyData")?,
        ca_pem: b64("caData")?,
    })
}

/// Applies the Placement and the GitOpsCluster, waits for what the addon controller writes, and
/// starts the principal and the agents with it.
pub async fn start(hub: Client, clusters: &[(String, Client)]) -> anyhow::Result<AddonFleet> {
    let gitops = argocd_pull_gitops::start(
        hub.clone(),
        argocd_pull_gitops::GitOpsConfig {
            gitopscluster: false,
            report: false,
            addon: true,
            ..Default::default()
        },
    )
    .await
    .context("starting the GitOpsCluster argoCDAgentAddon controller")?;
    let port = free_port()?;
    apply(&hub, workload::placement(PLACEMENT), "placements").await?;
    apply(
        &hub,
        json!({"apiVersion": "apps.open-cluster-management.io/v1alpha1", "kind": "GitOpsCluster",
            "metadata": {"name": GITOPSCLUSTER, "namespace": workload::ARGO_NAMESPACE},
            "spec": {"placementRef": {"kind": "Placement", "name": PLACEMENT},
                     "argoCDAgentAddon": {"principalServerAddress": "127.0.0.1",
                                          "principalServerPort": port.to_string(),
                                          "mode": "managed"}}}),
        "gitopsclusters",
    )
    .await?;
    println!(
        "gitopscluster argocd/{GITOPSCLUSTER} (argoCDAgentAddon): PKI, cluster secrets and the agent addon for placement {PLACEMENT}"
    );
    let secrets: Api<Secret> = Api::namespaced(hub.clone(), workload::ARGO_NAMESPACE);
    let deadline = Instant::now() + SETUP;
    let ca = secret(&secrets, "argocd-agent-ca", deadline).await?;
    let ca_pem = field(&ca, "tls.crt");
    let server = secret(&secrets, "argocd-agent-principal-tls", deadline).await?;
    let proxy = secret(&secrets, "argocd-agent-resource-proxy-tls", deadline).await?;
    let jwt = secret(&secrets, "argocd-agent-jwt", deadline).await?;
    let mut cfg = PrincipalConfig::new(
        SocketAddr::from(([127, 0, 0, 1], port)),
        TlsMaterial {
            cert_pem: field(&server, "tls.crt"),
            key_pem: field(&server, "tls.key"),
            ca_pem: ca_pem.clone(),
        },
        String::from_utf8(field(&jwt, "jwt.key")).context("JWT key is not PEM")?,
    );
    cfg.resource_proxy = Some(ResourceProxyConfig::new(
        "127.0.0.1:0".parse()?,
        TlsMaterial {
            cert_pem: field(&proxy, "tls.crt"),
            key_pem: field(&proxy, "tls.key"),
            ca_pem,
        },
    ));
    let principal = Principal::start(
        cfg,
        Arc::new(KubeStore::new(hub.clone())),
        Metrics::new("argocd_principal"),
    )
    .await
    .context("starting the principal with the GitOpsCluster's PKI")?;
    let mut agents = Vec::new();
    let mut proxy_kubeconfig = None;
    for (c, client) in clusters {
        let cs = secret(&secrets, &format!("cluster-{c}"), deadline).await?;
        let tls = client_tls(&cs).with_context(|| format!("cluster secret cluster-{c}"))?;
        if proxy_kubeconfig.is_none()
            && let Some(addr) = principal.resource_proxy_addr()
        {
            proxy_kubeconfig = Some(argocd_pull_agent_core::resource::kubeconfig_yaml(
                &format!("https://{addr}"),
                &tls,
                c,
            ));
        }
        let mut ac = AgentConfig::new(principal.local_addr(), tls, Mode::Managed);
        ac.reconnect_max = Duration::from_secs(2);
        ac.resource_proxy = Some(argocd_pull_spoke::ResourceProxyClient(client.clone()));
        let store = Arc::new(KubeStore::new(client.clone()));
        let a = Agent::start(ac, store, Metrics::new("argocd_agent"))
            .await
            .with_context(|| format!("starting the agent of {c}"))?;
        agents.push((c.clone(), a));
    }
    for (c, a) in &agents {
        tokio::time::timeout(SETUP, a.wait_connected(0))
            .await
            .with_context(|| format!("agent {c} did not connect: {:?}", a.last_error()))?;
    }
    Ok(AddonFleet {
        gitops,
        principal,
        agents,
        proxy_kubeconfig,
    })
}
