//! The controller: a GitOpsCluster with `spec.argoCDAgentAddon` (read as v1alpha1) → its plan
//! ([`super::desired::plan`]) applied with writes only where something differs, objects no
//! longer wanted deleted, and a finalizer that removes everything on delete.
//!
//! Bad input (placement kind, missing Placement, invalid custom CR list, no principal address)
//! is found *before* anything is written: a False condition naming the fix, and a retry with
//! backoff; never a half-made set of secrets.
//!
//! * `context` — the controller's settings, [`Error`] and the context a pass works from; failed
//!   passes are retried with [`argocd_pull_ops::retry::Backoff::GITOPS`].
//! * `pass` — one pass: input checks, plan, writes, sweep.
//! * `status` — the conditions: written, rejected input reported, a pass's outcome.
//! * `cleanup` — a deleted GitOpsCluster's objects removed, then its finalizer.

mod cleanup;
mod context;
mod pass;
mod status;

use argocd_pull_ops::api_health::{ApiHealth, rewatching};
use argocd_pull_ops::retry::{Backoff, Retries};
use argocd_pull_ops::watch::WatchEvents;
use std::sync::Arc;
use std::time::{Duration, Instant};

use argocd_pull_api::ocm::cluster::PlacementDecision;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use kube::api::Api;
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use tokio_util::sync::CancellationToken;

pub use context::{AddonConfig, Error};

use crate::addon::GitOpsCluster;
use crate::addon::discovery::PRINCIPAL_SERVICES;
use crate::metrics::Metrics;
use context::{CONTROLLER, Ctx};
use pass::reconcile;

pub async fn run(
    client: Client,
    config: AddonConfig,
    metrics: Metrics,
    health: ApiHealth,
    shutdown: CancellationToken,
) {
    metrics.controller::<Error>(CONTROLLER);
    let ctx = Arc::new(Ctx {
        client: client.clone(),
        config,
        metrics,
        retries: Retries::new(Backoff::GITOPS),
    });
    let token = shutdown.clone();
    // every watch as every controller's (`rewatching`: retried within seconds of the API
    // server's return); the GitOpsClusters reflected into the store the reconciles read
    let (store, writer) = reflector::store::<GitOpsCluster>();
    let gitopsclusters = rewatching(
        Api::<GitOpsCluster>::all(client.clone()),
        watcher::Config::default(),
        health.clone(),
    )
    .reflect(writer)
    .relists_whole("gitopsclusters")
    .controller(CONTROLLER)
    .applied_objects()
    .map(Ok);
    let services = rewatching(
        Api::<Service>::all(client.clone()),
        watcher::Config::default().fields(&format!("metadata.name={}", PRINCIPAL_SERVICES[0])),
        health.clone(),
    )
    .lists_as_they_come("services")
    .controller(CONTROLLER)
    .touched_objects()
    .map(Ok);
    let decisions = rewatching(
        Api::<PlacementDecision>::all(client),
        watcher::Config::default(),
        health.clone(),
    )
    .lists_as_they_come("placementdecisions")
    .controller(CONTROLLER)
    .touched_objects()
    .map(Ok);
    let gcs = store.clone();
    let gcs_for_services = store.clone();
    let run = Controller::for_stream(gitopsclusters, store.clone())
        .with_config(ControllerConfig::default().debounce(Duration::from_millis(50)))
        // the end of an API-server outage: every GitOpsCluster at once, not at its next retry
        // (5 s doubling per failure)
        .reconcile_all_on(health.recovered())
        // The principal Service changing (a new LoadBalancer address: new SANs) reconciles the
        // GitOpsClusters of its namespace.
        .watches_stream(
            services,
            move |svc: Service| {
                let ns = svc.namespace().unwrap_or_default();
                gcs_for_services
                    .state()
                    .into_iter()
                    .filter(|g| g.namespace().as_deref() == Some(ns.as_str()))
                    .map(|g| ObjectRef::from_obj(&*g))
                    .collect::<Vec<_>>()
            },
        )
        // A PlacementDecision change reconciles the GitOpsClusters of that Placement at once.
        .watches_stream(
            decisions,
            move |d: PlacementDecision| {
                let ns = d.namespace().unwrap_or_default();
                let placement = d
                    .labels()
                    .get(argocd_pull_api::names::LABEL_PLACEMENT)
                    .cloned()
                    .unwrap_or_default();
                gcs.state()
                    .into_iter()
                    .filter(|g| {
                        g.namespace().as_deref() == Some(ns.as_str())
                            && g.spec.placement_ref.name.as_deref() == Some(placement.as_str())
                    })
                    .map(|g| ObjectRef::from_obj(&*g))
                    .collect::<Vec<_>>()
            },
        )
        .graceful_shutdown_on(async move { token.cancelled().await })
        .run(
            |gc, ctx: Arc<Ctx>| async move {
                if gc.spec.argo_cd_agent_addon.is_none() {
                    return Ok(Action::await_change());
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
            },
            |gc, err: &Error, ctx| {
                let key = format!("{}/{}", gc.namespace().unwrap_or_default(), gc.name_any());
                let delay = ctx.retries.failed(ObjectRef::from_obj(gc.as_ref()));
                tracing::warn!(gitopscluster = %key, error = %err, retry_in = ?delay, "argocd-agent-addon reconcile failed");
                Action::requeue(delay)
            },
            ctx,
        )
        .for_each(|r| async move {
            if let Err(e) = r {
                tracing::debug!(error = %e, "argocd-agent-addon controller event");
            }
        });
    crate::until_shutdown(run, store, shutdown, CONTROLLER).await;
}
