//! The agent's side of the event stream: what it does with each event from the principal, what
//! runs while a stream is up, and its application-level heartbeats.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

use super::Inner;
use argocd_pull_agent_core::Mode;
use argocd_pull_agent_core::event::{Event, EventType, Target};
use argocd_pull_agent_core::session::{HandleError, Handler, Outbox};

pub(super) struct SessionHandler {
    pub(super) inner: Arc<Inner>,
}

#[async_trait]
impl Handler for SessionHandler {
    async fn handle(&self, ev: Event, out: &Outbox) -> Result<(), HandleError> {
        if ev.target == Target::Resource {
            return self.inner.handle_resource_request(&ev, out).await;
        }
        if ev.target == Target::ContainerLog {
            return self.inner.handle_container_log(&ev);
        }
        if ev.target == Target::Terminal {
            return self.inner.handle_terminal_request(&ev);
        }
        if ev.target == Target::Redis {
            return self.inner.handle_redis_request(ev, out).await;
        }
        match argocd_pull_agent_core::checksum::resync_kind(&ev) {
            argocd_pull_agent_core::checksum::ResyncKind::Handled
                if ev.ty == EventType::ResponseSyncedResource
                    && self.inner.cfg.mode == Mode::Managed =>
            {
                self.inner.answer_synced_resource(&ev, out).await;
                Ok(())
            }
            argocd_pull_agent_core::checksum::ResyncKind::Handled => {
                self.inner.handle_event(ev, out).await
            }
            argocd_pull_agent_core::checksum::ResyncKind::Refused(msg) => {
                Err(HandleError::Permanent(msg))
            }
        }
    }
    async fn on_connect(&self, out: &Outbox) {
        *self.inner.outbox.lock().expect("poisoned") = Some(out.clone());
        self.inner.resync_on_start(out).await;
        // these end with the stream
        tokio::join!(
            self.heartbeats(out),
            self.inner.report_agent_info(out),
            self.inner.periodic_resync(out),
        );
    }
}

impl SessionHandler {
    /// Application-level heartbeats, as the peer's `--heartbeat-interval` (its
    /// `HeartbeatEvent(Ping)`): the principal ACKs each.
    async fn heartbeats(&self, out: &Outbox) {
        let every = self.inner.cfg.heartbeat_interval;
        if every.is_zero() {
            return;
        }
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        loop {
            tick.tick().await;
            let ping = Event::request(
                &self.inner.source(),
                EventType::Ping,
                Target::Heartbeat,
                Value::Null,
            );
            out.send(ping).await;
        }
    }
}
