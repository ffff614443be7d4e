//! The MulticlusterApplicationSetReport: pure aggregation of ManifestWork feedback, and the
//! extra feedback rules the propagation controller adds so that errors and resources reach the
//! hub through OCM itself (no ACM search service). They go on the works of ApplicationSet-owned
//! Applications only (the works the report reads, labelled `application-set`); other works carry
//! the basic model's five rules, as the Go peers write them.
//!
//! # Extra feedback rules and their limits
//!
//! The OCM work agent evaluates each `JSONPaths` rule with Kubernetes JSONPath. A path that
//! yields one scalar (string, integer, boolean) becomes a typed value with no size limit of its
//! own. A path that yields a list or an object becomes a `JsonRaw` value only when the agent runs
//! with the alpha feature gate `RawFeedbackJsonString` (default off), and only up to 1024 bytes
//! (`maxJsonRawLength`, also the CRD's `maxLength`); otherwise that one value is left out and the
//! manifest's `StatusFeedbackSynced` condition turns `False` — the other values are still
//! reported. So:
//!
//! * Errors and warnings: one rule per Argo CD condition type the ACM report shows
//!   (`*Error`, `*Warning`), each a filter that yields the message as a **scalar string**
//!   (`.status.conditions[?(@.type=="SyncError")].message`). Works without the feature gate;
//!   absent conditions yield nothing (no error). Two conditions of the same type yield a list
//!   (JsonRaw with the gate), which is also understood.
//! * Resources: five parallel lists over `.status.resources[*]` (`kind`, `name`, `version`,
//!   `group`, `namespace`). One resource yields scalars (no gate needed); several need the gate
//!   and each list must stay under 1024 bytes (≈ 40–60 resources of usual name lengths; beyond
//!   that the list is dropped by the agent and the report lists no resources for that cluster).
//!   `group` and `namespace` are omitted by Argo CD for core / cluster-scoped resources; when
//!   their lists are shorter than the `kind` list they are re-aligned using the well-known core
//!   kinds and cluster-scoped kinds, and dropped when that does not add up.

use std::collections::{BTreeMap, BTreeSet};

use argocd_pull_api::names;
use argocd_pull_api::ocm::work::{FeedbackValue, JsonPath, ManifestWorkStatus};
use argocd_pull_api::report::{
    ClusterCondition, MulticlusterApplicationSetReport, ReportCondition, ReportStatuses,
    ReportSummary, ResourceRef,
};
use kube::api::ObjectMeta;

/// Argo CD Application condition types reported per cluster (all `*Error` / `*Warning` types).
pub const CONDITION_TYPES: &[&str] = &[
    "DeletionError",
    "InvalidSpecError",
    "ComparisonError",
    "SyncError",
    "UnknownError",
    "SharedResourceWarning",
    "RepeatedResourceWarning",
    "ExcludedResourceWarning",
    "OrphanedResourceWarning",
];

/// Feedback value name prefix of the condition rules: `condition.<Type>`.
pub const CONDITION_PREFIX: &str = "condition.";
pub const RESOURCE_KINDS: &str = "resources.kind";
pub const RESOURCE_NAMES: &str = "resources.name";
pub const RESOURCE_VERSIONS: &str = "resources.version";
pub const RESOURCE_GROUPS: &str = "resources.group";
pub const RESOURCE_NAMESPACES: &str = "resources.namespace";

/// Kinds left out of `resources` (as ACM does).
pub const EXCLUDED_KINDS: &[&str] = &[
    "ApplicationSet",
    "Application",
    "EndpointSlice",
    "Pod",
    "ReplicaSet",
    "Cluster",
];

/// Core-group kinds (Argo CD leaves `group` empty for them).
const CORE_KINDS: &[&str] = &[
    "Binding",
    "ConfigMap",
    "Endpoints",
    "Event",
    "LimitRange",
    "Namespace",
    "Node",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "Pod",
    "PodTemplate",
    "ReplicationController",
    "ResourceQuota",
    "Secret",
    "Service",
    "ServiceAccount",
];

