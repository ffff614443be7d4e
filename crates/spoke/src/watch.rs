//! Local watchers: local Applications and AppProjects become events for the principal; local
//! edits of what the principal owns are reverted.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use serde_json::Value;

use argocd_pull_agent_core::Mode;
use argocd_pull_agent_core::event::{EventType, Target};
use argocd_pull_agent_core::objects as o;
use argocd_pull_agent_core::store::{Kind, StoreEvent};

use super::Inner;
use super::application::{report_hash, status_payload, status_report_hash};
use super::update_buffer::UpdateBuffer;
use argocd_pull_agent_core::otel;

impl Inner {
    pub(super) async fn watch_local(self: Arc<Self>, ready: tokio::sync::oneshot::Sender<()>) {
        let mut ready = Some(ready);
        let interval = self.cfg.informer_event_buffer_interval;
        let mut buffer = (!interval.is_zero()).then(|| {
            tracing::info!("Buffering of Application events is enabled at {interval:?}");
            UpdateBuffer::new(interval)
        });
        loop {
            let mut s = self.store.watch(Kind::Application, self.app_scope());
            loop {
                let due = buffer.as_mut().and_then(UpdateBuffer::next_due);
                let ev = tokio::select! {
                    ev = s.next() => match ev {
                        Some(ev) => ev,
                        None => break,
                    },
                    _ = sleep_until(due) => {
                        let now = tokio::time::Instant::now();
                        for obj in buffer.as_mut().map(|b| b.due(now)).unwrap_or_default() {
                            let _s = self.local_span("update", Kind::Application, &obj).entered();
                            self.on_local_apply(&obj);
                        }
                        continue;
                    }
                };
                match ev {
                    Ok(StoreEvent::Restarted(list)) => {
                        let old = replace_cache_by(&self.cache, &list, |x| self.lkey(x));
                        if let Some(b) = buffer.as_mut() {
                            // the list is the newest state: held updates are stale
                            for obj in list.iter().chain(&old) {
                                b.add_or_delete(&self.lkey(obj));
                            }
                        }
                        let names: std::collections::HashSet<String> =
                            list.iter().map(|x| self.lkey(x)).collect();
                        for obj in &list {
                            let _s = self.local_span("create", Kind::Application, obj).entered();
                            self.on_local_apply(obj);
                        }
                        for obj in &old {
                            let _s = self.local_span("delete", Kind::Application, obj).entered();
                            self.on_local_delete(obj);
                        }
                        if self.cfg.mode == Mode::Managed {
                            // principal copies with no local object (deleted while we were down)
                            let missing: Vec<Value> = self
                                .copies
                                .lock()
                                .expect("poisoned")
                                .iter()
                                .filter(|(n, _)| !names.contains(n.as_str()))
                                .map(|(_, v)| Value::clone(v))
                                .collect();
                            for c in missing {
                                self.recreate(c);
                            }
                        }
                        if let Some(r) = ready.take() {
                            let _ = r.send(());
                        }
                    }
                    Ok(StoreEvent::Applied(obj)) => {
                        // the store, the cache and this handler share the object (no copy)
                        let known = self
                            .cache
                            .lock()
                            .expect("poisoned")
                            .insert(self.lkey(&obj), obj.clone())
                            .is_some();
                        // --buffer-informer-event-interval: only updates wait
                        let obj = match buffer.as_mut() {
                            Some(b) if known => {
                                let now = tokio::time::Instant::now();
                                match b.update(self.lkey(&obj), (*obj).clone(), now) {
                                    Some(obj) => Arc::new(obj),
                                    None => continue,
                                }
                            }
                            Some(b) => {
                                b.add_or_delete(&self.lkey(&obj));
                                obj
                            }
                            None => obj,
                        };
                        let _s = self
                            .local_span(otel::op_of(known), Kind::Application, &obj)
                            .entered();
                        self.on_local_apply(&obj);
                    }
                    Ok(StoreEvent::Deleted(obj)) => {
                        self.cache
                            .lock()
                            .expect("poisoned")
                            .remove(&self.lkey(&obj));
                        if let Some(b) = buffer.as_mut() {
                            b.add_or_delete(&self.lkey(&obj));
                        }
                        let _s = self.local_span("delete", Kind::Application, &obj).entered();
                        self.on_local_delete(&obj);
                    }
                    Err(e) => tracing::warn!(error = %e, "local watch error"),
                }
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    pub(super) async fn watch_local_projects(
        self: Arc<Self>,
        ready: tokio::sync::oneshot::Sender<()>,
    ) {
        let mut ready = Some(ready);
        loop {
            let mut s = self
                .store
                .watch(Kind::AppProject, Some(&self.cfg.namespace));
            while let Some(ev) = s.next().await {
                match ev {
                    Ok(StoreEvent::Restarted(list)) => {
                        let old = replace_cache(&self.proj_cache, &list);
                        let names: std::collections::HashSet<&str> =
                            list.iter().map(|p| o::name(p)).collect();
                        for p in &list {
                            let _s = self.local_span("create", Kind::AppProject, p).entered();
                            self.on_local_project(p, false);
                        }
                        for p in &old {
                            let _s = self.local_span("delete", Kind::AppProject, p).entered();
                            self.on_local_project(p, true);
                        }
                        if self.cfg.mode == Mode::Managed {
                            let missing: Vec<Value> = self
                                .proj_copies
                                .lock()
                                .expect("poisoned")
                                .iter()
                                .filter(|(n, _)| !names.contains(n.as_str()))
                                .map(|(_, v)| v.clone())
                                .collect();
                            for c in missing {
                                self.revert_project(c);
                            }
                        }
                    }
                    Ok(StoreEvent::Applied(p)) => {
                        let known = self
                            .proj_cache
                            .lock()
                            .expect("poisoned")
                            .insert(o::name(&p).to_string(), p.clone())
                            .is_some();
                        let _s = self
                            .local_span(otel::op_of(known), Kind::AppProject, &p)
                            .entered();
                        self.on_local_project(&p, false);
                    }
                    Ok(StoreEvent::Deleted(p)) => {
                        self.proj_cache
                            .lock()
                            .expect("poisoned")
                            .remove(o::name(&p));
                        let _s = self.local_span("delete", Kind::AppProject, &p).entered();
                        self.on_local_project(&p, true);
                    }
                    Err(e) => tracing::warn!(error = %e, "local AppProject watch error"),
                }
                // ready after the first list, or the first error (no AppProject CRD)
                if let Some(r) = ready.take() {
                    let _ = r.send(());
                }
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    /// The watch span of a local object (`argocd.agent.name`: the agent's namespace, as the peer).
    fn local_span(&self, op: &'static str, kind: Kind, obj: &Value) -> tracing::Span {
        otel::watch_span(
            otel::Component::Agent,
            op,
            kind.as_str(),
            obj,
            &self.cfg.namespace,
            self.cfg.mode,
        )
    }

    /// A local AppProject changed (`deleted`: it is gone).
    pub(super) fn on_local_project(self: &Arc<Self>, p: &Value, deleted: bool) {
        if o::ignored(p) {
            // labelled ignore-sync after it was reported: gone for the principal
            if self.cfg.mode == Mode::Autonomous && !deleted {
                self.on_local_project(p, true);
            }
            return;
        }
        let name = o::name(p).to_string();
        match self.cfg.mode {
            Mode::Managed => {
                // the principal's projects are reverted to its copy, recreated when deleted
                let copy = self
                    .proj_copies
                    .lock()
                    .expect("poisoned")
                    .get(&name)
                    .cloned();
                if let Some(copy) = copy
                    && (deleted || o::full_spec_hash(p) != o::full_spec_hash(&copy))
                {
                    tracing::info!(project = %name, "local change of a managed AppProject; reverting");
                    self.revert_project(copy);
                }
            }
            Mode::Autonomous => {
                if deleted {
                    if self
                        .proj_sent
                        .lock()
                        .expect("poisoned")
                        .remove(&name)
                        .is_some()
                    {
                        self.push_target(EventType::Delete, Target::AppProject, p);
                    }
                    return;
                }
                let h = o::project_hash(p);
                let prev = self
                    .proj_sent
                    .lock()
                    .expect("poisoned")
                    .insert(name, h.clone());
                match prev {
                    None => self.push_target(EventType::Create, Target::AppProject, p),
                    Some(x) if x != h => {
                        self.push_target(EventType::SpecUpdate, Target::AppProject, p)
                    }
                    _ => {}
                }
            }
        }
    }

    pub(super) fn revert_project(self: &Arc<Self>, copy: Value) {
        self.metrics.local_edits_reverted.inc();
        let me = self.clone();
        tokio::spawn(async move {
            let name = o::name(&copy).to_string();
            let _g = me.locks.lock(&o::qkey(Target::AppProject, &name)).await;
            let current = me.proj_copies.lock().expect("poisoned").get(&name).cloned();
            let Some(copy) = current else { return };
            if let Err(e) = me.upsert(Kind::AppProject, &copy, false).await {
                tracing::warn!(error = %e, "reverting a local AppProject edit failed");
            }
        });
    }

    pub(super) fn revert(self: &Arc<Self>, copy: Value) {
        self.restore(copy, false);
    }

    /// A managed Application deleted on this cluster by someone else: recreated from the
    /// principal's copy, then `--on-application-recreate` (`resync` requests a sync; the copy
    /// never carries a status, so `clear-status` holds by construction).
    pub(super) fn recreate(self: &Arc<Self>, copy: Value) {
        self.restore(copy, true);
    }

    fn restore(self: &Arc<Self>, copy: Value, deleted: bool) {
        self.metrics.local_edits_reverted.inc();
        let me = self.clone();
        tokio::spawn(async move {
            let _g = me
                .locks
                .lock(&me.app_qkey(o::namespace(&copy), o::name(&copy)))
                .await;
            // the principal may have deleted it meanwhile: then the deletion wins
            let current = me
                .copies
                .lock()
                .expect("poisoned")
                .get(&me.lkey(&copy))
                .cloned();
            let Some(current) = current else { return };
            let mut copy = Arc::unwrap_or_clone(current);
            let resync = deleted
                && me.cfg.on_recreate == argocd_pull_agent_core::policy::RecreateAction::Resync;
            if resync {
                copy["operation"] = serde_json::json!({"sync": {}});
            }
            if let Err(e) = me.upsert_local(&copy, resync).await {
                tracing::warn!(error = %e, "reverting a local edit failed");
            } else if resync {
                tracing::info!(app = %o::name(&copy), "triggered resync on recreated application");
            }
        });
    }

    pub(super) fn on_local_apply(self: &Arc<Self>, obj: &Value) {
        if o::ignored(obj) {
            // labelled ignore-sync after it was reported: for the principal it is gone (the
            // peer's label-selected informer sees a deletion)
            if self.cfg.mode == Mode::Autonomous {
                self.on_local_delete(obj);
            }
            return;
        }
        let name = self.lkey(obj);
        match self.cfg.mode {
            Mode::Managed => {
                // the principal's copy is read in place: copied only for a revert; an equal spec
                // needs no hashing (the hashes decide only when the parsed forms differ, e.g.
                // `1.0` against `1`)
                let edited = {
                    let copies = self.copies.lock().expect("poisoned");
                    let Some(copy) = copies.get(&name) else {
                        return;
                    };
                    (!o::json_eq(&obj["spec"], &copy["spec"])
                        && o::full_spec_hash(obj) != o::full_spec_hash(copy))
                    .then(|| Value::clone(copy))
                };
                if let Some(copy) = edited {
                    tracing::info!(app = %name, "local edit of a managed application; reverting");
                    self.revert(copy);
                }
                let h = status_report_hash(obj);
                // nothing to report for an object without status and operation that we have
                // not reported before (e.g. just created from the principal's event): saves a
                // status-update + ACK round trip per created Application
                let nothing = obj.get("status").is_none_or(Value::is_null)
                    && obj.get("operation").is_none_or(Value::is_null);
                let mut sent = self.sent.lock().expect("poisoned");
                let report = match sent.get(&name) {
                    Some(prev) => *prev != h,
                    None => !nothing,
                };
                if report {
                    sent.insert(name, h);
                    drop(sent);
                    self.push(EventType::StatusUpdate, &status_payload(obj));
                } else {
                    sent.entry(name).or_insert(h);
                }
            }
            Mode::Autonomous => {
                let h = report_hash(obj);
                let mut sent = self.sent.lock().expect("poisoned");
                let prev = sent.insert(name, h.clone());
                drop(sent);
                match prev {
                    None => self.push(EventType::Create, obj),
                    Some(p) if p != h => self.push(EventType::SpecUpdate, obj),
                    _ => {}
                }
            }
        }
    }

    pub(super) fn on_local_delete(self: &Arc<Self>, obj: &Value) {
        let name = self.lkey(obj);
        match self.cfg.mode {
            Mode::Managed => {
                self.sent.lock().expect("poisoned").remove(&name);
                if self.deleting.lock().expect("poisoned").remove(&name) {
                    // the deletion the principal asked for is complete: report it
                    tracing::info!(app = %name, "application deleted; reporting to the principal");
                    self.push(EventType::Delete, obj);
                    return;
                }
                let copy = self.copies.lock().expect("poisoned").get(&name).cloned();
                if let Some(copy) = copy.map(Arc::unwrap_or_clone) {
                    tracing::info!(app = %name, "local deletion of a managed application; recreating");
                    self.recreate(copy);
                }
            }
            Mode::Autonomous => {
                if self.sent.lock().expect("poisoned").remove(&name).is_some() {
                    self.push(EventType::Delete, obj);
                }
            }
        }
    }
}

/// Sleeps until `at`; never without it.
async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Replaces a by-name cache with a fresh list and returns the cached objects the list no longer has.
fn replace_cache(
    cache: &Mutex<HashMap<String, Arc<Value>>>,
    list: &[Arc<Value>],
) -> Vec<Arc<Value>> {
    replace_cache_by(cache, list, |x| o::name(x).to_string())
}

/// [`replace_cache`] with the cache keyed by `key`; the cache shares the listed objects.
fn replace_cache_by(
    cache: &Mutex<HashMap<String, Arc<Value>>>,
    list: &[Arc<Value>],
    key: impl Fn(&Value) -> String,
) -> Vec<Arc<Value>> {
    let names: std::collections::HashSet<String> = list.iter().map(|x| key(x)).collect();
    let mut c = cache.lock().expect("poisoned");
    let vanished = c
        .values()
        .filter(|v| !names.contains(&key(v)))
        .cloned()
        .collect();
    *c = list.iter().map(|x| (key(x), x.clone())).collect();
    vanished
}
