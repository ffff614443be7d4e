//! Watch streams: a cursor into a type's event history; never blocks writers, closes when the
//! reader falls behind the bounded history.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use http_body::Frame;
use http_body_util::{BodyExt, StreamBody};
use serde_json::json;
use tokio::time::Instant;

use crate::registry::ResourceType;
use crate::response::HubBody;
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::{EvType, Event, History, State};
use crate::table::TableCtx;

pub(crate) struct WatchParams {
    pub ns: Option<String>,
    pub label: LabelSelector,
    pub field: FieldSelector,
    /// `None`: start with synthetic ADDED events for the current state.
    pub from_rv: Option<u64>,
    pub send_initial_events: bool,
    pub bookmarks: bool,
    pub bookmark_interval: Duration,
    pub timeout: Duration,
    pub version: String,
    pub table: Option<TableCtx>,
    /// Objects as `meta.k8s.io/v1 PartialObjectMetadata`.
    pub partial: bool,
}

struct Watcher {
    /// Initial state still to send as synthetic ADDED events (rendered lazily, in chunks).
    initial: VecDeque<Arc<crate::store::Obj>>,
    /// Sent after the initial state (the initial-events-end bookmark).
    pending: VecDeque<Bytes>,
    hist: Arc<History>,
    cursor: u64,
    rx: tokio::sync::watch::Receiver<()>,
    p: WatchParams,
    rt: Arc<ResourceType>,
    deadline: Instant,
    next_bookmark: Instant,
    committed: Arc<AtomicU64>,
    last_rv: u64,
    done: bool,
}

fn line(buf: &mut BytesMut, ty: &str, obj: &[u8]) {
    buf.put_slice(b"{\"type\":\"");
    buf.put_slice(ty.as_bytes());
    buf.put_slice(b"\",\"object\":");
    buf.put_slice(obj);
    buf.put_slice(b"}\n");
}

pub(crate) fn error_line(code: u16, reason: &str, message: &str) -> Bytes {
    let status = json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
        "message": message, "reason": reason, "code": code});
    let mut b = BytesMut::new();
    line(&mut b, "ERROR", status.to_string().as_bytes());
    b.freeze()
}

impl Watcher {
    fn object_bytes(&self, json: &Bytes, ty: EvType) -> Bytes {
        if let Some(t) = &self.p.table {
            let v: serde_json::Value = serde_json::from_slice(json).unwrap_or_default();
            let _ = ty;
            return Bytes::from(t.table_for(&self.rt, &[v], None, None, true).to_string());
        }
        if self.p.partial {
            return crate::response::to_partial(json);
        }
        crate::response::convert_version(&self.rt, &self.p.version, json)
    }

    fn render(&mut self, ev: &Event, buf: &mut BytesMut) {
        self.last_rv = self.last_rv.max(ev.rv);
        if let Some(ns) = &self.p.ns
            && **ns != *ev.ns
        {
            return;
        }
        if !self.p.field.matches(&ev.ns, &ev.name) {
            return;
        }
        let cur = self.p.label.matches(&ev.labels);
        let prev = ev
            .prev_labels
            .as_ref()
            .map(|l| self.p.label.matches(l))
            .unwrap_or(cur);
        let ty = match ev.ty {
            EvType::Added if cur => EvType::Added,
            EvType::Deleted if cur => EvType::Deleted,
            EvType::Modified => match (prev, cur) {
                (true, true) => EvType::Modified,
                (false, true) => EvType::Added,
                (true, false) => EvType::Deleted,
                (false, false) => return,
            },
            _ => return,
        };
        let json = match (&ev.prev_json, ev.ty, ty) {
            (Some(prev), EvType::Modified, EvType::Deleted) => {
                // The previous state, at this event's resourceVersion.
                let mut v: serde_json::Value =
                    serde_json::from_slice(&prev.bytes()).unwrap_or_default();
                v["metadata"]["resourceVersion"] = json!(ev.rv.to_string());
                Bytes::from(v.to_string())
            }
            _ => ev.json.bytes(),
        };
        let obj = self.object_bytes(&json, ty);
        line(buf, ty.as_str(), &obj);
    }

