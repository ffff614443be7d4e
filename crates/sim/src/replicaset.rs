//! A simplified ManifestWorkReplicaSet controller (OCM's work controller on the hub).
//!
//! For every ManifestWorkReplicaSet it reads the PlacementDecisions of its `placementRefs` (in
//! its own namespace, by the `cluster.open-cluster-management.io/placement` label). It
//! server-side applies one ManifestWork named after the replica set in each selected cluster's
//! namespace: its spec is the `manifestWorkTemplate`, and it carries the label
//! `work.open-cluster-management.io/manifestworkreplicaset: <namespace>.<name>`. It deletes the
//! works of clusters that are no longer selected.
//!
//! It writes `status.summary`, counting the works that are applied, available, degraded and
//! progressing from their conditions. It also writes the conditions `PlacementVerified` (False
//! with reason `PlacementDecisionNotFound` while a referenced placement has no decision) and
//! `ManifestworkApplied`. A finalizer deletes the works when the replica set is deleted.
//!
//! Rollout strategies are ignored: every selected cluster gets the work at once. The
//! controller writes nothing when nothing changed.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use argocd_pull_api::names::LABEL_PLACEMENT;
use argocd_pull_api::ocm::cluster::PlacementDecision;
use argocd_pull_api::ocm::work::{ManifestWork, ManifestWorkReplicaSet};
use futures::StreamExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tracing::debug;

use crate::util::condition;

/// Label on each ManifestWork created for a replica set: `<namespace>.<name>`.
pub const LABEL_REPLICASET: &str = "work.open-cluster-management.io/manifestworkreplicaset";
/// OCM's finalizer on ManifestWorkReplicaSets.
pub const FINALIZER: &str = "work.open-cluster-management.io/manifest-work-cleanup";
const MANAGER: &str = "sim-manifestworkreplicaset";

pub(crate) struct ReplicaSetSim {
    task: JoinHandle<()>,
}

