//! `GitOpsCluster` `apps.open-cluster-management.io/v1alpha1` (argocd-pull-integration's shape):
//! `spec.argoCDAgentAddon` drives the advanced (argocd-agent) pull model's setup.
//!
//! The same CRD also serves v1beta1 ([`crate::gitops`]). Conversion is `None` and both versions
//! keep unknown fields (see `crds/own/gen.py`), so this type is a *view*: fields of the other
//! shape (e.g. `argoServer`) are not modelled here and survive because this crate's writers only
//! patch the fields they own — never `replace` a whole object read through this type.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::Condition;

#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "apps.open-cluster-management.io",
    version = "v1alpha1",
    kind = "GitOpsCluster",
    namespaced,
    status = "GitOpsClusterStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct GitOpsClusterSpec {
    /// `kind: Placement` and `name`, looked up in the GitOpsCluster's namespace.
    #[serde(default)]
    pub placement_ref: ObjectReference,
    /// Absent on an object written as v1beta1 (ACM shape): such an object is not ours.
    #[serde(
        default,
        rename = "argoCDAgentAddon",
        skip_serializing_if = "Option::is_none"
    )]
    pub argo_cd_agent_addon: Option<ArgoCDAgentAddonSpec>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ArgoCDAgentAddonSpec {
    /// Discovered from the `argocd-agent-principal` Service and written back when empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal_server_address: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal_server_port: Option<String>,
    /// `managed` (default) or `autonomous`; anything else is handled as managed (as the peer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator_namespace: Option<String>,
    /// The spoke Argo CD namespace (default `argocd`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_namespace: Option<String>,
    #[serde(
        default,
        rename = "argoCDCRManifestWork",
        skip_serializing_if = "Option::is_none"
    )]
    pub argo_cd_cr_manifest_work: Option<ArgoCDCRManifestWork>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ArgoCDCRManifestWork {
    #[serde(default)]
    pub manifests: Vec<Value>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GitOpsClusterStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}
