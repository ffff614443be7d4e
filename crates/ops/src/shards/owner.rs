//! The replica's shard-ownership task: reads the Leases, decides ([`decide`]), writes.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures::StreamExt;
use futures::future::join_all;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::api::{ListParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::config::ShardConfig;
use super::error::ShardError;
use super::expiry::{Expiry, Observed};
use super::id::ShardId;
use super::lease::{
    Claimant, LEASE_LABEL, LeaseKind, LeaseView, claim, release, replica_lease_name,
    shard_lease_name,
};
use super::plan::{Holder, Holders, decide};
use super::wake::Wake;

/// A Lease this replica holds: when it last renewed it (the instant before the write was sent)
/// and until when it counts it as its own.
#[derive(Clone, Copy, Debug)]
struct Held {
    renewed_at: Instant,
    valid_until: Instant,
}

/// A listed Lease and what observing it said.
struct Seen {
    view: LeaseView,
    obs: Observed,
}

impl Seen {
    fn live_holder(&self) -> Option<&str> {
        self.view.holder.as_deref().filter(|_| !self.obs.expired)
    }
}

/// How a write ended when it did not fail the replica.
enum Wrote {
    Done,
    /// Someone else wrote it first (409): the next read tells what happened.
    Lost,
}

/// Keeps this replica's fair share of the shard Leases; see the [module docs](super).
///
/// ```no_run
/// # async fn run(client: kube::Client, token: argocd_pull_ops::CancellationToken) -> anyhow::Result<()> {
/// use argocd_pull_ops::shards::{ShardConfig, ShardOwner};
/// let (owner, mut owned) = ShardOwner::new(client, ShardConfig::new("argocd-pull-principal", "argocd", "principal-0"))?;
/// let task = tokio::spawn(owner.run(token));
/// while owned.changed().await.is_ok() {
///     let shards = owned.borrow_and_update().clone();
///     // … serve the agents of `shards`, drop the others …
/// }
/// task.await??; // the token was cancelled: the shards were released
/// # Ok(()) }
/// ```
pub struct ShardOwner {
    api: Api<Lease>,
    cfg: ShardConfig,
    /// This process: tells it apart from another process with the same identity.
    incarnation: String,
    membership_name: String,
    expiry: Expiry,
    membership: Option<Held>,
    held: BTreeMap<ShardId, Held>,
    /// Why no shard is taken now, as last logged.
    waiting: Option<String>,
    tx: watch::Sender<BTreeSet<ShardId>>,
    /// The other replicas' valid shards, as the last round read them.
    others: watch::Sender<BTreeMap<ShardId, String>>,
}

impl ShardOwner {
    /// An owner of shards for `cfg`, and the shards it owns (empty until [`ShardOwner::run`]
    /// takes some). Fails when `cfg` is invalid.
    pub fn new(
        client: kube::Client,
        cfg: ShardConfig,
    ) -> Result<(ShardOwner, watch::Receiver<BTreeSet<ShardId>>), ShardError> {
        cfg.validate()?;
        let (tx, rx) = watch::channel(BTreeSet::new());
        let owner = ShardOwner {
            api: Api::namespaced(client, &cfg.namespace),
            membership_name: replica_lease_name(&cfg.lease_name, &cfg.identity),
            incarnation: uuid::Uuid::new_v4().simple().to_string(),
            cfg,
            expiry: Expiry::default(),
            membership: None,
            held: BTreeMap::new(),
            waiting: None,
            tx,
            others: watch::channel(BTreeMap::new()).0,
        };
        Ok((owner, rx))
    }

    /// The shards other replicas hold validly, by holder identity, as of the last read of the
    /// Leases (once per `poll_period`; emptied when the owner stops). With the owned set it
    /// tells where each agent is served: a shard in neither has no owner right now.
    pub fn others(&self) -> watch::Receiver<BTreeMap<ShardId, String>> {
        self.others.subscribe()
    }

    /// Holds this replica's share of the shards until `shutdown` is cancelled, then releases
    /// them (and its membership) so that the other replicas take them at once, and returns.
    /// Returns an error, having released what it held, when the replicas' settings conflict or
    /// the API server refuses the Leases; the owned set is empty then.
    pub async fn run(mut self, shutdown: CancellationToken) -> Result<(), ShardError> {
        tracing::info!(
            lease = %self.cfg.lease_name,
            namespace = %self.cfg.namespace,
            identity = %self.cfg.identity,
            shards = self.cfg.shards.get(),
            "owning shards"
        );
        let mut poll = tokio::time::interval(self.cfg.poll_period);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // a release or a replica joining or leaving starts a round at once (a hand-over takes
        // the watch's latency, not a poll period); without watch access, polling alone
        let labels = format!("{LEASE_LABEL}={}", self.cfg.lease_name);
        let mut changes = watcher(self.api.clone(), watcher::Config::default().labels(&labels))
            .default_backoff()
            .boxed();
        let mut wake = Wake::default();
        let result = loop {
            tokio::select! {
                _ = shutdown.cancelled() => break Ok(()),
                _ = poll.tick() => {}
                ev = changes.next() => match ev {
                    Some(Ok(ev)) if wake.wakes(&self.cfg.lease_name, &ev) => poll.reset(),
                    Some(Ok(_)) => continue,
                    Some(Err(e)) => {
                        tracing::debug!(error = %e, "watching the shard Leases failed: polling");
                        continue;
                    }
                    None => {
                        changes = futures::stream::pending().boxed();
                        continue;
                    }
                },
            }
            // a round that hangs must not keep a shard published past its validity
            let now = Instant::now();
            let deadline = self
                .held
                .values()
                .map(|h| h.valid_until)
                .filter(|&t| t > now)
                .fold(now + self.cfg.renew_period, Instant::min);
            let round = tokio::select! {
                r = tokio::time::timeout_at(deadline, self.round()) => r,
                _ = shutdown.cancelled() => break Ok(()),
            };
            match round {
                Ok(Ok(())) => {}
                Ok(Err(e)) => break Err(e),
                Err(_) => tracing::warn!(
                    lease = %self.cfg.lease_name,
                    "reading and writing the shard Leases is slow: round cut short"
                ),
            }
            self.publish();
        };
        self.give_up().await;
        if let Err(e) = &result {
            tracing::error!(error = %e, "stopped owning shards");
        }
        result
    }

    /// The shards held and still valid, published when they changed.
    fn publish(&self) {
        let now = Instant::now();
        let owned: BTreeSet<ShardId> = self
            .held
            .iter()
            .filter(|(_, h)| h.valid_until > now)
            .map(|(&s, _)| s)
            .collect();
        self.tx.send_if_modified(|cur| {
            if *cur == owned {
                return false;
            }
            tracing::info!(
                owned = owned.len(),
                shards = ?owned,
                "owned shards changed"
            );
            *cur = owned;
            true
        });
    }

    fn held_now(&self, now: Instant) -> Held {
        Held {
            renewed_at: now,
            valid_until: now + self.cfg.lease_duration - self.cfg.renew_period,
        }
    }

    fn claimant(&self) -> Claimant<'_> {
        Claimant {
            lease_name: &self.cfg.lease_name,
            identity: &self.cfg.identity,
            incarnation: &self.incarnation,
            shards: self.cfg.shards,
            duration: self.cfg.lease_duration,
        }
    }

    fn is_mine(&self, view: &LeaseView) -> bool {
        view.holder.as_deref() == Some(&self.cfg.identity)
            && view.incarnation.as_deref() == Some(&self.incarnation)
    }

    fn forbidden(&self, verb: &'static str, target: String, e: &kube::Error) -> ShardError {
        let message = match e {
            kube::Error::Api(s) => s.message.clone(),
            other => other.to_string(),
        };
        ShardError::Forbidden {
            verb,
            target,
            namespace: self.cfg.namespace.clone(),
            message,
        }
    }

    /// Every Lease of the ownership; `None` (logged) when the API server did not answer.
    async fn list(&self) -> Result<Option<Vec<Lease>>, ShardError> {
        let params =
            ListParams::default().labels(&format!("{LEASE_LABEL}={}", self.cfg.lease_name));
        match self.api.list(&params).await {
            Ok(list) => Ok(Some(list.items)),
            Err(e) if crate::api_error::is_status(&e, 403) => Err(self.forbidden(
                "list",
                format!("the Leases of namespace {}", self.cfg.namespace),
                &e,
            )),
            Err(e) => {
                tracing::warn!(error = %e, lease = %self.cfg.lease_name, "cannot read the shard Leases");
                Ok(None)
            }
        }
    }

    /// Creates `lease` (when `existing` is `None`) or replaces `existing` with it (failing with
    /// 409 if anyone wrote it since it was read).
    async fn write(&self, existing: bool, lease: &Lease) -> Result<Wrote, ShardError> {
        let name = lease.metadata.name.clone().unwrap_or_default();
        let (verb, res) = if existing {
            (
                "update",
                self.api.replace(&name, &PostParams::default(), lease).await,
            )
        } else {
            (
                "create",
                self.api.create(&PostParams::default(), lease).await,
            )
        };
        match res {
            Ok(_) => Ok(Wrote::Done),
            Err(e) if crate::api_error::is_status(&e, 409) => Ok(Wrote::Lost),
            Err(e) if crate::api_error::is_status(&e, 403) => {
                Err(self.forbidden(verb, format!("Lease {}/{name}", self.cfg.namespace), &e))
            }
            Err(e) => {
                tracing::warn!(error = %e, lease = %name, "cannot write a shard Lease");
                Ok(Wrote::Lost)
            }
        }
    }

    /// One read of every Lease, then the writes it calls for.
    async fn round(&mut self) -> Result<(), ShardError> {
        let now = Instant::now();
        let Some(leases) = self.list().await? else {
            return Ok(());
        };
        let views: Vec<LeaseView> = leases
            .into_iter()
            .map(|l| LeaseView::new(&self.cfg.lease_name, l))
            .collect();
        self.expiry
            .retain(|name| views.iter().any(|v| v.name == name));
        let mut shard_leases: BTreeMap<u32, Seen> = BTreeMap::new();
        let mut replicas: Vec<Seen> = Vec::new();
        let mut waiting: Option<String> = None;
        for view in views {
            let duration = view.duration.unwrap_or(self.cfg.lease_duration);
            let obs = self
                .expiry
                .observe(&view.name, &view.resource_version, duration, now);
            let seen = Seen { view, obs };
            self.check(&seen, &mut waiting)?;
            match seen.view.kind {
                LeaseKind::Shard(k) => {
                    shard_leases.insert(k, seen);
                }
                LeaseKind::Replica => replicas.push(seen),
                LeaseKind::Other => {}
            }
        }
        if waiting != self.waiting {
            if let Some(why) = &waiting {
                tracing::info!(reason = %why, "not taking shards yet");
            }
            self.waiting = waiting;
        }

        // shards taken from me (I stopped renewing long enough) or deleted
        let lost: Vec<ShardId> = self
            .held
            .keys()
            .copied()
            .filter(|s| {
                !shard_leases
                    .get(&s.get())
                    .is_some_and(|seen| self.is_mine(&seen.view))
            })
            .collect();
        for s in &lost {
            self.held.remove(s);
        }
        if !lost.is_empty() {
            tracing::warn!(shards = ?lost, "lost shards to other replicas");
        }

        self.renew_membership(&replicas, now).await?;
        let taking = self.waiting.is_none() && self.membership.is_some();

        let me = self.cfg.identity.clone();
        let live: BTreeSet<String> = replicas
            .iter()
            .filter_map(|s| s.live_holder().map(str::to_string))
            .chain([me.clone()])
            .collect();
        let holders = Holders::from_fn(self.cfg.shards, |s| match shard_leases.get(&s.get()) {
            None => Holder::Free,
            Some(seen)
                if seen.view.holder.as_deref() == Some(me.as_str())
                    && !self.is_mine(&seen.view) =>
            {
                if self.membership.is_some() || seen.obs.expired {
                    // my previous life: gone, since I hold my membership
                    Holder::Free
                } else {
                    // another process with my identity: never mine to keep
                    let other = seen.view.incarnation.as_deref().unwrap_or("unknown");
                    Holder::Valid(format!("{me} (process {other})"))
                }
            }
            Some(seen) => Holder::from_lease(seen.view.holder.as_deref(), seen.obs.expired),
        });
        let others: BTreeMap<ShardId, String> = holders
            .iter()
            .filter_map(|(s, h)| match h {
                Holder::Valid(id) if *id != me => Some((s, id.clone())),
                _ => None,
            })
            .collect();
        self.others.send_if_modified(|cur| {
            let changed = *cur != others;
            *cur = others;
            changed
        });
        let mut decision = decide(&me, &live, &holders);
        if !taking {
            decision.acquire.clear();
        }

        // stop counting what I give up before anyone can take it
        for s in &decision.release {
            self.held.remove(s);
        }
        self.publish();
        // the writes of a round go out together: a round of a loaded replica (or API server)
        // takes one write's time, not one per shard, and stays within its Leases' validity
        let releases: Vec<Lease> = decision
            .release
            .iter()
            .filter_map(|s| shard_leases.get(&s.get()))
            .map(|seen| release(&seen.view.lease))
            .collect();
        for r in join_all(releases.iter().map(|l| self.write(true, l))).await {
            r?;
        }
        if !decision.release.is_empty() {
            tracing::info!(shards = ?decision.release, share = decision.share, live = live.len(), "gave up shards above my share");
        }
        let renewals: Vec<(ShardId, Option<&Lease>)> = decision
            .keep
            .iter()
            .filter(|s| {
                self.held.get(s).is_none_or(|h| {
                    now.saturating_duration_since(h.renewed_at) >= self.cfg.renew_period
                })
            })
            .filter_map(|s| {
                shard_leases
                    .get(&s.get())
                    .map(|seen| (*s, Some(&seen.view.lease)))
            })
            .collect();
        self.claim_shards(renewals, now).await?;
        let acquire: Vec<(ShardId, Option<&Lease>)> = decision
            .acquire
            .iter()
            .map(|s| (*s, shard_leases.get(&s.get()).map(|seen| &seen.view.lease)))
            .collect();
        let taken = self.claim_shards(acquire, now).await?;
        if !taken.is_empty() {
            tracing::info!(shards = ?taken, share = decision.share, live = live.len(), "took shards");
        }
        Ok(())
    }

    /// Fails on what must stop the replica; notes in `waiting` what must stop it taking shards
    /// for now (a Lease of another shard count, or of my identity, still held by a process that
    /// may be gone: a renewal proves it is not).
    fn check(&self, seen: &Seen, waiting: &mut Option<String>) -> Result<(), ShardError> {
        let Some(holder) = seen.live_holder() else {
            return Ok(());
        };
        let v = &seen.view;
        let ours = self.cfg.shards.get();
        if v.shards != Some(ours) {
            if seen.obs.changed {
                return Err(ShardError::ShardCountMismatch {
                    namespace: self.cfg.namespace.clone(),
                    name: v.name.clone(),
                    holder: holder.to_string(),
                    theirs: v
                        .shards
                        .map_or("an unknown number of".into(), |n| n.to_string()),
                    ours,
                });
            }
            waiting.get_or_insert_with(|| {
                format!(
                    "Lease {} is held by {holder} with another shard count: waiting for it to expire",
                    v.name
                )
            });
        }
        if holder == self.cfg.identity && !self.is_mine(v) {
            if seen.obs.changed {
                return Err(ShardError::DuplicateIdentity {
                    namespace: self.cfg.namespace.clone(),
                    name: v.name.clone(),
                    identity: self.cfg.identity.clone(),
                });
            }
            if v.kind == LeaseKind::Replica {
                waiting.get_or_insert_with(|| {
                    format!(
                        "Lease {} is held with this identity by another process (an earlier start?): waiting for it to expire",
                        v.name
                    )
                });
            }
        }
        Ok(())
    }

    /// Takes or renews my membership Lease when due (not while waiting to take shards, unless
    /// already held).
    async fn renew_membership(
        &mut self,
        replicas: &[Seen],
        now: Instant,
    ) -> Result<(), ShardError> {
        if let Some(h) = self.membership
            && (h.valid_until <= now)
        {
            self.membership = None;
        }
        if self.membership.is_none() && self.waiting.is_some() {
            return Ok(());
        }
        let due = self
            .membership
            .is_none_or(|h| now.saturating_duration_since(h.renewed_at) >= self.cfg.renew_period);
        if !due {
            return Ok(());
        }
        let existing = replicas
            .iter()
            .find(|s| s.view.name == self.membership_name)
            .map(|s| &s.view.lease);
        let lease = claim(
            existing,
            &self.membership_name,
            &self.cfg.namespace,
            &self.claimant(),
        );
        if let Wrote::Done = self.write(existing.is_some(), &lease).await? {
            if self.membership.is_none() {
                tracing::info!(lease = %self.membership_name, "joined the replicas");
            }
            self.membership = Some(self.held_now(now));
        }
        Ok(())
    }

    /// Takes or renews shard `s`; whether it is held now.
    /// Claims (or renews) each shard of `shards`, its Lease as read (`None`: none yet), the
    /// writes together; returns the shards now held.
    async fn claim_shards(
        &mut self,
        shards: Vec<(ShardId, Option<&Lease>)>,
        now: Instant,
    ) -> Result<Vec<ShardId>, ShardError> {
        let writes: Vec<(ShardId, bool, Lease)> = shards
            .into_iter()
            .map(|(s, existing)| {
                let name = shard_lease_name(&self.cfg.lease_name, s);
                let lease = claim(existing, &name, &self.cfg.namespace, &self.claimant());
                (s, existing.is_some(), lease)
            })
            .collect();
        let results = join_all(
            writes
                .iter()
                .map(|(_, existing, l)| self.write(*existing, l)),
        )
        .await;
        let mut held = Vec::new();
        for ((s, _, _), r) in writes.iter().zip(results) {
            if let Wrote::Done = r? {
                self.held.insert(*s, self.held_now(now));
                held.push(*s);
            }
        }
        Ok(held)
    }

    /// Gives every Lease this process holds up (bounded: an unreachable API server leaves them
    /// to expire).
    async fn give_up(&mut self) {
        self.held.clear();
        self.membership = None;
        self.publish();
        self.others.send_replace(BTreeMap::new());
        let release_all = async {
            let Ok(Some(leases)) = self.list().await else {
                return 0;
            };
            let mine: Vec<Lease> = leases
                .into_iter()
                .map(|l| LeaseView::new(&self.cfg.lease_name, l))
                .filter(|v| self.is_mine(v))
                .map(|v| release(&v.lease))
                .collect();
            join_all(mine.iter().map(|l| self.write(true, l)))
                .await
                .into_iter()
                .filter(|r| matches!(r, Ok(Wrote::Done)))
                .count()
        };
        match tokio::time::timeout(RELEASE_WITHIN.min(self.cfg.lease_duration), release_all).await {
            Ok(n) => tracing::info!(released = n, "released the shard Leases"),
            Err(_) => tracing::warn!("releasing the shard Leases timed out: they will expire"),
        }
    }
}

/// How long a stopping replica tries to release its Leases.
const RELEASE_WITHIN: Duration = Duration::from_secs(5);
