use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use argocd_pull_api::argocd::Application;
use argocd_pull_api::ocm::cluster::PlacementDecision;
use argocd_pull_ops::admin::Readiness;
use argocd_pull_ops::api_health::ApiHealth;
use argocd_pull_ops::retry::{Backoff, Retries};
use kube::Client;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{self, ObjectRef, Store};
use tokio::sync::{Notify, mpsc};

use crate::cache::{AppLite, ClusterLite, WorkLite};
use crate::recent::Recent;
use crate::{ControllerConfig, Metrics};

pub(crate) type AppRef = ObjectRef<AppLite>;
pub(crate) type WorkRef = ObjectRef<WorkLite>;

/// The probe of [`Ctx::health`]: one Application, read from etcd (cheap at any fleet size).
const HEALTH_PROBE: &str = "/apis/argoproj.io/v1alpha1/applications?limit=1";

/// An object whose reconcile failed and is retried with backoff.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Retry {
    /// Propagation of an Application.
    App(AppRef),
    /// Status of a ManifestWork.
    Work(WorkRef),
}

/// Shared state of the controllers: caches, triggers, bookkeeping.
pub(crate) struct Ctx {
    /// Requests: reads and writes of the reconciles, the sweep, Events.
    pub client: Client,
    /// The watches (long-lived requests).
    pub watch_client: Client,
    pub config: ControllerConfig,
    pub metrics: Metrics,
    pub readiness: Readiness,
    pub apps: Store<AppLite>,
    pub works: Store<WorkLite>,
    pub clusters: Store<ClusterLite>,
    pub decisions: Option<Store<PlacementDecision>>,
    pub recent_works: Recent<WorkLite>,
    pub recent_apps: Recent<AppLite>,
    pub recorder: Recorder,
    /// Applications waiting for a cluster (to exist, or to be in a PlacementDecision).
    pub waiting: Mutex<HashMap<String, HashSet<AppRef>>>,
    /// Events already published (object, reason): published once until the problem clears.
    pub reported: Mutex<HashSet<(AppRef, &'static str)>>,
    /// Works the sweep deleted (by uid) that the cache may still hold: not deleted again.
    pub swept: Mutex<HashMap<WorkRef, String>>,
    /// Failed reconciles and their retry backoff.
    pub failures: Retries<Retry>,
    /// Whether the API server answers: an outage's end retries every failed reconcile at once.
    pub health: ApiHealth,
    pub propagate_tx: mpsc::UnboundedSender<AppRef>,
    pub status_tx: mpsc::UnboundedSender<WorkRef>,
    pub sweep_request: Notify,
    /// Per work, the fingerprint of what the propagation controller last reacted to or wrote
    /// itself (so the watch echo of our own write does not trigger another reconcile).
    pub work_fingerprints: Mutex<HashMap<WorkRef, u64>>,
    /// Works the propagation controller is writing, and whether a watch event of one arrived
    /// while its write was under way ([`Ctx::writing`]).
    pub writing: Mutex<HashMap<WorkRef, bool>>,
}

/// The writers and trigger receivers, consumed by the pumps.
pub(crate) struct Receivers {
    pub apps: Writer<AppLite>,
    pub works: Writer<WorkLite>,
    pub clusters: Writer<ClusterLite>,
    pub decisions: Option<Writer<PlacementDecision>>,
    pub propagate_rx: mpsc::UnboundedReceiver<AppRef>,
    pub status_rx: mpsc::UnboundedReceiver<WorkRef>,
}

impl Ctx {
    pub fn new(
        client: Client,
        watch_client: Client,
        config: ControllerConfig,
    ) -> (Arc<Ctx>, Receivers) {
        let (apps, apps_w) = reflector::store();
        let (works, works_w) = reflector::store();
        let (clusters, clusters_w) = reflector::store();
        let (decisions, decisions_w) = if config.binding_gate {
            let (r, w) = reflector::store();
            (Some(r), Some(w))
        } else {
            (None, None)
        };
        let (propagate_tx, propagate_rx) = mpsc::unbounded_channel();
        let (status_tx, status_rx) = mpsc::unbounded_channel();
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: config.reporter.clone(),
                instance: config.instance.clone(),
            },
        );
        // the Applications' LIST is what every controller here needs first
        let health = ApiHealth::new(client.clone(), HEALTH_PROBE);
        let retry = Backoff {
            base: config.retry_base,
            max: config.retry_max,
        };
        let ctx = Ctx {
            client,
            watch_client,
            health,
            metrics: config.metrics.clone(),
            readiness: config.readiness.clone(),
            config,
            apps,
            works,
            clusters,
            decisions,
            recent_works: Recent::default(),
            recent_apps: Recent::default(),
            recorder,
            waiting: Mutex::new(HashMap::new()),
            reported: Mutex::new(HashSet::new()),
            failures: Retries::new(retry),
            swept: Mutex::new(HashMap::new()),
            propagate_tx,
            status_tx,
            sweep_request: Notify::new(),
            work_fingerprints: Mutex::new(HashMap::new()),
            writing: Mutex::new(HashMap::new()),
        };
        (
            Arc::new(ctx),
            Receivers {
                apps: apps_w,
                works: works_w,
                clusters: clusters_w,
                decisions: decisions_w,
                propagate_rx,
                status_rx,
            },
        )
    }

    pub fn trigger_propagation(&self, app: AppRef) {
        if self.config.propagation && self.propagate_tx.send(app).is_ok() {
            self.metrics.queue("propagation").inc();
        }
    }

    pub fn trigger_status(&self, work: WorkRef) {
        if self.config.status && self.status_tx.send(work).is_ok() {
            self.metrics.queue("status").inc();
        }
    }

    pub fn request_sweep(&self) {
        if self.config.cleanup {
            self.sweep_request.notify_one();
        }
    }

    /// Records the fingerprint of `work` as seen; `true` when it differs from the last one (the
    /// propagation controller should look at the work again).
    pub fn note_work(&self, work: WorkRef, fingerprint: u64) -> bool {
        lock(&self.work_fingerprints).insert(work, fingerprint) != Some(fingerprint)
    }

    /// Marks a write of `work` (for `app`) as under way until the guard is finished or dropped.
    /// A watch event of the work that arrives meanwhile may be the echo of this very write
    /// (the watch can be faster than the write's answer): it is held ([`Ctx::work_changed`])
    /// instead of triggering a reconcile, and looked at once the answer is known.
    pub fn writing(&self, work: WorkRef, app: AppRef) -> Writing<'_> {
        lock(&self.writing).insert(work.clone(), false);
        Writing {
            ctx: self,
            work,
            app,
            open: true,
        }
    }

    /// A watch event of `work`: `true` when its Application should be propagated again — not when
    /// the work is unchanged or the echo of our own write, nor while our own write of it is under
    /// way (its writer decides once the answer is known: [`Writing::done`]).
    pub fn work_changed(&self, work: WorkRef, fingerprint: u64) -> bool {
        self.note_work(work.clone(), fingerprint) && !self.held_for_write(&work)
    }

    /// `true` when a write of `work` is under way: the event is held for the writer.
    fn held_for_write(&self, work: &WorkRef) -> bool {
        match lock(&self.writing).get_mut(work) {
            Some(held) => {
                *held = true;
                true
            }
            None => false,
        }
    }

    pub fn forget_work(&self, work: &WorkRef) {
        lock(&self.work_fingerprints).remove(work);
    }

    /// Remembers that `app` waits for `cluster`.
    pub fn wait_for_cluster(&self, cluster: &str, app: AppRef) {
        lock(&self.waiting)
            .entry(cluster.to_string())
            .or_default()
            .insert(app);
    }

    /// Re-queues the Applications waiting for `cluster`.
    pub fn wake(&self, cluster: &str) {
        let waiting = lock(&self.waiting).remove(cluster);
        for app in waiting.into_iter().flatten() {
            self.trigger_propagation(app);
        }
    }

    /// Publishes a Warning Event on the Application once per reason (until [`Ctx::resolved`]).
    pub async fn warn_once(&self, app: &Application, reason: &'static str, note: String) {
        let key = (app_ref(app), reason);
        if !lock(&self.reported).insert(key) {
            return;
        }
        let reference = kube::Resource::object_ref(app, &());
        let event = Event {
            type_: EventType::Warning,
            reason: reason.into(),
            note: Some(note),
            action: "Propagate".into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, &reference).await {
            tracing::warn!(error = %e, reason, "cannot publish an Event");
            lock(&self.reported).remove(&(app_ref(app), reason));
        }
    }

    /// The Application's problems are over: later ones are reported again.
    pub fn resolved(&self, app: &AppRef) {
        let mut reported = lock(&self.reported);
        if !reported.is_empty() {
            reported.retain(|(r, _)| r != app);
        }
    }

    /// Counts a failure of `key` and returns the delay before the retry. An error that says the
    /// API server is not there is reported to [`Ctx::health`]: the end of the outage retries
    /// `key` at once ([`Ctx::retry_failed`]), whatever the delay grew to meanwhile.
    pub fn backoff(&self, key: Retry, err: &crate::Error) -> Duration {
        if let crate::Error::Kube(e) = err {
            self.health.report(e);
        }
        self.failures.failed(key)
    }

    pub fn succeeded(&self, key: &Retry) {
        self.failures.succeeded(key);
    }

    /// The API server answers again after an outage: every failed reconcile is retried now, its
    /// backoff reset (the failures were the outage's, not the objects'), and the caches are swept
    /// (deletes of the outage show once the watches have re-listed, which sweeps again).
    pub fn retry_failed(&self) -> usize {
        let failed = self.failures.take_all();
        let n = failed.len();
        for key in failed {
            match key {
                Retry::App(app) => self.trigger_propagation(app),
                Retry::Work(work) => self.trigger_status(work),
            }
        }
        self.request_sweep();
        n
    }
}

