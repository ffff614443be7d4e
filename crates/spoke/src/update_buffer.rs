//! `--buffer-informer-event-interval`: the agent's informer event buffer (peer:
//! agent/informer_event_buffer.go), between the local Application watch and its handlers.
//!
//! Only updates are buffered, per Application (`namespace/name`): an update is handled at once
//! when its object's opportunity window is open, and the window then closes for the interval.
//! An update arriving while the window is closed is held, replacing any held one (the older is
//! stale), and handled when the window opens; that restarts the window. Adds and deletes are
//! never delayed: they drop a held update and reset the window. So for updates more than an
//! interval apart there is no delay; a burst costs one update now and the latest one an interval
//! later.
//!
//! The peer polls the held updates every 100 ms; here the watch loop sleeps until the earliest
//! window opens ([`UpdateBuffer::next_due`]), so a held update goes out exactly an interval after
//! the previous one.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::time::Duration;

use tokio::time::Instant;

/// Held updates and opportunity windows by object key.
#[derive(Debug)]
pub struct UpdateBuffer<T> {
    interval: Duration,
    slots: HashMap<String, Slot<T>>,
    /// When held updates become due (entries whose slot changed since are skipped).
    schedule: BinaryHeap<Reverse<(Instant, String)>>,
}

#[derive(Debug)]
struct Slot<T> {
    /// The latest update not yet handled.
    held: Option<T>,
    /// When the window opens again (the last handled update plus the interval).
    opens: Instant,
}

impl<T> UpdateBuffer<T> {
    pub fn new(interval: Duration) -> Self {
        UpdateBuffer {
            interval,
            slots: HashMap::new(),
            schedule: BinaryHeap::new(),
        }
    }

    /// An update of `key`: `Some` to handle now (its window was open; it closes for the
    /// interval), `None` when it is held for later.
    pub fn update(&mut self, key: String, obj: T, now: Instant) -> Option<T> {
        let opens = now + self.interval;
        match self.slots.get_mut(&key) {
            Some(slot) if now < slot.opens => {
                if slot.held.replace(obj).is_none() {
                    self.schedule.push(Reverse((slot.opens, key)));
                }
                None
            }
            Some(slot) => {
                *slot = Slot { held: None, opens };
                Some(obj)
            }
            None => {
                self.slots.insert(key, Slot { held: None, opens });
                Some(obj)
            }
        }
    }

    /// An add or delete of `key` (handled at once by the caller): a held update is stale and
    /// dropped; the window is open again.
    pub fn add_or_delete(&mut self, key: &str) {
        self.slots.remove(key);
    }

    /// Held updates whose window has opened, to handle now (their windows restart).
    pub fn due(&mut self, now: Instant) -> Vec<T> {
        let mut out = Vec::new();
        while let Some(Reverse((at, _))) = self.schedule.peek() {
            if *at > now {
                break;
            }
            let Some(Reverse((at, key))) = self.schedule.pop() else {
                break;
            };
            if let Some(slot) = self.slots.get_mut(&key)
                && slot.opens == at
                && let Some(obj) = slot.held.take()
            {
                out.push(obj);
                slot.opens = now + self.interval;
            }
        }
        // windows that have opened with nothing held are forgotten (no slot: an open window)
        if self.schedule.is_empty() && self.slots.len() > 1024 {
            self.slots.retain(|_, s| now < s.opens);
        }
        out
    }

    /// When the earliest held update becomes due.
    pub fn next_due(&mut self) -> Option<Instant> {
        while let Some(Reverse((at, key))) = self.schedule.peek() {
            match self.slots.get(key) {
                Some(slot) if slot.opens == *at && slot.held.is_some() => return Some(*at),
                _ => {
                    self.schedule.pop();
                }
            }
        }
        None
    }

