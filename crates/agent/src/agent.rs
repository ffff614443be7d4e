//! The agent: dials the principal, authenticates, keeps one event stream, reconnects with backoff,
//! and keeps the local Argo CD namespace in sync (managed: replica; autonomous: source of truth).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Channel, Endpoint};

use crate::checksum::{set_checksum, set_item, spec_checksum};
use crate::event::{Event, EventType, Target};
use crate::metrics::Metrics;
use crate::objects::{self as o, SOURCE_UID};
use crate::proto::authapi::{self, authentication_client::AuthenticationClient};
use crate::proto::eventstreamapi::event_stream_client::EventStreamClient;
use crate::proto::versionapi::{self, version_client::VersionClient};
use crate::queue::{Backoff, Pushed, SendQueue};
use crate::session::{self, HandleError, Handler, Outbox, SessionCtx};
use crate::store::{Kind, Store, StoreError, StoreEvent};
use crate::tls::{self, TlsMaterial};
use crate::{Mode, VERSION};

/// Agent settings.
#[derive(Clone, Debug)]
pub struct AgentConfig {
    pub principal: SocketAddr,
    /// Name in the principal's server certificate.
    pub server_name: String,
    pub tls: TlsMaterial,
    pub allow_tls12: bool,
    pub mode: Mode,
    /// Local Argo CD namespace.
    pub namespace: String,
    pub max_event_size: usize,
    pub queue_capacity: usize,
    pub concurrency: usize,
    pub compression: bool,
    pub keepalive_interval: Duration,
    pub backoff: Backoff,
    pub reconnect_min: Duration,
    pub reconnect_max: Duration,
}

impl AgentConfig {
    pub fn new(principal: SocketAddr, tls: TlsMaterial, mode: Mode) -> Self {
        Self {
            principal,
            server_name: "localhost".into(),
            tls,
            allow_tls12: false,
            mode,
            namespace: "argocd".into(),
            max_event_size: crate::DEFAULT_MAX_EVENT_SIZE,
            queue_capacity: crate::DEFAULT_QUEUE_CAPACITY,
            concurrency: crate::DEFAULT_CONCURRENCY,
            compression: false,
            keepalive_interval: Duration::from_secs(30),
            backoff: Backoff::default(),
            reconnect_min: Duration::from_millis(100),
            reconnect_max: Duration::from_secs(30),
        }
    }
}

struct Inner {
    cfg: AgentConfig,
    store: Arc<dyn Store>,
    metrics: Arc<Metrics>,
    queue: Arc<SendQueue>,
    source: Mutex<String>,
    /// managed: principal copies (local form) by name
    copies: Mutex<HashMap<String, Value>>,
    /// last sent status hash (managed) / object hash (autonomous) by name
    sent: Mutex<HashMap<String, String>>,
    /// local objects by name (kept by the local watcher)
    cache: Mutex<HashMap<String, Value>>,
    connected: AtomicBool,
    locks: o::KeyedLocks,
    last_error: Mutex<Option<String>>,
    connected_tx: tokio::sync::watch::Sender<u64>,
    /// managed: AppProjects the principal gave us (local form) by name
    proj_copies: Mutex<HashMap<String, Value>>,
    /// autonomous: last sent AppProject hash by name
    proj_sent: Mutex<HashMap<String, String>>,
    /// local AppProjects by name (kept by the local project watcher)
    proj_cache: Mutex<HashMap<String, Value>>,
    /// managed: Applications the principal marked for deletion (deletionTimestamp) that we are
    /// deleting locally; `delete` is reported once the local object is gone
    deleting: Mutex<std::collections::HashSet<String>>,
}

