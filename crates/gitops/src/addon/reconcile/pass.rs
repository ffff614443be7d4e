//! One pass of the addon controller over a GitOpsCluster: the finalizer, the input checked
//! before any write (placement, custom CRs, the principal's address), what exists read, the plan
//! ([`desired::plan`]) written where it differs, the conditions reported and the objects no longer
//! wanted swept.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use argocd_pull_api::ocm::cluster::{Placement, PlacementDecision};
use k8s_openapi::api::core::v1::{Node, Service};
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use serde_json::{Value, json};

use super::cleanup::finalize;
use super::context::{CONTROLLER, Ctx, Error, kube_err};
use super::status::{invalid, now_time, reject, report_pass, write_status};
use crate::addon::apply::{self, Key};
use crate::addon::desired::{self, Inputs};
use crate::addon::discovery::{self, PRINCIPAL_SERVICES};
use crate::addon::pki;
use crate::addon::write;
use crate::addon::*;

/// Longest wait between passes (certificate checks are also scheduled for their renewal point).
const RESYNC: Duration = Duration::from_secs(600);

pub(super) async fn reconcile(gc: Arc<GitOpsCluster>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let ns = gc.namespace().unwrap_or_default();
    let name = gc.name_any();
    let client = &ctx.client;
    if gc.metadata.deletion_timestamp.is_some() {
        if gc.finalizers().iter().any(|f| f == FINALIZER) {
            return finalize(&ctx, &gc, &ns, &name).await;
        }
        return Ok(Action::await_change());
    }
    let gcs: Api<GitOpsCluster> = Api::namespaced(client.clone(), &ns);
    if !gc.finalizers().iter().any(|f| f == FINALIZER) {
        let mut f = gc.finalizers().to_vec();
        f.push(FINALIZER.into());
        gcs.patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"finalizers": f, "resourceVersion": gc.resource_version()}}),
            ),
        )
        .await
        .map_err(kube_err("adding the finalizer"))?;
        return Ok(Action::await_change());
    }
    let spec = gc.spec.argo_cd_agent_addon.clone().unwrap_or_default();
    let mut conds = Conditions::new(
        &gc.status
            .as_ref()
            .map(|s| s.conditions.clone())
            .unwrap_or_default(),
        gc.metadata.generation,
        now_time(),
    );

    // 1. Everything that can be wrong with the input, before any write.
    let kind = gc.spec.placement_ref.kind.clone().unwrap_or_default();
    let placement_name = gc.spec.placement_ref.name.clone().unwrap_or_default();
    if kind != "Placement" {
        let m = format!(
            "Failed to evaluate placement: invalid placement kind: {kind}, expected Placement; set spec.placementRef.kind to Placement"
        );
        return reject(
            &ctx,
            &gc,
            conds,
            invalid(COND_PLACEMENT_EVALUATED, REASON_FAILED, m),
        )
        .await;
    }
    let placements: Api<Placement> = Api::namespaced(client.clone(), &ns);
    let Some(placement) = placements
        .get_opt(&placement_name)
        .await
        .map_err(kube_err("reading the Placement"))?
    else {
        let m = format!(
            "Failed to evaluate placement: failed to get Placement: placement {ns}/{placement_name} not found; create it or fix spec.placementRef.name"
        );
        return reject(
            &ctx,
            &gc,
            conds,
            invalid(COND_PLACEMENT_EVALUATED, REASON_FAILED, m),
        )
        .await;
    };
    if let Err(bad) = desired::argocd_crs(&spec, None) {
        return reject(&ctx, &gc, conds, bad).await;
    }
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    let mut svc = None;
    for s in PRINCIPAL_SERVICES {
        if let Some(found) = services
            .get_opt(s)
            .await
            .map_err(kube_err("reading the principal Service"))?
        {
            svc = Some(found);
            break;
        }
    }
    let node_port = svc
        .as_ref()
        .and_then(|s| s.spec.as_ref()?.type_.clone())
        .as_deref()
        == Some("NodePort");
    let nodes: Vec<Node> = if node_port {
        Api::<Node>::all(client.clone())
            .list(&ListParams::default())
            .await
            .map_err(kube_err("listing nodes"))?
            .items
    } else {
        Vec::new()
    };
    let spec_addr = spec
        .principal_server_address
        .clone()
        .filter(|s| !s.is_empty());
    let spec_port = spec.principal_server_port.clone().filter(|s| !s.is_empty());
    let (address, port, discovered) = match (spec_addr, spec_port) {
        (Some(a), Some(p)) => (a, p, false),
        (a, p) => {
            let found = match &svc {
                Some(s) => discovery::discover(s, &nodes),
                None => Err(format!(
                    "service {} not found in namespace {ns}",
                    PRINCIPAL_SERVICES.join(" or ")
                )),
            };
            match found {
                Ok((da, dp)) => (a.unwrap_or(da), p.unwrap_or(dp), true),
                Err(e) => {
                    let m = format!(
                        "Server discovery failed: failed to discover server address and port: {e}; set spec.argoCDAgentAddon.principalServerAddress and principalServerPort, or expose the principal Service as a LoadBalancer or NodePort"
                    );
                    return reject(
                        &ctx,
                        &gc,
                        conds,
                        invalid(COND_SERVER_DISCOVERED, REASON_SERVER_NOT_DISCOVERED, m),
                    )
                    .await;
                }
            }
        }
    };

    // 2. Read what exists, plan.
    let decisions: Api<PlacementDecision> = Api::namespaced(client.clone(), &ns);
    let mut clusters: BTreeSet<String> = BTreeSet::new();
    for d in decisions
        .list(&ListParams::default().labels(&format!(
            "{}={placement_name}",
            argocd_pull_api::names::LABEL_PLACEMENT
        )))
        .await
        .map_err(kube_err("listing PlacementDecisions"))?
        .items
    {
        for c in d.status.map(|s| s.decisions).unwrap_or_default() {
            if !c.cluster_name.is_empty() {
                clusters.insert(c.cluster_name);
            }
        }
    }
    // A cluster another GitOpsCluster already serves (its ManagedClusterAddOn carries that
    // GitOpsCluster's owner labels) is left to it: both writing the shared per-cluster names
    // would overwrite each other on every pass. (The peer's unlabelled objects are adopted.)
    let taken = apply::taken_clusters(client, &ns, &name)
        .await
        .map_err(kube_err("listing ManagedClusterAddOns"))?;
    let (clusters, others): (Vec<String>, Vec<String>) =
        clusters.into_iter().partition(|c| !taken.contains_key(c));
    let mut owned = apply::list_owned(client, &ns, &name)
        .await
        .map_err(kube_err("listing owned objects"))?;
    // The hub-wide key material by name as well: the peer's (no owner labels) is adopted, never
    // replaced; another GitOpsCluster's CA means the namespace is taken.
    for n in [
        SECRET_JWT,
        SECRET_CA,
        SECRET_PRINCIPAL_TLS,
        SECRET_RESOURCE_PROXY_TLS,
    ] {
        let k: Key = ("Secret".into(), ns.clone(), n.into());
        if !owned.contains_key(&k)
            && let Some(v) = apply::read(client, &k)
                .await
                .map_err(kube_err("reading the agent secrets"))?
        {
            owned.insert(k, v);
        }
    }
    let ca_key: Key = ("Secret".into(), ns.clone(), SECRET_CA.into());
    let mut new_jwt: Option<String> = None;
    let mut first = true;
    let mut attempts = 0;
    let (next_check, objects, out) = loop {
        // One GitOpsCluster with argoCDAgentAddon per namespace: the CA, JWT and principal
        // secrets have fixed names there.
        if let Some(other) = owned
            .get(&ca_key)
            .and_then(write::owner)
            .filter(|o| *o != name)
        {
            let m = format!(
                "Failed to create CA certificate: namespace {ns} is already served by GitOpsCluster {ns}/{other} (its {SECRET_CA}); use one GitOpsCluster with argoCDAgentAddon per namespace"
            );
            return reject(
                &ctx,
                &gc,
                conds,
                invalid(COND_CA_CERTIFICATE_READY, REASON_FAILED, m),
            )
            .await;
        }
        let secrets = write::secrets(&owned, &ns);
        let bundle = write::bundle(&owned, &ns);
        if new_jwt.is_none() && desired::existing_jwt(&secrets).is_none() {
            let key = tokio::task::spawn_blocking(pki::jwt_key)
                .await
                .map_err(|e| Error::Internal(format!("generating the JWT key: {e}")))?;
            match key {
                Ok(k) => new_jwt = Some(k),
                Err(e) => {
                    let m = format!("Failed to create JWT secret: {e}");
                    return reject(
                        &ctx,
                        &gc,
                        conds,
                        invalid(COND_JWT_SECRET_READY, REASON_FAILED, m),
                    )
                    .await;
                }
            }
        }
        let now = time::OffsetDateTime::now_utc();
        let inputs = Inputs {
            new_jwt: new_jwt.clone(),
            name: &name,
            namespace: &ns,
            spec: &spec,
            placement: &placement_name,
            address: &address,
            port: &port,
            principal_service: svc.as_ref(),
            nodes: &nodes,
            clusters: &clusters,
            secrets: &secrets,
            bundle: bundle.as_deref(),
            agent_image: &ctx.config.agent_image,
            now,
        };
        let plan = match desired::plan(&inputs) {
            Ok(p) => p,
            Err(bad) => return reject(&ctx, &gc, conds, bad).await,
        };
        for (what, why) in &plan.issued {
            tracing::info!(gitopscluster = %format!("{ns}/{name}"), object = %what, reason = ?why, "certificate or key issued");
        }

        // 3. Write: spec address back, Placement tolerations (once), RBAC, the plan; then sweep.
        if first {
            first = false;
            if discovered
                && (spec.principal_server_address.as_deref() != Some(address.as_str())
                    || spec.principal_server_port.as_deref() != Some(port.as_str()))
            {
                gcs.patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"argoCDAgentAddon": {"principalServerAddress": address, "principalServerPort": port}}})),
                )
                .await
                .map_err(kube_err("writing the discovered address to spec"))?;
                ctx.metrics.write(CONTROLLER, "GitOpsCluster", "update");
            }
            conds.ok(
                COND_SERVER_DISCOVERED,
                format!("Server at {address}:{port}"),
            );
            match ensure_tolerations(&ctx, &placement).await {
                Ok(()) => conds.ok(
                    COND_PLACEMENT_TOLERATION_CONFIGURED,
                    "Placement tolerations configured successfully",
                ),
                Err(e) => conds.failed(
                    COND_PLACEMENT_TOLERATION_CONFIGURED,
                    format!("Failed to configure placement tolerations: {e}"),
                ),
            }
        }
        let mut objects = apply::rbac(&ns, &name);
        objects.extend(plan.objects);
        let out = write::write_plan(client, &ns, &objects, &mut owned, |kind, verb| {
            ctx.metrics.write(CONTROLLER, kind, verb)
        })
        .await;
        if out.lost.is_empty() || out.global_error.is_some() {
            break (plan.next_check.map(|t| (t, now)), objects, out);
        }
        attempts += 1;
        if attempts >= 3 {
            return Err(Error::Conflict(format!(
                "{} object(s) changed by another writer on each of 3 passes; retrying",
                out.lost.len()
            )));
        }
        write::refresh(client, &out.lost, &mut owned)
            .await
            .map_err(kube_err("reading objects written by another writer"))?;
    };
    let keep: BTreeSet<Key> = objects.iter().map(apply::key).collect();
    let write::Outcome {
        writes,
        failed,
        global_error,
        ..
    } = out;
    if let Some((cond, e)) = global_error {
        conds.failed(cond, format!("Failed: {e}"));
        write_status(&ctx, &gc, &conds).await?;
        return Err(Error::Reported(e));
    }
    report_pass(&mut conds, &clusters, &others, &taken, &failed);
    let (removed, errors) = apply::sweep(client, &owned, &keep).await;
    if !removed.is_empty() {
        conds.ok(
            COND_REMOVED_CLUSTERS_CLEANED_UP,
            format!("Cleaned up {} removed cluster(s)", removed.len()),
        );
    }
    write_status(&ctx, &gc, &conds).await?;
    if !errors.is_empty() || !failed.is_empty() {
        return Err(Error::Incomplete(format!(
            "{} object(s) failed: {}",
            errors.len() + failed.values().map(Vec::len).sum::<usize>(),
            errors.join("; ")
        )));
    }
    tracing::debug!(gitopscluster = %format!("{ns}/{name}"), clusters = clusters.len(), writes, "reconciled");
    let wait = next_check
        .map(|(t, now)| Duration::from_secs((t - now).whole_seconds().max(1) as u64))
        .unwrap_or(RESYNC)
        .min(RESYNC);
    Ok(Action::requeue(wait))
}

/// The peer's tolerations (`unreachable`, `unavailable`, operator Exists), added when missing.
async fn ensure_tolerations(ctx: &Ctx, placement: &Placement) -> Result<(), String> {
    let raw = serde_json::to_value(placement).map_err(|e| e.to_string())?;
    let mut tolerations: Vec<Value> = raw
        .pointer("/spec/tolerations")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let before = tolerations.len();
    for key in [
        "cluster.open-cluster-management.io/unreachable",
        "cluster.open-cluster-management.io/unavailable",
    ] {
        if !tolerations.iter().any(|t| t["key"] == key) {
            tolerations.push(json!({"key": key, "operator": "Exists"}));
        }
    }
    if tolerations.len() == before {
        return Ok(());
    }
    Api::<Placement>::namespaced(ctx.client.clone(), &placement.namespace().unwrap_or_default())
        .patch(
            &placement.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"tolerations": tolerations}, "metadata": {"resourceVersion": placement.resource_version()}})),
        )
        .await
        .map_err(|e| e.to_string())?;
    ctx.metrics.write(CONTROLLER, "Placement", "update");
    Ok(())
}
