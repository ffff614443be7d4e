//! One reconcile of a GitOpsCluster: the Argo CD server checked, the ApplicationSet resources
//! ensured, the Placement resolved, the clusters registered, and the status written when it
//! changed.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use argocd_pull_api::gitops::GitOpsCluster;
use argocd_pull_api::names;
use argocd_pull_api::ocm::cluster::Placement;
use k8s_openapi::api::core::v1::{Namespace, Service};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Client, ResourceExt};
use serde_json::json;

use super::appset_resources::ensure_appset_resources;
use super::context::{ARGO_SERVER_SELECTOR, CONTROLLER, Ctx, Error, kerr};
use super::register::register_clusters;
use crate::FIELD_MANAGER;
use crate::status::{self, Check, Outcome};

const REQUEUE_OK: Duration = Duration::from_secs(300);
const REQUEUE_FAILED: Duration = Duration::from_secs(30);

pub(super) async fn reconcile(gc: Arc<GitOpsCluster>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    if gc.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    if gc.spec.argo_server.argo_namespace.is_empty() {
        // Written as v1alpha1 (`spec.argoCDAgentAddon`, no `argoServer`): the addon
        // controller's object (crate::addon), not this one's.
        return Ok(Action::await_change());
    }
    let ns = gc.namespace().unwrap_or_default();
    let name = gc.name_any();
    let owner = format!("{ns}/{name}");
    let argo_ns = gc.spec.argo_server.argo_namespace.clone();
    let mut outcome = Outcome {
        argo_namespace: argo_ns.clone(),
        unsupported: status::unsupported_fields(&gc),
        ..Default::default()
    };
    let mut errors: Vec<String> = Vec::new();

    outcome.argo_server = Some(check_argo_server(&ctx.client, &ns, &argo_ns).await?);
    if outcome.argo_server.as_ref().is_some_and(|c| c.ok) {
        outcome.appset_resources = Some(ensure_appset_resources(&ctx, &argo_ns).await);
        let placement = resolve_placement(&ctx, &gc, &ns).await?;
        match placement {
            Err(check) => outcome.placement = Some(check),
            Ok(selected) => {
                outcome.placement = Some(Check::ok(
                    "Success",
                    format!(
                        "{} cluster(s) selected by placement {}",
                        selected.len(),
                        gc.spec.placement_ref.name.as_deref().unwrap_or_default()
                    ),
                ));
                let (clusters_check, registered) =
                    register_clusters(&ctx, &gc, &owner, &argo_ns, &selected, &mut errors).await;
                outcome.clusters = Some(clusters_check);
                outcome.registered = registered;
            }
        }
    }

    let previous = gc.status.as_ref();
    let new = status::compute(
        &outcome,
        previous,
        gc.metadata.generation,
        jiff::Timestamp::now(),
    );
    if status::changed(previous, &new) {
        let api: Api<GitOpsCluster> = Api::namespaced(ctx.client.clone(), &ns);
        api.patch_status(
            &name,
            &PatchParams {
                field_manager: Some(FIELD_MANAGER.into()),
                ..Default::default()
            },
            &Patch::Merge(json!({"status": new})),
        )
        .await
        .map_err(kerr(format!("writing status of GitOpsCluster {owner}")))?;
        ctx.metrics
            .write(CONTROLLER, "GitOpsCluster", "patch-status");
        tracing::info!(gitopscluster = %owner, phase = ?new.phase, "status updated");
    }
    if !errors.is_empty() {
        return Err(Error::Incomplete(errors.join("; ")));
    }
    let ready = outcome.clusters.as_ref().is_some_and(|c| c.ok);
    Ok(Action::requeue(if ready {
        REQUEUE_OK
    } else {
        REQUEUE_FAILED
    }))
}

async fn check_argo_server(client: &Client, gc_ns: &str, argo_ns: &str) -> Result<Check, Error> {
    if argo_ns.is_empty() {
        return Ok(Check::failed(
            "InvalidSpec",
            "spec.argoServer.argoNamespace is empty",
        ));
    }
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let Some(namespace) = namespaces
        .get_opt(argo_ns)
        .await
        .map_err(kerr(format!("reading namespace {argo_ns}")))?
    else {
        return Ok(Check::failed(
            "ArgoNamespaceNotFound",
            format!("namespace {argo_ns} does not exist"),
        ));
    };
    if argo_ns != gc_ns {
        let authorised = namespace
            .labels()
            .get(names::LABEL_GITOPS_ARGO_NAMESPACE)
            .is_some_and(|v| v == "true");
        if !authorised {
            return Ok(Check::failed(
                "NamespaceNotAuthorized",
                format!(
                    "namespace {argo_ns} is not labelled {}=true, so GitOpsClusters of namespace {gc_ns} may not write cluster secrets into it",
                    names::LABEL_GITOPS_ARGO_NAMESPACE
                ),
            ));
        }
    }
    let services: Api<Service> = Api::namespaced(client.clone(), argo_ns);
    let found = services
        .list_metadata(&ListParams::default().labels(ARGO_SERVER_SELECTOR).limit(1))
        .await
        .map_err(kerr(format!(
            "listing Argo CD server services in {argo_ns}"
        )))?;
    if found.items.is_empty() {
        return Ok(Check::failed(
            "ArgoServerNotFound",
            format!("no Argo CD server Service ({ARGO_SERVER_SELECTOR}) in namespace {argo_ns}"),
        ));
    }
    Ok(Check::ok(
        "Success",
        format!("Argo CD server found in namespace {argo_ns}"),
    ))
}

/// The cluster names selected by the GitOpsCluster's Placement (sorted, unique), or the failed
/// `PlacementResolved` check.
async fn resolve_placement(
    ctx: &Ctx,
    gc: &GitOpsCluster,
    ns: &str,
) -> Result<Result<Vec<String>, Check>, Error> {
    let pref = &gc.spec.placement_ref;
    let kind = pref.kind.as_deref().unwrap_or("Placement");
    if kind != "Placement" {
        return Ok(Err(Check::failed(
            "UnsupportedPlacementKind",
            format!("spec.placementRef.kind {kind:?} is not supported; use kind Placement"),
        )));
    }
    let Some(pname) = pref.name.as_deref().filter(|n| !n.is_empty()) else {
        return Ok(Err(Check::failed(
            "InvalidSpec",
            "spec.placementRef.name is empty",
        )));
    };
    let placements: Api<Placement> = Api::namespaced(ctx.client.clone(), ns);
    if placements
        .get_metadata_opt(pname)
        .await
        .map_err(kerr(format!("reading Placement {ns}/{pname}")))?
        .is_none()
    {
        return Ok(Err(Check::failed(
            "PlacementNotFound",
            format!("Placement {ns}/{pname} does not exist"),
        )));
    }
    let selected: BTreeSet<String> = ctx
        .decisions
        .state()
        .iter()
        .filter(|d| d.metadata.namespace.as_deref() == Some(ns))
        .filter(|d| {
            d.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(names::LABEL_PLACEMENT))
                .is_some_and(|p| p == pname)
        })
        .flat_map(|d| d.cluster_names().map(str::to_string).collect::<Vec<_>>())
        .collect();
    Ok(Ok(selected.into_iter().collect()))
}
