//! Leader election on a `coordination.k8s.io/v1` Lease, with
//! [kube-lease-manager](https://docs.rs/kube-lease-manager) (kube 5 compatible, renews the lease in
//! a background task and releases it when dropped).
//!
//! ```no_run
//! # async fn run(client: kube::Client, token: argocd_pull_ops::CancellationToken) -> anyhow::Result<()> {
//! use argocd_pull_ops::leader::{LeaderConfig, acquire};
//! let Some(leadership) = acquire(client, &LeaderConfig::new("argocd-pull-controller", "argocd-pull"), &token).await? else {
//!     return Ok(()); // shut down before becoming leader
//! };
//! tokio::select! {
//!     _ = leadership.lost() => anyhow::bail!("leadership lost"),
//!     _ = token.cancelled() => {}
//! }
//! leadership.release().await;
//! # Ok(()) }
//! ```

use std::time::Duration;

use kube_lease_manager::{LeaseManager, LeaseManagerBuilder};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Where the Lease lives and how long it is held.
#[derive(Clone, Debug)]
pub struct LeaderConfig {
    pub lease_name: String,
    pub lease_namespace: String,
    /// Unique per replica: defaults to `$POD_NAME`, else `$HOSTNAME`, else a random id.
    pub identity: String,
    /// Lease duration (another replica takes over this long after a crash).
    pub duration: Duration,
    /// Renew this long before expiry.
    pub grace: Duration,
}

impl LeaderConfig {
    pub fn new(lease_name: impl Into<String>, lease_namespace: impl Into<String>) -> Self {
        let identity = std::env::var("POD_NAME")
            .or_else(|_| std::env::var("HOSTNAME"))
            .unwrap_or_else(|_| format!("argocd-pull-{}", std::process::id()));
        LeaderConfig {
            lease_name: lease_name.into(),
            lease_namespace: lease_namespace.into(),
            identity,
            duration: Duration::from_secs(15),
            grace: Duration::from_secs(5),
        }
    }
}

/// Held leadership: watch [`Leadership::lost`], and [`Leadership::release`] on shutdown so that
/// another replica takes over at once.
pub struct Leadership {
    rx: watch::Receiver<bool>,
    task: JoinHandle<kube_lease_manager::Result<LeaseManager>>,
}

impl Leadership {
    /// Resolves when the lease is lost (renewal failed and another holder took it).
    pub async fn lost(&self) {
        let mut rx = self.rx.clone();
        let _ = rx.wait_for(|leader| !*leader).await;
    }

    /// Gives the lease up.
    pub async fn release(self) {
        drop(self.rx);
        match self.task.await {
            Ok(Ok(_)) => tracing::info!("leader lease released"),
            Ok(Err(e)) => tracing::warn!(error = %e, "releasing the leader lease failed"),
            Err(e) => tracing::warn!(error = %e, "leader lease task failed"),
        }
    }
}

/// Builds the Lease manager (creating the Lease if needed), retrying — like client-go's leader
/// election — while the API server is not there yet or RBAC is not applied yet. `None` when
/// `shutdown` is cancelled first.
async fn manager(
    client: kube::Client,
    config: &LeaderConfig,
    shutdown: &CancellationToken,
) -> Option<LeaseManager> {
    let mut delay = Duration::from_millis(500);
    loop {
        let built = LeaseManagerBuilder::new(client.clone(), &config.lease_name)
            .with_namespace(&config.lease_namespace)
            .with_identity(&config.identity)
            .with_duration(config.duration.as_secs())
            .with_grace(config.grace.as_secs())
            .build()
            .await;
        match built {
            Ok(m) => return Some(m),
            Err(e) => tracing::warn!(
                lease = %config.lease_name,
                namespace = %config.lease_namespace,
                error = %e,
                retry_in = ?delay,
                "cannot use the leader Lease yet (is the API server reachable, the namespace there, \
                 and get/create/update on leases.coordination.k8s.io granted?)"
            ),
        }
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = shutdown.cancelled() => return None,
        }
        delay = (delay * 2).min(Duration::from_secs(30));
    }
}

/// A running election that this replica may win, lose and win again: for components whose
/// standby replicas do useful work (e.g. forward connections to the leader) instead of waiting.
pub struct Campaign {
    rx: watch::Receiver<bool>,
    task: JoinHandle<kube_lease_manager::Result<LeaseManager>>,
}

impl Campaign {
    /// Whether this replica holds the Lease now; `changed` wakes on every change. Drop every
    /// receiver before [`Campaign::release`]: the Lease is released once all are gone.
    pub fn leading(&self) -> watch::Receiver<bool> {
        self.rx.clone()
    }

    /// Stops campaigning and gives the Lease up if held (another replica takes over at once).
    pub async fn release(self) {
        Leadership {
            rx: self.rx,
            task: self.task,
        }
        .release()
        .await
    }
}

/// Joins the election without waiting to win it. `None` when `shutdown` is cancelled before the
/// Lease could be read.
pub async fn campaign(
    client: kube::Client,
    config: &LeaderConfig,
    shutdown: &CancellationToken,
) -> anyhow::Result<Option<Campaign>> {
    let Some(manager) = manager(client, config, shutdown).await else {
        return Ok(None);
    };
    let (rx, task) = manager.watch().await;
    tracing::info!(lease = %config.lease_name, namespace = %config.lease_namespace, identity = %config.identity, "joined the leader election");
    Ok(Some(Campaign { rx, task }))
}

/// Waits until this replica holds the Lease (creating it if needed). Returns `None` when
/// `shutdown` is cancelled first.
pub async fn acquire(
    client: kube::Client,
    config: &LeaderConfig,
    shutdown: &CancellationToken,
) -> anyhow::Result<Option<Leadership>> {
    let Some(manager) = manager(client, config, shutdown).await else {
        return Ok(None);
    };
    let (mut rx, task) = manager.watch().await;
    tracing::info!(lease = %config.lease_name, namespace = %config.lease_namespace, identity = %config.identity, "waiting for leadership");
    let became_leader = tokio::select! {
        r = rx.wait_for(|leader| *leader) => {
            r.map_err(|_| anyhow::anyhow!("leader election task stopped"))?;
            true
        }
        _ = shutdown.cancelled() => false,
    };
    if !became_leader {
        drop(rx);
        let _ = task.await;
        return Ok(None);
    }
    tracing::info!(identity = %config.identity, "became leader");
    Ok(Some(Leadership { rx, task }))
}
