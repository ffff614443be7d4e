//! A principal and N agents in one process over loopback mTLS with a throwaway PKI (demo, tests,
//! benchmarks).

use std::sync::Arc;
use std::time::Duration;

use argocd_pull_agent_core::Mode;
use argocd_pull_agent_core::auth::throwaway_jwt_key;
use argocd_pull_agent_core::metrics::Metrics;
use argocd_pull_agent_core::pki::Ca;
use argocd_pull_agent_core::store::{KubeStore, Store};
use argocd_pull_agent_core::tls::TlsMaterial;
use argocd_pull_principal::{Principal, PrincipalConfig};
use argocd_pull_spoke::{Agent, AgentConfig};

/// Everything a local deployment needs to connect more agents.
pub struct LocalPki {
    pub ca: Ca,
    pub principal: TlsMaterial,
}

impl LocalPki {
    pub fn new() -> anyhow::Result<LocalPki> {
        let ca = Ca::new("argocd-pull local CA")?;
        let server = ca.issue_server(&[])?;
        let principal = ca.principal_material(&server);
        Ok(LocalPki { ca, principal })
    }

    /// Client TLS material for an agent.
    pub fn agent(&self, name: &str) -> anyhow::Result<TlsMaterial> {
        let c = self.ca.issue_agent(name)?;
        Ok(TlsMaterial {
            cert_pem: c.cert_pem.into(),
            key_pem: c.key_pem.into(),
            ca_pem: self.ca.cert_pem.clone().into(),
        })
    }
}

/// A running local deployment.
pub struct LocalDeployment {
    pub principal: Principal,
    pub agents: Vec<(String, Agent)>,
    /// The throwaway PKI (the resource proxy trusts its agent certificates); boxed to keep the
    /// deployment small.
    pub pki: Box<LocalPki>,
}

impl LocalDeployment {
    /// Waits until every agent has a live stream.
    pub async fn wait_connected(&self, timeout: Duration) -> anyhow::Result<()> {
        tokio::time::timeout(timeout, async {
            for (_, a) in &self.agents {
                a.wait_connected(0).await;
            }
        })
        .await
        .map_err(|_| anyhow::anyhow!("agents did not connect within {timeout:?}"))
    }

    /// A kubeconfig pointing `kubectl` at the resource proxy as `agent` (its own cluster through
    /// the principal); `None` when the proxy is off.
    pub fn resource_proxy_kubeconfig(&self, agent: &str) -> anyhow::Result<Option<String>> {
        let Some(addr) = self.principal.resource_proxy_addr() else {
            return Ok(None);
        };
        Ok(Some(argocd_pull_agent_core::resource::kubeconfig_yaml(
            &format!("https://{addr}"),
            &self.pki.agent(agent)?,
            agent,
        )))
    }

    /// Stops all agents, then the principal.
    pub async fn shutdown(self) {
        for (_, a) in self.agents {
            a.shutdown().await;
        }
        self.principal.shutdown().await;
    }
}

/// Starts a principal on `hub` and one agent per `(name, cluster)` in `mode`, over loopback mTLS.
pub async fn start_local(
    hub: kube::Client,
    agents: Vec<(String, kube::Client)>,
    mode: Mode,
) -> anyhow::Result<LocalDeployment> {
    let hub: Arc<dyn Store> = Arc::new(KubeStore::new(hub));
    let agents = agents
        .into_iter()
        .map(|(n, c)| {
            let store = Arc::new(KubeStore::new(c.clone())) as Arc<dyn Store>;
            (n, store, Some(c))
        })
        .collect();
    start(hub, agents, mode).await
}

/// Like [`start_local`] over any [`Store`]s.
pub async fn start_local_stores(
    hub: Arc<dyn Store>,
    agents: Vec<(String, Arc<dyn Store>)>,
    mode: Mode,
) -> anyhow::Result<LocalDeployment> {
    start(
        hub,
        agents.into_iter().map(|(n, s)| (n, s, None)).collect(),
        mode,
    )
    .await
}

/// The principal serves the resource proxy on an ephemeral loopback port (same server
/// certificate); agents with a Kubernetes client answer its requests.
async fn start(
    hub: Arc<dyn Store>,
    agents: Vec<(String, Arc<dyn Store>, Option<kube::Client>)>,
    mode: Mode,
) -> anyhow::Result<LocalDeployment> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let pki = LocalPki::new()?;
    let mut cfg = PrincipalConfig::new(
        "127.0.0.1:0".parse()?,
        pki.principal.clone(),
        throwaway_jwt_key(),
    );
    // a local deployment creates the hub namespaces of its autonomous agents
    cfg.namespace_create = Some(Default::default());
    cfg.resource_proxy = Some(argocd_pull_principal::ResourceProxyConfig::new(
        "127.0.0.1:0".parse()?,
        pki.principal.clone(),
    ));
    let principal = Principal::start(cfg, hub, Metrics::new("argocd_principal")).await?;
    let addr = principal.local_addr();
    let mut out = Vec::new();
    for (name, store, client) in agents {
        let mut c = AgentConfig::new(addr, pki.agent(&name)?, mode);
        c.reconnect_max = Duration::from_secs(2);
        c.resource_proxy = client.map(argocd_pull_spoke::ResourceProxyClient);
        let a = Agent::start(c, store, Metrics::new("argocd_agent")).await?;
        out.push((name, a));
    }
    Ok(LocalDeployment {
        principal,
        agents: out,
        pki: Box::new(pki),
    })
}

/// A round-robin TCP balancer in front of principal replicas, as a Kubernetes Service is: each
/// connection goes to the next backend that accepts it (tests and benchmarks of several
/// replicas). Runs until the runtime stops; returns its address on loopback.
pub async fn balancer(
    backends: Vec<std::net::SocketAddr>,
) -> std::io::Result<std::net::SocketAddr> {
    let l = argocd_pull_ops::net::listen("127.0.0.1:0".parse().expect("an address"))?;
    let addr = l.local_addr()?;
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    tokio::spawn(async move {
        loop {
            let (mut c, _) = argocd_pull_ops::net::accept(&l, "the balancer").await;
            let (backends, next) = (backends.clone(), next.clone());
            tokio::spawn(async move {
                let start = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                for k in 0..backends.len() {
                    let to = backends[(start + k) % backends.len()];
                    if let Ok(mut up) = tokio::net::TcpStream::connect(to).await {
                        let _ = up.set_nodelay(true);
                        let _ = tokio::io::copy_bidirectional(&mut c, &mut up).await;
                        return;
                    }
                }
            });
        }
    });
    Ok(addr)
}
