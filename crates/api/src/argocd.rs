//! Argo CD `argoproj.io/v1alpha1` types: `Application`, `ApplicationSet`, `AppProject`.
//!
//! Only what argocd-pull reads is typed; everything else lands in `extra` maps so that nothing is
//! lost on a read/serialize round trip. The `Application` CRD has no status subresource and a
//! top-level `operation` field, so it is hand-written rather than derived.

use std::borrow::Cow;

use k8s_openapi::NamespaceResourceScope;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize, ser::SerializeStruct};
use serde_json::Value;

use crate::{Extra, ObjectMeta};

pub const GROUP: &str = "argoproj.io";
pub const VERSION: &str = "v1alpha1";
pub const API_VERSION: &str = "argoproj.io/v1alpha1";

/// An Argo CD Application.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Application {
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: ApplicationSpec,
    /// A requested operation (e.g. a sync); Argo CD clears it when it starts the operation.
    #[serde(default)]
    pub operation: Option<Value>,
    #[serde(default)]
    pub status: Option<ApplicationStatus>,
}

impl Serialize for Application {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut s = serializer.serialize_struct("Application", 6)?;
        s.serialize_field("apiVersion", API_VERSION)?;
        s.serialize_field("kind", "Application")?;
        s.serialize_field("metadata", &self.metadata)?;
        s.serialize_field("spec", &self.spec)?;
        if let Some(operation) = &self.operation {
            s.serialize_field("operation", operation)?;
        }
        if let Some(status) = &self.status {
            s.serialize_field("status", status)?;
        }
        s.end()
    }
}

impl kube::Resource for Application {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        "Application".into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        GROUP.into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        VERSION.into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        "applications".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl Application {
    /// The name of the ApplicationSet that owns this Application, if any (an owner reference with
    /// apiVersion `argoproj.io/v1alpha1` and kind `ApplicationSet`).
    pub fn owning_application_set(&self) -> Option<&str> {
        self.metadata
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.api_version == API_VERSION && o.kind == "ApplicationSet")
            .map(|o| o.name.as_str())
    }

    /// Health status string, if reported.
    pub fn health_status(&self) -> Option<&str> {
        self.status.as_ref()?.health.as_ref()?.status.as_deref()
    }

    /// Sync status string, if reported.
    pub fn sync_status(&self) -> Option<&str> {
        self.status.as_ref()?.sync.as_ref()?.status.as_deref()
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationSpec {
    #[serde(default)]
    pub destination: ApplicationDestination,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub project: String,
    /// `source`, `sources`, `syncPolicy`, … kept as they are.
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationDestination {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<HealthStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync: Option<SyncStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation_state: Option<OperationState>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<ApplicationCondition>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<Vec<ResourceStatus>>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HealthStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SyncStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OperationState {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// RFC 3339 time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation: Option<Value>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationCondition {
    #[serde(rename = "type")]
    pub type_: String,
    #[serde(default)]
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
}

/// An entry of `status.resources`: a resource the Application manages.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<HealthStatus>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// An Argo CD ApplicationSet (generators and template kept as JSON).
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "argoproj.io",
    version = "v1alpha1",
    kind = "ApplicationSet",
    namespaced,
    status = "ApplicationSetStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationSetSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generators: Option<Vec<Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<Value>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationSetStatus {
    #[serde(flatten)]
    pub extra: Extra,
}

/// An Argo CD AppProject.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "argoproj.io",
    version = "v1alpha1",
    kind = "AppProject",
    namespaced,
    status = "AppProjectStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct AppProjectSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destinations: Option<Vec<ApplicationDestination>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_repos: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_namespaces: Option<Vec<String>>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppProjectStatus {
    #[serde(flatten)]
    pub extra: Extra,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn application_round_trip_keeps_unmodelled_fields() {
        let input = json!({
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Application",
            "metadata": {"name": "guestbook", "namespace": "argocd"},
            "spec": {
                "project": "default",
                "destination": {"server": "https://kubernetes.default.svc", "namespace": "gb"},
                "source": {"repoURL": "https://github.com/argoproj/argocd-example-apps", "path": "guestbook"},
                "syncPolicy": {"automated": {"prune": true}}
            },
            "operation": {"sync": {"revision": "HEAD"}},
            "status": {
                "health": {"status": "Healthy"},
                "sync": {"status": "Synced", "revision": "abc"},
                "operationState": {"phase": "Succeeded", "startedAt": "2024-01-01T00:00:00Z", "syncResult": {"revision": "abc"}},
                "reconciledAt": "2024-01-01T00:00:01Z"
            }
        });
        let app: Application = serde_json::from_value(input.clone()).unwrap();
        assert_eq!(app.health_status(), Some("Healthy"));
        assert_eq!(app.sync_status(), Some("Synced"));
        assert_eq!(serde_json::to_value(&app).unwrap(), input);
    }

    #[test]
    fn owner_application_set_is_found_only_for_argocd_owner() {
        let mut app: Application = serde_json::from_value(json!({
            "metadata": {"name": "a", "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "ApplicationSet", "name": "wrong-group", "uid": "1"},
                {"apiVersion": "argoproj.io/v1alpha1", "kind": "ApplicationSet", "name": "set", "uid": "2"}
            ]}
        }))
        .unwrap();
        assert_eq!(app.owning_application_set(), Some("set"));
        app.metadata.owner_references.as_mut().unwrap().pop();
        assert_eq!(app.owning_application_set(), None);
    }
}
