//! The hub Application watcher: hub Applications become events for the agents; hub edits of
//! autonomous agents' Applications are reverted. (AppProjects and the other objects of the
//! principal's own namespace: `namespace_watch`.)

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use argocd_pull_ops::shards::ShardId;
use futures::StreamExt;
use serde_json::Value;
use tokio::sync::watch;

use argocd_pull_agent_core::Mode;
use argocd_pull_agent_core::checksum::spec_checksum;
use argocd_pull_agent_core::event::EventType;
use argocd_pull_agent_core::objects as o;
use argocd_pull_agent_core::store::{Kind, WatchEvent};

use super::hub_shards::{Shards, kept};
use super::{AgentState, Inner, View};
use argocd_pull_agent_core::otel;

impl Inner {
    pub(super) async fn watch_hub(self: Arc<Self>, ready: tokio::sync::oneshot::Sender<()>) {
        let mut ready = Some(ready);
        // active/active: the shards held, at every change
        let mut held = self.router.as_ref().map(|r| r.owners.owned());
        loop {
            // the shards whose Applications the cache keeps (all without active/active)
            let mut shards = match (&self.router, held.as_mut()) {
                (Some(r), Some(h)) => {
                    Some(Shards::new(r.owners.count(), h.borrow_and_update().clone()))
                }
                _ => None,
            };
            self.watch_hub_once(&mut ready, shards.as_mut(), held.as_mut())
                .await;
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    /// One list and watch of the hub's Applications, keeping those of the agents of `shards`
    /// (every one when `None`), until the watch ends.
    async fn watch_hub_once(
        self: &Arc<Self>,
        ready: &mut Option<tokio::sync::oneshot::Sender<()>>,
        mut shards: Option<&mut Shards>,
        mut held: Option<&mut watch::Receiver<BTreeSet<ShardId>>>,
    ) {
        // the list streamed: each object is kept compact as it arrives, never the whole
        // list as parsed objects (100,000 Applications are ~600 MiB parsed)
        let mut s = self.store.watch_streaming(Kind::Application, None);
        let mut building: Option<super::state::HubCache> = None;
        let mut listed = false;
        loop {
            let filling = shards.as_ref().is_some_and(|sh| sh.is_filling());
            let ev = tokio::select! {
                ev = s.next() => ev,
                // shards handed over leave the cache at once; shards taken are filled
                r = async { held.as_mut().expect("guarded").changed().await }, if listed && held.is_some() => {
                    if r.is_err() {
                        return;
                    }
                    let now = held.as_mut().expect("guarded").borrow_and_update().clone();
                    self.shards_now(shards.as_deref_mut().expect("shards with held"), &now);
                    continue;
                }
                // (select! evaluates a disabled branch's expression too: nothing here may panic)
                ev = Self::next_fill_event(shards.as_deref_mut()), if filling => {
                    self.on_fill_event(shards.as_deref_mut().expect("guarded"), ev);
                    continue;
                }
            };
            let Some(ev) = ev else { return };
            match ev {
                Ok(WatchEvent::Init) => building = Some(HashMap::new()),
                Ok(WatchEvent::InitApply(h)) => {
                    if let Some(b) = building.as_mut()
                        && kept(self, shards.as_deref(), &h)
                    {
                        b.entry(o::namespace(&h).to_string())
                            .or_default()
                            .insert(o::name(&h).to_string(), super::state::compact(&h));
                    }
                }
                Ok(WatchEvent::InitDone) => {
                    if let Some(sh) = shards.as_deref_mut() {
                        sh.listed();
                    }
                    self.listed(building.take().unwrap_or_default(), shards.as_deref());
                    if let Some(r) = ready.take() {
                        let _ = r.send(());
                    }
                    listed = true;
                    // the shards taken while this list ran
                    if let (Some(h), Some(sh)) = (held.as_mut(), shards.as_deref_mut()) {
                        let now = h.borrow_and_update().clone();
                        self.shards_now(sh, &now);
                    }
                }
                Ok(WatchEvent::Applied(h)) if kept(self, shards.as_deref(), &h) => {
                    let ns = o::namespace(&h).to_string();
                    let enc = super::state::compact(&h);
                    let known = self
                        .hub
                        .apps
                        .lock()
                        .expect("poisoned")
                        .entry(ns.clone())
                        .or_default()
                        .insert(o::name(&h).to_string(), enc.clone())
                        .is_some();
                    if !known {
                        self.metrics.ha.shards.cached_add(1);
                    }
                    let _s = self.app_span(otel::op_of(known), &h).entered();
                    self.on_hub_apply(&ns, &h, Some(&enc));
                }
                Ok(WatchEvent::Deleted(h)) if kept(self, shards.as_deref(), &h) => {
                    let ns = o::namespace(&h).to_string();
                    if let Some(sh) = shards.as_deref_mut() {
                        sh.deleted(&ns, o::name(&h));
                    }
                    if let Some(m) = self.hub.apps.lock().expect("poisoned").get_mut(&ns)
                        && m.remove(o::name(&h)).is_some()
                    {
                        self.metrics.ha.shards.cached_add(-1);
                    }
                    let _s = self.app_span("delete", &h).entered();
                    self.on_hub_delete(&ns, &h);
                }
                // outside --allowed-namespaces, or an agent another replica serves: not ours
                Ok(WatchEvent::Applied(_) | WatchEvent::Deleted(_)) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "hub watch error");
                }
            }
        }
    }

