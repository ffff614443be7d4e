//! GitOpsCluster, basic-mode secrets and ApplicationSet report controllers on the embedded hub.

mod e2e;
mod gitopscluster;
mod report;
mod util;

/// `deploy/gitops/crds.yaml` is exactly the CRDs the project serves, and they install.
#[test]
fn deploy_crds_match_the_served_crds() {
    let deployed = include_str!("../../../../deploy/gitops/crds.yaml");
    assert_eq!(deployed, argocd_pull_api::crds::OWN.concat());
    let hub = argocd_pull_hub::Hub::new();
    let names = hub.install_crds_yaml(deployed).expect("installs");
    assert_eq!(
        names,
        [
            "gitopsclusters.apps.open-cluster-management.io",
            "multiclusterapplicationsetreports.apps.open-cluster-management.io"
        ]
    );
}
