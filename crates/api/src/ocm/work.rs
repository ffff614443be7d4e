//! `work.open-cluster-management.io`: ManifestWork (v1) and ManifestWorkReplicaSet (v1alpha1).

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{Condition, Extra};

pub const GROUP: &str = "work.open-cluster-management.io";

/// Resources the OCM work agent applies on the cluster named by the work's namespace.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "work.open-cluster-management.io",
    version = "v1",
    kind = "ManifestWork",
    namespaced,
    status = "ManifestWorkStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct ManifestWorkSpec {
    #[serde(default)]
    pub workload: ManifestsTemplate,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_option: Option<DeleteOption>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub manifest_configs: Vec<ManifestConfigOption>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executor: Option<Value>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManifestsTemplate {
    #[serde(default)]
    pub manifests: Vec<Value>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeleteOption {
    /// `Foreground` (default), `Orphan` or `SelectivelyOrphan`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub propagation_policy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selectively_orphans: Option<SelectivelyOrphan>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_seconds_after_finished: Option<i64>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SelectivelyOrphan {
    #[serde(default)]
    pub orphaning_rules: Vec<OrphaningRule>,
}

#[derive(
    Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub struct OrphaningRule {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub group: String,
    pub resource: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    pub name: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManifestConfigOption {
    pub resource_identifier: ResourceIdentifier,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub feedback_rules: Vec<FeedbackRule>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_strategy: Option<UpdateStrategy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub condition_rules: Option<Vec<Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub feedback_scrape_type: Option<String>,
}

/// Identifies one manifest of a work (group empty for the core group).
#[derive(
    Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub struct ResourceIdentifier {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub group: String,
    pub resource: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    pub name: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FeedbackRule {
    /// `WellKnownStatus` or `JSONPaths`.
    #[serde(rename = "type")]
    pub type_: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub json_paths: Vec<JsonPath>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JsonPath {
    pub name: String,
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpdateStrategy {
    /// `Update`, `CreateOnly`, `ServerSideApply` or `ReadOnly`.
    #[serde(rename = "type")]
    pub type_: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_side_apply: Option<ServerSideApplyConfig>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServerSideApplyConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub force: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field_manager: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ignore_fields: Vec<IgnoreField>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IgnoreField {
    /// `OnSpokePresent` or `OnSpokeChange`.
    pub condition: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub json_paths: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManifestWorkStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_status: Option<ManifestResourceStatus>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManifestResourceStatus {
    #[serde(default)]
    pub manifests: Vec<ManifestCondition>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManifestCondition {
    pub resource_meta: ManifestResourceMeta,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_feedback: Option<StatusFeedbackResult>,
    #[serde(default)]
    pub conditions: Vec<Condition>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManifestResourceMeta {
    pub ordinal: i32,
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub resource: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub namespace: String,
}

impl ManifestResourceMeta {
    /// Whether this status entry is about the resource `id` names.
    pub fn matches(&self, id: &ResourceIdentifier) -> bool {
        self.group == id.group
            && self.resource == id.resource
            && self.name == id.name
            && self.namespace == id.namespace
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StatusFeedbackResult {
    #[serde(default)]
    pub values: Vec<FeedbackValue>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FeedbackValue {
    pub name: String,
    pub field_value: FieldValue,
}

/// A feedback value: `type` is `String`, `Integer`, `Boolean` or `JsonRaw`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FieldValue {
    #[serde(rename = "type")]
    pub type_: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub string: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub integer: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boolean: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json_raw: Option<String>,
}

impl FieldValue {
    pub fn string(value: impl Into<String>) -> Self {
        FieldValue {
            type_: "String".into(),
            string: Some(value.into()),
            ..Default::default()
        }
    }

    /// The value rendered as text whatever its type (`None` when the typed field is missing).
    pub fn as_text(&self) -> Option<String> {
        match self.type_.as_str() {
            "String" => self.string.clone(),
            "Integer" => self.integer.map(|i| i.to_string()),
            "Boolean" => self.boolean.map(|b| b.to_string()),
            "JsonRaw" => self.json_raw.clone(),
            _ => self
                .string
                .clone()
                .or_else(|| self.integer.map(|i| i.to_string()))
                .or_else(|| self.boolean.map(|b| b.to_string()))
                .or_else(|| self.json_raw.clone()),
        }
    }
}

impl ManifestWork {
    /// The feedback values reported for the manifest `id` identifies (empty when none yet).
    pub fn feedback_for(&self, id: &ResourceIdentifier) -> &[FeedbackValue] {
        self.status
            .as_ref()
            .and_then(|s| s.resource_status.as_ref())
            .and_then(|rs| rs.manifests.iter().find(|m| m.resource_meta.matches(id)))
            .and_then(|m| m.status_feedback.as_ref())
            .map(|f| f.values.as_slice())
            .unwrap_or(&[])
    }

    /// Whether the work's top-level condition `type_` is `True`.
    pub fn condition_true(&self, type_: &str) -> bool {
        self.status
            .iter()
            .flat_map(|s| s.conditions.iter())
            .any(|c| c.type_ == type_ && c.status == "True")
    }
}

/// Fans a ManifestWork template out to the clusters of one or more Placements.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "work.open-cluster-management.io",
    version = "v1alpha1",
    kind = "ManifestWorkReplicaSet",
    namespaced,
    status = "ManifestWorkReplicaSetStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct ManifestWorkReplicaSetSpec {
    pub manifest_work_template: ManifestWorkSpec,
    pub placement_refs: Vec<LocalPlacementReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cascade_deletion_policy: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LocalPlacementReference {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout_strategy: Option<Value>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManifestWorkReplicaSetStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(flatten)]
    pub extra: Extra,
}
