//! The MulticlusterApplicationSetReport aggregator.
//!
//! One task owns an index of ManifestWorks by ApplicationSet, maintained from a watch of the
//! works labelled `apps.open-cluster-management.io/application-set` (only metadata and status
//! are decoded; the payload is skipped). A change marks its ApplicationSet dirty; dirty
//! ApplicationSets are recomputed after a bounded debounce (the first change starts the timer,
//! later ones do not extend it) and their report is written only when it differs from the stored
//! one (kept from a watch of the reports). Reports whose ApplicationSet is gone are deleted with
//! their works — only once the ApplicationSet watch has listed everything, so a slow start never
//! deletes anything.

use argocd_pull_ops::api_health::{ApiHealth, rewatching};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::hash::{BuildHasher, DefaultHasher, Hasher, RandomState};
use std::sync::Arc;
use std::time::Instant;

use argocd_pull_api::argocd::{self, ApplicationSet};
use argocd_pull_api::names;
use argocd_pull_api::ocm::work::{ManifestWork, ManifestWorkStatus};
use argocd_pull_api::report::MulticlusterApplicationSetReport;
use futures::{StreamExt, stream};
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use serde::Deserialize;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use crate::report::{self, AppSetKey, WorkEntry};
use crate::{FIELD_MANAGER, GitOpsConfig};

const CONTROLLER: &str = "appset-report";

/// A ManifestWork as the aggregator reads it: a compact projection decoded straight from the
/// API response. Of the metadata only name, namespace, resourceVersion, deletionTimestamp, the
/// `application-set` label and the two annotations the report needs are kept (managedFields and
/// everything else are skipped unallocated); of the status only the feedback values of the Argo CD
/// Application manifest. The payload (`spec`) is never decoded.
#[derive(Clone, Debug, Default)]
pub struct WorkView {
    pub metadata: ObjectMeta,
    pub status: Option<ManifestWorkStatus>,
}

impl<'de> Deserialize<'de> for WorkView {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = slim::Work::deserialize(d)?;
        Ok(raw.into())
    }
}

/// The serde projection behind [`WorkView`] (undeclared fields are skipped by serde without
/// allocating, `IgnoredAny`-style).
mod slim {
    use std::collections::BTreeMap;
    use std::fmt;

    use argocd_pull_api::names;
    use argocd_pull_api::ocm::work::{
        ManifestCondition, ManifestResourceMeta, ManifestResourceStatus, ManifestWorkStatus,
        StatusFeedbackResult,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use kube::api::ObjectMeta;
    use serde::Deserialize;
    use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, Visitor};

    #[derive(Deserialize)]
    pub(super) struct Work {
        #[serde(default)]
        metadata: Meta,
        #[serde(default)]
        status: Option<Status>,
    }