/// Well-known cluster-scoped kinds (Argo CD leaves `namespace` empty for them).
const CLUSTER_SCOPED_KINDS: &[&str] = &[
    "APIService",
    "CSIDriver",
    "CSINode",
    "ClusterIssuer",
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
    "IngressClass",
    "MutatingWebhookConfiguration",
    "Namespace",
    "Node",
    "PersistentVolume",
    "PriorityClass",
    "RuntimeClass",
    "StorageClass",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "ValidatingWebhookConfiguration",
    "VolumeAttachment",
];

/// The five feedback values of the basic model (see the basic-pull-model spec).
pub const HEALTH_STATUS: &str = "healthStatus";
pub const SYNC_STATUS: &str = "syncStatus";
pub const OPERATION_STATE_STARTED_AT: &str = "operationStateStartedAt";
pub const OPERATION_STATE_PHASE: &str = "operationStatePhase";
pub const SYNC_REVISION: &str = "syncRevision";

/// Default of a missing feedback value.
pub const UNKNOWN: &str = "Unknown";

/// The JSONPaths feedback rules the propagation controller adds to the five of the basic model,
/// on the works of ApplicationSet-owned Applications, so that the report gets per-cluster errors
/// and the resource list (see the module docs).
pub fn extra_feedback_rules() -> Vec<JsonPath> {
    let mut rules: Vec<JsonPath> = CONDITION_TYPES
        .iter()
        .map(|t| JsonPath {
            name: format!("{CONDITION_PREFIX}{t}"),
            path: format!(".status.conditions[?(@.type==\"{t}\")].message"),
            version: None,
        })
        .collect();
    for (name, field) in [
        (RESOURCE_KINDS, "kind"),
        (RESOURCE_NAMES, "name"),
        (RESOURCE_VERSIONS, "version"),
        (RESOURCE_GROUPS, "group"),
        (RESOURCE_NAMESPACES, "namespace"),
    ] {
        rules.push(JsonPath {
            name: name.into(),
            path: format!(".status.resources[*].{field}"),
            version: None,
        });
    }
    rules
}

/// `<ns>/<name>` of an ApplicationSet.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AppSetKey {
    pub namespace: String,
    pub name: String,
}

impl AppSetKey {
    /// Parses the `hosting-applicationset` annotation (`<ns>/<name>`).
    pub fn parse(value: &str) -> Option<AppSetKey> {
        let (ns, name) = value.split_once('/')?;
        if ns.is_empty() || name.is_empty() || name.contains('/') {
            return None;
        }
        Some(AppSetKey {
            namespace: ns.into(),
            name: name.into(),
        })
    }
}

impl std::fmt::Display for AppSetKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// What one ManifestWork contributes to its ApplicationSet's report.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkEntry {
    pub condition: ClusterCondition,
    pub resources: Vec<ResourceRef>,
}

fn text_values(v: &FeedbackValue) -> Vec<String> {
    let f = &v.field_value;
    if f.type_ == "JsonRaw"
        && let Some(raw) = &f.json_raw
    {
        return match serde_json::from_str::<serde_json::Value>(raw) {
            Ok(serde_json::Value::Array(items)) => items
                .into_iter()
                .map(|i| match i {
                    serde_json::Value::String(s) => s,
                    other => other.to_string(),
                })
                .collect(),
            Ok(serde_json::Value::String(s)) => vec![s],
            _ => vec![raw.clone()],
        };
    }
    f.as_text().into_iter().collect()
}

