//! What the work agent is configured with, and the names it writes on objects.

use std::time::Duration;

use crate::feedback;

/// The work agent's finalizer on ManifestWorks.
pub const WORK_FINALIZER: &str = "cluster.open-cluster-management.io/manifest-work-cleanup";
/// Annotation holding the hash of the applied manifest (OCM's `OnSpokeChange` bookkeeping).
pub const OBJECT_HASH_ANNOTATION: &str = "open-cluster-management.io/object-hash";

/// Work-agent tunables.
#[derive(Clone, Debug)]
pub struct WorkAgentConfig {
    /// Works reconciled at the same time (all clusters together).
    pub concurrency: u16,
    /// Field manager of server-side applies without an explicit one.
    pub field_manager: String,
    /// Delay before retrying a work whose apply or cleanup did not complete.
    pub retry_interval: Duration,
    /// Maximum size of a `JsonRaw` feedback value (OCM: 1024).
    pub json_raw_limit: usize,
}

impl Default for WorkAgentConfig {
    fn default() -> Self {
        WorkAgentConfig {
            concurrency: 64,
            field_manager: "work-agent".into(),
            retry_interval: Duration::from_millis(500),
            json_raw_limit: feedback::JSON_RAW_LIMIT,
        }
    }
}
