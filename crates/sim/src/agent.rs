//! The OCM work-agent simulator: one hub-wide ManifestWork controller that serves every
//! registered cluster (the work's namespace names the cluster).
//!
//! Per work: adds the agent finalizer, applies each manifest in order to the cluster's Hub
//! (honouring `manifestConfigs[].updateStrategy`), deletes manifests removed from the work,
//! evaluates feedback rules, and writes `status` (work and per-manifest conditions, feedback)
//! only when it changed. Objects it applied are watched on the cluster (one watcher per cluster and
//! resource type, started on first use) so feedback follows their changes. On deletion it
//! removes what it applied per `deleteOption`, waits until those objects are gone, then removes
//! its finalizer.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::Duration;

use argocd_pull_api::Condition;
use argocd_pull_api::ocm::work::{
    DeleteOption, ManifestCondition, ManifestConfigOption, ManifestResourceMeta,
    ManifestResourceStatus, ManifestWork, ManifestWorkStatus, ResourceIdentifier,
    StatusFeedbackResult, UpdateStrategy,
};
use futures::StreamExt;
use kube::api::{
    Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, PropagationPolicy,
};
use kube::runtime::WatchStreamExt;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::debug;

use crate::feedback;
use crate::jsonpath::JsonPath;
use crate::resources::{Resolver, TypeInfo};
use crate::util::{condition, hash_json, is_subset};

/// The work agent's finalizer on ManifestWorks.
pub const WORK_FINALIZER: &str = "cluster.open-cluster-management.io/manifest-work-cleanup";
/// Annotation holding the hash of the applied manifest (OCM's `OnSpokeChange` bookkeeping).
pub const OBJECT_HASH_ANNOTATION: &str = "open-cluster-management.io/object-hash";

/// Work-agent tunables.
#[derive(Clone, Debug)]
pub struct WorkAgentConfig {
    /// Works reconciled at the same time (all clusters together).
    pub concurrency: u16,
    /// Field manager of server-side applies without an explicit one.
    pub field_manager: String,
    /// Delay before retrying a work whose apply or cleanup did not complete.
    pub retry_interval: Duration,
    /// Maximum size of a `JsonRaw` feedback value (OCM: 1024).
    pub json_raw_limit: usize,
}