/// Rebuilds `{apiVersion, kind, name, namespace}` from the parallel resource lists.
pub fn resources_from_lists(
    kinds: &[String],
    names: &[String],
    versions: &[String],
    groups: &[String],
    namespaces: &[String],
) -> Vec<ResourceRef> {
    if kinds.len() != names.len() {
        return Vec::new();
    }
    let n = kinds.len();
    let align = |values: &[String], present: &dyn Fn(&str) -> bool| -> Option<Vec<String>> {
        if values.len() == n {
            return Some(values.to_vec());
        }
        let mut it = values.iter();
        let out: Vec<String> = kinds
            .iter()
            .map(|k| {
                if present(k) {
                    it.next().cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            })
            .collect();
        let expected = kinds.iter().filter(|k| present(k)).count();
        (expected == values.len()).then_some(out)
    };
    let groups = align(groups, &|k| !CORE_KINDS.contains(&k));
    let namespaces = align(namespaces, &|k| !CLUSTER_SCOPED_KINDS.contains(&k));
    let versions = (versions.len() == n).then_some(versions);
    (0..n)
        .filter(|&i| !EXCLUDED_KINDS.contains(&kinds[i].as_str()))
        .map(|i| {
            let version = versions.map(|v| v[i].clone()).unwrap_or_default();
            let group = groups.as_ref().map(|g| g[i].clone()).unwrap_or_default();
            let api_version = match (group.is_empty(), version.is_empty()) {
                (_, true) => String::new(),
                (true, false) => version,
                (false, false) => format!("{group}/{version}"),
            };
            ResourceRef {
                api_version,
                kind: kinds[i].clone(),
                name: names[i].clone(),
                namespace: namespaces
                    .as_ref()
                    .map(|ns| ns[i].clone())
                    .unwrap_or_default(),
            }
        })
        .collect()
}

/// The feedback values of the Argo CD Application manifest of a work (the first manifest whose
/// resource is `applications.argoproj.io`).
pub fn application_feedback(status: Option<&ManifestWorkStatus>) -> &[FeedbackValue] {
    status
        .and_then(|s| s.resource_status.as_ref())
        .and_then(|rs| {
            rs.manifests.iter().find(|m| {
                m.resource_meta.group == "argoproj.io"
                    && (m.resource_meta.resource == "applications"
                        || m.resource_meta.kind == "Application")
            })
        })
        .and_then(|m| m.status_feedback.as_ref())
        .map(|f| f.values.as_slice())
        .unwrap_or(&[])
}

/// The ApplicationSet a work belongs to: label `application-set` and annotation
/// `hosting-applicationset: <ns>/<name>`.
pub fn work_appset(meta: &ObjectMeta) -> Option<AppSetKey> {
    let labelled = meta
        .labels
        .as_ref()
        .and_then(|l| l.get(names::LABEL_APPLICATION_SET))
        .is_some();
    if !labelled {
        return None;
    }
    AppSetKey::parse(
        meta.annotations
            .as_ref()?
            .get(names::HOSTING_APPLICATIONSET)?,
    )
}

/// The report entry of one work: cluster = the work's namespace, the five values (default
/// `Unknown`), `app = <appsetNs>/<hub-application-name>/<workNs>/<workName>`, the error
/// conditions and resources from the extra rules.
pub fn work_entry(
    appset: &AppSetKey,
    meta: &ObjectMeta,
    status: Option<&ManifestWorkStatus>,
) -> WorkEntry {
    let cluster = meta.namespace.clone().unwrap_or_default();
    let work_name = meta.name.clone().unwrap_or_default();
    let hub_app = meta
        .annotations
        .as_ref()
        .and_then(|a| a.get(names::ANNOTATION_HUB_APPLICATION_NAME))
        .cloned()
        .unwrap_or_default();
    let values = application_feedback(status);
    let scalar = |name: &str| -> String {
        values
            .iter()
            .find(|v| v.name == name)
            .and_then(|v| v.field_value.as_text())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| UNKNOWN.to_string())
    };
    let list = |name: &str| -> Vec<String> {
        values
            .iter()
            .find(|v| v.name == name)
            .map(text_values)
            .unwrap_or_default()
    };
    let mut conditions = Vec::new();
    for t in CONDITION_TYPES {
        for message in list(&format!("{CONDITION_PREFIX}{t}")) {
            conditions.push(ReportCondition {
                type_: (*t).to_string(),
                message,
            });
        }
    }
    let resources = resources_from_lists(
        &list(RESOURCE_KINDS),
        &list(RESOURCE_NAMES),
        &list(RESOURCE_VERSIONS),
        &list(RESOURCE_GROUPS),
        &list(RESOURCE_NAMESPACES),
    );
    WorkEntry {
        condition: ClusterCondition {
            app: format!("{}/{hub_app}/{cluster}/{work_name}", appset.namespace),
            cluster,
            sync_status: scalar(SYNC_STATUS),
            health_status: scalar(HEALTH_STATUS),
            operation_state_started_at: scalar(OPERATION_STATE_STARTED_AT),
            operation_state_phase: scalar(OPERATION_STATE_PHASE),
            sync_revision: scalar(SYNC_REVISION),
            conditions,
        },
        resources,
    }
}

