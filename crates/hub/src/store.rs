//! The object store: per-type ordered maps of serialized objects plus a bounded event history
//! that doubles as the watch fan-out buffer.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use serde_json::Value;

use crate::HubOptions;
use crate::registry::{self, ResourceType};

pub(crate) type Labels = Box<[(Box<str>, Box<str>)]>;

/// Serialized JSON of an object: one buffer, or parts shared between Hubs (installed CRDs
/// share their large `spec` bytes process-wide).
#[derive(Clone, Debug)]
pub(crate) enum Json {
    One(Bytes),
    Parts(Arc<[Bytes]>),
}

impl Json {
    pub fn bytes(&self) -> Bytes {
        match self {
            Json::One(b) => b.clone(),
            Json::Parts(p) => {
                let mut b = bytes::BytesMut::with_capacity(p.iter().map(|x| x.len()).sum());
                for x in p.iter() {
                    b.extend_from_slice(x);
                }
                b.freeze()
            }
        }
    }
}

/// One stored object: its JSON bytes and a small parsed index.
#[derive(Debug)]
pub(crate) struct Obj {
    pub uid: Box<str>,
    pub rv: u64,
    pub labels: Labels,
    pub json: Json,
}

impl Obj {
    pub fn value(&self) -> Value {
        serde_json::from_slice(&self.json.bytes()).unwrap_or(Value::Null)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EvType {
    Added,
    Modified,
    Deleted,
}

impl EvType {
    pub fn as_str(self) -> &'static str {
        match self {
            EvType::Added => "ADDED",
            EvType::Modified => "MODIFIED",
            EvType::Deleted => "DELETED",
        }
    }
}

#[derive(Debug)]
pub(crate) struct Event {
    pub ty: EvType,
    pub rv: u64,
    pub ns: Box<str>,
    pub name: Box<str>,
    pub labels: Labels,
    /// Labels before this event when they changed (selector transitions).
    pub prev_labels: Option<Labels>,
    /// The previous object when the labels changed (sent as DELETED to watchers whose selector
    /// it stops matching, like the real watch cache).
    pub prev_json: Option<Json>,
    pub json: Json,
}

#[derive(Debug)]
pub(crate) struct HistInner {
    pub events: VecDeque<Arc<Event>>,
    /// Sequence number of `events[0]`.
    pub first_seq: u64,
    /// Events with `rv <= horizon_rv` may have been evicted.
    pub horizon_rv: u64,
    /// The type stopped being served (CRD deleted): watchers end.
    pub closed: bool,
    cap: usize,
}

impl HistInner {
    pub fn end_seq(&self) -> u64 {
        self.first_seq + self.events.len() as u64
    }
}

#[derive(Debug)]
pub(crate) struct History {
    pub inner: Mutex<HistInner>,
    pub tx: tokio::sync::watch::Sender<()>,
}

impl History {
    fn new(cap: usize) -> History {
        History {
            inner: Mutex::new(HistInner {
                events: VecDeque::new(),
                first_seq: 0,
                horizon_rv: 0,
                closed: false,
                cap: cap.max(1),
            }),
            tx: tokio::sync::watch::Sender::new(()),
        }
    }

    pub fn lock(&self) -> std::sync::MutexGuard<'_, HistInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn push(&self, ev: Event) {
        {
            let mut h = self.lock();
            h.events.push_back(Arc::new(ev));
            while h.events.len() > h.cap {
                if let Some(old) = h.events.pop_front() {
                    h.first_seq += 1;
                    h.horizon_rv = old.rv;
                }
            }
        }
        self.tx.send_replace(());
    }

    fn close(&self) {
        self.lock().closed = true;
        self.tx.send_replace(());
    }
}

pub(crate) type Key = (String, String);

pub(crate) struct TypeStore {
    pub rt: Arc<ResourceType>,
    pub objects: BTreeMap<Key, Arc<Obj>>,
    pub hist: Arc<History>,
}

impl TypeStore {
    /// Objects of one namespace (`Some`) or all (`None`), in key order.
    pub fn iter_ns<'a>(
        &'a self,
        ns: Option<&'a str>,
    ) -> Box<dyn Iterator<Item = (&'a Key, &'a Arc<Obj>)> + 'a> {
        match ns {
            None => Box::new(self.objects.iter()),
            Some(ns) => Box::new(
                self.objects
                    .range((ns.to_string(), String::new())..)
                    .take_while(move |((n, _), _)| n == ns),
            ),
        }
    }
}

pub(crate) struct Snapshot {
    pub id: u64,
    pub rv: u64,
    pub items: Arc<Vec<Arc<Obj>>>,
}

