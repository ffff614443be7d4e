//! The placement evaluator: a simplified OCM placement controller on the hub.
//!
//! For every Placement it selects ManagedClusters (not being deleted) that
//! * carry label `cluster.open-cluster-management.io/clusterset` with one of `spec.clusterSets`
//!   when that list is non-empty (ManagedClusterSetBindings are not required),
//! * match at least one of `spec.predicates` (none: every cluster) — a predicate matches when its
//!   `requiredClusterSelector.labelSelector` does (`claimSelector`/`celSelector` are ignored),
//!
//! sorts them by name, keeps the first `numberOfClusters` when set (no prioritizers, taints,
//! tolerations, decision strategies or rollouts), and writes PlacementDecisions
//! `<placement>-decision-<n>` (at most [`CLUSTERS_PER_DECISION`] clusters each, labelled
//! `cluster.open-cluster-management.io/placement: <placement>`, owned by the Placement) and the
//! Placement's `status.numberOfSelectedClusters` and conditions `PlacementSatisfied` /
//! `PlacementMisconfigured`. It re-evaluates when Placements or ManagedClusters change and
//! writes nothing when nothing changed.

use std::collections::BTreeMap;
use std::sync::Arc;

use argocd_pull_api::names::LABEL_PLACEMENT;
use argocd_pull_api::ocm::cluster::{
    ClusterDecision, ManagedCluster, Placement, PlacementDecision, PlacementDecisionStatus,
    PlacementStatus,
};
use futures::StreamExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use serde_json::json;
use tokio::task::JoinHandle;
use tracing::debug;

use crate::selector;
use crate::util::condition;

/// OCM's maximum number of clusters in one PlacementDecision.
pub const CLUSTERS_PER_DECISION: usize = 100;
/// ManagedCluster label naming its cluster set.
pub const LABEL_CLUSTERSET: &str = "cluster.open-cluster-management.io/clusterset";

pub(crate) struct PlacementSim {
    task: JoinHandle<()>,
}

