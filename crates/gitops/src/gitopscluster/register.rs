//! The clusters of a GitOpsCluster registered with Argo CD: a cluster Secret written for every
//! selected cluster (with ManagedServiceAccount credentials when there are some), clusters
//! claimed by a foreign Secret refused, and stale Secrets removed.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use argocd_pull_api::gitops::GitOpsCluster;
use argocd_pull_api::names;
use argocd_pull_api::ocm::cluster::ManagedCluster;
use base64::Engine;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, PostParams,
};
use kube::runtime::reflector;

use super::context::{CONTROLLER, Ctx, Error, is_status, kerr};
use crate::secrets::{self, ANNOTATION_GITOPSCLUSTER, Credentials};
use crate::status::Check;
use crate::{FIELD_MANAGER, StaleSecretPolicy};

const MSA_PROBE_INTERVAL: Duration = Duration::from_secs(60);
/// Cluster Secrets written (or deleted) at once by one reconcile.
const WRITE_CONCURRENCY: usize = 16;

/// What became of one selected cluster in [`register_clusters`].
enum Registration {
    /// Its Secret is in place.
    Done,
    /// Decided, but no ManagedCluster of that name.
    Missing,
    /// Its name is claimed by a cluster Secret no GitOpsCluster manages.
    Refused,
    Failed(String),
}

async fn credentials(
    ctx: &Ctx,
    gc: &GitOpsCluster,
    cluster: &ManagedCluster,
    msa_name: &str,
) -> Result<Credentials, Error> {
    if gc.spec.create_blank_cluster_secrets == Some(true) {
        return Ok(Credentials::Blank);
    }
    let resource = {
        let mut msa = ctx.msa.lock().await;
        let stale = msa.checked.is_none_or(|t| t.elapsed() > MSA_PROBE_INTERVAL);
        if msa.resource.is_none() && stale {
            msa.checked = Some(Instant::now());
            let ar = ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk(
                    "authentication.open-cluster-management.io",
                    "v1beta1",
                    "ManagedServiceAccount",
                ),
                "managedserviceaccounts",
            );
            let api: Api<DynamicObject> = Api::all_with(ctx.client.clone(), &ar);
            match api.list_metadata(&ListParams::default().limit(1)).await {
                Ok(_) => msa.resource = Some(ar),
                Err(e) if is_status(&e, 404) => {}
                Err(e) => tracing::debug!(error = %e, "ManagedServiceAccount API probe failed"),
            }
        }
        msa.resource.clone()
    };
    let Some(ar) = resource else {
        return Ok(Credentials::Blank);
    };
    let cname = cluster.name_any();
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &cname, &ar);
    let Some(msa) = api.get_opt(msa_name).await.map_err(kerr(format!(
        "reading ManagedServiceAccount {cname}/{msa_name}"
    )))?
    else {
        return Ok(Credentials::Blank);
    };
    let token_secret = msa
        .data
        .pointer("/status/tokenSecretRef/name")
        .and_then(|v| v.as_str())
        .unwrap_or(msa_name)
        .to_string();
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &cname);
    let Some(secret) = secrets
        .get_opt(&token_secret)
        .await
        .map_err(kerr(format!("reading token Secret {cname}/{token_secret}")))?
    else {
        return Ok(Credentials::Blank);
    };
    let Some(token) = secrets::secret_value(&secret, "token").filter(|t| !t.is_empty()) else {
        return Ok(Credentials::Blank);
    };
    let ca = secret
        .data
        .as_ref()
        .and_then(|d| d.get("ca.crt"))
        .map(|b| base64::engine::general_purpose::STANDARD.encode(&b.0));
    Ok(secrets::token_credentials(cluster, &token, ca.as_deref()).unwrap_or(Credentials::Blank))
}

