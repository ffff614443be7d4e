//! The primary's side of replication: what is replicated, numbered and fanned out.
//!
//! The source watches the hub (the principal's own cluster) for the objects a second hub needs to
//! take over — Applications in agent namespaces (with their status), AppProjects,
//! ApplicationSets and repository Secrets in the principal's namespace, and the agents'
//! self-registered cluster secrets — keeps each one's current JSON, and turns every change into
//! the peer's replication events (a CloudEvent as the principal would send it to an agent,
//! wrapped in a `ReplicatedEvent` with a sequence number). Changes of one kind arrive in the
//! API server's order; every event gets the next sequence number.
//!
//! A snapshot is cut from the same cache under the same lock as the numbering, so a snapshot at
//! sequence `n` holds exactly the changes up to `n`: a replica that applies it and then every
//! event after `n` misses nothing. (The peer lists from its informers while numbering goes on.)

mod entry;
mod kind;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use serde_json::Value;
use tokio::sync::{Notify, mpsc};

use argocd_pull_agent_core::event::{Event, EventType};
use argocd_pull_agent_core::metrics::Metrics;
use argocd_pull_agent_core::objects as o;
use argocd_pull_agent_core::proto::replicationapi as api;
use argocd_pull_agent_core::store::{Kind, Store, StoreEvent};
use entry::{Entry, entry, resource};
pub use kind::{Key, RKind, secret_kind};

/// The source of the peer's events (`principal` in its `EventSource`).
const SOURCE: &str = crate::SOURCE;
/// Events a subscriber may have queued before it counts as too slow: further events are
/// dropped and the replica sees a sequence gap (it then fetches a snapshot), as the peer's
/// forwarder drops on a full queue. Also bounds what waits while a replica applies its
/// snapshot (the peer buffers that without a bound).
pub const SUBSCRIBER_BACKLOG: usize = 65_536;

/// One connected replica's feed.
struct Subscriber {
    tx: mpsc::UnboundedSender<Arc<api::ReplicatedEvent>>,
    backlog: Arc<AtomicU64>,
    acked: Arc<AtomicU64>,
}

/// A replica's handle on its feed.
pub struct Feed {
    pub id: u64,
    pub rx: mpsc::UnboundedReceiver<Arc<api::ReplicatedEvent>>,
    pub backlog: Arc<AtomicU64>,
    pub acked: Arc<AtomicU64>,
}

#[derive(Default)]
struct Cache {
    objects: BTreeMap<Key, Arc<Entry>>,
    seq: u64,
    last_event_unix: i64,
    subscribers: HashMap<u64, Subscriber>,
    next_id: u64,
}

/// The primary's replication source (see the module doc).
pub struct Source {
    cache: Mutex<Cache>,
    metrics: Arc<Metrics>,
    /// the hub watches have delivered their first lists
    synced: AtomicBool,
    changed: Notify,
    principal_ns: String,
}

fn now_unix() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or_default()
}

impl Source {
    pub fn new(metrics: Arc<Metrics>, principal_ns: &str) -> Arc<Self> {
        Arc::new(Source {
            cache: Mutex::new(Cache::default()),
            metrics,
            synced: AtomicBool::new(false),
            changed: Notify::new(),
            principal_ns: principal_ns.to_string(),
        })
    }

    /// The current sequence number (the last one given to an event).
    pub fn sequence(&self) -> u64 {
        self.cache.lock().expect("poisoned").seq
    }

