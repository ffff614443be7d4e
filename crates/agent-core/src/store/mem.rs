//! The in-memory store (tests, benchmarks, the simulated fleet).

use std::collections::HashMap;

use super::*;

/// An object's place: kind, namespace, name.
type Key = (Kind, String, String);

/// A stored object: shared by the map and the change broadcast, so that a write copies it once
/// (for its caller) and each watcher copies only the changes it follows.
type Stored = Arc<Value>;

/// One change as broadcast: the kind, whether the object is gone, and the object.
type Change = (Kind, bool, Stored);

/// The stored objects by kind, namespace and name: hashed, so that a lookup compares one name and
/// allocates nothing (a sorted map of 50,000 `(kind, namespace, name)` keys was 3 % of a busy
/// hub's CPU); lists sort what they return.
#[derive(Default)]
struct Objects(BTreeMap<Kind, HashMap<String, HashMap<String, Stored>>>);

impl Objects {
    fn get(&self, kind: Kind, ns: &str, name: &str) -> Option<&Stored> {
        self.0.get(&kind)?.get(ns)?.get(name)
    }

    /// Stores `o` as `name` (owned: a new object's name is moved in, not copied).
    fn insert(&mut self, kind: Kind, ns: &str, name: String, o: Stored) {
        let by_ns = self.0.entry(kind).or_default();
        let names = match by_ns.get_mut(ns) {
            Some(m) => m,
            None => by_ns.entry(ns.to_string()).or_default(),
        };
        names.insert(name, o);
    }

    fn remove(&mut self, kind: Kind, ns: &str, name: &str) -> Option<Stored> {
        let by_ns = self.0.get_mut(&kind)?;
        let names = by_ns.get_mut(ns)?;
        let o = names.remove(name);
        if names.is_empty() {
            by_ns.remove(ns);
        }
        o
    }

    /// The keys of `kind` (in `ns`), sorted by namespace and name.
    fn keys(&self, kind: Kind, ns: Option<&str>) -> Vec<Key> {
        let mut keys: Vec<Key> = self
            .entries(kind, ns)
            .map(|(n, m, _)| (kind, n.clone(), m.clone()))
            .collect();
        keys.sort_unstable();
        keys
    }

    /// The objects of `kind` (in `ns`), sorted by namespace and name.
    fn list(&self, kind: Kind, ns: Option<&str>) -> Vec<Stored> {
        let mut l: Vec<(&String, &String, &Stored)> = self.entries(kind, ns).collect();
        l.sort_unstable_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
        l.into_iter().map(|(_, _, o)| o.clone()).collect()
    }

    fn entries<'a>(
        &'a self,
        kind: Kind,
        ns: Option<&'a str>,
    ) -> impl Iterator<Item = (&'a String, &'a String, &'a Stored)> + 'a {
        self.0
            .get(&kind)
            .into_iter()
            .flat_map(|by_ns| by_ns.iter())
            .filter(move |(n, _)| ns.is_none_or(|ns| n.as_str() == ns))
            .flat_map(|(n, names)| names.iter().map(move |(m, o)| (n, m, o)))
    }
}

struct MemInner {
    objects: Objects,
    rv: u64,
    /// namespaces made by `ensure_namespace` (objects never need one here)
    namespaces: std::collections::BTreeSet<String>,
    /// `get` and `list` calls by kind (what an API server would have been asked)
    reads: BTreeMap<Kind, u64>,
}

impl MemInner {
    /// The stored object (shared; the caller copies it after the lock is released).
    fn object(&self, kind: Kind, ns: &str, name: &str) -> Option<Stored> {
        self.objects.get(kind, ns, name).cloned()
    }
}

/// An in-memory store with watches (tests, benchmarks).
#[derive(Clone)]
pub struct MemStore {
    inner: Arc<Mutex<MemInner>>,
    /// Changes, shared: a watcher clones only the events of its kind and namespace (a busy hub
    /// store has a watcher per kind; a deep copy per watcher per write was most of a watch's cost).
    tx: broadcast::Sender<Change>,
}

impl Default for MemStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemStore {
    pub fn new() -> Self {
        Self::with_capacity(1024)
    }

    /// A store whose watchers may fall `capacity` events behind before they resynchronise from
    /// a full list (a `Restarted` event): a busy shared store (a benchmark's hub) wants more.
    pub fn with_capacity(capacity: usize) -> Self {
        let (tx, _) = broadcast::channel(capacity.max(16));
        Self {
            inner: Arc::new(Mutex::new(MemInner {
                objects: Objects::default(),
                rv: 0,
                namespaces: Default::default(),
                reads: BTreeMap::new(),
            })),
            tx,
        }
    }

