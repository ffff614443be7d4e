//! The principal: gRPC server on the hub, one send queue per agent, the hub watcher.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures::{Stream, StreamExt};
use regex::Regex;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use crate::auth::TokenIssuer;
use crate::checksum::{set_checksum, set_item, spec_checksum};
use crate::event::{Event, EventType, Target};
use crate::metrics::Metrics;
use crate::objects::{self as o, SOURCE_UID};
use crate::proto::authapi::{
    self,
    authentication_server::{Authentication, AuthenticationServer},
};
use crate::proto::eventstreamapi::{
    self,
    event_stream_server::{EventStream, EventStreamServer},
};
use crate::proto::versionapi::{
    self,
    version_server::{Version, VersionServer},
};
use crate::queue::{Backoff, Pushed, SendQueue};
use crate::session::{self, HandleError, Handler, Outbox, SessionCtx};
use crate::store::{Kind, Store, StoreError, StoreEvent};
use crate::tls::{self, TlsMaterial};
use crate::{Mode, VERSION, version_compatible};

pub const SOURCE: &str = "argocd-agent-principal";

/// Principal settings.
#[derive(Clone, Debug)]
pub struct PrincipalConfig {
    pub listen: SocketAddr,
    pub tls: TlsMaterial,
    pub allow_tls12: bool,
    pub identity_regex: String,
    /// RSA PKCS#8 PEM signing key for JWTs.
    pub jwt_key_pem: String,
    /// The principal's own namespace (reported to agents).
    pub namespace: String,
    pub max_event_size: usize,
    pub queue_capacity: usize,
    pub concurrency: usize,
    pub compression: bool,
    pub keepalive_min_interval: Duration,
    pub backoff: Backoff,
}

impl PrincipalConfig {
    pub fn new(listen: SocketAddr, tls: TlsMaterial, jwt_key_pem: String) -> Self {
        Self {
            listen,
            tls,
            allow_tls12: false,
            identity_regex: tls::DEFAULT_IDENTITY_REGEX.into(),
            jwt_key_pem,
            namespace: "argocd".into(),
            max_event_size: crate::DEFAULT_MAX_EVENT_SIZE,
            queue_capacity: crate::DEFAULT_QUEUE_CAPACITY,
            concurrency: crate::DEFAULT_CONCURRENCY,
            compression: false,
            keepalive_min_interval: Duration::from_secs(10),
            backoff: Backoff::default(),
        }
    }
}

#[derive(Default, Clone)]
struct View {
    /// spec checksum the agent has (managed) / the agent's (autonomous)
    spec: String,
    op: String,
    status: String,
    /// autonomous: the hub form of the agent's object (what hub edits are reverted to)
    copy: Option<Value>,
    /// managed: the hub object's deletionTimestamp was sent to the agent
    deleting: bool,
}

struct AgentState {
    name: String,
    mode: Mutex<Mode>,
    queue: Arc<SendQueue>,
    views: Mutex<HashMap<String, View>>,
    generation: AtomicU64,
    session: Mutex<Option<(u64, tokio::task::AbortHandle)>>,
    connected: AtomicBool,
    locks: o::KeyedLocks,
    /// managed: AppProjects the agent has, by name -> hash of the agent form sent
    projects: Mutex<HashMap<String, String>>,
}

struct Inner {
    cfg: PrincipalConfig,
    store: Arc<dyn Store>,
    tokens: TokenIssuer,
    identity: Regex,
    metrics: Arc<Metrics>,
    agents: Mutex<HashMap<String, Arc<AgentState>>>,
    /// hub Applications by namespace and name (kept by the hub watcher)
    cache: Mutex<HashMap<String, HashMap<String, Value>>>,
    /// hub AppProjects in the principal's namespace by name (kept by the project watcher)
    projects: Mutex<HashMap<String, Value>>,
}

