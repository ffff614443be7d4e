//! Which Applications the propagation controller handles.

use std::collections::BTreeMap;

use argocd_pull_api::argocd::Application;
use argocd_pull_api::names::{ANNOTATION_OCM_MANAGED_CLUSTER, LABEL_PULL_TO_OCM, parse_go_bool};

use crate::meta::MetaView;

/// Whether `labels` carry the pull label with a value Go's `strconv.ParseBool` reads as true.
pub fn is_pull_labelled(labels: Option<&BTreeMap<String, String>>) -> bool {
    is_pull_label(
        labels
            .and_then(|l| l.get(LABEL_PULL_TO_OCM))
            .map(String::as_str),
    )
}

/// The ManagedCluster an Application is propagated to: `Some(cluster)` when the Application is
/// selected (pull label true and a non-empty `ocm-managed-cluster` annotation), else `None`.
pub fn selected_cluster(app: &Application) -> Option<&str> {
    selected_cluster_of(app)
}

/// [`selected_cluster`] of anything that shows an Application's metadata (the rule reads
/// nothing else): the typed Application or a cache's projection of one.
pub fn selected_cluster_of<M: MetaView + ?Sized>(meta: &M) -> Option<&str> {
    if !is_pull_label(meta.label(LABEL_PULL_TO_OCM)) {
        return None;
    }
    meta.annotation(ANNOTATION_OCM_MANAGED_CLUSTER)
        .filter(|c| !c.is_empty())
}

/// Whether the pull label's value (if any) is one Go's `strconv.ParseBool` reads as true.
pub fn is_pull_label(value: Option<&str>) -> bool {
    value.and_then(parse_go_bool).unwrap_or(false)
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
