//! The controller: a GitOpsCluster with `spec.argoCDAgentAddon` (read as v1alpha1) → its plan
//! ([`super::desired::plan`]) applied with writes only where something differs, objects no
//! longer wanted deleted, and a finalizer that removes everything on delete.
//!
//! Bad input (placement kind, missing Placement, invalid custom CR list, no principal address)
//! is found *before* anything is written: a False condition naming the fix, and a retry with
//! backoff; never a half-made set of secrets.

use argocd_pull_ops::api_health::{ApiHealth, ControllerBackoff};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use argocd_pull_api::ocm::cluster::{Placement, PlacementDecision};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::apply::{self, Key};
use super::desired::{self, Inputs, Invalid};
use super::discovery::{self, PRINCIPAL_SERVICES};
use super::pki;
use super::write;
use super::*;
use crate::metrics::Metrics;

const CONTROLLER: &str = "argocd-agent-addon";
/// Longest wait between passes (certificate checks are also scheduled for their renewal point).
const RESYNC: Duration = Duration::from_secs(600);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Kube(String),
    /// Bad input or a failed step: already reported in a condition.
    #[error("{0}")]
    Reported(String),
}

fn kube_err(what: &str) -> impl Fn(kube::Error) -> Error + '_ {
    move |e| Error::Kube(format!("{what}: {e}"))
}

/// Settings of the addon controller.
#[derive(Clone, Debug)]
pub struct AddonConfig {
    /// The `argocd-pull` image the AddOnTemplate deploys as the agent.
    pub agent_image: String,
}

struct Ctx {
    client: Client,
    config: AddonConfig,
    metrics: Metrics,
    /// Consecutive failed passes per GitOpsCluster (`ns/name`), for the retry backoff.
    failures: std::sync::Mutex<std::collections::HashMap<String, u32>>,
}

/// Retry delay after `n` consecutive failures: 5 s doubling to 5 min.
pub fn retry_delay(n: u32) -> Duration {
    Duration::from_secs(
        5u64.saturating_mul(1 << n.saturating_sub(1).min(6))
            .min(300),
    )
}

