//! One live event stream, the same on both sides: sends the queue (one in flight per resource,
//! resend with backoff), ACKs, error replies and requests; receives, matches ACKs, and puts
//! resource events in the receive queue ([`crate::recv_queue`]) from which concurrent handlers
//! take them (different resources in parallel; one resource is never in flight twice because the
//! peer's queue holds it back until the ACK).

use std::sync::Arc;

use async_trait::async_trait;
use futures::{Stream, StreamExt};
use prost::Message;
use tokio::sync::{Semaphore, mpsc};
use tracing::Instrument;

use crate::event::{Event, EventType, raw_ids};
use crate::metrics::Metrics;
use crate::proto::eventstreamapi;
use crate::queue::{Answered, SendQueue};

/// How a handler failed.
#[derive(Debug, thiserror::Error)]
pub enum HandleError {
    /// Try again later: no ACK is sent, the peer resends.
    #[error("retryable: {0}")]
    Retryable(String),
    /// Bad event: answered with an `error` event, never retried.
    #[error("{0}")]
    Permanent(String),
}

impl From<crate::store::StoreError> for HandleError {
    fn from(e: crate::store::StoreError) -> Self {
        if e.is_retryable() {
            HandleError::Retryable(e.to_string())
        } else {
            HandleError::Permanent(e.to_string())
        }
    }
}

/// What a handler sends: direct events on this stream (ACKs, errors, proxied requests and
/// responses, which die with the stream), or requests the peer must get even across a cut.
#[derive(Clone)]
pub struct Outbox {
    // boxed: a channel allocates a block of 32 slots up front; boxed slots keep an idle
    // connection small (see docs/perf/agent.md)
    tx: mpsc::Sender<Box<Event>>,
    queue: Arc<SendQueue>,
}

impl Outbox {
    /// Sends on this stream only (un-queued, un-ACKed): lost if the stream ends first.
    pub async fn send(&self, ev: Event) {
        let _ = self.tx.send(Box::new(ev)).await;
    }

    /// Queues a request (resync events) that is resent until the peer ACKs it, on this stream or
    /// the next one (the peer's event writer resends every event until its ACK).
    pub fn send_reliable(&self, mut ev: Event) {
        // carries the current span's trace context (the resync span), as the peer's resync
        crate::otel::inject(&mut ev);
        let d = &ev.data;
        let part = |k: &str| d[k].as_str().unwrap_or_default();
        // what the request is about: one per resource (request-update, response-synced-resource)
        // or one per stream side (request-synced-resource-list, request-resource-resync)
        let key = format!(
            "{}/{}/{}/{}",
            ev.ty.short(),
            part("kind"),
            part("namespace"),
            part("name")
        );
        self.queue.push_request(&key, ev);
    }
}

/// Encoded events waiting for the stream (gRPC's own buffers come after): small, so that what
/// a slow peer has not taken yet stays compact in the send queue rather than as encoded
/// messages (each a few KiB). With 1,000 agents resyncing at once, 256 held ~2 KiB per
/// Application on the principal; the window already bounds what is in flight.
pub const WIRE_BUFFER: usize = 16;

/// The side-specific behaviour.
#[async_trait]
pub trait Handler: Send + Sync + 'static {
    /// Applies a received event (resource change or request).
    async fn handle(&self, ev: Event, out: &Outbox) -> Result<(), HandleError>;
    /// Called once the stream is up (resync requests go here).
    async fn on_connect(&self, out: &Outbox);
    /// Called after an event over the size limit was refused (`event_id` as far as it could be
    /// read): a side waiting for that event can give up at once.
    async fn on_oversized(&self, _event_id: &str, _size: usize) {}
}

