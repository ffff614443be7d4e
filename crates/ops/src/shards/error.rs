//! Why a replica stops owning shards: each error names its fix.

/// A fatal error of [`super::ShardOwner::run`]: the replica has given up its shards.
#[derive(Debug, thiserror::Error)]
pub enum ShardError {
    #[error("invalid shard ownership settings: {0}")]
    Config(String),
    #[error(
        "the API server refused to {verb} {target} (403 Forbidden: {message}): \
         grant this replica's ServiceAccount get, list, create and update on \
         leases.coordination.k8s.io in namespace {namespace} (a Role and a RoleBinding)"
    )]
    Forbidden {
        verb: &'static str,
        /// `Lease <namespace>/<name>`, or `the Leases of namespace <namespace>`.
        target: String,
        namespace: String,
        message: String,
    },
    #[error(
        "Lease {namespace}/{name} is renewed by {holder} with {theirs} shards while this replica \
         has {ours}: the shard count changed between replicas; give every replica the same shard \
         count (--ha-shards), and to change it stop every replica first"
    )]
    ShardCountMismatch {
        namespace: String,
        name: String,
        holder: String,
        theirs: String,
        ours: u32,
    },
    #[error(
        "Lease {namespace}/{name} is renewed by another process with this replica's identity \
         {identity:?}: two replicas with the same name; give each replica a unique identity \
         (its pod name)"
    )]
    DuplicateIdentity {
        namespace: String,
        name: String,
        identity: String,
    },
}
