//! The retry backoff of failed reconciles, per object, for every controller's error policy
//! (propagation and status, GitOpsCluster, the add-on automation and its health, the basic
//! cluster secrets): the first retry after `base`, doubling per failure in a row up to `max`,
//! forgotten when the object's reconcile succeeds. After an API-server outage the failures were
//! the outage's, not the objects': [`Retries::take_all`] hands every failed key back, its
//! backoff reset, to be retried at once.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::Duration;

/// The delays of a backoff: `base` doubling per failure up to `max`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    pub base: Duration,
    pub max: Duration,
}

impl Backoff {
    /// The controllers of the `gitops` crate: 5 s doubling to 5 min.
    pub const GITOPS: Backoff = Backoff {
        base: Duration::from_secs(5),
        max: Duration::from_secs(300),
    };

    /// The delay after `n` failures in a row (`n` ≥ 1; 0 counts as 1).
    pub fn delay(&self, n: u32) -> Duration {
        let factor = 2u32.saturating_pow(n.saturating_sub(1).min(20));
        self.base.saturating_mul(factor).min(self.max)
    }
}

/// Failures in a row per key, and the delay before each key's next retry.
#[derive(Debug)]
pub struct Retries<K> {
    backoff: Backoff,
    failures: Mutex<HashMap<K, u32>>,
}

impl<K: Eq + Hash> Retries<K> {
    pub fn new(backoff: Backoff) -> Self {
        Retries {
            backoff,
            failures: Mutex::new(HashMap::new()),
        }
    }

    /// One more failure of `key`: the delay before it is retried.
    pub fn failed(&self, key: K) -> Duration {
        let mut failures = self.lock();
        let n = failures.entry(key).or_default();
        *n = n.saturating_add(1);
        self.backoff.delay(*n)
    }

    /// `key` reconciled: its next failure starts from `base` again.
    pub fn succeeded(&self, key: &K) {
        let mut failures = self.lock();
        if !failures.is_empty() {
            failures.remove(key);
        }
    }

    /// Every key that failed since it last succeeded, their failures forgotten.
    pub fn take_all(&self) -> Vec<K> {
        std::mem::take(&mut *self.lock()).into_keys().collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<K, u32>> {
        self.failures.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gitops_backoff_goes_from_5_s_to_5_min() {
        let d: Vec<u64> = (1..=9)
            .map(|n| Backoff::GITOPS.delay(n).as_secs())
            .collect();
        assert_eq!(d, [5, 10, 20, 40, 80, 160, 300, 300, 300]);
    }

    #[test]
    fn each_key_backs_off_on_its_own_until_it_succeeds() {
        let r = Retries::new(Backoff {
            base: Duration::from_secs(1),
            max: Duration::from_secs(4),
        });
        let secs = |d: Duration| d.as_secs();
        assert_eq!(secs(r.failed("a")), 1);
        assert_eq!(secs(r.failed("a")), 2);
        assert_eq!(secs(r.failed("b")), 1, "another key starts from base");
        assert_eq!(secs(r.failed("a")), 4);
        assert_eq!(secs(r.failed("a")), 4, "capped at max");
        r.succeeded(&"a");
        assert_eq!(secs(r.failed("a")), 1, "a success resets the key");
        let mut all = r.take_all();
        all.sort();
        assert_eq!(all, ["a", "b"]);
        assert!(r.take_all().is_empty());
        assert_eq!(secs(r.failed("b")), 1, "taken keys start again from base");
        assert_eq!(secs(Backoff::GITOPS.delay(u32::MAX)), 300);
    }
}
