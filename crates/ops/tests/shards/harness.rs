//! Replicas of a shard owner on one embedded hub, and waiting on what they own.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use argocd_pull_hub::Hub;
use argocd_pull_ops::CancellationToken;
use argocd_pull_ops::shards::{ShardConfig, ShardCount, ShardError, ShardId, ShardOwner};
use futures::future::select_all;
use k8s_openapi::api::coordination::v1::Lease;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub const NS: &str = "default";
pub const LEASE: &str = "principal";
/// The guard of every wait: far above what any outcome needs.
pub const GUARD: Duration = Duration::from_secs(30);

/// Short Leases so that a killed replica's shards expire quickly.
pub fn config(identity: &str) -> ShardConfig {
    let mut c = ShardConfig::new(LEASE, NS, identity);
    c.lease_duration = Duration::from_secs(2);
    c.renew_period = Duration::from_millis(500);
    c.poll_period = Duration::from_millis(100);
    c
}

/// One running owner.
pub struct Replica {
    pub name: String,
    pub owned: watch::Receiver<BTreeSet<ShardId>>,
    /// The shards the others hold, as this one last read them.
    pub others: watch::Receiver<BTreeMap<ShardId, String>>,
    pub token: CancellationToken,
    pub task: JoinHandle<Result<(), ShardError>>,
}

impl Replica {
    pub fn start(hub: &Hub, cfg: ShardConfig) -> Replica {
        let name = cfg.identity.clone();
        let (owner, owned) = ShardOwner::new(hub.client(), cfg).expect("valid settings");
        let others = owner.others();
        let token = CancellationToken::new();
        let task = tokio::spawn(owner.run(token.clone()));
        Replica {
            name,
            owned,
            others,
            token,
            task,
        }
    }

    /// Cancels it (SIGTERM) and waits for it to have released its shards.
    pub async fn stop(self) {
        self.token.cancel();
        let result = tokio::time::timeout(GUARD, self.task)
            .await
            .expect("the owner stops")
            .expect("the owner does not panic");
        result.expect("the owner stops cleanly");
        assert!(
            self.owned.borrow().is_empty(),
            "nothing owned after stopping"
        );
    }

    /// How it ended, once it stops by itself.
    pub async fn failure(self) -> ShardError {
        tokio::time::timeout(GUARD, self.task)
            .await
            .expect("the owner stops by itself")
            .expect("the owner does not panic")
            .expect_err("the owner fails")
    }
}

/// Waits until `cond` holds for the replicas' owned sets (re-checked at every change, each time
/// checking that no shard is owned twice); returns those sets.
pub async fn wait_for(
    replicas: &[&Replica],
    what: &str,
    cond: impl Fn(&[BTreeSet<ShardId>]) -> bool,
) -> Vec<BTreeSet<ShardId>> {
    let mut rxs: Vec<_> = replicas.iter().map(|r| r.owned.clone()).collect();
    let mut last = Vec::new();
    let waited = tokio::time::timeout(GUARD, async {
        loop {
            last = rxs
                .iter_mut()
                .map(|rx| rx.borrow_and_update().clone())
                .collect();
            assert_disjoint(replicas, &last);
            if cond(&last) {
                return;
            }
            let (changed, _, _) = select_all(rxs.iter_mut().map(|rx| Box::pin(rx.changed()))).await;
            changed.expect("an owner stopped");
        }
    })
    .await;
    if waited.is_err() {
        panic!("timed out waiting for {what}: {last:?}");
    }
    last
}

/// No shard owned by two running replicas at once (checked at every change a wait sees: a
/// replica stops counting a shard before its Lease can go to another).
fn assert_disjoint(replicas: &[&Replica], sets: &[BTreeSet<ShardId>]) {
    for (i, a) in sets.iter().enumerate() {
        for (j, b) in sets.iter().enumerate().skip(i + 1) {
            let both: Vec<_> = a.intersection(b).collect();
            assert!(
                both.is_empty(),
                "shards {both:?} owned by both {} and {}",
                replicas[i].name,
                replicas[j].name
            );
        }
    }
}

/// Every shard owned by exactly one of the sets, each set's size `count / n` or one more.
pub fn fair_split(count: u32) -> impl Fn(&[BTreeSet<ShardId>]) -> bool {
    move |sets| {
        let n = sets.len() as u32;
        let all: BTreeSet<u32> = sets.iter().flatten().map(|s| s.get()).collect();
        let total: usize = sets.iter().map(BTreeSet::len).sum();
        total == count as usize
            && all.len() == count as usize
            && sets
                .iter()
                .all(|s| (count / n..=count.div_ceil(n)).contains(&(s.len() as u32)))
    }
}

/// Waits for a fair split of the 32 shards between `replicas`, then checks that the Leases say
/// the same as the owners.
pub async fn wait_fair(hub: &Hub, replicas: &[&Replica]) -> Vec<BTreeSet<ShardId>> {
    let sets = wait_for(
        replicas,
        &format!("a fair split between {} replicas", replicas.len()),
        fair_split(32),
    )
    .await;
    let holders = shard_holders(hub).await;
    for (r, set) in replicas.iter().zip(&sets) {
        for s in set {
            assert_eq!(
                holders.get(&s.get()).map(String::as_str),
                Some(r.name.as_str()),
                "Lease of shard {s} names its owner"
            );
        }
    }
    sets
}

/// The holder of each shard Lease, by shard.
pub async fn shard_holders(hub: &Hub) -> BTreeMap<u32, String> {
    let api: kube::Api<Lease> = kube::Api::namespaced(hub.client(), NS);
    let list = api.list(&Default::default()).await.expect("list Leases");
    list.items
        .into_iter()
        .filter_map(|l| {
            let k = l
                .metadata
                .name
                .as_deref()?
                .strip_prefix("principal-shard-")?
                .parse()
                .ok()?;
            Some((k, l.spec?.holder_identity?))
        })
        .collect()
}

pub fn count(n: u32) -> ShardCount {
    ShardCount::new(n).expect("a valid count")
}