impl Default for WorkAgentConfig {
    fn default() -> Self {
        WorkAgentConfig {
            concurrency: 64,
            field_manager: "work-agent".into(),
            retry_interval: Duration::from_millis(500),
            json_raw_limit: feedback::JSON_RAW_LIMIT,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error(transparent)]
    Kube(#[from] kube::Error),
    #[error("{0}")]
    Other(String),
}

/// (cluster, group, plural, namespace, name) of an applied object.
type ObjKey = (String, String, String, String, String);

struct TypeWatch {
    store: Store<DynamicObject>,
    task: JoinHandle<()>,
}

pub(crate) struct Spoke {
    name: String,
    client: Client,
    resolver: Resolver,
    watches: Mutex<HashMap<(String, String), Arc<TypeWatch>>>,
}

impl Drop for Spoke {
    fn drop(&mut self) {
        for w in self
            .watches
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .values()
        {
            w.task.abort();
        }
    }
}

/// Counters of the work agent's activity (for tests and benchmarks).
#[derive(Debug, Default)]
pub struct AgentStats {
    /// Completed reconciles of works.
    pub reconciles: std::sync::atomic::AtomicU64,
    /// Writes to managed clusters (creates, updates, applies, deletes).
    pub spoke_writes: std::sync::atomic::AtomicU64,
    /// Status writes to the hub.
    pub status_writes: std::sync::atomic::AtomicU64,
}

/// A snapshot of [`AgentStats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AgentCounts {
    pub reconciles: u64,
    pub spoke_writes: u64,
    pub status_writes: u64,
}

impl AgentStats {
    pub fn snapshot(&self) -> AgentCounts {
        use std::sync::atomic::Ordering::Relaxed;
        AgentCounts {
            reconciles: self.reconciles.load(Relaxed),
            spoke_writes: self.spoke_writes.load(Relaxed),
            status_writes: self.status_writes.load(Relaxed),
        }
    }
    fn bump(c: &std::sync::atomic::AtomicU64) {
        c.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

pub(crate) struct Agent {
    pub(crate) stats: AgentStats,
    hub: Client,
    config: WorkAgentConfig,
    spokes: RwLock<HashMap<String, Arc<Spoke>>>,
    trigger: mpsc::UnboundedSender<ObjectRef<ManifestWork>>,
    works_store: OnceLock<Store<ManifestWork>>,
    /// applied object → works (names) in its cluster that carry it.
    index: Mutex<HashMap<ObjKey, BTreeSet<String>>>,
    /// (cluster, work) → the objects it carries.
    carried: Mutex<HashMap<(String, String), Vec<ObjKey>>>,
}

/// Handle on the running agent.
pub(crate) struct AgentHandle {
    pub(crate) agent: Arc<Agent>,
    pub(crate) task: JoinHandle<()>,
}

impl Drop for AgentHandle {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub(crate) fn start(hub: Client, config: WorkAgentConfig) -> AgentHandle {
    let (tx, rx) = mpsc::unbounded_channel();
    let agent = Arc::new(Agent {
        stats: AgentStats::default(),
        hub: hub.clone(),
        config: config.clone(),
        spokes: RwLock::new(HashMap::new()),
        trigger: tx,
        works_store: OnceLock::new(),
        index: Mutex::new(HashMap::new()),
        carried: Mutex::new(HashMap::new()),
    });
    let (reader, writer) = reflector::store::<ManifestWork>();
    let _ = agent.works_store.set(reader.clone());
    // Status-only changes (our own writes) do not trigger a reconcile.
    let works = reflector::reflector(
        writer,
        watcher::watcher(Api::<ManifestWork>::all(hub), watcher::Config::default()),
    )
    .default_backoff()
    .applied_objects()
    .predicate_filter(work_predicate, Default::default());
    let ctrl = Controller::for_stream(works, reader)
        .reconcile_on(tokio_stream::wrappers::UnboundedReceiverStream::new(rx))
        .with_config(kube::runtime::controller::Config::default().concurrency(config.concurrency));
    let ctx = agent.clone();
    let task = tokio::spawn(async move {
        ctrl.run(reconcile, error_policy, ctx)
            .for_each(|r| {
                if let Err(e) = r {
                    debug!(error = %e, "work agent reconcile");
                }
                std::future::ready(())
            })
            .await;
    });
    AgentHandle { agent, task }
}

fn work_predicate(w: &ManifestWork) -> Option<u64> {
    use std::hash::{DefaultHasher, Hash, Hasher};
    let mut h = DefaultHasher::new();
    w.metadata.generation.hash(&mut h);
    w.metadata.deletion_timestamp.is_some().hash(&mut h);
    w.metadata.finalizers.hash(&mut h);
    w.metadata.uid.hash(&mut h);
    Some(h.finish())
}

fn error_policy(_w: Arc<ManifestWork>, e: &AgentError, ctx: Arc<Agent>) -> Action {
    debug!(error = %e, "work reconcile failed; retrying");
    Action::requeue(ctx.config.retry_interval)
}

impl Agent {
    pub(crate) fn register_cluster(self: &Arc<Self>, name: &str, client: Client) {
        let spoke = Arc::new(Spoke {
            name: name.to_string(),
            client,
            resolver: Resolver::default(),
            watches: Mutex::new(HashMap::new()),
        });
        self.spokes
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name.to_string(), spoke);
        self.trigger_namespace(name);
    }

    pub(crate) fn unregister_cluster(&self, name: &str) {
        self.spokes
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(name);
    }

    fn spoke(&self, name: &str) -> Option<Arc<Spoke>> {
        self.spokes
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
    }

    /// Reconciles every known work in namespace `ns` (a cluster just registered).
    fn trigger_namespace(&self, ns: &str) {
        if let Some(store) = self.works_store.get() {
            for w in store.state() {
                if w.namespace().as_deref() == Some(ns) {
                    let _ = self.trigger.send(ObjectRef::from(&*w));
                }
            }
        }
    }

    fn on_spoke_object(&self, cluster: &str, ti: &(String, String), obj: &DynamicObject) {
        let key = (
            cluster.to_string(),
            ti.0.clone(),
            ti.1.clone(),
            obj.namespace().unwrap_or_default(),
            obj.name_any(),
        );
        let works: Vec<String> = self
            .index
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default();
        for w in works {
            let _ = self.trigger.send(ObjectRef::new(&w).within(cluster));
        }
    }

    fn set_carried(&self, cluster: &str, work: &str, keys: Vec<ObjKey>) {
        let mut carried = self.carried.lock().unwrap_or_else(|e| e.into_inner());
        let mut index = self.index.lock().unwrap_or_else(|e| e.into_inner());
        let wk = (cluster.to_string(), work.to_string());
        if let Some(old) = carried.remove(&wk) {
            for k in old {
                if let Some(set) = index.get_mut(&k) {
                    set.remove(work);
                    if set.is_empty() {
                        index.remove(&k);
                    }
                }
            }
        }
        if keys.is_empty() {
            return;
        }
        for k in &keys {
            index.entry(k.clone()).or_default().insert(work.to_string());
        }
        carried.insert(wk, keys);
    }

    /// The watcher (and cache) of one resource type on one cluster, started on first use.
    fn type_watch(self: &Arc<Self>, spoke: &Arc<Spoke>, ti: &TypeInfo) -> Arc<TypeWatch> {
        let key = (ti.group.clone(), ti.plural.clone());
        let mut watches = spoke.watches.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(w) = watches.get(&key) {
            return w.clone();
        }
        let ar = ti.api_resource();
        let writer = reflector::store::Writer::<DynamicObject>::new(ar.clone());
        let reader = writer.as_reader();
        let api = Api::<DynamicObject>::all_with(spoke.client.clone(), &ar);
        let agent = Arc::downgrade(self);
        let cluster = spoke.name.clone();
        let tkey = key.clone();
        let stream =
            reflector::reflector(writer, watcher::watcher(api, watcher::Config::default()))
                .default_backoff();
        let task = tokio::spawn(async move {
            futures::pin_mut!(stream);
            while let Some(ev) = stream.next().await {
                let Some(agent) = agent.upgrade() else { return };
                match ev {
                    Ok(Event::Apply(o)) | Ok(Event::Delete(o)) | Ok(Event::InitApply(o)) => {
                        agent.on_spoke_object(&cluster, &tkey, &o)
                    }
                    Ok(_) => {}
                    Err(e) => debug!(cluster = %cluster, error = %e, "spoke watch"),
                }
            }
        });
        let w = Arc::new(TypeWatch {
            store: reader,
            task,
        });
        watches.insert(key, w.clone());
        w
    }
}

/// A manifest's identity, once parsed and resolved.
struct Resolved {
    ti: TypeInfo,
    name: String,
    namespace: String,
}

impl Resolved {
    fn meta(&self, ordinal: i32) -> ManifestResourceMeta {
        ManifestResourceMeta {
            ordinal,
            group: self.ti.group.clone(),
            version: self.ti.version.clone(),
            kind: self.ti.kind.clone(),
            resource: self.ti.plural.clone(),
            name: self.name.clone(),
            namespace: self.namespace.clone(),
        }
    }
    fn id(&self) -> ResourceIdentifier {
        ResourceIdentifier {
            group: self.ti.group.clone(),
            resource: self.ti.plural.clone(),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        }
    }
    fn api(&self, client: &Client) -> Api<DynamicObject> {
        let ar = self.ti.api_resource();
        if self.ti.namespaced {
            Api::namespaced_with(client.clone(), &self.namespace, &ar)
        } else {
            Api::all_with(client.clone(), &ar)
        }
    }
}

fn id_matches(pattern: &ResourceIdentifier, id: &ResourceIdentifier) -> bool {
    let m = |p: &str, v: &str| p == "*" || p == v;
    pattern.group == id.group
        && pattern.resource == id.resource
        && m(&pattern.name, &id.name)
        && m(&pattern.namespace, &id.namespace)
}

fn find_config<'a>(
    configs: &'a [ManifestConfigOption],
    id: &ResourceIdentifier,
) -> Option<&'a ManifestConfigOption> {
    configs
        .iter()
        .find(|c| id_matches(&c.resource_identifier, id))
}

fn is_orphaned(opt: Option<&DeleteOption>, id: &ResourceIdentifier) -> bool {
    match opt.and_then(|o| o.propagation_policy.as_deref()) {
        Some("Orphan") => true,
        Some("SelectivelyOrphan") => opt
            .and_then(|o| o.selectively_orphans.as_ref())
            .is_some_and(|s| {
                s.orphaning_rules.iter().any(|r| {
                    r.group == id.group
                        && r.resource == id.resource
                        && r.name == id.name
                        && r.namespace == id.namespace
                })
            }),
        _ => false,
    }
}

fn meta_id(m: &ManifestResourceMeta) -> ResourceIdentifier {
    ResourceIdentifier {
        group: m.group.clone(),
        resource: m.resource.clone(),
        namespace: m.namespace.clone(),
        name: m.name.clone(),
    }
}

fn meta_type(m: &ManifestResourceMeta) -> TypeInfo {
    TypeInfo {
        group: m.group.clone(),
        version: m.version.clone(),
        kind: m.kind.clone(),
        plural: m.resource.clone(),
        namespaced: !m.namespace.is_empty(),
    }
}

fn not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

fn previous_manifests(work: &ManifestWork) -> &[ManifestCondition] {
    work.status
        .as_ref()
        .and_then(|s| s.resource_status.as_ref())
        .map(|r| r.manifests.as_slice())
        .unwrap_or(&[])
}

async fn reconcile(work: Arc<ManifestWork>, agent: Arc<Agent>) -> Result<Action, AgentError> {
    let r = reconcile_work(work, &agent).await;
    AgentStats::bump(&agent.stats.reconciles);
    r
}

async fn reconcile_work(work: Arc<ManifestWork>, agent: &Arc<Agent>) -> Result<Action, AgentError> {
    let ns = work.namespace().unwrap_or_default();
    let name = work.name_any();
    let Some(spoke) = agent.spoke(&ns) else {
        // Not a cluster namespace (or the cluster is gone): not ours.
        return Ok(Action::await_change());
    };
    let works = Api::<ManifestWork>::namespaced(agent.hub.clone(), &ns);
    let finalizers = work.finalizers();
    let has_finalizer = finalizers.iter().any(|f| f == WORK_FINALIZER);

    if work.metadata.deletion_timestamp.is_some() {
        if !has_finalizer {
            return Ok(Action::await_change());
        }
        let targets: Vec<ManifestResourceMeta> = previous_manifests(&work)
            .iter()
            .map(|m| m.resource_meta.clone())
            .collect();
        let done =
            delete_resources(agent, &spoke, &targets, work.spec.delete_option.as_ref()).await?;
        if !done {
            return Ok(Action::requeue(agent.config.retry_interval));
        }
        let rest: Vec<&String> = finalizers.iter().filter(|f| *f != WORK_FINALIZER).collect();
        let patch =
            json!({"metadata": {"finalizers": rest, "resourceVersion": work.resource_version()}});
        match works
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {}
            Err(e) if not_found(&e) => {}
            Err(e) => return Err(e.into()),
        }
        agent.set_carried(&ns, &name, Vec::new());
        debug!(cluster = %ns, work = %name, "work cleaned up");
        return Ok(Action::await_change());
    }

