//! The per-peer send queue (I/O free apart from a `Notify`).
//!
//! Invariants:
//! * per resource key at most one event is in flight (sent, not yet ACKed);
//! * events of one key are sent in the order they were pushed (after coalescing);
//! * a queued `spec-update`/`status-update` is replaced in place by a newer one of the same type;
//!   a `spec-update` pushed behind an unsent `create` refreshes the create's payload;
//! * a `delete` clears everything queued (not in flight) for its key;
//! * at most `capacity` events are queued (in flight not counted). A push that would exceed it is
//!   never dropped: the key is *deferred* and the owner's regenerate callback rebuilds the key's
//!   current events once there is room again (explicit backpressure, counted in a metric);
//! * an in-flight event is resent with backoff (5 s, ×4, capped at 2 min) until it is ACKed, or
//!   answered with an `error` event (then it is dropped, loudly: counted and logged).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::event::{Event, EventType};
use crate::workqueue_metrics::Workqueue;

mod state;
use state::{InFlight, Queued, State};

/// Events sent and not yet ACKed at most (the window): what waits beyond it stays compact in
/// the queue instead of encoded in the stream's buffers (with 1,000 agents receiving 100 events
/// each, unbounded it held ~800 KiB per agent); a loopback round trip is well under 1 ms, so 32
/// allows far more than 10,000 events/s per peer.
pub const DEFAULT_MAX_IN_FLIGHT: usize = 32;

/// Keys of [`SendQueue::push_request`] events (no resource key starts with it).
const REQUEST_KEY_PREFIX: &str = "~request/";

/// Resend backoff parameters.
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    pub initial: Duration,
    pub factor: u32,
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            initial: Duration::from_secs(5),
            factor: 4,
            max: Duration::from_secs(120),
        }
    }
}

impl Backoff {
    /// Delay before resend number `attempt` (1-based: the delay after the first send).
    pub fn delay(&self, attempt: u32) -> Duration {
        let mut d = self.initial;
        for _ in 1..attempt {
            d = d.saturating_mul(self.factor);
            if d >= self.max {
                return self.max;
            }
        }
        d.min(self.max)
    }
}

/// Outcome of a push.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushed {
    /// Appended to the key's queue.
    Queued,
    /// Merged into an already queued event.
    Coalesced,
    /// The queue was full: the key is marked for regeneration once there is room.
    Deferred,
}

/// Rebuilds the current events of a deferred key (e.g. from the owner's object cache).
pub type Regenerate = Arc<dyn Fn(&str) -> Vec<Event> + Send + Sync>;

/// Counters the queue keeps (exported as metrics by the owner).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct QueueStats {
    pub pending: usize,
    pub inflight: usize,
    pub deferred: usize,
}

/// Something to put on the wire.
#[derive(Debug, Clone)]
pub struct Outgoing {
    pub key: String,
    pub event: Event,
    /// 1 for the first send.
    pub attempt: u32,
}

/// Result of an ACK or error answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Answered {
    Acked(Box<Event>),
    Unknown,
}

/// The per-peer send queue.
pub struct SendQueue {
    state: Mutex<State>,
    capacity: usize,
    max_in_flight: usize,
    backoff: Backoff,
    regenerate: Mutex<Option<Regenerate>>,
    notify: Notify,
    /// `<prefix>_workqueue_*{queue="<name>-send"}`
    wq: Workqueue,
}

impl SendQueue {
    pub fn new(capacity: usize, backoff: Backoff) -> Self {
        Self {
            state: Mutex::new(State::default()),
            capacity: capacity.max(1),
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            backoff,
            regenerate: Mutex::new(None),
            notify: Notify::new(),
            wq: Workqueue::default(),
        }
    }

    /// Counts the queue in `wq` (depth: events queued, not sent; adds: events queued, merged
    /// ones not counted; queue duration: queued to first sent; retries: resends for want of an
    /// ACK, each also an add).
    pub fn with_workqueue(mut self, wq: Workqueue) -> Self {
        self.wq = wq;
        self
    }

    /// The queue's workqueue metrics.
    pub fn workqueue(&self) -> &Workqueue {
        &self.wq
    }

    /// Sets the window: events sent and not yet ACKed at most (resends do not count twice).
    pub fn with_max_in_flight(mut self, n: usize) -> Self {
        self.max_in_flight = n.max(1);
        self
    }

    /// Sets the callback that rebuilds a deferred key's events.
    pub fn set_regenerate(&self, f: Regenerate) {
        *self.regenerate.lock().expect("poisoned") = Some(f);
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn stats(&self) -> QueueStats {
        let s = self.state.lock().expect("poisoned");
        QueueStats {
            pending: s.pending,
            inflight: s.inflight,
            deferred: s.deferred.len(),
        }
    }

    /// Whether nothing is queued, in flight or deferred.
    pub fn is_idle(&self) -> bool {
        let s = self.stats();
        s.pending == 0 && s.inflight == 0 && s.deferred == 0
    }

    /// Wakes a sender waiting in [`SendQueue::next`].
    pub fn notified(&self) -> tokio::sync::futures::Notified<'_> {
        self.notify.notified()
    }

