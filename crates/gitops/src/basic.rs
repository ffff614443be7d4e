//! Basic mode of the upstream Go controller: every ManagedCluster → Secret `<cluster>-secret`
//! (`server: https://<cluster>-control-plane:6443`) in one namespace. The Secret has the
//! ManagedCluster as owner, so it goes when the cluster goes; label changes are written at once.

use argocd_pull_ops::api_health::{ApiHealth, rewatching};
use argocd_pull_ops::reconcile_metrics::Reason;
use argocd_pull_ops::retry::{Backoff, Retries};
use argocd_pull_ops::watch::WatchEvents;
use kube::runtime::reflector::{self, ObjectRef};
use std::sync::Arc;
use std::time::Instant;

use argocd_pull_api::ocm::cluster::ManagedCluster;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use tokio_util::sync::CancellationToken;

use crate::FIELD_MANAGER;
use crate::metrics::Metrics;
use crate::secrets::{self, LABEL_BASIC_MODE};

const CONTROLLER: &str = "basic-cluster-secrets";

struct Ctx {
    client: Client,
    namespace: String,
    metrics: Metrics,
    /// Failed reconciles per ManagedCluster, for the retry backoff.
    retries: Retries<ObjectRef<ManagedCluster>>,
}

#[derive(Debug, thiserror::Error)]
#[error("writing Secret {0}: {1}")]
pub struct Error(String, #[source] kube::Error);

/// The `reason` label of `reconcile_errors_total`: the write's.
impl Reason for Error {
    const REASONS: &'static [&'static str] = <kube::Error as Reason>::REASONS;

    fn reason(&self) -> &'static str {
        self.1.reason()
    }
}

pub(crate) async fn run(
    client: Client,
    namespace: String,
    metrics: Metrics,
    health: ApiHealth,
    shutdown: CancellationToken,
) {
    // the Secrets' metadata only (their owner), as `Controller::owns` watches them
    let secrets: Api<PartialObjectMeta<Secret>> = Api::namespaced(client.clone(), &namespace);
    metrics.controller::<Error>(CONTROLLER);
    let ctx = Arc::new(Ctx {
        client: client.clone(),
        namespace,
        metrics,
        retries: Retries::new(Backoff::GITOPS),
    });
    // every watch as every controller's (`rewatching`: retried within seconds of the API
    // server's return); the ManagedClusters reflected into the store the reconciles read
    let (store, writer) = reflector::store::<ManagedCluster>();
    let clusters = rewatching(
        Api::<ManagedCluster>::all(client),
        watcher::Config::default(),
        health.clone(),
    )
    .reflect(writer)
    .relists_whole("managedclusters")
    .controller(CONTROLLER)
    .applied_objects()
    .map(Ok);
    let owned = rewatching(
        secrets,
        watcher::Config::default().labels(&format!("{LABEL_BASIC_MODE}=true")),
        health.clone(),
    )
    .lists_as_they_come("secrets")
    .controller(CONTROLLER)
    .touched_objects()
    .map(Ok);
    let token = shutdown.clone();
    let run = Controller::for_stream(clusters, store.clone())
        .reconcile_all_on(health.recovered())
        .owns_stream(owned)
        .graceful_shutdown_on(async move { token.cancelled().await })
        .run(
            |mc, ctx: Arc<Ctx>| async move {
                let started = Instant::now();
                let key = ObjectRef::from_obj(mc.as_ref());
                let r = reconcile(mc, &ctx).await;
                if r.is_ok() {
                    ctx.retries.succeeded(&key);
                }
                ctx.metrics
                    .reconciled(CONTROLLER, started.elapsed(), r.as_ref().err());
                r
            },
            |mc, err: &Error, ctx| {
                let key = ObjectRef::from_obj(mc.as_ref());
                let delay = ctx.retries.failed(key.clone());
                tracing::warn!(cluster = %key, error = %err, retry_in = ?delay, "basic cluster secret reconcile failed");
                Action::requeue(delay)
            },
            ctx,
        )
        .for_each(|_| async {});
    crate::until_shutdown(run, store, shutdown, CONTROLLER).await;
}

async fn reconcile(mc: Arc<ManagedCluster>, ctx: &Ctx) -> Result<Action, Error> {
    if mc.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let mut desired = secrets::basic_secret(&mc, &ctx.namespace);
    if let Some(owner) = mc.controller_owner_ref(&()) {
        let mut owner = owner;
        owner.block_owner_deletion = None;
        desired.metadata.owner_references = Some(vec![owner]);
    }
    let name = desired.name_any();
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), &ctx.namespace);
    let pp = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    let existing = api
        .get_opt(&name)
        .await
        .map_err(|e| Error(name.clone(), e))?;
    match existing {
        Some(cur)
            if secrets::secret_up_to_date(&cur, &desired)
                && secrets::stale_labels(&cur, &desired).is_empty()
                && cur.owner_references() == desired.owner_references() => {}
        Some(cur) => {
            desired.metadata.resource_version = cur.resource_version();
            api.replace(&name, &pp, &desired)
                .await
                .map_err(|e| Error(name.clone(), e))?;
            ctx.metrics.write(CONTROLLER, "Secret", "update");
            tracing::info!(secret = %name, "basic cluster secret updated");
        }
        None => {
            api.create(&pp, &desired)
                .await
                .map_err(|e| Error(name.clone(), e))?;
            ctx.metrics.write(CONTROLLER, "Secret", "create");
            tracing::info!(secret = %name, "basic cluster secret created");
        }
    }
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;
    use argocd_pull_ops::reconcile_metrics::{api_refusal as api, check_reasons};

    #[test]
    fn every_reason_is_listed() {
        check_reasons([
            Error("s".into(), api(409)),
            Error("s".into(), api(500)),
            Error("s".into(), kube::Error::LinesCodecMaxLineLengthExceeded),
        ])
        .unwrap();
    }
}
