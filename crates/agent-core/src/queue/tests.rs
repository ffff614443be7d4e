use super::*;
use crate::event::Target;
use proptest::prelude::*;
use serde_json::json;
use std::collections::HashMap;

fn ev(ty: EventType, name: &str, rv: u64) -> Event {
    Event::for_object(
        "t",
        ty,
        Target::Application,
        &json!({"metadata": {"name": name, "namespace": "n", "uid": "u", "resourceVersion": rv.to_string()}}),
    )
}

fn q() -> SendQueue {
    SendQueue::new(100, Backoff::default())
}

fn req(name: &str) -> Event {
    Event::request(
        "t",
        EventType::RequestUpdate,
        Target::ResourceResync,
        json!({"name": name}),
    )
}

/// At most the window is sent and un-ACKed; each ACK lets the next one go.
#[tokio::test(start_paused = true)]
async fn the_window_bounds_events_in_flight() {
    let q = SendQueue::new(100, Backoff::default()).with_max_in_flight(3);
    for i in 0..5 {
        q.push(&format!("k{i}"), ev(EventType::Create, &format!("k{i}"), 1));
    }
    let now = Instant::now();
    let sent: Vec<Outgoing> = (0..3).map(|_| q.next(now).unwrap()).collect();
    assert!(q.next(now).is_err(), "window full");
    assert_eq!(q.stats().inflight, 3);
    q.answer(&sent[0].event.resource_id, &sent[0].event.event_id);
    assert_eq!(q.next(now).unwrap().key, "k3");
    assert!(q.next(now).is_err(), "window full again");
    // events the peer does not ACK leave the window when resent: they never hold back the
    // others (a resource the peer cannot apply is retried without blocking the queue)
    let later = now + Backoff::default().delay(1);
    let resent = q.next(later).unwrap();
    assert_eq!((resent.key.as_str(), resent.attempt), ("k1", 2));
    assert_eq!(q.next(later).unwrap().key, "k2", "the resend of k2");
    assert_eq!(q.next(later).unwrap().key, "k3", "the resend of k3");
    assert_eq!(q.next(later).unwrap().key, "k4", "room again in the window");
}

/// Requests repeated faster than they are ACKed (a loaded peer) do not pile up: per key one
/// in flight and at most one waiting, the newest; each is resent until ACKed.
#[tokio::test(start_paused = true)]
async fn repeated_requests_coalesce_and_are_resent_until_acked() {
    let q = q();
    assert_eq!(q.push_request("a", req("a")), Pushed::Queued);
    let now = Instant::now();
    let first = q.next(now).unwrap();
    for _ in 0..50 {
        q.push_request("a", req("a"));
    }
    let last = req("a");
    let last_id = last.event_id.clone();
    assert_eq!(q.push_request("a", last), Pushed::Coalesced);
    assert_eq!(q.push_request("b", req("b")), Pushed::Queued);
    assert_eq!(
        q.stats(),
        QueueStats {
            pending: 2,
            inflight: 1,
            deferred: 0
        },
        "one waiting behind the one in flight, and b"
    );
    let b = q.next(now).unwrap();
    assert_eq!(b.key, "~request/b");
    q.answer(&b.event.resource_id, &b.event.event_id);
    assert!(q.next(now).is_err(), "a's next waits for the ACK");
    let again = q.next(now + Backoff::default().delay(1)).unwrap();
    assert_eq!(
        again.event.event_id, first.event.event_id,
        "resent while not ACKed"
    );
    q.answer(&first.event.resource_id, &first.event.event_id);
    let next = q.next(now + Backoff::default().delay(1)).unwrap();
    assert_eq!(next.event.event_id, last_id, "the newest waiting one");
    assert!(matches!(
        q.answer(&next.event.resource_id, &next.event.event_id),
        Answered::Acked(_)
    ));
}

#[tokio::test(start_paused = true)]
async fn one_in_flight_per_resource_and_ack_releases_next() {
    let q = q();
    q.push("a", ev(EventType::Create, "a", 1));
    q.push("a", ev(EventType::SetOperation, "a", 1));
    q.push("b", ev(EventType::Create, "b", 1));
    let now = Instant::now();
    let x = q.next(now).unwrap();
    assert_eq!((x.key.as_str(), x.event.ty), ("a", EventType::Create));
    let y = q.next(now).unwrap();
    assert_eq!(y.key, "b", "a is blocked behind its in-flight create");
    assert!(q.next(now).is_err());
    assert!(matches!(
        q.answer(&x.event.resource_id, &x.event.event_id),
        Answered::Acked(_)
    ));
    let z = q.next(now).unwrap();
    assert_eq!(z.event.ty, EventType::SetOperation);
    assert_ne!(
        z.event.event_id, x.event.event_id,
        "same object version gets a distinct event id"
    );
    // the stale ACK of the first event does not ACK the second
    assert_eq!(
        q.answer(&x.event.resource_id, &x.event.event_id),
        Answered::Unknown
    );
}

#[tokio::test(start_paused = true)]
async fn superseded_updates_coalesce_and_delete_clears() {
    let q = q();
    q.push("a", ev(EventType::Create, "a", 1));
    let now = Instant::now();
    let _first = q.next(now).unwrap();
    assert_eq!(
        q.push("a", ev(EventType::SpecUpdate, "a", 2)),
        Pushed::Queued
    );
    assert_eq!(
        q.push("a", ev(EventType::SpecUpdate, "a", 3)),
        Pushed::Coalesced
    );
    assert_eq!(
        q.push("a", ev(EventType::StatusUpdate, "a", 3)),
        Pushed::Queued
    );
    assert_eq!(q.stats().pending, 2);
    q.push("a", ev(EventType::Delete, "a", 4));
    assert_eq!(q.stats().pending, 1);
}