pub async fn run(
    client: Client,
    config: AddonConfig,
    metrics: Metrics,
    health: ApiHealth,
    shutdown: CancellationToken,
) {
    let ctx = Arc::new(Ctx {
        client: client.clone(),
        config,
        metrics,
        failures: Default::default(),
    });
    let token = shutdown.clone();
    let controller = Controller::new(
        Api::<GitOpsCluster>::all(client.clone()),
        watcher::Config::default(),
    );
    let store = controller.store();
    let gcs = store.clone();
    let gcs_for_services = store.clone();
    let run = controller
        .with_config(ControllerConfig::default().debounce(Duration::from_millis(50)))
        // the end of an API-server outage: every GitOpsCluster at once, not at its next retry
        // (5 s doubling per failure)
        .trigger_backoff(ControllerBackoff::new(health.clone()))
        .reconcile_all_on(health.recovered())
        // The principal Service changing (a new LoadBalancer address: new SANs) reconciles the
        // GitOpsClusters of its namespace.
        .watches(
            Api::<Service>::all(client.clone()),
            watcher::Config::default().fields(&format!("metadata.name={}", PRINCIPAL_SERVICES[0])),
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
        .watches(
            Api::<PlacementDecision>::all(client),
            watcher::Config::default(),
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
                let key = format!("{}/{}", gc.namespace().unwrap_or_default(), gc.name_any());
                let r = reconcile(gc, ctx.clone()).await;
                if r.is_ok() {
                    ctx.failures.lock().unwrap_or_else(|e| e.into_inner()).remove(&key);
                }
                ctx.metrics
                    .reconciled(CONTROLLER, started.elapsed().as_secs_f64(), r.is_ok());
                r
            },
            |gc, err: &Error, ctx| {
                let key = format!("{}/{}", gc.namespace().unwrap_or_default(), gc.name_any());
                let n = {
                    let mut f = ctx.failures.lock().unwrap_or_else(|e| e.into_inner());
                    let n = f.entry(key.clone()).or_default();
                    *n += 1;
                    *n
                };
                let delay = retry_delay(n);
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

fn now_time() -> Time {
    Time(jiff::Timestamp::now())
}

async fn write_status(ctx: &Ctx, gc: &GitOpsCluster, conds: &Conditions) -> Result<(), Error> {
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
async fn reject(
    ctx: &Ctx,
    gc: &GitOpsCluster,
    mut conds: Conditions,
    bad: Invalid,
) -> Result<Action, Error> {
    conds.set(bad.condition, "False", bad.reason, bad.message.clone());
    write_status(ctx, gc, &conds).await?;
    Err(Error::Reported(bad.message))
}

fn invalid(condition: &'static str, reason: &'static str, message: String) -> Invalid {
    Invalid {
        condition,
        reason,
        message,
    }
}

async fn finalize(ctx: &Ctx, gc: &GitOpsCluster, ns: &str, name: &str) -> Result<Action, Error> {
    let owned = apply::list_owned(&ctx.client, ns, name)
        .await
        .map_err(kube_err("listing owned objects"))?;
    let (_, errors) = apply::sweep(&ctx.client, &owned, &BTreeSet::new()).await;
    if !errors.is_empty() {
        return Err(Error::Kube(format!("cleanup: {}", errors.join("; "))));
    }
    // The shared ClusterManagementAddOn goes with the last AddOnTemplate of ours.
    let (ar, _) = apply::resource("AddOnTemplate");
    let left = Api::<kube::api::DynamicObject>::all_with(ctx.client.clone(), &ar)
        .list(&ListParams::default().labels(&format!("{LABEL_MANAGED_BY}={MANAGED_BY}")))
        .await
        .map_err(kube_err("listing AddOnTemplates"))?;
    if left.items.is_empty() {
        let (ar, _) = apply::resource("ClusterManagementAddOn");
        let _ = Api::<kube::api::DynamicObject>::all_with(ctx.client.clone(), &ar)
            .delete(ADDON_NAME, &Default::default())
            .await;
    }
    let finalizers: Vec<String> = gc
        .finalizers()
        .iter()
        .filter(|f| *f != FINALIZER)
        .cloned()
        .collect();
    Api::<GitOpsCluster>::namespaced(ctx.client.clone(), ns)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": finalizers, "resourceVersion": gc.resource_version()}})),
        )
        .await
        .map_err(kube_err("removing the finalizer"))?;
    tracing::info!(gitopscluster = %format!("{ns}/{name}"), objects = owned.len(), "cleaned up");
    Ok(Action::await_change())
}

async fn reconcile(gc: Arc<GitOpsCluster>, ctx: Arc<Ctx>) -> Result<Action, Error> {
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
                .map_err(|e| Error::Kube(format!("generating the JWT key: {e}")))?;
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
            return Err(Error::Kube(format!(
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
        &mut conds,
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
                cluster_list(&others),
                owners.join(", ")
            ),
        );
    }
    per_cluster(
        &mut conds,
        COND_MANIFEST_WORK_CREATED,
        non_local,
        format!("Created ManifestWorks for {non_local} clusters"),
        "Failed to create ManifestWorks for clusters",
    );
    per_cluster(
        &mut conds,
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
            &mut conds,
            COND_ARGOCD_CR_DELIVERED,
            non_local,
            format!("Delivered ArgoCD CR to {non_local} clusters"),
            "Failed to deliver ArgoCD CR to clusters",
        );
    }
    let (removed, errors) = apply::sweep(client, &owned, &keep).await;
    if !removed.is_empty() {
        conds.ok(
            COND_REMOVED_CLUSTERS_CLEANED_UP,
            format!("Cleaned up {} removed cluster(s)", removed.len()),
        );
    }
    write_status(&ctx, &gc, &conds).await?;
    if !errors.is_empty() || !failed.is_empty() {
        return Err(Error::Kube(format!(
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

#[cfg(test)]
mod tests {
    #[test]
    fn retries_back_off_from_5_s_to_5_min() {
        let d: Vec<u64> = (1..=9).map(|n| super::retry_delay(n).as_secs()).collect();
        assert_eq!(d, [5, 10, 20, 40, 80, 160, 300, 300, 300]);
    }
}
