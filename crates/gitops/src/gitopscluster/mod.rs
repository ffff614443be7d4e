//! The `GitOpsCluster` (`apps.open-cluster-management.io/v1beta1`) controller: Placement →
//! Argo CD cluster Secrets, as ACM's non-agent mode does.
//!
//! Watches GitOpsClusters (the controller's main stream), and through reflector stores the
//! PlacementDecisions, ManagedClusters and Argo CD cluster Secrets. A relevant change of any of
//! those (a decision, a ManagedCluster's labels or client configs, a cluster Secret, a deletion)
//! reconciles the GitOpsClusters at once (they are few; each reconcile works from the caches and
//! writes only what differs), so a label change on a ManagedCluster reaches its Secret within
//! the controller's debounce, not after a poll.
//!
//! * `context` — the controller's name, [`Error`] and the context a reconcile works from.
//! * `triggers` — which watch events are relevant changes.
//! * `reconcile` — one reconcile: checks, Placement, status.
//! * `appset_resources` — the generator ConfigMaps and the placement reader Role
//!   ([`generator_configmaps`], [`placement_role_name`]).
//! * `register` — the cluster Secrets: written, refused, removed when stale.

mod appset_resources;
mod context;
mod reconcile;
mod register;
mod triggers;

use argocd_pull_ops::api_health::{ApiHealth, rewatching};
use argocd_pull_ops::retry::{Backoff, Retries};
use argocd_pull_ops::watch::WatchEvents;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use argocd_pull_api::gitops::GitOpsCluster;
use argocd_pull_api::names;
use argocd_pull_api::ocm::cluster::{ManagedCluster, PlacementDecision};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Secret, Service};
use kube::Client;
use kube::api::Api;
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt, watcher};
use tokio_util::sync::CancellationToken;

pub use appset_resources::{
    APPSET_SERVICE_ACCOUNTS, CONFIGMAP_PLACEMENT, CONFIGMAP_PLACEMENTRULE, generator_configmaps,
    placement_role_name,
};
pub use context::Error;

use crate::GitOpsConfig;
use crate::metrics::Metrics;
use context::{ARGO_SERVER_SELECTOR, CONTROLLER, Ctx, MsaApi};
use reconcile::reconcile;
use triggers::{
    cluster_fingerprint, decision_fingerprint, meta_fingerprint, relevant_changes,
    secret_fingerprint,
};