    #[derive(Default, Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Meta {
        #[serde(default)]
        name: Option<String>,
        #[serde(default)]
        namespace: Option<String>,
        #[serde(default)]
        resource_version: Option<String>,
        #[serde(default)]
        deletion_timestamp: Option<Time>,
        #[serde(default, deserialize_with = "labels")]
        labels: Option<BTreeMap<String, String>>,
        #[serde(default, deserialize_with = "annotations")]
        annotations: Option<BTreeMap<String, String>>,
    }

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Status {
        #[serde(default)]
        resource_status: Option<ResourceStatus>,
    }

    #[derive(Deserialize)]
    struct ResourceStatus {
        #[serde(default)]
        manifests: Vec<Manifest>,
    }

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Manifest {
        #[serde(default)]
        resource_meta: ResourceMeta,
        #[serde(default)]
        status_feedback: Option<StatusFeedbackResult>,
    }

    #[derive(Default, Deserialize)]
    struct ResourceMeta {
        #[serde(default)]
        group: String,
        #[serde(default)]
        kind: String,
        #[serde(default)]
        resource: String,
    }

    /// A string map keeping only the keys in `keep` (the other values are skipped).
    struct FilteredMap(&'static [&'static str]);

    impl<'de> Visitor<'de> for FilteredMap {
        type Value = Option<BTreeMap<String, String>>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a map of strings")
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_none<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_map(self)
        }
        fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Self::Value, A::Error> {
            let mut out = BTreeMap::new();
            while let Some(k) = m.next_key_seed(Key(self.0))? {
                match k {
                    Some(k) => {
                        out.insert(k.to_string(), m.next_value::<String>()?);
                    }
                    None => {
                        m.next_value::<IgnoredAny>()?;
                    }
                }
            }
            Ok(Some(out))
        }
    }

    /// A map key matched against the wanted keys without allocating.
    struct Key(&'static [&'static str]);

    impl<'de> DeserializeSeed<'de> for Key {
        type Value = Option<&'static str>;
        fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_str(self)
        }
    }

    impl<'de> Visitor<'de> for Key {
        type Value = Option<&'static str>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a string key")
        }
        fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
            Ok(self.0.iter().find(|k| **k == v).copied())
        }
    }

    fn labels<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<Option<BTreeMap<String, String>>, D::Error> {
        d.deserialize_option(FilteredMap(&[names::LABEL_APPLICATION_SET]))
    }

    fn annotations<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<Option<BTreeMap<String, String>>, D::Error> {
        d.deserialize_option(FilteredMap(&[
            names::HOSTING_APPLICATIONSET,
            names::ANNOTATION_HUB_APPLICATION_NAME,
        ]))
    }

    impl From<Work> for super::WorkView {
        fn from(w: Work) -> Self {
            let m = w.metadata;
            // Only the Argo CD Application manifest's feedback is read (`application_feedback`
            // takes the first such manifest); keep just that one.
            let manifests: Vec<ManifestCondition> = w
                .status
                .and_then(|s| s.resource_status)
                .into_iter()
                .flat_map(|rs| rs.manifests)
                .find(|m| {
                    m.resource_meta.group == "argoproj.io"
                        && (m.resource_meta.resource == "applications"
                            || m.resource_meta.kind == "Application")
                })
                .map(|m| ManifestCondition {
                    resource_meta: ManifestResourceMeta {
                        group: m.resource_meta.group,
                        kind: m.resource_meta.kind,
                        resource: m.resource_meta.resource,
                        ..Default::default()
                    },
                    status_feedback: m.status_feedback,
                    conditions: Vec::new(),
                })
                .into_iter()
                .collect();
            super::WorkView {
                metadata: ObjectMeta {
                    name: m.name,
                    namespace: m.namespace,
                    resource_version: m.resource_version,
                    deletion_timestamp: m.deletion_timestamp,
                    labels: m.labels,
                    annotations: m.annotations,
                    ..Default::default()
                },
                status: Some(ManifestWorkStatus {
                    conditions: Vec::new(),
                    resource_status: Some(ManifestResourceStatus { manifests }),
                }),
            }
        }
    }
}

impl Resource for WorkView {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;
    fn kind(_: &()) -> std::borrow::Cow<'_, str> {
        ManifestWork::kind(&())
    }
    fn group(_: &()) -> std::borrow::Cow<'_, str> {
        ManifestWork::group(&())
    }
    fn version(_: &()) -> std::borrow::Cow<'_, str> {
        ManifestWork::version(&())
    }
    fn plural(_: &()) -> std::borrow::Cow<'_, str> {
        ManifestWork::plural(&())
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

type WorkKey = (String, String);

fn key_of(meta: &ObjectMeta) -> (String, String) {
    (
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    )
}

/// The in-memory state of the aggregator (pure: events in, decisions out).
#[derive(Default)]
pub struct Index {
    work_appset: HashMap<WorkKey, AppSetKey>,
    by_appset: HashMap<AppSetKey, HashMap<WorkKey, WorkEntry>>,
    /// A 128-bit digest of each stored report (label and statuses) instead of the report itself:
    /// enough to write only on change, at a fraction of the memory.
    reports: HashMap<AppSetKey, u128>,
    appsets: HashSet<AppSetKey>,
    dirty: HashSet<AppSetKey>,
    digest_keys: (RandomState, RandomState),
}

/// Feeds serialised bytes to two independently keyed SipHashers (a 128-bit digest).
struct DigestWriter(DefaultHasher, DefaultHasher);

