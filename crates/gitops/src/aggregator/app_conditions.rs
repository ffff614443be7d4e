//! The `AdditionalStatusReport` condition on ApplicationSet-owned hub Applications: which
//! Application needs one ([`additional_status_condition`], pure) and the task that adds it.

use argocd_pull_ops::api_health::{ApiHealth, rewatching};
use argocd_pull_ops::watch::WatchEvents;

use argocd_pull_api::argocd;
use argocd_pull_api::names;
use futures::StreamExt;
use kube::api::{Api, ObjectMeta, Patch, PatchParams};
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use serde::Deserialize;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::name::CONTROLLER;
use crate::FIELD_MANAGER;
use crate::metrics::Metrics;
use crate::report;

/// A hub Application as the condition writer reads it.
#[derive(Clone, Debug, Deserialize)]
pub struct AppView {
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub status: Option<AppStatusView>,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct AppStatusView {
    #[serde(default)]
    pub conditions: Option<Vec<serde_json::Value>>,
}

impl Resource for AppView {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;
    fn kind(_: &()) -> std::borrow::Cow<'_, str> {
        "Application".into()
    }
    fn group(_: &()) -> std::borrow::Cow<'_, str> {
        argocd::GROUP.into()
    }
    fn version(_: &()) -> std::borrow::Cow<'_, str> {
        argocd::VERSION.into()
    }
    fn plural(_: &()) -> std::borrow::Cow<'_, str> {
        "applications".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// The `AdditionalStatusReport` condition for a hub Application, when it needs one: owned by an
/// ApplicationSet, selected for the pull model, targeting a cluster, and without conditions.
pub fn additional_status_condition(app: &AppView) -> Option<serde_json::Value> {
    let m = &app.metadata;
    let appset = m
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.api_version == argocd::API_VERSION && o.kind == "ApplicationSet")?;
    let selected = m
        .labels
        .as_ref()
        .and_then(|l| l.get(names::LABEL_PULL_TO_OCM))
        .and_then(|v| names::parse_go_bool(v))
        == Some(true);
    let cluster = m
        .annotations
        .as_ref()
        .and_then(|a| a.get(names::ANNOTATION_OCM_MANAGED_CLUSTER))
        .filter(|c| !c.is_empty())?;
    let has_conditions = app
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| !c.is_empty());
    if !selected || has_conditions || m.deletion_timestamp.is_some() {
        return None;
    }
    Some(json!({
        "type": "AdditionalStatusReport",
        "message": report::additional_status_report_message(
            m.namespace.as_deref().unwrap_or_default(),
            m.name.as_deref().unwrap_or_default(),
            &appset.name,
            cluster,
        ),
    }))
}

/// Adds the `AdditionalStatusReport` condition to ApplicationSet-owned hub Applications that
/// have none (a merge patch of `status.conditions` only — written only while the list is empty).
pub(crate) async fn run_app_conditions(
    client: Client,
    metrics: Metrics,
    health: ApiHealth,
    shutdown: CancellationToken,
) {
    let apps: Api<AppView> = Api::all(client.clone());
    let mut events = rewatching(
        apps,
        watcher::Config::default().labels(names::LABEL_PULL_TO_OCM),
        health,
    )
    .lists_as_they_come("applications")
    .controller(CONTROLLER)
    .applied_objects()
    .boxed();
    let pp = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    loop {
        let app = tokio::select! {
            _ = shutdown.cancelled() => break,
            a = events.next() => match a {
                None => break,
                Some(a) => a,
            },
        };
        let Some(condition) = additional_status_condition(&app) else {
            continue;
        };
        let ns = app.namespace().unwrap_or_default();
        let name = app.name_any();
        let api: Api<argocd::Application> = Api::namespaced(client.clone(), &ns);
        let patch = json!({"status": {"conditions": [condition]}});
        match api.patch(&name, &pp, &Patch::Merge(&patch)).await {
            Ok(_) => {
                metrics.write(CONTROLLER, "Application", "patch");
                tracing::debug!(application = %format!("{ns}/{name}"), "AdditionalStatusReport condition added");
            }
            Err(e) => {
                tracing::warn!(application = %format!("{ns}/{name}"), error = %e, "adding AdditionalStatusReport failed")
            }
        }
    }
}
