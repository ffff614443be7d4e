//! Principal high availability on a Kubernetes Lease (**beyond the peer**: argocd-agent's HA is
//! active/passive across two clusters with promotion by hand).
//!
//! Two or more replicas run `argocd-pull principal --leader-elect`. Every replica binds the public
//! ports (agent gRPC, resource proxy, Redis proxy) with a [front](front) and campaigns for the Lease; the
//! holder starts the principal on loopback and its front splices connections to it, the others'
//! fronts splice them to the holder (its host is part of its Lease identity, `<name>@<host>`). A
//! Service may therefore balance over every replica: whichever an agent reaches, it ends up at the
//! active principal. When the holder dies its connections drop; the agents reconnect through any
//! survivor, whose front holds the connection until the Lease changes hands (at most the Lease
//! duration) and then splices it to the new holder. The new holder starts from the hub's state
//! (the Applications on the hub) and each agent's resync, as after any restart: nothing queued in
//! the dead replica is needed, and the checksums keep what both sides already agree on from
//! being sent again.
//!
//! A replica that loses the Lease (it could not renew in time) stops its principal at once, so two
//! replicas never serve the same agent, and campaigns again as a standby.

pub mod active_active;
mod front;
mod holder;
pub mod replication;

pub use argocd_pull_agent_core::metrics::{ClientMetrics, ForwarderMetrics, HaMetrics};

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use argocd_pull_ops::CancellationToken;
use argocd_pull_ops::leader::{self, LeaderConfig};
use k8s_openapi::api::coordination::v1::Lease;
use tokio::sync::watch;

use crate::{Principal, PrincipalConfig};
use argocd_pull_agent_core::metrics::Metrics;
use argocd_pull_agent_core::store::Store;
use argocd_pull_agent_core::tls::TlsMaterial;

/// How long a stopping replica tries to release the Lease.
const RELEASE: Duration = Duration::from_secs(2);

/// The principal's public listeners the front serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Listener {
    /// Agents' gRPC (`--listen-host`/`--listen-port`).
    Grpc,
    /// The resource proxy (`--resource-proxy-address`).
    ResourceProxy,
    /// The Redis proxy for Argo CD (`--redis-proxy-listen-address`).
    Redis,
}

impl Listener {
    /// What a log line calls it.
    pub fn name(self) -> &'static str {
        match self {
            Listener::Grpc => "the HA front (agents' gRPC)",
            Listener::ResourceProxy => "the HA front (resource proxy)",
            Listener::Redis => "the HA front (Redis proxy)",
        }
    }
}

/// The Lease holder as the Lease names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Holder {
    /// `<name>@<host>`
    pub identity: String,
    /// `renewTime` + `leaseDurationSeconds`
    pub expires: SystemTime,
}

impl Holder {
    /// The advertised host of the holder (the part after the last `@`).
    pub(crate) fn host(&self) -> Option<&str> {
        self.identity
            .rsplit_once('@')
            .map(|(_, h)| h)
            .filter(|h| !h.is_empty())
    }
}

/// What a front needs to route: this replica's principal when it is active, and the holder.
#[derive(Clone, Debug, Default)]
pub(crate) struct View {
    pub local: Option<HashMap<Listener, SocketAddr>>,
    pub holder: Option<Holder>,
}

/// A replica's role.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Role {
    /// Joining the election (the Lease not read yet).
    Recovering,
    /// Serving agents.
    Active,
    /// Forwarding to the active replica (`None`: no live holder right now).
    Standby { active: Option<String> },
}

impl Role {
    /// The state label of `argocd_agent_ha_state`.
    pub fn state(&self) -> &'static str {
        match self {
            Role::Recovering => "recovering",
            Role::Active => "active",
            Role::Standby { .. } => "standby",
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Role::Recovering => f.write_str("recovering"),
            Role::Active => f.write_str("active"),
            Role::Standby { active: Some(a) } => write!(f, "standby (active: {a})"),
            Role::Standby { active: None } => f.write_str("standby (no active replica)"),
        }
    }
}

/// Lease-based HA settings (`--leader-elect`, `--lease-*`, `--ha-advertise-address`).
#[derive(Clone, Debug)]
pub struct HaConfig {
    /// The Lease; its identity must be `<unique name>@<advertised host>` (see [`HaConfig::new`]).
    pub lease: LeaderConfig,
}

