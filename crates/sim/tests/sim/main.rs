//! Integration tests of the simulated fleet (one binary; modules by area).

mod agent;
mod argo;
mod common;
mod fleet;
mod placement;
mod replicaset;
