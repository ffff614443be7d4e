//! Embedded, in-memory Kubernetes API server ("embedded hub").
//!
//! One [`Hub`] is the API store of one cluster. It serves kube-rs in process through
//! [`Hub::client`] (a `tower::Service`, no socket) and `kubectl` over HTTP through [`Hub::serve`].
//! See `crates/hub/README.md` for the supported API surface and the differences from a real
//! kube-apiserver.

mod apply;
mod crdcache;
mod discovery;
mod error;
mod handler;
mod list;
mod patch;
mod registry;
mod response;
mod selector;
mod server;
mod store;
mod table;
mod util;
mod watch;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use server::HubServer;

/// The request verbs counted by [`RequestCounters`] and matched by [`Fault`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Verb {
    Get,
    List,
    Watch,
    Create,
    Update,
    Patch,
    Delete,
    DeleteCollection,
}

impl Verb {
    /// Whether this verb changes state (create, update, patch, delete, deletecollection).
    pub fn is_write(self) -> bool {
        matches!(
            self,
            Verb::Create | Verb::Update | Verb::Patch | Verb::Delete | Verb::DeleteCollection
        )
    }
}

/// One API request, as recorded by [`Hub::record_requests`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub verb: Verb,
    /// The plural, or `<plural>/<subresource>`.
    pub resource: String,
    pub namespace: Option<String>,
    /// `None` for list, watch of a collection, create, deletecollection.
    pub name: Option<String>,
}

impl std::fmt::Display for Request {
    /// `patch applications/status argocd/app1` — one line of a traffic log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let verb = format!("{:?}", self.verb).to_lowercase();
        write!(f, "{verb} {}", self.resource)?;
        match (&self.namespace, &self.name) {
            (Some(ns), Some(n)) => write!(f, " {ns}/{n}"),
            (Some(ns), None) => write!(f, " {ns}/"),
            (None, Some(n)) => write!(f, " {n}"),
            (None, None) => Ok(()),
        }
    }
}

/// A snapshot of the API requests a [`Hub`] has answered (including failed and injected ones).
///
/// Requests on a subresource (`applications/status`) are counted under the plural
/// (`applications`) *and* under `"<plural>/<subresource>"`; [`RequestCounters::writes`] and
/// [`RequestCounters::writes_to`] count each request once.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestCounters {
    map: HashMap<(Verb, String), u64>,
}

impl RequestCounters {
    /// Requests with this verb on this plural (`"applications"`, or `"applications/status"`).
    pub fn get(&self, verb: Verb, plural: &str) -> u64 {
        self.map
            .get(&(verb, plural.to_string()))
            .copied()
            .unwrap_or(0)
    }

    /// All write requests (create, update, patch, delete, deletecollection), all resources.
    pub fn writes(&self) -> u64 {
        self.map
            .iter()
            .filter(|((v, p), _)| v.is_write() && !p.contains('/'))
            .map(|(_, n)| n)
            .sum()
    }

    /// Write requests on one plural (subresource writes included).
    pub fn writes_to(&self, plural: &str) -> u64 {
        self.map
            .iter()
            .filter(|((v, p), _)| v.is_write() && p == plural)
            .map(|(_, n)| n)
            .sum()
    }

    /// All requests of any verb on any resource.
    pub fn total(&self) -> u64 {
        self.map
            .iter()
            .filter(|((_, p), _)| !p.contains('/'))
            .map(|(_, n)| n)
            .sum()
    }

    /// The difference `self - earlier`, per key (for "no write since" assertions).
    pub fn since(&self, earlier: &RequestCounters) -> RequestCounters {
        let map = self
            .map
            .iter()
            .map(|(k, v)| (k.clone(), v - earlier.map.get(k).copied().unwrap_or(0)))
            .filter(|(_, v)| *v > 0)
            .collect();
        RequestCounters { map }
    }

    /// Every non-zero counter, sorted: `(verb, plural, count)`.
    pub fn entries(&self) -> Vec<(Verb, String, u64)> {
        let mut v: Vec<_> = self
            .map
            .iter()
            .map(|((verb, p), n)| (*verb, p.clone(), *n))
            .collect();
        v.sort();
        v
    }
}

/// An injected failure: the next `times` requests matching `verbs` on `plural` are answered with
/// `code` (409 → a real-looking Conflict, 500 → InternalError, 429 → TooManyRequests, other →
/// a generic Status) without touching the store. Plural `version` with [`Verb::Get`]: `GET
/// /version`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fault {
    pub verbs: Vec<Verb>,
    pub plural: String,
    pub code: u16,
    pub times: u32,
}

impl Fault {
    pub fn new(verbs: &[Verb], plural: &str, code: u16, times: u32) -> Fault {
        Fault {
            verbs: verbs.to_vec(),
            plural: plural.to_string(),
            code,
            times,
        }
    }

