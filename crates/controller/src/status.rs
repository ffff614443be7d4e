//! ManifestWork status feedback → hub Application status.

use std::sync::Arc;
use std::time::Instant;

use argocd_pull_domain::{hub_app_ref_of, status_patch};
use kube::Api;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;

use crate::cache::{AppLite, WorkLite};
use crate::context::{Ctx, Retry};
use crate::error::Error;
use crate::write::patch_with_retry;

const CONTROLLER: &str = crate::metrics::STATUS;

fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// Writes one work's status feedback to its hub Application, counted, timed and its failure's
/// reason counted.
pub(crate) async fn reconcile(work: Arc<WorkLite>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    ctx.metrics.reconcile.started(CONTROLLER);
    let started = Instant::now();
    let r = write_status(work, &ctx).await;
    let elapsed = started.elapsed();
    ctx.metrics
        .reconcile
        .finished(CONTROLLER, elapsed, r.as_ref().err());
    r
}

async fn write_status(work: Arc<WorkLite>, ctx: &Ctx) -> Result<Action, Error> {
    if work.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let Some(hub) = hub_app_ref_of(work.as_ref()) else {
        return Ok(Action::await_change());
    };
    let app_key = ObjectRef::<AppLite>::new(hub.name).within(hub.namespace);
    let Some(app) = ctx.recent_apps.resolve(&app_key, ctx.apps.get(&app_key)) else {
        return Ok(Action::await_change());
    };
    let Some(id) = work.application_identifier(hub.name) else {
        return Ok(Action::await_change());
    };
    let feedback = work.feedback_for(&id);
    let api: Api<AppLite> = Api::namespaced(ctx.client.clone(), hub.namespace);
    let mut current = app.status.clone();
    // at most two steps: Progressing on the way into Healthy, then Healthy
    for _ in 0..2 {
        let Some(plan) = status_patch(current.as_deref(), &feedback, &now()) else {
            break;
        };
        let patched =
            patch_with_retry(&api, hub.name, &ctx.config.field_manager, plan.patch).await?;
        ctx.metrics.status_patches.inc();
        tracing::debug!(app = %app_key, health = ?patched.health_status(), sync = ?patched.sync_status(), "status written");
        current = patched.status.clone();
        ctx.recent_apps.record(patched, ctx.apps.get(&app_key));
        if !plan.intermediate {
            break;
        }
    }
    ctx.succeeded(&Retry::Work(ObjectRef::from_obj(work.as_ref())));
    Ok(Action::await_change())
}

pub(crate) fn error_policy(work: Arc<WorkLite>, err: &Error, ctx: Arc<Ctx>) -> Action {
    let key = ObjectRef::from_obj(work.as_ref());
    let delay = ctx.backoff(Retry::Work(key.clone()), err);
    tracing::warn!(work = %key, retry_in = ?delay, error = %err, "status write failed");
    Action::requeue(delay)
}
