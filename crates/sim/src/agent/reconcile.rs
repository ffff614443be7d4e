//! Reconciling one ManifestWork: finalizer, applying its manifests, deleting those removed from
//! it (or all on deletion) and writing its status.

use std::sync::Arc;

use argocd_pull_api::Condition;
use argocd_pull_api::ocm::work::{
    DeleteOption, ManifestCondition, ManifestResourceMeta, ManifestResourceStatus, ManifestWork,
    ManifestWorkStatus,
};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PropagationPolicy};
use kube::runtime::controller::Action;
use serde_json::json;
use tracing::debug;

use super::apply::apply_manifest;
use super::config::WORK_FINALIZER;
use super::error::AgentError;
use super::identity::{is_orphaned, meta_id, meta_type};
use super::state::{Agent, Spoke};
use super::stats::AgentStats;
use crate::util::condition;

fn not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

fn previous_manifests(work: &ManifestWork) -> &[ManifestCondition] {
    work.status
        .as_ref()
        .and_then(|s| s.resource_status.as_ref())
        .map(|r| r.manifests.as_slice())
        .unwrap_or(&[])
}

pub(super) async fn reconcile(
    work: Arc<ManifestWork>,
    agent: Arc<Agent>,
) -> Result<Action, AgentError> {
    let r = reconcile_work(work, &agent).await;
    AgentStats::bump(&agent.stats.reconciles);
    r
}

async fn reconcile_work(work: Arc<ManifestWork>, agent: &Arc<Agent>) -> Result<Action, AgentError> {
    let ns = work.namespace().unwrap_or_default();
    let name = work.name_any();
    let Some(spoke) = agent.spoke(&ns) else {
        // Not a cluster namespace (or the cluster is gone): not ours.
        return Ok(Action::await_change());
    };
    let works = Api::<ManifestWork>::namespaced(agent.hub.clone(), &ns);
    let finalizers = work.finalizers();
    let has_finalizer = finalizers.iter().any(|f| f == WORK_FINALIZER);

    if work.metadata.deletion_timestamp.is_some() {
        if !has_finalizer {
            return Ok(Action::await_change());
        }
        let targets: Vec<ManifestResourceMeta> = previous_manifests(&work)
            .iter()
            .map(|m| m.resource_meta.clone())
            .collect();
        let done =
            delete_resources(agent, &spoke, &targets, work.spec.delete_option.as_ref()).await?;
        if !done {
            return Ok(Action::requeue(agent.config.retry_interval));
        }
        let rest: Vec<&String> = finalizers.iter().filter(|f| *f != WORK_FINALIZER).collect();
        let patch =
            json!({"metadata": {"finalizers": rest, "resourceVersion": work.resource_version()}});
        match works
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {}
            Err(e) if not_found(&e) => {}
            Err(e) => return Err(e.into()),
        }
        agent.set_carried(&ns, &name, Vec::new());
        debug!(cluster = %ns, work = %name, "work cleaned up");
        return Ok(Action::await_change());
    }

    if !has_finalizer {
        let mut all: Vec<String> = finalizers.to_vec();
        all.push(WORK_FINALIZER.to_string());
        let patch =
            json!({"metadata": {"finalizers": all, "resourceVersion": work.resource_version()}});
        works
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }

    let generation = work.metadata.generation;
    let previous = previous_manifests(&work);
    let mut manifests_status = Vec::new();
    let mut carried = Vec::new();
    let mut current_ids = Vec::new();
    let mut all_applied = true;
    let mut available = 0usize;
    for (i, manifest) in work.spec.workload.manifests.iter().enumerate() {
        let ordinal = i as i32;
        let (mc, res) = apply_manifest(agent, &spoke, &work, ordinal, manifest, previous).await;
        if let Some(r) = &res {
            current_ids.push(r.id());
            carried.push((
                ns.clone(),
                r.ti.group.clone(),
                r.ti.plural.clone(),
                r.namespace.clone(),
                r.name.clone(),
            ));
        }
        let cond_true = |t: &str| {
            mc.conditions
                .iter()
                .any(|c| c.type_ == t && c.status == "True")
        };
        all_applied &= cond_true("Applied");
        if cond_true("Available") {
            available += 1;
        }
        manifests_status.push(mc);
    }
    agent.set_carried(&ns, &name, carried);

    // Manifests removed from the work: delete them on the cluster.
    let stale: Vec<ManifestResourceMeta> = previous
        .iter()
        .map(|m| m.resource_meta.clone())
        .filter(|m| !m.resource.is_empty() && !current_ids.contains(&meta_id(m)))
        .collect();
    if !stale.is_empty() {
        delete_resources(agent, &spoke, &stale, work.spec.delete_option.as_ref()).await?;
    }

    let total = work.spec.workload.manifests.len();
    let prev_conds: &[Condition] = work
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or(&[]);
    let conditions = vec![
        if all_applied {
            condition(
                prev_conds,
                "Applied",
                true,
                "AppliedManifestWorkComplete",
                "Apply manifest work complete",
                generation,
            )
        } else {
            condition(
                prev_conds,
                "Applied",
                false,
                "AppliedManifestWorkFailed",
                "Failed to apply manifest work",
                generation,
            )
        },
        if available == total {
            condition(
                prev_conds,
                "Available",
                true,
                "ResourcesAvailable",
                "All resources are available",
                generation,
            )
        } else {
            condition(
                prev_conds,
                "Available",
                false,
                "ResourcesNotAvailable",
                format!(
                    "{} of {total} resources are not available",
                    total - available
                ),
                generation,
            )
        },
    ];
    let status = ManifestWorkStatus {
        conditions,
        resource_status: Some(ManifestResourceStatus {
            manifests: manifests_status,
        }),
    };
    if work.status.as_ref() != Some(&status) {
        let patch = json!({"status": status});
        AgentStats::bump(&agent.stats.status_writes);
        match works
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {}
            Err(e) if not_found(&e) => return Ok(Action::await_change()),
            Err(e) => return Err(e.into()),
        }
    }
    if all_applied {
        Ok(Action::await_change())
    } else {
        Ok(Action::requeue(agent.config.retry_interval))
    }
}

/// Deletes `targets` on the cluster unless orphaned; true when all of them are gone.
async fn delete_resources(
    agent: &Agent,
    spoke: &Spoke,
    targets: &[ManifestResourceMeta],
    opt: Option<&DeleteOption>,
) -> Result<bool, AgentError> {
    let mut all_gone = true;
    for m in targets {
        if m.resource.is_empty() || is_orphaned(opt, &meta_id(m)) {
            continue;
        }
        let ti = meta_type(m);
        let ar = ti.api_resource();
        let api: Api<DynamicObject> = if m.namespace.is_empty() {
            Api::all_with(spoke.client.clone(), &ar)
        } else {
            Api::namespaced_with(spoke.client.clone(), &m.namespace, &ar)
        };
        let dp = DeleteParams {
            propagation_policy: Some(PropagationPolicy::Foreground),
            ..Default::default()
        };
        AgentStats::bump(&agent.stats.spoke_writes);
        match api.delete(&m.name, &dp).await {
            Ok(either) => {
                if either.is_left() {
                    // Still there (finalizers pending): check again later.
                    if api.get_opt(&m.name).await?.is_some() {
                        all_gone = false;
                    }
                }
            }
            Err(e) if not_found(&e) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(all_gone)
}