    if !has_finalizer {
        let mut all: Vec<String> = finalizers.to_vec();
        all.push(WORK_FINALIZER.to_string());
        let patch =
            json!({"metadata": {"finalizers": all, "resourceVersion": work.resource_version()}});
        works
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }

    let generation = work.metadata.generation;
    let previous = previous_manifests(&work);
    let mut manifests_status = Vec::new();
    let mut carried = Vec::new();
    let mut current_ids = Vec::new();
    let mut all_applied = true;
    let mut available = 0usize;
    for (i, manifest) in work.spec.workload.manifests.iter().enumerate() {
        let ordinal = i as i32;
        let (mc, res) = apply_manifest(agent, &spoke, &work, ordinal, manifest, previous).await;
        if let Some(r) = &res {
            current_ids.push(r.id());
            carried.push((
                ns.clone(),
                r.ti.group.clone(),
                r.ti.plural.clone(),
                r.namespace.clone(),
                r.name.clone(),
            ));
        }
        let cond_true = |t: &str| {
            mc.conditions
                .iter()
                .any(|c| c.type_ == t && c.status == "True")
        };
        all_applied &= cond_true("Applied");
        if cond_true("Available") {
            available += 1;
        }
        manifests_status.push(mc);
    }
    agent.set_carried(&ns, &name, carried);

