//! Cleanup: delete pull-labelled ManifestWorks whose Application is gone, no longer selected, or
//! now wants another work — decided from the watch caches, no GET per work.

use std::sync::Arc;

use argocd_pull_domain::{hub_app_ref_of, is_orphan_of};
use argocd_pull_ops::CancellationToken;
use futures::StreamExt;
use kube::api::DeleteParams;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};

use crate::cache::{AppLite, WorkLite};
use crate::context::{Ctx, lock};
use crate::error::is_status;

/// What one sweep did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SweepReport {
    /// Pull-labelled works examined.
    pub examined: usize,
    /// Works deleted.
    pub deleted: usize,
}

pub(crate) async fn sweep(ctx: &Ctx) -> Result<SweepReport, kube::Error> {
    ctx.metrics.sweeps.inc();
    let mut report = SweepReport::default();
    let mut orphans = Vec::new();
    // works this controller deleted and the cache still holds (their delete event is on its
    // way, or a re-list is): not deleted again, sweep after sweep
    let skip = {
        let mut swept = lock(&ctx.swept);
        swept.retain(|key, uid| {
            ctx.works
                .get(key)
                .is_some_and(|w| w.metadata.uid.as_deref() == Some(uid.as_str()))
        });
        swept.clone()
    };
    for work in ctx.works.state() {
        let Some(hub) = hub_app_ref_of(work.as_ref()) else {
            continue;
        };
        let key = ObjectRef::from_obj(work.as_ref());
        if skip.get(&key).map(String::as_str) == work.metadata.uid.as_deref()
            && work.metadata.uid.is_some()
        {
            continue;
        }
        report.examined += 1;
        let key = ObjectRef::<AppLite>::new(hub.name).within(hub.namespace);
        let app = ctx.recent_apps.resolve(&key, ctx.apps.get(&key));
        if is_orphan_of(work.as_ref(), app.as_deref()) {
            orphans.push(work);
        }
    }
    // concurrently, as the controllers write: 100 works left by Applications deleted during an
    // outage took 2.8 s one by one on the real env
    let results: Vec<Result<(), kube::Error>> = futures::stream::iter(orphans)
        .map(|work| async move { delete(ctx, &work).await })
        .buffer_unordered(usize::from(ctx.config.concurrency.max(1)))
        .collect()
        .await;
    report.deleted = results.iter().filter(|r| r.is_ok()).count();
    if let Some(Err(e)) = results.into_iter().find(Result::is_err) {
        return Err(e);
    }
    if report.deleted > 0 {
        tracing::info!(
            examined = report.examined,
            deleted = report.deleted,
            "sweep deleted orphaned ManifestWorks"
        );
    }
    Ok(report)
}

async fn delete(ctx: &Ctx, work: &WorkLite) -> Result<(), kube::Error> {
    let api: Api<WorkLite> =
        Api::namespaced(ctx.client.clone(), &work.namespace().unwrap_or_default());
    match api.delete(&work.name_any(), &DeleteParams::default()).await {
        Ok(_) => {
            ctx.metrics.works_deleted.inc();
            tracing::info!(work = %ObjectRef::from_obj(work), "orphaned ManifestWork deleted");
            if let Some(uid) = &work.metadata.uid {
                lock(&ctx.swept).insert(ObjectRef::from_obj(work), uid.clone());
            }
            Ok(())
        }
        Err(e) if is_status(&e, 404) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Requested sweeps start at most this often: each walks every work, and a burst of requests
/// (10,000 Applications deleted at once) would otherwise sweep back to back for its whole length.
pub(crate) const SWEEP_SPACING: std::time::Duration = std::time::Duration::from_millis(100);

/// Sweeps at start, on request (Application deletes and changes, re-lists; requests made while a
/// sweep runs or within [`SWEEP_SPACING`] of its start make one more sweep) and every
/// `sweep_interval`.
pub(crate) async fn sweeper(ctx: Arc<Ctx>, token: CancellationToken) {
    let mut interval = tokio::time::interval(ctx.config.sweep_interval);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last: Option<tokio::time::Instant> = None;
    loop {
        tokio::select! {
            _ = token.cancelled() => return,
            _ = interval.tick() => {}
            _ = ctx.sweep_request.notified() => {
                if let Some(at) = last {
                    tokio::select! {
                        _ = token.cancelled() => return,
                        _ = tokio::time::sleep_until(at + SWEEP_SPACING) => {}
                    }
                }
            }
        }
        last = Some(tokio::time::Instant::now());
        if let Err(e) = sweep(&ctx).await {
            // an outage's end sweeps again (`Ctx::retry_failed`)
            ctx.health.report(&e);
            tracing::warn!(error = %e, "sweep failed; retrying at the next one");
        }
    }
}
