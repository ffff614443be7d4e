//! The ManifestWork that carries an Application to its managed cluster.

use std::collections::BTreeMap;

use argocd_pull_api::ObjectMeta;
use argocd_pull_api::argocd::{self, Application};
use argocd_pull_api::names::{
    ANNOTATION_DESTINATION_NAME, ANNOTATION_DESTINATION_SERVER, ANNOTATION_HUB_APPLICATION_NAME,
    ANNOTATION_HUB_APPLICATION_NAMESPACE, ANNOTATION_LAST_APPLIED, ANNOTATION_OCM_MANAGED_CLUSTER,
    ANNOTATION_OCM_MANAGED_CLUSTER_APP_NAMESPACE, ANNOTATION_SKIP_RECONCILE,
    HOSTING_APPLICATIONSET, IN_CLUSTER_SERVER, LABEL_APPLICATION_SET, LABEL_APPLICATION_SET_HASH,
    LABEL_PULL_TO_OCM,
};
use argocd_pull_api::ocm::work::{
    DeleteOption, FeedbackRule, IgnoreField, JsonPath, ManifestConfigOption, ManifestWork,
    ManifestWorkSpec, ManifestsTemplate, OrphaningRule, ResourceIdentifier, SelectivelyOrphan,
    ServerSideApplyConfig, UpdateStrategy,
};
use serde_json::{Map, Value, json};
use sha1::{Digest, Sha1};

use crate::json::merge_diff;
use crate::meta::MetaView;
use crate::select::selected_cluster;

/// The five status-feedback JSON paths every work asks for: `(name, path)`.
pub const DEFAULT_FEEDBACK_PATHS: [(&str, &str); 5] = [
    ("healthStatus", ".status.health.status"),
    ("syncStatus", ".status.sync.status"),
    (
        "operationStateStartedAt",
        ".status.operationState.startedAt",
    ),
    ("operationStatePhase", ".status.operationState.phase"),
    ("syncRevision", ".status.sync.revision"),
];

/// Fields the spoke owns once it received them: the work agent ignores their changes.
pub const IGNORED_ON_SPOKE_CHANGE: [&str; 2] = [
    ".operation",
    ".metadata.annotations[\"argocd.argoproj.io/refresh\"]",
];

/// The namespace used for the payload when nothing else names one.
pub const DEFAULT_APP_NAMESPACE: &str = "argocd";

/// Defaults the ManifestWork CRD schema applies (kept explicit so that what we write is what the
/// API server stores, and so that works written by other controllers compare equal).
const DEFAULT_FIELD_MANAGER: &str = "work-agent";
const DEFAULT_SCRAPE_TYPE: &str = "Poll";
const DEFAULT_PROPAGATION_POLICY: &str = "Foreground";
const DEFAULT_IGNORE_CONDITION: &str = "OnSpokePresent";
const DEFAULT_UPDATE_STRATEGY: &str = "Update";

/// How works are built.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WorkOptions {
    /// ACM's extras: a Namespace for the destination namespace and an AppProject, both before the
    /// Application and both orphaned on delete (`SelectivelyOrphan`).
    pub acm_extras: bool,
    /// Feedback rules added after the five defaults on the works of ApplicationSet-owned
    /// Applications only — the ones the ApplicationSet report reads (a rule with a default's name
    /// is ignored). Other works carry the five defaults, as the Go peers write them: every rule
    /// is stored in every work and costs the API server on each write (docs/performance.md).
    pub appset_feedback: Vec<JsonPath>,
}

/// Why no work can be built for an Application.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorkError {
    #[error(
        "Application is not selected: it needs label {LABEL_PULL_TO_OCM}=true and a non-empty annotation {ANNOTATION_OCM_MANAGED_CLUSTER}"
    )]
    NotSelected,
    #[error("Application has no metadata.name")]
    MissingName,
    #[error("Application {0} has no metadata.uid (it was not read from an API server)")]
    MissingUid(String),
}

/// `<app name>-<first 5 characters of the uid>` (the upstream and ACM naming, so their works are
/// adopted rather than duplicated).
pub fn work_name(app_name: &str, uid: &str) -> String {
    let prefix: String = uid.chars().take(5).collect();
    format!("{app_name}-{prefix}")
}

/// sha1 hex of `<appNs>/<appSetName>` (ACM's `application-set-hash` label).
pub fn appset_hash(app_namespace: &str, appset: &str) -> String {
    hex::encode(Sha1::digest(format!("{app_namespace}/{appset}").as_bytes()))
}

