//! The GitOpsCluster's conditions: written when they changed, a failure found before any write
//! reported ([`reject`]), and what a pass whose writes are done reports ([`report_pass`], pure).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use serde_json::json;

use super::context::{CONTROLLER, Ctx, Error, kube_err};
use crate::addon::desired::Invalid;
use crate::addon::*;

pub(super) fn now_time() -> Time {
    Time(jiff::Timestamp::now())
}

pub(super) async fn write_status(
    ctx: &Ctx,
    gc: &GitOpsCluster,
    conds: &Conditions,
) -> Result<(), Error> {
    let current = gc
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default();
    if current == conds.list {
        return Ok(());
    }
    let api: Api<GitOpsCluster> =
        Api::namespaced(ctx.client.clone(), &gc.namespace().unwrap_or_default());
    api.patch_status(
        &gc.name_any(),
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"conditions": conds.list}})),
    )
    .await
    .map_err(kube_err("writing status"))?;
    ctx.metrics.write(CONTROLLER, "GitOpsCluster", "status");
    Ok(())
}

/// Reports a failure found before any write, and retries with backoff.
pub(super) async fn reject(
    ctx: &Ctx,
    gc: &GitOpsCluster,
    mut conds: Conditions,
    bad: Invalid,
) -> Result<Action, Error> {
    conds.set(bad.condition, "False", bad.reason, bad.message.clone());
    write_status(ctx, gc, &conds).await?;
    Err(Error::Reported(bad.message))
}

pub(super) fn invalid(condition: &'static str, reason: &'static str, message: String) -> Invalid {
    Invalid {
        condition,
        reason,
        message,
    }
}

/// The conditions of a pass whose writes are done (before the sweep): the hub-wide steps
/// succeeded, and per condition the clusters it covers. `clusters`: the selected clusters this
/// GitOpsCluster serves; `others`: those another one serves (`taken` names it); `failed`: the
/// clusters whose writes failed, by condition.
pub(super) fn report_pass(
    conds: &mut Conditions,
    clusters: &[String],
    others: &[String],
    taken: &BTreeMap<String, String>,
    failed: &BTreeMap<&'static str, Vec<String>>,
) {
    for (c, m) in [
        (COND_RBAC_READY, "RBAC resources created successfully"),
        (COND_JWT_SECRET_READY, "JWT secret created successfully"),
        (
            COND_CA_CERTIFICATE_READY,
            "CA certificate created successfully",
        ),
        (
            COND_PRINCIPAL_CERTIFICATE_READY,
            "Principal certificate generated successfully",
        ),
        (
            COND_RESOURCE_PROXY_CERTIFICATE_READY,
            "Resource proxy certificate generated successfully",
        ),
        (
            COND_ADDON_TEMPLATE_READY,
            "AddOnTemplate created/updated successfully",
        ),
    ] {
        conds.ok(c, m);
    }
    let non_local = clusters.iter().filter(|c| *c != LOCAL_CLUSTER).count();
    if clusters.is_empty() {
        conds.set(
            COND_PLACEMENT_EVALUATED,
            "True",
            REASON_NO_CLUSTERS,
            "No managed clusters selected by placement",
        );
    } else {
        conds.ok(
            COND_PLACEMENT_EVALUATED,
            format!("Evaluated {} managed clusters", clusters.len()),
        );
    }
    let per_cluster =
        |conds: &mut Conditions, c: &'static str, n: usize, ok: String, bad: &str| match failed
            .get(c)
        {
            Some(l) => conds.failed(c, format!("{bad}: {}", cluster_list(l))),
            None if n > 0 => conds.ok(c, ok),
            None => {}
        };
    per_cluster(
        conds,
        COND_CLUSTERS_IMPORTED,
        clusters.len(),
        format!("Imported {} clusters to ArgoCD", clusters.len()),
        "Failed to import clusters",
    );
    if !others.is_empty() {
        let owners: BTreeSet<&String> = others.iter().filter_map(|c| taken.get(c)).collect();
        let owners: Vec<&str> = owners.into_iter().map(String::as_str).collect();
        conds.failed(
            COND_CLUSTERS_IMPORTED,
            format!(
                "Failed to import clusters: {} (already served by GitOpsCluster {}; select each cluster from one GitOpsCluster only)",
                cluster_list(others),
                owners.join(", ")
            ),
        );
    }
    per_cluster(
        conds,
        COND_MANIFEST_WORK_CREATED,
        non_local,
        format!("Created ManifestWorks for {non_local} clusters"),
        "Failed to create ManifestWorks for clusters",
    );
    per_cluster(
        conds,
        COND_ADDON_CONFIGURED,
        clusters.len(),
        format!("Addon configured for {} clusters", clusters.len()),
        "Failed to configure addon for clusters",
    );
    if non_local == 0 && !failed.contains_key(COND_ARGOCD_CR_DELIVERED) {
        conds.set(
            COND_ARGOCD_CR_DELIVERED,
            "True",
            REASON_NO_CLUSTERS,
            "No non-local clusters to deliver ArgoCD CR to",
        );
    } else {
        per_cluster(
            conds,
            COND_ARGOCD_CR_DELIVERED,
            non_local,
            format!("Delivered ArgoCD CR to {non_local} clusters"),
            "Failed to deliver ArgoCD CR to clusters",
        );
    }
}