    /// A complete list `by_ns` replaces the cache first (sending reads it); each object is then
    /// handled from it, and the old cache finds the deletions. With active/active, the shards
    /// covered are loaded now, and an Application of a shard no longer held is not a deletion.
    fn listed(self: &Arc<Self>, by_ns: super::state::HubCache, shards: Option<&Shards>) {
        let keys: Vec<(String, String)> = by_ns
            .iter()
            .flat_map(|(ns, m)| m.keys().map(|n| (ns.clone(), n.clone())))
            .collect();
        self.metrics.ha.shards.cached(keys.len());
        let old = std::mem::replace(&mut *self.hub.apps.lock().expect("poisoned"), by_ns);
        if let Some(sh) = shards {
            self.publish_loaded(sh);
        }
        for (ns, name) in keys {
            if let Some((h, enc)) = self.cached_with_wire(&ns, &name) {
                let known = old.get(&ns).is_some_and(|m| m.contains_key(&name));
                let _s = self.app_span(otel::op_of(known), &h).entered();
                self.on_hub_apply(&ns, &h, Some(&enc));
            }
        }
        let mut gone = Vec::new();
        {
            let cache = self.hub.apps.lock().expect("poisoned");
            for (ns, objs) in old {
                for (name, b) in objs {
                    if cache.get(&ns).is_none_or(|m| !m.contains_key(&name))
                        && let Ok(h) = serde_json::from_slice::<Value>(&b)
                        && kept(self, shards, &h)
                    {
                        gone.push((ns.clone(), h));
                    }
                }
            }
        }
        for (ns, h) in gone {
            let _s = self.app_span("delete", &h).entered();
            self.on_hub_delete(&ns, &h);
        }
    }

    /// `--allowed-namespaces` (globs or `/regex/`, as the peer's `defaultAppFilterChain`); none
    /// given: every namespace.
    /// With destination-based mapping the principal's own namespace is always admitted.
    pub(super) fn ns_allowed(&self, ns: &str) -> bool {
        let allowed = &self.cfg.allowed_namespaces;
        if self.cfg.destination_based_mapping {
            return super::mapping::admitted(ns, &self.cfg.namespace, allowed);
        }
        allowed.is_empty() || {
            let l: Vec<&str> = allowed.iter().map(String::as_str).collect();
            argocd_pull_agent_core::project_match::in_list(&l, ns)
        }
    }

    /// The watch span of a hub Application (`argocd.agent.name`: its namespace, as the peer).
    fn app_span(&self, op: &'static str, h: &Value) -> tracing::Span {
        if !otel::enabled() {
            return tracing::Span::none();
        }
        let ns = o::namespace(h);
        let mode = self
            .agent(ns)
            .map_or(Mode::Managed, |a| *a.mode.lock().expect("poisoned"));
        otel::watch_span(otel::Component::Principal, op, "Application", h, ns, mode)
    }

    /// The hub Application `h` of `ns` changed; `enc`: its wire form when the caller has it (a
    /// `create` carries those bytes as they are).
    pub(super) fn on_hub_apply(self: &Arc<Self>, ns: &str, h: &Value, enc: Option<&Arc<[u8]>>) {
        if self.cfg.destination_based_mapping && self.on_hub_apply_mapped(ns, h, enc) {
            return;
        }
        let Some(a) = self.agent(ns) else { return };
        if o::ignored(h) {
            // labelled ignore-sync after it was sent: a managed agent loses it (the peer's
            // label-selected informer sees a deletion); removing the label sends it again
            if *a.mode.lock().expect("poisoned") == Mode::Managed {
                self.on_hub_delete(ns, h);
            }
            return;
        }
        let mode = *a.mode.lock().expect("poisoned");
        let name = o::name(h).to_string();
        match mode {
            Mode::Managed => self.apply_managed(&a, name, h, enc),
            Mode::Autonomous => {
                let mut views = a.views.lock().expect("poisoned");
                let Some(v) = views.get_mut(&name) else {
                    return;
                };
                if let Some(copy) = v.copy.clone()
                    && o::full_spec_hash(h) != o::full_spec_hash(&copy)
                {
                    // hub edits of an autonomous agent's application are reverted
                    self.spawn_revert(&a, name.clone(), false);
                }
                // a refresh requested on the hub goes to the agent (peer: a spec-update, which its
                // autonomous agent applies as `UpdateOperation`); the agent's next report clears it
                let refresh = o::refresh(h);
                if !refresh.is_empty() && v.refresh != refresh {
                    self.push(
                        &a,
                        EventType::SpecUpdate,
                        &o::without_operation(&self.to_agent_form(ns, h)),
                    );
                }
                v.refresh = refresh.to_string();
                let op = o::op_hash(h);
                if !op.is_empty() && v.op != op {
                    self.push(&a, EventType::SetOperation, &self.to_agent_form(ns, h));
                    v.op = op;
                }
                let st = o::status_hash(h);
                if v.status != st {
                    if o::terminating(h) {
                        self.push(
                            &a,
                            EventType::TerminateOperation,
                            &self.to_agent_form(ns, h),
                        );
                    }
                    v.status = st;
                }
            }
        }
    }

