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

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use serde_json::Value;
use tokio::sync::{Notify, mpsc};

use crate::event::{Event, EventType, Target};
use crate::metrics::Metrics;
use crate::objects as o;
use crate::proto::replicationapi as api;
use crate::store::{Kind, Store, StoreEvent};

/// The source of the peer's events (`principal` in its `EventSource`).
const SOURCE: &str = crate::principal::SOURCE;
/// Events a subscriber may have queued before it counts as too slow: further events are
/// dropped and the replica sees a sequence gap (it then fetches a snapshot), as the peer's
/// forwarder drops on a full queue. Also bounds what waits while a replica applies its
/// snapshot (the peer buffers that without a bound).
pub const SUBSCRIBER_BACKLOG: usize = 65_536;

/// What a replicated object is, in the peer's `Resource.kind` words.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RKind {
    Application,
    AppProject,
    ApplicationSet,
    Repository,
    ClusterSecret,
}

impl RKind {
    pub fn as_str(self) -> &'static str {
        match self {
            RKind::Application => "Application",
            RKind::AppProject => "AppProject",
            RKind::ApplicationSet => "ApplicationSet",
            RKind::Repository => "Repository",
            RKind::ClusterSecret => "ClusterSecret",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [
            RKind::Application,
            RKind::AppProject,
            RKind::ApplicationSet,
            RKind::Repository,
            RKind::ClusterSecret,
        ]
        .into_iter()
        .find(|k| k.as_str() == s)
    }

    pub fn store_kind(self) -> Kind {
        match self {
            RKind::Application => Kind::Application,
            RKind::AppProject => Kind::AppProject,
            RKind::ApplicationSet => Kind::ApplicationSet,
            RKind::Repository | RKind::ClusterSecret => Kind::Secret,
        }
    }

    /// The event target (`None`: replicated by snapshot only, as the peer's cluster secrets).
    pub fn target(self) -> Option<Target> {
        match self {
            RKind::Application => Some(Target::Application),
            RKind::AppProject => Some(Target::AppProject),
            RKind::ApplicationSet => Some(Target::ApplicationSet),
            RKind::Repository => Some(Target::Repository),
            RKind::ClusterSecret => None,
        }
    }

    pub fn from_target(t: Target) -> Option<Self> {
        match t {
            Target::Application => Some(RKind::Application),
            Target::AppProject => Some(RKind::AppProject),
            Target::ApplicationSet => Some(RKind::ApplicationSet),
            Target::Repository => Some(RKind::Repository),
            _ => None,
        }
    }
}

/// Label of Argo CD's typed Secrets.
const SECRET_TYPE: &str = "argocd.argoproj.io/secret-type";

