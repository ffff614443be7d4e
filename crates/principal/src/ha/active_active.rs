//! Active/active principal replicas (`--ha-mode active-active`, **beyond the peer**): every
//! replica serves. The agents are split into shards held on Kubernetes Leases
//! ([`argocd_pull_ops::shards`]); a replica serves the agents of its shards and passes any other
//! agent's calls to the replica holding that agent's shard ([`crate::forward`]), so a
//! Service may balance agents over every replica with no setting on the agents. A replica that
//! stops hands its shards over first (the others take them within a read of the Leases) and then
//! drops its agents, which reconnect through any replica to their new owner; one that is killed
//! loses its shards when their Leases expire. The new owner starts from the hub's state and each
//! agent's resync, as after any restart.

use std::net::SocketAddr;
use std::time::Duration;

use argocd_pull_ops::CancellationToken;
use std::collections::{BTreeMap, BTreeSet};

use argocd_pull_ops::shards::{ShardConfig, ShardCount, ShardError, ShardId, ShardOwner};
use tokio::sync::watch;

use super::{Replica, Role};
use crate::owners::Owners;
use crate::{Principal, PrincipalConfig};

/// Settings of an active/active replica.
#[derive(Clone, Debug)]
pub struct ActiveActive {
    /// The shard Leases: `<lease>-shard-<k>` and `<lease>-replica-<identity>`; the identity is
    /// `<unique name>@<advertised host>`.
    pub shards: ShardConfig,
    /// The port the replicas take each other's forwarded calls on (`--ha-replica-port`).
    pub replica_port: u16,
}

impl ActiveActive {
    /// `name`: unique per replica (the pod name); `advertise`: the IP address the other replicas
    /// reach this one at (the pod IP); `duration`: how long a killed replica's shards stay
    /// unserved at most.
    pub fn new(
        lease_name: &str,
        namespace: &str,
        name: &str,
        advertise: &str,
        duration: Duration,
        shards: u32,
        replica_port: u16,
    ) -> anyhow::Result<ActiveActive> {
        if advertise.parse::<std::net::IpAddr>().is_err() {
            anyhow::bail!(
                "--ha-advertise-address {advertise:?} is not an IP address: give the address the other principal replicas reach this one at (in a pod: the POD_IP from the downward API)"
            );
        }
        let count = ShardCount::new(shards).ok_or_else(|| {
            anyhow::anyhow!(
                "--ha-shards {shards} is out of range: give 1 to {} (the same on every replica)",
                ShardCount::MAX
            )
        })?;
        if duration < Duration::from_secs(2) {
            anyhow::bail!(
                "--lease-duration {duration:?} is too short: it must be at least 2s (a shard is renewed every third of it)"
            );
        }
        if replica_port == 0 {
            anyhow::bail!("--ha-replica-port must be a port number (1-65535)");
        }
        let mut c = ShardConfig::new(lease_name, namespace, format!("{name}@{advertise}"));
        c.shards = count;
        c.lease_duration = duration;
        c.renew_period = duration / 3;
        c.poll_period = (duration / 6).min(Duration::from_secs(1));
        c.validate()
            .map_err(|e| anyhow::anyhow!("{e} (--lease-name, --lease-namespace)"))?;
        Ok(ActiveActive {
            shards: c,
            replica_port,
        })
    }
}

type Owning = (
    watch::Receiver<BTreeSet<ShardId>>,
    watch::Receiver<BTreeMap<ShardId, String>>,
    tokio::task::JoinHandle<Result<(), ShardError>>,
);

