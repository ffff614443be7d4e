//! Shard ownership for active/active replicas (issue 29): agents are split into a fixed number of
//! shards, each shard is a `coordination.k8s.io/v1` Lease, and each replica holds its fair share.
//! (Design notes: see below, filled in with the async layer.)

mod id;
mod plan;

pub use id::{ShardCount, ShardId, shard_of};
pub use plan::{Decision, Holder, Holders, decide, fair_shares};