impl std::io::Write for DigestWriter {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.write(b);
        self.1.write(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// What a flush decided for one ApplicationSet.
#[derive(Debug)]
pub enum Decision {
    Write(AppSetKey, Box<MulticlusterApplicationSetReport>),
    /// The ApplicationSet is gone: delete the report (if any) and these works (plus, when it
    /// has a report, the works the report names — read when deleting).
    Delete(AppSetKey, bool, Vec<WorkKey>),
}

impl Index {
    /// A work was added or changed.
    pub fn apply_work(&mut self, meta: &ObjectMeta, status: Option<&ManifestWorkStatus>) {
        let key = key_of(meta);
        let appset = if meta.deletion_timestamp.is_some() {
            None
        } else {
            report::work_appset(meta)
        };
        let Some(appset) = appset else {
            self.delete_work(meta);
            return;
        };
        let entry = report::work_entry(&appset, meta, status);
        if let Some(old) = self.work_appset.insert(key.clone(), appset.clone())
            && old != appset
        {
            self.remove_entry(&old, &key);
        }
        let works = self.by_appset.entry(appset.clone()).or_default();
        if works.get(&key) != Some(&entry) {
            works.insert(key, entry);
            self.dirty.insert(appset);
        }
    }

    /// A work was deleted.
    pub fn delete_work(&mut self, meta: &ObjectMeta) {
        let key = key_of(meta);
        if let Some(old) = self.work_appset.remove(&key) {
            self.remove_entry(&old, &key);
        }
    }

    fn remove_entry(&mut self, appset: &AppSetKey, key: &WorkKey) {
        if let Some(works) = self.by_appset.get_mut(appset) {
            works.remove(key);
            if works.is_empty() {
                self.by_appset.remove(appset);
            }
        }
        self.dirty.insert(appset.clone());
    }

    /// The work list was relisted: drop works no longer present.
    pub fn retain_works(&mut self, present: &HashSet<WorkKey>) {
        let gone: Vec<ObjectMeta> = self
            .work_appset
            .keys()
            .filter(|k| !present.contains(*k))
            .map(|(ns, name)| ObjectMeta {
                namespace: Some(ns.clone()),
                name: Some(name.clone()),
                ..Default::default()
            })
            .collect();
        for m in gone {
            self.delete_work(&m);
        }
    }

    pub fn set_report(&mut self, r: &MulticlusterApplicationSetReport) {
        let k = AppSetKey {
            namespace: r.metadata.namespace.clone().unwrap_or_default(),
            name: r.metadata.name.clone().unwrap_or_default(),
        };
        let d = self.digest(r);
        self.reports.insert(k, d);
    }

    /// The digest of what [`report::report_up_to_date`] compares: the `hosting-applicationset`
    /// label and the statuses.
    fn digest(&self, r: &MulticlusterApplicationSetReport) -> u128 {
        let label = r
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(names::HOSTING_APPLICATIONSET));
        let mut w = DigestWriter(
            self.digest_keys.0.build_hasher(),
            self.digest_keys.1.build_hasher(),
        );
        // Serialising plain data into a hasher cannot fail.
        let _ = serde_json::to_writer(&mut w, &(label, &r.statuses));
        (u128::from(w.0.finish()) << 64) | u128::from(w.1.finish())
    }

    pub fn remove_report(&mut self, ns: &str, name: &str) {
        let k = AppSetKey {
            namespace: ns.into(),
            name: name.into(),
        };
        if self.reports.remove(&k).is_some() {
            // Deleted by someone else while the ApplicationSet still has works: write it again.
            self.dirty.insert(k);
        }
    }

    pub fn set_appset(&mut self, k: AppSetKey, present: bool) {
        let changed = if present {
            self.appsets.insert(k.clone())
        } else {
            self.appsets.remove(&k)
        };
        if changed {
            self.dirty.insert(k);
        }
    }

    pub fn retain_appsets(&mut self, present: HashSet<AppSetKey>) {
        for k in self.appsets.symmetric_difference(&present) {
            self.dirty.insert(k.clone());
        }
        self.appsets = present;
    }

    /// Marks every ApplicationSet with works or a report dirty (after the initial lists).
    pub fn mark_all(&mut self) {
        let keys: Vec<AppSetKey> = self
            .by_appset
            .keys()
            .chain(self.reports.keys())
            .cloned()
            .collect();
        self.dirty.extend(keys);
    }

    pub fn has_dirty(&self) -> bool {
        !self.dirty.is_empty()
    }

    pub fn works(&self) -> usize {
        self.work_appset.len()
    }

    pub fn appsets_with_works(&self) -> usize {
        self.by_appset.len()
    }

    /// The desired report of one ApplicationSet from the index.
    pub fn desired(&self, k: &AppSetKey) -> MulticlusterApplicationSetReport {
        let entries = self.by_appset.get(k).into_iter().flat_map(|m| m.values());
        report::report(k, report::aggregate(entries))
    }

    /// Decides what to write for the dirty ApplicationSets. `appsets_known`: the ApplicationSet
    /// list is complete (otherwise nothing is deleted).
    pub fn flush(&mut self, appsets_known: bool) -> Vec<Decision> {
        let mut dirty: Vec<AppSetKey> = self.dirty.drain().collect();
        dirty.sort();
        let mut out = Vec::new();
        for k in dirty {
            let has_works = self.by_appset.contains_key(&k);
            let report = self.reports.get(&k);
            if appsets_known && !self.appsets.contains(&k) {
                if !has_works && report.is_none() {
                    continue;
                }
                let works: BTreeSet<WorkKey> = self
                    .by_appset
                    .get(&k)
                    .into_iter()
                    .flat_map(|m| m.keys().cloned())
                    .collect();
                out.push(Decision::Delete(
                    k,
                    report.is_some(),
                    works.into_iter().collect(),
                ));
                continue;
            }
            if !has_works && report.is_none() {
                continue;
            }
            let desired = self.desired(&k);
            if report.is_some_and(|r| *r == self.digest(&desired)) {
                continue;
            }
            out.push(Decision::Write(k, Box::new(desired)));
        }
        out
    }
}

enum Ev {
    Work(watcher::Event<WorkView>),
    Report(watcher::Event<MulticlusterApplicationSetReport>),
    AppSet(watcher::Event<kube::core::PartialObjectMeta<ApplicationSet>>),
}

/// Runs the aggregator until `shutdown`.
pub(crate) async fn run(
    client: Client,
    config: GitOpsConfig,
    metrics: Metrics,
    health: ApiHealth,
    shutdown: CancellationToken,
) {
    // Each watch runs in its own task, so that listing and decoding (the bulk of the start)
    // overlap with indexing; the index is owned by this task alone.
    let (tx, mut events) = tokio::sync::mpsc::channel::<Ev>(EVENT_BUFFER);
    let mut pumps = tokio::task::JoinSet::new();
    pumps.spawn(pump(
        rewatching(
            Api::<WorkView>::all(client.clone()),
            watcher::Config::default()
                .labels(names::LABEL_APPLICATION_SET)
                .page_size(WORK_PAGE_SIZE),
            health.clone(),
        ),
        Ev::Work,
        "manifestworks",
        tx.clone(),
    ));
    pumps.spawn(pump(
        rewatching(
            Api::<MulticlusterApplicationSetReport>::all(client.clone()),
            watcher::Config::default(),
            health.clone(),
        ),
        Ev::Report,
        "multiclusterapplicationsetreports",
        tx.clone(),
    ));
    pumps.spawn(pump(
        rewatching(
            Api::<kube::core::PartialObjectMeta<ApplicationSet>>::all(client.clone()),
            watcher::Config::default(),
            health.clone(),
        ),
        Ev::AppSet,
        "applicationsets",
        tx,
    ));

    let mut recovered = std::pin::pin!(health.recovered());
    let mut index = Index::default();
    let (mut works_ready, mut reports_ready, mut appsets_ready) = (false, false, false);
    let mut relist_works: Option<HashSet<WorkKey>> = None;
    let mut relist_appsets: Option<HashSet<AppSetKey>> = None;
    let mut deadline: Option<tokio::time::Instant> = None;
    let mut marked_all = false;
    let mut first_flush = true;
    let run_started = Instant::now();
    loop {
        let sleep = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = shutdown.cancelled() => break,
            Some(()) = recovered.next() => {
                if index.has_dirty() {
                    deadline = Some(tokio::time::Instant::now());
                }
            }
            _ = sleep => {
                deadline = None;
                let started = Instant::now();
                let decisions = index.flush(appsets_ready);
                let computed = started.elapsed();
                let n = decisions.len();
                let ok = execute(&client, &config, &metrics, &mut index, decisions).await;
                if !ok {
                    // failed writes stay dirty: retried in a second, or when an outage ends
                    deadline = Some(tokio::time::Instant::now() + WRITE_RETRY);
                }
                if std::mem::take(&mut first_flush) {
                    tracing::info!(
                        controller = CONTROLLER,
                        decisions = n,
                        compute_ms = computed.as_millis() as u64,
                        total_ms = started.elapsed().as_millis() as u64,
                        since_start_ms = run_started.elapsed().as_millis() as u64,
                        "initial reports written"
                    );
                } else {
                    tracing::debug!(controller = CONTROLLER, decisions = n, compute_ms = computed.as_millis() as u64, total_ms = started.elapsed().as_millis() as u64, "reports flushed");
                }
                metrics.reconciled(CONTROLLER, started.elapsed().as_secs_f64(), ok);
                metrics.report_works.set(index.works() as i64);
                metrics.report_appsets.set(index.appsets_with_works() as i64);
            }
            ev = events.recv() => {
                let Some(ev) = ev else { break };
                match ev {
                    Ev::Work(e) => match e {
                        watcher::Event::Init => relist_works = Some(HashSet::new()),
                        watcher::Event::InitApply(w) => {
                            if let Some(s) = relist_works.as_mut() { s.insert(key_of(&w.metadata)); }
                            index.apply_work(&w.metadata, w.status.as_ref());
                        }
                        watcher::Event::InitDone => {
                            if let Some(s) = relist_works.take() { index.retain_works(&s); }
                            works_ready = true;
                            tracing::info!(controller = CONTROLLER, works = index.works(), since_start_ms = run_started.elapsed().as_millis() as u64, "work list indexed");
                        }
                        watcher::Event::Apply(w) => index.apply_work(&w.metadata, w.status.as_ref()),
                        watcher::Event::Delete(w) => index.delete_work(&w.metadata),
                    },
                    Ev::Report(e) => match e {
                        watcher::Event::Init => {}
                        watcher::Event::InitApply(r) | watcher::Event::Apply(r) => index.set_report(&r),
                        watcher::Event::InitDone => reports_ready = true,
                        watcher::Event::Delete(r) => index.remove_report(
                            r.metadata.namespace.as_deref().unwrap_or_default(),
                            r.metadata.name.as_deref().unwrap_or_default(),
                        ),
                    },
                    Ev::AppSet(e) => {
                        let k = |m: &ObjectMeta| AppSetKey {
                            namespace: m.namespace.clone().unwrap_or_default(),
                            name: m.name.clone().unwrap_or_default(),
                        };
                        match e {
                            watcher::Event::Init => relist_appsets = Some(HashSet::new()),
                            watcher::Event::InitApply(a) => {
                                if let Some(s) = relist_appsets.as_mut() { s.insert(k(&a.metadata)); }
                            }
                            watcher::Event::InitDone => {
                                index.retain_appsets(relist_appsets.take().unwrap_or_default());
                                appsets_ready = true;
                            }
                            watcher::Event::Apply(a) => index.set_appset(k(&a.metadata), a.metadata.deletion_timestamp.is_none()),
                            watcher::Event::Delete(a) => index.set_appset(k(&a.metadata), false),
                        }
                    }
                }
                if works_ready && reports_ready {
                    if !marked_all {
                        marked_all = true;
                        index.mark_all();
                        // Everything is known: the first complete flush needs no debounce.
                        deadline = Some(tokio::time::Instant::now());
                    }
                    if index.has_dirty() && deadline.is_none() {
                        deadline = Some(tokio::time::Instant::now() + config.report_debounce);
                    }
                }
            }
        }
    }
}

