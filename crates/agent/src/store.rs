//! Backends: where Applications, AppProjects and repository Secrets live.
//!
//! Objects are handled as full JSON (`serde_json::Value`) so no unknown field of a foreign object
//! is ever dropped: writes replace only the fields this crate owns on top of the current object.
//! [`KubeStore`] serves real clusters and the embedded hub (which exposes a `kube::Client`);
//! [`MemStore`] is an in-process store for unit tests and benchmarks; like the API server it holds
//! an object with finalizers after a delete (setting `deletionTimestamp`) until its last finalizer
//! is removed.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use futures::{StreamExt, stream::BoxStream};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use serde_json::{Value, json};
use tokio::sync::broadcast;

/// The kinds this crate synchronises.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Application,
    AppProject,
    /// Core v1 Secrets (the repository and repo-creds Secrets of Argo CD).
    Secret,
    /// Core v1 ConfigMaps (Argo CD's GPG keys).
    ConfigMap,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Application => "Application",
            Kind::AppProject => "AppProject",
            Kind::Secret => "Secret",
            Kind::ConfigMap => "ConfigMap",
        }
    }
    pub fn api_version(self) -> &'static str {
        match self {
            Kind::Application | Kind::AppProject => "argoproj.io/v1alpha1",
            Kind::Secret | Kind::ConfigMap => "v1",
        }
    }
    pub fn plural(self) -> &'static str {
        match self {
            Kind::Application => "applications",
            Kind::AppProject => "appprojects",
            Kind::Secret => "secrets",
            Kind::ConfigMap => "configmaps",
        }
    }
    pub fn api_resource(self) -> ApiResource {
        let gvk = match self {
            Kind::Secret | Kind::ConfigMap => GroupVersionKind::gvk("", "v1", self.as_str()),
            _ => GroupVersionKind::gvk("argoproj.io", "v1alpha1", self.as_str()),
        };
        ApiResource::from_gvk_with_plural(&gvk, self.plural())
    }
    pub fn parse(s: &str) -> Option<Kind> {
        match s {
            "Application" => Some(Kind::Application),
            "AppProject" => Some(Kind::AppProject),
            "Secret" => Some(Kind::Secret),
            "ConfigMap" => Some(Kind::ConfigMap),
            _ => None,
        }
    }
}

/// A change seen by a watch.
#[derive(Debug, Clone)]
pub enum StoreEvent {
    Applied(Value),
    Deleted(Value),
    /// The watch (re)started: this is the complete current list.
    Restarted(Vec<Value>),
}

/// A change seen by [`Store::watch_streaming`]: the (re)started list arrives one object at a time
/// between `Init` and `InitDone`, so a consumer keeping a compact form never holds the whole list.
#[derive(Debug, Clone)]
pub enum WatchEvent {
    Init,
    InitApply(Value),
    InitDone,
    Applied(Value),
    Deleted(Value),
}

impl WatchEvent {
    /// The streaming form of a [`StoreEvent`].
    pub fn from_store_event(ev: StoreEvent) -> Vec<WatchEvent> {
        match ev {
            StoreEvent::Applied(o) => vec![WatchEvent::Applied(o)],
            StoreEvent::Deleted(o) => vec![WatchEvent::Deleted(o)],
            StoreEvent::Restarted(l) => std::iter::once(WatchEvent::Init)
                .chain(l.into_iter().map(WatchEvent::InitApply))
                .chain(std::iter::once(WatchEvent::InitDone))
                .collect(),
        }
    }
}

/// Backend errors.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("not found")]
    NotFound,
    #[error("conflict: {0}")]
    Conflict(String),
    #[error("already exists")]
    AlreadyExists,
    #[error("invalid: {0}")]
    Invalid(String),
    #[error("backend: {0}")]
    Other(String),
}

impl StoreError {
    /// Whether retrying later may succeed (the receiver then sends no ACK and the sender resends).
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            StoreError::Conflict(_) | StoreError::Other(_) | StoreError::AlreadyExists
        )
    }
}

pub type StoreResult<T> = Result<T, StoreError>;

