//! Vendored CustomResourceDefinitions (YAML, unedited copies of the upstream files).

macro_rules! vendored {
    ($($name:ident => $path:literal),* $(,)?) => {
        $(pub const $name: &str = include_str!(concat!("../crds/", $path));)*
    };
}

vendored! {
    ARGOCD_APPLICATION => "argocd/application-crd.yaml",
    ARGOCD_APPLICATIONSET => "argocd/applicationset-crd.yaml",
    ARGOCD_APPPROJECT => "argocd/appproject-crd.yaml",
    OCM_MANAGED_CLUSTERS => "ocm/clusters.open-cluster-management.io_managedclusters.crd.yaml",
    OCM_MANAGED_CLUSTER_SETS => "ocm/clusters.open-cluster-management.io_managedclustersets.crd.yaml",
    OCM_MANAGED_CLUSTER_SET_BINDINGS => "ocm/clusters.open-cluster-management.io_managedclustersetbindings.crd.yaml",
    OCM_PLACEMENTS => "ocm/clusters.open-cluster-management.io_placements.crd.yaml",
    OCM_PLACEMENT_DECISIONS => "ocm/clusters.open-cluster-management.io_placementdecisions.crd.yaml",
    OCM_MANIFESTWORKS => "ocm/work.open-cluster-management.io_manifestworks.crd.yaml",
    OCM_MANIFESTWORK_REPLICASETS => "ocm/work.open-cluster-management.io_manifestworkreplicasets.crd.yaml",
    OCM_ADDON_DEPLOYMENT_CONFIGS => "ocm/addon.open-cluster-management.io_addondeploymentconfigs.crd.yaml",
    OCM_ADDON_TEMPLATES => "ocm/addon.open-cluster-management.io_addontemplates.crd.yaml",
    OCM_CLUSTER_MANAGEMENT_ADDONS => "ocm/addon.open-cluster-management.io_clustermanagementaddons.crd.yaml",
    OCM_MANAGED_CLUSTER_ADDONS => "ocm/addon.open-cluster-management.io_managedclusteraddons.crd.yaml",
    GITOPSCLUSTER_V1BETA1 => "reference/gitopsclusters.v1beta1.acm.yaml",
    GITOPSCLUSTER_V1ALPHA1 => "reference/gitopsclusters.v1alpha1.argocd-pull-integration.yaml",
    APPSET_REPORT => "reference/multiclusterapplicationsetreports.yaml",
    GITOPSCLUSTER => "own/gitopsclusters.yaml",
}

/// Argo CD's CRDs: what a cluster running Argo CD serves.
pub const ARGOCD: &[&str] = &[ARGOCD_APPLICATION, ARGOCD_APPLICATIONSET, ARGOCD_APPPROJECT];

/// The OCM hub's CRDs (cluster, placement, work, addon APIs).
pub const OCM_HUB: &[&str] = &[
    OCM_MANAGED_CLUSTERS,
    OCM_MANAGED_CLUSTER_SETS,
    OCM_MANAGED_CLUSTER_SET_BINDINGS,
    OCM_PLACEMENTS,
    OCM_PLACEMENT_DECISIONS,
    OCM_MANIFESTWORKS,
    OCM_MANIFESTWORK_REPLICASETS,
    OCM_ADDON_DEPLOYMENT_CONFIGS,
    OCM_ADDON_TEMPLATES,
    OCM_CLUSTER_MANAGEMENT_ADDONS,
    OCM_MANAGED_CLUSTER_ADDONS,
];

/// The CRDs argocd-pull itself serves: `GitOpsCluster` ([`GITOPSCLUSTER`]: v1alpha1, the
/// argocd-pull-integration schema, and v1beta1, the ACM schema, from one CRD) and
/// `MulticlusterApplicationSetReport`. `argocd-pull crds` prints these.
pub const OWN: &[&str] = &[GITOPSCLUSTER, APPSET_REPORT];
