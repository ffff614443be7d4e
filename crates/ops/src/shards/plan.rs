//! What a replica should hold: fair shares and the take/give-up decision (pure, no I/O).

use std::collections::{BTreeMap, BTreeSet};

use super::id::{ShardCount, ShardId, rank};

/// Who holds a shard's Lease, as this replica last saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Holder {
    /// No holder (never held, or released), or a holder that stopped renewing (expired):
    /// anyone may take it.
    Free,
    /// Held by this identity and renewed within the Lease duration: nobody else may take it.
    Valid(String),
}

impl Holder {
    /// From a Lease's `holderIdentity` (empty counts as none) and whether it expired.
    pub fn from_lease(holder: Option<&str>, expired: bool) -> Holder {
        match holder {
            Some(h) if !h.is_empty() && !expired => Holder::Valid(h.to_string()),
            _ => Holder::Free,
        }
    }

    fn is(&self, identity: &str) -> bool {
        matches!(self, Holder::Valid(h) if h == identity)
    }
}

/// The holder of every shard of a count: one entry per shard, no more, no less.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holders {
    count: ShardCount,
    holders: Vec<Holder>,
}

impl Holders {
    /// Every shard free.
    pub fn free(count: ShardCount) -> Holders {
        Holders::from_fn(count, |_| Holder::Free)
    }

    /// The holder of each shard of `count`, as `holder_of` says.
    pub fn from_fn(count: ShardCount, holder_of: impl FnMut(ShardId) -> Holder) -> Holders {
        Holders {
            count,
            holders: count.iter().map(holder_of).collect(),
        }
    }

    pub fn count(&self) -> ShardCount {
        self.count
    }

    pub fn get(&self, shard: ShardId) -> &Holder {
        &self.holders[shard.get() as usize]
    }

    /// Sets the holder of `shard`.
    pub fn set(&mut self, shard: ShardId, holder: Holder) {
        self.holders[shard.get() as usize] = holder;
    }

    /// Every shard with its holder, in order.
    pub fn iter(&self) -> impl Iterator<Item = (ShardId, &Holder)> {
        self.count.iter().zip(&self.holders)
    }

    /// The shards `identity` holds validly.
    pub fn held_by(&self, identity: &str) -> BTreeSet<ShardId> {
        self.iter()
            .filter(|(_, h)| h.is(identity))
            .map(|(s, _)| s)
            .collect()
    }

    /// How many shards each valid holder holds.
    pub fn per_holder(&self) -> BTreeMap<&str, u32> {
        let mut per = BTreeMap::new();
        for (_, h) in self.iter() {
            if let Holder::Valid(id) = h {
                *per.entry(id.as_str()).or_default() += 1;
            }
        }
        per
    }
}

/// Each live replica's fair share of `count` shards: `count / n` or one more, the extra ones
/// (`count % n`) going to the replicas that hold the most now (ties: the smallest identity), so
/// that reaching the split moves as few shards as possible. The shares add up to `count`; an
/// empty live set gets nothing.
pub fn fair_shares(
    count: ShardCount,
    live: &BTreeSet<String>,
    holding: impl Fn(&str) -> u32,
) -> BTreeMap<&str, u32> {
    let n = live.len() as u32;
    if n == 0 {
        return BTreeMap::new();
    }
    let (floor, extra) = (count.get() / n, count.get() % n);
    let mut by_holding: Vec<&str> = live.iter().map(String::as_str).collect();
    // stable sort: ties keep the set's (name) order
    by_holding.sort_by_key(|id| std::cmp::Reverse(holding(id)));
    by_holding
        .into_iter()
        .enumerate()
        .map(|(i, id)| (id, floor + u32::from((i as u32) < extra)))
        .collect()
}

/// What one replica should do now ([`decide`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Decision {
    /// My fair share.
    pub share: u32,
    /// Shards I hold validly and keep (renew).
    pub keep: BTreeSet<ShardId>,
    /// Free shards to try to take (the write may still lose to another replica's).
    pub acquire: BTreeSet<ShardId>,
    /// Shards I hold above my fair share: give them up so that the replicas below theirs take
    /// them.
    pub release: BTreeSet<ShardId>,
}

/// What `me` should take and give up, from the holder of every shard and the live replicas
/// (`me` counts as live whether or not `live` has it).
///
/// * Above my fair share ([`fair_shares`]): release the surplus, my least wanted shards first.
/// * Below it: take free shards (never a validly held one), my most wanted first, up to my share.
///
/// Only surplus shards move: when a replica joins, the others give up what is above their new
/// share (≈ count / (n + 1) shards in all) and the newcomer takes exactly those; when one leaves,
/// its shards expire and the others take them.
pub fn decide(me: &str, live: &BTreeSet<String>, holders: &Holders) -> Decision {
    let mut live_and_me;
    let live = if live.contains(me) {
        live
    } else {
        live_and_me = live.clone();
        live_and_me.insert(me.to_string());
        &live_and_me
    };
    let per = holders.per_holder();
    let shares = fair_shares(holders.count(), live, |id| {
        per.get(id).copied().unwrap_or(0)
    });
    let share = shares.get(me).copied().unwrap_or(0);
    let mut mine: Vec<ShardId> = holders.held_by(me).into_iter().collect();
    let mut decision = Decision {
        share,
        ..Decision::default()
    };
    if mine.len() as u32 > share {
        // most wanted first; keep the first `share`
        mine.sort_by_key(|&s| rank(me, s));
        decision.release = mine.split_off(share as usize).into_iter().collect();
        decision.keep = mine.into_iter().collect();
    } else {
        let mut free: Vec<ShardId> = holders
            .iter()
            .filter(|(_, h)| **h == Holder::Free)
            .map(|(s, _)| s)
            .collect();
        free.sort_by_key(|&s| rank(me, s));
        let want = (share as usize) - mine.len();
        decision.acquire = free.into_iter().take(want).collect();
        decision.keep = mine.into_iter().collect();
    }
    decision
}

#[cfg(test)]
mod tests;
