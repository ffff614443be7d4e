//! The watches (one per resource type, shared by the controllers), the trigger routing, the
//! controllers and the sweeper, as tasks.

use std::collections::HashMap;
use std::sync::Arc;

use argocd_pull_api::names::LABEL_PULL_TO_OCM;
use argocd_pull_api::ocm::cluster::PlacementDecision;
use argocd_pull_domain::hub_app_ref_of;
use argocd_pull_ops::CancellationToken;
use argocd_pull_ops::api_health::rewatching;
use argocd_pull_ops::watch::WatchEvents;
use futures::{StreamExt, TryStreamExt};
use kube::runtime::WatchStreamExt;
use kube::runtime::controller::{self, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Resource};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::UnboundedReceiverStream;

use crate::cache::{AppLite, ClusterLite, SpecOf, WorkLite, WorkWire};
use crate::context::{Ctx, Receivers};
use crate::fingerprint::{app_fingerprint, work_fingerprint};
use crate::{propagation, status, sweep};

/// The projection of a decoded work (see [`WorkWire::into_lite`]): a work whose spec does not
/// parse (the API server validated it against the CRD, so only a CRD newer than ours could do
/// that) is cached with the digest of an empty spec — it then differs from what its Application
/// wants, and the reconcile reads it whole and reports what is wrong.
fn settle_work(ctx: &Ctx, work: WorkWire) -> WorkLite {
    let meta = &work.metadata;
    let key = ObjectRef::<WorkLite>::new(meta.name.as_deref().unwrap_or_default())
        .within(meta.namespace.as_deref().unwrap_or_default());
    let written = ctx.recent_works.written(&key);
    match work.spec_of(written.as_deref()) {
        Ok(spec) => work.with_spec(spec),
        Err(e) => {
            tracing::warn!(work = %key, error = %e, "cannot read the spec of a ManifestWork");
            work.with_spec(SpecOf::empty())
        }
    }
}

fn settle_works(ctx: &Ctx, ev: Event<WorkWire>) -> Event<WorkLite> {
    match ev {
        Event::Apply(w) => Event::Apply(settle_work(ctx, w)),
        Event::Delete(w) => Event::Delete(settle_work(ctx, w)),
        Event::InitApply(w) => Event::InitApply(settle_work(ctx, w)),
        Event::Init => Event::Init,
        Event::InitDone => Event::InitDone,
    }
}

fn pull_labelled() -> watcher::Config {
    watcher::Config::default()
        .labels(LABEL_PULL_TO_OCM)
        .any_semantic()
}

fn app_ref_of_work(work: &WorkLite) -> Option<ObjectRef<AppLite>> {
    let r = hub_app_ref_of(work)?;
    Some(ObjectRef::new(r.name).within(r.namespace))
}