/// Namespace of the payload Application: the `ocm-managed-cluster-app-namespace` annotation, else
/// the hub Application's namespace, else `argocd`.
pub fn payload_namespace(app: &Application) -> &str {
    let annotated = app
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_OCM_MANAGED_CLUSTER_APP_NAMESPACE))
        .map(String::as_str);
    [annotated, app.metadata.namespace.as_deref()]
        .into_iter()
        .flatten()
        .find(|ns| !ns.is_empty())
        .unwrap_or(DEFAULT_APP_NAMESPACE)
}

/// The resource identifier of the payload Application inside the work.
pub fn application_resource_identifier(app: &Application) -> ResourceIdentifier {
    ResourceIdentifier {
        group: argocd::GROUP.into(),
        resource: "applications".into(),
        namespace: payload_namespace(app).into(),
        name: app.metadata.name.clone().unwrap_or_default(),
    }
}

/// The ManifestWork that should exist for a selected Application.
pub fn desired_work(app: &Application, opts: &WorkOptions) -> Result<ManifestWork, WorkError> {
    let cluster = selected_cluster(app).ok_or(WorkError::NotSelected)?;
    let name = app
        .metadata
        .name
        .as_deref()
        .filter(|n| !n.is_empty())
        .ok_or(WorkError::MissingName)?;
    let uid = app
        .metadata
        .uid
        .as_deref()
        .filter(|u| !u.is_empty())
        .ok_or_else(|| WorkError::MissingUid(name.to_string()))?;
    let app_ns = app.metadata.namespace.clone().unwrap_or_default();
    let appset = app.owning_application_set();

    let mut labels = BTreeMap::from([(LABEL_PULL_TO_OCM.to_string(), "true".to_string())]);
    let mut annotations = BTreeMap::from([
        (
            ANNOTATION_HUB_APPLICATION_NAMESPACE.to_string(),
            app_ns.clone(),
        ),
        (
            ANNOTATION_HUB_APPLICATION_NAME.to_string(),
            name.to_string(),
        ),
    ]);
    if let Some(set) = appset {
        labels.insert(LABEL_APPLICATION_SET.into(), "true".into());
        labels.insert(LABEL_APPLICATION_SET_HASH.into(), appset_hash(&app_ns, set));
        annotations.insert(HOSTING_APPLICATIONSET.into(), format!("{app_ns}/{set}"));
    }

    let payload = payload(app);
    let app_id = application_resource_identifier(app);
    let mut manifests = Vec::with_capacity(3);
    let mut delete_option = None;
    if opts.acm_extras {
        let (extras, rules) = acm_extras(app);
        manifests.extend(extras);
        delete_option = Some(DeleteOption {
            propagation_policy: Some("SelectivelyOrphan".into()),
            selectively_orphans: Some(SelectivelyOrphan {
                orphaning_rules: rules,
            }),
            ttl_seconds_after_finished: None,
        });
    }
    manifests.push(payload);

    let mut spec = ManifestWorkSpec {
        workload: ManifestsTemplate { manifests },
        delete_option,
        manifest_configs: vec![manifest_config(
            app_id,
            if appset.is_some() {
                &opts.appset_feedback
            } else {
                &[]
            },
        )],
        executor: None,
    };
    normalize_spec(&mut spec);

    Ok(ManifestWork {
        metadata: ObjectMeta {
            name: Some(work_name(name, uid)),
            namespace: Some(cluster.to_string()),
            labels: Some(labels),
            annotations: Some(annotations),
            ..Default::default()
        },
        spec,
        status: None,
    })
}

