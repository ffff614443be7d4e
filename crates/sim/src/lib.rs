//! A simulated Open Cluster Management fleet for argocd-pull's tests, demo and benchmarks.
//!
//! [`Fleet`] runs an OCM hub and N managed clusters, each an in-memory
//! [`argocd_pull_hub::Hub`], with four simulators driven only through `kube::Client`s:
//! the OCM work agent ([`agent`]), Argo CD on every managed cluster ([`argo`]), the placement
//! evaluator ([`placement`]) and the ManifestWorkReplicaSet controller ([`replicaset`]). See `crates/sim/README.md` for what they do and do not do.

pub mod agent;
pub mod argo;
pub mod feedback;
pub mod fleet;
pub mod jsonpath;
pub mod placement;
pub mod replicaset;
pub mod resources;
pub mod selector;
mod util;
pub mod wait;

pub use agent::{AgentCounts, WORK_FINALIZER, WorkAgentConfig};
pub use argo::{ArgoSimConfig, FAIL_ANNOTATION, REVISION_ANNOTATION};
pub use fleet::{CrdFlavor, Fleet, FleetConfig, LabelFn, SimCluster, default_labels};