/// A running principal.
pub struct Principal {
    inner: Arc<Inner>,
    addr: SocketAddr,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Principal {
    /// Binds, starts the hub watcher and serves.
    pub async fn start(
        cfg: PrincipalConfig,
        store: Arc<dyn Store>,
        metrics: Arc<Metrics>,
    ) -> anyhow::Result<Principal> {
        let identity = Regex::new(&cfg.identity_regex)
            .map_err(|e| anyhow::anyhow!("invalid identity regex: {e}"))?;
        let tokens = TokenIssuer::from_pem(&cfg.jwt_key_pem)?;
        let server_tls = Arc::new(tls::server_config(&cfg.tls, cfg.allow_tls12)?);
        let listener = tokio::net::TcpListener::bind(cfg.listen).await?;
        let addr = listener.local_addr()?;
        let inner = Arc::new(Inner {
            cfg: cfg.clone(),
            store,
            tokens,
            identity,
            metrics: metrics.clone(),
            agents: Mutex::new(HashMap::new()),
            cache: Mutex::new(HashMap::new()),
            projects: Mutex::new(HashMap::new()),
        });
        let mut tasks = Vec::new();
        // hub watchers (Applications, AppProjects)
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let w = inner.clone();
        tasks.push(tokio::spawn(async move { w.watch_hub(ready_tx).await }));
        let (pready_tx, pready_rx) = tokio::sync::oneshot::channel();
        let w = inner.clone();
        tasks.push(tokio::spawn(
            async move { w.watch_projects(pready_tx).await },
        ));
        let _ = tokio::time::timeout(Duration::from_secs(30), ready_rx).await;
        let _ = tokio::time::timeout(Duration::from_secs(30), pready_rx).await;

        let m = metrics.clone();
        let incoming = tls::serve_tls(
            listener,
            server_tls,
            Arc::new(move |_| {
                m.tls_handshake_failures.inc();
            }),
        )
        .await;
        let (incoming, accept_task) = incoming;
        let incoming = ReceiverStream::new(incoming);
        let svc = Svc {
            inner: inner.clone(),
        };
        let mut es = EventStreamServer::new(svc.clone())
            .max_decoding_message_size(cfg.max_event_size.saturating_mul(2).max(4096))
            .max_encoding_message_size(cfg.max_event_size.saturating_mul(2).max(4096));
        if cfg.compression {
            es = es
                .send_compressed(tonic::codec::CompressionEncoding::Gzip)
                .accept_compressed(tonic::codec::CompressionEncoding::Gzip);
        } else {
            es = es.accept_compressed(tonic::codec::CompressionEncoding::Gzip);
        }
        let (stx, srx) = tokio::sync::oneshot::channel::<()>();
        let router = tonic::transport::Server::builder()
            .http2_keepalive_interval(Some(Duration::from_secs(30)))
            .http2_keepalive_timeout(Some(Duration::from_secs(10)))
            .add_service(VersionServer::new(svc.clone()))
            .add_service(AuthenticationServer::new(svc.clone()))
            .add_service(es);
        tasks.push(tokio::spawn(async move {
            if let Err(e) = router
                .serve_with_incoming_shutdown(incoming, async {
                    let _ = srx.await;
                })
                .await
            {
                tracing::error!(error = %e, "principal gRPC server failed");
            }
        }));
        tasks.push(accept_task);
        metrics.ready.set(true);
        tracing::info!(%addr, "principal listening");
        Ok(Principal {
            inner,
            addr,
            shutdown: Some(stx),
            tasks,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn metrics(&self) -> Arc<Metrics> {
        self.inner.metrics.clone()
    }

    /// Agents with a live stream.
    pub fn connected_agents(&self) -> Vec<String> {
        let g = self.inner.agents.lock().expect("poisoned");
        let mut v: Vec<String> = g
            .values()
            .filter(|a| a.connected.load(Ordering::Relaxed))
            .map(|a| a.name.clone())
            .collect();
        v.sort();
        v
    }

    /// Whether an agent's send queue is empty (everything ACKed).
    pub fn agent_idle(&self, agent: &str) -> bool {
        let g = self.inner.agents.lock().expect("poisoned");
        g.get(agent).is_none_or(|a| a.queue.is_idle())
    }

    /// Stops serving and drops every stream.
    pub async fn shutdown(mut self) {
        self.inner.metrics.ready.set(false);
        if let Some(s) = self.shutdown.take() {
            let _ = s.send(());
        }
        for a in self.inner.agents.lock().expect("poisoned").values() {
            if let Some((_, h)) = a.session.lock().expect("poisoned").take() {
                h.abort();
            }
        }
        for t in self.tasks.drain(..) {
            t.abort();
            let _ = t.await;
        }
    }
}

impl Drop for Principal {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
        if let Ok(g) = self.inner.agents.lock() {
            for a in g.values() {
                if let Some((_, h)) = a.session.lock().expect("poisoned").take() {
                    h.abort();
                }
            }
        }
    }
}

impl Inner {
    fn agent(&self, name: &str) -> Option<Arc<AgentState>> {
        self.agents.lock().expect("poisoned").get(name).cloned()
    }

    fn register(self: &Arc<Self>, name: &str, mode: Mode) -> Arc<AgentState> {
        let mut g = self.agents.lock().expect("poisoned");
        if let Some(a) = g.get(name) {
            let mut m = a.mode.lock().expect("poisoned");
            if *m != mode {
                tracing::info!(
                    agent = name,
                    from = m.as_str(),
                    to = mode.as_str(),
                    "agent changed mode; resetting its state"
                );
                *m = mode;
                a.views.lock().expect("poisoned").clear();
                a.projects.lock().expect("poisoned").clear();
            }
            return a.clone();
        }
        let queue = Arc::new(SendQueue::new(self.cfg.queue_capacity, self.cfg.backoff));
        let me = Arc::downgrade(self);
        let agent = name.to_string();
        queue.set_regenerate(Arc::new(move |key: &str| {
            let Some(me) = me.upgrade() else {
                return vec![];
            };
            me.regenerate(&agent, key)
        }));
        let a = Arc::new(AgentState {
            name: name.to_string(),
            mode: Mutex::new(mode),
            queue,
            views: Mutex::new(HashMap::new()),
            generation: AtomicU64::new(0),
            session: Mutex::new(None),
            connected: AtomicBool::new(false),
            locks: o::KeyedLocks::default(),
            projects: Mutex::new(HashMap::new()),
        });
        g.insert(name.to_string(), a.clone());
        a
    }

    fn cached(&self, ns: &str, name: &str) -> Option<Value> {
        self.cache
            .lock()
            .expect("poisoned")
            .get(ns)
            .and_then(|m| m.get(name))
            .cloned()
    }

    /// Current events for a deferred key (backpressure path).
    fn regenerate(&self, agent: &str, name: &str) -> Vec<Event> {
        let Some(a) = self.agent(agent) else {
            return vec![];
        };
        let mode = *a.mode.lock().expect("poisoned");
        if let (Target::AppProject, pname) = o::parse_qkey(name) {
            if mode != Mode::Managed {
                return vec![];
            }
            let cur = self.projects.lock().expect("poisoned").get(pname).cloned();
            return match cur.and_then(|p| o::project_for_agent(&p, agent)) {
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
        match (mode, self.cached(agent, name)) {
            (Mode::Managed, Some(h)) => {
                let mut v = vec![Event::for_object(
                    SOURCE,
                    EventType::SpecUpdate,
                    Target::Application,
                    &o::without_operation(&h),
                )];
                if !o::op_hash(&h).is_empty() {
                    v.push(Event::for_object(
                        SOURCE,
                        EventType::SetOperation,
                        Target::Application,
                        &h,
                    ));
                }
                v
            }
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

    fn push(&self, a: &AgentState, ty: EventType, obj: &Value) {
        self.push_target(a, ty, Target::Application, obj)
    }

    fn push_target(&self, a: &AgentState, ty: EventType, target: Target, obj: &Value) {
        let ev = Event::for_object(SOURCE, ty, target, obj);
        let key = o::qkey(target, o::name(obj));
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

    async fn watch_hub(self: Arc<Self>, ready: tokio::sync::oneshot::Sender<()>) {
        let mut ready = Some(ready);
        loop {
            let mut s = self.store.watch(Kind::Application, None);
            while let Some(ev) = s.next().await {
                match ev {
                    Ok(StoreEvent::Restarted(list)) => {
                        let mut by_ns: HashMap<String, HashMap<String, Value>> = HashMap::new();
                        for h in list {
                            by_ns
                                .entry(o::namespace(&h).to_string())
                                .or_default()
                                .insert(o::name(&h).to_string(), h);
                        }
                        let old = std::mem::replace(
                            &mut *self.cache.lock().expect("poisoned"),
                            by_ns.clone(),
                        );
                        for (ns, objs) in &by_ns {
                            for h in objs.values() {
                                self.on_hub_apply(ns, h);
                            }
                        }
                        for (ns, objs) in old {
                            for (name, h) in objs {
                                if by_ns.get(&ns).is_none_or(|m| !m.contains_key(&name)) {
                                    self.on_hub_delete(&ns, &h);
                                }
                            }
                        }
                        if let Some(r) = ready.take() {
                            let _ = r.send(());
                        }
                    }
                    Ok(StoreEvent::Applied(h)) => {
                        let ns = o::namespace(&h).to_string();
                        self.cache
                            .lock()
                            .expect("poisoned")
                            .entry(ns.clone())
                            .or_default()
                            .insert(o::name(&h).to_string(), h.clone());
                        self.on_hub_apply(&ns, &h);
                    }
                    Ok(StoreEvent::Deleted(h)) => {
                        let ns = o::namespace(&h).to_string();
                        if let Some(m) = self.cache.lock().expect("poisoned").get_mut(&ns) {
                            m.remove(o::name(&h));
                        }
                        self.on_hub_delete(&ns, &h);
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "hub watch error");
                    }
                }
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    async fn watch_projects(self: Arc<Self>, ready: tokio::sync::oneshot::Sender<()>) {
        let mut ready = Some(ready);
        let ns = self.cfg.namespace.clone();
        loop {
            let mut s = self.store.watch(Kind::AppProject, Some(&ns));
            while let Some(ev) = s.next().await {
                match ev {
                    Ok(StoreEvent::Restarted(list)) => {
                        *self.projects.lock().expect("poisoned") = list
                            .into_iter()
                            .map(|p| (o::name(&p).to_string(), p))
                            .collect();
                        self.sync_projects_all();
                    }
                    Ok(StoreEvent::Applied(p)) => {
                        self.projects
                            .lock()
                            .expect("poisoned")
                            .insert(o::name(&p).to_string(), p);
                        self.sync_projects_all();
                    }
                    Ok(StoreEvent::Deleted(p)) => {
                        self.projects.lock().expect("poisoned").remove(o::name(&p));
                        self.sync_projects_all();
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "hub AppProject watch error");
                    }
                }
                // ready after the first list, or the first error (no AppProject CRD on the hub)
                if let Some(r) = ready.take() {
                    let _ = r.send(());
                }
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    fn sync_projects_all(&self) {
        let agents: Vec<Arc<AgentState>> = self
            .agents
            .lock()
            .expect("poisoned")
            .values()
            .cloned()
            .collect();
        for a in agents {
            self.sync_projects(&a);
        }
    }

    /// Managed agents: sends the AppProjects matched by `.spec.destinations` (create / update) and
    /// deletes the ones no longer matched or gone.
    fn sync_projects(&self, a: &AgentState) {
        if *a.mode.lock().expect("poisoned") != Mode::Managed {
            return;
        }
        let want: Vec<Value> = self
            .projects
            .lock()
            .expect("poisoned")
            .values()
            .filter(|p| !o::ignored(p))
            .filter_map(|p| o::project_for_agent(p, &a.name))
            .collect();
        let mut views = a.projects.lock().expect("poisoned");
        let mut keep = std::collections::HashSet::new();
        for f in &want {
            let name = o::name(f).to_string();
            let h = o::project_hash(f);
            keep.insert(name.clone());
            match views.get(&name) {
                None => self.push_target(a, EventType::Create, Target::AppProject, f),
                Some(old) if *old != h => {
                    self.push_target(a, EventType::SpecUpdate, Target::AppProject, f)
                }
                _ => continue,
            }
            views.insert(name, h);
        }
        let gone: Vec<String> = views
            .keys()
            .filter(|n| !keep.contains(*n))
            .cloned()
            .collect();
        for n in gone {
            views.remove(&n);
            self.push_target(
                a,
                EventType::Delete,
                Target::AppProject,
                &o::project_stub(&n, &self.cfg.namespace, ""),
            );
        }
    }

    fn on_hub_apply(self: &Arc<Self>, ns: &str, h: &Value) {
        let Some(a) = self.agent(ns) else { return };
        if o::ignored(h) {
            return;
        }
        let mode = *a.mode.lock().expect("poisoned");
        let name = o::name(h).to_string();
        match mode {
            Mode::Managed => {
                let (spec, op, st) = (spec_checksum(h), o::op_hash(h), o::status_hash(h));
                let mut views = a.views.lock().expect("poisoned");
                if o::deleting(h) {
                    // deletion flows as a spec-update carrying the deletionTimestamp; the agent
                    // deletes in the foreground and reports `delete`
                    let v = views.entry(name).or_default();
                    if !v.deleting {
                        v.deleting = true;
                        self.push(&a, EventType::SpecUpdate, &o::without_operation(h));
                    }
                    return;
                }
                match views.get_mut(&name) {
                    None => {
                        self.push(&a, EventType::Create, h);
                        views.insert(
                            name,
                            View {
                                spec,
                                op,
                                status: st,
                                copy: None,
                                deleting: false,
                            },
                        );
                    }
                    Some(v) => {
                        if v.spec != spec {
                            self.push(&a, EventType::SpecUpdate, &o::without_operation(h));
                            v.spec = spec;
                        }
                        if !op.is_empty() && v.op != op {
                            self.push(&a, EventType::SetOperation, h);
                        }
                        v.op = op;
                        if v.status != st {
                            if o::terminating(h) {
                                self.push(&a, EventType::TerminateOperation, h);
                            }
                            v.status = st;
                        }
                    }
                }
            }
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

    fn on_hub_delete(self: &Arc<Self>, ns: &str, h: &Value) {
        let Some(a) = self.agent(ns) else { return };
        let mode = *a.mode.lock().expect("poisoned");
        let name = o::name(h).to_string();
        match mode {
            Mode::Managed => {
                if a.views.lock().expect("poisoned").remove(&name).is_some() {
                    self.push(&a, EventType::Delete, h);
                }
            }
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
    fn spawn_revert(self: &Arc<Self>, a: &Arc<AgentState>, name: String, allow_create: bool) {
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

    /// Writes `want` (hub form) over the hub object; retries conflicts a few times.
    async fn write_hub(&self, want: &Value, with_status: bool) -> Result<(), StoreError> {
        self.write_obj(Kind::Application, want, with_status).await
    }

    /// Writes `want` over the hub object of `kind`; retries conflicts a few times.
    async fn write_obj(
        &self,
        kind: Kind,
        want: &Value,
        with_status: bool,
    ) -> Result<(), StoreError> {
        let (ns, name) = (o::namespace(want).to_string(), o::name(want).to_string());
        for _ in 0..5 {
            let r = match self.store.get(kind, &ns, &name).await? {
                None => self.store.create(kind, want.clone()).await.map(|_| ()),
                Some(cur) => {
                    let n = o::overlay(&cur, want, with_status, with_status);
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

    /// Hub form of an autonomous agent's application: namespace = agent, project prefixed.
    fn to_hub_form(&self, agent: &str, obj: &Value) -> Value {
        let mut h = serde_json::json!({
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Application",
            "metadata": o::portable_meta(obj, agent),
            "spec": obj["spec"].clone(),
        });
        if let Some(p) = obj["spec"]["project"].as_str() {
            h["spec"]["project"] = Value::String(format!("{agent}-{p}"));
        }
        for k in ["status", "operation"] {
            if let Some(v) = obj.get(k).filter(|v| !v.is_null()) {
                h[k] = v.clone();
            }
        }
        o::set_annotation(&mut h, SOURCE_UID, o::uid(obj));
        h
    }

    /// The agent's view of a hub object of an autonomous agent (project prefix removed).
    fn to_agent_form(&self, agent: &str, h: &Value) -> Value {
        let mut a = h.clone();
        if let Some(p) = h["spec"]["project"].as_str()
            && let Some(orig) = p.strip_prefix(&format!("{agent}-"))
        {
            a["spec"]["project"] = Value::String(orig.to_string());
        }
        a
    }

    async fn handle_event(
        self: &Arc<Self>,
        a: &Arc<AgentState>,
        ev: Event,
        out: &Outbox,
    ) -> Result<(), HandleError> {
        let _g = if ev.ty.is_resource_change() {
            Some(a.locks.lock(&o::qkey(ev.target, ev.name())).await)
        } else {
            None
        };
        let mode = *a.mode.lock().expect("poisoned");
        let agent = a.name.as_str();
        if ev.target == Target::AppProject || ev.data["kind"] == "AppProject" {
            return self.handle_project_event(a, mode, ev).await;
        }
        if ev.target != Target::Application && ev.ty.is_resource_change() {
            return Err(HandleError::Permanent(format!(
                "unsupported target {:?} for {}",
                ev.target.as_str(),
                ev.ty.short()
            )));
        }
        match (mode, ev.ty) {
            (Mode::Managed, EventType::StatusUpdate) => {
                let name = ev.name().to_string();
                let Some(h) = self.store.get(Kind::Application, agent, &name).await? else {
                    return Ok(()); // deleted on the hub meanwhile
                };
                let mut n = h.clone();
                match ev.data.get("status") {
                    Some(s) if !s.is_null() => n["status"] = s.clone(),
                    _ => {
                        n.as_object_mut().map(|m| m.remove("status"));
                    }
                }
                // the agent finished the operation the hub asked for: clear it on the hub
                let agent_op = ev.data.get("operation").filter(|v| !v.is_null());
                if agent_op.is_none()
                    && let Some(hop) = h.get("operation").filter(|v| !v.is_null())
                    && crate::checksum::hash_value(hop)
                        == crate::checksum::hash_value(
                            &ev.data["status"]["operationState"]["operation"],
                        )
                {
                    n.as_object_mut().map(|m| m.remove("operation"));
                }
                if n == h {
                    return Ok(());
                }
                if let Some(v) = a.views.lock().expect("poisoned").get_mut(&name) {
                    v.status = o::status_hash(&n);
                    v.op = o::op_hash(&n);
                }
                self.store.replace(Kind::Application, n).await?;
                Ok(())
            }
            (Mode::Managed, EventType::RequestUpdate) => {
                let name = ev.data["name"].as_str().unwrap_or_default().to_string();
                let checksum = ev.data["checksum"].as_str().unwrap_or_default();
                match self.store.get(Kind::Application, agent, &name).await? {
                    None => {
                        a.views.lock().expect("poisoned").remove(&name);
                        let uid = ev.data["uid"].as_str().unwrap_or_default();
                        self.push(a, EventType::Delete, &o::stub(&name, agent, uid));
                    }
                    Some(h) if o::deleting(&h) => {
                        a.views.lock().expect("poisoned").insert(
                            name,
                            View {
                                deleting: true,
                                ..Default::default()
                            },
                        );
                        self.push(a, EventType::SpecUpdate, &o::without_operation(&h));
                    }
                    Some(h) => {
                        let spec = spec_checksum(&h);
                        if spec != checksum {
                            self.push(a, EventType::SpecUpdate, &o::without_operation(&h));
                        }
                        if !o::op_hash(&h).is_empty() {
                            self.push(a, EventType::SetOperation, &h);
                        }
                        a.views.lock().expect("poisoned").insert(
                            name,
                            View {
                                spec,
                                op: o::op_hash(&h),
                                status: o::status_hash(&h),
                                copy: None,
                                deleting: false,
                            },
                        );
                    }
                }
                Ok(())
            }
            (Mode::Managed, EventType::RequestSyncedResourceList) => {
                let list = self.store.list(Kind::Application, Some(agent)).await?;
                let list: Vec<Value> = list.into_iter().filter(|h| !o::ignored(h)).collect();
                let sum = set_checksum(
                    list.iter()
                        .map(|h| set_item("Application", o::name(h), o::uid(h))),
                );
                if sum != ev.data["checksum"].as_str().unwrap_or_default() {
                    for h in &list {
                        out.send(o::response_synced(SOURCE, o::name(h), agent, o::uid(h)))
                            .await;
                    }
                }
                Ok(())
            }
            (Mode::Managed, EventType::Delete) => {
                // the agent deleted its copy of an Application marked for deletion on the hub:
                // the Argo CD finalizers are satisfied, remove them so the hub deletion completes
                // (the view stays marked `deleting`: the hub's final removal sends one `delete`)
                self.finish_hub_deletion(agent, ev.name()).await?;
                Ok(())
            }
            (Mode::Autonomous, EventType::Create | EventType::SpecUpdate) => {
                let want = self.to_hub_form(agent, &ev.data);
                let name = o::name(&want).to_string();
                if name.is_empty() {
                    return Err(HandleError::Permanent(
                        "payload has no metadata.name".into(),
                    ));
                }
                {
                    let mut views = a.views.lock().expect("poisoned");
                    let v = views.entry(name).or_default();
                    v.spec = spec_checksum(&ev.data);
                    v.op = o::op_hash(&want);
                    v.status = o::status_hash(&want);
                    v.copy = Some(want.clone());
                }
                self.write_hub(&want, true).await?;
                Ok(())
            }
            (Mode::Autonomous, EventType::Delete) => {
                let name = ev.name().to_string();
                a.views.lock().expect("poisoned").remove(&name);
                self.store.delete(Kind::Application, agent, &name).await?;
                // hub copies carry no finalizers; one added on the hub must not hold the copy
                self.finish_hub_deletion(agent, &name).await?;
                Ok(())
            }
            (Mode::Autonomous, EventType::ResponseSyncedResource) => {
                let name = ev.data["name"].as_str().unwrap_or_default();
                if self
                    .store
                    .get(Kind::Application, agent, name)
                    .await?
                    .is_none()
                {
                    let ns = ev.data["namespace"].as_str().unwrap_or_default();
                    out.send(o::request_update(
                        SOURCE,
                        name,
                        ns,
                        ev.data["uid"].as_str().unwrap_or_default(),
                        "",
                    ))
                    .await;
                }
                Ok(())
            }
            (Mode::Autonomous, EventType::RequestResourceResync) => {
                self.replica_resync(a, out).await;
                Ok(())
            }
            (Mode::Managed, EventType::RequestResourceResync) => Ok(()),
            (_, t) => Err(HandleError::Permanent(format!(
                "event type {} is not valid from a {} agent",
                t.short(),
                mode.as_str()
            ))),
        }
    }

    /// Removes the Argo CD finalizers of a hub Application that is marked for deletion. Returns
    /// whether the object was marked for deletion (or is gone).
    async fn finish_hub_deletion(&self, ns: &str, name: &str) -> Result<bool, StoreError> {
        for _ in 0..5 {
            let Some(h) = self.store.get(Kind::Application, ns, name).await? else {
                return Ok(true);
            };
            if !o::deleting(&h) {
                return Ok(false);
            }
            let fins = o::finalizers(&h);
            let keep: Vec<&String> = fins.iter().filter(|f| !o::is_argocd_finalizer(f)).collect();
            if keep.len() == fins.len() {
                return Ok(true);
            }
            let mut n = h.clone();
            n["metadata"]["finalizers"] = serde_json::json!(keep);
            match self.store.replace(Kind::Application, n).await {
                Ok(_) | Err(StoreError::NotFound) => {
                    tracing::info!(app = %format!("{ns}/{name}"), "agent deleted its copy; Argo CD finalizers removed from the hub application");
                    return Ok(true);
                }
                Err(StoreError::Conflict(_)) => continue,
                Err(e) => return Err(e),
            }
        }
        Err(StoreError::Conflict(format!(
            "{ns}/{name}: too many conflicts"
        )))
    }

    async fn handle_project_event(
        &self,
        a: &Arc<AgentState>,
        mode: Mode,
        ev: Event,
    ) -> Result<(), HandleError> {
        let agent = a.name.as_str();
        match (mode, ev.ty) {
            (Mode::Managed, EventType::RequestUpdate) => {
                let name = ev.data["name"].as_str().unwrap_or_default().to_string();
                let checksum = ev.data["checksum"].as_str().unwrap_or_default();
                let cur = self
                    .projects
                    .lock()
                    .expect("poisoned")
                    .get(&name)
                    .filter(|p| !o::ignored(p))
                    .and_then(|p| o::project_for_agent(p, agent));
                match cur {
                    None => {
                        a.projects.lock().expect("poisoned").remove(&name);
                        let uid = ev.data["uid"].as_str().unwrap_or_default();
                        self.push_target(
                            a,
                            EventType::Delete,
                            Target::AppProject,
                            &o::project_stub(&name, &self.cfg.namespace, uid),
                        );
                    }
                    Some(f) => {
                        if spec_checksum(&f) != checksum {
                            self.push_target(a, EventType::SpecUpdate, Target::AppProject, &f);
                        }
                        a.projects
                            .lock()
                            .expect("poisoned")
                            .insert(name, o::project_hash(&f));
                    }
                }
                Ok(())
            }
            (Mode::Managed, EventType::Delete) => Ok(()), // the agent confirms a deletion
            (Mode::Autonomous, EventType::Create | EventType::SpecUpdate) => {
                if o::name(&ev.data).is_empty() {
                    return Err(HandleError::Permanent(
                        "payload has no metadata.name".into(),
                    ));
                }
                let want = o::project_from_agent(&ev.data, agent, &self.cfg.namespace);
                self.write_obj(Kind::AppProject, &want, false).await?;
                Ok(())
            }
            (Mode::Autonomous, EventType::Delete) => {
                let name = format!("{agent}-{}", ev.name());
                self.store
                    .delete(Kind::AppProject, &self.cfg.namespace, &name)
                    .await?;
                Ok(())
            }
            (_, t) => Err(HandleError::Permanent(format!(
                "event type {} is not valid for an AppProject from a {} agent",
                t.short(),
                mode.as_str()
            ))),
        }
    }

    /// Autonomous agents: the principal is the replica; ask the agent for what differs.
    async fn replica_resync(&self, a: &Arc<AgentState>, out: &Outbox) {
        let agent = a.name.clone();
        let list = match self.store.list(Kind::Application, Some(&agent)).await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(agent, error = %e, "resync: listing hub applications failed");
                return;
            }
        };
        let mut items = Vec::new();
        for h in &list {
            let suid = o::source_uid(h).to_string();
            if suid.is_empty() || o::ignored(h) {
                continue;
            }
            let agent_form = self.to_agent_form(&agent, h);
            {
                let mut views = a.views.lock().expect("poisoned");
                let v = views.entry(o::name(h).to_string()).or_default();
                v.spec = spec_checksum(&agent_form);
                v.op = o::op_hash(h);
                v.status = o::status_hash(h);
                v.copy = Some(h.clone());
            }
            items.push(set_item("Application", o::name(h), &suid));
            out.send(o::request_update(
                SOURCE,
                o::name(h),
                &agent,
                &suid,
                &spec_checksum(&agent_form),
            ))
            .await;
        }
        // AppProjects copied from this agent: the agent answers `delete` (gone) or `spec-update`
        // (the hub form is lossy, so no checksum is sent: the agent always re-sends the spec)
        if let Ok(projects) = self
            .store
            .list(Kind::AppProject, Some(&self.cfg.namespace))
            .await
        {
            let prefix = format!("{agent}-");
            for p in projects {
                if p["metadata"]["labels"][o::AGENT_NAME_LABEL].as_str() != Some(agent.as_str()) {
                    continue;
                }
                let Some(orig) = o::name(&p).strip_prefix(&prefix) else {
                    continue;
                };
                out.send(o::request_update_project(
                    SOURCE,
                    orig,
                    &agent,
                    o::source_uid(&p),
                    "",
                ))
                .await;
            }
        }
        out.send(o::request_synced_list(SOURCE, &set_checksum(items)))
            .await;
    }
}

struct SessionHandler {
    inner: Arc<Inner>,
    agent: Arc<AgentState>,
}

#[async_trait]
impl Handler for SessionHandler {
    async fn handle(&self, ev: Event, out: &Outbox) -> Result<(), HandleError> {
        self.inner.handle_event(&self.agent, ev, out).await
    }
    async fn on_connect(&self, out: &Outbox) {
        let mode = *self.agent.mode.lock().expect("poisoned");
        match mode {
            Mode::Autonomous => self.inner.replica_resync(&self.agent, out).await,
            // push the AppProjects the agent may lack (it resyncs the rest itself)
            Mode::Managed => self.inner.sync_projects(&self.agent),
        }
    }
}

#[derive(Clone)]
struct Svc {
    inner: Arc<Inner>,
}

impl Svc {
    fn cert_identity<T>(&self, req: &Request<T>) -> Result<String, Status> {
        let certs = req.peer_certs().ok_or_else(|| {
            self.inner.metrics.auth_failure("no-client-cert");
            Status::unauthenticated("a client certificate is required")
        })?;
        let leaf = certs
            .first()
            .ok_or_else(|| Status::unauthenticated("a client certificate is required"))?;
        tls::identity_from_cert(leaf.as_ref(), &self.inner.identity).map_err(|e| {
            self.inner.metrics.auth_failure("identity");
            Status::unauthenticated(e.to_string())
        })
    }
}

#[tonic::async_trait]
impl Version for Svc {
    async fn version(
        &self,
        _r: Request<versionapi::VersionRequest>,
    ) -> Result<Response<versionapi::VersionResponse>, Status> {
        Ok(Response::new(versionapi::VersionResponse {
            version: VERSION.into(),
        }))
    }
}

#[tonic::async_trait]
impl Authentication for Svc {
    async fn authenticate(
        &self,
        req: Request<authapi::AuthRequest>,
    ) -> Result<Response<authapi::AuthResponse>, Status> {
        let agent = self.cert_identity(&req)?;
        let r = req.into_inner();
        if r.method != "mtls" {
            self.inner.metrics.auth_failure("method");
            return Err(Status::unauthenticated(format!(
                "unsupported authentication method {:?}; this principal supports \"mtls\"",
                r.method
            )));
        }
        let Some(mode) = Mode::parse(&r.mode) else {
            self.inner.metrics.auth_failure("mode");
            return Err(Status::invalid_argument(format!(
                "unknown agent mode {:?}; want \"managed\" or \"autonomous\"",
                r.mode
            )));
        };
        if !r.version.is_empty() && !version_compatible(&r.version) {
            self.inner.metrics.auth_failure("version");
            return Err(Status::failed_precondition(format!(
                "agent version {} is not compatible with principal version {VERSION} (major.minor must match)",
                r.version
            )));
        }
        if let Some(claimed) = r.credentials.get("clientID").filter(|c| !c.is_empty())
            && *claimed != agent
        {
            self.inner.metrics.auth_failure("identity-mismatch");
            return Err(Status::permission_denied(format!(
                "client ID {claimed:?} does not match the certificate identity {agent:?}"
            )));
        }
        let (access, refresh) = self
            .inner
            .tokens
            .issue_pair(&agent, mode)
            .map_err(|e| Status::internal(e.to_string()))?;
        self.inner.register(&agent, mode);
        if let Err(e) = self.inner.store.ensure_namespace(&agent).await {
            tracing::warn!(agent, error = %e, "could not ensure the agent namespace");
        }
        tracing::info!(agent, mode = mode.as_str(), "agent authenticated");
        Ok(Response::new(authapi::AuthResponse {
            access_token: access,
            refresh_token: refresh,
            version: VERSION.into(),
            principal_namespace: self.inner.cfg.namespace.clone(),
        }))
    }

    async fn refresh_token(
        &self,
        req: Request<authapi::RefreshTokenRequest>,
    ) -> Result<Response<authapi::AuthResponse>, Status> {
        let agent = self.cert_identity(&req)?;
        let (who, mode) = self
            .inner
            .tokens
            .verify_refresh(&req.get_ref().refresh_token)
            .map_err(|e| {
                self.inner.metrics.auth_failure("token");
                Status::unauthenticated(e.to_string())
            })?;
        if who != agent {
            self.inner.metrics.auth_failure("identity-mismatch");
            return Err(Status::permission_denied(format!(
                "token of {who:?} presented by {agent:?}"
            )));
        }
        let (access, refresh) = self
            .inner
            .tokens
            .issue_pair(&agent, mode)
            .map_err(|e| Status::internal(e.to_string()))?;
        self.inner.register(&agent, mode);
        Ok(Response::new(authapi::AuthResponse {
            access_token: access,
            refresh_token: refresh,
            version: VERSION.into(),
            principal_namespace: self.inner.cfg.namespace.clone(),
        }))
    }
}

type EventStreamOut = Pin<Box<dyn Stream<Item = Result<eventstreamapi::Event, Status>> + Send>>;

#[tonic::async_trait]
impl EventStream for Svc {
    type SubscribeStream = EventStreamOut;

    async fn subscribe(
        &self,
        req: Request<tonic::Streaming<eventstreamapi::Event>>,
    ) -> Result<Response<Self::SubscribeStream>, Status> {
        let cert_agent = self.cert_identity(&req)?;
        let token = req
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| {
                self.inner.metrics.auth_failure("no-token");
                Status::unauthenticated("missing authorization metadata")
            })?;
        let token = token.strip_prefix("Bearer ").unwrap_or(token);
        let (agent, mode) = self.inner.tokens.verify_access(token).map_err(|e| {
            self.inner.metrics.auth_failure("token");
            Status::unauthenticated(e.to_string())
        })?;
        if agent != cert_agent {
            self.inner.metrics.auth_failure("identity-mismatch");
            return Err(Status::permission_denied(format!(
                "token belongs to agent {agent:?} but the client certificate identifies {cert_agent:?}"
            )));
        }
        let a = self.inner.register(&agent, mode);
        let inbound = req.into_inner();
        let (tx, rx) = mpsc::channel::<Box<eventstreamapi::Event>>(256);
        let ctx = SessionCtx {
            source: SOURCE.into(),
            queue: a.queue.clone(),
            metrics: self.inner.metrics.clone(),
            max_event_size: self.inner.cfg.max_event_size,
            concurrency: self.inner.cfg.concurrency,
        };
        let handler = Arc::new(SessionHandler {
            inner: self.inner.clone(),
            agent: a.clone(),
        });
        let gen_ = a.generation.fetch_add(1, Ordering::SeqCst) + 1;
        let metrics = self.inner.metrics.clone();
        let a2 = a.clone();
        let task = tokio::spawn(async move {
            let end = session::run(ctx, handler, inbound, tx).await;
            tracing::info!(agent = %a2.name, reason = %end, "agent stream ended");
            let mut s = a2.session.lock().expect("poisoned");
            if s.as_ref().is_some_and(|(g, _)| *g == gen_) {
                *s = None;
                a2.connected.store(false, Ordering::SeqCst);
                metrics.connected_agents.dec();
            }
        });
        {
            let mut s = a.session.lock().expect("poisoned");
            if let Some((_, old)) = s.replace((gen_, task.abort_handle())) {
                // a newer stream of the same agent replaces the old one
                old.abort();
            } else {
                self.inner.metrics.connected_agents.inc();
            }
            a.connected.store(true, Ordering::SeqCst);
        }
        tracing::info!(agent, mode = mode.as_str(), "agent subscribed");
        let out = ReceiverStream::new(rx).map(|e| Ok(*e));
        Ok(Response::new(Box::pin(out)))
    }

    async fn push(
        &self,
        _r: Request<tonic::Streaming<eventstreamapi::Event>>,
    ) -> Result<Response<eventstreamapi::PushSummary>, Status> {
        Err(Status::unimplemented(
            "Push is not implemented; use Subscribe",
        ))
    }

    async fn ping(
        &self,
        _r: Request<eventstreamapi::PingRequest>,
    ) -> Result<Response<eventstreamapi::PongReply>, Status> {
        Ok(Response::new(eventstreamapi::PongReply {}))
    }
}