/// The `manifestConfigs` entry for the payload Application: the feedback rules and the
/// server-side-apply strategy that leaves `.operation` and the refresh annotation to the spoke.
pub fn manifest_config(id: ResourceIdentifier, extra: &[JsonPath]) -> ManifestConfigOption {
    let mut paths: Vec<JsonPath> = DEFAULT_FEEDBACK_PATHS
        .iter()
        .map(|(name, path)| JsonPath {
            name: (*name).into(),
            path: (*path).into(),
            version: None,
        })
        .collect();
    for rule in extra {
        if !paths.iter().any(|p| p.name == rule.name) {
            paths.push(rule.clone());
        }
    }
    ManifestConfigOption {
        resource_identifier: id,
        feedback_rules: vec![FeedbackRule {
            type_: "JSONPaths".into(),
            json_paths: paths,
        }],
        update_strategy: Some(UpdateStrategy {
            type_: "ServerSideApply".into(),
            server_side_apply: Some(ServerSideApplyConfig {
                force: Some(true),
                field_manager: None,
                ignore_fields: vec![IgnoreField {
                    condition: "OnSpokeChange".into(),
                    json_paths: IGNORED_ON_SPOKE_CHANGE
                        .iter()
                        .map(|p| (*p).into())
                        .collect(),
                }],
            }),
        }),
        condition_rules: None,
        feedback_scrape_type: None,
    }
}

fn is_stripped_annotation(key: &str) -> bool {
    matches!(
        key,
        ANNOTATION_OCM_MANAGED_CLUSTER
            | ANNOTATION_OCM_MANAGED_CLUSTER_APP_NAMESPACE
            | ANNOTATION_SKIP_RECONCILE
            | ANNOTATION_DESTINATION_NAME
            | ANNOTATION_DESTINATION_SERVER
            | ANNOTATION_LAST_APPLIED
    )
}

/// The Application sent to the managed cluster.
pub fn payload(app: &Application) -> Value {
    let appset = app.owning_application_set();
    let app_ns = app.metadata.namespace.as_deref().unwrap_or_default();

    let mut metadata = Map::new();
    metadata.insert(
        "name".into(),
        json!(app.metadata.name.clone().unwrap_or_default()),
    );
    metadata.insert("namespace".into(), json!(payload_namespace(app)));
    let mut labels: BTreeMap<&str, String> = app
        .metadata
        .labels
        .iter()
        .flatten()
        .filter(|(k, _)| k.as_str() != LABEL_PULL_TO_OCM)
        .map(|(k, v)| (k.as_str(), v.clone()))
        .collect();
    let mut annotations: BTreeMap<&str, String> = app
        .metadata
        .annotations
        .iter()
        .flatten()
        .filter(|(k, _)| !is_stripped_annotation(k))
        .map(|(k, v)| (k.as_str(), v.clone()))
        .collect();
    if let Some(set) = appset {
        labels.insert(LABEL_APPLICATION_SET, "true".into());
        annotations.insert(HOSTING_APPLICATIONSET, format!("{app_ns}/{set}"));
    }
    if !labels.is_empty() {
        metadata.insert("labels".into(), json!(labels));
    }
    if !annotations.is_empty() {
        metadata.insert("annotations".into(), json!(annotations));
    }
    if let Some(finalizers) = app.metadata.finalizers.as_ref().filter(|f| !f.is_empty()) {
        metadata.insert("finalizers".into(), json!(finalizers));
    }

    let mut spec = app.spec.clone();
    let ann = app.metadata.annotations.as_ref();
    let dest_name = ann
        .and_then(|a| a.get(ANNOTATION_DESTINATION_NAME))
        .filter(|v| !v.is_empty());
    let dest_server = ann
        .and_then(|a| a.get(ANNOTATION_DESTINATION_SERVER))
        .filter(|v| !v.is_empty());
    if dest_name.is_some() || dest_server.is_some() {
        spec.destination.name = Some(dest_name.cloned().unwrap_or_default());
        spec.destination.server = Some(dest_server.cloned().unwrap_or_default());
    } else {
        spec.destination.name = Some(String::new());
        spec.destination.server = Some(IN_CLUSTER_SERVER.into());
    }

    let mut out = Map::new();
    out.insert("apiVersion".into(), json!(argocd::API_VERSION));
    out.insert("kind".into(), json!("Application"));
    out.insert("metadata".into(), Value::Object(metadata));
    out.insert(
        "spec".into(),
        serde_json::to_value(&spec).expect("an ApplicationSpec always serializes"),
    );
    if let Some(op) = &app.operation {
        out.insert("operation".into(), op.clone());
    }
    Value::Object(out)
}

