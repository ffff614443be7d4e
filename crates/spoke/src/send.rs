//! What the agent queues for the principal: events about its objects (keyed per object, so a
//! newer one replaces an older one not yet sent), error events, and the event a deferred key
//! stands for when the queue has room again.

use serde_json::Value;

use super::Inner;
use super::application::status_payload;
use argocd_pull_agent_core::Mode;
use argocd_pull_agent_core::event::{Event, EventType, Target};
use argocd_pull_agent_core::objects as o;
use argocd_pull_agent_core::queue::Pushed;

impl Inner {
    pub(super) fn regenerate(&self, key: &str) -> Vec<Event> {
        let src = self.source();
        let (target, name) = o::parse_qkey(key);
        if matches!(target, Target::Repository | Target::GpgKey) {
            return vec![]; // agents never send repositories or GPG keys
        }
        if target == Target::AppProject {
            if self.cfg.mode != Mode::Autonomous {
                return vec![];
            }
            let p = self.proj_cache.lock().expect("poisoned").get(name).cloned();
            return vec![match p {
                Some(p) => Event::for_object(&src, EventType::SpecUpdate, Target::AppProject, &p),
                None => Event::for_object(
                    &src,
                    EventType::Delete,
                    Target::AppProject,
                    &o::project_stub(name, &self.cfg.namespace, ""),
                ),
            }];
        }
        let obj = self.cache.lock().expect("poisoned").get(name).cloned();
        match (self.cfg.mode, obj) {
            (Mode::Managed, Some(obj)) => vec![Event::for_object(
                &src,
                EventType::StatusUpdate,
                Target::Application,
                &status_payload(&obj),
            )],
            (Mode::Managed, None) => vec![],
            (Mode::Autonomous, Some(obj)) => vec![Event::for_object(
                &src,
                EventType::SpecUpdate,
                Target::Application,
                &obj,
            )],
            (Mode::Autonomous, None) => {
                vec![Event::for_object(
                    &src,
                    EventType::Delete,
                    Target::Application,
                    &o::stub(name, &self.cfg.namespace, ""),
                )]
            }
        }
    }

    /// An `error` event about one of our objects (the peer's `addErrorEventToQueue`): target
    /// `target`, `ErrorData{resourceName, resourceNamespace, message}`.
    pub(super) fn push_error(&self, target: Target, name: &str, ns: &str, message: &str) {
        let ev = Event::request(
            &self.source(),
            EventType::Error,
            target,
            serde_json::json!({"resourceName": name, "resourceNamespace": ns, "message": message}),
        );
        let key = format!("error/{}", ev.id);
        if let Pushed::Queued = self.queue.push(&key, ev) {
            self.metrics.queued(EventType::Error.short());
        }
    }

    pub(super) fn push(&self, ty: EventType, obj: &Value) {
        self.push_target(ty, Target::Application, obj)
    }

    pub(super) fn push_target(&self, ty: EventType, target: Target, obj: &Value) {
        let mut ev = Event::for_object(&self.source(), ty, target, obj);
        argocd_pull_agent_core::otel::inject(&mut ev);
        let key = match target {
            Target::Application => self.app_qkey(o::namespace(obj), o::name(obj)),
            _ => o::qkey(target, o::name(obj)),
        };
        match self.queue.push(&key, ev) {
            Pushed::Queued => self.metrics.queued(ty.short()),
            Pushed::Coalesced => {
                self.metrics.events_coalesced.inc();
            }
            Pushed::Deferred => {
                self.metrics.events_deferred.inc();
            }
        }
    }
}
