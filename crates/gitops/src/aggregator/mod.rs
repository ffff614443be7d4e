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
//!
//! * `work_view` — the ManifestWork as decoded from the watch ([`WorkView`]: metadata and
//!   feedback only).
//! * `index` — the pure [`Index`]: events in, [`Decision`]s out.
//! * `pumps` — the three watches, each in its own task, feeding the task of `run`.
//! * `write` — the decisions carried out: reports applied, a gone ApplicationSet's deleted.
//! * `app_conditions` — the `AdditionalStatusReport` condition on hub Applications
//!   ([`additional_status_condition`]).

mod app_conditions;
mod index;
mod name;
mod pumps;
#[cfg(test)]
mod tests;
mod work_view;
mod write;

use argocd_pull_ops::api_health::ApiHealth;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;
use kube::Client;
use kube::api::ObjectMeta;
use kube::runtime::watcher;
use tokio_util::sync::CancellationToken;

pub(crate) use app_conditions::run_app_conditions;
pub use app_conditions::{AppStatusView, AppView, additional_status_condition};
pub use index::{Decision, Index};
pub use work_view::WorkView;

use crate::GitOpsConfig;
use crate::metrics::Metrics;
use crate::report::AppSetKey;
use index::{WorkKey, key_of};
use name::CONTROLLER;
use pumps::Ev;

/// When report writes that failed are tried again (unless an outage ends first).
const WRITE_RETRY: std::time::Duration = std::time::Duration::from_secs(1);

/// Runs the aggregator until `shutdown`.
pub(crate) async fn run(
    client: Client,
    config: GitOpsConfig,
    metrics: Metrics,
    health: ApiHealth,
    shutdown: CancellationToken,
) {
    // a flush fails with its first failed write's reason
    metrics.controller::<kube::Error>(CONTROLLER);
    // Each watch runs in its own task, so that listing and decoding (the bulk of the start)
    // overlap with indexing; the index is owned by this task alone.
    let (_pumps, mut events) = pumps::spawn(&client, &health);

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
                let written = write::execute(&client, &config, &metrics, &mut index, decisions).await;
                if written.is_err() {
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
                metrics.reconciled(CONTROLLER, started.elapsed(), written.as_ref().err());
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

/// Shared handle for tests and the benchmark: the aggregator's pure index.
pub type SharedIndex = Arc<std::sync::Mutex<Index>>;
