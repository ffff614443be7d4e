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

use argocd_pull_ops::api_health::{ApiHealth, rewatching};
use argocd_pull_ops::conflict;
use async_trait::async_trait;
use futures::{StreamExt, stream::BoxStream};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use serde_json::{Value, json};
use tokio::sync::broadcast;

use crate::otel;

/// The kinds this crate synchronises.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Application,
    AppProject,
    /// Argo CD ApplicationSets (replicated between principals for cross-cluster HA).
    ApplicationSet,
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
            Kind::ApplicationSet => "ApplicationSet",
            Kind::Secret => "Secret",
            Kind::ConfigMap => "ConfigMap",
        }
    }
    pub fn api_version(self) -> &'static str {
        match self {
            Kind::Application | Kind::AppProject | Kind::ApplicationSet => "argoproj.io/v1alpha1",
            Kind::Secret | Kind::ConfigMap => "v1",
        }
    }
    pub fn plural(self) -> &'static str {
        match self {
            Kind::Application => "applications",
            Kind::AppProject => "appprojects",
            Kind::ApplicationSet => "applicationsets",
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
            "ApplicationSet" => Some(Kind::ApplicationSet),
            "Secret" => Some(Kind::Secret),
            "ConfigMap" => Some(Kind::ConfigMap),
            _ => None,
        }
    }
}

/// A change seen by a watch. Objects are shared (`Arc`): the in-memory store hands every watcher
/// the object it keeps instead of a copy each; a watcher that must own one takes it with
/// `Arc::unwrap_or_clone` (free when it is the only holder, as with a Kubernetes watch).
#[derive(Debug, Clone)]
pub enum StoreEvent {
    Applied(Arc<Value>),
    Deleted(Arc<Value>),
    /// The watch (re)started: this is the complete current list.
    Restarted(Vec<Arc<Value>>),
}

/// A change seen by [`Store::watch_streaming`]: the (re)started list arrives one object at a time
/// between `Init` and `InitDone`, so a consumer keeping a compact form never holds the whole list.
#[derive(Debug, Clone)]
pub enum WatchEvent {
    Init,
    InitApply(Arc<Value>),
    InitDone,
    Applied(Arc<Value>),
    Deleted(Arc<Value>),
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

/// A [`Store::watch`] stream in the streaming form.
fn streamed(
    s: impl futures::Stream<Item = StoreResult<StoreEvent>> + Send + 'static,
) -> impl futures::Stream<Item = StoreResult<WatchEvent>> + Send + 'static {
    s.flat_map(|e| {
        futures::stream::iter(match e {
            Ok(ev) => WatchEvent::from_store_event(ev)
                .into_iter()
                .map(Ok)
                .collect(),
            Err(e) => vec![Err(e)],
        })
    })
}

/// A [`Store::watch_streaming`] stream with each streamed list collected into `Restarted`.
fn collected(
    s: impl futures::Stream<Item = StoreResult<WatchEvent>> + Send + 'static,
) -> impl futures::Stream<Item = StoreResult<StoreEvent>> + Send + 'static {
    let mut init: Option<Vec<Arc<Value>>> = None;
    s.filter_map(move |e| {
        futures::future::ready(match e {
            Ok(WatchEvent::Init) => {
                init = Some(Vec::new());
                None
            }
            Ok(WatchEvent::InitApply(o)) => {
                init.get_or_insert_with(Vec::new).push(o);
                None
            }
            Ok(WatchEvent::InitDone) => {
                Some(Ok(StoreEvent::Restarted(init.take().unwrap_or_default())))
            }
            Ok(WatchEvent::Applied(o)) => Some(Ok(StoreEvent::Applied(o))),
            Ok(WatchEvent::Deleted(o)) => Some(Ok(StoreEvent::Deleted(o))),
            Err(e) => Some(Err(e)),
        })
    })
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

    /// A write made on top of a stale read (another writer changed the object since).
    pub fn is_conflict(&self) -> bool {
        matches!(self, StoreError::Conflict(_))
    }

    /// A write that lost a race with another writer: a conflict, or a create that another
    /// create got in before.
    pub fn is_write_race(&self) -> bool {
        matches!(self, StoreError::Conflict(_) | StoreError::AlreadyExists)
    }
}

/// A read-modify-write that kept conflicting is a conflict naming the object
/// (`conflict: ns/name: too many conflicts`); any other failure is the store's own error.
impl From<conflict::Error<StoreError>> for StoreError {
    fn from(e: conflict::Error<StoreError>) -> Self {
        match e {
            conflict::Error::Failed(e) => e,
            kept @ conflict::Error::KeptConflicting { .. } => {
                StoreError::Conflict(kept.to_string())
            }
        }
    }
}