type DepRef = (String, String, String);

pub(crate) struct State {
    pub rv: u64,
    pub committed: Arc<AtomicU64>,
    pub stores: HashMap<String, TypeStore>,
    /// owner uid → dependents (may be stale; verified on use).
    pub dependents: HashMap<Box<str>, HashSet<DepRef>>,
    pub snapshots: VecDeque<Snapshot>,
    pub snapshot_seq: u64,
    pub snapshot_cap: usize,
    hist_cap: usize,
}

pub(crate) const CRD_KEY: &str = "customresourcedefinitions.apiextensions.k8s.io";
pub(crate) const NS_KEY: &str = "namespaces";
pub(crate) const SECRET_KEY: &str = "secrets";

impl State {
    pub fn new(opts: &HubOptions, committed: Arc<AtomicU64>) -> State {
        let mut st = State {
            rv: 0,
            committed,
            stores: HashMap::new(),
            dependents: HashMap::new(),
            snapshots: VecDeque::new(),
            snapshot_seq: 0,
            snapshot_cap: opts.list_snapshots,
            hist_cap: opts.history_per_type,
        };
        for rt in registry::builtins() {
            st.register(rt);
        }
        st
    }

    fn register(&mut self, rt: ResourceType) {
        self.register_arc(Arc::new(rt));
    }

    fn register_arc(&mut self, rt: Arc<ResourceType>) {
        let key = rt.key();
        if let Some(s) = self.stores.get_mut(&key) {
            s.rt = rt;
        } else {
            self.stores.insert(
                key,
                TypeStore {
                    rt,
                    objects: BTreeMap::new(),
                    hist: Arc::new(History::new(self.hist_cap)),
                },
            );
        }
    }

    pub fn type_by_key(&self, key: &str) -> Option<Arc<ResourceType>> {
        self.stores.get(key).map(|s| s.rt.clone())
    }

    /// `plural.group`, `plural` (first match) or a short name.
    pub fn find_store(&self, resource: &str) -> Option<&TypeStore> {
        self.stores.get(resource).or_else(|| {
            let mut c: Vec<&TypeStore> = self
                .stores
                .values()
                .filter(|s| {
                    s.rt.plural == resource
                        || s.rt.short_names.iter().any(|x| x == resource)
                        || s.rt.kind.eq_ignore_ascii_case(resource)
                })
                .collect();
            c.sort_by_key(|s| s.rt.builtin);
            c.into_iter().next()
        })
    }

