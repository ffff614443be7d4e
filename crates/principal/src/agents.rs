//! Per-agent state on the principal: registration, the send queue and what rebuilds a deferred
//! key's events.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::Value;

use argocd_pull_agent_core::Mode;
use argocd_pull_agent_core::event::{Event, EventType, Target};
use argocd_pull_agent_core::objects as o;
use argocd_pull_agent_core::project_match::project_for_agent;
use argocd_pull_agent_core::queue::{Pushed, SendQueue};
use argocd_pull_agent_core::store::{Kind, StoreResult};

use super::{AgentState, Inner, SOURCE};

/// What a managed agent must get to hold hub Application `h` as it is now (a deferred key's
/// events): its spec, and its operation when it has one.
pub(super) fn managed_events(h: &Value) -> Vec<Event> {
    let mut v = vec![Event::for_object(
        SOURCE,
        EventType::SpecUpdate,
        Target::Application,
        &o::without_operation(h),
    )];
    if !o::op_hash(h).is_empty() {
        v.push(Event::for_object(
            SOURCE,
            EventType::SetOperation,
            Target::Application,
            h,
        ));
    }
    v
}

impl Inner {
    pub(super) fn agent(&self, name: &str) -> Option<Arc<AgentState>> {
        self.sessions.get(name)
    }

    /// `name`'s state, made on its first login; a login in another mode resets what it was sent.
    pub(super) fn register(self: &Arc<Self>, name: &str, mode: Mode) -> Arc<AgentState> {
        let (a, new) = self
            .sessions
            .get_or_insert(name, || self.new_agent(name, mode));
        if !new {
            let mut m = a.mode.lock().expect("poisoned");
            if *m != mode {
                tracing::info!(
                    agent = name,
                    from = m.as_str(),
                    to = mode.as_str(),
                    "agent changed mode; resetting its state"
                );
                *m = mode;
                a.mapped.store(
                    self.cfg.destination_based_mapping && mode == Mode::Managed,
                    Ordering::SeqCst,
                );
                a.views.lock().expect("poisoned").clear();
                a.projects.lock().expect("poisoned").clear();
                a.repos.lock().expect("poisoned").clear();
                a.gpg.lock().expect("poisoned").clear();
            }
        }
        a
    }

    fn new_agent(self: &Arc<Self>, name: &str, mode: Mode) -> Arc<AgentState> {
        // the peer's queue pair `<agent>` (internal/queue/queue.go `Create`): both series exist
        // from now on
        let queue = Arc::new(
            SendQueue::new(self.cfg.queue_capacity, self.cfg.backoff)
                .with_max_in_flight(self.cfg.max_in_flight)
                .with_workqueue(self.metrics.workqueues.queue(&format!("{name}-send"))),
        );
        self.metrics.workqueues.queue(&format!("{name}-recv"));
        let me = Arc::downgrade(self);
        let agent = name.to_string();
        queue.set_regenerate(Arc::new(move |key: &str| {
            let Some(me) = me.upgrade() else {
                return vec![];
            };
            me.regenerate(&agent, key)
        }));
        Arc::new(AgentState {
            name: name.to_string(),
            mode: Mutex::new(mode),
            queue,
            views: Mutex::new(HashMap::new()),
            generation: AtomicU64::new(0),
            session: Mutex::new(None),
            connected: AtomicBool::new(false),
            locks: o::KeyedLocks::default(),
            projects: Mutex::new(HashMap::new()),
            repos: Mutex::new(HashMap::new()),
            gpg: Mutex::new(HashMap::new()),
            resynced: AtomicBool::new(false),
            outbox: Mutex::new(None),
            resync_round: Mutex::new(None),
            resync_solicited: AtomicBool::new(false),
            mapped: AtomicBool::new(self.cfg.destination_based_mapping && mode == Mode::Managed),
        })
    }

    pub(super) fn cached(&self, ns: &str, name: &str) -> Option<Value> {
        self.cached_with_wire(ns, name).map(|(h, _)| h)
    }

    /// The cached hub Application and its wire form (shared bytes).
    pub(super) fn cached_with_wire(&self, ns: &str, name: &str) -> Option<(Value, Arc<[u8]>)> {
        let b = self.hub.app(ns, name)?;
        let h = serde_json::from_slice(&b).ok()?;
        Some((h, b))
    }