    /// Watches the hub until the task is dropped.
    pub async fn run(self: Arc<Self>, store: Arc<dyn Store>) {
        let ns = self.principal_ns.clone();
        let watches: Vec<(Kind, Option<String>)> = vec![
            (Kind::Application, None),
            (Kind::AppProject, Some(ns.clone())),
            (Kind::ApplicationSet, Some(ns.clone())),
            (Kind::Secret, Some(ns.clone())),
        ];
        let synced: Arc<Mutex<usize>> = Arc::new(Mutex::new(watches.len()));
        let mut tasks = Vec::new();
        for (kind, wns) in watches {
            let me = self.clone();
            let store = store.clone();
            let synced = synced.clone();
            tasks.push(tokio::spawn(async move {
                let mut first = true;
                let mut warned = false;
                let mut s = store.watch(kind, wns.as_deref());
                while let Some(ev) = s.next().await {
                    match ev {
                        Ok(ev) => {
                            let restarted = matches!(ev, StoreEvent::Restarted(_));
                            me.apply(kind, ev);
                            if restarted && std::mem::take(&mut first) {
                                let mut n = synced.lock().expect("poisoned");
                                *n -= 1;
                                if *n == 0 {
                                    me.synced.store(true, Ordering::SeqCst);
                                    me.changed.notify_waiters();
                                }
                            }
                        }
                        Err(e) => {
                            if !std::mem::replace(&mut warned, true) {
                                tracing::warn!(kind = kind.as_str(), error = %e, "replication source: watching the hub failed; retrying (a missing CRD, e.g. ApplicationSet, leaves that kind out)");
                            }
                            if first && kind == Kind::ApplicationSet {
                                // no ApplicationSet CRD on this hub: nothing to wait for
                                first = false;
                                let mut n = synced.lock().expect("poisoned");
                                *n -= 1;
                                if *n == 0 {
                                    me.synced.store(true, Ordering::SeqCst);
                                    me.changed.notify_waiters();
                                }
                            }
                            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                        }
                    }
                }
            }));
        }
        struct AbortAll(Vec<tokio::task::JoinHandle<()>>);
        impl Drop for AbortAll {
            fn drop(&mut self) {
                for t in &self.0 {
                    t.abort();
                }
            }
        }
        let guard = AbortAll(tasks);
        for t in &guard.0 {
            let _ = t;
        }
        std::future::pending::<()>().await;
    }

    /// Resolves once every watch delivered its first list (a snapshot before that would look
    /// like a hub without objects).
    pub async fn wait_synced(&self) {
        loop {
            let n = self.changed.notified();
            if self.synced.load(Ordering::SeqCst) {
                return;
            }
            n.await;
        }
    }

    fn key_of(&self, kind: Kind, obj: &Value) -> Option<Key> {
        let rk = match kind {
            Kind::Application => {
                // the principal's own namespace holds the hub's own Applications, not agents'
                if o::namespace(obj) == self.principal_ns {
                    return None;
                }
                RKind::Application
            }
            Kind::AppProject => RKind::AppProject,
            Kind::ApplicationSet => RKind::ApplicationSet,
            Kind::Secret => secret_kind(obj)?,
            Kind::ConfigMap => return None,
        };
        Some(Key {
            kind: rk,
            namespace: o::namespace(obj).to_string(),
            name: o::name(obj).to_string(),
        })
    }

    /// Applies one watch event to the cache and emits the resulting replication events.
    pub fn apply(&self, kind: Kind, ev: StoreEvent) {
        let mut c = self.cache.lock().expect("poisoned");
        match ev {
            StoreEvent::Applied(obj) => self.applied(&mut c, kind, &obj),
            StoreEvent::Deleted(obj) => {
                if let Some(k) = self.key_of(kind, &obj) {
                    self.deleted(&mut c, k, &obj);
                }
            }
            StoreEvent::Restarted(list) => {
                let mut seen = std::collections::HashSet::new();
                for obj in &list {
                    if let Some(k) = self.key_of(kind, obj) {
                        seen.insert(k);
                    }
                    self.applied(&mut c, kind, obj);
                }
                let gone: Vec<(Key, Arc<Entry>)> = c
                    .objects
                    .iter()
                    .filter(|(k, _)| k.kind.store_kind() == kind && !seen.contains(*k))
                    .map(|(k, e)| (k.clone(), e.clone()))
                    .collect();
                for (k, e) in gone {
                    let obj: Value = serde_json::from_slice(&e.json).unwrap_or(Value::Null);
                    self.deleted(&mut c, k, &obj);
                }
            }
        }
    }