/// Writes the Secret of every selected cluster, refuses clusters claimed by a foreign Secret,
/// removes stale Secrets. Returns the `ClustersRegistered` check and the registered names.
pub(super) async fn register_clusters(
    ctx: &Ctx,
    gc: &GitOpsCluster,
    owner: &str,
    argo_ns: &str,
    selected: &[String],
    errors: &mut Vec<String>,
) -> (Check, Vec<String>) {
    let msa_name = gc
        .spec
        .managed_service_account_ref
        .as_deref()
        .filter(|m| !m.is_empty())
        .unwrap_or(secrets::DEFAULT_MANAGED_SERVICE_ACCOUNT);
    let all_secrets = ctx.secrets.state();
    let owned_by = |s: &Secret| {
        s.annotations()
            .get(ANNOTATION_GITOPSCLUSTER)
            .is_some_and(|o| o == owner)
    };
    // Cluster names claimed by foreign (non-ACM) cluster Secrets in the Argo namespace.
    let foreign: BTreeSet<String> = all_secrets
        .iter()
        .filter(|s| s.metadata.namespace.as_deref() == Some(argo_ns))
        .filter(|s| {
            s.labels()
                .get(names::LABEL_ACM_CLUSTER)
                .is_none_or(|v| v != "true")
        })
        .filter_map(|s| secrets::secret_value(s, "name"))
        .collect();
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), argo_ns);
    let pp = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    // One cluster: its Secret's name (when it has a desired one) and what became of it.
    let register = |cname: String| {
        let (api, pp, foreign) = (&api, &pp, &foreign);
        async move {
            let Some(cluster) = ctx.clusters.get(&reflector::ObjectRef::new(&cname)) else {
                return (None, Registration::Missing);
            };
            if foreign.contains(&cname) {
                return (None, Registration::Refused);
            }
            let creds = match credentials(ctx, gc, &cluster, msa_name).await {
                Ok(c) => c,
                Err(e) => return (None, Registration::Failed(e.to_string())),
            };
            let desired = secrets::cluster_secret(&cluster, argo_ns, msa_name, &creds, owner);
            let sname = desired.name_any();
            let existing = ctx
                .secrets
                .get(&reflector::ObjectRef::new(&sname).within(argo_ns));
            let result = match existing {
                Some(cur)
                    if secrets::secret_up_to_date(&cur, &desired)
                        && secrets::stale_labels(&cur, &desired).is_empty() =>
                {
                    Ok(())
                }
                Some(cur)
                    if !owned_by(&cur) && cur.labels().get(names::LABEL_ACM_CLUSTER).is_none() =>
                {
                    return (Some(sname), Registration::Refused);
                }
                Some(cur) => {
                    let mut replacement = desired.clone();
                    replacement.metadata.resource_version = cur.resource_version();
                    api.replace(&sname, pp, &replacement).await.map(|_| {
                        ctx.metrics.write(CONTROLLER, "Secret", "update");
                        tracing::info!(gitopscluster = owner, secret = %sname, "cluster secret updated");
                    })
                }
                None => api.create(pp, &desired).await.map(|_| {
                    ctx.metrics.write(CONTROLLER, "Secret", "create");
                    tracing::info!(gitopscluster = owner, secret = %sname, "cluster secret created");
                }),
            };
            let r = match result {
                Ok(()) => Registration::Done,
                Err(e) => Registration::Failed(format!("writing Secret {argo_ns}/{sname}: {e}")),
            };
            (Some(sname), r)
        }
    };
    // Concurrently: one write after the other took 11 s for 25 new clusters on a restarted
    // API server (docs/reliability.md); in order, so that the status lists them sorted.
    let registrations: Vec<_> = selected.iter().cloned().map(register).collect();
    let outcomes: Vec<(Option<String>, Registration)> = futures::stream::iter(registrations)
        .buffered(WRITE_CONCURRENCY)
        .collect()
        .await;
    let mut registered = Vec::new();
    let mut refused = Vec::new();
    let mut missing = Vec::new();
    let mut desired_names = BTreeSet::new();
    for (cname, (sname, r)) in selected.iter().zip(outcomes) {
        desired_names.extend(sname);
        match r {
            Registration::Done => registered.push(cname.clone()),
            Registration::Missing => missing.push(cname.clone()),
            Registration::Refused => refused.push(cname.clone()),
            Registration::Failed(e) => errors.push(e),
        }
    }

    // Stale Secrets of this GitOpsCluster.
    let selected_set: BTreeSet<&String> = selected.iter().collect();
    let mut stale = Vec::new();
    for s in all_secrets.iter().filter(|s| owned_by(s)) {
        let sns = s.namespace().unwrap_or_default();
        let sname = s.name_any();
        if sns == argo_ns && desired_names.contains(&sname) {
            continue;
        }
        let cname = s
            .labels()
            .get(names::LABEL_CLUSTER_NAME)
            .cloned()
            .unwrap_or_default();
        let cluster_gone = ctx
            .clusters
            .get(&reflector::ObjectRef::new(&cname))
            .is_none();
        let superseded = sns != argo_ns
            || (selected_set.contains(&cname)
                && sname != secrets::cluster_secret_name(&cname, msa_name));
        let left = !selected_set.contains(&cname);
        let delete = cluster_gone
            || superseded
            || (left && ctx.config.stale_secret_policy == StaleSecretPolicy::LeftPlacement);
        if delete {
            stale.push((sns, sname, cname, cluster_gone));
        }
    }
    let deletes: Vec<_> = stale
        .into_iter()
        .map(|(sns, sname, cname, cluster_gone)| async move {
            let sapi: Api<Secret> = Api::namespaced(ctx.client.clone(), &sns);
            match sapi.delete(&sname, &DeleteParams::default()).await {
                Ok(_) => {
                    ctx.metrics.write(CONTROLLER, "Secret", "delete");
                    tracing::info!(gitopscluster = owner, secret = %sname, cluster = %cname, cluster_gone, "stale cluster secret deleted");
                    None
                }
                Err(e) if is_status(&e, 404) => None,
                Err(e) => Some(format!("deleting Secret {sns}/{sname}: {e}")),
            }
        })
        .collect();
    let deleted: Vec<Option<String>> = futures::stream::iter(deletes)
        .buffer_unordered(WRITE_CONCURRENCY)
        .collect()
        .await;
    errors.extend(deleted.into_iter().flatten());

    let check = if !refused.is_empty() {
        Check::failed(
            "ForeignClusterSecret",
            format!(
                "not registered: clusters [{}] are already named by cluster secrets in namespace {argo_ns} that no GitOpsCluster manages",
                refused.join(" ")
            ),
        )
    } else if !errors.is_empty() {
        Check::failed("SecretWriteFailed", errors.join("; "))
    } else {
        let mut msg = format!(
            "{} cluster secret(s) in namespace {argo_ns}",
            registered.len()
        );
        if !missing.is_empty() {
            msg.push_str(&format!(
                "; decided clusters without a ManagedCluster skipped: [{}]",
                missing.join(" ")
            ));
        }
        Check::ok("Success", msg)
    };
    (check, registered)
}