/// A running agent.
pub struct Agent {
    inner: Arc<Inner>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Agent {
    /// Starts the local watcher and the connection loop.
    pub async fn start(
        cfg: AgentConfig,
        store: Arc<dyn Store>,
        metrics: Arc<Metrics>,
    ) -> anyhow::Result<Agent> {
        let client_tls = Arc::new(tls::client_config(&cfg.tls, cfg.allow_tls12)?);
        let queue = Arc::new(SendQueue::new(cfg.queue_capacity, cfg.backoff));
        let inner = Arc::new(Inner {
            cfg: cfg.clone(),
            store,
            metrics,
            queue: queue.clone(),
            source: Mutex::new("agent".into()),
            copies: Mutex::new(HashMap::new()),
            sent: Mutex::new(HashMap::new()),
            cache: Mutex::new(HashMap::new()),
            connected: AtomicBool::new(false),
            locks: o::KeyedLocks::default(),
            last_error: Mutex::new(None),
            connected_tx: tokio::sync::watch::channel(0).0,
            proj_copies: Mutex::new(HashMap::new()),
            proj_sent: Mutex::new(HashMap::new()),
            proj_cache: Mutex::new(HashMap::new()),
            deleting: Mutex::new(Default::default()),
        });
        let me = Arc::downgrade(&inner);
        queue.set_regenerate(Arc::new(move |key: &str| {
            me.upgrade().map(|m| m.regenerate(key)).unwrap_or_default()
        }));
        if cfg.mode == Mode::Managed {
            // what the principal last gave us survives an agent restart in the local objects
            for obj in inner
                .store
                .list(Kind::Application, Some(&cfg.namespace))
                .await?
            {
                if !o::source_uid(&obj).is_empty() {
                    inner
                        .copies
                        .lock()
                        .expect("poisoned")
                        .insert(o::name(&obj).to_string(), strip_local(&obj));
                }
            }
            match inner
                .store
                .list(Kind::AppProject, Some(&cfg.namespace))
                .await
            {
                Ok(list) => {
                    for p in list.iter().filter(|p| !o::source_uid(p).is_empty()) {
                        inner
                            .proj_copies
                            .lock()
                            .expect("poisoned")
                            .insert(o::name(p).to_string(), strip_project(p));
                    }
                }
                Err(e) => tracing::warn!(error = %e, "listing local AppProjects failed"),
            }
        }
        let mut tasks = Vec::new();
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let w = inner.clone();
        tasks.push(tokio::spawn(async move { w.watch_local(ready_tx).await }));
        let (pready_tx, pready_rx) = tokio::sync::oneshot::channel();
        let w = inner.clone();
        tasks.push(tokio::spawn(async move {
            w.watch_local_projects(pready_tx).await
        }));
        let _ = tokio::time::timeout(Duration::from_secs(30), ready_rx).await;
        let _ = tokio::time::timeout(Duration::from_secs(30), pready_rx).await;
        let c = inner.clone();
        tasks.push(tokio::spawn(
            async move { c.connect_loop(client_tls).await },
        ));
        Ok(Agent { inner, tasks })
    }

    pub fn is_connected(&self) -> bool {
        self.inner.connected.load(Ordering::SeqCst)
    }

    /// The last connection/authentication error, if the agent is not connected.
    pub fn last_error(&self) -> Option<String> {
        self.inner.last_error.lock().expect("poisoned").clone()
    }

    /// Waits until the stream is up (counting connections: returns once more than `after` streams
    /// have been established).
    pub async fn wait_connected(&self, after: u64) -> u64 {
        let mut rx = self.inner.connected_tx.subscribe();
        rx.wait_for(|n| *n > after)
            .await
            .map(|v| *v)
            .unwrap_or(after)
    }

    /// Number of streams established so far.
    pub fn connections(&self) -> u64 {
        *self.inner.connected_tx.borrow()
    }

    /// Whether the send queue is empty (everything ACKed).
    pub fn idle(&self) -> bool {
        self.inner.queue.is_idle()
    }

    pub fn metrics(&self) -> Arc<Metrics> {
        self.inner.metrics.clone()
    }

    pub async fn shutdown(mut self) {
        for t in self.tasks.drain(..) {
            t.abort();
            let _ = t.await;
        }
        self.inner.connected.store(false, Ordering::SeqCst);
        self.inner.metrics.ready.set(false);
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Local form of a principal object: our namespace, destination in-cluster, source UID annotated,
/// no server-side metadata, no status.
fn to_local(principal_obj: &Value, ns: &str) -> Value {
    let mut l = json!({
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Application",
        "metadata": o::portable_meta(principal_obj, ns),
        "spec": principal_obj["spec"].clone(),
    });
    if l["spec"]["destination"].is_object() {
        let dns = l["spec"]["destination"]["namespace"].clone();
        l["spec"]["destination"] = json!({"name": "in-cluster"});
        if !dns.is_null() {
            l["spec"]["destination"]["namespace"] = dns;
        }
    }
    if let Some(op) = principal_obj.get("operation").filter(|v| !v.is_null()) {
        l["operation"] = op.clone();
    }
    // finalizers (e.g. resources-finalizer.argocd.argoproj.io) are copied on creation, so that the
    // managed cluster's Argo CD cascades the deletion of the workload; later updates keep the
    // local finalizers (they belong to the local controllers)
    if let Some(f) = principal_obj["metadata"]["finalizers"]
        .as_array()
        .filter(|f| !f.is_empty())
    {
        l["metadata"]["finalizers"] = Value::Array(f.clone());
    }
    o::set_annotation(&mut l, SOURCE_UID, o::uid(principal_obj));
    l
}

/// A local object reduced to what the principal gave us.
fn strip_local(obj: &Value) -> Value {
    json!({
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Application",
        "metadata": o::portable_meta(obj, o::namespace(obj)),
        "spec": obj["spec"].clone(),
    })
}

/// Local form of a principal AppProject (already agent-specific: destinations in-cluster).
fn to_local_project(p: &Value, ns: &str) -> Value {
    let mut l = json!({
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "AppProject",
        "metadata": o::portable_meta(p, ns),
        "spec": p["spec"].clone(),
    });
    o::set_annotation(&mut l, SOURCE_UID, o::uid(p));
    l
}

/// A local AppProject reduced to what the principal gave us.
fn strip_project(p: &Value) -> Value {
    json!({
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "AppProject",
        "metadata": o::portable_meta(p, o::namespace(p)),
        "spec": p["spec"].clone(),
    })
}

/// Hash of what an autonomous agent reports: spec, status, operation, labels, annotations.
fn report_hash(obj: &Value) -> String {
    crate::checksum::hash_value(&json!([
        obj["spec"],
        obj["status"],
        obj["operation"],
        obj["metadata"]["labels"],
        obj["metadata"]["annotations"]
    ]))
}

/// Payload of a managed status update.
fn status_payload(obj: &Value) -> Value {
    let mut p = json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application", "metadata": obj["metadata"].clone()});
    for k in ["status", "operation"] {
        if let Some(v) = obj.get(k).filter(|v| !v.is_null()) {
            p[k] = v.clone();
        }
    }
    p
}

fn status_report_hash(obj: &Value) -> String {
    crate::checksum::hash_value(&json!([obj["status"], obj["operation"]]))
}

impl Inner {
    fn source(&self) -> String {
        self.source.lock().expect("poisoned").clone()
    }

    fn regenerate(&self, key: &str) -> Vec<Event> {
        let src = self.source();
        let (target, name) = o::parse_qkey(key);
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

    fn push(&self, ty: EventType, obj: &Value) {
        self.push_target(ty, Target::Application, obj)
    }

    fn push_target(&self, ty: EventType, target: Target, obj: &Value) {
        let ev = Event::for_object(&self.source(), ty, target, obj);
        match self.queue.push(&o::qkey(target, o::name(obj)), ev) {
            Pushed::Queued => self.metrics.queued(ty.short()),
            Pushed::Coalesced => {
                self.metrics.events_coalesced.inc();
            }
            Pushed::Deferred => {
                self.metrics.events_deferred.inc();
            }
        }
    }

    async fn watch_local(self: Arc<Self>, ready: tokio::sync::oneshot::Sender<()>) {
        let mut ready = Some(ready);
        loop {
            let mut s = self
                .store
                .watch(Kind::Application, Some(&self.cfg.namespace));
            while let Some(ev) = s.next().await {
                match ev {
                    Ok(StoreEvent::Restarted(list)) => {
                        let old = replace_cache(&self.cache, &list);
                        let names: std::collections::HashSet<&str> =
                            list.iter().map(o::name).collect();
                        for obj in &list {
                            self.on_local_apply(obj);
                        }
                        for obj in &old {
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
                                .map(|(_, v)| v.clone())
                                .collect();
                            for c in missing {
                                self.revert(c);
                            }
                        }
                        if let Some(r) = ready.take() {
                            let _ = r.send(());
                        }
                    }
                    Ok(StoreEvent::Applied(obj)) => {
                        self.cache
                            .lock()
                            .expect("poisoned")
                            .insert(o::name(&obj).to_string(), obj.clone());
                        self.on_local_apply(&obj);
                    }
                    Ok(StoreEvent::Deleted(obj)) => {
                        self.cache.lock().expect("poisoned").remove(o::name(&obj));
                        self.on_local_delete(&obj);
                    }
                    Err(e) => tracing::warn!(error = %e, "local watch error"),
                }
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    async fn watch_local_projects(self: Arc<Self>, ready: tokio::sync::oneshot::Sender<()>) {
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
                            list.iter().map(o::name).collect();
                        for p in &list {
                            self.on_local_project(p, false);
                        }
                        for p in &old {
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
                        self.proj_cache
                            .lock()
                            .expect("poisoned")
                            .insert(o::name(&p).to_string(), p.clone());
                        self.on_local_project(&p, false);
                    }
                    Ok(StoreEvent::Deleted(p)) => {
                        self.proj_cache
                            .lock()
                            .expect("poisoned")
                            .remove(o::name(&p));
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

    /// A local AppProject changed (`deleted`: it is gone).
    fn on_local_project(self: &Arc<Self>, p: &Value, deleted: bool) {
        if o::ignored(p) {
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

    fn revert_project(self: &Arc<Self>, copy: Value) {
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

    fn revert(self: &Arc<Self>, copy: Value) {
        self.metrics.local_edits_reverted.inc();
        let me = self.clone();
        tokio::spawn(async move {
            let _g = me.locks.lock(o::name(&copy)).await;
            // the principal may have deleted it meanwhile: then the deletion wins
            let current = me
                .copies
                .lock()
                .expect("poisoned")
                .get(o::name(&copy))
                .cloned();
            let Some(copy) = current else { return };
            if let Err(e) = me.upsert_local(&copy, false).await {
                tracing::warn!(error = %e, "reverting a local edit failed");
            }
        });
    }

    fn on_local_apply(self: &Arc<Self>, obj: &Value) {
        if o::ignored(obj) {
            return;
        }
        let name = o::name(obj).to_string();
        match self.cfg.mode {
            Mode::Managed => {
                let copy = self.copies.lock().expect("poisoned").get(&name).cloned();
                let Some(copy) = copy else { return };
                if o::full_spec_hash(obj) != o::full_spec_hash(&copy) {
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

    fn on_local_delete(self: &Arc<Self>, obj: &Value) {
        let name = o::name(obj).to_string();
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
                if let Some(copy) = copy {
                    tracing::info!(app = %name, "local deletion of a managed application; recreating");
                    self.revert(copy);
                }
            }
            Mode::Autonomous => {
                if self.sent.lock().expect("poisoned").remove(&name).is_some() {
                    self.push(EventType::Delete, obj);
                }
            }
        }
    }

    /// Creates or updates the local object from `want` (local form).
    async fn upsert_local(&self, want: &Value, with_op: bool) -> Result<(), StoreError> {
        self.upsert(Kind::Application, want, with_op).await
    }

    /// Creates or updates the local object of `kind` from `want` (local form).
    async fn upsert(&self, kind: Kind, want: &Value, with_op: bool) -> Result<(), StoreError> {
        let (ns, name) = (self.cfg.namespace.as_str(), o::name(want));
        for _ in 0..5 {
            let r = match self.store.get(kind, ns, name).await? {
                None => self.store.create(kind, want.clone()).await.map(|_| ()),
                Some(cur) => {
                    let mut n = o::overlay(&cur, want, false, false);
                    if with_op && let Some(op) = want.get("operation").filter(|v| !v.is_null()) {
                        n["operation"] = op.clone();
                    }
                    if n == cur {
                        Ok(())
                    } else {
                        self.store.replace(kind, n).await.map(|_| ())
                    }
                }
            };
            match r {
                Err(StoreError::Conflict(_)) | Err(StoreError::AlreadyExists) => continue,
                r => return r,
            }
        }
        Err(StoreError::Conflict(format!(
            "{ns}/{name}: too many conflicts"
        )))
    }

    async fn handle_event(self: &Arc<Self>, ev: Event, out: &Outbox) -> Result<(), HandleError> {
        let _g = if ev.ty.is_resource_change() {
            Some(self.locks.lock(&o::qkey(ev.target, ev.name())).await)
        } else {
            None
        };
        let ns = self.cfg.namespace.clone();
        if ev.target == Target::AppProject || ev.data["kind"] == "AppProject" {
            return self.handle_project_event(ev).await;
        }
        if ev.ty.is_resource_change() && ev.target != Target::Application {
            return Err(HandleError::Permanent(format!(
                "unsupported target {:?}",
                ev.target.as_str()
            )));
        }
        match (self.cfg.mode, ev.ty) {
            (Mode::Managed, EventType::Create | EventType::SpecUpdate) => {
                if o::name(&ev.data).is_empty() {
                    return Err(HandleError::Permanent(
                        "payload has no metadata.name".into(),
                    ));
                }
                if o::deleting(&ev.data) {
                    return self.delete_for_principal(&ev.data).await;
                }
                let want = to_local(&ev.data, &ns);
                let name = o::name(&want).to_string();
                let mut copy = want.clone();
                copy.as_object_mut().map(|m| m.remove("operation"));
                self.copies.lock().expect("poisoned").insert(name, copy);
                self.upsert_local(&want, ev.ty == EventType::Create).await?;
                Ok(())
            }
            (Mode::Managed, EventType::Delete) => {
                let name = ev.name().to_string();
                self.copies.lock().expect("poisoned").remove(&name);
                self.store.delete(Kind::Application, &ns, &name).await?;
                Ok(())
            }
            (_, EventType::SetOperation) => {
                let op = ev.data.get("operation").cloned().unwrap_or(Value::Null);
                if op.is_null() {
                    return Err(HandleError::Permanent(
                        "set-operation without .operation".into(),
                    ));
                }
                match self
                    .store
                    .merge_patch(Kind::Application, &ns, ev.name(), json!({"operation": op}))
                    .await
                {
                    Err(StoreError::NotFound) => Err(HandleError::Permanent(format!(
                        "application {} not found",
                        ev.name()
                    ))),
                    r => r.map(|_| ()).map_err(Into::into),
                }
            }
            (_, EventType::TerminateOperation) => {
                match self
                    .store
                    .merge_patch(
                        Kind::Application,
                        &ns,
                        ev.name(),
                        json!({"status": {"operationState": {"phase": "Terminating"}}}),
                    )
                    .await
                {
                    Err(StoreError::NotFound) => Err(HandleError::Permanent(format!(
                        "application {} not found",
                        ev.name()
                    ))),
                    r => r.map(|_| ()).map_err(Into::into),
                }
            }
            (Mode::Managed, EventType::RequestResourceResync) => {
                self.replica_resync(out).await;
                Ok(())
            }
            (Mode::Managed, EventType::ResponseSyncedResource) => {
                let name = ev.data["name"].as_str().unwrap_or_default();
                if !self.copies.lock().expect("poisoned").contains_key(name) {
                    let pns = ev.data["namespace"].as_str().unwrap_or_default();
                    out.send(o::request_update(
                        &self.source(),
                        name,
                        pns,
                        ev.data["uid"].as_str().unwrap_or_default(),
                        "",
                    ))
                    .await;
                }
                Ok(())
            }
            (Mode::Autonomous, EventType::RequestUpdate) => {
                let name = ev.data["name"].as_str().unwrap_or_default().to_string();
                let checksum = ev.data["checksum"].as_str().unwrap_or_default();
                match self.store.get(Kind::Application, &ns, &name).await? {
                    None => {
                        let uid = ev.data["uid"].as_str().unwrap_or_default();
                        self.push(EventType::Delete, &o::stub(&name, &ns, uid));
                    }
                    Some(obj) => {
                        if spec_checksum(&obj) != checksum {
                            self.sent
                                .lock()
                                .expect("poisoned")
                                .insert(name, report_hash(&obj));
                            self.push(EventType::SpecUpdate, &obj);
                        }
                    }
                }
                Ok(())
            }
            (Mode::Autonomous, EventType::RequestSyncedResourceList) => {
                let list: Vec<Value> = self
                    .store
                    .list(Kind::Application, Some(&ns))
                    .await?
                    .into_iter()
                    .filter(|x| !o::ignored(x))
                    .collect();
                let sum = set_checksum(
                    list.iter()
                        .map(|x| set_item("Application", o::name(x), o::uid(x))),
                );
                if sum != ev.data["checksum"].as_str().unwrap_or_default() {
                    for x in &list {
                        out.send(o::response_synced(
                            &self.source(),
                            o::name(x),
                            &ns,
                            o::uid(x),
                        ))
                        .await;
                    }
                }
                Ok(())
            }
            (Mode::Autonomous, EventType::RequestResourceResync) => Ok(()),
            (m, t) => Err(HandleError::Permanent(format!(
                "event type {} is not valid for a {} agent",
                t.short(),
                m.as_str()
            ))),
        }
    }

    /// Managed: the principal's Application carries a deletionTimestamp. Deletes the local copy in
    /// the foreground (its finalizers let the local Argo CD remove the workload first) and reports
    /// `delete` once it is gone.
    async fn delete_for_principal(self: &Arc<Self>, hub: &Value) -> Result<(), HandleError> {
        let ns = self.cfg.namespace.clone();
        let name = o::name(hub).to_string();
        self.copies.lock().expect("poisoned").remove(&name);
        self.deleting.lock().expect("poisoned").insert(name.clone());
        match self.store.get(Kind::Application, &ns, &name).await? {
            None => {
                // already gone (e.g. deleted while we were disconnected): report at once
                self.deleting.lock().expect("poisoned").remove(&name);
                self.push(EventType::Delete, &o::stub(&name, &ns, ""));
            }
            Some(_) => {
                tracing::info!(app = %name, "principal deletes the application; deleting in the foreground");
                self.store.delete(Kind::Application, &ns, &name).await?;
            }
        }
        Ok(())
    }

    async fn handle_project_event(self: &Arc<Self>, ev: Event) -> Result<(), HandleError> {
        let ns = self.cfg.namespace.clone();
        match (self.cfg.mode, ev.ty) {
            (Mode::Managed, EventType::Create | EventType::SpecUpdate) => {
                if o::name(&ev.data).is_empty() {
                    return Err(HandleError::Permanent(
                        "payload has no metadata.name".into(),
                    ));
                }
                let want = to_local_project(&ev.data, &ns);
                self.proj_copies
                    .lock()
                    .expect("poisoned")
                    .insert(o::name(&want).to_string(), want.clone());
                self.upsert(Kind::AppProject, &want, false).await?;
                Ok(())
            }
            (Mode::Managed, EventType::Delete) => {
                let name = ev.name().to_string();
                self.proj_copies.lock().expect("poisoned").remove(&name);
                self.store.delete(Kind::AppProject, &ns, &name).await?;
                Ok(())
            }
            (Mode::Autonomous, EventType::RequestUpdate) => {
                let name = ev.data["name"].as_str().unwrap_or_default().to_string();
                let checksum = ev.data["checksum"].as_str().unwrap_or_default();
                match self.store.get(Kind::AppProject, &ns, &name).await? {
                    None => {
                        let uid = ev.data["uid"].as_str().unwrap_or_default();
                        self.push_target(
                            EventType::Delete,
                            Target::AppProject,
                            &o::project_stub(&name, &ns, uid),
                        );
                    }
                    Some(p) => {
                        if spec_checksum(&p) != checksum {
                            self.proj_sent
                                .lock()
                                .expect("poisoned")
                                .insert(name, o::project_hash(&p));
                            self.push_target(EventType::SpecUpdate, Target::AppProject, &p);
                        }
                    }
                }
                Ok(())
            }
            (m, t) => Err(HandleError::Permanent(format!(
                "event type {} is not valid for an AppProject on a {} agent",
                t.short(),
                m.as_str()
            ))),
        }
    }

    /// Managed: the agent is the replica; tell the principal what we have.
    async fn replica_resync(&self, out: &Outbox) {
        let copies: Vec<Value> = self
            .copies
            .lock()
            .expect("poisoned")
            .values()
            .cloned()
            .collect();
        let src = self.source();
        let mut items = Vec::new();
        for c in &copies {
            let suid = o::source_uid(c);
            items.push(set_item("Application", o::name(c), suid));
            out.send(o::request_update(
                &src,
                o::name(c),
                &self.cfg.namespace,
                suid,
                &spec_checksum(c),
            ))
            .await;
        }
        let projects: Vec<Value> = self
            .proj_copies
            .lock()
            .expect("poisoned")
            .values()
            .cloned()
            .collect();
        for p in &projects {
            out.send(o::request_update_project(
                &src,
                o::name(p),
                &self.cfg.namespace,
                o::source_uid(p),
                &spec_checksum(p),
            ))
            .await;
        }
        out.send(o::request_synced_list(&src, &set_checksum(items)))
            .await;
    }

    async fn connect_loop(self: Arc<Self>, client_tls: Arc<rustls::ClientConfig>) {
        let mut delay = self.cfg.reconnect_min;
        let mut refresh: Option<String> = None;
        loop {
            let started = tokio::time::Instant::now();
            match self.connect_once(&client_tls, &mut refresh).await {
                Ok(end) => tracing::info!(reason = %end, "stream to principal ended; reconnecting"),
                Err(e) => {
                    tracing::warn!(error = %e, "connection to principal failed");
                    *self.last_error.lock().expect("poisoned") = Some(e.to_string());
                }
            }
            self.connected.store(false, Ordering::SeqCst);
            self.metrics.ready.set(false);
            if started.elapsed() > Duration::from_secs(10) {
                delay = self.cfg.reconnect_min;
            }
            // jitter: up to +50 %
            let jitter = delay.mul_f64(rand::random::<f64>() * 0.5);
            tokio::time::sleep(delay + jitter).await;
            delay = (delay * 2).min(self.cfg.reconnect_max);
        }
    }

    async fn connect_once(
        self: &Arc<Self>,
        client_tls: &Arc<rustls::ClientConfig>,
        refresh: &mut Option<String>,
    ) -> anyhow::Result<session::SessionEnd> {
        let endpoint = Endpoint::from_shared(format!("http://{}", self.cfg.principal))?
            .http2_keep_alive_interval(self.cfg.keepalive_interval)
            .keep_alive_timeout(Duration::from_secs(20))
            .keep_alive_while_idle(true)
            .connect_timeout(Duration::from_secs(10))
            .tcp_nodelay(true);
        let channel: Channel = endpoint
            .connect_with_connector(tls::connector(
                client_tls.clone(),
                self.cfg.principal,
                self.cfg.server_name.clone(),
            ))
            .await
            .map_err(|e| anyhow::anyhow!("connecting to {}: {e:?}", self.cfg.principal))?;
        let v = VersionClient::new(channel.clone())
            .version(versionapi::VersionRequest {})
            .await?
            .into_inner();
        if !crate::version_compatible(&v.version) {
            anyhow::bail!(
                "principal version {} is not compatible with agent version {VERSION}",
                v.version
            );
        }
        let mut auth = AuthenticationClient::new(channel.clone());
        let mut resp = None;
        if let Some(r) = refresh.as_ref() {
            resp = auth
                .refresh_token(authapi::RefreshTokenRequest {
                    refresh_token: r.clone(),
                })
                .await
                .ok();
        }
        let resp = match resp {
            Some(r) => r.into_inner(),
            None => auth
                .authenticate(authapi::AuthRequest {
                    method: "mtls".into(),
                    credentials: Default::default(),
                    mode: self.cfg.mode.as_str().into(),
                    version: VERSION.into(),
                    agent_namespace: self.cfg.namespace.clone(),
                })
                .await
                .map_err(|s| {
                    anyhow::anyhow!("authentication rejected: {} ({:?})", s.message(), s.code())
                })?
                .into_inner(),
        };
        *refresh = Some(resp.refresh_token.clone());
        let mut es = EventStreamClient::new(channel)
            .max_decoding_message_size(self.cfg.max_event_size.saturating_mul(2).max(4096))
            .max_encoding_message_size(self.cfg.max_event_size.saturating_mul(2).max(4096))
            .accept_compressed(tonic::codec::CompressionEncoding::Gzip);
        if self.cfg.compression {
            es = es.send_compressed(tonic::codec::CompressionEncoding::Gzip);
        }
        let (tx, rx) = mpsc::channel::<Box<crate::proto::eventstreamapi::Event>>(256);
        let mut req = tonic::Request::new(ReceiverStream::new(rx).map(|e| *e));
        req.metadata_mut()
            .insert("authorization", resp.access_token.parse()?);
        let inbound = es.subscribe(req).await?.into_inner();
        self.connected.store(true, Ordering::SeqCst);
        // ready = connected and authenticated
        self.metrics.ready.set(true);
        *self.last_error.lock().expect("poisoned") = None;
        self.connected_tx.send_modify(|n| *n += 1);
        tracing::info!(principal = %self.cfg.principal, mode = self.cfg.mode.as_str(), "connected to principal");
        let ctx = SessionCtx {
            source: self.source(),
            queue: self.queue.clone(),
            metrics: self.metrics.clone(),
            max_event_size: self.cfg.max_event_size,
            concurrency: self.cfg.concurrency,
        };
        let handler = Arc::new(SessionHandler {
            inner: self.clone(),
        });
        Ok(session::run(ctx, handler, inbound, tx).await)
    }
}

struct SessionHandler {
    inner: Arc<Inner>,
}

#[async_trait]
impl Handler for SessionHandler {
    async fn handle(&self, ev: Event, out: &Outbox) -> Result<(), HandleError> {
        self.inner.handle_event(ev, out).await
    }
    async fn on_connect(&self, out: &Outbox) {
        match self.inner.cfg.mode {
            Mode::Managed => self.inner.replica_resync(out).await,
            // the principal (replica) starts the resync itself on every new stream
            Mode::Autonomous => {}
        }
    }
}

/// Replaces a by-name cache with a fresh list and returns the cached objects the list no longer has.
fn replace_cache(cache: &Mutex<HashMap<String, Value>>, list: &[Value]) -> Vec<Value> {
    let names: std::collections::HashSet<&str> = list.iter().map(o::name).collect();
    let mut c = cache.lock().expect("poisoned");
    let vanished = c
        .values()
        .filter(|v| !names.contains(o::name(v)))
        .cloned()
        .collect();
    *c = list
        .iter()
        .map(|x| (o::name(x).to_string(), x.clone()))
        .collect();
    vanished
}
