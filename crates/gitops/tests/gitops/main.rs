//! GitOpsCluster and report controller tests on the embedded hub.