impl HaConfig {
    /// `name`: unique per replica (the pod name); `advertise`: the host the other replicas reach
    /// this one at (the pod IP), on the same ports.
    pub fn new(
        lease_name: &str,
        namespace: &str,
        name: &str,
        advertise: &str,
        duration: Duration,
    ) -> anyhow::Result<Self> {
        if advertise.is_empty() || advertise.contains('@') {
            anyhow::bail!(
                "--ha-advertise-address {advertise:?} is not a host: give the address the other principal replicas reach this one at (in a pod: the POD_IP from the downward API)"
            );
        }
        let secs = duration.as_secs();
        if secs < 2 {
            anyhow::bail!(
                "--lease-duration {duration:?} is too short: it must be at least 2s (the holder renews 1s before it ends)"
            );
        }
        let mut lease = LeaderConfig::new(lease_name, namespace);
        lease.identity = format!("{name}@{advertise}");
        lease.duration = Duration::from_secs(secs);
        lease.grace = Duration::from_secs((secs / 3).max(1));
        Ok(HaConfig { lease })
    }
}

/// What a replica runs with besides the principal's settings.
pub struct Replica {
    pub client: kube::Client,
    pub store: Arc<dyn Store>,
    pub metrics: Arc<Metrics>,
    /// Every role change (also on `/healthz` and as `argocd_agent_ha_state`).
    pub role: watch::Sender<Role>,
    /// Re-read TLS material (certificate rotation): applied to the running principal's new
    /// connections and used by the next one this replica starts.
    pub tls: Option<watch::Receiver<TlsMaterial>>,
    /// What `client` was built from (`None`: unknown). Active/active renews its shard Leases on
    /// a thread and runtime of its own with a client built from it.
    pub lease_config: Option<kube::Config>,
}

/// Runs one replica until `shutdown`: the fronts on the principal's public ports, the campaign,
/// and the principal whenever this replica holds the Lease.
pub async fn run(
    ha: HaConfig,
    cfg: PrincipalConfig,
    replica: Replica,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let Replica {
        client,
        store,
        metrics,
        role,
        tls,
        lease_config: _,
    } = replica;
    let me: Arc<str> = ha.lease.identity.clone().into();
    // the public ports go to the fronts; the principal itself binds loopback
    let mut public = vec![(Listener::Grpc, cfg.listen)];
    let mut local_cfg = cfg.clone();
    local_cfg.listen = loopback(cfg.listen);
    if let Some(rp) = local_cfg.resource_proxy.as_mut() {
        public.push((Listener::ResourceProxy, rp.listen));
        rp.listen = loopback(rp.listen);
    }
    if let Some(rp) = local_cfg.redis_proxy.as_mut() {
        public.push((Listener::Redis, rp.listen));
        rp.listen = loopback(rp.listen);
    }
    // every port is bound before anything starts, so a port in use leaves nothing running
    let mut listeners = Vec::new();
    for (kind, addr) in public {
        let l = argocd_pull_ops::net::listen(addr)
            .map_err(|e| anyhow::anyhow!("binding {kind:?} on {addr}: {e}"))?;
        tracing::info!(listener = ?kind, addr = %l.local_addr()?, "HA front listening");
        listeners.push((kind, l));
    }
    let (view_tx, view_rx) = watch::channel(View::default());
    let fronts = CancellationToken::new();
    let mut tasks = Vec::new();
    for (kind, l) in listeners {
        tasks.push(tokio::spawn(front::serve(
            l,
            kind,
            me.clone(),
            view_rx.clone(),
            fronts.clone(),
        )));
    }
    let api: kube::Api<Lease> = kube::Api::namespaced(client.clone(), &ha.lease.lease_namespace);
    tasks.push(tokio::spawn(holder::follow(
        api,
        ha.lease.lease_name.clone(),
        view_tx.clone(),
    )));
    metrics.ready.set(true);
    let result = lead(
        &ha, client, local_cfg, store, &metrics, &view_tx, &role, tls, &shutdown,
    )
    .await;
    fronts.cancel();
    for t in tasks {
        t.abort();
    }
    result
}