/// A namespaced object store with watches.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    async fn list(&self, kind: Kind, ns: Option<&str>) -> StoreResult<Vec<Value>>;
    async fn get(&self, kind: Kind, ns: &str, name: &str) -> StoreResult<Option<Value>>;
    /// Creates `obj` (namespace from its metadata).
    async fn create(&self, kind: Kind, obj: Value) -> StoreResult<Value>;
    /// Replaces `obj`; its `metadata.resourceVersion` must be current (else `Conflict`).
    async fn replace(&self, kind: Kind, obj: Value) -> StoreResult<Value>;
    /// JSON merge patch (RFC 7386).
    async fn merge_patch(
        &self,
        kind: Kind,
        ns: &str,
        name: &str,
        patch: Value,
    ) -> StoreResult<Value>;
    /// Deletes; `NotFound` is success.
    async fn delete(&self, kind: Kind, ns: &str, name: &str) -> StoreResult<()>;
    /// Ensures a namespace exists.
    async fn ensure_namespace(&self, ns: &str) -> StoreResult<()>;
    /// Like [`Store::ensure_namespace`], labelling a namespace it creates.
    async fn ensure_namespace_labelled(
        &self,
        ns: &str,
        labels: &BTreeMap<String, String>,
    ) -> StoreResult<()> {
        let _ = labels;
        self.ensure_namespace(ns).await
    }
    /// Watches `kind` in `ns` (all namespaces for `None`); starts with `Restarted`.
    fn watch(&self, kind: Kind, ns: Option<&str>) -> BoxStream<'static, StoreResult<StoreEvent>>;
    /// [`Store::watch`] with the list streamed (see [`WatchEvent`]). The default adapts `watch`
    /// (the list is materialized once); backends override it to stream.
    fn watch_streaming(
        &self,
        kind: Kind,
        ns: Option<&str>,
    ) -> BoxStream<'static, StoreResult<WatchEvent>> {
        self.watch(kind, ns)
            .flat_map(|e| {
                futures::stream::iter(match e {
                    Ok(ev) => WatchEvent::from_store_event(ev)
                        .into_iter()
                        .map(Ok)
                        .collect(),
                    Err(e) => vec![Err(e)],
                })
            })
            .boxed()
    }
}

// ---------------------------------------------------------------------------------------------
// Kubernetes

/// A `kube::Client`-based store (real clusters and the embedded hub).
#[derive(Clone)]
pub struct KubeStore {
    client: kube::Client,
}

impl KubeStore {
    pub fn new(client: kube::Client) -> Self {
        Self { client }
    }

    fn api(&self, kind: Kind, ns: Option<&str>) -> Api<DynamicObject> {
        let ar = kind.api_resource();
        match ns {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &ar),
            None => Api::all_with(self.client.clone(), &ar),
        }
    }
}

fn kube_err(e: kube::Error) -> StoreError {
    match &e {
        kube::Error::Api(s) if s.code == 404 => StoreError::NotFound,
        kube::Error::Api(s) if s.code == 409 && s.reason == "AlreadyExists" => {
            StoreError::AlreadyExists
        }
        kube::Error::Api(s) if s.code == 409 => StoreError::Conflict(s.message.clone()),
        kube::Error::Api(s) if s.code == 422 || s.code == 400 => {
            StoreError::Invalid(s.message.clone())
        }
        _ => StoreError::Other(e.to_string()),
    }
}

fn to_value(o: &DynamicObject) -> Value {
    serde_json::to_value(o).expect("objects serialise")
}

fn from_value(kind: Kind, mut v: Value) -> StoreResult<DynamicObject> {
    v["apiVersion"] = json!(kind.api_version());
    v["kind"] = json!(kind.as_str());
    serde_json::from_value(v).map_err(|e| StoreError::Invalid(e.to_string()))
}

fn ns_name(v: &Value) -> (String, String) {
    let m = &v["metadata"];
    (
        m["namespace"].as_str().unwrap_or_default().to_string(),
        m["name"].as_str().unwrap_or_default().to_string(),
    )
}