    /// The next `times` update/patch requests on `plural` answer 409 Conflict.
    pub fn conflict(plural: &str, times: u32) -> Fault {
        Fault::new(&[Verb::Update, Verb::Patch], plural, 409, times)
    }

    /// The next `times` update/patch requests on `plural` answer 500 InternalError.
    pub fn server_error(plural: &str, times: u32) -> Fault {
        Fault::new(&[Verb::Update, Verb::Patch], plural, 500, times)
    }
}

/// Tunables; [`Hub::new`] uses the defaults.
#[derive(Clone, Debug)]
pub struct HubOptions {
    /// Watch events kept per resource type for `resourceVersion` replays; a watcher that falls
    /// further behind than this is closed (it relists).
    pub history_per_type: usize,
    /// Interval of BOOKMARK events for watches with `allowWatchBookmarks=true`.
    pub bookmark_interval: Duration,
    /// Create the namespaces `default`, `kube-system`, `kube-public`, `kube-node-lease`.
    pub default_namespaces: bool,
    /// How many paginated list snapshots (`continue` tokens) are kept; older ones expire (410).
    pub list_snapshots: usize,
}

impl Default for HubOptions {
    fn default() -> Self {
        HubOptions {
            history_per_type: 10_000,
            bookmark_interval: Duration::from_secs(10),
            default_namespaces: true,
            list_snapshots: 32,
        }
    }
}

pub(crate) struct Inner {
    pub(crate) state: Mutex<store::State>,
    pub(crate) committed_rv: Arc<AtomicU64>,
    pub(crate) counters: Mutex<HashMap<(Verb, String), u64>>,
    /// The request log, when recording (see [`Hub::record_requests`]).
    pub(crate) requests: Mutex<Option<Vec<Request>>>,
    pub(crate) faults: Mutex<Vec<Fault>>,
    pub(crate) opts: HubOptions,
}

impl Inner {
    pub(crate) fn count(&self, verb: Verb, plural: &str, sub: Option<&str>) {
        let mut c = self.counters.lock().unwrap_or_else(|e| e.into_inner());
        *c.entry((verb, plural.to_string())).or_default() += 1;
        if let Some(s) = sub {
            *c.entry((verb, format!("{plural}/{s}"))).or_default() += 1;
        }
    }

    pub(crate) fn record(
        &self,
        verb: Verb,
        plural: &str,
        sub: Option<&str>,
        namespace: Option<&str>,
        name: Option<&str>,
    ) {
        let mut log = self.requests.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(log) = log.as_mut() {
            log.push(Request {
                verb,
                resource: match sub {
                    Some(s) => format!("{plural}/{s}"),
                    None => plural.to_string(),
                },
                namespace: namespace.map(str::to_string),
                name: name.map(str::to_string),
            });
        }
    }

    /// Takes one matching injected fault, if any.
    pub(crate) fn take_fault(&self, verb: Verb, plural: &str) -> Option<u16> {
        let mut f = self.faults.lock().unwrap_or_else(|e| e.into_inner());
        let idx = f
            .iter()
            .position(|x| x.times > 0 && x.plural == plural && x.verbs.contains(&verb))?;
        f[idx].times -= 1;
        let code = f[idx].code;
        if f[idx].times == 0 {
            f.remove(idx);
        }
        Some(code)
    }

    pub(crate) fn current_rv(&self) -> u64 {
        self.committed_rv.load(Ordering::SeqCst)
    }
}

/// An in-memory Kubernetes API server. Cheap to clone (an `Arc` inside); idle Hubs own no task
/// or thread.
#[derive(Clone)]
pub struct Hub {
    pub(crate) inner: Arc<Inner>,
}

impl Default for Hub {
    fn default() -> Self {
        Hub::new()
    }
}

impl std::fmt::Debug for Hub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hub")
            .field("resource_version", &self.inner.current_rv())
            .finish()
    }
}

impl Hub {
    /// A Hub serving the built-in kinds (Namespace, Secret, ConfigMap, Event, Lease,
    /// ServiceAccount, Service, RBAC, Deployment, CustomResourceDefinition).
    pub fn new() -> Hub {
        Hub::with_options(HubOptions::default())
    }

