//! Shard ownership for active/active replicas (issue 29): the agents are split into a fixed
//! number of shards, each shard is a `coordination.k8s.io/v1` Lease, and each live replica holds
//! its fair share of them. Ownership comes from Kubernetes only: no replica talks to another.
//!
//! * **Agent → shard**: [`shard_of`], FNV-1a 64 of the agent's name modulo the shard count; fixed
//!   forever (a golden test pins it).
//! * **Leases** (in the replicas' namespace, all labelled [`LEASE_LABEL`]`=<lease_name>` and
//!   annotated with the writer's shard count, [`SHARDS_ANNOTATION`], and process,
//!   [`INCARNATION_ANNOTATION`]):
//!   - `<lease_name>-shard-<k>` for each shard `k`, held by the replica that owns it;
//!   - `<lease_name>-replica-<identity>` ([`replica_lease_name`]), each replica's *membership*,
//!     held and renewed by that replica like its shards. The live replicas are the holders of
//!     the membership Leases that have not expired, plus this one.
//! * **Expiry** is judged as client-go's leader election does, without comparing clocks: a Lease
//!   is expired once this replica has seen it unchanged (same resourceVersion) for its
//!   `leaseDurationSeconds`. A released Lease (no holder) is free at once.
//! * **Decision** ([`decide`], pure): each live replica's fair share is `shards / n` or one more
//!   ([`fair_shares`]: the extra ones go to those holding most now); a replica above its share
//!   releases the surplus, one below takes free or expired shards up to its share. Only surplus
//!   shards move: a joining replica gets ≈ shards / (n + 1) of them, a leaving one's are taken
//!   by the others.
//! * **Writes** ([`ShardOwner`]): one list per `poll_period`, then creates or replaces with the
//!   resourceVersion read (optimistic concurrency: of two replicas taking the same shard, one
//!   gets 409 and does not hold it). A held shard is renewed every `renew_period` only while the
//!   Lease still names this process; the replica stops counting a shard as its own
//!   `lease_duration - renew_period` after the last renewal it sent, before another can take it.
//!   A shard given up is dropped from the owned set before its Lease is released. On shutdown
//!   every Lease of the process is released, so the others take its shards at once; a replica
//!   killed loses them after `lease_duration` (plus up to a `poll_period` for the others to see).
//! * **Bad settings** stop the owner with an error naming the fix ([`ShardError`]): the API
//!   server refusing the Leases (403: the verbs and the Role to grant); a Lease of another shard
//!   count renewed while this replica watches (a replica with a different count is running); a
//!   Lease of this identity renewed by another process (two replicas with the same name). Until
//!   such a Lease is renewed or expires, the replica takes nothing — it may be left by a process
//!   that is gone (a restart with the same pod name, or after changing the count).

mod config;
mod error;
mod expiry;
mod id;
mod lease;
mod owner;
mod plan;
mod wake;

pub use config::ShardConfig;
pub use error::ShardError;
pub use id::{ShardCount, ShardId, shard_of};
pub use lease::{
    INCARNATION_ANNOTATION, LEASE_LABEL, SHARDS_ANNOTATION, replica_lease_name, shard_lease_name,
};
pub use owner::ShardOwner;
pub use plan::{Decision, Holder, Holders, decide, fair_shares};
