//! `MulticlusterApplicationSetReport` (`apps.open-cluster-management.io/v1alpha1`): per
//! ApplicationSet, the status of its Applications on every cluster. No spec, no status
//! subresource: everything is under the top-level `statuses`.

use std::borrow::Cow;

use k8s_openapi::NamespaceResourceScope;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize, ser::SerializeStruct};

use crate::ObjectMeta;

pub const GROUP: &str = "apps.open-cluster-management.io";
pub const VERSION: &str = "v1alpha1";

#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct MulticlusterApplicationSetReport {
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub statuses: Option<ReportStatuses>,
}

impl Serialize for MulticlusterApplicationSetReport {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut s = serializer.serialize_struct("MulticlusterApplicationSetReport", 4)?;
        s.serialize_field("apiVersion", "apps.open-cluster-management.io/v1alpha1")?;
        s.serialize_field("kind", "MulticlusterApplicationSetReport")?;
        s.serialize_field("metadata", &self.metadata)?;
        if let Some(statuses) = &self.statuses {
            s.serialize_field("statuses", statuses)?;
        }
        s.end()
    }
}

impl kube::Resource for MulticlusterApplicationSetReport {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        "MulticlusterApplicationSetReport".into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        GROUP.into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        VERSION.into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        "multiclusterapplicationsetreports".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReportStatuses {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<ResourceRef>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cluster_conditions: Vec<ClusterCondition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<ReportSummary>,
}

#[derive(
    Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub struct ResourceRef {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterCondition {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cluster: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub app: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub sync_status: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub health_status: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub operation_state_started_at: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub operation_state_phase: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub sync_revision: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<ReportCondition>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReportCondition {
    #[serde(rename = "type", default, skip_serializing_if = "String::is_empty")]
    pub type_: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// Counts, all as strings (the ACM schema).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReportSummary {
    pub clusters: String,
    pub synced: String,
    pub not_synced: String,
    pub healthy: String,
    pub not_healthy: String,
    pub in_progress: String,
}