    /// How many `get` and `list` calls of `kind` this store answered: the reads a real API server
    /// would have served (tests pin that a path answers from a cache instead).
    pub fn reads(&self, kind: Kind) -> u64 {
        let g = self.inner.lock().expect("poisoned");
        g.reads.get(&kind).copied().unwrap_or(0)
    }

    /// The namespaces `ensure_namespace` created, sorted.
    pub fn namespaces(&self) -> Vec<String> {
        let g = self.inner.lock().expect("poisoned");
        g.namespaces.iter().cloned().collect()
    }

    fn write(
        &self,
        kind: Kind,
        mut obj: Value,
        is_create: bool,
        check_rv: bool,
    ) -> StoreResult<Stored> {
        let (ns, name) = ns_name(&obj);
        if name.is_empty() || ns.is_empty() {
            return Err(StoreError::Invalid(
                "metadata.name and metadata.namespace are required".into(),
            ));
        }
        let mut g = self.inner.lock().expect("poisoned");
        // the stored object is read in place (its copy was a third of a write's cost)
        let existing = g.objects.get(kind, &ns, &name).cloned();
        match (&existing, is_create) {
            (Some(_), true) => return Err(StoreError::AlreadyExists),
            (None, false) => return Err(StoreError::NotFound),
            _ => {}
        }
        if let Some(old) = existing.as_deref() {
            if check_rv {
                let want = obj["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap_or_default();
                if !want.is_empty()
                    && want
                        != old["metadata"]["resourceVersion"]
                            .as_str()
                            .unwrap_or_default()
                {
                    return Err(StoreError::Conflict("resourceVersion is stale".into()));
                }
            }
            obj["metadata"]["uid"] = old["metadata"]["uid"].clone();
            obj["metadata"]["creationTimestamp"] = old["metadata"]["creationTimestamp"].clone();
            // like the API server: a deletionTimestamp cannot be set or cleared by an update
            match old["metadata"].get("deletionTimestamp") {
                Some(ts) if !ts.is_null() => {
                    obj["metadata"]["deletionTimestamp"] = ts.clone();
                }
                _ => {
                    if let Some(m) = obj["metadata"].as_object_mut() {
                        m.remove("deletionTimestamp");
                    }
                }
            }
            if crate::objects::json_eq(old, &obj) {
                return Ok(Arc::new(obj));
            }
            if has_deletion_timestamp(&obj) && !has_finalizers(&obj) {
                // the last finalizer is gone: the object goes away
                g.objects.remove(kind, &ns, &name);
                g.rv += 1;
                let gone = Arc::new(obj);
                let _ = self.tx.send((kind, true, gone.clone()));
                return Ok(gone);
            }
        } else {
            if let Some(m) = obj["metadata"].as_object_mut() {
                m.remove("deletionTimestamp");
            }
            obj["metadata"]["uid"] = json!(uuid::Uuid::new_v4().to_string());
            obj["metadata"]["creationTimestamp"] = json!(jiff::Timestamp::now().to_string());
        }
        g.rv += 1;
        obj["metadata"]["resourceVersion"] = json!(g.rv.to_string());
        obj["apiVersion"] = json!(kind.api_version());
        obj["kind"] = json!(kind.as_str());
        let stored = Arc::new(obj);
        g.objects.insert(kind, &ns, name, stored.clone());
        let _ = self.tx.send((kind, false, stored.clone()));
        Ok(stored)
    }

    /// The changes of `kind` in `ns` from now on (a lagging receiver restarts with the list).
    fn changes(
        &self,
        kind: Kind,
        ns: Option<&str>,
    ) -> impl futures::Stream<Item = StoreResult<StoreEvent>> + Send + 'static {
        let rx = self.tx.subscribe();
        let me = self.clone();
        let ns = ns.map(str::to_string);
        futures::stream::unfold(rx, move |mut rx| {
            let me = me.clone();
            let ns = ns.clone();
            async move {
                loop {
                    match rx.recv().await {
                        Ok((k, gone, obj)) if k == kind => {
                            if ns
                                .as_deref()
                                .is_none_or(|n| obj["metadata"]["namespace"] == n)
                            {
                                let ev = match gone {
                                    true => StoreEvent::Deleted(obj),
                                    false => StoreEvent::Applied(obj),
                                };
                                return Some((Ok(ev), rx));
                            }
                        }
                        Ok(_) => continue,
                        Err(broadcast::error::RecvError::Lagged(_)) => {
                            let l = me.list_shared(kind, ns.as_deref());
                            return Some((Ok(StoreEvent::Restarted(l)), rx));
                        }
                        Err(broadcast::error::RecvError::Closed) => return None,
                    }
                }
            }
        })
    }

