//! The work (ManifestWork, or ManifestWorkReplicaSet for a Placement) around the manifests:
//! its API versions, labels and annotations, names and namespaces, and where its manifest list
//! goes in the rendered text.

use serde_json::{Map, Value, json};

use crate::options::{GenerateOptions, Target};

/// `apiVersion` of ManifestWork / ManifestWorkReplicaSet.
pub const WORK_API_VERSION: &str = "work.open-cluster-management.io/v1";
pub const REPLICASET_API_VERSION: &str = "work.open-cluster-management.io/v1alpha1";

/// Hub Application identity (same keys the basic pull model uses).
pub const ANNOTATION_HUB_APPLICATION_NAME: &str =
    "apps.open-cluster-management.io/hub-application-name";
pub const ANNOTATION_HUB_APPLICATION_NAMESPACE: &str =
    "apps.open-cluster-management.io/hub-application-namespace";
/// Marks generated works (`app.kubernetes.io/managed-by`).
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY: &str = "argocd-pull-cmp";
/// Per-resource Argo CD sync option: works are applied server-side (a client-side apply stores
/// the whole object in an annotation, limited to 256 KiB — a large work could not be applied).
pub const ANNOTATION_SYNC_OPTIONS: &str = "argocd.argoproj.io/sync-options";

pub(crate) fn part_name(base: &str, index: usize) -> String {
    if index == 0 {
        base.to_string()
    } else {
        format!("{base}-part-{}", index + 1)
    }
}

/// The work (or replica set) around the manifests, with an empty manifest list.
pub(crate) fn envelope(
    options: &GenerateOptions,
    name: &str,
    namespace: &str,
    configs: Vec<Value>,
) -> Value {
    let mut workload = Map::new();
    workload.insert("manifests".into(), Value::Array(Vec::new()));
    let mut work_spec = Map::new();
    work_spec.insert("workload".into(), Value::Object(workload));
    if !configs.is_empty() {
        work_spec.insert("manifestConfigs".into(), Value::Array(configs));
    }
    let metadata = json!({
        "name": name,
        "namespace": namespace,
        "labels": { LABEL_MANAGED_BY: MANAGED_BY },
        "annotations": {
            ANNOTATION_HUB_APPLICATION_NAME: options.app_name,
            ANNOTATION_HUB_APPLICATION_NAMESPACE: options.app_namespace,
            ANNOTATION_SYNC_OPTIONS: "ServerSideApply=true",
        },
    });
    match &options.target {
        Target::Clusters(_) => json!({
            "apiVersion": WORK_API_VERSION,
            "kind": "ManifestWork",
            "metadata": metadata,
            "spec": Value::Object(work_spec),
        }),
        Target::Placement {
            name: placement, ..
        } => json!({
            "apiVersion": REPLICASET_API_VERSION,
            "kind": "ManifestWorkReplicaSet",
            "metadata": metadata,
            "spec": {
                "placementRefs": [{ "name": placement, "rolloutStrategy": { "type": "All" } }],
                // Required by the CRD (the API server defaults it; client-side validation
                // does not): the CRD's default.
                "cascadeDeletionPolicy": "Background",
                "manifestWorkTemplate": Value::Object(work_spec),
            },
        }),
    }
}

pub(crate) fn target_namespaces(options: &GenerateOptions) -> Vec<String> {
    match &options.target {
        Target::Clusters(c) => {
            let mut c = c.clone();
            c.sort();
            c.dedup();
            c
        }
        Target::Placement { namespace, .. } => vec![namespace.clone()],
    }
}

pub(crate) const MARKER: &str = "\u{1}argocd-pull-manifests\u{1}";

/// The envelope rendered pretty with a marker string in place of the manifest list, and the
/// byte offset of the `"manifests"` key.
pub(crate) fn envelope_with_marker(options: &GenerateOptions, mut env: Value) -> (String, usize) {
    let manifests_slot = match &options.target {
        Target::Clusters(_) => env.pointer_mut("/spec/workload/manifests"),
        Target::Placement { .. } => {
            env.pointer_mut("/spec/manifestWorkTemplate/workload/manifests")
        }
    };
    *manifests_slot.expect("envelope has a manifest list") = Value::String(MARKER.into());
    let text = serde_json::to_string_pretty(&env).expect("JSON value serializes");
    let marker_json = serde_json::to_string(MARKER).expect("string serializes");
    let at = text
        .find(&format!("\"manifests\": {marker_json}"))
        .expect("marker is rendered");
    (text, at)
}

/// Spaces before each manifest's lines in the rendered work (so that workers can serialize
/// manifests in place).
pub(crate) fn manifests_indent(options: &GenerateOptions) -> usize {
    let env = envelope(options, "x", "x", Vec::new());
    let (text, at) = envelope_with_marker(options, env);
    let line_start = text[..at].rfind('\n').map_or(0, |p| p + 1);
    at - line_start + 2
}
