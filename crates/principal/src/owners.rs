//! Active/active replicas (`--ha-mode active-active`): which replica serves each agent. The agents
//! are split into shards ([`argocd_pull_ops::shards`]); this replica serves the agents of the
//! shards it holds, and passes the calls of any other agent to the replica holding its shard, at
//! the host of that replica's Lease identity (`<name>@<host>`) and the replica port.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use argocd_pull_ops::shards::{ShardCount, ShardId, shard_of};
use tokio::sync::watch;

/// Where an agent is served now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Owner {
    /// By this replica.
    Me,
    /// By another replica, reached at `addr` (its replica port).
    Replica { identity: String, addr: SocketAddr },
    /// Nobody holds the agent's shard right now (a replica just died or left, or the replicas
    /// are starting).
    Nobody(ShardId),
    /// This replica holds the agent's shard and is still reading the hub's Applications of it:
    /// it serves the agent once they are in its cache (a resync from a partial cache would tell
    /// the agent to delete what the hub has).
    Loading(ShardId),
}

/// The shard Leases as this replica sees them: its own shards and the other replicas'.
#[derive(Clone, Debug)]
pub struct Owners {
    count: ShardCount,
    owned: watch::Receiver<BTreeSet<ShardId>>,
    others: watch::Receiver<BTreeMap<ShardId, String>>,
    /// the shards whose hub Applications are in this replica's cache (the hub watch keeps only
    /// the Applications of the agents this replica serves)
    loaded: watch::Sender<BTreeSet<ShardId>>,
    /// Where this replica takes the other replicas' forwarded calls (mutual TLS).
    pub replica_listen: SocketAddr,
    /// How long a call for an agent whose shard has no owner waits for one before it fails
    /// (the agent then retries): at least a Lease duration and a read of the Leases.
    pub wait: Duration,
}

impl Owners {
    /// `owned`/`others`: [`argocd_pull_ops::shards::ShardOwner`]'s owned set and
    /// [`others`](argocd_pull_ops::shards::ShardOwner::others).
    pub fn new(
        count: ShardCount,
        owned: watch::Receiver<BTreeSet<ShardId>>,
        others: watch::Receiver<BTreeMap<ShardId, String>>,
        replica_listen: SocketAddr,
        wait: Duration,
    ) -> Owners {
        Owners {
            count,
            owned,
            others,
            loaded: watch::channel(BTreeSet::new()).0,
            replica_listen,
            wait,
        }
    }

    /// The shards whose hub Applications are now in this replica's cache.
    pub(super) fn set_loaded(&self, shards: BTreeSet<ShardId>) {
        self.loaded.send_if_modified(|l| {
            let changed = *l != shards;
            *l = shards;
            changed
        });
    }

    pub(super) fn count(&self) -> ShardCount {
        self.count
    }

    pub fn shard(&self, agent: &str) -> ShardId {
        shard_of(agent, self.count)
    }

    /// Whether this replica serves `agent` now.
    pub fn owns(&self, agent: &str) -> bool {
        self.owned.borrow().contains(&self.shard(agent))
    }

    /// Where `agent` is served now.
    pub fn owner(&self, agent: &str) -> Owner {
        let shard = self.shard(agent);
        if self.owned.borrow().contains(&shard) {
            return match self.loaded.borrow().contains(&shard) {
                true => Owner::Me,
                false => Owner::Loading(shard),
            };
        }
        let others = self.others.borrow();
        let Some(identity) = others.get(&shard) else {
            return Owner::Nobody(shard);
        };
        match replica_addr(identity, self.replica_listen.port()) {
            Some(addr) => Owner::Replica {
                identity: identity.clone(),
                addr,
            },
            // a holder without a usable host cannot be reached: as good as none
            None => Owner::Nobody(shard),
        }
    }

    /// [`Owners::owner`], waiting up to [`Owners::wait`] while nobody holds the agent's shard or
    /// this replica is still loading it.
    pub async fn wait_owner(&self, agent: &str) -> Owner {
        self.wait_for(agent, None).await
    }

    /// [`Owners::wait_owner`], also waiting while the owner is `unreachable` (a replica gone
    /// without releasing its shards: the others take them when their Leases expire).
    pub async fn wait_owner_other_than(&self, agent: &str, unreachable: &Owner) -> Owner {
        self.wait_for(agent, Some(unreachable)).await
    }