/// When report writes that failed are tried again (unless an outage ends first).
const WRITE_RETRY: std::time::Duration = std::time::Duration::from_secs(1);

/// Events buffered between a watch task and the aggregator.
const EVENT_BUFFER: usize = 512;
/// Page size of the initial work list. Measured at 100,000 works: 500 (kube's default) lets the
/// watch task decode one page while the server prepares the next; 5,000 was ≈ 0.5 s slower.
const WORK_PAGE_SIZE: u32 = 500;

/// Forwards one watch's events to the aggregator until it stops listening.
async fn pump<K, S>(
    stream: S,
    wrap: fn(watcher::Event<K>) -> Ev,
    resource: &'static str,
    tx: tokio::sync::mpsc::Sender<Ev>,
) where
    S: futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
    K: Send + 'static,
{
    let mut stream = std::pin::pin!(stream);
    while let Some(e) = stream.next().await {
        if let Some(e) = log_err(e, resource)
            && tx.send(wrap(e)).await.is_err()
        {
            break;
        }
    }
}

fn log_err<T>(e: Result<T, watcher::Error>, resource: &str) -> Option<T> {
    match e {
        Ok(v) => Some(v),
        Err(e) => {
            tracing::warn!(controller = CONTROLLER, resource, error = %e, "watch error; retrying");
            None
        }
    }
}

