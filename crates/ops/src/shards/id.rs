//! Shards and the agent → shard hash.

use std::fmt;
use std::hash::Hasher;

/// How many shards the agents are split into (`--ha-shards`): between 1 and
/// [`ShardCount::MAX`]. Every replica must use the same count.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ShardCount(u32);

impl ShardCount {
    /// The largest count: one Lease per shard, renewed by its holder, so a few hundred at most.
    pub const MAX: u32 = 1024;
    /// The default (`--ha-shards` 32): a fair split within one shard for up to ~10 replicas.
    pub const DEFAULT: ShardCount = ShardCount(32);

    /// `None` when `n` is 0 or above [`ShardCount::MAX`].
    pub fn new(n: u32) -> Option<ShardCount> {
        (1..=Self::MAX).contains(&n).then_some(ShardCount(n))
    }

    pub fn get(self) -> u32 {
        self.0
    }

    /// Shard `k`, `None` when `k` is not below the count.
    pub fn shard(self, k: u32) -> Option<ShardId> {
        (k < self.0).then_some(ShardId(k))
    }

    /// Every shard, in order.
    pub fn iter(self) -> impl DoubleEndedIterator<Item = ShardId> + ExactSizeIterator + Clone {
        (0..self.0).map(ShardId)
    }
}

impl Default for ShardCount {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl fmt::Display for ShardCount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// One shard: `0..count`. Only a [`ShardCount`] makes one ([`ShardCount::shard`],
/// [`ShardCount::iter`], [`shard_of`]), so a shard is always within the count it came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ShardId(u32);

impl ShardId {
    pub fn get(self) -> u32 {
        self.0
    }
}

impl fmt::Display for ShardId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// FNV-1a 64 of `bytes`: offset basis 0xcbf29ce484222325, prime 0x100000001b3 (the `fnv`
/// crate, which has no key and no per-process state).
pub(crate) fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h = fnv::FnvHasher::default();
    h.write(bytes);
    h.finish()
}

/// The shard of an agent: `FNV-1a-64(UTF-8 bytes of agent_name) mod count`.
///
/// This is part of the wire contract between replicas (every replica, whatever its version or
/// platform, must put an agent in the same shard), so it never changes: FNV-1a 64 with offset
/// basis 0xcbf29ce484222325 and prime 0x100000001b3 over the name's bytes exactly (no length
/// prefix, no terminator), reduced modulo the count. A golden test pins the values.
pub fn shard_of(agent_name: &str, count: ShardCount) -> ShardId {
    ShardId((fnv1a64(agent_name.as_bytes()) % u64::from(count.0)) as u32)
}

/// How much `replica` wants `shard`: rendezvous hashing (FNV-1a 64 of the identity, a 0 byte and
/// the shard's little-endian u32). A replica takes free shards in ascending rank and gives its
/// surplus up in descending rank, so that replicas taking at the same time mostly want different
/// shards, and a restarted replica tends to get the same shards back. Not part of any contract.
pub(crate) fn rank(replica: &str, shard: ShardId) -> u64 {
    let mut h = fnv::FnvHasher::default();
    h.write(replica.as_bytes());
    h.write(&[0]);
    h.write(&shard.0.to_le_bytes());
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agent_hash_is_fnv1a_64_and_never_changes() {
        // the published FNV-1a 64 test vectors
        assert_eq!(fnv1a64(b""), 0xcbf29ce484222325);
        assert_eq!(fnv1a64(b"a"), 0xaf63dc4c8601ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x85944171f73967e8);
        // golden shards of a few agent names: changing any of these moves agents between
        // replicas of different versions
        let c32 = ShardCount::DEFAULT;
        let golden: Vec<(&str, u32)> = [
            "cluster1",
            "cluster2",
            "agent-0001",
            "managed-cluster-east",
            "é",
        ]
        .into_iter()
        .map(|n| (n, shard_of(n, c32).get()))
        .collect();
        assert_eq!(golden, GOLDEN_32);
        let c7 = ShardCount::new(7).unwrap();
        assert_eq!(shard_of("cluster1", c7).get(), GOLDEN_CLUSTER1_7);
        assert_eq!(shard_of("anything", ShardCount::new(1).unwrap()).get(), 0);
    }

    const GOLDEN_32: [(&str, u32); 5] = [
        ("cluster1", 20),
        ("cluster2", 13),
        ("agent-0001", 14),
        ("managed-cluster-east", 17),
        ("é", 1),
    ];
    const GOLDEN_CLUSTER1_7: u32 = 5;

    #[test]
    fn shards_are_bounded_by_their_count() {
        assert_eq!(ShardCount::new(0), None);
        assert_eq!(ShardCount::new(ShardCount::MAX + 1), None);
        let c = ShardCount::new(3).unwrap();
        assert_eq!(c.shard(2).map(ShardId::get), Some(2));
        assert_eq!(c.shard(3), None);
        assert_eq!(c.iter().map(ShardId::get).collect::<Vec<_>>(), [0, 1, 2]);
        for i in 0..1000 {
            assert!(shard_of(&format!("agent-{i}"), c).get() < 3);
        }
    }

    #[test]
    fn agents_spread_evenly_over_the_shards() {
        let c = ShardCount::DEFAULT;
        let mut per = vec![0u32; 32];
        for i in 0..10_000 {
            per[shard_of(&format!("cluster-{i}"), c).get() as usize] += 1;
        }
        // 312.5 per shard on average
        assert!(per.iter().all(|&n| (250..=375).contains(&n)), "{per:?}");
    }
}