    // Manifests removed from the work: delete them on the cluster.
    let stale: Vec<ManifestResourceMeta> = previous
        .iter()
        .map(|m| m.resource_meta.clone())
        .filter(|m| !m.resource.is_empty() && !current_ids.contains(&meta_id(m)))
        .collect();
    if !stale.is_empty() {
        delete_resources(agent, &spoke, &stale, work.spec.delete_option.as_ref()).await?;
    }

    let total = work.spec.workload.manifests.len();
    let prev_conds: &[Condition] = work
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or(&[]);
    let conditions = vec![
        if all_applied {
            condition(
                prev_conds,
                "Applied",
                true,
                "AppliedManifestWorkComplete",
                "Apply manifest work complete",
                generation,
            )
        } else {
            condition(
                prev_conds,
                "Applied",
                false,
                "AppliedManifestWorkFailed",
                "Failed to apply manifest work",
                generation,
            )
        },
        if available == total {
            condition(
                prev_conds,
                "Available",
                true,
                "ResourcesAvailable",
                "All resources are available",
                generation,
            )
        } else {
            condition(
                prev_conds,
                "Available",
                false,
                "ResourcesNotAvailable",
                format!(
                    "{} of {total} resources are not available",
                    total - available
                ),
                generation,
            )
        },
    ];
    let status = ManifestWorkStatus {
        conditions,
        resource_status: Some(ManifestResourceStatus {
            manifests: manifests_status,
        }),
    };
    if work.status.as_ref() != Some(&status) {
        let patch = json!({"status": status});
        AgentStats::bump(&agent.stats.status_writes);
        match works
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {}
            Err(e) if not_found(&e) => return Ok(Action::await_change()),
            Err(e) => return Err(e.into()),
        }
    }
    if all_applied {
        Ok(Action::await_change())
    } else {
        Ok(Action::requeue(agent.config.retry_interval))
    }
}

