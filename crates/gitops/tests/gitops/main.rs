//! GitOpsCluster, basic-mode secrets and ApplicationSet report controllers on the embedded hub.

mod addon;
mod addon_concurrent;
mod addon_e2e;
mod addon_health;
mod e2e;
mod faults;
mod gitopscluster;
mod report;
mod util;

/// `deploy/crds/argocd-pull-crds.yaml` (what `argocd-pull crds` prints; the CLI's tests pin the
/// equality) holds exactly the CRDs these controllers serve, and they install.
#[test]
fn deploy_crds_match_the_served_crds() {
    let deployed = include_str!("../../../../deploy/crds/argocd-pull-crds.yaml");
    for crd in argocd_pull_api::crds::OWN {
        assert!(deployed.contains(crd.trim_start_matches("---\n").trim_end()));
    }
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
