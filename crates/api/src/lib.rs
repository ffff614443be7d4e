//! Typed Kubernetes API types used by argocd-pull.
//!
//! * [`argocd`] — Argo CD `Application`, `ApplicationSet`, `AppProject` (foreign: we model only what
//!   we read; every struct keeps the fields it does not model in an `extra` map, so a value read and
//!   serialized again loses nothing — still, write foreign objects with patches of the fields we own).
//! * [`ocm`] — Open Cluster Management cluster and work APIs.
//! * [`gitops`] / [`report`] — `GitOpsCluster` and `MulticlusterApplicationSetReport`, the CRDs this
//!   project serves (schemas compatible with the ACM implementation).
//! * [`addon`] — `GitOpsCluster` v1alpha1 (`spec.argoCDAgentAddon`, argocd-pull-integration).
//! * [`names`] — the labels, annotations and finalizers that form the contract with the Go peers.
//! * [`crds`] — the vendored upstream CRD YAMLs (for the embedded hub and `argocd-pull crds`).

pub mod addon;
pub mod argocd;
pub mod crds;
pub mod gitops;
pub mod names;
pub mod ocm;
pub mod report;

/// A JSON object: the representation of fields a type does not model.
pub type Extra = serde_json::Map<String, serde_json::Value>;

/// `metav1.Condition`, as used by OCM and GitOpsCluster status.
pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