    /// Pushes an event for resource `key`.
    pub fn push(&self, key: &str, mut ev: Event) -> Pushed {
        ev.compact();
        let r = {
            let mut s = self.state.lock().expect("poisoned");
            let r = Self::push_locked(&mut s, self.capacity, key, ev);
            if r == Pushed::Queued {
                self.wq.add();
            }
            self.wq.set_depth(s.pending);
            r
        };
        self.notify.notify_one();
        r
    }

    /// Pushes a request event (resync) under `key` (what it asks about): sent at once and
    /// resent until it is ACKed like any queued event, never deferred (a resync has a few per
    /// resource, so capacity does not bound them). A request still unsent under the same key is
    /// replaced: under load, when ACKs come later than the resend backoff, repeated requests and
    /// their answers coalesce instead of multiplying.
    pub fn push_request(&self, key: &str, mut ev: Event) -> Pushed {
        ev.compact();
        let r = {
            let mut s = self.state.lock().expect("poisoned");
            s.seq += 1;
            let (key, slot) = s.slot(&format!("{REQUEST_KEY_PREFIX}{key}"));
            let r = if let Some(q) = slot.pending.back_mut() {
                q.ev = ev;
                Pushed::Coalesced
            } else {
                slot.enqueue(ev);
                let idle = slot.inflight.is_none();
                s.pending += 1;
                if idle {
                    s.mark_ready(&key);
                }
                self.wq.add();
                Pushed::Queued
            };
            self.wq.set_depth(s.pending);
            r
        };
        self.notify.notify_one();
        r
    }

    fn push_locked(s: &mut State, capacity: usize, key: &str, mut ev: Event) -> Pushed {
        if s.deferred_set.contains(key) {
            // the key's state will be regenerated anyway
            return Pushed::Deferred;
        }
        s.seq += 1;
        let (key, slot) = s.slot(key);
        match ev.ty {
            EventType::Delete => {
                let cleared = slot.pending.len();
                slot.pending.clear();
                let _ = slot;
                s.pending -= cleared;
            }
            EventType::SpecUpdate | EventType::StatusUpdate => {
                if let Some(q) = slot.pending.iter_mut().rev().find(|q| q.ty == ev.ty) {
                    ev.id = q.id.clone();
                    q.ev = ev;
                    return Pushed::Coalesced;
                }
                if ev.ty == EventType::SpecUpdate
                    && let Some(q) = slot
                        .pending
                        .iter_mut()
                        .rev()
                        .find(|q| q.ty == EventType::Create)
                {
                    q.data = ev.data;
                    q.encoded_data = ev.encoded_data;
                    q.event_id = ev.event_id;
                    return Pushed::Coalesced;
                }
            }
            _ => {}
        }
        let slot = s.slots.get_mut(&key).expect("slot exists");
        let slot_empty = slot.pending.is_empty() && slot.inflight.is_none();
        if s.pending >= capacity {
            if slot_empty {
                s.slots.remove(&key);
            }
            s.deferred.push_back(key.to_string());
            s.deferred_set.insert(key.to_string());
            return Pushed::Deferred;
        }
        let slot = s.slots.get_mut(&key).expect("slot exists");
        slot.enqueue(ev);
        let idle = slot.inflight.is_none();
        s.pending += 1;
        if idle {
            s.mark_ready(&key);
        }
        Pushed::Queued
    }

