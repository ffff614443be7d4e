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

use std::collections::{BTreeSet, HashMap, HashSet};
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

/// A ManifestWork as the aggregator reads it: metadata and status only.
#[derive(Clone, Debug, Deserialize)]
pub struct WorkView {
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub status: Option<ManifestWorkStatus>,
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
    reports: HashMap<AppSetKey, MulticlusterApplicationSetReport>,
    appsets: HashSet<AppSetKey>,
    dirty: HashSet<AppSetKey>,
}

/// What a flush decided for one ApplicationSet.
#[derive(Debug)]
pub enum Decision {
    Write(AppSetKey, Box<MulticlusterApplicationSetReport>),
    /// The ApplicationSet is gone: delete the report (if any) and these works.
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

    pub fn set_report(&mut self, r: MulticlusterApplicationSetReport) {
        let k = AppSetKey {
            namespace: r.metadata.namespace.clone().unwrap_or_default(),
            name: r.metadata.name.clone().unwrap_or_default(),
        };
        self.reports.insert(k, r);
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
                let mut works: BTreeSet<WorkKey> = self
                    .by_appset
                    .get(&k)
                    .into_iter()
                    .flat_map(|m| m.keys().cloned())
                    .collect();
                // Also the works the stored report names (app = ns/app/workNs/workName).
                for cc in report
                    .and_then(|r| r.statuses.as_ref())
                    .into_iter()
                    .flat_map(|s| s.cluster_conditions.iter())
                {
                    let parts: Vec<&str> = cc.app.split('/').collect();
                    if let [_, _, wns, wname] = parts.as_slice() {
                        works.insert((wns.to_string(), wname.to_string()));
                    }
                }
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
            if report.is_some_and(|r| report::report_up_to_date(r, &desired)) {
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
    shutdown: CancellationToken,
) {
    let works = watcher(
        Api::<WorkView>::all(client.clone()),
        watcher::Config::default().labels(names::LABEL_APPLICATION_SET),
    )
    .default_backoff()
    .filter_map(|e| async move { log_err(e).map(Ev::Work) });
    let reports = watcher(
        Api::<MulticlusterApplicationSetReport>::all(client.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .filter_map(|e| async move { log_err(e).map(Ev::Report) });
    let appsets = watcher(
        Api::<kube::core::PartialObjectMeta<ApplicationSet>>::all(client.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .filter_map(|e| async move { log_err(e).map(Ev::AppSet) });
    let mut events = stream::select(
        stream::select(works.boxed(), reports.boxed()),
        appsets.boxed(),
    );

    let mut index = Index::default();
    let (mut works_ready, mut reports_ready, mut appsets_ready) = (false, false, false);
    let mut relist_works: Option<HashSet<WorkKey>> = None;
    let mut relist_appsets: Option<HashSet<AppSetKey>> = None;
    let mut deadline: Option<tokio::time::Instant> = None;
    let mut marked_all = false;
    loop {
        let sleep = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = sleep => {
                deadline = None;
                let started = Instant::now();
                let decisions = index.flush(appsets_ready);
                let ok = execute(&client, &config, &metrics, &mut index, decisions).await;
                metrics.reconciled(CONTROLLER, started.elapsed().as_secs_f64(), ok);
                metrics.report_works.set(index.works() as i64);
                metrics.report_appsets.set(index.appsets_with_works() as i64);
            }
            ev = events.next() => {
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
                        }
                        watcher::Event::Apply(w) => index.apply_work(&w.metadata, w.status.as_ref()),
                        watcher::Event::Delete(w) => index.delete_work(&w.metadata),
                    },
                    Ev::Report(e) => match e {
                        watcher::Event::Init => {}
                        watcher::Event::InitApply(r) | watcher::Event::Apply(r) => index.set_report(r),
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
                    }
                    if index.has_dirty() && deadline.is_none() {
                        deadline = Some(tokio::time::Instant::now() + config.report_debounce);
                    }
                }
            }
        }
    }
}

fn log_err<T>(e: Result<T, watcher::Error>) -> Option<T> {
    match e {
        Ok(v) => Some(v),
        Err(e) => {
            tracing::warn!(controller = CONTROLLER, error = %e, "watch error");
            None
        }
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
                    let api: Api<MulticlusterApplicationSetReport> =
                        Api::namespaced(client, &k.namespace);
                    let r = api
                        .patch(
                            &k.name,
                            &PatchParams::apply(FIELD_MANAGER).force(),
                            &Patch::Apply(&*desired),
                        )
                        .await
                        .map(Some);
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
            Ok(Some(written)) => index.set_report(written),
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
    for (ns, name) in works {
        let api: Api<ManifestWork> = Api::namespaced(client.clone(), ns);
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => metrics.write(CONTROLLER, "ManifestWork", "delete"),
            Err(e) if not_found(&e) => {}
            Err(e) => return Err(e),
        }
    }
    if has_report {
        let api: Api<MulticlusterApplicationSetReport> =
            Api::namespaced(client.clone(), &k.namespace);
        match api.delete(&k.name, &DeleteParams::default()).await {
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
    shutdown: CancellationToken,
) {
    let apps: Api<AppView> = Api::all(client.clone());
    let mut events = watcher(
        apps,
        watcher::Config::default().labels(names::LABEL_PULL_TO_OCM),
    )
    .default_backoff()
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
                Some(Err(e)) => { tracing::warn!(error = %e, "Application watch error"); continue }
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
