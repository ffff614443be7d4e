//! Application → ManifestWork.

use std::sync::Arc;
use std::time::Instant;

use argocd_pull_api::argocd::Application;
use argocd_pull_api::names::{ANNOTATION_REFRESH, FINALIZER_ARGOCD_RESOURCES};
use argocd_pull_api::ocm::work::ManifestWork;
use argocd_pull_domain::{
    SpecDigest, desired_work, normalized_spec_digest, selected_cluster_of, work_metadata_differs,
    work_update_patch,
};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

use crate::cache::{AppLite, MetaOnly, WorkLite};
use crate::context::{Ctx, Retry, WorkRef, Writing, app_ref};
use crate::error::{Error, is_status};
use crate::metrics::OpLabels;
use crate::write::patch_with_retry;

const CONTROLLER: &str = crate::metrics::PROPAGATION;

/// Reconciles one selected Application (steps 2–6 of the spec; step 1, a deleted Application, is
/// the sweep's: the object is no longer in the cache), counted, timed and its failure's reason
/// counted.
pub(crate) async fn reconcile(app: Arc<AppLite>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    ctx.metrics.reconcile.started(CONTROLLER);
    let started = Instant::now();
    let r = propagate(app, ctx.clone()).await;
    let elapsed = started.elapsed();
    ctx.metrics
        .reconcile
        .finished(CONTROLLER, elapsed, r.as_ref().err());
    r
}

async fn propagate(app: Arc<AppLite>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let key = ObjectRef::from_obj(app.as_ref());
    let app = ctx
        .recent_apps
        .resolve(&key, Some(app))
        .expect("resolve keeps a cached object");
    let Some(cluster) = selected_cluster_of(app.as_ref()) else {
        // not (or no longer) selected: the sweep removes a work left behind
        return Ok(Action::await_change());
    };
    let cluster = cluster.to_string();
    // the cache keeps the spec as text: parsed once per reconcile of a selected Application
    let app = app
        .to_application()
        .map_err(|e| Error::Kube(kube::Error::SerdeError(e)))?;
    let desired = desired_work(&app, &ctx.config.work)?;
    let desired_digest = normalized_spec_digest(&desired.spec);
    let work_name = desired.metadata.name.clone().unwrap_or_default();
    let work_key = WorkRef::new(&work_name).within(&cluster);
    let existing = ctx
        .recent_works
        .resolve(&work_key, ctx.works.get(&work_key));
    // typed, for the rare reads of a whole work; writes answer with the projection
    let works: Api<ManifestWork> = Api::namespaced(ctx.client.clone(), &cluster);
    let works_lite: Api<WorkLite> = Api::namespaced(ctx.client.clone(), &cluster);

    if app.metadata.deletion_timestamp.is_some() {
        return finalize(&app, &ctx, &works_lite, existing.as_deref(), &work_name).await;
    }

    if ctx.clusters.get(&ObjectRef::new(&cluster)).is_none() {
        ctx.wait_for_cluster(&cluster, key.clone());
        ctx.warn_once(
            &app,
            "ManagedClusterNotFound",
            format!("ManagedCluster {cluster:?} does not exist; the Application is propagated once it does"),
        )
        .await;
        return Err(Error::ClusterMissing(cluster));
    }

    if let Some(decisions) = &ctx.decisions {
        let app_ns = app.namespace().unwrap_or_default();
        let bound = decisions.state().iter().any(|d| {
            d.metadata.namespace.as_deref() == Some(app_ns.as_str())
                && d.cluster_names().any(|c| c == cluster)
        });
        if !bound {
            tracing::debug!(app = %key, cluster, "no PlacementDecision in the Application's namespace lists the cluster; not propagating");
            ctx.wait_for_cluster(&cluster, key.clone());
            return Ok(Action::await_change());
        }
    }

    let pp = PostParams {
        field_manager: Some(ctx.config.field_manager.clone()),
        ..Default::default()
    };
    let writing = ctx.writing(work_key.clone(), key.clone());
    match existing.as_deref() {
        None => match create_work(&ctx, &cluster, &pp, &desired, desired_digest).await {
            Ok(created) => {
                ctx.metrics
                    .works_written
                    .get_or_create(&OpLabels { op: "create" })
                    .inc();
                tracing::info!(app = %key, work = %work_key, "ManifestWork created");
                record_work(&ctx, created, writing);
            }
            Err(e) if is_status(&e, 409) => {
                // the cache is behind (or another controller made it): compare with the live one
                let live = works.get(&work_name).await?;
                update_work(&ctx, &works_lite, &live, &desired, &key, writing).await?;
            }
            Err(e) if is_status(&e, 404) => {
                ctx.warn_once(
                    &app,
                    "ClusterNamespaceNotFound",
                    format!("namespace {cluster:?} of ManagedCluster {cluster:?} does not exist; retrying"),
                )
                .await;
                return Err(Error::NamespaceMissing(cluster));
            }
            Err(e) => return Err(e.into()),
        },
        Some(w) if w.metadata.deletion_timestamp.is_some() => {
            // being deleted (e.g. by a user); its delete event triggers a re-create
            tracing::debug!(work = %work_key, "ManifestWork is being deleted; waiting");
            return Ok(Action::await_change());
        }
        Some(w)
            if w.spec_digest == desired_digest && !work_metadata_differs(w, &desired.metadata) => {}
        Some(_) => {
            // it differs: the merge patch is computed against the whole live work (the cache
            // keeps only a digest of its spec)
            let live = works.get(&work_name).await?;
            update_work(&ctx, &works_lite, &live, &desired, &key, writing).await?;
        }
    }

    strip_propagated(&ctx, &app).await?;
    ctx.resolved(&key);
    ctx.succeeded(&Retry::App(key));
    Ok(Action::await_change())
}