/// ACM's extra manifests (Namespace of the destination, AppProject) and their orphaning rules.
fn acm_extras(app: &Application) -> (Vec<Value>, Vec<OrphaningRule>) {
    let mut manifests = Vec::new();
    let mut rules = Vec::new();
    if let Some(ns) = app
        .spec
        .destination
        .namespace
        .as_deref()
        .filter(|n| !n.is_empty())
    {
        manifests.push(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}));
        rules.push(OrphaningRule {
            group: String::new(),
            resource: "namespaces".into(),
            namespace: String::new(),
            name: ns.into(),
        });
    }
    let project = if app.spec.project.is_empty() {
        "default"
    } else {
        app.spec.project.as_str()
    };
    let ns = payload_namespace(app);
    manifests.push(json!({
        "apiVersion": argocd::API_VERSION,
        "kind": "AppProject",
        "metadata": {"name": project, "namespace": ns},
        "spec": {
            "clusterResourceWhitelist": [{"group": "*", "kind": "*"}],
            "destinations": [{"namespace": "*", "server": "*"}],
            "sourceRepos": ["*"]
        }
    }));
    rules.push(OrphaningRule {
        group: argocd::GROUP.into(),
        resource: "appprojects".into(),
        namespace: ns.into(),
        name: project.into(),
    });
    (manifests, rules)
}

/// Fills the defaults the ManifestWork CRD schema declares, so that a spec read back from an API
/// server that applies them compares equal to one that was written without them.
pub fn normalize_spec(spec: &mut ManifestWorkSpec) {
    if let Some(d) = spec.delete_option.as_mut() {
        d.propagation_policy
            .get_or_insert_with(|| DEFAULT_PROPAGATION_POLICY.into());
    }
    for config in &mut spec.manifest_configs {
        config
            .feedback_scrape_type
            .get_or_insert_with(|| DEFAULT_SCRAPE_TYPE.into());
        if let Some(strategy) = config.update_strategy.as_mut() {
            if strategy.type_.is_empty() {
                strategy.type_ = DEFAULT_UPDATE_STRATEGY.into();
            }
            if let Some(ssa) = strategy.server_side_apply.as_mut() {
                ssa.field_manager
                    .get_or_insert_with(|| DEFAULT_FIELD_MANAGER.into());
                for f in &mut ssa.ignore_fields {
                    if f.condition.is_empty() {
                        f.condition = DEFAULT_IGNORE_CONDITION.into();
                    }
                }
            }
        }
    }
}

/// Whether every entry of `want` has the same value in `have` (a label or an annotation).
fn is_subset<'a>(
    want: Option<&BTreeMap<String, String>>,
    have: impl Fn(&str) -> Option<&'a str>,
) -> bool {
    want.iter()
        .flat_map(|m| m.iter())
        .all(|(k, v)| have(k) == Some(v.as_str()))
}

/// Whether `existing` must be updated to match `desired`: its spec differs (after CRD defaults),
/// or one of the desired labels or annotations is missing or different. Labels and annotations
/// added by others, and server-set fields (resourceVersion, managedFields, status…), are ignored.
pub fn work_differs(existing: &ManifestWork, desired: &ManifestWork) -> bool {
    let mut spec = existing.spec.clone();
    normalize_spec(&mut spec);
    spec != desired.spec || work_metadata_differs(existing, &desired.metadata)
}

/// Whether one of the `desired` labels or annotations is missing from, or different in,
/// `existing` (the metadata half of [`work_differs`]; `existing` is the typed work or a cache's
/// projection of it, `desired` the metadata [`desired_work`] built).
pub fn work_metadata_differs<M: MetaView + ?Sized>(existing: &M, desired: &ObjectMeta) -> bool {
    !is_subset(desired.labels.as_ref(), |k| existing.label(k))
        || !is_subset(desired.annotations.as_ref(), |k| existing.annotation(k))
}

/// A digest of a ManifestWork spec after the CRD defaults ([`normalize_spec`]): two specs have the
/// same digest exactly when they compare equal the way [`work_differs`] compares them (object key
/// order does not matter, array order does). Lets a cache keep 20 bytes instead of the payload.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SpecDigest(pub [u8; 20]);

/// The [`SpecDigest`] of `spec`.
pub fn spec_digest(spec: &ManifestWorkSpec) -> SpecDigest {
    let mut spec = spec.clone();
    normalize_spec(&mut spec);
    normalized_spec_digest(&spec)
}