/// A MulticlusterApplicationSetReport response whose body is skipped, not decoded.
#[derive(Clone, Debug, Default, Deserialize)]
struct Unread {
    #[serde(skip)]
    metadata: ObjectMeta,
}

impl Resource for Unread {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;
    fn kind(_: &()) -> std::borrow::Cow<'_, str> {
        MulticlusterApplicationSetReport::kind(&())
    }
    fn group(_: &()) -> std::borrow::Cow<'_, str> {
        MulticlusterApplicationSetReport::group(&())
    }
    fn version(_: &()) -> std::borrow::Cow<'_, str> {
        MulticlusterApplicationSetReport::version(&())
    }
    fn plural(_: &()) -> std::borrow::Cow<'_, str> {
        MulticlusterApplicationSetReport::plural(&())
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// Carries out a flush's decisions; returns whether all succeeded (failed ones are marked dirty
/// again and retried on the next flush).
async fn execute(
    client: &Client,
    config: &GitOpsConfig,
    metrics: &Metrics,
    index: &mut Index,
    decisions: Vec<Decision>,
) -> bool {
    let results: Vec<(
        AppSetKey,
        Result<Option<MulticlusterApplicationSetReport>, kube::Error>,
    )> = stream::iter(decisions.into_iter().map(|d| {
        let client = client.clone();
        let metrics = metrics.clone();
        async move {
            match d {
                Decision::Write(k, desired) => {
                    // The response (the whole report again, with its managedFields) is not
                    // decoded: what was applied is what is remembered.
                    let api: Api<Unread> = Api::namespaced(client, &k.namespace);
                    let r = api
                        .patch(
                            &k.name,
                            &PatchParams::apply(FIELD_MANAGER).force(),
                            &Patch::Apply(&*desired),
                        )
                        .await
                        .map(|_| Some(*desired));
                    if r.is_ok() {
                        metrics.write(CONTROLLER, "MulticlusterApplicationSetReport", "apply");
                        tracing::debug!(appset = %k, "report written");
                    }
                    (k, r)
                }
                Decision::Delete(k, has_report, works) => {
                    let r = delete_appset_outputs(&client, &metrics, &k, has_report, &works).await;
                    (k, r.map(|_| None))
                }
            }
        }
    }))
    .buffer_unordered(config.report_write_concurrency.max(1))
    .collect()
    .await;
    let mut ok = true;
    for (k, r) in results {
        match r {
            Ok(Some(written)) => index.set_report(&written),
            Ok(None) => {}
            Err(e) => {
                ok = false;
                tracing::warn!(appset = %k, error = %e, "report write failed; retrying");
                index.dirty.insert(k);
            }
        }
    }
    ok
}

