//! Status feedback rules (`spec.manifestConfigs`) so the hub sees whether workloads are healthy.
//!
//! OCM's `WellKnownStatus` covers `apps/v1 Deployment` (ReadyReplicas, Replicas,
//! AvailableReplicas), `batch/v1 Job` (JobComplete, JobSucceeded) and `v1 Pod` (PodReady,
//! PodPhase); for any other kind it reports an error (`StatusFeedbackSynced=False`). So
//! StatefulSets and DaemonSets get `JSONPaths` rules with names in the same style, and the
//! well-known kinds get a few extra paths the health check needs (desired replicas, rollout
//! progress, Job failure).

use serde_json::{Value, json};

use crate::manifest::Manifest;

fn paths(list: &[(&str, &str)]) -> Value {
    Value::Array(
        list.iter()
            .map(|(name, path)| json!({"name": name, "path": path}))
            .collect(),
    )
}

/// The `manifestConfigs` entry for a manifest, or `None` for kinds without health feedback.
pub fn manifest_config(m: &Manifest) -> Option<Value> {
    let (resource, rules) = match (m.group.as_str(), m.kind.as_str()) {
        ("apps", "Deployment") => (
            "deployments",
            vec![
                json!({"type": "WellKnownStatus"}),
                json!({"type": "JSONPaths", "jsonPaths": paths(&[
                    ("DesiredReplicas", ".spec.replicas"),
                    ("UpdatedReplicas", ".status.updatedReplicas"),
                ])}),
            ],
        ),
        ("apps", "StatefulSet") => (
            "statefulsets",
            vec![json!({"type": "JSONPaths", "jsonPaths": paths(&[
                ("DesiredReplicas", ".spec.replicas"),
                ("Replicas", ".status.replicas"),
                ("ReadyReplicas", ".status.readyReplicas"),
                ("AvailableReplicas", ".status.availableReplicas"),
                ("UpdatedReplicas", ".status.updatedReplicas"),
            ])})],
        ),
        ("apps", "DaemonSet") => (
            "daemonsets",
            vec![json!({"type": "JSONPaths", "jsonPaths": paths(&[
                ("DesiredNumberScheduled", ".status.desiredNumberScheduled"),
                ("NumberReady", ".status.numberReady"),
                ("NumberAvailable", ".status.numberAvailable"),
                ("UpdatedNumberScheduled", ".status.updatedNumberScheduled"),
            ])})],
        ),
        ("batch", "Job") => (
            "jobs",
            vec![
                json!({"type": "WellKnownStatus"}),
                json!({"type": "JSONPaths", "jsonPaths": paths(&[
                    ("JobFailed", ".status.conditions[?(@.type==\"Failed\")].status"),
                ])}),
            ],
        ),
        ("", "Pod") => ("pods", vec![json!({"type": "WellKnownStatus"})]),
        _ => return None,
    };
    // WellKnownStatus is keyed by group/version/kind: only the versions OCM knows get it.
    let well_known_version = matches!(m.api_version.as_str(), "apps/v1" | "batch/v1" | "v1");
    let rules: Vec<Value> = rules
        .into_iter()
        .filter(|r| well_known_version || r["type"] != "WellKnownStatus")
        .collect();
    Some(json!({
        "resourceIdentifier": {
            "group": m.group,
            "resource": resource,
            "namespace": m.namespace.clone().unwrap_or_default(),
            "name": m.name,
        },
        "feedbackRules": rules,
    }))
}