/// How many times the agent and the principal try a read-modify-write of an object before it
/// counts as failed with [`StoreError::Conflict`].
pub const WRITE_ATTEMPTS: u32 = 5;

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
    /// [`Self::create`] for a caller that does not read the stored object back (the in-memory
    /// store then makes no copy of it).
    async fn create_only(&self, kind: Kind, obj: Value) -> StoreResult<()> {
        self.create(kind, obj).await.map(|_| ())
    }
    /// [`Self::replace`] for a caller that does not read the stored object back.
    async fn replace_only(&self, kind: Kind, obj: Value) -> StoreResult<()> {
        self.replace(kind, obj).await.map(|_| ())
    }
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
        streamed(self.watch(kind, ns)).boxed()
    }
}

// ---------------------------------------------------------------------------------------------
// Kubernetes

/// A `kube::Client`-based store (real clusters and the embedded hub).
#[derive(Clone)]
pub struct KubeStore {
    client: kube::Client,
    /// Paces the watches' retries: while the API server does not answer they wait for it (not a
    /// retry loop), and re-list as soon as it answers again.
    health: ApiHealth,
}

impl KubeStore {
    pub fn new(client: kube::Client) -> Self {
        let health = ApiHealth::new(client.clone(), HEALTH_PROBE);
        Self { client, health }
    }

    fn api(&self, kind: Kind, ns: Option<&str>) -> Api<DynamicObject> {
        let ar = kind.api_resource();
        match ns {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &ar),
            None => Api::all_with(self.client.clone(), &ar),
        }
    }
}

/// The probe of [`KubeStore`]'s [`ApiHealth`]: one Application (what every user of the store
/// reads); a 403 (an identity that may not list them cluster-wide) counts as an answer.
const HEALTH_PROBE: &str = "/apis/argoproj.io/v1alpha1/applications?limit=1";

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
    // every call in a `k8s.<verb>` span with OTLP tracing on (crate::otel::k8s)
    async fn list(&self, kind: Kind, ns: Option<&str>) -> StoreResult<Vec<Value>> {
        otel::k8s("list", kind.as_str(), ns.unwrap_or_default(), "", async {
            let l = self
                .api(kind, ns)
                .list(&Default::default())
                .await
                .map_err(kube_err)?;
            Ok(l.items.iter().map(to_value).collect())
        })
        .await
    }
    async fn get(&self, kind: Kind, ns: &str, name: &str) -> StoreResult<Option<Value>> {
        otel::k8s("get", kind.as_str(), ns, name, async {
            Ok(self
                .api(kind, Some(ns))
                .get_opt(name)
                .await
                .map_err(kube_err)?
                .as_ref()
                .map(to_value))
        })
        .await
    }
    async fn create(&self, kind: Kind, obj: Value) -> StoreResult<Value> {
        let (ns, name) = ns_name(&obj);
        otel::k8s("create", kind.as_str(), &ns, &name, async {
            let o = from_value(kind, obj)?;
            let r = self
                .api(kind, Some(&ns))
                .create(&PostParams::default(), &o)
                .await
                .map_err(kube_err)?;
            Ok(to_value(&r))
        })
        .await
    }
    async fn replace(&self, kind: Kind, obj: Value) -> StoreResult<Value> {
        let (ns, name) = ns_name(&obj);
        otel::k8s("update", kind.as_str(), &ns, &name, async {
            let o = from_value(kind, obj)?;
            let r = self
                .api(kind, Some(&ns))
                .replace(&name, &PostParams::default(), &o)
                .await
                .map_err(kube_err)?;
            Ok(to_value(&r))
        })
        .await
    }
    async fn merge_patch(
        &self,
        kind: Kind,
        ns: &str,
        name: &str,
        patch: Value,
    ) -> StoreResult<Value> {
        otel::k8s("patch", kind.as_str(), ns, name, async {
            let r = self
                .api(kind, Some(ns))
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(kube_err)?;
            Ok(to_value(&r))
        })
        .await
    }
    async fn delete(&self, kind: Kind, ns: &str, name: &str) -> StoreResult<()> {
        otel::k8s("delete", kind.as_str(), ns, name, async {
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
        })
        .await
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
        collected(self.watch_streaming(kind, ns)).boxed()
    }
    fn watch_streaming(
        &self,
        kind: Kind,
        ns: Option<&str>,
    ) -> BoxStream<'static, StoreResult<WatchEvent>> {
        use kube::runtime::watcher::{self, Event as W};
        rewatching(
            self.api(kind, ns),
            watcher::Config::default(),
            self.health.clone(),
        )
        .map(|e| match e {
            Ok(W::Apply(o)) => Ok(WatchEvent::Applied(Arc::new(to_value(&o)))),
            Ok(W::Delete(o)) => Ok(WatchEvent::Deleted(Arc::new(to_value(&o)))),
            Ok(W::Init) => Ok(WatchEvent::Init),
            Ok(W::InitApply(o)) => Ok(WatchEvent::InitApply(Arc::new(to_value(&o)))),
            Ok(W::InitDone) => Ok(WatchEvent::InitDone),
            Err(e) => Err(StoreError::Other(e.to_string())),
        })
        .boxed()
    }
}

mod mem;
pub use mem::{MemStore, merge_json};