pub(crate) fn spawn_all(
    ctx: Arc<Ctx>,
    rx: Receivers,
    token: CancellationToken,
) -> Vec<JoinHandle<()>> {
    let mut tasks = Vec::new();
    // the watches' own client (see `start_split`)
    let client = ctx.watch_client.clone();

    // Applications
    {
        let ctx = ctx.clone();
        // decoded straight into the compact form (see `cache::AppLite`)
        let events = rewatching(
            Api::<AppLite>::all(client.clone()),
            pull_labelled(),
            ctx.health.clone(),
        )
        .reflect(rx.apps)
        .relists_whole("applications")
        .take_until(token.clone().cancelled_owned());
        tasks.push(tokio::spawn(async move {
            let mut events = std::pin::pin!(events);
            let mut seen: HashMap<ObjectRef<AppLite>, u64> = HashMap::new();
            while let Some(ev) = events.next().await {
                match ev {
                    Event::Apply(app) | Event::InitApply(app) => {
                        ctx.recent_apps.observe(&app);
                        let key = ObjectRef::from_obj(&app);
                        let fp = app_fingerprint(&app);
                        match seen.insert(key.clone(), fp) {
                            Some(old) if old == fp => {}
                            Some(_) => {
                                ctx.trigger_propagation(key);
                                // a label/annotation change may leave a stale work behind
                                ctx.request_sweep();
                            }
                            // first seen: no work of it can be stale yet (a work left by an
                            // earlier Application of that name went with its delete event, or
                            // with the sweep after the re-list that missed it) — no sweep, which
                            // walks every work: one per created Application made creating N
                            // Applications cost O(N²)
                            None => ctx.trigger_propagation(key),
                        }
                    }
                    Event::Delete(app) => {
                        ctx.recent_apps.observe_delete(&app);
                        seen.remove(&ObjectRef::from_obj(&app));
                        tracing::debug!(app = %ObjectRef::from_obj(&app), "Application deleted");
                        ctx.request_sweep();
                    }
                    Event::Init => {}
                    Event::InitDone => {
                        // deletes missed during a watch gap surface as missing objects after a re-list
                        ctx.request_sweep();
                    }
                }
            }
        }));
    }

    // ManifestWorks
    {
        let ctx = ctx.clone();
        // decoded straight into the compact projection (see `cache`); the spec of a version we
        // wrote ourselves is not parsed again
        let settle_ctx = ctx.clone();
        let events = rewatching(
            Api::<WorkWire>::all(client.clone()),
            pull_labelled(),
            ctx.health.clone(),
        )
        .map_ok(move |ev| settle_works(&settle_ctx, ev))
        .reflect(rx.works)
        .relists_whole("manifestworks")
        .take_until(token.clone().cancelled_owned());
        tasks.push(tokio::spawn(async move {
            let mut events = std::pin::pin!(events);
            while let Some(ev) = events.next().await {
                match ev {
                    Event::Apply(work) | Event::InitApply(work) => {
                        ctx.recent_works.observe(&work);
                        let key = ObjectRef::from_obj(&work);
                        let Some(app) = app_ref_of_work(&work) else {
                            continue;
                        };
                        if ctx.work_changed(key.clone(), work_fingerprint(&work)) {
                            ctx.trigger_propagation(app);
                        }
                        // without any feedback value there is no status to write
                        if work.metadata.deletion_timestamp.is_none() && work.has_feedback() {
                            ctx.trigger_status(key);
                        }
                    }
                    Event::Delete(work) => {
                        ctx.recent_works.observe_delete(&work);
                        ctx.forget_work(&ObjectRef::from_obj(&work));
                        if let Some(app) = app_ref_of_work(&work) {
                            // re-create it if the Application still wants it
                            ctx.trigger_propagation(app);
                        }
                    }
                    Event::Init | Event::InitDone => {}
                }
            }
        }));
    }

    // ManagedClusters (existence only)
    {
        let ctx = ctx.clone();
        let events = rewatching(
            Api::<ClusterLite>::all(client.clone()),
            watcher::Config::default(),
            ctx.health.clone(),
        )
        .reflect(rx.clusters)
        .relists_whole("managedclusters")
        .take_until(token.clone().cancelled_owned());
        tasks.push(tokio::spawn(async move {
            let mut events = std::pin::pin!(events);
            while let Some(ev) = events.next().await {
                if let Event::Apply(c) | Event::InitApply(c) = ev
                    && let Some(name) = c.metadata.name.as_deref()
                {
                    ctx.wake(name);
                }
            }
        }));
    }

    // PlacementDecisions (binding gate only)
    if let Some(writer) = rx.decisions {
        let ctx = ctx.clone();
        let events = rewatching(
            Api::<PlacementDecision>::all(client.clone()),
            watcher::Config::default(),
            ctx.health.clone(),
        )
        .modify(|d: &mut PlacementDecision| d.metadata.managed_fields = None)
        .reflect(writer)
        .relists_whole("placementdecisions")
        .take_until(token.clone().cancelled_owned());
        tasks.push(tokio::spawn(async move {
            let mut events = std::pin::pin!(events);
            while let Some(ev) = events.next().await {
                if let Event::Apply(d) | Event::InitApply(d) = ev {
                    for cluster in d.cluster_names() {
                        ctx.wake(cluster);
                    }
                }
            }
        }));
    }

    // The end of an API-server outage: every reconcile that failed meanwhile is retried now.
    {
        let ctx = ctx.clone();
        let token = token.clone();
        let mut recoveries = ctx.health.recoveries();
        tasks.push(tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = token.cancelled() => return,
                    changed = recoveries.changed() => if changed.is_err() { return },
                }
                let retried = ctx.retry_failed();
                tracing::info!(retried, "API server back: failed reconciles retried now");
            }
        }));
    }

    // Controllers and sweeper, once every cache is filled.
    let main = {
        let ctx = ctx.clone();
        let token = token.clone();
        let (propagate_rx, status_rx) = (rx.propagate_rx, rx.status_rx);
        tokio::spawn(async move {
            let ready = async {
                let _ = ctx.apps.wait_until_ready().await;
                let _ = ctx.works.wait_until_ready().await;
                let _ = ctx.clusters.wait_until_ready().await;
                if let Some(d) = &ctx.decisions {
                    let _ = d.wait_until_ready().await;
                }
            };
            tokio::select! {
                _ = ready => {}
                _ = token.cancelled() => return,
            }
            ctx.readiness.set(true);
            tracing::info!(
                applications = ctx.apps.len(),
                works = ctx.works.len(),
                clusters = ctx.clusters.len(),
                "caches filled; controllers starting"
            );
            let mut set = tokio::task::JoinSet::new();
            let cfg = controller::Config::default().concurrency(ctx.config.concurrency);
            if ctx.config.propagation {
                let queue = ctx.metrics.queue("propagation");
                let trigger = UnboundedReceiverStream::new(propagate_rx).inspect(move |_| {
                    queue.dec();
                });
                let c = Controller::for_stream(futures::stream::pending(), ctx.apps.clone())
                    .reconcile_on(trigger)
                    .with_config(cfg.clone())
                    .graceful_shutdown_on(token.clone().cancelled_owned())
                    .run(
                        propagation::reconcile,
                        propagation::error_policy,
                        ctx.clone(),
                    )
                    .for_each(|r| async move { log_result("propagation", r) });
                set.spawn(c);
            }
            if ctx.config.status {
                let queue = ctx.metrics.queue("status");
                let trigger = UnboundedReceiverStream::new(status_rx).inspect(move |_| {
                    queue.dec();
                });
                let c = Controller::for_stream(futures::stream::pending(), ctx.works.clone())
                    .reconcile_on(trigger)
                    .with_config(cfg)
                    .graceful_shutdown_on(token.clone().cancelled_owned())
                    .run(status::reconcile, status::error_policy, ctx.clone())
                    .for_each(|r| async move { log_result("status", r) });
                set.spawn(c);
            }
            if ctx.config.cleanup {
                set.spawn(sweep::sweeper(ctx.clone(), token.clone()));
            }
            while set.join_next().await.is_some() {}
        })
    };
    tasks.push(main);
    tasks
}

fn log_result<K: Resource, E: std::fmt::Display>(
    controller: &'static str,
    r: Result<(ObjectRef<K>, controller::Action), controller::Error<E, watcher::Error>>,
) where
    K::DynamicType: std::fmt::Debug,
{
    match r {
        Ok(_) => {}
        // the object left the cache before its turn (deleted): nothing to do
        Err(controller::Error::ObjectNotFound(obj)) => {
            tracing::debug!(controller, object = %obj, "object gone before reconcile")
        }
        Err(controller::Error::ReconcilerFailed(_, _)) => {} // logged by the error policy
        Err(e) => tracing::warn!(controller, error = %e, "controller error"),
    }
}