/// The cache key of a (typed) Application.
/// A write of a work under way ([`Ctx::writing`]).
pub(crate) struct Writing<'a> {
    ctx: &'a Ctx,
    work: WorkRef,
    app: AppRef,
    open: bool,
}

impl Writing<'_> {
    /// The write was answered with `written`: remembers its fingerprint (so that its echo is
    /// not reacted to) and, when an event held meanwhile showed another version of the work (a
    /// change by someone else), triggers the Application again.
    pub fn done(mut self, written: &WorkLite) {
        self.open = false;
        let held = lock(&self.ctx.writing).remove(&self.work).unwrap_or(false);
        let other = self.ctx.note_work(
            ObjectRef::from_obj(written),
            crate::fingerprint::work_fingerprint(written),
        );
        if held && other {
            self.ctx.trigger_propagation(self.app.clone());
        }
    }
}

impl Drop for Writing<'_> {
    /// Not written (an error, or nothing to write): an event held meanwhile triggers the
    /// Application as it would have without the write.
    fn drop(&mut self) {
        if self.open && lock(&self.ctx.writing).remove(&self.work) == Some(true) {
            self.ctx.trigger_propagation(self.app.clone());
        }
    }
}

pub(crate) fn app_ref(app: &Application) -> AppRef {
    let r = ObjectRef::new(app.metadata.name.as_deref().unwrap_or_default());
    match app.metadata.namespace.as_deref() {
        Some(ns) => r.within(ns),
        None => r,
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use argocd_pull_domain::SpecDigest;

    fn work(uid: &str, digest: u8) -> WorkLite {
        let mut w = WorkLite::default();
        w.metadata.name = Some("app-1".into());
        w.metadata.namespace = Some("cluster1".into());
        w.metadata.uid = Some(uid.into());
        w.spec_digest = SpecDigest([digest; 20]);
        w
    }

    fn ctx() -> (Arc<Ctx>, Receivers) {
        let client = Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap()))
            .expect("a client (nothing is requested)");
        Ctx::new(client.clone(), client, ControllerConfig::default())
    }

    /// What the works' watch does with an event of `w`: the propagation trigger it fires.
    fn watch_event(ctx: &Ctx, w: &WorkLite, app: &AppRef) {
        if ctx.work_changed(
            ObjectRef::from_obj(w),
            crate::fingerprint::work_fingerprint(w),
        ) {
            ctx.trigger_propagation(app.clone());
        }
    }

    fn triggered(rx: &mut Receivers) -> usize {
        std::iter::from_fn(|| rx.propagate_rx.try_recv().ok()).count()
    }

    /// The watch echo of our own create, arriving before the create's answer, costs no second
    /// reconcile; a change by someone else arriving then does, and so does any event held by a
    /// write that ended without an answer.
    #[tokio::test]
    async fn an_event_during_our_write_triggers_only_when_it_is_not_our_echo() {
        let (ctx, mut rx) = ctx();
        let app = AppRef::new("app").within("argocd");
        let ours = work("u1", 1);
        let key = ObjectRef::from_obj(&ours);

        // echo before the answer
        let writing = ctx.writing(key.clone(), app.clone());
        watch_event(&ctx, &ours, &app);
        writing.done(&ours);
        assert_eq!(triggered(&mut rx), 0, "the echo of our own create");
        // echo after the answer (as before: the fingerprint is known)
        watch_event(&ctx, &ours, &app);
        assert_eq!(triggered(&mut rx), 0);

        // someone else's version seen while our update is under way
        let mine = work("u1", 2);
        let theirs = work("u1", 3);
        let writing = ctx.writing(key.clone(), app.clone());
        watch_event(&ctx, &theirs, &app);
        writing.done(&mine);
        assert_eq!(triggered(&mut rx), 1, "a change that is not ours");

        // a write that failed after an event was held
        let writing = ctx.writing(key.clone(), app.clone());
        watch_event(&ctx, &work("u1", 4), &app);
        drop(writing);
        assert_eq!(triggered(&mut rx), 1, "held by a write that got no answer");

        // nothing under way: every new version triggers, as before
        watch_event(&ctx, &work("u1", 5), &app);
        assert_eq!(triggered(&mut rx), 1);
        // a write with nothing held: no trigger of its own
        drop(ctx.writing(key, app));
        assert_eq!(triggered(&mut rx), 0);
    }
}
