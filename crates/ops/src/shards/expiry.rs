//! When a Lease counts as expired: when this replica has seen it unchanged for its duration.
//!
//! As client-go's leader election, a replica does not compare `renewTime` with its own clock
//! (replicas' clocks differ): it notes when it first saw each resourceVersion of a Lease, and the
//! Lease is expired once that resourceVersion is older than the Lease's duration on the
//! replica's monotonic clock. A Lease seen for the first time is therefore valid for a whole
//! duration, even if its holder died long ago.

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

/// What one observation of a Lease says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Observed {
    /// Written since the previous observation (false the first time a Lease is seen).
    pub changed: bool,
    /// Unchanged for at least its duration.
    pub expired: bool,
}

/// The resourceVersion of each Lease and when it was first seen.
#[derive(Debug, Default)]
pub struct Expiry {
    seen: HashMap<String, (String, Instant)>,
}

impl Expiry {
    /// Notes that Lease `name` has `resource_version` at `now`.
    pub fn observe(
        &mut self,
        name: &str,
        resource_version: &str,
        duration: Duration,
        now: Instant,
    ) -> Observed {
        match self.seen.get_mut(name) {
            Some((rv, since)) if rv == resource_version => Observed {
                changed: false,
                expired: now.saturating_duration_since(*since) >= duration,
            },
            Some((rv, since)) => {
                *rv = resource_version.to_string();
                *since = now;
                Observed {
                    changed: true,
                    expired: false,
                }
            }
            None => {
                self.seen
                    .insert(name.to_string(), (resource_version.to_string(), now));
                Observed {
                    changed: false,
                    expired: false,
                }
            }
        }
    }

    /// Forgets the Leases not in `names` (deleted).
    pub fn retain(&mut self, mut keep: impl FnMut(&str) -> bool) {
        self.seen.retain(|name, _| keep(name));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_expires_a_duration_after_its_last_change_was_seen() {
        let mut e = Expiry::default();
        let t0 = Instant::now();
        let d = Duration::from_secs(10);
        let at = |s| t0 + Duration::from_secs(s);
        let first = e.observe("l", "1", d, t0);
        assert_eq!((first.changed, first.expired), (false, false));
        assert!(!e.observe("l", "1", d, at(9)).expired);
        assert!(e.observe("l", "1", d, at(10)).expired);
        let renewed = e.observe("l", "2", d, at(11));
        assert_eq!((renewed.changed, renewed.expired), (true, false));
        assert!(!e.observe("l", "2", d, at(20)).expired);
        assert!(e.observe("l", "2", d, at(21)).expired);
        e.retain(|_| false);
        assert!(!e.observe("l", "2", d, at(40)).expired, "seen anew");
    }
}