    /// The objects of `kind` (in `ns`), shared: copied by the caller outside the lock.
    fn list_shared(&self, kind: Kind, ns: Option<&str>) -> Vec<Stored> {
        self.inner.lock().expect("poisoned").objects.list(kind, ns)
    }
}

fn has_finalizers(v: &Value) -> bool {
    v["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|a| !a.is_empty())
}

fn has_deletion_timestamp(v: &Value) -> bool {
    v["metadata"]["deletionTimestamp"]
        .as_str()
        .is_some_and(|s| !s.is_empty())
}

/// RFC 7386 merge.
pub fn merge_json(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(p) => {
            if !target.is_object() {
                *target = Value::Object(Default::default());
            }
            let t = target.as_object_mut().expect("object");
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge_json(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        other => *target = other.clone(),
    }
}

#[async_trait]
impl Store for MemStore {
    async fn list(&self, kind: Kind, ns: Option<&str>) -> StoreResult<Vec<Value>> {
        let shared = {
            let mut g = self.inner.lock().expect("poisoned");
            *g.reads.entry(kind).or_default() += 1;
            g.objects.list(kind, ns)
        };
        Ok(shared.into_iter().map(Arc::unwrap_or_clone).collect())
    }
    async fn get(&self, kind: Kind, ns: &str, name: &str) -> StoreResult<Option<Value>> {
        let o = {
            let mut g = self.inner.lock().expect("poisoned");
            *g.reads.entry(kind).or_default() += 1;
            g.object(kind, ns, name)
        };
        Ok(o.map(Arc::unwrap_or_clone))
    }
    // the one copy of a write is the caller's, made after the lock is released
    async fn create(&self, kind: Kind, obj: Value) -> StoreResult<Value> {
        self.write(kind, obj, true, false).map(Arc::unwrap_or_clone)
    }
    async fn replace(&self, kind: Kind, obj: Value) -> StoreResult<Value> {
        self.write(kind, obj, false, true).map(Arc::unwrap_or_clone)
    }
    async fn create_only(&self, kind: Kind, obj: Value) -> StoreResult<()> {
        self.write(kind, obj, true, false).map(drop)
    }
    async fn replace_only(&self, kind: Kind, obj: Value) -> StoreResult<()> {
        self.write(kind, obj, false, true).map(drop)
    }
    async fn merge_patch(
        &self,
        kind: Kind,
        ns: &str,
        name: &str,
        patch: Value,
    ) -> StoreResult<Value> {
        // one request to an API server, not a read and a write: not counted in `reads`
        let cur = self.inner.lock().expect("poisoned").object(kind, ns, name);
        let mut cur = Arc::unwrap_or_clone(cur.ok_or(StoreError::NotFound)?);
        merge_json(&mut cur, &patch);
        self.write(kind, cur, false, false)
            .map(Arc::unwrap_or_clone)
    }
    async fn delete(&self, kind: Kind, ns: &str, name: &str) -> StoreResult<()> {
        let mut g = self.inner.lock().expect("poisoned");
        let Some(cur) = g.objects.get(kind, ns, name).cloned() else {
            return Ok(());
        };
        if has_finalizers(&cur) {
            // like the API server: finalizers hold the object, marked for deletion
            if !has_deletion_timestamp(&cur) {
                let mut n = (*cur).clone();
                g.rv += 1;
                n["metadata"]["deletionTimestamp"] = json!(jiff::Timestamp::now().to_string());
                n["metadata"]["resourceVersion"] = json!(g.rv.to_string());
                let n = Arc::new(n);
                g.objects.insert(kind, ns, name.to_string(), n.clone());
                let _ = self.tx.send((kind, false, n));
            }
            return Ok(());
        }
        if let Some(o) = g.objects.remove(kind, ns, name) {
            let _ = self.tx.send((kind, true, o));
        }
        Ok(())
    }
    async fn ensure_namespace(&self, ns: &str) -> StoreResult<()> {
        self.inner
            .lock()
            .expect("poisoned")
            .namespaces
            .insert(ns.to_string());
        Ok(())
    }
    fn watch(&self, kind: Kind, ns: Option<&str>) -> BoxStream<'static, StoreResult<StoreEvent>> {
        let rest = self.changes(kind, ns);
        let initial = self.list_shared(kind, ns);
        futures::stream::once(async move { Ok(StoreEvent::Restarted(initial)) })
            .chain(rest)
            .boxed()
    }
    fn watch_streaming(
        &self,
        kind: Kind,
        ns: Option<&str>,
    ) -> BoxStream<'static, StoreResult<WatchEvent>> {
        // subscribed before the keys are read: no change is missed
        let rest = streamed(self.changes(kind, ns));
        // the list: keys now, each object read (shared) one at a time, so that the stream never
        // holds the whole list; one deleted meanwhile is skipped (its deletion follows in `rest`)
        let keys: Vec<Key> = self.inner.lock().expect("poisoned").objects.keys(kind, ns);
        let me = self.clone();
        let items = futures::stream::iter(keys).filter_map(move |k| {
            let (kind, ns, name) = &k;
            let o = me
                .inner
                .lock()
                .expect("poisoned")
                .objects
                .get(*kind, ns, name)
                .cloned();
            futures::future::ready(o.map(|o| Ok(WatchEvent::InitApply(o))))
        });
        futures::stream::once(futures::future::ready(Ok(WatchEvent::Init)))
            .chain(items)
            .chain(futures::stream::once(futures::future::ready(Ok(
                WatchEvent::InitDone,
            ))))
            .chain(rest)
            .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn app(ns: &str, name: &str) -> Value {
        json!({"metadata": {"name": name, "namespace": ns}})
    }

    fn names(evs: &[WatchEvent]) -> Vec<String> {
        evs.iter()
            .map(|e| match e {
                WatchEvent::Init => "init".to_string(),
                WatchEvent::InitDone => "done".to_string(),
                WatchEvent::InitApply(o) => format!("list {}", o["metadata"]["name"]),
                WatchEvent::Applied(o) => format!("applied {}", o["metadata"]["name"]),
                WatchEvent::Deleted(o) => format!("deleted {}", o["metadata"]["name"]),
            })
            .collect()
    }

    /// `create_only` stores what `create` would (uid, resourceVersion, the watchers' event) and
    /// refuses an existing name the same way; a watcher's copy is its own.
    #[tokio::test]
    async fn create_only_stores_and_broadcasts_like_create() {
        let s = MemStore::new();
        let mut w = s.watch(Kind::Application, Some("ns1"));
        assert!(matches!(w.next().await, Some(Ok(StoreEvent::Restarted(l))) if l.is_empty()));
        s.create_only(Kind::Application, app("ns1", "a"))
            .await
            .unwrap();
        let got = s.get(Kind::Application, "ns1", "a").await.unwrap().unwrap();
        assert_eq!(got["metadata"]["resourceVersion"], "1");
        assert!(!got["metadata"]["uid"].as_str().unwrap().is_empty());
        match w.next().await {
            Some(Ok(StoreEvent::Applied(o))) => {
                // shared with the store: a watcher that takes it gets a copy of its own
                let mut o = Arc::unwrap_or_clone(o);
                assert_eq!(o, got);
                o["spec"] = json!({"changed": true});
            }
            other => panic!("expected the create, got {other:?}"),
        }
        assert_eq!(
            s.get(Kind::Application, "ns1", "a").await.unwrap(),
            Some(got)
        );
        assert!(matches!(
            s.create_only(Kind::Application, app("ns1", "a")).await,
            Err(StoreError::AlreadyExists)
        ));
    }

    /// The streamed list reads each object when it is reached: one deleted meanwhile is not
    /// listed, and its deletion follows; only the watched namespace is listed.
    #[tokio::test]
    async fn streaming_watch_lists_one_object_at_a_time_and_misses_nothing() {
        let s = MemStore::new();
        for n in ["a", "b", "c"] {
            s.create(Kind::Application, app("ns1", n)).await.unwrap();
        }
        s.create(Kind::Application, app("ns2", "x")).await.unwrap();
        let mut w = s.watch_streaming(Kind::Application, Some("ns1"));
        let mut seen = Vec::new();
        for _ in 0..2 {
            seen.push(w.next().await.unwrap().unwrap());
        }
        s.delete(Kind::Application, "ns1", "c").await.unwrap();
        s.create(Kind::Application, app("ns1", "d")).await.unwrap();
        for _ in 0..4 {
            seen.push(w.next().await.unwrap().unwrap());
        }
        assert_eq!(
            names(&seen),
            [
                "init",
                "list \"a\"",
                "list \"b\"",
                "done",
                "deleted \"c\"",
                "applied \"d\""
            ]
        );
    }
}