impl Drop for ReplicaSetSim {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct Ctx {
    hub: Client,
    decisions: Store<PlacementDecision>,
    works: Store<ManifestWork>,
}

#[derive(Debug, thiserror::Error)]
enum Error {
    #[error(transparent)]
    Kube(#[from] kube::Error),
    #[error(transparent)]
    Finalizer(#[from] Box<kube::runtime::finalizer::Error<Error>>),
}

/// The replica set a work was created for, from its label.
fn owner_of(work: &ManifestWork) -> Option<ObjectRef<ManifestWorkReplicaSet>> {
    let (namespace, name) = work.labels().get(LABEL_REPLICASET)?.split_once('.')?;
    Some(ObjectRef::new(name).within(namespace))
}

pub(crate) fn start(hub: Client) -> ReplicaSetSim {
    let (rreader, rwriter) = reflector::store::<ManifestWorkReplicaSet>();
    let (dreader, dwriter) = reflector::store::<PlacementDecision>();
    let (wreader, wwriter) = reflector::store::<ManifestWork>();
    let sets = reflector::reflector(
        rwriter,
        watcher::watcher(Api::all(hub.clone()), watcher::Config::default()),
    )
    .default_backoff()
    .applied_objects();
    let decisions = reflector::reflector(
        dwriter,
        watcher::watcher(Api::all(hub.clone()), watcher::Config::default()),
    )
    .default_backoff()
    .touched_objects();
    let works = reflector::reflector(
        wwriter,
        watcher::watcher(
            Api::all(hub.clone()),
            watcher::Config::default().labels(LABEL_REPLICASET),
        ),
    )
    .default_backoff()
    .touched_objects();
    let all = rreader.clone();
    let ctrl = Controller::for_stream(sets, rreader)
        .watches_stream(decisions, move |d: PlacementDecision| {
            let placement = d.labels().get(LABEL_PLACEMENT).cloned();
            let namespace = d.namespace();
            all.state()
                .iter()
                .filter(|s| s.namespace() == namespace)
                .filter(|s| {
                    s.spec
                        .placement_refs
                        .iter()
                        .any(|r| Some(&r.name) == placement.as_ref())
                })
                .map(|s| ObjectRef::from(&**s))
                .collect::<Vec<_>>()
        })
        .watches_stream(works, |w: ManifestWork| owner_of(&w));
    let ctx = Arc::new(Ctx {
        hub,
        decisions: dreader,
        works: wreader,
    });
    let task = tokio::spawn(async move {
        ctrl.run(
            reconcile,
            |_s, e, _c| {
                debug!(error = %e, "manifestworkreplicaset reconcile failed; retrying");
                Action::requeue(std::time::Duration::from_millis(500))
            },
            ctx,
        )
        .for_each(|_| std::future::ready(()))
        .await;
    });
    ReplicaSetSim { task }
}

async fn reconcile(set: Arc<ManifestWorkReplicaSet>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let namespace = set.namespace().unwrap_or_default();
    let api: Api<ManifestWorkReplicaSet> = Api::namespaced(ctx.hub.clone(), &namespace);
    finalizer(&api, FINALIZER, set, |event| async {
        match event {
            Finalizer::Apply(set) => apply(&set, &ctx).await,
            Finalizer::Cleanup(set) => {
                for (cluster, _) in works_of(&set, &ctx) {
                    delete_work(&ctx, &cluster, &set.name_any()).await?;
                }
                Ok(Action::await_change())
            }
        }
    })
    .await
    .map_err(|e| Error::Finalizer(Box::new(e)))
}

/// The works created for `set`, by cluster namespace.
fn works_of(set: &ManifestWorkReplicaSet, ctx: &Ctx) -> BTreeMap<String, Arc<ManifestWork>> {
    let label = format!("{}.{}", set.namespace().unwrap_or_default(), set.name_any());
    ctx.works
        .state()
        .into_iter()
        .filter(|w| w.labels().get(LABEL_REPLICASET) == Some(&label))
        .filter_map(|w| Some((w.namespace()?, w)))
        .collect()
}

async fn delete_work(ctx: &Ctx, cluster: &str, name: &str) -> Result<(), Error> {
    let works: Api<ManifestWork> = Api::namespaced(ctx.hub.clone(), cluster);
    match works.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

async fn apply(set: &ManifestWorkReplicaSet, ctx: &Ctx) -> Result<Action, Error> {
    let namespace = set.namespace().unwrap_or_default();
    let name = set.name_any();
    let decisions = ctx.decisions.state();
    let mut clusters = BTreeSet::new();
    let mut missing = Vec::new();
    for placement in &set.spec.placement_refs {
        let mut found = false;
        for d in decisions.iter().filter(|d| {
            d.namespace().as_deref() == Some(namespace.as_str())
                && d.labels().get(LABEL_PLACEMENT) == Some(&placement.name)
        }) {
            found = true;
            let selected = d.status.iter().flat_map(|s| s.decisions.iter());
            clusters.extend(selected.map(|c| c.cluster_name.clone()));
        }
        if !found {
            missing.push(placement.name.clone());
        }
    }

    let existing = works_of(set, ctx);
    let label = format!("{namespace}.{name}");
    let template =
        serde_json::to_value(&set.spec.manifest_work_template).map_err(kube::Error::SerdeError)?;
    for cluster in &clusters {
        let current = existing.get(cluster).map(|w| serde_json::to_value(&w.spec));
        if matches!(current, Some(Ok(ref spec)) if *spec == template) {
            continue;
        }
        let work = json!({
            "apiVersion": "work.open-cluster-management.io/v1",
            "kind": "ManifestWork",
            "metadata": {"name": name, "namespace": cluster, "labels": {LABEL_REPLICASET: label}},
            "spec": template,
        });
        Api::<ManifestWork>::namespaced(ctx.hub.clone(), cluster)
            .patch(
                &name,
                &PatchParams::apply(MANAGER).force(),
                &Patch::Apply(&work),
            )
            .await?;
    }
    for cluster in existing.keys().filter(|c| !clusters.contains(*c)) {
        delete_work(ctx, cluster, &name).await?;
    }

    let works: Vec<&Arc<ManifestWork>> = clusters.iter().filter_map(|c| existing.get(c)).collect();
    let count = |pred: &dyn Fn(&ManifestWork) -> bool| works.iter().filter(|w| pred(w)).count();
    let total = clusters.len();
    let applied = count(&|w| w.condition_true("Applied"));
    let available = count(&|w| w.condition_true("Available"));
    let degraded = count(&|w| {
        w.condition_true("Degraded")
            || w.status
                .iter()
                .flat_map(|s| s.conditions.iter())
                .any(|c| c.type_ == "Applied" && c.status == "False")
    });
    let summary = json!({
        "total": total, "applied": applied, "available": available, "degraded": degraded,
        "progressing": total.saturating_sub(available + degraded),
    });
    let generation = set.metadata.generation;
    let previous = set
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default();
    let verified = if missing.is_empty() {
        condition(
            &previous,
            "PlacementVerified",
            true,
            "AsExpected",
            "",
            generation,
        )
    } else {
        condition(
            &previous,
            "PlacementVerified",
            false,
            "PlacementDecisionNotFound",
            format!("no PlacementDecision for {}", missing.join(", ")),
            generation,
        )
    };
    let all_applied = applied == total && total > 0;
    let work_applied = condition(
        &previous,
        "ManifestworkApplied",
        all_applied,
        if all_applied {
            "AsExpected"
        } else {
            "Processing"
        },
        format!("{applied} of {total} ManifestWorks applied"),
        generation,
    );
    let status = json!({
        "conditions": [verified, work_applied],
        "summary": summary,
    });
    let current = set
        .status
        .as_ref()
        .map(serde_json::to_value)
        .transpose()
        .map_err(kube::Error::SerdeError)?
        .unwrap_or(Value::Null);
    let unchanged = current.get("summary") == status.get("summary")
        && current.get("conditions") == status.get("conditions");
    if !unchanged {
        Api::<ManifestWorkReplicaSet>::namespaced(ctx.hub.clone(), &namespace)
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(&json!({ "status": status })),
            )
            .await?;
    }
    Ok(Action::await_change())
}