    /// The served type for a URL's group/version/plural.
    pub fn lookup(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceType>> {
        let s = self.stores.get(&crate::error::qualified(plural, group))?;
        s.rt.version(version)?;
        Some(s.rt.clone())
    }

    pub fn lookup_kind(&self, api_version: &str, kind: &str) -> Option<Arc<ResourceType>> {
        let (group, version) = match api_version.split_once('/') {
            Some((g, v)) => (g, v),
            None => ("", api_version),
        };
        self.stores
            .values()
            .find(|s| s.rt.group == group && s.rt.kind == kind && s.rt.version(version).is_some())
            .map(|s| s.rt.clone())
    }

    pub fn get(&self, key: &str, ns: &str, name: &str) -> Option<Arc<Obj>> {
        self.stores
            .get(key)?
            .objects
            .get(&(ns.to_string(), name.to_string()))
            .cloned()
    }

    pub fn store(&self, key: &str) -> Option<&TypeStore> {
        self.stores.get(key)
    }

    pub fn namespace_state(&self, ns: &str) -> Option<bool> {
        // Some(terminating?)
        let o = self.get(NS_KEY, "", ns)?;
        let v = o.value();
        Some(v.pointer("/metadata/deletionTimestamp").is_some())
    }

    /// Writes (creates or replaces) an object: assigns the next resourceVersion, records the
    /// event and applies side effects (CRD registration, GC index).
    pub fn commit_put(&mut self, key: &str, ns: &str, name: &str, mut val: Value) -> Arc<Obj> {
        self.rv += 1;
        let rv = self.rv;
        if let Some(m) = val.get_mut("metadata").and_then(|m| m.as_object_mut()) {
            m.insert("resourceVersion".into(), Value::String(rv.to_string()));
        }
        if key == CRD_KEY
            && let Ok(rt) = registry::crd_to_type(&val)
        {
            self.register(rt);
        }
        let json = Bytes::from(serde_json::to_vec(&val).unwrap_or_default());
        self.commit_raw(key, ns, name, &val, Json::One(json), rv)
    }

    /// Installs a prepared CRD without re-parsing or re-serializing its schema.
    pub fn commit_crd(&mut self, p: &crate::crdcache::PreparedCrd) -> Arc<Obj> {
        self.rv += 1;
        let rv = self.rv;
        let mut meta = p.meta.clone();
        if let Some(m) = meta.as_object_mut() {
            m.insert("uid".into(), Value::String(crate::util::new_uid()));
            m.insert("resourceVersion".into(), Value::String(rv.to_string()));
            m.insert("generation".into(), Value::from(1));
            m.insert(
                "creationTimestamp".into(),
                Value::String(crate::util::now_rfc3339()),
            );
        }
        let head = format!(
            "{{\"apiVersion\":\"apiextensions.k8s.io/v1\",\"kind\":\"CustomResourceDefinition\",\"metadata\":{meta},\"spec\":"
        );
        let parts: Arc<[Bytes]> = Arc::from(vec![
            Bytes::from(head),
            p.spec.clone(),
            Bytes::from_static(b",\"status\":"),
            p.status.clone(),
            Bytes::from_static(b"}"),
        ]);
        self.register_arc(p.rt.clone());
        let index = serde_json::json!({"metadata": meta});
        self.commit_raw(CRD_KEY, "", &p.name, &index, Json::Parts(parts), rv)
    }

    /// Stores serialized object bytes (`index` supplies metadata for the parsed index) and
    /// records the event.
    fn commit_raw(
        &mut self,
        key: &str,
        ns: &str,
        name: &str,
        index: &Value,
        json: Json,
        rv: u64,
    ) -> Arc<Obj> {
        let labels = labels_of(index);
        let uid: Box<str> = crate::util::str_at(index, "/metadata/uid")
            .unwrap_or("")
            .into();
        for owner in owner_uids(index) {
            self.dependents.entry(owner.into()).or_default().insert((
                key.to_string(),
                ns.to_string(),
                name.to_string(),
            ));
        }
        let obj = Arc::new(Obj {
            uid,
            rv,
            labels,
            json: json.clone(),
        });
        let store = self.stores.get_mut(key).expect("type is registered");
        let prev = store
            .objects
            .insert((ns.to_string(), name.to_string()), obj.clone());
        let (ty, prev_labels, prev_json) = match &prev {
            None => (EvType::Added, None, None),
            Some(p) if p.labels != obj.labels => (
                EvType::Modified,
                Some(p.labels.clone()),
                Some(p.json.clone()),
            ),
            Some(_) => (EvType::Modified, None, None),
        };
        store.hist.push(Event {
            ty,
            rv,
            ns: ns.into(),
            name: name.into(),
            labels: obj.labels.clone(),
            prev_labels,
            prev_json,
            json,
        });
        self.committed.store(rv, Ordering::SeqCst);
        obj
    }

    /// Removes an object (its final state `val` gets a new resourceVersion and is the DELETED
    /// event's object). Returns the final JSON.
    pub fn commit_remove(&mut self, key: &str, ns: &str, name: &str, mut val: Value) -> Bytes {
        self.rv += 1;
        let rv = self.rv;
        if let Some(m) = val.get_mut("metadata").and_then(|m| m.as_object_mut()) {
            m.insert("resourceVersion".into(), Value::String(rv.to_string()));
        }
        let json = Bytes::from(serde_json::to_vec(&val).unwrap_or_default());
        let Some(store) = self.stores.get_mut(key) else {
            return json;
        };
        let Some(prev) = store.objects.remove(&(ns.to_string(), name.to_string())) else {
            return json;
        };
        store.hist.push(Event {
            ty: EvType::Deleted,
            rv,
            ns: ns.into(),
            name: name.into(),
            labels: prev.labels.clone(),
            prev_labels: None,
            prev_json: None,
            json: Json::One(json.clone()),
        });
        self.committed.store(rv, Ordering::SeqCst);
        json
    }

    /// Stops serving a type (its CRD is gone).
    pub fn unregister(&mut self, key: &str) {
        if let Some(s) = self.stores.remove(key) {
            s.hist.close();
        }
    }
}

pub(crate) fn labels_of(v: &Value) -> Labels {
    match v.pointer("/metadata/labels").and_then(|l| l.as_object()) {
        Some(m) => m
            .iter()
            .map(|(k, v)| (k.as_str().into(), v.as_str().unwrap_or("").into()))
            .collect(),
        None => Box::new([]),
    }
}

pub(crate) fn owner_uids(v: &Value) -> Vec<&str> {
    v.pointer("/metadata/ownerReferences")
        .and_then(|o| o.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|r| r.get("uid").and_then(|u| u.as_str()))
                .collect()
        })
        .unwrap_or_default()
}

pub(crate) mod ops;