    /// Next event to send now (a due resend first, then a ready key), or `Err(deadline)` with the
    /// instant of the next resend (`None`: nothing scheduled; wait for [`SendQueue::notified`]).
    pub fn next(&self, now: Instant) -> Result<Outgoing, Option<Instant>> {
        self.refill_deferred();
        let mut s = self.state.lock().expect("poisoned");
        // due resends (deadline heap: O(log n), no scan of the slots)
        let mut earliest: Option<Instant> = None;
        if let Some((d, k)) = s.earliest() {
            if d <= now {
                let slot = s.slots.get_mut(&k).expect("slot");
                let f = slot.inflight.as_mut().expect("inflight");
                f.attempts += 1;
                // a resent event leaves the window: a peer that never ACKs some events (one it
                // cannot apply, retried forever) must not hold back every other resource
                let left_window = std::mem::take(&mut f.in_window);
                let attempts = f.attempts;
                let ev = f.ev.clone();
                if left_window {
                    s.window -= 1;
                }
                // client-go's AddRateLimited: a retry, put back and taken once due
                self.wq.retry();
                self.wq.add();
                self.wq
                    .taken(now.saturating_duration_since(d).as_secs_f64());
                s.schedule(&k, now + self.backoff.delay(attempts));
                return Ok(Outgoing {
                    key: k.to_string(),
                    event: ev,
                    attempt: attempts,
                });
            }
            earliest = Some(d);
        }
        while s.window < self.max_in_flight
            && let Some(k) = s.ready.pop_front()
        {
            s.ready_set.remove(&k);
            let Some(slot) = s.slots.get_mut(&k) else {
                continue;
            };
            if slot.inflight.is_some() {
                continue;
            }
            let Some(Queued { mut ev, at }) = slot.pending.pop_front() else {
                continue;
            };
            self.wq
                .taken(now.saturating_duration_since(at).as_secs_f64());
            if slot.recent_ids.contains(&ev.event_id) || s.by_event.contains_key(&ev.event_id) {
                // keep ACK matching unambiguous for a later event of the same object version
                // (or an event of another key that happens to carry the same id)
                let seq = s.seq;
                s.seq += 1;
                ev.event_id = format!("{}.{}", ev.event_id, seq);
            }
            let slot = s.slots.get_mut(&k).expect("slot");
            slot.inflight = Some(Box::new(InFlight {
                ev: ev.clone(),
                in_window: true,
                attempts: 1,
                deadline: now,
                token: 0,
            }));
            s.pending -= 1;
            self.wq.set_depth(s.pending);
            s.inflight += 1;
            s.window += 1;
            s.by_event.insert(ev.event_id.clone(), k.clone());
            s.schedule(&k, now + self.backoff.delay(1));
            drop(s);
            self.notify.notify_one();
            return Ok(Outgoing {
                key: k.to_string(),
                event: ev,
                attempt: 1,
            });
        }
        Err(earliest)
    }

    /// Marks every in-flight event as due now (a new session resends pending events at once).
    pub fn resend_all_now(&self) {
        let now = Instant::now();
        let mut s = self.state.lock().expect("poisoned");
        let mut keys = Vec::new();
        for (k, slot) in s.slots.iter_mut() {
            if let Some(f) = &mut slot.inflight {
                // a reconnect is not a failed attempt: restart the backoff
                f.attempts = 0;
                keys.push(k.clone());
            }
        }
        for k in keys {
            s.schedule(&k, now);
        }
        drop(s);
        self.notify.notify_one();
    }

    /// Handles an ACK (`processed`) or `error` answer for `event_id`.
    pub fn answer(&self, resource_id: &str, event_id: &str) -> Answered {
        let mut s = self.state.lock().expect("poisoned");
        let Some(key) = s.by_event.get(event_id).cloned() else {
            return Answered::Unknown;
        };
        let matches = s
            .slots
            .get(&key)
            .and_then(|slot| slot.inflight.as_ref())
            .is_some_and(|f| {
                f.ev.event_id == event_id
                    && (resource_id.is_empty() || f.ev.resource_id == resource_id)
            });
        if !matches {
            return Answered::Unknown;
        }
        s.by_event.remove(event_id);
        let slot = s.slots.get_mut(&key).expect("slot");
        let f = slot.inflight.take().expect("inflight");
        slot.recent_ids.push_back(f.ev.event_id.clone());
        if slot.recent_ids.len() > 4 {
            slot.recent_ids.pop_front();
        }
        let has_pending = !slot.pending.is_empty();
        if !has_pending {
            s.slots.remove(&key);
        } else {
            s.mark_ready(&key);
        }
        s.inflight -= 1;
        if f.in_window {
            s.window -= 1;
        }
        drop(s);
        self.notify.notify_one();
        Answered::Acked(Box::new(f.ev))
    }

    /// Rebuilds deferred keys' events (the regenerate callback) while the queue has room.
    fn refill_deferred(&self) {
        let regen = self.regenerate.lock().expect("poisoned").clone();
        let Some(regen) = regen else { return };
        loop {
            let key = {
                let mut s = self.state.lock().expect("poisoned");
                if s.pending >= self.capacity {
                    return;
                }
                let Some(k) = s.deferred.pop_front() else {
                    return;
                };
                s.deferred_set.remove(&k);
                k
            };
            let events = regen(&key);
            let mut s = self.state.lock().expect("poisoned");
            for mut ev in events {
                ev.compact();
                // may exceed capacity by the few events of one key: bounded by the key's event count
                let (k, slot) = s.slot(&key);
                if ev.ty == EventType::Delete {
                    let n = slot.pending.len();
                    slot.pending.clear();
                    s.pending -= n;
                }
                let slot = s.slots.get_mut(&k).expect("slot");
                slot.enqueue(ev);
                let idle = slot.inflight.is_none();
                s.pending += 1;
                if idle {
                    s.mark_ready(&k);
                }
                self.wq.add();
            }
            self.wq.set_depth(s.pending);
        }
    }
}

#[cfg(test)]
mod tests;