/// Creates `desired` and returns the projection of what the API server stored (only the
/// metadata of the answer is decoded; the spec is the one we sent).
async fn create_work(
    ctx: &Ctx,
    namespace: &str,
    pp: &PostParams,
    desired: &ManifestWork,
    digest: SpecDigest,
) -> Result<WorkLite, kube::Error> {
    let url = <ManifestWork as kube::Resource>::url_path(&(), Some(namespace));
    let body = serde_json::to_vec(desired).map_err(kube::Error::SerdeError)?;
    let mut req = kube::core::Request::new(url)
        .create(pp, body)
        .map_err(kube::Error::BuildRequest)?;
    req.extensions_mut().insert("create");
    let answer = ctx.client.request::<MetaOnly>(req).await?;
    Ok(WorkLite::created(answer, desired, digest))
}

/// Remembers a work we wrote: read-your-writes for the next reconciles, and its fingerprint so
/// that the watch echo of the write does not trigger a reconcile of its own ([`Writing::done`]).
fn record_work(ctx: &Ctx, written: WorkLite, writing: Writing<'_>) {
    writing.done(&written);
    let cached = ctx.works.get(&ObjectRef::from_obj(&written));
    ctx.recent_works.record(written, cached);
}

async fn update_work(
    ctx: &Ctx,
    works: &Api<WorkLite>,
    existing: &ManifestWork,
    desired: &ManifestWork,
    app: &ObjectRef<AppLite>,
    writing: Writing<'_>,
) -> Result<(), Error> {
    let Some(patch) = work_update_patch(existing, desired) else {
        return Ok(());
    };
    let name = existing.name_any();
    let updated = patch_with_retry(works, &name, &ctx.config.field_manager, patch).await?;
    ctx.metrics
        .works_written
        .get_or_create(&OpLabels { op: "update" })
        .inc();
    tracing::info!(app = %app, work = %ObjectRef::from_obj(&updated), "ManifestWork updated");
    record_work(ctx, updated, writing);
    Ok(())
}