    fn bookmark(&self, rv: u64, initial_end: bool) -> Bytes {
        let mut meta = json!({"resourceVersion": rv.to_string(), "creationTimestamp": null});
        if initial_end {
            meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let obj = json!({"kind": self.rt.kind, "apiVersion": self.rt.api_version(&self.p.version), "metadata": meta});
        let mut b = BytesMut::new();
        line(&mut b, "BOOKMARK", obj.to_string().as_bytes());
        b.freeze()
    }

    async fn next(&mut self) -> Option<Bytes> {
        if self.done {
            return None;
        }
        if !self.initial.is_empty() {
            let mut buf = BytesMut::new();
            while let Some(o) = self.initial.pop_front() {
                let b = self.object_bytes(&o.json.bytes(), EvType::Added);
                line(&mut buf, "ADDED", &b);
                if buf.len() > 256 * 1024 {
                    break;
                }
            }
            return Some(buf.freeze());
        }
        if let Some(b) = self.pending.pop_front() {
            return Some(b);
        }
        loop {
            let mut buf = BytesMut::new();
            let (lagged, closed) = {
                let h = self.hist.lock();
                if self.cursor < h.first_seq {
                    (true, h.closed)
                } else {
                    let start = (self.cursor - h.first_seq) as usize;
                    let evs: Vec<Arc<Event>> =
                        h.events.range(start..).take(1024).cloned().collect();
                    drop(h);
                    for ev in &evs {
                        self.render(ev, &mut buf);
                        self.cursor += 1;
                        if buf.len() > 256 * 1024 {
                            break;
                        }
                    }
                    (false, self.hist.lock().closed)
                }
            };
            if lagged {
                tracing::debug!(resource = %self.rt.plural, "hub: closing a watcher that fell behind the event history");
                self.done = true;
                return None;
            }
            if !buf.is_empty() {
                return Some(buf.freeze());
            }
            if closed {
                self.done = true;
                return None;
            }
            tokio::select! {
                r = self.rx.changed() => {
                    if r.is_err() {
                        self.done = true;
                        return None;
                    }
                }
                _ = tokio::time::sleep_until(self.deadline) => {
                    self.done = true;
                    return None;
                }
                _ = tokio::time::sleep_until(self.next_bookmark), if self.p.bookmarks && self.p.table.is_none() => {
                    self.next_bookmark = Instant::now() + self.p.bookmark_interval;
                    let rv = {
                        let h = self.hist.lock();
                        if self.cursor != h.end_seq() {
                            continue;
                        }
                        self.committed.load(Ordering::SeqCst).max(self.last_rv)
                    };
                    self.last_rv = rv;
                    return Some(self.bookmark(rv, false));
                }
            }
        }
    }
}

/// Starts a watch; the caller holds the state lock, so the initial state and the event cursor
/// are consistent.
pub(crate) fn start(
    st: &State,
    rt: Arc<ResourceType>,
    committed: Arc<AtomicU64>,
    p: WatchParams,
) -> HubBody {
    let Some(store) = st.store(&rt.key()) else {
        return once(error_line(
            404,
            "NotFound",
            "the server could not find the requested resource",
        ));
    };
    let hist = store.hist.clone();
    let rx = hist.tx.subscribe();
    let now = Instant::now();
    let mut w = Watcher {
        initial: VecDeque::new(),
        pending: VecDeque::new(),
        hist: hist.clone(),
        cursor: 0,
        rx,
        deadline: now + p.timeout,
        next_bookmark: now + p.bookmark_interval,
        rt: rt.clone(),
        committed,
        last_rv: st.rv,
        done: false,
        p,
    };
    let h = hist.lock();
    match w.p.from_rv {
        Some(rv) if !w.p.send_initial_events => {
            if rv < h.horizon_rv {
                let msg = format!("too old resource version: {rv} ({})", h.horizon_rv + 1);
                drop(h);
                return once(error_line(410, "Expired", &msg));
            }
            let idx = h.events.partition_point(|e| e.rv <= rv);
            w.cursor = h.first_seq + idx as u64;
            w.last_rv = rv;
        }
        _ => {
            w.cursor = h.end_seq();
            drop(h);
            let name = w.p.field.exact_name().map(String::from);
            w.initial = store
                .iter_ns(w.p.ns.as_deref())
                .filter(|((ns, n), o)| {
                    name.as_deref().is_none_or(|x| x == n)
                        && w.p.field.matches(ns, n)
                        && w.p.label.matches(&o.labels)
                })
                .map(|(_, o)| o.clone())
                .collect();
            if w.p.send_initial_events && w.p.bookmarks {
                let b = w.bookmark(st.rv, true);
                w.pending.push_back(b);
            }
            return stream_body(w);
        }
    }
    drop(h);
    stream_body(w)
}

fn once(b: Bytes) -> HubBody {
    http_body_util::Full::new(b)
        .map_err(|e: Infallible| match e {})
        .boxed_unsync()
}

fn stream_body(w: Watcher) -> HubBody {
    let s = futures::stream::unfold(w, |mut w| async move {
        let b = w.next().await?;
        Some((Ok::<_, Infallible>(Frame::data(b)), w))
    });
    StreamBody::new(s).boxed_unsync()
}
