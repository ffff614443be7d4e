//! GitOpsCluster, basic-mode secrets and ApplicationSet report controllers on the embedded hub.

mod e2e;
mod gitopscluster;
mod report;
mod util;