/// After propagating: the spoke owns the requested operation and refresh now; remove them from the
/// hub Application (guarded by its resourceVersion, so a newer request is never dropped unseen).
async fn strip_propagated(ctx: &Ctx, app: &Application) -> Result<(), Error> {
    let has_refresh = app.annotations().contains_key(ANNOTATION_REFRESH);
    if app.operation.is_none() && !has_refresh {
        return Ok(());
    }
    let mut patch = json!({"metadata": {"resourceVersion": app.resource_version()}});
    if app.operation.is_some() {
        patch["operation"] = Value::Null;
    }
    if has_refresh {
        patch["metadata"]["annotations"] = json!({ ANNOTATION_REFRESH: null });
    }
    let api: Api<AppLite> =
        Api::namespaced(ctx.client.clone(), &app.namespace().unwrap_or_default());
    let pp = PatchParams {
        field_manager: Some(ctx.config.field_manager.clone()),
        ..Default::default()
    };
    match api.patch(&app.name_any(), &pp, &Patch::Merge(&patch)).await {
        Ok(patched) => {
            ctx.metrics
                .app_patches
                .get_or_create(&OpLabels {
                    op: "strip_operation",
                })
                .inc();
            tracing::info!(app = %ObjectRef::from_obj(app), "operation/refresh handed to the managed cluster; removed from the hub Application");
            let cached = ctx.apps.get(&ObjectRef::from_obj(&patched));
            ctx.recent_apps.record(patched, cached);
            Ok(())
        }
        Err(e) if is_status(&e, 409) => Err(Error::Conflict(format!(
            "Application {}",
            ObjectRef::from_obj(app)
        ))),
        Err(e) if is_status(&e, 404) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// The Application is being deleted: delete its work, then remove Argo CD's resources finalizer
/// (only that one; none of our own is ever added).
async fn finalize(
    app: &Application,
    ctx: &Ctx,
    works: &Api<WorkLite>,
    existing: Option<&WorkLite>,
    work_name: &str,
) -> Result<Action, Error> {
    let key = app_ref(app);
    if let Some(w) = existing
        && w.metadata.deletion_timestamp.is_none()
    {
        match works.delete(work_name, &DeleteParams::default()).await {
            Ok(_) => {
                ctx.metrics.works_deleted.inc();
                tracing::info!(app = %key, work = %ObjectRef::from_obj(w), "ManifestWork deleted with its Application");
            }
            Err(e) if is_status(&e, 404) => {}
            Err(e) => return Err(e.into()),
        }
    }
    let finalizers = app.finalizers();
    if finalizers.iter().any(|f| f == FINALIZER_ARGOCD_RESOURCES) {
        let rest: Vec<&String> = finalizers
            .iter()
            .filter(|f| *f != FINALIZER_ARGOCD_RESOURCES)
            .collect();
        let patch =
            json!({"metadata": {"finalizers": rest, "resourceVersion": app.resource_version()}});
        let api: Api<AppLite> =
            Api::namespaced(ctx.client.clone(), &app.namespace().unwrap_or_default());
        let pp = PatchParams {
            field_manager: Some(ctx.config.field_manager.clone()),
            ..Default::default()
        };
        match api.patch(&app.name_any(), &pp, &Patch::Merge(&patch)).await {
            Ok(patched) => {
                ctx.metrics
                    .app_patches
                    .get_or_create(&OpLabels {
                        op: "remove_finalizer",
                    })
                    .inc();
                tracing::info!(app = %key, "removed {FINALIZER_ARGOCD_RESOURCES}");
                let cached = ctx.apps.get(&ObjectRef::from_obj(&patched));
                ctx.recent_apps.record(patched, cached);
            }
            Err(e) if is_status(&e, 404) => {}
            Err(e) if is_status(&e, 409) => {
                return Err(Error::Conflict(format!("Application {key}")));
            }
            Err(e) => return Err(e.into()),
        }
    }
    ctx.succeeded(&Retry::App(key));
    Ok(Action::await_change())
}

pub(crate) fn error_policy(app: Arc<AppLite>, err: &Error, ctx: Arc<Ctx>) -> Action {
    let key = ObjectRef::from_obj(app.as_ref());
    let delay = ctx.backoff(Retry::App(key.clone()), err);
    match err {
        Error::ClusterMissing(_) | Error::NamespaceMissing(_) | Error::Conflict(_) => {
            tracing::info!(app = %key, retry_in = ?delay, "{err}")
        }
        _ => tracing::warn!(app = %key, retry_in = ?delay, error = %err, "propagation failed"),
    }
    Action::requeue(delay)
}
