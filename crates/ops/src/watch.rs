//! The retry policy of every watch (controller caches, GitOpsCluster, report aggregator).
//!
//! kube-runtime's `default_backoff()` (client-go's reflector numbers: 0.8 s doubling to 30 s,
//! jittered up to twice that, reset after 120 s without error) keeps growing through an API
//! server outage, and a `410 Gone` relist right after it counts as one more error: on the real
//! env a controller cut off for ~15 s then hit by an expired watch waited 38–50 s before it
//! relisted (`docs/reliability.md`). One controller retrying a list every few seconds costs the
//! API server nothing, so ours is capped at 5 s (jittered to at most 10 s) and reset after 60 s.

use std::time::Duration;

use kube::runtime::utils::{Backoff, ResetTimerBackoff};
use kube::runtime::watcher::ExponentialBackoff;

/// The backoff to give `WatchStreamExt::backoff` for a watch.
pub fn backoff() -> impl Backoff + 'static {
    ResetTimerBackoff::new(
        ExponentialBackoff::from(
            backon::ExponentialBuilder::default()
                .with_min_delay(Duration::from_millis(500))
                .with_max_delay(Duration::from_secs(5))
                .with_factor(2.0)
                .without_max_times()
                .with_jitter(),
        ),
        Duration::from_secs(60),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_within_ten_seconds_however_long_the_outage() {
        let mut b = backoff();
        let delays: Vec<Duration> = (0..20).map(|_| b.next().expect("never gives up")).collect();
        assert!(delays[0] < Duration::from_secs(1), "{delays:?}");
        assert!(
            delays.iter().all(|d| *d <= Duration::from_secs(10)),
            "{delays:?}"
        );
        b.reset();
        assert!(b.next().unwrap() < Duration::from_secs(1));
    }
}