    async fn wait_for(&self, agent: &str, not: Option<&Owner>) -> Owner {
        let (mut owned, mut others) = (self.owned.clone(), self.others.clone());
        let mut loaded = self.loaded.subscribe();
        let deadline = tokio::time::Instant::now() + self.wait;
        loop {
            let now = self.owner(agent);
            if !matches!(now, Owner::Nobody(_) | Owner::Loading(_)) && Some(&now) != not {
                return now;
            }
            tokio::select! {
                r = owned.changed() => if r.is_err() { return now },
                r = others.changed() => if r.is_err() { return now },
                r = loaded.changed() => if r.is_err() { return now },
                _ = tokio::time::sleep_until(deadline) => return now,
            }
        }
    }

    /// The shards this replica holds, at every change.
    pub fn owned(&self) -> watch::Receiver<BTreeSet<ShardId>> {
        self.owned.clone()
    }
}

/// The replica port at the host of a Lease identity `<name>@<host>` (an IP address, the pod's).
fn replica_addr(identity: &str, port: u16) -> Option<SocketAddr> {
    let (_, host) = identity.rsplit_once('@')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.parse::<IpAddr>()
        .ok()
        .map(|ip| SocketAddr::new(ip, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owners(mine: &[u32], theirs: &[(u32, &str)]) -> Owners {
        let count = ShardCount::new(4).unwrap();
        let s = |k| count.shard(k).unwrap();
        let owned = mine.iter().map(|&k| s(k)).collect();
        let others = theirs
            .iter()
            .map(|&(k, id)| (s(k), id.to_string()))
            .collect();
        // the Leases' senders live on (a closed watch ends every wait at once)
        let (owned, others) = (watch::channel(owned), watch::channel(others));
        let o = Owners::new(
            count,
            owned.1,
            others.1,
            "0.0.0.0:8406".parse().unwrap(),
            Duration::from_millis(50),
        );
        o.set_loaded(count.iter().collect());
        std::mem::forget((owned.0, others.0));
        o
    }

    #[tokio::test]
    async fn an_agent_is_served_here_at_the_holder_of_its_shard_or_waits_for_one() {
        // FNV-1a 64 mod 4 (the golden values of argocd_pull_ops::shards)
        let count = ShardCount::new(4).unwrap();
        let agent_in = |k: u32| {
            (0..)
                .map(|i| format!("agent-{i}"))
                .find(|a| shard_of(a, count).get() == k)
                .unwrap()
        };
        let o = owners(
            &[0, 1],
            &[(2, "principal-1@10.0.0.8"), (3, "principal-2@fd00::7")],
        );
        assert_eq!(o.owner(&agent_in(0)), Owner::Me);
        assert!(o.owns(&agent_in(1)));
        assert_eq!(
            o.owner(&agent_in(2)),
            Owner::Replica {
                identity: "principal-1@10.0.0.8".into(),
                addr: "10.0.0.8:8406".parse().unwrap()
            }
        );
        assert_eq!(
            o.wait_owner(&agent_in(3)).await,
            Owner::Replica {
                identity: "principal-2@fd00::7".into(),
                addr: "[fd00::7]:8406".parse().unwrap()
            },
            "IPv6 pod addresses"
        );
        // a shard taken is served once its hub Applications are read
        o.set_loaded([0].into_iter().map(|k| count.shard(k).unwrap()).collect());
        assert_eq!(
            o.owner(&agent_in(1)),
            Owner::Loading(count.shard(1).unwrap())
        );
        let (later, one) = (o.clone(), agent_in(1));
        let (waited, ()) = tokio::join!(o.wait_owner(&one), async move {
            later.set_loaded(
                [0, 1]
                    .into_iter()
                    .map(|k| count.shard(k).unwrap())
                    .collect(),
            );
        });
        assert_eq!(waited, Owner::Me);
        // an owner this replica cannot reach: waited out until its shard is taken
        let gone = o.owner(&agent_in(2));
        assert_eq!(
            o.wait_owner_other_than(&agent_in(2), &gone).await,
            gone,
            "still the same holder after the wait"
        );
        let o = owners(&[0], &[(2, "principal-1")]);
        assert!(
            matches!(o.owner(&agent_in(2)), Owner::Nobody(s) if s.get() == 2),
            "no host"
        );
        assert!(
            matches!(o.wait_owner(&agent_in(3)).await, Owner::Nobody(s) if s.get() == 3),
            "no holder: given up after the wait"
        );
    }
}