fn loopback(a: SocketAddr) -> SocketAddr {
    match a {
        SocketAddr::V4(_) => ([127, 0, 0, 1], 0).into(),
        SocketAddr::V6(_) => (std::net::Ipv6Addr::LOCALHOST, 0).into(),
    }
}

#[allow(clippy::too_many_arguments)]
async fn lead(
    ha: &HaConfig,
    client: kube::Client,
    cfg: PrincipalConfig,
    store: Arc<dyn Store>,
    metrics: &Arc<Metrics>,
    view: &watch::Sender<View>,
    role: &watch::Sender<Role>,
    mut tls: Option<watch::Receiver<TlsMaterial>>,
    shutdown: &CancellationToken,
) -> anyhow::Result<()> {
    let mut cfg = cfg;
    let Some(campaign) = leader::campaign(client, &ha.lease, shutdown).await? else {
        return Ok(());
    };
    let mut leading = campaign.leading();
    let mut holder = view.subscribe();
    let mut principal: Option<Principal> = None;
    let mut became_active = false;
    let result = loop {
        let lead = *leading.borrow_and_update();
        if lead && principal.is_none() {
            match Principal::start(cfg.clone(), store.clone(), metrics.clone()).await {
                Ok(p) => {
                    let mut local = HashMap::from([(Listener::Grpc, p.local_addr())]);
                    if let Some(a) = p.resource_proxy_addr() {
                        local.insert(Listener::ResourceProxy, a);
                    }
                    if let Some(a) = p.redis_proxy_addr() {
                        local.insert(Listener::Redis, a);
                    }
                    view.send_modify(|v| v.local = Some(local));
                    principal = Some(p);
                    became_active = true;
                }
                Err(e) => break Err(e.context("starting the principal after winning the Lease")),
            }
        } else if !lead && let Some(p) = principal.take() {
            // fencing: the Lease may already be someone else's
            view.send_modify(|v| v.local = None);
            p.shutdown().await;
            metrics.ready.set(true);
            tracing::warn!(identity = %ha.lease.identity, "lost the Lease: stopped serving, standing by");
        }
        let now = match principal {
            Some(_) => Role::Active,
            None => Role::Standby {
                active: holder
                    .borrow_and_update()
                    .holder
                    .as_ref()
                    .filter(|h| h.expires > SystemTime::now() && *h.identity != *ha.lease.identity)
                    .map(|h| h.identity.clone()),
            },
        };
        metrics.ready.set_role(now.to_string());
        let from = role.borrow().state();
        metrics.ha.transition(from, now.state());
        role.send_if_modified(|r| {
            let changed = *r != now;
            *r = now;
            changed
        });
        // logged once /healthz says so too
        if std::mem::take(&mut became_active) {
            tracing::info!(identity = %ha.lease.identity, "this replica holds the Lease: serving agents");
        }
        let tls_changed = async {
            match tls.as_mut() {
                Some(t) => t.changed().await.is_ok(),
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            r = leading.changed() => if r.is_err() {
                break Err(anyhow::anyhow!("the leader election stopped"));
            },
            _ = holder.changed() => {}
            ok = tls_changed => match ok {
                true => {
                    let m = tls.as_mut().expect("tls watched").borrow_and_update().clone();
                    if let Some(p) = &principal
                        && let Err(e) = p.reload_tls(&m)
                    {
                        tracing::warn!(error = %format!("{e:#}"), "reloading TLS material failed; keeping the current one");
                        continue;
                    }
                    cfg.tls = m;
                }
                false => tls = None,
            },
            _ = shutdown.cancelled() => break Ok(()),
        }
    };
    // stop serving before giving the Lease up, so that the next holder starts after the last write
    view.send_modify(|v| v.local = None);
    if let Some(p) = principal {
        p.shutdown().await;
    }
    // the election task releases the Lease once every receiver is gone; an unreachable API
    // server must not hold the exit up (the Lease then simply expires)
    drop(leading);
    if tokio::time::timeout(RELEASE, campaign.release())
        .await
        .is_err()
    {
        tracing::warn!("could not release the Lease in time; it expires on its own");
    }
    result
}