#[tokio::test(start_paused = true)]
async fn resend_with_backoff_until_acked() {
    let q = q();
    q.push("a", ev(EventType::Create, "a", 1));
    let t0 = Instant::now();
    let x = q.next(t0).unwrap();
    assert_eq!(q.next(t0).unwrap_err(), Some(t0 + Duration::from_secs(5)));
    let r = q.next(t0 + Duration::from_secs(5)).unwrap();
    assert_eq!(
        (r.attempt, r.event.event_id.as_str()),
        (2, x.event.event_id.as_str())
    );
    assert_eq!(
        q.next(t0 + Duration::from_secs(5)).unwrap_err(),
        Some(t0 + Duration::from_secs(25))
    );
    assert_eq!(Backoff::default().delay(10), Duration::from_secs(120));
}

#[tokio::test(start_paused = true)]
async fn full_queue_defers_and_regenerates_never_drops() {
    let q = SendQueue::new(2, Backoff::default());
    q.set_regenerate(Arc::new(|k: &str| vec![ev(EventType::SpecUpdate, k, 9)]));
    assert_eq!(q.push("a", ev(EventType::Create, "a", 1)), Pushed::Queued);
    assert_eq!(q.push("b", ev(EventType::Create, "b", 1)), Pushed::Queued);
    assert_eq!(q.push("c", ev(EventType::Create, "c", 1)), Pushed::Deferred);
    assert_eq!(q.stats().deferred, 1);
    let now = Instant::now();
    let mut sent = vec![];
    while let Ok(o) = q.next(now) {
        q.answer(&o.event.resource_id, &o.event.event_id);
        sent.push(o.key);
    }
    assert_eq!(sent, vec!["a", "b", "c"]);
    assert!(q.is_idle());
}

#[tokio::test(start_paused = true)]
async fn resends_come_due_by_deadline_and_acked_events_never_resend() {
    let q = q();
    let t0 = Instant::now();
    let mut sent = HashMap::new();
    for k in ["a", "b", "c"] {
        q.push(k, ev(EventType::Create, k, 1));
        let o = q.next(t0).unwrap();
        sent.insert(o.key.clone(), o.event);
    }
    let b = &sent["b"];
    assert!(matches!(
        q.answer(&b.resource_id, &b.event_id),
        Answered::Acked(_)
    ));
    let t5 = t0 + Duration::from_secs(5);
    let mut resent: Vec<String> = Vec::new();
    while let Ok(o) = q.next(t5) {
        assert_eq!(o.attempt, 2);
        resent.push(o.key);
    }
    resent.sort();
    assert_eq!(resent, vec!["a", "c"], "the ACKed one is not resent");
    assert_eq!(q.next(t5).unwrap_err(), Some(t5 + Duration::from_secs(20)));
}

#[tokio::test(start_paused = true)]
async fn equal_event_ids_of_two_keys_stay_unambiguous() {
    let q = q();
    let stub = |kind: &str| json!({"kind": kind, "metadata": {"name": "x", "namespace": "n"}});
    q.push(
        "x",
        Event::for_object(
            "t",
            EventType::Delete,
            Target::Application,
            &stub("Application"),
        ),
    );
    q.push(
        "appproject/x",
        Event::for_object(
            "t",
            EventType::Delete,
            Target::AppProject,
            &stub("AppProject"),
        ),
    );
    let now = Instant::now();
    let (a, b) = (q.next(now).unwrap(), q.next(now).unwrap());
    assert_ne!(a.event.event_id, b.event.event_id);
    for o in [a, b] {
        assert!(matches!(
            q.answer(&o.event.resource_id, &o.event.event_id),
            Answered::Acked(_)
        ));
    }
    assert!(q.is_idle());
}

proptest! {
    #[test]
    fn queue_invariants(ops in proptest::collection::vec((0u8..4, 0u8..6, any::<bool>()), 1..200)) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap();
        rt.block_on(async {
            let q = SendQueue::new(8, Backoff::default());
            q.set_regenerate(Arc::new(|k: &str| vec![ev(EventType::SpecUpdate, k, 1000)]));
            let mut inflight: HashMap<String, Event> = HashMap::new();
            // last pushed kind per key, to check the final state reaches the receiver
            let mut delivered_last: HashMap<String, EventType> = HashMap::new();
            let now = Instant::now();
            for (i, (key, op, ack)) in ops.into_iter().enumerate() {
                let key = format!("k{key}");
                let ty = [EventType::SpecUpdate, EventType::StatusUpdate, EventType::SetOperation, EventType::Delete, EventType::Create, EventType::SpecUpdate][op as usize];
                q.push(&key, ev(ty, &key, i as u64));
                if ack {
                    while let Ok(o) = q.next(now) {
                        prop_assert!(!inflight.contains_key(&o.key) || o.attempt > 1, "two in flight for one key");
                        inflight.insert(o.key.clone(), o.event);
                    }
                    for (k, e) in inflight.drain() {
                        prop_assert!(matches!(q.answer(&e.resource_id, &e.event_id), Answered::Acked(_)));
                        delivered_last.insert(k, e.ty);
                    }
                }
                let st = q.stats();
                prop_assert!(st.pending <= 8 + 1, "bounded");
            }
            // drain everything
            loop {
                let mut progressed = false;
                while let Ok(o) = q.next(now) {
                    inflight.insert(o.key.clone(), o.event);
                    progressed = true;
                }
                for (_, e) in inflight.drain() {
                    q.answer(&e.resource_id, &e.event_id);
                    progressed = true;
                }
                if !progressed { break; }
            }
            prop_assert!(q.is_idle(), "everything delivered: {:?}", q.stats());
            Ok(())
        })?;
    }
}