/// Starts owning shards until `stop`: the shards held, the other replicas', and the task. With
/// `lease_config` (what `client` was built from) on a thread and runtime of its own with a client
/// of its own, so that a replica whose runtime is saturated (thousands of agents reconnecting at
/// once) still renews its Leases in time, instead of losing its shards and moving its agents and
/// their load onto the others; without, on this runtime with `client`.
async fn own_shards(
    client: kube::Client,
    lease_config: Option<kube::Config>,
    shards: ShardConfig,
    stop: CancellationToken,
) -> anyhow::Result<Owning> {
    let Some(config) = lease_config else {
        let (owner, owned) = ShardOwner::new(client, shards)?;
        let others = owner.others();
        return Ok((owned, others, tokio::spawn(owner.run(stop))));
    };
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("shard-leases".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = ready_tx.send(Err(anyhow::Error::new(e)));
                    return;
                }
            };
            rt.block_on(async move {
                // the client is built here: its connections live on this runtime
                let started =
                    argocd_pull_agent_core::env_tuning::kube_limits().and_then(|limits| {
                        let client =
                            argocd_pull_agent_core::kube_client::with_limits(config, limits)?;
                        Ok(ShardOwner::new(client, shards)?)
                    });
                match started {
                    Ok((owner, owned)) => {
                        let _ = ready_tx.send(Ok((owned, owner.others())));
                        let _ = done_tx.send(owner.run(stop).await);
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                    }
                }
            });
        })?;
    let (owned, others) = ready_rx
        .await
        .map_err(|_| anyhow::anyhow!("the shard Lease thread ended before it started"))??;
    // a thread that ended without a result reads as the ownership having stopped
    let task = tokio::spawn(async move { done_rx.await.unwrap_or(Ok(())) });
    Ok((owned, others, task))
}

/// How long the agent-facing calls wait for their shard to get an owner: a Lease duration and
/// two reads of the Leases.
fn owner_wait(c: &ShardConfig) -> Duration {
    c.lease_duration + c.poll_period * 2
}

/// Runs one active/active replica until `shutdown` (or until its shard ownership fails on bad
/// settings: the error names the fix).
pub async fn run(
    aa: ActiveActive,
    cfg: PrincipalConfig,
    replica: Replica,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let Replica {
        client,
        store,
        metrics,
        role,
        mut tls,
        lease_config,
    } = replica;
    let identity = aa.shards.identity.clone();
    let stop_owning = CancellationToken::new();
    let (owned, others, mut owning) =
        own_shards(client, lease_config, aa.shards.clone(), stop_owning.clone()).await?;
    let owners = Owners::new(
        aa.shards.shards,
        owned,
        others,
        SocketAddr::new(cfg.listen.ip(), aa.replica_port),
        owner_wait(&aa.shards),
    );
    metrics.ha.shards.sharded(aa.shards.shards.get());
    let principal = match Principal::start_sharded(cfg, store, metrics.clone(), owners).await {
        Ok(p) => p,
        Err(e) => {
            stop_owning.cancel();
            return Err(e);
        }
    };
    role.send_replace(Role::Active);
    metrics
        .ready
        .set_role(format!("active/active ({identity})"));
    metrics.ha.transition("recovering", "active");
    tracing::info!(%identity, shards = aa.shards.shards.get(), "serving as an active/active replica");
    let result = loop {
        let tls_changed = async {
            match tls.as_mut() {
                Some(t) => t.changed().await.is_ok(),
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = shutdown.cancelled() => break Ok(()),
            r = &mut owning => break match r {
                Ok(Ok(())) => Err(anyhow::anyhow!("the shard ownership stopped")),
                Ok(Err(e)) => Err(anyhow::Error::new(e).context("owning the agents' shards")),
                Err(e) => Err(anyhow::anyhow!("the shard ownership task failed: {e}")),
            },
            ok = tls_changed => match ok {
                true => {
                    let m = tls.as_mut().expect("tls watched").borrow_and_update().clone();
                    if let Err(e) = principal.reload_tls(&m) {
                        tracing::warn!(error = %format!("{e:#}"), "reloading TLS material failed; keeping the current one");
                    }
                }
                false => tls = None,
            },
        }
    };
    // hand the shards over first (the agents are dropped as their shards go, and reconnect to the
    // new owners through any replica), then stop serving
    stop_owning.cancel();
    if !owning.is_finished()
        && tokio::time::timeout(Duration::from_secs(6), &mut owning)
            .await
            .is_err()
    {
        tracing::warn!("releasing the shard Leases took too long; they expire on their own");
        owning.abort();
    }
    principal.shutdown().await;
    result
}