#[async_trait]
impl Store for KubeStore {
    async fn list(&self, kind: Kind, ns: Option<&str>) -> StoreResult<Vec<Value>> {
        let l = self
            .api(kind, ns)
            .list(&Default::default())
            .await
            .map_err(kube_err)?;
        Ok(l.items.iter().map(to_value).collect())
    }
    async fn get(&self, kind: Kind, ns: &str, name: &str) -> StoreResult<Option<Value>> {
        Ok(self
            .api(kind, Some(ns))
            .get_opt(name)
            .await
            .map_err(kube_err)?
            .as_ref()
            .map(to_value))
    }
    async fn create(&self, kind: Kind, obj: Value) -> StoreResult<Value> {
        let (ns, _) = ns_name(&obj);
        let o = from_value(kind, obj)?;
        let r = self
            .api(kind, Some(&ns))
            .create(&PostParams::default(), &o)
            .await
            .map_err(kube_err)?;
        Ok(to_value(&r))
    }
    async fn replace(&self, kind: Kind, obj: Value) -> StoreResult<Value> {
        let (ns, name) = ns_name(&obj);
        let o = from_value(kind, obj)?;
        let r = self
            .api(kind, Some(&ns))
            .replace(&name, &PostParams::default(), &o)
            .await
            .map_err(kube_err)?;
        Ok(to_value(&r))
    }
    async fn merge_patch(
        &self,
        kind: Kind,
        ns: &str,
        name: &str,
        patch: Value,
    ) -> StoreResult<Value> {
        let r = self
            .api(kind, Some(ns))
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(kube_err)?;
        Ok(to_value(&r))
    }
    async fn delete(&self, kind: Kind, ns: &str, name: &str) -> StoreResult<()> {
        match self
            .api(kind, Some(ns))
            .delete(name, &DeleteParams::foreground())
            .await
        {
            Ok(_) => Ok(()),
            Err(e) => match kube_err(e) {
                StoreError::NotFound => Ok(()),
                e => Err(e),
            },
        }
    }
    async fn ensure_namespace(&self, ns: &str) -> StoreResult<()> {
        self.ensure_namespace_labelled(ns, &BTreeMap::new()).await
    }
    async fn ensure_namespace_labelled(
        &self,
        ns: &str,
        labels: &BTreeMap<String, String>,
    ) -> StoreResult<()> {
        use k8s_openapi::api::core::v1::Namespace;
        let api: Api<Namespace> = Api::all(self.client.clone());
        if api.get_opt(ns).await.map_err(kube_err)?.is_some() {
            return Ok(());
        }
        let n: Namespace =
            serde_json::from_value(json!({"metadata": {"name": ns, "labels": labels}}))
                .expect("namespace");
        match api.create(&PostParams::default(), &n).await {
            Ok(_) => Ok(()),
            Err(e) => match kube_err(e) {
                StoreError::AlreadyExists => Ok(()),
                e => Err(e),
            },
        }
    }
    fn watch(&self, kind: Kind, ns: Option<&str>) -> BoxStream<'static, StoreResult<StoreEvent>> {
        use kube::runtime::watcher::{self, Event as W};
        let api = self.api(kind, ns);
        let mut init: Vec<Value> = Vec::new();
        watcher::watcher(api, watcher::Config::default())
            .filter_map(move |e| {
                let out = match e {
                    Ok(W::Apply(o)) => Some(Ok(StoreEvent::Applied(to_value(&o)))),
                    Ok(W::Delete(o)) => Some(Ok(StoreEvent::Deleted(to_value(&o)))),
                    Ok(W::Init) => {
                        init.clear();
                        None
                    }
                    Ok(W::InitApply(o)) => {
                        init.push(to_value(&o));
                        None
                    }
                    Ok(W::InitDone) => Some(Ok(StoreEvent::Restarted(std::mem::take(&mut init)))),
                    Err(e) => Some(Err(StoreError::Other(e.to_string()))),
                };
                futures::future::ready(out)
            })
            .boxed()
    }
    fn watch_streaming(
        &self,
        kind: Kind,
        ns: Option<&str>,
    ) -> BoxStream<'static, StoreResult<WatchEvent>> {
        use kube::runtime::watcher::{self, Event as W};
        watcher::watcher(self.api(kind, ns), watcher::Config::default())
            .map(|e| match e {
                Ok(W::Apply(o)) => Ok(WatchEvent::Applied(to_value(&o))),
                Ok(W::Delete(o)) => Ok(WatchEvent::Deleted(to_value(&o))),
                Ok(W::Init) => Ok(WatchEvent::Init),
                Ok(W::InitApply(o)) => Ok(WatchEvent::InitApply(to_value(&o))),
                Ok(W::InitDone) => Ok(WatchEvent::InitDone),
                Err(e) => Err(StoreError::Other(e.to_string())),
            })
            .boxed()
    }
}

// ---------------------------------------------------------------------------------------------
// In memory

type Key = (Kind, String, String);

struct MemInner {
    objects: BTreeMap<Key, Value>,
    rv: u64,
    /// namespaces made by `ensure_namespace` (objects never need one here)
    namespaces: std::collections::BTreeSet<String>,
}