async fn delete_appset_outputs(
    client: &Client,
    metrics: &Metrics,
    k: &AppSetKey,
    has_report: bool,
    works: &[WorkKey],
) -> Result<(), kube::Error> {
    let not_found = |e: &kube::Error| matches!(e, kube::Error::Api(s) if s.code == 404);
    let reports: Api<MulticlusterApplicationSetReport> =
        Api::namespaced(client.clone(), &k.namespace);
    let mut works: BTreeSet<WorkKey> = works.iter().cloned().collect();
    if has_report {
        // Also the works the stored report names (app = ns/app/workNs/workName).
        let stored = match reports.get(&k.name).await {
            Ok(r) => Some(r),
            Err(e) if not_found(&e) => None,
            Err(e) => return Err(e),
        };
        for cc in stored
            .as_ref()
            .and_then(|r| r.statuses.as_ref())
            .into_iter()
            .flat_map(|s| s.cluster_conditions.iter())
        {
            let parts: Vec<&str> = cc.app.split('/').collect();
            if let [_, _, wns, wname] = parts.as_slice() {
                works.insert((wns.to_string(), wname.to_string()));
            }
        }
    }
    for (ns, name) in &works {
        let api: Api<ManifestWork> = Api::namespaced(client.clone(), ns);
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => metrics.write(CONTROLLER, "ManifestWork", "delete"),
            Err(e) if not_found(&e) => {}
            Err(e) => return Err(e),
        }
    }
    if has_report {
        match reports.delete(&k.name, &DeleteParams::default()).await {
            Ok(_) => metrics.write(CONTROLLER, "MulticlusterApplicationSetReport", "delete"),
            Err(e) if not_found(&e) => {}
            Err(e) => return Err(e),
        }
    }
    tracing::info!(appset = %k, works = works.len(), "ApplicationSet gone: report and works deleted");
    Ok(())
}