/// Deletes `targets` on the cluster unless orphaned; true when all of them are gone.
async fn delete_resources(
    agent: &Agent,
    spoke: &Spoke,
    targets: &[ManifestResourceMeta],
    opt: Option<&DeleteOption>,
) -> Result<bool, AgentError> {
    let mut all_gone = true;
    for m in targets {
        if m.resource.is_empty() || is_orphaned(opt, &meta_id(m)) {
            continue;
        }
        let ti = meta_type(m);
        let ar = ti.api_resource();
        let api: Api<DynamicObject> = if m.namespace.is_empty() {
            Api::all_with(spoke.client.clone(), &ar)
        } else {
            Api::namespaced_with(spoke.client.clone(), &m.namespace, &ar)
        };
        let dp = DeleteParams {
            propagation_policy: Some(PropagationPolicy::Foreground),
            ..Default::default()
        };
        AgentStats::bump(&agent.stats.spoke_writes);
        match api.delete(&m.name, &dp).await {
            Ok(either) => {
                if either.is_left() {
                    // Still there (finalizers pending): check again later.
                    if api.get_opt(&m.name).await?.is_some() {
                        all_gone = false;
                    }
                }
            }
            Err(e) if not_found(&e) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(all_gone)
}

fn manifest_failed(
    ordinal: i32,
    meta: ManifestResourceMeta,
    prev: &[Condition],
    generation: Option<i64>,
    message: String,
) -> ManifestCondition {
    let _ = ordinal;
    ManifestCondition {
        resource_meta: meta,
        status_feedback: None,
        conditions: vec![
            condition(
                prev,
                "Applied",
                false,
                "AppliedManifestFailed",
                message,
                generation,
            ),
            condition(
                prev,
                "Available",
                false,
                "ResourceNotAvailable",
                "Resource is not available",
                generation,
            ),
        ],
    }
}

async fn apply_manifest(
    agent: &Arc<Agent>,
    spoke: &Arc<Spoke>,
    work: &ManifestWork,
    ordinal: i32,
    manifest: &Value,
    previous: &[ManifestCondition],
) -> (ManifestCondition, Option<Resolved>) {
    let generation = work.metadata.generation;
    let s = |p: &str| manifest.pointer(p).and_then(Value::as_str).unwrap_or("");
    let (api_version, kind, name) = (s("/apiVersion"), s("/kind"), s("/metadata/name"));
    let mut meta = ManifestResourceMeta {
        ordinal,
        kind: kind.to_string(),
        name: name.to_string(),
        namespace: s("/metadata/namespace").to_string(),
        ..Default::default()
    };
    let prev_for = |m: &ManifestResourceMeta| -> Vec<Condition> {
        previous
            .iter()
            .find(|p| p.resource_meta.ordinal == m.ordinal)
            .map(|p| p.conditions.clone())
            .unwrap_or_default()
    };
    if api_version.is_empty() || kind.is_empty() || name.is_empty() {
        let msg = format!("manifest {ordinal} lacks apiVersion, kind or metadata.name");
        return (
            manifest_failed(ordinal, meta.clone(), &prev_for(&meta), generation, msg),
            None,
        );
    }
    let ti = match spoke
        .resolver
        .resolve(&spoke.client, api_version, kind)
        .await
    {
        Ok(t) => t,
        Err(e) => {
            return (
                manifest_failed(ordinal, meta.clone(), &prev_for(&meta), generation, e),
                None,
            );
        }
    };
    let namespace = if ti.namespaced {
        let ns = s("/metadata/namespace");
        if ns.is_empty() { "default" } else { ns }.to_string()
    } else {
        String::new()
    };
    let res = Resolved {
        ti,
        name: name.to_string(),
        namespace,
    };
    meta = res.meta(ordinal);
    let prev = prev_for(&meta);
    let config = find_config(&work.spec.manifest_configs, &res.id());
    let strategy = config
        .and_then(|c| c.update_strategy.clone())
        .unwrap_or(UpdateStrategy {
            type_: "Update".into(),
            server_side_apply: None,
        });
    let watch = agent.type_watch(spoke, &res.ti);
    let api = res.api(&spoke.client);
    let oref = {
        let r = ObjectRef::new_with(&res.name, res.ti.api_resource());
        if res.ti.namespaced {
            r.within(&res.namespace)
        } else {
            r
        }
    };
    let live: Option<Value> = match watch.store.get(&oref) {
        Some(o) => serde_json::to_value(&*o).ok(),
        None => match api.get_opt(&res.name).await {
            Ok(o) => o.and_then(|o| serde_json::to_value(o).ok()),
            Err(e) => {
                return (
                    manifest_failed(ordinal, meta, &prev, generation, e.to_string()),
                    Some(res),
                );
            }
        },
    };

    let applied = apply_with_strategy(agent, &api, &res, manifest, &strategy, live).await;
    let (live, apply_error) = match applied {
        Ok(l) => (l, None),
        Err(e) => (None, Some(e)),
    };
    let mut conditions = Vec::new();
    match &apply_error {
        None => conditions.push(condition(
            &prev,
            "Applied",
            true,
            "AppliedManifestComplete",
            "Apply manifest complete",
            generation,
        )),
        Some(e) => conditions.push(condition(
            &prev,
            "Applied",
            false,
            "AppliedManifestFailed",
            e.clone(),
            generation,
        )),
    }
    conditions.push(if live.is_some() {
        condition(
            &prev,
            "Available",
            true,
            "ResourceAvailable",
            "Resource is available",
            generation,
        )
    } else {
        condition(
            &prev,
            "Available",
            false,
            "ResourceNotAvailable",
            "Resource is not available",
            generation,
        )
    });
    let mut status_feedback = None;
    if let Some(cfg) = config.filter(|c| !c.feedback_rules.is_empty()) {
        let (values, errors) = match &live {
            Some(l) => feedback::evaluate(
                &cfg.feedback_rules,
                &res.ti.group,
                &res.ti.kind,
                l,
                agent.config.json_raw_limit,
            ),
            None => (Vec::new(), Vec::new()),
        };
        conditions.push(if errors.is_empty() {
            condition(
                &prev,
                "StatusFeedbackSynced",
                true,
                "StatusFeedbackSynced",
                "",
                generation,
            )
        } else {
            condition(
                &prev,
                "StatusFeedbackSynced",
                false,
                "StatusFeedbackSyncFailed",
                errors.join("; "),
                generation,
            )
        });
        status_feedback = Some(StatusFeedbackResult { values });
    }
    (
        ManifestCondition {
            resource_meta: meta,
            status_feedback,
            conditions,
        },
        Some(res),
    )
}

/// Applies one manifest; returns the live object afterwards (None when absent, e.g. ReadOnly).
async fn apply_with_strategy(
    agent: &Agent,
    api: &Api<DynamicObject>,
    res: &Resolved,
    manifest: &Value,
    strategy: &UpdateStrategy,
    live: Option<Value>,
) -> Result<Option<Value>, String> {
    let mut required = manifest.clone();
    if let Some(o) = required.as_object_mut() {
        o.remove("status");
    }
    if res.ti.namespaced {
        required["metadata"]["namespace"] = json!(res.namespace);
    }
    let to_value = |o: DynamicObject| serde_json::to_value(o).map_err(|e| e.to_string());
    match strategy.type_.as_str() {
        "ReadOnly" => Ok(live),
        "CreateOnly" => match live {
            Some(l) => Ok(Some(l)),
            None => create(agent, api, &required).await.map(Some),
        },
        "Update" | "" => match live {
            None => create(agent, api, &required).await.map(Some),
            Some(l) if is_subset(&required, &l) => Ok(Some(l)),
            Some(l) => {
                let mut merged = l.clone();
                for (k, v) in required.as_object().into_iter().flatten() {
                    if k == "metadata" {
                        for (mk, mv) in v.as_object().into_iter().flatten() {
                            match (mk.as_str(), mv) {
                                ("labels" | "annotations", Value::Object(m)) => {
                                    for (lk, lv) in m {
                                        merged["metadata"][mk][lk] = lv.clone();
                                    }
                                }
                                _ => merged["metadata"][mk] = mv.clone(),
                            }
                        }
                    } else {
                        merged[k] = v.clone();
                    }
                }
                merged["metadata"]["resourceVersion"] = l["metadata"]["resourceVersion"].clone();
                let obj: DynamicObject =
                    serde_json::from_value(merged).map_err(|e| e.to_string())?;
                AgentStats::bump(&agent.stats.spoke_writes);
                let out = api
                    .replace(&res.name, &PostParams::default(), &obj)
                    .await
                    .map_err(|e| e.to_string())?;
                to_value(out).map(Some)
            }
        },
        "ServerSideApply" => {
            let ssa = strategy.server_side_apply.clone().unwrap_or_default();
            let mut patch = required.clone();
            let mut on_change = Vec::new();
            for f in &ssa.ignore_fields {
                for p in &f.json_paths {
                    let jp = JsonPath::parse(p).map_err(|e| e.to_string())?;
                    match f.condition.as_str() {
                        "OnSpokeChange" => on_change.push(jp),
                        _ => {
                            // OnSpokePresent: never written once the object exists.
                            if live.is_some() {
                                jp.remove(&mut patch);
                            }
                        }
                    }
                }
            }
            if !on_change.is_empty() {
                let hash = hash_json(&required);
                let spoke_hash = live
                    .as_ref()
                    .and_then(|l| l.pointer("/metadata/annotations"))
                    .and_then(|a| a.get(OBJECT_HASH_ANNOTATION))
                    .and_then(Value::as_str);
                if spoke_hash == Some(hash.as_str()) {
                    // The work did not change since the last apply: keep what the spoke did.
                    for jp in &on_change {
                        jp.remove(&mut patch);
                    }
                }
                patch["metadata"]["annotations"][OBJECT_HASH_ANNOTATION] = json!(hash);
            }
            if let Some(l) = &live
                && is_subset(&patch, l)
            {
                return Ok(live);
            }
            let manager = ssa
                .field_manager
                .clone()
                .unwrap_or_else(|| agent.config.field_manager.clone());
            let mut pp = PatchParams::apply(&manager);
            pp.force = ssa.force.unwrap_or(false);
            AgentStats::bump(&agent.stats.spoke_writes);
            let out = api
                .patch(&res.name, &pp, &Patch::Apply(&patch))
                .await
                .map_err(|e| e.to_string())?;
            to_value(out).map(Some)
        }
        other => Err(format!(
            "unknown update strategy type {other:?} (expected Update, CreateOnly, ServerSideApply or ReadOnly)"
        )),
    }
}

async fn create(
    agent: &Agent,
    api: &Api<DynamicObject>,
    required: &Value,
) -> Result<Value, String> {
    AgentStats::bump(&agent.stats.spoke_writes);
    let obj: DynamicObject = serde_json::from_value(required.clone()).map_err(|e| e.to_string())?;
    match api.create(&PostParams::default(), &obj).await {
        Ok(o) => serde_json::to_value(o).map_err(|e| e.to_string()),
        Err(e) => {
            debug!(error = %e, "work agent create failed");
            Err(e.to_string())
        }
    }
}