    pub fn with_options(opts: HubOptions) -> Hub {
        let committed_rv = Arc::new(AtomicU64::new(0));
        let inner = Arc::new(Inner {
            state: Mutex::new(store::State::new(&opts, committed_rv.clone())),
            committed_rv,
            counters: Mutex::new(HashMap::new()),
            requests: Mutex::new(None),
            faults: Mutex::new(Vec::new()),
            opts,
        });
        let hub = Hub { inner };
        if hub.inner.opts.default_namespaces {
            for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
                let obj = serde_json::json!({
                    "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}
                });
                hub.internal_create("namespaces", "", obj)
                    .expect("default namespace is valid");
            }
        }
        hub
    }

    /// A kube client talking to this Hub in process (no socket). Default namespace `default`.
    /// Must be called inside a Tokio runtime (kube's client spawns its request buffer task).
    pub fn client(&self) -> kube::Client {
        kube::Client::new(handler::HubService::new(self.inner.clone()), "default")
    }

    /// Serves the API over plain HTTP on `addr` (use port 0 for an ephemeral port).
    pub async fn serve(&self, addr: std::net::SocketAddr) -> anyhow::Result<HubServer> {
        server::serve(self.inner.clone(), addr).await
    }

    /// Installs (creates or replaces) every CustomResourceDefinition of a multi-document YAML
    /// stream; returns their names. Non-CRD documents are an error; nothing is installed then.
    pub fn install_crds_yaml(&self, yaml: &str) -> anyhow::Result<Vec<String>> {
        let prepared = crdcache::prepare(yaml)?;
        let mut names = Vec::new();
        for p in prepared.iter() {
            let fresh = {
                let mut st = self.inner.state.lock().unwrap_or_else(|e| e.into_inner());
                if st.get(store::CRD_KEY, "", &p.name).is_none() {
                    st.commit_crd(p);
                    true
                } else {
                    false
                }
            };
            if !fresh {
                self.internal_apply_replace(store::CRD_KEY, p.document())
                    .map_err(|e| anyhow::anyhow!("CRD {}: {}", p.name, e.message))?;
            }
            names.push(p.name.clone());
        }
        Ok(names)
    }

    /// Answers one raw HTTP request in process (no socket) and collects the response body.
    /// Meant for tests of error bodies and headers; do not use it for watches (their bodies
    /// only end at `timeoutSeconds`).
    pub async fn raw_request(
        &self,
        req: http::Request<bytes::Bytes>,
    ) -> (http::StatusCode, http::HeaderMap, bytes::Bytes) {
        use http_body_util::BodyExt;
        let req = req.map(http_body_util::Full::new);
        let resp = handler::serve_request(self.inner.clone(), req).await;
        let (parts, body) = resp.into_parts();
        let bytes = body
            .collect()
            .await
            .map(|c| c.to_bytes())
            .unwrap_or_default();
        (parts.status, parts.headers, bytes)
    }

    /// A snapshot of the requests served so far.
    pub fn counters(&self) -> RequestCounters {
        let map = self
            .inner
            .counters
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        RequestCounters { map }
    }

    /// Starts (or restarts, emptied) or stops the ordered log of API requests that
    /// [`Hub::requests`] returns. Off by default (it grows with every request).
    pub fn record_requests(&self, on: bool) {
        *self
            .inner
            .requests
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = on.then(Vec::new);
    }

    /// The API requests answered since [`Hub::record_requests`]`(true)`, in arrival order
    /// (discovery requests are not included; the same requests [`Hub::counters`] counts).
    pub fn requests(&self) -> Vec<Request> {
        self.inner
            .requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .unwrap_or_default()
    }

    /// Makes the next matching requests fail (see [`Fault`]). Faults queue in order.
    pub fn inject_fault(&self, fault: Fault) {
        if fault.times > 0 {
            self.inner
                .faults
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(fault);
        }
    }

    /// Removes every pending injected fault.
    pub fn clear_faults(&self) {
        self.inner
            .faults
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    /// The current (global, etcd-like) resourceVersion of this Hub.
    pub fn resource_version(&self) -> u64 {
        self.inner.current_rv()
    }

    /// Number of stored objects of one resource (`"applications"` or `"applications.argoproj.io"`).
    pub fn object_count(&self, resource: &str) -> usize {
        let st = self.inner.state.lock().unwrap_or_else(|e| e.into_inner());
        st.find_store(resource)
            .map(|s| s.objects.len())
            .unwrap_or(0)
    }

    fn internal_create(
        &self,
        key: &str,
        ns: &str,
        obj: serde_json::Value,
    ) -> Result<(), error::ApiError> {
        let mut st = self.inner.state.lock().unwrap_or_else(|e| e.into_inner());
        let rt = st.type_by_key(key).expect("built-in type");
        store::ops::create(&mut st, &rt, ns, obj, &store::ops::WriteOpts::default()).map(|_| ())
    }

    fn internal_apply_replace(
        &self,
        key: &str,
        obj: serde_json::Value,
    ) -> Result<(), error::ApiError> {
        let mut st = self.inner.state.lock().unwrap_or_else(|e| e.into_inner());
        let rt = st.type_by_key(key).expect("built-in type");
        store::ops::create_or_replace(&mut st, &rt, obj)
    }
}
