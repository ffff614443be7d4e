//! The send queue's bookkeeping: a slot per resource key, the ready list, the ACK index and
//! the resend deadlines.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};
use std::sync::Arc;

use tokio::time::Instant;

use crate::event::Event;

/// A key's state. Kept small: a fleet reconnecting queues a slot per resource and agent at once
/// (1,000 agents × 100 Applications: 100,000 slots, twice during a resync), so the in-flight
/// event is boxed and a key's queue is allocated for one event (what almost every key holds).
#[derive(Default)]
pub(super) struct Slot {
    pub(super) inflight: Option<Box<InFlight>>,
    pub(super) pending: VecDeque<Queued>,
    pub(super) recent_ids: VecDeque<String>,
}

impl Slot {
    pub(super) fn enqueue(&mut self, ev: Event) {
        if self.pending.capacity() == 0 {
            // `push_back` alone would allocate room for four
            self.pending.reserve_exact(1);
        }
        self.pending.push_back(Queued {
            ev,
            at: Instant::now(),
        });
    }
}

/// A queued event and when it was queued (an event merged into it keeps that time, as
/// client-go's workqueue keeps the first add of an item already queued).
pub(super) struct Queued {
    pub(super) ev: Event,
    pub(super) at: Instant,
}

impl std::ops::Deref for Queued {
    type Target = Event;
    fn deref(&self) -> &Event {
        &self.ev
    }
}

impl std::ops::DerefMut for Queued {
    fn deref_mut(&mut self) -> &mut Event {
        &mut self.ev
    }
}

pub(super) struct InFlight {
    pub(super) ev: Event,
    /// counted in the window: sent once, neither ACKed nor resent yet
    pub(super) in_window: bool,
    pub(super) attempts: u32,
    pub(super) deadline: Instant,
    /// identifies this (re)scheduling in the deadline heap; older heap entries are stale
    pub(super) token: u64,
}

#[derive(Default)]
pub(super) struct State {
    pub(super) slots: HashMap<Key, Slot>,
    /// keys with pending events and nothing in flight, in FIFO order
    pub(super) ready: VecDeque<Key>,
    pub(super) ready_set: HashSet<Key>,
    pub(super) deferred: VecDeque<String>,
    pub(super) deferred_set: HashSet<String>,
    pub(super) pending: usize,
    pub(super) inflight: usize,
    /// in-flight events counted in the window (see [`InFlight::in_window`])
    pub(super) window: usize,
    /// sent but connection went away: resend at once on the next session
    pub(super) seq: u64,
    /// in-flight event id -> key (ACK matching without scanning the slots)
    pub(super) by_event: HashMap<String, Key>,
    /// resend deadlines (lazy deletion: an entry is live while its token matches the slot's)
    pub(super) deadlines: BinaryHeap<Reverse<(Instant, u64, Key)>>,
}

/// A resource key, shared by its slot, the ready list, the ACK index and the deadline heap (one
/// allocation per key instead of one per place it is listed).
pub(super) type Key = Arc<str>;

impl State {
    /// The slot of `key` (created empty if missing) and the key's shared name.
    pub(super) fn slot(&mut self, key: &str) -> (Key, &mut Slot) {
        let k = match self.slots.get_key_value(key) {
            Some((k, _)) => k.clone(),
            None => {
                let k: Key = Arc::from(key);
                self.slots.insert(k.clone(), Slot::default());
                k
            }
        };
        let slot = self.slots.get_mut(&k).expect("slot exists");
        (k, slot)
    }

    /// Lists `key` as ready to send (once).
    pub(super) fn mark_ready(&mut self, key: &Key) {
        if self.ready_set.insert(key.clone()) {
            self.ready.push_back(key.clone());
        }
    }

    pub(super) fn schedule(&mut self, key: &Key, deadline: Instant) {
        self.seq += 1;
        let token = self.seq;
        if let Some(f) = self.slots.get_mut(key).and_then(|s| s.inflight.as_mut()) {
            f.deadline = deadline;
            f.token = token;
            self.deadlines.push(Reverse((deadline, token, key.clone())));
        }
        // stale entries of ACKed events are dropped when they surface; bound them anyway
        if self.deadlines.len() > 2 * self.inflight + 1024 {
            let live: Vec<Reverse<(Instant, u64, Key)>> = self
                .slots
                .iter()
                .filter_map(|(k, s)| {
                    s.inflight
                        .as_ref()
                        .map(|f| Reverse((f.deadline, f.token, k.clone())))
                })
                .collect();
            self.deadlines = BinaryHeap::from(live);
        }
    }

    /// The earliest live resend: (deadline, key). Drops stale heap entries on the way.
    pub(super) fn earliest(&mut self) -> Option<(Instant, Key)> {
        while let Some(Reverse((d, tok, k))) = self.deadlines.peek() {
            let live = self
                .slots
                .get(k)
                .and_then(|s| s.inflight.as_ref())
                .is_some_and(|f| f.token == *tok);
            if live {
                return Some((*d, k.clone()));
            }
            self.deadlines.pop();
        }
        None
    }
}
