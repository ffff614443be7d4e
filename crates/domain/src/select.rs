//! Which Applications the propagation controller handles.

use std::collections::BTreeMap;

use argocd_pull_api::ObjectMeta;
use argocd_pull_api::argocd::Application;
use argocd_pull_api::names::{ANNOTATION_OCM_MANAGED_CLUSTER, LABEL_PULL_TO_OCM, parse_go_bool};

/// Whether `labels` carry the pull label with a value Go's `strconv.ParseBool` reads as true.
pub fn is_pull_labelled(labels: Option<&BTreeMap<String, String>>) -> bool {
    labels
        .and_then(|l| l.get(LABEL_PULL_TO_OCM))
        .and_then(|v| parse_go_bool(v))
        .unwrap_or(false)
}

/// The ManagedCluster an Application is propagated to: `Some(cluster)` when the Application is
/// selected (pull label true and a non-empty `ocm-managed-cluster` annotation), else `None`.
pub fn selected_cluster(app: &Application) -> Option<&str> {
    selected_cluster_of(&app.metadata)
}

/// [`selected_cluster`] from an Application's metadata alone (the rule reads nothing else).
pub fn selected_cluster_of(meta: &ObjectMeta) -> Option<&str> {
    if !is_pull_labelled(meta.labels.as_ref()) {
        return None;
    }
    meta.annotations
        .as_ref()?
        .get(ANNOTATION_OCM_MANAGED_CLUSTER)
        .map(String::as_str)
        .filter(|c| !c.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn app(labels: serde_json::Value, annotations: serde_json::Value) -> Application {
        serde_json::from_value(json!({
            "metadata": {"name": "a", "namespace": "argocd", "labels": labels, "annotations": annotations}
        }))
        .unwrap()
    }

    #[test]
    fn selection_table() {
        let cases = [
            ("true", "cluster1", Some("cluster1")),
            ("True", "cluster1", Some("cluster1")),
            ("TRUE", "cluster1", Some("cluster1")),
            ("t", "cluster1", Some("cluster1")),
            ("T", "cluster1", Some("cluster1")),
            ("1", "cluster1", Some("cluster1")),
            ("false", "cluster1", None),
            ("0", "cluster1", None),
            ("yes", "cluster1", None),
            ("tRue", "cluster1", None),
            ("", "cluster1", None),
            ("true", "", None),
        ];
        for (label, cluster, want) in cases {
            let a = app(
                json!({LABEL_PULL_TO_OCM: label}),
                json!({ANNOTATION_OCM_MANAGED_CLUSTER: cluster}),
            );
            assert_eq!(
                selected_cluster(&a),
                want,
                "label {label:?} cluster {cluster:?}"
            );
        }
    }

    #[test]
    fn missing_label_or_annotation_is_not_selected() {
        let a = app(json!({}), json!({ANNOTATION_OCM_MANAGED_CLUSTER: "c"}));
        assert_eq!(selected_cluster(&a), None);
        let a = app(json!({LABEL_PULL_TO_OCM: "true"}), json!({}));
        assert_eq!(selected_cluster(&a), None);
        let a: Application = serde_json::from_value(json!({"metadata": {"name": "a"}})).unwrap();
        assert_eq!(selected_cluster(&a), None);
    }
}
