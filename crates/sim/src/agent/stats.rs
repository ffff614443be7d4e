//! Counters of the work agent's activity.

/// Counters of the work agent's activity (for tests and benchmarks).
#[derive(Debug, Default)]
pub struct AgentStats {
    /// Completed reconciles of works.
    pub reconciles: std::sync::atomic::AtomicU64,
    /// Writes to managed clusters (creates, updates, applies, deletes).
    pub spoke_writes: std::sync::atomic::AtomicU64,
    /// Status writes to the hub.
    pub status_writes: std::sync::atomic::AtomicU64,
}

/// A snapshot of [`AgentStats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AgentCounts {
    pub reconciles: u64,
    pub spoke_writes: u64,
    pub status_writes: u64,
}

impl AgentStats {
    pub fn snapshot(&self) -> AgentCounts {
        use std::sync::atomic::Ordering::Relaxed;
        AgentCounts {
            reconciles: self.reconciles.load(Relaxed),
            spoke_writes: self.spoke_writes.load(Relaxed),
            status_writes: self.status_writes.load(Relaxed),
        }
    }
    pub(super) fn bump(c: &std::sync::atomic::AtomicU64) {
        c.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}