/// Which replicated kind a hub Secret of the principal's namespace is, if any: repository and
/// repo-creds Secrets, and cluster secrets of self-registered agents (the peer's
/// `GetClusterSecrets`: label `argocd-agent.argoproj-labs.io/self-registered-cluster=true`).
pub fn secret_kind(s: &Value) -> Option<RKind> {
    let labels = &s["metadata"]["labels"];
    match labels[SECRET_TYPE].as_str() {
        Some("repository" | "repo-creds") => Some(RKind::Repository),
        Some("cluster") if labels[crate::principal::LABEL_SELF_REGISTERED] == "true" => {
            Some(RKind::ClusterSecret)
        }
        _ => None,
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    pub kind: RKind,
    pub namespace: String,
    pub name: String,
}

/// A cached object.
struct Entry {
    json: Arc<[u8]>,
    uid: String,
    /// the agent it belongs to ("" for principal-scoped objects)
    agent: String,
    /// an autonomous agent's hub copy (it carries the agent's UID as source-uid)
    autonomous: bool,
    /// hash of what a `spec-update` carries (spec, labels, annotations, finalizers, deletion)
    spec: u64,
    /// hash of what a `status-update` carries (status, operation)
    status: u64,
}

fn hash(v: &[&Value]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for x in v {
        serde_json::to_string(x).unwrap_or_default().hash(&mut h);
    }
    h.finish()
}

fn entry(kind: RKind, obj: &Value) -> Entry {
    let m = &obj["metadata"];
    let spec = match kind {
        RKind::Application | RKind::AppProject | RKind::ApplicationSet => hash(&[
            &obj["spec"],
            &m["labels"],
            &m["annotations"],
            &m["finalizers"],
            &m["deletionTimestamp"],
        ]),
        RKind::Repository | RKind::ClusterSecret => {
            hash(&[&obj["data"], &obj["type"], &m["labels"], &m["annotations"]])
        }
    };
    let status = match kind {
        RKind::Application => hash(&[&obj["status"], &obj["operation"]]),
        _ => 0,
    };
    let agent = match kind {
        RKind::Application => o::namespace(obj).to_string(),
        RKind::ClusterSecret => m["labels"][crate::ctl::LABEL_AGENT_NAME]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        _ => String::new(),
    };
    Entry {
        json: serde_json::to_vec(obj).unwrap_or_default().into(),
        uid: o::uid(obj).to_string(),
        agent,
        autonomous: kind == RKind::Application && !o::source_uid(obj).is_empty(),
        spec,
        status,
    }
}

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

/// A resource of a snapshot or a `ConfirmMissingResources` answer.
fn resource(k: &Key, e: &Entry) -> api::Resource {
    api::Resource {
        name: k.name.clone(),
        namespace: k.namespace.clone(),
        kind: k.kind.as_str().into(),
        uid: e.uid.clone(),
        spec_checksum: Vec::new(),
        data: e.json.to_vec(),
    }
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
mod tests {
    use super::*;
    use serde_json::json;

    fn app(ns: &str, name: &str, uid: &str, spec: Value, status: Value) -> Value {
        json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
               "metadata": {"name": name, "namespace": ns, "uid": uid, "resourceVersion": "1"},
               "spec": spec, "status": status})
    }

    #[test]
    fn changes_become_the_peers_events_in_sequence_and_a_snapshot_matches_the_sequence() {
        let m = Metrics::new("argocd_principal");
        let s = Source::new(m.clone(), "argocd");
        let mut feed = s.subscribe();
        let a1 = app(
            "edge",
            "guestbook",
            "u1",
            json!({"project": "default"}),
            json!({}),
        );
        s.apply(
            Kind::Application,
            StoreEvent::Restarted(vec![a1.clone().into()]),
        );
        // the hub's own Applications (principal namespace) are not replicated
        s.apply(
            Kind::Application,
            StoreEvent::Applied(app("argocd", "x", "u0", json!({}), json!({})).into()),
        );
        let mut a2 = a1.clone();
        a2["status"] = json!({"sync": {"status": "Synced"}});
        s.apply(Kind::Application, StoreEvent::Applied(a2.clone().into()));
        let mut a3 = a2.clone();
        a3["spec"]["project"] = json!("p2");
        a3["operation"] = json!({"sync": {}});
        s.apply(Kind::Application, StoreEvent::Applied(a3.clone().into()));
        s.apply(Kind::Application, StoreEvent::Deleted(a3.clone().into()));
        let mut got = Vec::new();
        while let Ok(e) = feed.rx.try_recv() {
            let ce = e.event.as_ref().unwrap();
            let ev = Event::from_sdk(crate::event::SdkEvent::from_proto(ce).unwrap()).unwrap();
            got.push((
                e.sequence_num,
                ev.ty.short(),
                e.direction.clone(),
                e.agent_name.clone(),
                ev.data,
            ));
        }
        let kinds: Vec<_> = got
            .iter()
            .map(|g| (g.0, g.1, g.2.as_str(), g.3.as_str()))
            .collect();
        assert_eq!(
            kinds,
            vec![
                (1, "create", "outbound", "edge"),
                (2, "status-update", "inbound", "edge"),
                (3, "spec-update", "outbound", "edge"),
                (4, "status-update", "inbound", "edge"),
                (5, "delete", "outbound", "edge"),
            ]
        );
        assert!(
            got[2].4.get("operation").is_none(),
            "spec-update without operation"
        );
        assert_eq!(
            got[3].4["operation"],
            json!({"sync": {}}),
            "status-update carries it"
        );
        assert_eq!(s.sequence(), 5);
        assert!(
            m.encode()
                .contains("argocd_agent_replication_last_sequence_number 5")
        );

        // a snapshot is cut at the sequence it reports
        s.apply(Kind::Application, StoreEvent::Applied(a1.clone().into()));
        let snap = s.snapshot(&|| vec!["other".to_string()]);
        assert_eq!(snap.last_sequence_num, 6);
        let names: Vec<_> = snap
            .agents
            .iter()
            .map(|a| (a.name.as_str(), a.resources.len(), a.connected))
            .collect();
        assert_eq!(names, vec![("edge", 1, false), ("other", 0, true)]);
        let data: Value = serde_json::from_slice(&snap.agents[0].resources[0].data).unwrap();
        assert_eq!(data, a1);

        // what a replica holds but the snapshot lacks: deleted, or here (with its data)
        let r = s.confirm_missing(&api::ConfirmMissingResourcesRequest {
            agent_name: "edge".into(),
            snapshot_sequence_num: 1,
            resources: vec![
                api::Resource {
                    name: "guestbook".into(),
                    namespace: "edge".into(),
                    kind: "Application".into(),
                    ..Default::default()
                },
                api::Resource {
                    name: "gone".into(),
                    namespace: "edge".into(),
                    kind: "Application".into(),
                    ..Default::default()
                },
            ],
        });
        assert_eq!(r[0].status, "exists");
        assert!(!r[0].resource.as_ref().unwrap().data.is_empty());
        assert_eq!(r[1].status, "deleted");
    }

    #[test]
    fn a_relist_emits_deletes_for_what_vanished_and_nothing_for_what_did_not_change() {
        let s = Source::new(Metrics::new("argocd_principal"), "argocd");
        let a = app("edge", "a", "u1", json!({}), json!({}));
        let b = app("edge", "b", "u2", json!({}), json!({}));
        s.apply(
            Kind::Application,
            StoreEvent::Restarted(vec![a.clone().into(), b.into()]),
        );
        let mut feed = s.subscribe();
        s.apply(Kind::Application, StoreEvent::Restarted(vec![a.into()]));
        let e = feed.rx.try_recv().unwrap();
        assert_eq!(e.sequence_num, 3);
        assert!(feed.rx.try_recv().is_err());
        let repo = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "r", "namespace": "argocd",
            "labels": {"argocd.argoproj.io/secret-type": "repository"}}, "data": {}});
        s.apply(Kind::Secret, StoreEvent::Applied(repo.clone().into()));
        let other = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "tls", "namespace": "argocd"}});
        s.apply(Kind::Secret, StoreEvent::Applied(other.into()));
        let e = feed.rx.try_recv().unwrap();
        let ev =
            Event::from_sdk(crate::event::SdkEvent::from_proto(e.event.as_ref().unwrap()).unwrap())
                .unwrap();
        assert_eq!((ev.ty, ev.target), (EventType::Create, Target::Repository));
        assert!(
            feed.rx.try_recv().is_err(),
            "an unrelated Secret is not replicated"
        );
    }
}