/// Stream parameters.
#[derive(Clone)]
pub struct SessionCtx {
    pub source: String,
    pub queue: Arc<SendQueue>,
    pub metrics: Arc<Metrics>,
    /// Largest event (encoded) accepted or sent; larger ones get a clear error, never a retry.
    pub max_event_size: usize,
    /// Received events processed concurrently.
    pub concurrency: usize,
    /// Received events waiting for a handler at most (`ARGOCD_AGENT_RECV_QUEUE_SIZE`).
    pub recv_queue_size: usize,
    /// The receive queue's workqueue metrics (`<agent>-recv` on the principal, `default-recv`
    /// on the agent).
    pub recv_workqueue: crate::workqueue_metrics::Workqueue,
    /// The other side in metric labels: the agent name on the principal (`agent_name`), the
    /// agent mode on the agent (`agent_mode`).
    pub peer_label: String,
    /// What this stream's event-processing spans say (OTLP tracing).
    pub trace: crate::otel::StreamAttrs,
    /// The principal's identity, stamped as the `principaluid` extension on every queued event
    /// it sends (the peer's `stampEvent`); `None` on the agent.
    pub principal_uid: Option<Arc<str>>,
}

/// The trailer our principal sets on the event streams it ends because it is stopping (an
/// active/active replica handing its agents to the others on SIGTERM): our agent reconnects at
/// once, within [`HANDOVER_SPREAD`], rather than over its reconnect window. The peer's agent sees
/// an `Unavailable` status and reconnects with its own backoff.
pub const RECONNECT_NOW: &str = "x-argocd-pull-reconnect";

/// How long after a stopping principal's last word its agents are spread over.
pub const HANDOVER_SPREAD: std::time::Duration = std::time::Duration::from_millis(500);

/// The status a stopping principal ends an event stream with.
pub fn stopping_status() -> tonic::Status {
    let mut s = tonic::Status::unavailable(
        "the principal is stopping: reconnect (another replica serves this agent now)",
    );
    s.metadata_mut().insert(
        RECONNECT_NOW,
        tonic::metadata::MetadataValue::from_static("now"),
    );
    s
}

/// Whether `end` is a stopping principal's [`stopping_status`].
pub fn is_reconnect_now(end: &SessionEnd) -> bool {
    matches!(end, SessionEnd::Status(s)
        if s.code() == tonic::Code::Unavailable
            && s.metadata().get(RECONNECT_NOW).is_some_and(|v| v == "now"))
}