/// Summary counts: `clusters` +1 per entry; `Healthy` → healthy; `Progressing` → inProgress and
/// notHealthy; anything else → notHealthy; `Synced` → synced, anything else → notSynced.
pub fn summarize<'a>(conditions: impl IntoIterator<Item = &'a ClusterCondition>) -> ReportSummary {
    let (mut clusters, mut synced, mut not_synced, mut healthy, mut not_healthy, mut in_progress) =
        (0u64, 0u64, 0u64, 0u64, 0u64, 0u64);
    for c in conditions {
        clusters += 1;
        match c.health_status.as_str() {
            "Healthy" => healthy += 1,
            "Progressing" => {
                in_progress += 1;
                not_healthy += 1;
            }
            _ => not_healthy += 1,
        }
        if c.sync_status == "Synced" {
            synced += 1;
        } else {
            not_synced += 1;
        }
    }
    ReportSummary {
        clusters: clusters.to_string(),
        synced: synced.to_string(),
        not_synced: not_synced.to_string(),
        healthy: healthy.to_string(),
        not_healthy: not_healthy.to_string(),
        in_progress: in_progress.to_string(),
    }
}

/// The report content for the entries of one ApplicationSet: `clusterConditions` sorted by
/// cluster (then app), the summary, the union of resources (sorted, without duplicates).
pub fn aggregate<'a>(entries: impl IntoIterator<Item = &'a WorkEntry>) -> ReportStatuses {
    let mut conditions = Vec::new();
    let mut resources = BTreeSet::new();
    for e in entries {
        conditions.push(e.condition.clone());
        resources.extend(e.resources.iter().cloned());
    }
    conditions.sort_by(|a, b| (&a.cluster, &a.app).cmp(&(&b.cluster, &b.app)));
    ReportStatuses {
        summary: Some(summarize(&conditions)),
        cluster_conditions: conditions,
        resources: resources.into_iter().collect(),
    }
}

/// The `hosting-applicationset` label of a report: the first 63 characters of `<ns>.<appset>`.
pub fn report_label(appset: &AppSetKey) -> String {
    format!("{}.{}", appset.namespace, appset.name)
        .chars()
        .take(63)
        .collect()
}

/// The full report object for one ApplicationSet.
pub fn report(appset: &AppSetKey, statuses: ReportStatuses) -> MulticlusterApplicationSetReport {
    MulticlusterApplicationSetReport {
        metadata: ObjectMeta {
            name: Some(appset.name.clone()),
            namespace: Some(appset.namespace.clone()),
            labels: Some(BTreeMap::from([(
                names::HOSTING_APPLICATIONSET.to_string(),
                report_label(appset),
            )])),
            ..Default::default()
        },
        statuses: Some(statuses),
    }
}

/// Whether a stored report already says what `desired` says (label and statuses).
pub fn report_up_to_date(
    existing: &MulticlusterApplicationSetReport,
    desired: &MulticlusterApplicationSetReport,
) -> bool {
    let label = |r: &MulticlusterApplicationSetReport| {
        r.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(names::HOSTING_APPLICATIONSET))
            .cloned()
    };
    label(existing) == label(desired) && existing.statuses == desired.statuses
}

/// The message of the `AdditionalStatusReport` condition ACM puts on ApplicationSet-owned hub
/// Applications that have no conditions.
pub fn additional_status_report_message(
    app_namespace: &str,
    app_name: &str,
    appset_name: &str,
    cluster: &str,
) -> String {
    format!(
        "kubectl get multiclusterapplicationsetreports -n {app_namespace} {appset_name}\
         \nAdditional details available in ManagedCluster {cluster}\
         \nkubectl get applications -n {app_namespace} {app_name}"
    )
}

#[cfg(test)]
mod tests;