/// Runs the controller until `shutdown`.
pub(crate) async fn run(
    client: Client,
    config: GitOpsConfig,
    metrics: Metrics,
    health: ApiHealth,
    shutdown: CancellationToken,
) {
    let (decisions, dw) = reflector::store::<PlacementDecision>();
    let (clusters, cw) = reflector::store::<ManagedCluster>();
    let (secret_store, sw) = reflector::store::<Secret>();
    // the reflected watches deliver a re-list whole (the reconciles read their stores)
    let decision_events = reflector::reflector(
        dw,
        rewatching(
            Api::<PlacementDecision>::all(client.clone()),
            watcher::Config::default(),
            health.clone(),
        ),
    )
    .relists_whole("placementdecisions")
    .controller(CONTROLLER);
    let cluster_events = reflector::reflector(
        cw,
        rewatching(
            Api::<ManagedCluster>::all(client.clone()),
            watcher::Config::default(),
            health.clone(),
        ),
    )
    .relists_whole("managedclusters")
    .controller(CONTROLLER);
    let secret_events = reflector::reflector(
        sw,
        rewatching(
            Api::<Secret>::all(client.clone()),
            watcher::Config::default()
                .labels(&format!("{}=cluster", names::LABEL_ARGOCD_SECRET_TYPE)),
            health.clone(),
        ),
    )
    .relists_whole("secrets")
    .controller(CONTROLLER);
    // Namespaces gaining or losing the authorisation label, Argo CD servers appearing.
    let namespace_events = rewatching(
        Api::<kube::core::PartialObjectMeta<Namespace>>::all(client.clone()),
        watcher::Config::default().labels(names::LABEL_GITOPS_ARGO_NAMESPACE),
        health.clone(),
    )
    .lists_as_they_come("namespaces")
    .controller(CONTROLLER);
    let server_events = rewatching(
        Api::<kube::core::PartialObjectMeta<Service>>::all(client.clone()),
        watcher::Config::default().labels(ARGO_SERVER_SELECTOR),
        health.clone(),
    )
    .lists_as_they_come("services")
    .controller(CONTROLLER);
    let triggers = futures::stream::select_all([
        relevant_changes(decision_events, decision_fingerprint).boxed(),
        relevant_changes(cluster_events, cluster_fingerprint).boxed(),
        relevant_changes(secret_events, secret_fingerprint).boxed(),
        relevant_changes(namespace_events, meta_fingerprint).boxed(),
        relevant_changes(server_events, meta_fingerprint).boxed(),
        // the end of an API-server outage: everything at once, not at the next 5 s retry
        health.recovered().boxed(),
    ]);
    metrics.controller::<Error>(CONTROLLER);
    let ctx = Arc::new(Ctx {
        client: client.clone(),
        config,
        metrics,
        decisions: decisions.clone(),
        clusters: clusters.clone(),
        secrets: secret_store.clone(),
        msa: tokio::sync::Mutex::new(MsaApi {
            checked: None,
            resource: None,
        }),
        retries: Retries::new(Backoff::GITOPS),
    });
    let ready = Arc::new(AtomicBool::new(false));
    {
        let (d, c, s) = (decisions.clone(), clusters.clone(), secret_store.clone());
        let ready = ready.clone();
        tokio::spawn(async move {
            let _ = tokio::join!(
                d.wait_until_ready(),
                c.wait_until_ready(),
                s.wait_until_ready()
            );
            ready.store(true, Ordering::SeqCst);
        });
    }
    let token = shutdown.clone();
    // the GitOpsClusters, watched as every watch (`rewatching`: retried within seconds of the
    // API server's return) and reflected into the store the reconciles read
    let (store, writer) = reflector::store::<GitOpsCluster>();
    let gitopsclusters = rewatching(
        Api::<GitOpsCluster>::all(client),
        watcher::Config::default(),
        health,
    )
    .reflect(writer)
    .relists_whole("gitopsclusters")
    .controller(CONTROLLER)
    .applied_objects()
    .map(Ok);
    let run = Controller::for_stream(gitopsclusters, store.clone())
        .with_config(ControllerConfig::default().debounce(Duration::from_millis(50)))
        .reconcile_all_on(triggers)
        .graceful_shutdown_on(async move { token.cancelled().await })
        .run(
            move |gc, ctx: Arc<Ctx>| {
                let ready = ready.load(Ordering::SeqCst);
                async move {
                    if !ready {
                        // The caches are not complete yet: a reconcile now could take a
                        // missing cluster for a deleted one. `reconcile_all_on` fires once they are.
                        return Ok(Action::requeue(Duration::from_millis(200)));
                    }
                    let started = Instant::now();
                    let key = ObjectRef::from_obj(gc.as_ref());
                    let r = reconcile(gc, ctx.clone()).await;
                    if r.is_ok() {
                        ctx.retries.succeeded(&key);
                    }
                    ctx.metrics
                        .reconciled(CONTROLLER, started.elapsed(), r.as_ref().err());
                    r
                }
            },
            |gc, err: &Error, ctx| {
                let key = ObjectRef::from_obj(gc.as_ref());
                let delay = ctx.retries.failed(key.clone());
                tracing::warn!(gitopscluster = %key, error = %err, retry_in = ?delay, "GitOpsCluster reconcile failed");
                Action::requeue(delay)
            },
            ctx,
        )
        .for_each(|r| async move {
            if let Err(e) = r {
                tracing::debug!(error = %e, "GitOpsCluster controller event");
            }
        });
    crate::until_shutdown(run, store, shutdown, CONTROLLER).await;
}