/// A hub Application as the condition writer reads it.
#[derive(Clone, Debug, Deserialize)]
pub struct AppView {
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub status: Option<AppStatusView>,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct AppStatusView {
    #[serde(default)]
    pub conditions: Option<Vec<serde_json::Value>>,
}

impl Resource for AppView {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;
    fn kind(_: &()) -> std::borrow::Cow<'_, str> {
        "Application".into()
    }
    fn group(_: &()) -> std::borrow::Cow<'_, str> {
        argocd::GROUP.into()
    }
    fn version(_: &()) -> std::borrow::Cow<'_, str> {
        argocd::VERSION.into()
    }
    fn plural(_: &()) -> std::borrow::Cow<'_, str> {
        "applications".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// The `AdditionalStatusReport` condition for a hub Application, when it needs one: owned by an
/// ApplicationSet, selected for the pull model, targeting a cluster, and without conditions.
pub fn additional_status_condition(app: &AppView) -> Option<serde_json::Value> {
    let m = &app.metadata;
    let appset = m
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.api_version == argocd::API_VERSION && o.kind == "ApplicationSet")?;
    let selected = m
        .labels
        .as_ref()
        .and_then(|l| l.get(names::LABEL_PULL_TO_OCM))
        .and_then(|v| names::parse_go_bool(v))
        == Some(true);
    let cluster = m
        .annotations
        .as_ref()
        .and_then(|a| a.get(names::ANNOTATION_OCM_MANAGED_CLUSTER))
        .filter(|c| !c.is_empty())?;
    let has_conditions = app
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| !c.is_empty());
    if !selected || has_conditions || m.deletion_timestamp.is_some() {
        return None;
    }
    Some(json!({
        "type": "AdditionalStatusReport",
        "message": report::additional_status_report_message(
            m.namespace.as_deref().unwrap_or_default(),
            m.name.as_deref().unwrap_or_default(),
            &appset.name,
            cluster,
        ),
    }))
}

/// Adds the `AdditionalStatusReport` condition to ApplicationSet-owned hub Applications that
/// have none (a merge patch of `status.conditions` only — written only while the list is empty).
pub(crate) async fn run_app_conditions(
    client: Client,
    metrics: Metrics,
    health: ApiHealth,
    shutdown: CancellationToken,
) {
    let apps: Api<AppView> = Api::all(client.clone());
    let mut events = rewatching(
        apps,
        watcher::Config::default().labels(names::LABEL_PULL_TO_OCM),
        health,
    )
    .applied_objects()
    .boxed();
    let pp = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    loop {
        let app = tokio::select! {
            _ = shutdown.cancelled() => break,
            a = events.next() => match a {
                None => break,
                Some(Err(e)) => { tracing::warn!(controller = CONTROLLER, resource = "applications", error = %e, "watch error; retrying"); continue }
                Some(Ok(a)) => a,
            },
        };
        let Some(condition) = additional_status_condition(&app) else {
            continue;
        };
        let ns = app.namespace().unwrap_or_default();
        let name = app.name_any();
        let api: Api<argocd::Application> = Api::namespaced(client.clone(), &ns);
        let patch = json!({"status": {"conditions": [condition]}});
        match api.patch(&name, &pp, &Patch::Merge(&patch)).await {
            Ok(_) => {
                metrics.write(CONTROLLER, "Application", "patch");
                tracing::debug!(application = %format!("{ns}/{name}"), "AdditionalStatusReport condition added");
            }
            Err(e) => {
                tracing::warn!(application = %format!("{ns}/{name}"), error = %e, "adding AdditionalStatusReport failed")
            }
        }
    }
}

/// Shared handle for tests and the benchmark: the aggregator's pure index.
pub type SharedIndex = Arc<std::sync::Mutex<Index>>;

#[cfg(test)]
mod tests {
    use super::*;