    /// Hub Application `ns/name` from the hub watch's cache, else from the API server (as the
    /// peer's `Get`: the informer first). A reconnecting fleet asks for every Application
    /// (`request-update`): answered from memory, not with a GET each.
    pub(super) async fn hub_app(&self, ns: &str, name: &str) -> StoreResult<Option<Value>> {
        match self.cached(ns, name) {
            Some(h) => Ok(Some(h)),
            None => self.store.get(Kind::Application, ns, name).await,
        }
    }

    /// Current events for a deferred key (backpressure path).
    pub(super) fn regenerate(&self, agent: &str, name: &str) -> Vec<Event> {
        let Some(a) = self.agent(agent) else {
            return vec![];
        };
        let mode = *a.mode.lock().expect("poisoned");
        let (target, key_name) = o::parse_qkey(name);
        if let Some(dk) = argocd_pull_agent_core::repository::DataKind::from_target(target) {
            return match mode {
                Mode::Managed => self.regenerate_data(agent, dk, key_name),
                Mode::Autonomous => vec![],
            };
        }
        if let (Target::AppProject, pname) = o::parse_qkey(name) {
            if mode != Mode::Managed {
                return vec![];
            }
            let cur = self.hub.project(pname);
            return match cur
                .and_then(|p| project_for_agent(&p, agent, self.cfg.destination_based_mapping))
            {
                Some(f) => vec![Event::for_object(
                    SOURCE,
                    EventType::SpecUpdate,
                    Target::AppProject,
                    &f,
                )],
                None => vec![Event::for_object(
                    SOURCE,
                    EventType::Delete,
                    Target::AppProject,
                    &o::project_stub(pname, &self.cfg.namespace, ""),
                )],
            };
        }
        if let (true, Mode::Managed, Some((ns, n))) = (
            self.cfg.destination_based_mapping,
            mode,
            o::split_ns_name(key_name),
        ) {
            return self.regenerate_mapped(agent, ns, n);
        }
        match (mode, self.cached(agent, name)) {
            (Mode::Managed, Some(h)) => managed_events(&h),
            (Mode::Managed, None) => {
                vec![Event::for_object(
                    SOURCE,
                    EventType::Delete,
                    Target::Application,
                    &o::stub(name, agent, ""),
                )]
            }
            (Mode::Autonomous, Some(h)) if !o::op_hash(&h).is_empty() => {
                vec![Event::for_object(
                    SOURCE,
                    EventType::SetOperation,
                    Target::Application,
                    &self.to_agent_form(agent, &h),
                )]
            }
            _ => vec![],
        }
    }

    pub(super) fn push(&self, a: &AgentState, ty: EventType, obj: &Value) {
        self.push_target(a, ty, Target::Application, obj)
    }

    /// An Application event whose payload is `obj` as the wire carries it (`wire`: those bytes,
    /// shared with the hub cache: neither copied nor encoded again).
    pub(super) fn push_wire(&self, a: &AgentState, ty: EventType, obj: &Value, wire: Arc<[u8]>) {
        let ev = Event::for_object_wire(SOURCE, ty, Target::Application, obj, wire);
        self.enqueue(a, ty, Target::Application, obj, ev)
    }

    pub(super) fn push_target(&self, a: &AgentState, ty: EventType, target: Target, obj: &Value) {
        let ev = Event::for_object(SOURCE, ty, target, obj);
        self.enqueue(a, ty, target, obj, ev)
    }

    fn enqueue(&self, a: &AgentState, ty: EventType, target: Target, obj: &Value, mut ev: Event) {
        argocd_pull_agent_core::otel::inject(&mut ev);
        let key = match target == Target::Application && self.mapped(a) {
            true => o::app_qkey(o::namespace(obj), o::name(obj)),
            false => o::qkey(target, o::name(obj)),
        };
        match a.queue.push(&key, ev) {
            Pushed::Queued => self.metrics.queued(ty.short()),
            Pushed::Coalesced => {
                self.metrics.events_coalesced.inc();
            }
            Pushed::Deferred => {
                self.metrics.events_deferred.inc();
                tracing::debug!(agent = %a.name, resource = %key, "send queue full; resource deferred");
            }
        }
    }
}
