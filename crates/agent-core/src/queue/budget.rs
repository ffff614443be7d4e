//! A budget of events in flight shared by many send queues (the principal's, one per agent).
//!
//! Each queue sends its first [`InFlightBudget::floor`] unacknowledged events on its own: no
//! agent waits for another. Every event beyond those takes a unit of the shared budget until it
//! is ACKed (or resent, which takes it out of the window). So what a principal holds encoded for
//! its agents is bounded by `agents × floor + limit`, whatever the number of Applications, while
//! one busy agent in a quiet fleet still uses its whole window. A queue refused a unit waits in
//! FIFO order and is woken when one is returned.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use tokio::sync::Notify;

/// The shared budget (see the module documentation).
pub struct InFlightBudget {
    limit: usize,
    floor: usize,
    state: Mutex<Waiting>,
    ids: AtomicU64,
}

#[derive(Default)]
struct Waiting {
    used: usize,
    /// queues refused a unit, oldest first (each at most once)
    waiters: VecDeque<(u64, Weak<Notify>)>,
    listed: HashSet<u64>,
}

impl InFlightBudget {
    /// `limit` units shared beyond each queue's first `floor` events.
    pub fn new(limit: usize, floor: usize) -> Arc<Self> {
        Arc::new(Self {
            limit,
            floor,
            state: Mutex::default(),
            ids: AtomicU64::new(0),
        })
    }

    /// Events each queue sends without taking from the budget.
    pub fn floor(&self) -> usize {
        self.floor
    }

    /// The shared units.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Units taken now.
    pub fn in_use(&self) -> usize {
        self.state.lock().expect("poisoned").used
    }

    /// A new identity for a queue's place in the waiting list.
    pub(super) fn next_id(&self) -> u64 {
        self.ids.fetch_add(1, Ordering::Relaxed)
    }

    /// Takes a unit, or lists `waker` (once, under `id`) to be notified when one is returned.
    pub(super) fn try_take(&self, id: u64, waker: &Arc<Notify>) -> bool {
        let mut s = self.state.lock().expect("poisoned");
        if s.used < self.limit {
            s.used += 1;
            return true;
        }
        if s.listed.insert(id) {
            s.waiters.push_back((id, Arc::downgrade(waker)));
        }
        false
    }

    /// Returns `n` units and wakes as many waiting queues (those still alive).
    pub(super) fn release(&self, n: usize) {
        if n == 0 {
            return;
        }
        let mut s = self.state.lock().expect("poisoned");
        s.used = s.used.saturating_sub(n);
        let mut woken = 0;
        while woken < n
            && let Some((id, w)) = s.waiters.pop_front()
        {
            s.listed.remove(&id);
            if let Some(w) = w.upgrade() {
                w.notify_one();
                woken += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    #[test]
    fn a_returned_unit_wakes_the_queue_that_waited_longest_and_only_once() {
        let b = InFlightBudget::new(1, 4);
        let (first, second) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
        assert!(b.try_take(0, &first));
        assert!(!b.try_take(1, &first));
        assert!(!b.try_take(1, &first), "listed once");
        assert!(!b.try_take(2, &second));
        b.release(1);
        assert_eq!(b.in_use(), 0);
        assert!(
            first.notified().now_or_never().is_some(),
            "the oldest waiter is woken"
        );
        assert!(
            second.notified().now_or_never().is_none(),
            "one unit, one waiter woken"
        );
        b.release(0);
        assert!(b.try_take(2, &second));
        assert!(!b.try_take(3, &first));
    }
}
