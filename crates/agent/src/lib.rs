//! Agent-based pull model: principal and agent over mTLS gRPC streams, wire-compatible with
//! argoproj-labs/argocd-agent. See `README.md` for the design and every deviation from the peer.
//!
//! This crate puts the parts together: the commands (`cli`) and a local deployment (`local`) for
//! tests, benchmarks and the demo. The parts are crates of their own, re-exported here at the
//! paths they always had: [`argocd_pull_agent_core`] (the wire and everything both ends share),
//! [`principal`] and [`ha`] (`argocd-pull-principal`), [`agent`] (`argocd-pull-spoke`, the agent
//! on a managed cluster) and [`ctl`] (`argocd-pull-ctl`).

pub use argocd_pull_agent_core::*;
pub use argocd_pull_ctl as ctl;
pub use argocd_pull_principal as principal;
pub use argocd_pull_principal::ha;
pub use argocd_pull_spoke as agent;

pub mod cli;
pub mod local;
pub use local::{LocalDeployment, start_local, start_local_stores};