    fn applied(&self, c: &mut Cache, kind: Kind, obj: &Value) {
        let key = match self.key_of(kind, obj) {
            Some(k) => k,
            None => {
                // a Secret that stopped being a replicated kind counts as deleted
                if kind == Kind::Secret {
                    let gone: Vec<Key> = [RKind::Repository, RKind::ClusterSecret]
                        .into_iter()
                        .map(|rk| Key {
                            kind: rk,
                            namespace: o::namespace(obj).to_string(),
                            name: o::name(obj).to_string(),
                        })
                        .filter(|k| c.objects.contains_key(k))
                        .collect();
                    for k in gone {
                        self.deleted(c, k, obj);
                    }
                }
                return;
            }
        };
        let new = entry(key.kind, obj);
        let events = match c.objects.get(&key) {
            None => vec![(EventType::Create, "outbound", obj.clone())],
            Some(old) => {
                let mut v = Vec::new();
                if old.spec != new.spec || old.uid != new.uid {
                    let data = match key.kind {
                        // the peer's spec-update carries no operation (set-operation does)
                        RKind::Application => o::without_operation(obj),
                        _ => obj.clone(),
                    };
                    v.push((EventType::SpecUpdate, "outbound", data));
                }
                if old.status != new.status {
                    // the peer replicates an agent's status as the inbound status-update
                    v.push((EventType::StatusUpdate, "inbound", obj.clone()));
                }
                v
            }
        };
        let agent = new.agent.clone();
        c.objects.insert(key.clone(), Arc::new(new));
        for (ty, dir, data) in events {
            self.emit(c, &key, ty, dir, &agent, &data);
        }
    }

    fn deleted(&self, c: &mut Cache, key: Key, obj: &Value) {
        let Some(old) = c.objects.remove(&key) else {
            return;
        };
        let data = if obj.is_null() {
            serde_json::from_slice(&old.json).unwrap_or(Value::Null)
        } else {
            obj.clone()
        };
        self.emit(c, &key, EventType::Delete, "outbound", &old.agent, &data);
    }

    fn emit(&self, c: &mut Cache, key: &Key, ty: EventType, dir: &str, agent: &str, data: &Value) {
        let Some(target) = key.kind.target() else {
            return;
        };
        c.seq += 1;
        let now = now_unix();
        c.last_event_unix = now;
        let ev = Event::for_object(SOURCE, ty, target, data);
        let r = Arc::new(api::ReplicatedEvent {
            event: Some(ev.to_sdk().to_proto()),
            agent_name: agent.to_string(),
            direction: dir.to_string(),
            sequence_num: c.seq,
            processed_at_unix: now,
        });
        let f = &self.metrics.ha.forwarder;
        f.events_queued.inc();
        f.last_sequence_number.set(c.seq as i64);
        for s in c.subscribers.values() {
            if s.backlog.load(Ordering::Relaxed) >= SUBSCRIBER_BACKLOG as u64 {
                f.events_dropped.inc();
                tracing::warn!(
                    sequence = c.seq,
                    "replication queue of a replica is full, dropping event (the replica re-fetches a snapshot when it sees the gap)"
                );
                continue;
            }
            if s.tx.send(r.clone()).is_ok() {
                s.backlog.fetch_add(1, Ordering::Relaxed);
                f.queue_size.inc();
            }
        }
    }

    /// A new replica's feed: events from now on (buffered until the replica reads them).
    pub fn subscribe(&self) -> Feed {
        let mut c = self.cache.lock().expect("poisoned");
        c.next_id += 1;
        let id = c.next_id;
        let (tx, rx) = mpsc::unbounded_channel();
        let backlog = Arc::new(AtomicU64::new(0));
        let acked = Arc::new(AtomicU64::new(0));
        c.subscribers.insert(
            id,
            Subscriber {
                tx,
                backlog: backlog.clone(),
                acked: acked.clone(),
            },
        );
        self.metrics.ha.forwarder.replicas_connected.inc();
        Feed {
            id,
            rx,
            backlog,
            acked,
        }
    }

    pub fn unsubscribe(&self, id: u64) {
        let mut c = self.cache.lock().expect("poisoned");
        if let Some(s) = c.subscribers.remove(&id) {
            self.metrics.ha.forwarder.replicas_connected.dec();
            let left = s.backlog.load(Ordering::Relaxed) as i64;
            self.metrics.ha.forwarder.queue_size.dec_by(left);
        }
    }