impl Drop for PlacementSim {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct Ctx {
    hub: Client,
    clusters: Store<ManagedCluster>,
}

#[derive(Debug, thiserror::Error)]
#[error(transparent)]
struct Error(#[from] kube::Error);

pub(crate) fn start(hub: Client) -> PlacementSim {
    let (preader, pwriter) = reflector::store::<Placement>();
    let (creader, cwriter) = reflector::store::<ManagedCluster>();
    let placements = reflector::reflector(
        pwriter,
        watcher::watcher(
            Api::<Placement>::all(hub.clone()),
            watcher::Config::default(),
        ),
    )
    .default_backoff()
    .applied_objects();
    let clusters = reflector::reflector(
        cwriter,
        watcher::watcher(
            Api::<ManagedCluster>::all(hub.clone()),
            watcher::Config::default(),
        ),
    )
    .default_backoff()
    .touched_objects();
    let all = preader.clone();
    let ctrl = Controller::for_stream(placements, preader).watches_stream(clusters, move |_c| {
        all.state()
            .iter()
            .map(|p| ObjectRef::from(&**p))
            .collect::<Vec<_>>()
    });
    let ctx = Arc::new(Ctx {
        hub,
        clusters: creader,
    });
    let task = tokio::spawn(async move {
        ctrl.run(
            reconcile,
            |_p, e, _c| {
                debug!(error = %e, "placement reconcile failed; retrying");
                Action::requeue(std::time::Duration::from_millis(500))
            },
            ctx,
        )
        .for_each(|_| std::future::ready(()))
        .await;
    });
    PlacementSim { task }
}

/// The cluster names `placement` selects among `clusters` (sorted), or a configuration error.
pub fn select(
    placement: &Placement,
    clusters: &[Arc<ManagedCluster>],
) -> Result<Vec<String>, String> {
    let spec = &placement.spec;
    let sets = spec.cluster_sets.as_deref().unwrap_or(&[]);
    let predicates = spec.predicates.as_deref().unwrap_or(&[]);
    let mut out = Vec::new();
    for c in clusters {
        if c.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let labels: &BTreeMap<String, String> = c.labels();
        if !sets.is_empty()
            && !labels
                .get(LABEL_CLUSTERSET)
                .is_some_and(|s| sets.contains(s))
        {
            continue;
        }
        let mut ok = predicates.is_empty();
        for p in predicates {
            let sel = p
                .required_cluster_selector
                .as_ref()
                .and_then(|s| s.label_selector.as_ref());
            let m = match sel {
                Some(sel) => selector::matches(sel, labels)?,
                None => true,
            };
            if m {
                ok = true;
                break;
            }
        }
        if ok {
            out.push(c.name_any());
        }
    }
    out.sort();
    if let Some(n) = spec.number_of_clusters
        && n >= 0
    {
        out.truncate(n as usize);
    }
    Ok(out)
}

async fn reconcile(p: Arc<Placement>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    if p.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let ns = p.namespace().unwrap_or_default();
    let name = p.name_any();
    let generation = p.metadata.generation;
    let clusters = ctx.clusters.state();
    let (selected, misconfigured) = match select(&p, &clusters) {
        Ok(s) => (s, None),
        Err(e) => (Vec::new(), Some(e)),
    };
    let decisions: Api<PlacementDecision> = Api::namespaced(ctx.hub.clone(), &ns);
    let existing = decisions
        .list(&ListParams::default().labels(&format!("{LABEL_PLACEMENT}={name}")))
        .await?;
    let mut existing: BTreeMap<String, PlacementDecision> = existing
        .items
        .into_iter()
        .map(|d| (d.name_any(), d))
        .collect();
    let chunks: Vec<&[String]> = if selected.is_empty() {
        vec![&[]]
    } else {
        selected.chunks(CLUSTERS_PER_DECISION).collect()
    };
    for (i, chunk) in chunks.iter().enumerate() {
        let dname = format!("{name}-decision-{}", i + 1);
        let status = PlacementDecisionStatus {
            decisions: chunk
                .iter()
                .map(|c| ClusterDecision {
                    cluster_name: c.clone(),
                    reason: String::new(),
                    score: None,
                })
                .collect(),
        };
        let current = match existing.remove(&dname) {
            Some(d) => d,
            None => {
                let owner = p.controller_owner_ref(&()).map(|mut o| {
                    o.block_owner_deletion = Some(true);
                    o
                });
                let d: PlacementDecision = serde_json::from_value(json!({
                    "metadata": {
                        "name": dname, "namespace": ns,
                        "labels": {
                            LABEL_PLACEMENT: name,
                            "cluster.open-cluster-management.io/decision-group-index": "0",
                            "cluster.open-cluster-management.io/decision-group-name": "",
                        },
                        "ownerReferences": owner.into_iter().collect::<Vec<_>>(),
                    }
                }))
                .map_err(kube::Error::SerdeError)?;
                decisions.create(&PostParams::default(), &d).await?
            }
        };
        let have = current.status.clone().unwrap_or_default();
        if have != status {
            decisions
                .patch_status(
                    &dname,
                    &PatchParams::default(),
                    &Patch::Merge(&json!({"status": status})),
                )
                .await?;
        }
    }
    for stale in existing.keys() {
        match decisions.delete(stale, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }

    let prev = p
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    let n = selected.len() as i32;
    let satisfied =
        p.spec.number_of_clusters.is_none_or(|want| n >= want) && misconfigured.is_none();
    let status = PlacementStatus {
        number_of_selected_clusters: Some(n),
        conditions: Some(vec![
            if satisfied {
                condition(
                    &prev,
                    "PlacementSatisfied",
                    true,
                    "AllDecisionsScheduled",
                    "All cluster decisions scheduled",
                    generation,
                )
            } else {
                condition(
                    &prev,
                    "PlacementSatisfied",
                    false,
                    "NotAllDecisionsScheduled",
                    format!("{n} cluster decisions scheduled"),
                    generation,
                )
            },
            match &misconfigured {
                None => condition(
                    &prev,
                    "PlacementMisconfigured",
                    false,
                    "Succeedconfigured",
                    "Placement configurations check pass",
                    generation,
                ),
                Some(e) => condition(
                    &prev,
                    "PlacementMisconfigured",
                    true,
                    "Misconfigured",
                    e.clone(),
                    generation,
                ),
            },
        ]),
        extra: p
            .status
            .as_ref()
            .map(|s| s.extra.clone())
            .unwrap_or_default(),
    };
    if p.status.as_ref() != Some(&status) {
        Api::<Placement>::namespaced(ctx.hub.clone(), &ns)
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(&json!({"status": status})),
            )
            .await?;
    }
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cluster(name: &str, labels: serde_json::Value) -> Arc<ManagedCluster> {
        Arc::new(
            serde_json::from_value(
                json!({"metadata": {"name": name, "labels": labels}, "spec": {}}),
            )
            .unwrap(),
        )
    }

    #[test]
    fn selection_sorted_limited_and_ored() {
        let cs = vec![
            cluster("c3", json!({"cloud": "Amazon"})),
            cluster(
                "c1",
                json!({"cloud": "Amazon", "cluster.open-cluster-management.io/clusterset": "prod"}),
            ),
            cluster("c2", json!({"cloud": "Google"})),
        ];
        let mut p: Placement = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "argocd"},
            "spec": {"predicates": [
                {"requiredClusterSelector": {"labelSelector": {"matchLabels": {"cloud": "Amazon"}}}}
            ]}
        }))
        .unwrap();
        assert_eq!(select(&p, &cs).unwrap(), ["c1", "c3"]);
        p.spec.number_of_clusters = Some(1);
        assert_eq!(select(&p, &cs).unwrap(), ["c1"]);
        p.spec.number_of_clusters = None;
        p.spec.predicates.as_mut().unwrap().push(
            serde_json::from_value(json!({"requiredClusterSelector": {"labelSelector": {
                "matchExpressions": [{"key": "cloud", "operator": "In", "values": ["Google"]}]}}}))
            .unwrap(),
        );
        assert_eq!(select(&p, &cs).unwrap(), ["c1", "c2", "c3"]);
        p.spec.cluster_sets = Some(vec!["prod".into()]);
        assert_eq!(select(&p, &cs).unwrap(), ["c1"]);
        p.spec.predicates = None;
        p.spec.cluster_sets = None;
        assert_eq!(
            select(&p, &cs).unwrap().len(),
            3,
            "no predicate selects every cluster"
        );
    }
}