/// The [`SpecDigest`] of a spec that is already normalized (e.g. one [`desired_work`] built).
pub fn normalized_spec_digest(spec: &ManifestWorkSpec) -> SpecDigest {
    let value = serde_json::to_value(spec).expect("a ManifestWorkSpec always serializes");
    // the canonical form is built in one buffer and hashed at once: the same bytes (and digest)
    // as feeding them piece by piece, a fraction of the work (a SHA-1 update per type tag and
    // length, and a hash-map lookup per object key, were a tenth of the controller's CPU in a
    // 1,000-Application burst on the real API server)
    let mut canonical = Vec::with_capacity(4096);
    write_canonical(&value, &mut canonical);
    SpecDigest(Sha1::digest(&canonical).into())
}

/// Appends `v` to `out` unambiguously (type tags, lengths) with object keys sorted.
fn write_canonical(v: &Value, out: &mut Vec<u8>) {
    fn len(out: &mut Vec<u8>, n: usize) {
        out.extend_from_slice(&(n as u64).to_le_bytes());
    }
    match v {
        Value::Null => out.push(b'n'),
        Value::Bool(b) => out.push(if *b { b't' } else { b'f' }),
        Value::Number(n) => {
            let s = n.to_string();
            out.push(b'#');
            len(out, s.len());
            out.extend_from_slice(s.as_bytes());
        }
        Value::String(s) => {
            out.push(b's');
            len(out, s.len());
            out.extend_from_slice(s.as_bytes());
        }
        Value::Array(a) => {
            out.push(b'[');
            len(out, a.len());
            for x in a {
                write_canonical(x, out);
            }
        }
        Value::Object(m) => {
            out.push(b'{');
            len(out, m.len());
            let mut entries: Vec<(&String, &Value)> = m.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            for (k, x) in entries {
                len(out, k.len());
                out.extend_from_slice(k.as_bytes());
                write_canonical(x, out);
            }
        }
    }
}

/// The JSON merge patch that makes `existing` match `desired` (spec fields, labels and annotations
/// we own; foreign labels and annotations stay), or `None` when nothing differs.
pub fn work_update_patch(existing: &ManifestWork, desired: &ManifestWork) -> Option<Value> {
    if !work_differs(existing, desired) {
        return None;
    }
    let mut patch = Map::new();
    let mut meta = Map::new();
    for (field, want, have) in [
        (
            "labels",
            &desired.metadata.labels,
            &existing.metadata.labels,
        ),
        (
            "annotations",
            &desired.metadata.annotations,
            &existing.metadata.annotations,
        ),
    ] {
        let changed: Map<String, Value> = want
            .iter()
            .flatten()
            .filter(|(k, v)| have.as_ref().and_then(|h| h.get(*k)) != Some(*v))
            .map(|(k, v)| (k.clone(), json!(v)))
            .collect();
        if !changed.is_empty() {
            meta.insert(field.into(), Value::Object(changed));
        }
    }
    if !meta.is_empty() {
        patch.insert("metadata".into(), Value::Object(meta));
    }
    let mut old_spec = existing.spec.clone();
    normalize_spec(&mut old_spec);
    let old = serde_json::to_value(&old_spec).expect("a ManifestWorkSpec always serializes");
    let new = serde_json::to_value(&desired.spec).expect("a ManifestWorkSpec always serializes");
    if let Some(spec) = merge_diff(&old, &new) {
        patch.insert("spec".into(), spec);
    }
    (!patch.is_empty()).then_some(Value::Object(patch))
}

/// `(name, namespace)` of a work's payload Application, as the manifestConfigs identify it.
pub fn payload_identifier(work: &ManifestWork, app_name: &str) -> Option<ResourceIdentifier> {
    payload_identifier_in(
        work.spec
            .manifest_configs
            .iter()
            .map(|c| &c.resource_identifier),
        app_name,
    )
}

/// Whether a manifestConfigs identifier names an Argo CD Application.
pub fn is_application_identifier(id: &ResourceIdentifier) -> bool {
    id.group == argocd::GROUP && id.resource == "applications"
}

/// [`payload_identifier`] among the given manifestConfigs identifiers.
pub fn payload_identifier_in<'a>(
    ids: impl IntoIterator<Item = &'a ResourceIdentifier>,
    app_name: &str,
) -> Option<ResourceIdentifier> {
    let apps = ids.into_iter().filter(|id| is_application_identifier(id));
    let mut fallback = None;
    for id in apps {
        if id.name == app_name {
            return Some(id.clone());
        }
        fallback.get_or_insert(id);
    }
    fallback.cloned()
}

#[cfg(test)]
use argocd_pull_api::names::ANNOTATION_REFRESH;

#[cfg(test)]
mod tests;
