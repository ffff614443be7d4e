//! Labels, annotations, finalizers and field names shared with the Go implementations.
//! These strings are a compatibility contract: never change them.

/// Label selecting an Application for the pull model (value parsed like Go's `strconv.ParseBool`).
pub const LABEL_PULL_TO_OCM: &str = "apps.open-cluster-management.io/pull-to-ocm-managed-cluster";
/// Annotation naming the target ManagedCluster.
pub const ANNOTATION_OCM_MANAGED_CLUSTER: &str =
    "apps.open-cluster-management.io/ocm-managed-cluster";
/// Annotation naming the Application's namespace on the managed cluster.
pub const ANNOTATION_OCM_MANAGED_CLUSTER_APP_NAMESPACE: &str =
    "apps.open-cluster-management.io/ocm-managed-cluster-app-namespace";
/// Destination overrides (upstream v0.27+).
pub const ANNOTATION_DESTINATION_NAME: &str = "apps.open-cluster-management.io/destination-name";
pub const ANNOTATION_DESTINATION_SERVER: &str =
    "apps.open-cluster-management.io/destination-server";
/// Hub Application identity on a ManifestWork.
pub const ANNOTATION_HUB_APPLICATION_NAMESPACE: &str =
    "apps.open-cluster-management.io/hub-application-namespace";
pub const ANNOTATION_HUB_APPLICATION_NAME: &str =
    "apps.open-cluster-management.io/hub-application-name";
/// `<appNs>/<appSetName>` of the owning ApplicationSet (annotation on works and payloads;
/// also the label on reports, there as `<ns>.<appset>` cut to 63 characters).
pub const HOSTING_APPLICATIONSET: &str = "apps.open-cluster-management.io/hosting-applicationset";
/// Label on works of ApplicationSet-owned Applications.
pub const LABEL_APPLICATION_SET: &str = "apps.open-cluster-management.io/application-set";
/// ACM: sha1 hex of `<appNs>/<appSetName>`.
pub const LABEL_APPLICATION_SET_HASH: &str = "apps.open-cluster-management.io/application-set-hash";

/// Argo CD annotations.
pub const ANNOTATION_SKIP_RECONCILE: &str = "argocd.argoproj.io/skip-reconcile";
pub const ANNOTATION_REFRESH: &str = "argocd.argoproj.io/refresh";
pub const ANNOTATION_LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";
/// Argo CD's cascading-delete finalizer.
pub const FINALIZER_ARGOCD_RESOURCES: &str = "resources-finalizer.argocd.argoproj.io";

/// Argo CD cluster secrets.
pub const LABEL_ARGOCD_SECRET_TYPE: &str = "argocd.argoproj.io/secret-type";
pub const LABEL_ACM_CLUSTER: &str = "apps.open-cluster-management.io/acm-cluster";
pub const LABEL_CLUSTER_NAME: &str = "apps.open-cluster-management.io/cluster-name";
pub const LABEL_GITOPS_ARGO_NAMESPACE: &str =
    "apps.open-cluster-management.io/gitops-argo-namespace";

/// OCM placement.
pub const LABEL_PLACEMENT: &str = "cluster.open-cluster-management.io/placement";

/// In-cluster server URL used in payload destinations.
pub const IN_CLUSTER_SERVER: &str = "https://kubernetes.default.svc";

/// Parses a boolean like Go's `strconv.ParseBool` (`1, t, T, TRUE, true, True` are true).
pub fn parse_go_bool(value: &str) -> Option<bool> {
    match value {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::parse_go_bool;

    #[test]
    fn go_parse_bool_table() {
        for t in ["1", "t", "T", "TRUE", "true", "True"] {
            assert_eq!(parse_go_bool(t), Some(true), "{t}");
        }
        for f in ["0", "f", "F", "FALSE", "false", "False"] {
            assert_eq!(parse_go_bool(f), Some(false), "{f}");
        }
        for bad in ["", "yes", "tRUE", " true", "2"] {
            assert_eq!(parse_go_bool(bad), None, "{bad:?}");
        }
    }
}