/// An in-memory store with watches (tests, benchmarks).
#[derive(Clone)]
pub struct MemStore {
    inner: Arc<Mutex<MemInner>>,
    tx: broadcast::Sender<(Kind, StoreEvent)>,
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
                objects: BTreeMap::new(),
                rv: 0,
                namespaces: Default::default(),
            })),
            tx,
        }
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
    ) -> StoreResult<Value> {
        let (ns, name) = ns_name(&obj);
        if name.is_empty() || ns.is_empty() {
            return Err(StoreError::Invalid(
                "metadata.name and metadata.namespace are required".into(),
            ));
        }
        let mut g = self.inner.lock().expect("poisoned");
        let key = (kind, ns, name);
        let existing = g.objects.get(&key).cloned();
        match (&existing, is_create) {
            (Some(_), true) => return Err(StoreError::AlreadyExists),
            (None, false) => return Err(StoreError::NotFound),
            _ => {}
        }
        if let Some(old) = &existing {
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
            if old == &obj {
                return Ok(obj);
            }
            if has_deletion_timestamp(&obj) && !has_finalizers(&obj) {
                // the last finalizer is gone: the object goes away
                g.objects.remove(&key);
                g.rv += 1;
                let _ = self.tx.send((kind, StoreEvent::Deleted(obj.clone())));
                return Ok(obj);
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
        g.objects.insert(key, obj.clone());
        let _ = self.tx.send((kind, StoreEvent::Applied(obj.clone())));
        Ok(obj)
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
                        Ok((k, ev)) if k == kind => {
                            let obj = match &ev {
                                StoreEvent::Applied(o) | StoreEvent::Deleted(o) => o,
                                StoreEvent::Restarted(_) => continue,
                            };
                            if ns
                                .as_deref()
                                .is_none_or(|n| obj["metadata"]["namespace"] == n)
                            {
                                return Some((Ok(ev), rx));
                            }
                        }
                        Ok(_) => continue,
                        Err(broadcast::error::RecvError::Lagged(_)) => {
                            let l = me.list_sync(kind, ns.as_deref());
                            return Some((Ok(StoreEvent::Restarted(l)), rx));
                        }
                        Err(broadcast::error::RecvError::Closed) => return None,
                    }
                }
            }
        })
    }

    fn list_sync(&self, kind: Kind, ns: Option<&str>) -> Vec<Value> {
        let g = self.inner.lock().expect("poisoned");
        match ns {
            // keys sort by (kind, namespace, name): one namespace is a contiguous range
            Some(ns) => g
                .objects
                .range((kind, ns.to_string(), String::new())..)
                .take_while(|((k, n, _), _)| *k == kind && n == ns)
                .map(|(_, v)| v.clone())
                .collect(),
            None => g
                .objects
                .range((kind, String::new(), String::new())..)
                .take_while(|((k, _, _), _)| *k == kind)
                .map(|(_, v)| v.clone())
                .collect(),
        }
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
        Ok(self.list_sync(kind, ns))
    }
    async fn get(&self, kind: Kind, ns: &str, name: &str) -> StoreResult<Option<Value>> {
        let g = self.inner.lock().expect("poisoned");
        Ok(g.objects
            .get(&(kind, ns.to_string(), name.to_string()))
            .cloned())
    }
    async fn create(&self, kind: Kind, obj: Value) -> StoreResult<Value> {
        self.write(kind, obj, true, false)
    }
    async fn replace(&self, kind: Kind, obj: Value) -> StoreResult<Value> {
        self.write(kind, obj, false, true)
    }
    async fn merge_patch(
        &self,
        kind: Kind,
        ns: &str,
        name: &str,
        patch: Value,
    ) -> StoreResult<Value> {
        let mut cur = self
            .get(kind, ns, name)
            .await?
            .ok_or(StoreError::NotFound)?;
        merge_json(&mut cur, &patch);
        self.write(kind, cur, false, false)
    }
    async fn delete(&self, kind: Kind, ns: &str, name: &str) -> StoreResult<()> {
        let key = (kind, ns.to_string(), name.to_string());
        let mut g = self.inner.lock().expect("poisoned");
        let Some(cur) = g.objects.get(&key).cloned() else {
            return Ok(());
        };
        if has_finalizers(&cur) {
            // like the API server: finalizers hold the object, marked for deletion
            if !has_deletion_timestamp(&cur) {
                let mut n = cur;
                g.rv += 1;
                n["metadata"]["deletionTimestamp"] = json!(jiff::Timestamp::now().to_string());
                n["metadata"]["resourceVersion"] = json!(g.rv.to_string());
                g.objects.insert(key, n.clone());
                let _ = self.tx.send((kind, StoreEvent::Applied(n)));
            }
            return Ok(());
        }
        if let Some(o) = g.objects.remove(&key) {
            let _ = self.tx.send((kind, StoreEvent::Deleted(o)));
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
        let initial = self.list_sync(kind, ns);
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
        let rest = self.changes(kind, ns).flat_map(|e| {
            futures::stream::iter(match e {
                Ok(ev) => WatchEvent::from_store_event(ev)
                    .into_iter()
                    .map(Ok)
                    .collect(),
                Err(e) => vec![Err(e)],
            })
        });
        // the list: keys now, each object cloned as it is read (one at a time, never the whole
        // list); one deleted meanwhile is skipped (its deletion follows in `rest`)
        let keys: Vec<Key> = {
            let g = self.inner.lock().expect("poisoned");
            g.objects
                .range((kind, ns.unwrap_or_default().to_string(), String::new())..)
                .take_while(|((k, n, _), _)| *k == kind && ns.is_none_or(|ns| n == ns))
                .map(|(k, _)| k.clone())
                .collect()
        };
        let me = self.clone();
        let items = futures::stream::iter(keys).filter_map(move |k| {
            let o = me.inner.lock().expect("poisoned").objects.get(&k).cloned();
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
