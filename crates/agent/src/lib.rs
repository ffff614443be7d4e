//! Agent-based pull model: principal and agent over mTLS gRPC streams, wire-compatible with
//! argoproj-labs/argocd-agent. See `README.md` for the design and every deviation from the peer.
//!
//! This crate puts the parts together: the commands (`cli`) and a local deployment (`local`) for
//! tests, benchmarks and the demo. The parts are crates of their own:
//! [`argocd_pull_agent_core`] (the wire and everything both ends share),
//! [`argocd_pull_principal`] (the principal and its HA modes), [`argocd_pull_spoke`] (the agent on
//! a managed cluster) and [`argocd_pull_ctl`] (`argocd-pull ctl`). Its loopback tests and
//! benchmarks run them together.

pub mod cli;
pub mod local;
pub use local::{LocalDeployment, start_local, start_local_stores};
