//! Report writing: a flush's [`Decision`]s carried out against the API — reports applied, and
//! the report and works of a deleted ApplicationSet removed.

use std::collections::BTreeSet;

use argocd_pull_api::ocm::work::ManifestWork;
use argocd_pull_api::report::MulticlusterApplicationSetReport;
use futures::{StreamExt, stream};
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams};
use kube::{Client, Resource};
use serde::Deserialize;

use super::index::{Decision, Index, WorkKey};
use super::name::CONTROLLER;
use crate::metrics::Metrics;
use crate::report::AppSetKey;
use crate::{FIELD_MANAGER, GitOpsConfig};

/// A MulticlusterApplicationSetReport response whose body is skipped, not decoded.
#[derive(Clone, Debug, Default, Deserialize)]
struct Unread {
    #[serde(skip)]
    metadata: ObjectMeta,
}

impl Resource for Unread {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;
    fn kind(_: &()) -> std::borrow::Cow<'_, str> {
        MulticlusterApplicationSetReport::kind(&())
    }
    fn group(_: &()) -> std::borrow::Cow<'_, str> {
        MulticlusterApplicationSetReport::group(&())
    }
    fn version(_: &()) -> std::borrow::Cow<'_, str> {
        MulticlusterApplicationSetReport::version(&())
    }
    fn plural(_: &()) -> std::borrow::Cow<'_, str> {
        MulticlusterApplicationSetReport::plural(&())
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// Carries out a flush's decisions; returns the first failure if any did not succeed (failed
/// ones are marked dirty again and retried on the next flush).
pub(super) async fn execute(
    client: &Client,
    config: &GitOpsConfig,
    metrics: &Metrics,
    index: &mut Index,
    decisions: Vec<Decision>,
) -> Result<(), kube::Error> {
    let results: Vec<(
        AppSetKey,
        Result<Option<MulticlusterApplicationSetReport>, kube::Error>,
    )> = stream::iter(decisions.into_iter().map(|d| {
        let client = client.clone();
        let metrics = metrics.clone();
        async move {
            match d {
                Decision::Write(k, desired) => {
                    // The response (the whole report again, with its managedFields) is not
                    // decoded: what was applied is what is remembered.
                    let api: Api<Unread> = Api::namespaced(client, &k.namespace);
                    let r = api
                        .patch(
                            &k.name,
                            &PatchParams::apply(FIELD_MANAGER).force(),
                            &Patch::Apply(&*desired),
                        )
                        .await
                        .map(|_| Some(*desired));
                    if r.is_ok() {
                        metrics.write(CONTROLLER, "MulticlusterApplicationSetReport", "apply");
                        tracing::debug!(appset = %k, "report written");
                    }
                    (k, r)
                }
                Decision::Delete(k, has_report, works) => {
                    let r = delete_appset_outputs(&client, &metrics, &k, has_report, &works).await;
                    (k, r.map(|_| None))
                }
            }
        }
    }))
    .buffer_unordered(config.report_write_concurrency.max(1))
    .collect()
    .await;
    let mut first = Ok(());
    for (k, r) in results {
        match r {
            Ok(Some(written)) => index.set_report(&written),
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(appset = %k, error = %e, "report write failed; retrying");
                index.dirty.insert(k);
                if first.is_ok() {
                    first = Err(e);
                }
            }
        }
    }
    first
}

async fn delete_appset_outputs(
    client: &Client,
    metrics: &Metrics,
    k: &AppSetKey,
    has_report: bool,
    works: &[WorkKey],
) -> Result<(), kube::Error> {
    let not_found = |e: &kube::Error| matches!(e, kube::Error::Api(s) if s.code == 404);
    let reports: Api<MulticlusterApplicationSetReport> =
        Api::namespaced(client.clone(), &k.namespace);
    let mut works: BTreeSet<WorkKey> = works.iter().cloned().collect();
    if has_report {
        // Also the works the stored report names (app = ns/app/workNs/workName).
        let stored = match reports.get(&k.name).await {
            Ok(r) => Some(r),
            Err(e) if not_found(&e) => None,
            Err(e) => return Err(e),
        };
        for cc in stored
            .as_ref()
            .and_then(|r| r.statuses.as_ref())
            .into_iter()
            .flat_map(|s| s.cluster_conditions.iter())
        {
            let parts: Vec<&str> = cc.app.split('/').collect();
            if let [_, _, wns, wname] = parts.as_slice() {
                works.insert((wns.to_string(), wname.to_string()));
            }
        }
    }
    for (ns, name) in &works {
        let api: Api<ManifestWork> = Api::namespaced(client.clone(), ns);
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => metrics.write(CONTROLLER, "ManifestWork", "delete"),
            Err(e) if not_found(&e) => {}
            Err(e) => return Err(e),
        }
    }
    if has_report {
        match reports.delete(&k.name, &DeleteParams::default()).await {
            Ok(_) => metrics.write(CONTROLLER, "MulticlusterApplicationSetReport", "delete"),
            Err(e) if not_found(&e) => {}
            Err(e) => return Err(e),
        }
    }
    tracing::info!(appset = %k, works = works.len(), "ApplicationSet gone: report and works deleted");
    Ok(())
}
