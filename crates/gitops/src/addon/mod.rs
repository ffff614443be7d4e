//! The advanced pull model's setup automation: a GitOpsCluster (v1alpha1) with
//! `spec.argoCDAgentAddon` → the agent CA and certificates, the principal's secrets, a cluster
//! secret per selected cluster, the CA and ArgoCD CR ManifestWorks, and the agent delivered as an
//! OCM addon (argocd-pull-integration's behaviour and names; see docs/addon.md for where we differ).
//!
//! * [`pki`], [`discovery`], [`desired`], [`template`], [`conditions`] — pure: what should exist.
//! * [`reconcile`] — reads, applies the plan writing only what differs, cleans up.
//! * [`apply`], [`write`] — the writes: server-side apply where something differs; key material
//!   and copies of the CA created only if absent and changed only from the version read.
//! * [`health`] — the agent's stream on its ManagedClusterAddOn: OCM's `Available` follows the
//!   agent's readiness ([`template::readiness_probe`]); condition `AgentConnected` says it in
//!   words a person can act on.

pub mod apply;
pub mod conditions;
pub mod desired;
pub mod discovery;
pub mod health;
pub mod pki;
pub mod reconcile;
pub mod template;
pub mod write;

pub use argocd_pull_api::addon::{ArgoCDAgentAddonSpec, GitOpsCluster};
use k8s_openapi::api::core::v1::Secret;

pub const ADDON_NAME: &str = "argocd-agent-addon";
pub const ADDON_CONFIG: &str = "argocd-agent-addon-config";
pub const ADDON_GROUP: &str = "addon.open-cluster-management.io";
pub const ADDON_API: &str = "addon.open-cluster-management.io/v1alpha1";
pub const WORK_API: &str = "work.open-cluster-management.io/v1";
pub const SIGNER_NAME: &str = "open-cluster-management.io/argocd-agent-addon";
/// The client certificate OCM writes in the addon's install namespace.
pub const CLIENT_CERT_SECRET: &str =
    "argocd-agent-addon-open-cluster-management.io-argocd-agent-addon-client-cert";
pub const DEFAULT_INSTALL_NAMESPACE: &str = "open-cluster-management-agent-addon";
pub const DEFAULT_AGENT_NAMESPACE: &str = "argocd";
pub const LOCAL_CLUSTER: &str = "local-cluster";

pub const SECRET_JWT: &str = "argocd-agent-jwt";
pub const SECRET_CA: &str = "argocd-agent-ca";
pub const SECRET_PRINCIPAL_TLS: &str = "argocd-agent-principal-tls";
pub const SECRET_RESOURCE_PROXY_TLS: &str = "argocd-agent-resource-proxy-tls";
pub const CONFIGMAP_CA_BUNDLE: &str = "argocd-agent-ca-bundle";
pub const CA_WORK: &str = "argocd-agent-ca-mw";
pub const RBAC_ROLE: &str = "addon-manager-controller-role";
pub const RBAC_BINDING: &str = "addon-manager-controller-rolebinding";

pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY: &str = "argocd-pull-integration";
pub const LABEL_COMPONENT: &str = "app.kubernetes.io/component";
/// Owner labels (the peer puts them on the AddOnTemplate; we put them on everything, so that
/// cleanup never touches another GitOpsCluster's objects).
pub const LABEL_GC_NAME: &str = "gitopscluster.apps.open-cluster-management.io/name";
pub const LABEL_GC_NAMESPACE: &str = "gitopscluster.apps.open-cluster-management.io/namespace";
pub const LABEL_GITOPSCLUSTER: &str = "apps.open-cluster-management.io/gitopscluster";
pub const LABEL_CLUSTER_NAME: &str = argocd_pull_api::names::LABEL_CLUSTER_NAME;
pub const LABEL_AGENT_NAME: &str = "argocd-agent.argoproj-labs.io/agent-name";
pub const LABEL_PLACEMENT_NAME: &str = "placement-name";
pub const ANNOTATION_PROPAGATE_CA: &str =
    "apps.open-cluster-management.io/propagate-argocd-agent-ca";
/// Removed after everything this GitOpsCluster created is deleted.
pub const FINALIZER: &str = "argocd-pull.io/argocd-agent-addon-cleanup";

pub use conditions::*;

/// The client certificate and key inside a `cluster-<c>` Secret's `config.tlsClientConfig`.
pub fn cluster_secret_client_pem(s: &Secret) -> Option<pki::Pem> {
    use base64::Engine;
    let config = s.data.as_ref()?.get("config")?;
    let v: serde_json::Value = serde_json::from_slice(&config.0).ok()?;
    let dec = |k: &str| {
        let b = v.pointer(&format!("/tlsClientConfig/{k}"))?.as_str()?;
        String::from_utf8(base64::engine::general_purpose::STANDARD.decode(b).ok()?).ok()
    };
    Some(pki::Pem {
        cert: dec("certData")?,
        key: dec("keyData")?,
    })
}