    fn full_work() -> serde_json::Value {
        json!({
            "apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
            "metadata": {
                "name": "c1-gb-abcde", "namespace": "c1", "resourceVersion": "42", "uid": "u",
                "labels": {names::LABEL_APPLICATION_SET: "true", "other": "x"},
                "annotations": {
                    names::HOSTING_APPLICATIONSET: "argocd/gb",
                    names::ANNOTATION_HUB_APPLICATION_NAME: "c1-gb",
                    "kubectl.kubernetes.io/last-applied-configuration": "{\"huge\": true}",
                },
                "managedFields": [{"manager": "m", "operation": "Update", "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:spec": {"f:workload": {}}}}],
            },
            "spec": {"workload": {"manifests": [{"apiVersion": "argoproj.io/v1alpha1",
                "kind": "Application", "metadata": {"name": "c1-gb"}, "spec": {"project": "default"}}]}},
            "status": {
                "conditions": [{"type": "Applied", "status": "True", "reason": "r", "message": "m",
                    "lastTransitionTime": "2026-01-01T00:00:00Z"}],
                "resourceStatus": {"manifests": [
                    {"resourceMeta": {"ordinal": 0, "group": "", "version": "v1", "kind": "ConfigMap",
                        "resource": "configmaps", "name": "cm", "namespace": "argocd"},
                     "statusFeedback": {"values": [{"name": "healthStatus",
                        "fieldValue": {"type": "String", "string": "Wrong"}}]}},
                    {"resourceMeta": {"ordinal": 1, "group": "argoproj.io", "version": "v1alpha1",
                        "kind": "Application", "resource": "applications", "name": "c1-gb", "namespace": "argocd"},
                     "statusFeedback": {"values": [
                        {"name": "healthStatus", "fieldValue": {"type": "String", "string": "Degraded"}},
                        {"name": "condition.SyncError", "fieldValue": {"type": "String", "string": "boom"}},
                        {"name": "resources.kind", "fieldValue": {"type": "JsonRaw", "jsonRaw": "[\"Service\"]"}},
                        {"name": "resources.name", "fieldValue": {"type": "JsonRaw", "jsonRaw": "[\"gb\"]"}}]},
                     "conditions": []}]}
            }
        })
    }

    #[test]
    fn compact_work_view_yields_the_same_report_entry_as_the_full_work() {
        let doc = full_work();
        let full: ManifestWork = serde_json::from_value(doc.clone()).unwrap();
        let view: WorkView = serde_json::from_slice(&serde_json::to_vec(&doc).unwrap()).unwrap();
        let appset = report::work_appset(&view.metadata).unwrap();
        assert_eq!(appset, report::work_appset(&full.metadata).unwrap());
        let entry = report::work_entry(&appset, &view.metadata, view.status.as_ref());
        assert_eq!(
            entry,
            report::work_entry(&appset, &full.metadata, full.status.as_ref())
        );
        assert_eq!(entry.condition.health_status, "Degraded");
        assert_eq!(entry.condition.conditions.len(), 1);
        assert_eq!(entry.resources.len(), 1);
        // What the watcher needs, and nothing the report does not use.
        assert_eq!(view.metadata.resource_version.as_deref(), Some("42"));
        assert_eq!(view.metadata.annotations.as_ref().unwrap().len(), 2);
        assert_eq!(view.metadata.labels.as_ref().unwrap().len(), 1);
        assert!(view.metadata.managed_fields.is_none());
    }

    #[test]
    fn compact_work_view_of_a_bare_work() {
        let view: WorkView =
            serde_json::from_value(json!({"metadata": {"name": "w", "namespace": "c",
                "labels": null, "deletionTimestamp": "2026-01-01T00:00:00Z"}}))
            .unwrap();
        assert_eq!(view.metadata.labels, None);
        assert!(view.metadata.deletion_timestamp.is_some());
        assert!(report::application_feedback(view.status.as_ref()).is_empty());
    }

    #[test]
    fn stored_report_digest_detects_any_change() {
        let mut index = Index::default();
        let meta = full_work()["metadata"].clone();
        let view: WorkView = serde_json::from_value(json!({"metadata": meta})).unwrap();
        index.apply_work(&view.metadata, None);
        let k = AppSetKey::parse("argocd/gb").unwrap();
        let desired = index.desired(&k);
        let first = index.flush(false);
        assert!(matches!(first.as_slice(), [Decision::Write(..)]));
        // Stored as written: nothing to do.
        index.set_report(&desired);
        index.mark_all();
        assert!(index.flush(false).is_empty());
        // Stored report differs (someone edited it, or the label): rewritten.
        let mut edited = desired.clone();
        edited.statuses.as_mut().unwrap().cluster_conditions[0].sync_status = "Synced".into();
        index.set_report(&edited);
        index.mark_all();
        assert!(matches!(
            index.flush(false).as_slice(),
            [Decision::Write(..)]
        ));
        let mut relabelled = desired.clone();
        relabelled.metadata.labels = None;
        index.set_report(&relabelled);
        index.mark_all();
        assert!(matches!(
            index.flush(false).as_slice(),
            [Decision::Write(..)]
        ));
    }
}