    /// How many updates are held.
    pub fn held(&self) -> usize {
        self.slots.values().filter(|s| s.held.is_some()).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const I: Duration = Duration::from_secs(10);

    fn at(t0: Instant, secs: u64) -> Instant {
        t0 + Duration::from_secs(secs)
    }

    /// The peer's example (informer_event_buffer.go): @0 handled at once, @1 and @6 collapsed
    /// into the @6 one handled @10, @20 (quiet for more than the interval) handled at once.
    #[test]
    fn a_burst_costs_one_update_now_and_the_latest_one_an_interval_later() {
        let t0 = Instant::now();
        let mut b = UpdateBuffer::new(I);
        assert_eq!(b.update("argocd/a".into(), "@0", t0), Some("@0"));
        assert_eq!(b.update("argocd/a".into(), "@1", at(t0, 1)), None);
        assert_eq!(b.update("argocd/a".into(), "@6", at(t0, 6)), None);
        assert_eq!(b.held(), 1);
        assert_eq!(b.next_due(), Some(at(t0, 10)));
        assert!(b.due(at(t0, 9)).is_empty());
        assert_eq!(b.due(at(t0, 10)), vec!["@6"]);
        assert_eq!(b.next_due(), None, "nothing held");
        // the window restarted @10: an update @15 waits until @20
        assert_eq!(b.update("argocd/a".into(), "@15", at(t0, 15)), None);
        assert_eq!(b.next_due(), Some(at(t0, 20)));
        assert_eq!(b.due(at(t0, 20)), vec!["@15"]);
        // quiet for longer than the interval: no delay
        assert!(b.due(at(t0, 31)).is_empty());
        assert_eq!(b.update("argocd/a".into(), "@40", at(t0, 40)), Some("@40"));
    }

    #[test]
    fn objects_have_their_own_windows() {
        let t0 = Instant::now();
        let mut b = UpdateBuffer::new(I);
        assert_eq!(b.update("argocd/a".into(), "a0", t0), Some("a0"));
        assert_eq!(b.update("argocd/b".into(), "b1", at(t0, 1)), Some("b1"));
        assert_eq!(b.update("argocd/a".into(), "a2", at(t0, 2)), None);
        assert_eq!(b.update("argocd/b".into(), "b3", at(t0, 3)), None);
        assert_eq!(b.due(at(t0, 10)), vec!["a2"]);
        assert_eq!(b.next_due(), Some(at(t0, 11)));
        assert_eq!(b.due(at(t0, 11)), vec!["b3"]);
    }

    #[test]
    fn adds_and_deletes_drop_a_held_update_and_reopen_the_window() {
        let t0 = Instant::now();
        let mut b = UpdateBuffer::new(I);
        assert_eq!(b.update("argocd/a".into(), "u0", t0), Some("u0"));
        assert_eq!(b.update("argocd/a".into(), "u1", at(t0, 1)), None);
        b.add_or_delete("argocd/a");
        assert_eq!(b.held(), 0);
        assert!(
            b.due(at(t0, 10)).is_empty(),
            "the stale update is never handled"
        );
        // recreated: its first update goes out at once
        assert_eq!(b.update("argocd/a".into(), "u2", at(t0, 2)), Some("u2"));
    }

    #[test]
    fn idle_windows_are_forgotten() {
        let t0 = Instant::now();
        let mut b = UpdateBuffer::new(I);
        for i in 0..2000 {
            assert!(b.update(format!("argocd/a{i}"), i, t0).is_some());
        }
        assert!(b.due(at(t0, 10)).is_empty());
        assert!(b.slots.is_empty());
    }

    #[test]
    fn a_deleted_and_updated_again_object_is_not_sent_twice() {
        let t0 = Instant::now();
        let mut b = UpdateBuffer::new(I);
        assert_eq!(b.update("argocd/a".into(), "u0", t0), Some("u0"));
        assert_eq!(b.update("argocd/a".into(), "u1", at(t0, 1)), None);
        b.add_or_delete("argocd/a");
        assert_eq!(b.update("argocd/a".into(), "u2", at(t0, 2)), Some("u2"));
        assert_eq!(b.update("argocd/a".into(), "u3", at(t0, 3)), None);
        // the first schedule entry (due @10) belongs to the dropped slot
        assert_eq!(b.next_due(), Some(at(t0, 12)));
        assert!(b.due(at(t0, 10)).is_empty());
        assert_eq!(b.due(at(t0, 12)), vec!["u3"]);
    }
}
