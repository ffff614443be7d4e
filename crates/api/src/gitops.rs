//! `GitOpsCluster` (`apps.open-cluster-management.io/v1beta1`, the ACM schema): Placement →
//! Argo CD cluster secrets.

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::Condition;

#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "apps.open-cluster-management.io",
    version = "v1beta1",
    kind = "GitOpsCluster",
    namespaced,
    status = "GitOpsClusterStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct GitOpsClusterSpec {
    /// Required by the v1beta1 schema; empty on an object written as v1alpha1 (the same CRD
    /// serves both, see [`crate::addon`]), which the v1beta1 controller leaves alone.
    #[serde(default)]
    pub argo_server: ArgoServerSpec,
    /// `kind: Placement` and `name`, looked up in the GitOpsCluster's namespace
    /// (`namespace` is ignored, as in ACM).
    pub placement_ref: ObjectReference,
    /// ManagedServiceAccount name (default `application-manager`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed_service_account_ref: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub create_blank_cluster_secrets: Option<bool>,
    /// Accepted, not implemented: reported in a condition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub create_policy_template: Option<bool>,
    /// Accepted, not implemented: reported in a condition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gitops_addon: Option<Value>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ArgoServerSpec {
    #[serde(default)]
    pub argo_namespace: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GitOpsClusterStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// `successful`, `failed` or empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
}