    /// A managed agent's hub Application `h` changed; `name` is its view key (the name, or
    /// `<ns>/<name>` under destination-based mapping); `enc`: `h`'s wire form, if known.
    pub(super) fn apply_managed(
        self: &Arc<Self>,
        a: &Arc<AgentState>,
        name: String,
        h: &Value,
        enc: Option<&Arc<[u8]>>,
    ) {
        let (spec, op, st) = (spec_checksum(h), o::op_hash(h), o::status_hash(h));
        let mut views = a.views.lock().expect("poisoned");
        if o::deleting(h) {
            // deletion flows as a spec-update carrying the deletionTimestamp; the agent
            // deletes in the foreground and reports `delete`
            let v = views.entry(name).or_default();
            if !v.deleting {
                v.deleting = true;
                self.push(a, EventType::SpecUpdate, &o::without_operation(h));
            }
            return;
        }
        match views.get_mut(&name) {
            None => {
                match enc {
                    Some(enc) => self.push_wire(a, EventType::Create, h, enc.clone()),
                    None => self.push(a, EventType::Create, h),
                }
                views.insert(
                    name,
                    View {
                        spec,
                        op,
                        status: st,
                        refresh: o::refresh(h).to_string(),
                        ..Default::default()
                    },
                );
            }
            Some(v) => {
                // a refresh requested on the hub (the UI's Refresh button) travels with
                // the spec; its removal comes back with the agent's status
                let refresh = o::refresh(h);
                let new_refresh = !refresh.is_empty() && v.refresh != refresh;
                if v.spec != spec || new_refresh {
                    self.push(a, EventType::SpecUpdate, &o::without_operation(h));
                    v.spec = spec;
                }
                v.refresh = refresh.to_string();
                if !op.is_empty() && v.op != op {
                    self.push(a, EventType::SetOperation, h);
                }
                v.op = op;
                if v.status != st {
                    if o::terminating(h) {
                        self.push(a, EventType::TerminateOperation, h);
                    }
                    v.status = st;
                }
            }
        }
    }

    /// A managed agent loses the hub Application `h` (view key `key`).
    pub(super) fn delete_managed(&self, a: &AgentState, key: &str, h: &Value) {
        if a.views.lock().expect("poisoned").remove(key).is_some() {
            self.push(a, EventType::Delete, h);
        }
    }

    pub(super) fn on_hub_delete(self: &Arc<Self>, ns: &str, h: &Value) {
        if self.cfg.destination_based_mapping && self.on_hub_delete_mapped(ns, h) {
            return;
        }
        let Some(a) = self.agent(ns) else { return };
        let mode = *a.mode.lock().expect("poisoned");
        let name = o::name(h).to_string();
        match mode {
            Mode::Managed => self.delete_managed(&a, &name, h),
            Mode::Autonomous => {
                let copy = a
                    .views
                    .lock()
                    .expect("poisoned")
                    .get(&name)
                    .and_then(|v| v.copy.clone());
                if copy.is_some() {
                    // deleted on the hub while the agent still has it: recreate
                    self.spawn_revert(&a, name, true);
                }
            }
        }
    }

    /// Reverts the hub object of an autonomous agent to the agent's copy (under the resource lock,
    /// only if the agent still has it: a concurrent delete from the agent wins).
    pub(super) fn spawn_revert(
        self: &Arc<Self>,
        a: &Arc<AgentState>,
        name: String,
        allow_create: bool,
    ) {
        self.metrics.local_edits_reverted.inc();
        let me = self.clone();
        let a = a.clone();
        tokio::spawn(async move {
            let _g = a.locks.lock(&name).await;
            let copy = a
                .views
                .lock()
                .expect("poisoned")
                .get(&name)
                .and_then(|v| v.copy.clone());
            let Some(copy) = copy else { return };
            if !allow_create
                && matches!(
                    me.store.get(Kind::Application, &a.name, &name).await,
                    Ok(None)
                )
            {
                return;
            }
            if let Err(e) = me.write_hub(&copy, true).await {
                tracing::warn!(agent = %a.name, app = %name, error = %e, "reverting a hub edit failed");
            }
        });
    }
}