/// Why a session ended.
#[derive(Debug, thiserror::Error)]
pub enum SessionEnd {
    #[error("stream closed by peer")]
    Closed,
    #[error("stream error: {0}")]
    Status(#[from] tonic::Status),
    #[error("outbound stream closed")]
    OutboundClosed,
}

fn update_gauges(ctx: &SessionCtx) {
    let s = ctx.queue.stats();
    ctx.metrics.queue_pending.set(s.pending as i64);
    ctx.metrics.queue_inflight.set(s.inflight as i64);
    ctx.metrics.queue_deferred.set(s.deferred as i64);
}

/// Encodes, enforces the size limit, counts.
fn to_wire_checked(ctx: &SessionCtx, ev: &Event) -> Result<eventstreamapi::Event, usize> {
    // the peer's event writer stamps `sentat` on queued events only; fire-and-forget ones (ACKs,
    // heartbeats) go out as built — an ACK keeps the `sentat` of the event it acknowledges
    let w = if ev.target.is_fire_and_forget() {
        ev.to_wire()
    } else {
        // one copy of the queued event (its payload bytes shared), moved into the envelope
        let mut e = ev.clone();
        e.sent_at = Some(crate::event::now_rfc3339());
        if let Some(uid) = &ctx.principal_uid {
            e.extra_attrs.insert(
                crate::event::attr::PRINCIPALUID.into(),
                crate::event::AttrValue::String(uid.to_string()),
            );
        }
        e.into_wire()
    };
    let n = w.encoded_len();
    if n > ctx.max_event_size {
        Err(n)
    } else {
        crate::full_detail::log_event(crate::full_detail::Direction::Send, ev);
        Ok(w)
    }
}

/// Runs the session until the stream ends. `wire` carries outbound events.
pub async fn run<S>(
    ctx: SessionCtx,
    handler: Arc<dyn Handler>,
    mut inbound: S,
    wire: mpsc::Sender<Box<eventstreamapi::Event>>,
) -> SessionEnd
where
    S: Stream<Item = Result<eventstreamapi::Event, tonic::Status>> + Unpin + Send,
{
    let (direct_tx, mut direct_rx) = mpsc::channel::<Box<Event>>(4096);
    let out = Outbox {
        tx: direct_tx,
        queue: ctx.queue.clone(),
    };
    ctx.queue.resend_all_now();

    // sender
    let sctx = ctx.clone();
    let sender = tokio::spawn(async move {
        let ctx = sctx;
        loop {
            // direct events first: ACKs never wait behind queued traffic
            while let Ok(ev) = direct_rx.try_recv() {
                match to_wire_checked(&ctx, &ev) {
                    Ok(w) => {
                        if wire.send(Box::new(w)).await.is_err() {
                            return;
                        }
                        ctx.metrics.sent(ev.ty.short());
                    }
                    Err(n) => {
                        tracing::error!(
                            r#type = ev.ty.short(),
                            size = n,
                            limit = ctx.max_event_size,
                            "direct event exceeds the message size limit, not sent"
                        );
                        ctx.metrics.failed("oversized");
                    }
                }
            }
            let notified = ctx.queue.notified();
            match ctx.queue.next(tokio::time::Instant::now()) {
                Ok(o) => {
                    // the send queue's work: an event taken until the stream has it
                    let _work = ctx.queue.workqueue().start();
                    match to_wire_checked(&ctx, &o.event) {
                        Ok(w) => {
                            if wire.send(Box::new(w)).await.is_err() {
                                return;
                            }
                            ctx.metrics.sent(o.event.ty.short());
                            if o.attempt > 1 {
                                ctx.metrics.events_resent.inc();
                            }
                        }
                        Err(n) => {
                            tracing::error!(
                                r#type = o.event.ty.short(), subject = %o.event.subject, size = n, limit = ctx.max_event_size,
                                "event exceeds the message size limit; dropped from the queue (not retried)"
                            );
                            ctx.metrics.failed("oversized");
                            ctx.metrics.discarded(
                                &ctx.peer_label,
                                o.event.ty.short(),
                                o.event.target.as_str(),
                            );
                            ctx.queue.answer(&o.event.resource_id, &o.event.event_id);
                        }
                    }
                    update_gauges(&ctx);
                }
                Err(deadline) => {
                    update_gauges(&ctx);
                    let sleep = async {
                        match deadline {
                            Some(d) => tokio::time::sleep_until(d).await,
                            None => std::future::pending().await,
                        }
                    };
                    tokio::select! {
                        _ = notified => {}
                        _ = sleep => {}
                        ev = direct_rx.recv() => {
                            let Some(ev) = ev else { return };
                            if let Ok(w) = to_wire_checked(&ctx, &ev) {
                                if wire.send(Box::new(w)).await.is_err() { return; }
                                ctx.metrics.sent(ev.ty.short());
                            } else {
                                ctx.metrics.failed("oversized");
                            }
                        }
                    }
                }
            }
        }
    });

    let h = handler.clone();
    let o2 = out.clone();
    let connect = tokio::spawn(async move { h.on_connect(&o2).await });
    let _guards = (
        AbortOnDrop(sender.abort_handle()),
        AbortOnDrop(connect.abort_handle()),
    );

    // received events wait in the receive queue for one of `concurrency` handlers; the stream is
    // read on meanwhile (ACKs of what we sent never wait behind a busy handler)
    let (recv_q, mut recv_rx) =
        crate::recv_queue::channel::<Received>(ctx.recv_queue_size, ctx.recv_workqueue.clone());
    let sem = Arc::new(Semaphore::new(ctx.concurrency.max(1)));
    // what every handled event reads, shared (not copied per event)
    let handling = Arc::new(Handling {
        processing: crate::metrics::PeerProcessing::new(&ctx.peer_label),
        ctx: ctx.clone(),
    });
    let dispatch = {
        let (hd, handler, out, sem) = (handling.clone(), handler.clone(), out.clone(), sem.clone());
        tokio::spawn(async move {
            loop {
                // a handler first: the event waits in the queue (counted) until one is free
                let Ok(permit) = sem.clone().acquire_owned().await else {
                    return;
                };
                let Some(r) = recv_rx.take().await else {
                    return;
                };
                let work = hd.ctx.recv_workqueue.start();
                let (hd, h, out) = (hd.clone(), handler.clone(), out.clone());
                tokio::spawn(async move {
                    let _done = (permit, r.busy, work);
                    handle(hd, h, out, r.ev).await;
                });
            }
        })
    };
    let _dispatch = AbortOnDrop(dispatch.abort_handle());
    // events being handled (type + event id): a resend that arrives while the first copy is
    // still waiting or being handled is dropped, the first one's ACK answers both
    let busy: Arc<std::sync::Mutex<std::collections::HashSet<String>>> = Arc::default();
    loop {
        let msg = match inbound.next().await {
            None => break SessionEnd::Closed,
            Some(Err(s)) => break SessionEnd::Status(s),
            Some(Ok(m)) => m,
        };
        if sender.is_finished() {
            break SessionEnd::OutboundClosed;
        }
        let size = msg.encoded_len();
        if size > ctx.max_event_size {
            let (rid, eid) = raw_ids(&msg);
            tracing::warn!(
                size,
                limit = ctx.max_event_size,
                "received oversized event; answered with an error event"
            );
            ctx.metrics.error_reply("oversized");
            out.send(Event::error_reply(
                &ctx.source,
                &rid,
                &eid,
                "oversized",
                &format!(
                    "event of {size} bytes exceeds the limit of {} bytes",
                    ctx.max_event_size
                ),
            ))
            .await;
            handler.on_oversized(&eid, size).await;
            continue;
        }
        // the ids an error reply needs, read before the envelope is consumed
        let (rid, eid) = raw_ids(&msg);
        let ev = match Event::from_wire_owned(msg) {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!(error = %e, "received malformed event; answered with an error event");
                ctx.metrics.error_reply("malformed");
                out.send(Event::error_reply(
                    &ctx.source,
                    &rid,
                    &eid,
                    "malformed",
                    &e.to_string(),
                ))
                .await;
                continue;
            }
        };
        ctx.metrics.received(ev.ty.short());
        crate::full_detail::log_event(crate::full_detail::Direction::Recv, &ev);
        if let Some(sent) = ev
            .sent_at
            .as_deref()
            .and_then(|s| s.parse::<jiff::Timestamp>().ok())
        {
            let lat = jiff::Timestamp::now().duration_since(sent).as_secs_f64();
            if lat >= 0.0 {
                ctx.metrics.propagation(ev.target.as_str(), lat);
            }
        }
        match ev.ty {
            EventType::Processed => {
                if let Answered::Acked(_) = ctx.queue.answer(&ev.resource_id, &ev.event_id) {
                    ctx.metrics.events_acked.inc();
                }
                continue;
            }
            // an `error` answering one of our events (dataschema eventProcessed); the peer's own
            // `error` events (ErrorEvent, dataschema of the object's target) go to the handler
            EventType::Error if ev.target == crate::event::Target::EventProcessed => {
                if let Answered::Acked(orig) = ctx.queue.answer(&ev.resource_id, &ev.event_id) {
                    tracing::error!(r#type = orig.ty.short(), subject = %orig.subject, answer = %ev.data, "peer rejected event; not retried");
                    ctx.metrics.failed("peer-error");
                    ctx.metrics
                        .discarded(&ctx.peer_label, orig.ty.short(), orig.target.as_str());
                } else {
                    tracing::warn!(answer = %ev.data, "peer sent an error event");
                }
                continue;
            }
            EventType::Ping | EventType::Pong => {
                // as the peer (principal/event.go processHeartbeatEvent, then the ACK of every
                // processed event): a heartbeat is ACKed with `processed`, never answered `pong`
                out.send(ev.ack(&ctx.source)).await;
                continue;
            }
            _ => {}
        }
        let busy_guard = match Busy::enter(&busy, &ev) {
            Some(g) => g,
            None => {
                tracing::debug!(r#type = ev.ty.short(), event = %ev.event_id, "resend of an event still waiting or being handled; dropped");
                continue;
            }
        };
        // a free handler and nothing waiting: straight to it, without the hop through the queue
        // (events are handed out as they arrive, as before there was one)
        if recv_q.is_empty()
            && let Ok(permit) = sem.clone().try_acquire_owned()
        {
            recv_q.passed_through();
            let work = ctx.recv_workqueue.start();
            let (hd, h, out) = (handling.clone(), handler.clone(), out.clone());
            tokio::spawn(async move {
                let _done = (permit, busy_guard, work);
                handle(hd, h, out, ev).await;
            });
            continue;
        }
        if recv_q
            .put(Received {
                ev,
                busy: busy_guard,
            })
            .await
            .is_err()
        {
            break SessionEnd::Closed;
        }
    }
}

/// A received event waiting for a handler, marked busy meanwhile.
struct Received {
    ev: Event,
    busy: Busy,
}

/// What the handlers of one session's received events share.
struct Handling {
    ctx: SessionCtx,
    processing: crate::metrics::PeerProcessing,
}

/// Handles one received event: validation, the handler, the ACK or error answer, the metrics.
async fn handle(hd: Arc<Handling>, h: Arc<dyn Handler>, out: Outbox, ev: Event) {
    let ctx = &hd.ctx;
    // resync requests are ACKed like changes: the peer's event writer resends every
    // non-ACK, non-heartbeat event until its ACK arrives (internal/event/event_writer.go)
    // resource requests/responses and cache info are ACKed too (the peer ACKs every
    // processed event; its event writer resends them otherwise)
    let is_change = ev.ty.is_resource_change()
        || matches!(
            ev.target,
            crate::event::Target::ResourceResync
                | crate::event::Target::Resource
                | crate::event::Target::Redis
                | crate::event::Target::ClusterCacheInfoUpdate
                | crate::event::Target::ContainerLog
                | crate::event::Target::Terminal
        );
    let (rid, eid, ty) = (ev.resource_id.clone(), ev.event_id.clone(), ev.ty);
    let target = ev.target;
    // `<target>.<type>`, continuing the sender's trace (no-op with tracing off)
    let span = crate::otel::event_span(&ctx.trace, &ev);
    let t0 = std::time::Instant::now();
    let processed = |status: &'static str| {
        ctx.metrics.processed_for(
            &hd.processing,
            status,
            target.as_str(),
            t0.elapsed().as_secs_f64(),
        )
    };
    if crate::validate::applies(&ev)
        && let Err(e) = crate::validate::check(&ev)
    {
        // refused before any handler runs: nothing is written
        tracing::warn!(r#type = ty.short(), target = target.as_str(), resource = %rid, error = %e, "invalid payload refused");
        crate::otel::record_result(&span, &Err(&e));
        ctx.metrics.error_reply("invalid");
        processed("failure");
        out.send(Event::error_reply_for(
            &ctx.source,
            &rid,
            &eid,
            &ev.subject,
            "invalid",
            &e,
        ))
        .await;
        return;
    }
    // the peer ACKs every event it processed; an `error` event is processed like an object
    let ack = if is_change || ty == EventType::Error {
        Some(ev.ack(&ctx.source))
    } else {
        None
    };
    let r = h.handle(ev, &out).instrument(span.clone()).await;
    crate::otel::record_result(&span, &r);
    drop(span);
    match r {
        Ok(()) => {
            processed("success");
            if let Some(a) = ack {
                ctx.metrics.events_processed.inc();
                out.send(a).await;
            }
        }
        Err(HandleError::Retryable(e)) => {
            tracing::warn!(r#type = ty.short(), resource = %rid, error = %e, "event not applied yet; the peer will resend");
            ctx.metrics.events_retry_later.inc();
            processed("failure");
        }
        Err(HandleError::Permanent(e)) => {
            tracing::warn!(r#type = ty.short(), resource = %rid, error = %e, "event rejected");
            ctx.metrics.error_reply("rejected");
            processed("not-allowed");
            out.send(Event::error_reply(&ctx.source, &rid, &eid, "rejected", &e))
                .await;
        }
    }
}

/// Marks an event as being handled until dropped (see `busy` in [`run`]).
struct Busy {
    set: Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
    key: Option<String>,
}

impl Busy {
    /// `None`: the same event is being handled already.
    fn enter(
        set: &Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
        ev: &Event,
    ) -> Option<Busy> {
        let key = (!ev.event_id.is_empty()).then(|| format!("{}/{}", ev.ty.short(), ev.event_id));
        if let Some(k) = &key
            && !set.lock().expect("poisoned").insert(k.clone())
        {
            return None;
        }
        Some(Busy {
            set: set.clone(),
            key,
        })
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        if let Some(k) = &self.key {
            self.set.lock().expect("poisoned").remove(k);
        }
    }
}

struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