    /// Ends every replica's feed (their streams end once drained).
    pub fn disconnect_all(&self) {
        let mut c = self.cache.lock().expect("poisoned");
        let n = c.subscribers.len() as i64;
        let left: i64 = c
            .subscribers
            .values()
            .map(|s| s.backlog.load(Ordering::Relaxed) as i64)
            .sum();
        c.subscribers.clear();
        self.metrics.ha.forwarder.replicas_connected.dec_by(n);
        self.metrics.ha.forwarder.queue_size.dec_by(left);
    }

    /// Whether every connected replica has acknowledged every event so far (a clean demote
    /// waits for this before it ends their streams).
    pub fn all_acked(&self) -> bool {
        let c = self.cache.lock().expect("poisoned");
        c.subscribers
            .values()
            .all(|s| s.acked.load(Ordering::SeqCst) >= c.seq)
    }

    /// (current sequence, events not yet acknowledged by the slowest replica, connected
    /// replicas, last event time).
    pub fn status(&self) -> (u64, u64, usize, i64) {
        let c = self.cache.lock().expect("poisoned");
        let pending = c
            .subscribers
            .values()
            .map(|s| c.seq.saturating_sub(s.acked.load(Ordering::SeqCst)))
            .max()
            .unwrap_or(0);
        (c.seq, pending, c.subscribers.len(), c.last_event_unix)
    }

    /// The snapshot at the current sequence number.
    pub fn snapshot(&self, connected: &dyn Fn() -> Vec<String>) -> api::ReplicationSnapshot {
        let (seq, objects): (u64, Vec<(Key, Arc<Entry>)>) = {
            let c = self.cache.lock().expect("poisoned");
            (
                c.seq,
                c.objects
                    .iter()
                    .map(|(k, e)| (k.clone(), e.clone()))
                    .collect(),
            )
        };
        let connected: std::collections::HashSet<String> = connected().into_iter().collect();
        let mut agents: BTreeMap<String, api::AgentState> = BTreeMap::new();
        let mut principal_resources = Vec::new();
        for (k, e) in &objects {
            match k.kind {
                RKind::Application => {
                    let a = agents
                        .entry(e.agent.clone())
                        .or_insert_with(|| api::AgentState {
                            name: e.agent.clone(),
                            mode: "managed".into(),
                            connected: connected.contains(&e.agent),
                            resources: Vec::new(),
                        });
                    if e.autonomous {
                        a.mode = "autonomous".into();
                    }
                    a.resources.push(resource(k, e));
                }
                _ => principal_resources.push(resource(k, e)),
            }
        }
        for name in connected {
            agents.entry(name.clone()).or_insert(api::AgentState {
                name,
                mode: "managed".into(),
                connected: true,
                resources: Vec::new(),
            });
        }
        tracing::info!(
            agent_count = agents.len(),
            sequence = seq,
            "generated snapshot for replica"
        );
        api::ReplicationSnapshot {
            agents: agents.into_values().collect(),
            last_sequence_num: seq,
            principal_resources,
        }
    }

    /// The peer's `ConfirmMissingResources`, answered from the current state (ours: valid at any
    /// sequence, so a replica under constant load still learns what was deleted).
    pub fn confirm_missing(
        &self,
        req: &api::ConfirmMissingResourcesRequest,
    ) -> Vec<api::ConfirmMissingResourceResult> {
        let c = self.cache.lock().expect("poisoned");
        req.resources
            .iter()
            .map(|r| {
                let key = RKind::parse(&r.kind).map(|kind| Key {
                    kind,
                    namespace: r.namespace.clone(),
                    name: r.name.clone(),
                });
                match key {
                    None => api::ConfirmMissingResourceResult {
                        resource: Some(r.clone()),
                        status: "unknown".into(),
                        reason: format!("unknown resource kind {:?}", r.kind),
                    },
                    Some(k) => match c.objects.get(&k) {
                        Some(e) => api::ConfirmMissingResourceResult {
                            resource: Some(resource(&k, e)),
                            status: "exists".into(),
                            reason: String::new(),
                        },
                        None => api::ConfirmMissingResourceResult {
                            resource: Some(r.clone()),
                            status: "deleted".into(),
                            reason: String::new(),
                        },
                    },
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;
