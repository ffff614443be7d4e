//! What the watch caches keep: compact projections instead of whole objects.
//!
//! A ManifestWork embeds the whole payload Application (and, in its status, conditions per
//! manifest); caching 10,000 of them as typed objects costs well over 100 MiB. The work cache keeps
//! [`WorkLite`] instead: the metadata the rules read, a [`SpecDigest`] of the spec and the
//! feedback values of the payload Application. The watch stream is deserialized straight into it,
//! so the payload only lives while one event is decoded. Where the full spec is needed (an update
//! whose merge patch must be computed), the work is read from the API server — which only happens
//! when the Application really changed.

use std::borrow::Cow;

use argocd_pull_api::ObjectMeta;
use argocd_pull_api::argocd::{
    Application, ApplicationStatus, HealthStatus, OperationState, SyncStatus,
};
use argocd_pull_api::names::ANNOTATION_LAST_APPLIED;
use argocd_pull_api::ocm::work::{
    FeedbackValue, ManifestResourceMeta, ManifestWork, ManifestWorkSpec, ResourceIdentifier,
};
use argocd_pull_domain::work::normalize_spec;
use argocd_pull_domain::{
    FeedbackValues, SpecDigest, is_application_identifier, normalized_spec_digest,
    payload_identifier_in,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use k8s_openapi::{ClusterResourceScope, NamespaceResourceScope};
use serde::Deserialize;
use serde_json::value::RawValue;
use std::collections::BTreeMap;

/// The feedback a work reports for one Application manifest, as text by rule name.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct AppFeedback {
    pub id: ResourceIdentifier,
    pub values: FeedbackValues,
}

/// A ManifestWork as the controllers need it (see the module docs).
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct WorkLite {
    /// name, namespace, uid, resourceVersion, generation, labels, annotations, deletionTimestamp.
    pub metadata: ObjectMeta,
    /// Of the spec after the CRD defaults.
    pub spec_digest: SpecDigest,
    /// The Argo CD Application identifiers of `spec.manifestConfigs`.
    pub app_ids: Vec<ResourceIdentifier>,
    /// Feedback of the status' Application manifests (conditions dropped).
    pub feedback: Vec<AppFeedback>,
}

impl WorkLite {
    /// The identifier of the payload Application named `app_name` (as
    /// [`argocd_pull_domain::application_identifier`] on the full work).
    pub fn application_identifier(&self, app_name: &str) -> Option<ResourceIdentifier> {
        payload_identifier_in(&self.app_ids, app_name)
    }

    /// The feedback values reported for the manifest `id` names.
    pub fn feedback_for(&self, id: &ResourceIdentifier) -> FeedbackValues {
        self.feedback
            .iter()
            .find(|f| &f.id == id)
            .map(|f| f.values.clone())
            .unwrap_or_default()
    }

    /// Whether the work reports any feedback value with content (without one, there is no
    /// status to write: a status write needs a health and a sync status).
    pub fn has_feedback(&self) -> bool {
        self.feedback.iter().any(|f| !f.values.values.is_empty())
    }

    /// The projection of a full work (tests compare it with the decoded wire form).
    #[cfg(test)]
    pub fn from_work(work: &ManifestWork) -> Self {
        let spec = serde_json::to_string(&work.spec).expect("a spec serializes");
        WorkWire {
            metadata: WireMeta::from_meta(&work.metadata).into_meta(),
            spec: Some(RawValue::from_string(spec).expect("serialized JSON")),
            status: work.status.as_ref().and_then(|s| {
                let rs = s.resource_status.as_ref()?;
                Some(WireStatus {
                    resource_status: Some(WireResourceStatus {
                        manifests: rs
                            .manifests
                            .iter()
                            .map(|m| WireManifest {
                                resource_meta: m.resource_meta.clone(),
                                status_feedback: m.status_feedback.as_ref().map(|f| WireFeedback {
                                    values: f.values.clone(),
                                }),
                            })
                            .collect(),
                    }),
                })
            }),
        }
        .into_lite(None)
        .expect("a typed spec parses back")
    }
}

/// Only the metadata of an API answer (the rest is skipped without being built): the answer to
/// our own create, whose spec is the one we sent.
#[derive(Deserialize)]
pub(crate) struct MetaOnly {
    #[serde(default)]
    metadata: WireMeta,
}

impl WorkLite {
    /// The projection of a work we created from `desired` (whose normalized spec has `digest`),
    /// with the metadata the API server answered.
    pub fn created(answer: MetaOnly, desired: &ManifestWork, digest: SpecDigest) -> Self {
        WorkLite {
            metadata: answer.metadata.into_meta(),
            spec_digest: digest,
            app_ids: application_ids(&desired.spec),
            feedback: Vec::new(),
        }
    }
}

fn ident(m: &ManifestResourceMeta) -> ResourceIdentifier {
    ResourceIdentifier {
        group: m.group.clone(),
        resource: m.resource.clone(),
        namespace: m.namespace.clone(),
        name: m.name.clone(),
    }
}

impl<'de> Deserialize<'de> for WorkLite {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        WorkWire::deserialize(d)?
            .into_lite(None)
            .map_err(serde::de::Error::custom)
    }
}

/// A ManifestWork as the watch decodes it: the projection's metadata and feedback source, and the
/// spec as JSON text, not yet parsed ([`WorkWire::into_lite`]). A work this controller just
/// wrote arrives on the watch with the resourceVersion of the write's answer; its spec digest is
/// already known then, and the spec is only scanned, never built (a typed spec is a tree of maps
/// per manifest, and its digest another one).
#[derive(Clone, Debug)]
pub(crate) struct WorkWire {
    pub metadata: ObjectMeta,
    spec: Option<Box<RawValue>>,
    status: Option<WireStatus>,
}

impl<'de> Deserialize<'de> for WorkWire {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let w = WireWork::deserialize(d)?;
        Ok(WorkWire {
            metadata: w.metadata.into_meta(),
            spec: w.spec,
            status: w.status,
        })
    }
}

impl WorkWire {
    /// The projection. `written` is what this controller last wrote to the work (if it still
    /// remembers it): when it is this very version (same uid and resourceVersion), its digest and
    /// Application identifiers are taken over instead of parsing and hashing the spec again.
    pub fn into_lite(self, written: Option<&WorkLite>) -> Result<WorkLite, serde_json::Error> {
        let spec = self.spec_of(written)?;
        Ok(self.with_spec(spec))
    }

    /// The spec digest and Application identifiers: `written`'s when it is this very version,
    /// else of the spec parsed and normalized.
    pub fn spec_of(&self, written: Option<&WorkLite>) -> Result<SpecOf, serde_json::Error> {
        if let Some(w) = written
            && self.metadata.resource_version.is_some()
            && w.metadata.resource_version == self.metadata.resource_version
            && w.metadata.uid == self.metadata.uid
        {
            return Ok(SpecOf {
                digest: w.spec_digest,
                app_ids: w.app_ids.clone(),
            });
        }
        let mut spec: ManifestWorkSpec = match &self.spec {
            Some(raw) => serde_json::from_str(raw.get())?,
            None => ManifestWorkSpec::default(),
        };
        normalize_spec(&mut spec);
        Ok(SpecOf {
            digest: normalized_spec_digest(&spec),
            app_ids: application_ids(&spec),
        })
    }

    /// The projection with `spec` (from [`WorkWire::spec_of`]).
    pub fn with_spec(self, spec: SpecOf) -> WorkLite {
        let SpecOf { digest, app_ids } = spec;
        let feedback = self
            .status
            .and_then(|s| s.resource_status)
            .map(|rs| rs.manifests)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|m| {
                let id = ident(&m.resource_meta);
                (is_application_identifier(&id) || app_ids.contains(&id)).then(|| AppFeedback {
                    id,
                    values: FeedbackValues::from_values(
                        m.status_feedback
                            .as_ref()
                            .map(|f| f.values.as_slice())
                            .unwrap_or(&[]),
                    ),
                })
            })
            .collect();
        WorkLite {
            metadata: self.metadata,
            spec_digest: digest,
            app_ids,
            feedback,
        }
    }
}

/// What the projection keeps of a work's spec.
pub(crate) struct SpecOf {
    digest: SpecDigest,
    app_ids: Vec<ResourceIdentifier>,
}

impl SpecOf {
    /// That of an empty spec.
    pub fn empty() -> Self {
        let mut spec = ManifestWorkSpec::default();
        normalize_spec(&mut spec);
        SpecOf {
            digest: normalized_spec_digest(&spec),
            app_ids: Vec::new(),
        }
    }
}

fn application_ids(spec: &ManifestWorkSpec) -> Vec<ResourceIdentifier> {
    spec.manifest_configs
        .iter()
        .map(|c| &c.resource_identifier)
        .filter(|id| is_application_identifier(id))
        .cloned()
        .collect()
}

/// The wire form, as much of it as the projection reads (serde skips everything else without
/// building it).
#[derive(Deserialize)]
struct WireWork {
    #[serde(default)]
    metadata: WireMeta,
    #[serde(default)]
    spec: Option<Box<RawValue>>,
    #[serde(default)]
    status: Option<WireStatus>,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireMeta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    uid: Option<String>,
    #[serde(default)]
    resource_version: Option<String>,
    #[serde(default)]
    generation: Option<i64>,
    #[serde(default)]
    labels: Option<BTreeMap<String, String>>,
    #[serde(default)]
    annotations: Option<BTreeMap<String, String>>,
    #[serde(default)]
    deletion_timestamp: Option<Time>,
}

impl WireMeta {
    #[cfg(test)]
    fn from_meta(m: &ObjectMeta) -> Self {
        WireMeta {
            name: m.name.clone(),
            namespace: m.namespace.clone(),
            uid: m.uid.clone(),
            resource_version: m.resource_version.clone(),
            generation: m.generation,
            labels: m.labels.clone(),
            annotations: m.annotations.clone(),
            deletion_timestamp: m.deletion_timestamp.clone(),
        }
    }

    fn into_meta(self) -> ObjectMeta {
        let mut annotations = self.annotations;
        if let Some(a) = annotations.as_mut() {
            a.remove(ANNOTATION_LAST_APPLIED);
        }
        ObjectMeta {
            name: self.name,
            namespace: self.namespace,
            uid: self.uid,
            resource_version: self.resource_version,
            generation: self.generation,
            labels: self.labels,
            annotations,
            deletion_timestamp: self.deletion_timestamp,
            ..Default::default()
        }
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireStatus {
    #[serde(default)]
    resource_status: Option<WireResourceStatus>,
}

#[derive(Clone, Debug, Deserialize)]
struct WireResourceStatus {
    #[serde(default)]
    manifests: Vec<WireManifest>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireManifest {
    resource_meta: ManifestResourceMeta,
    #[serde(default)]
    status_feedback: Option<WireFeedback>,
}

#[derive(Clone, Debug, Deserialize)]
struct WireFeedback {
    #[serde(default)]
    values: Vec<FeedbackValue>,
}

/// `kube::Resource` as a ManifestWork for a projection of one.
macro_rules! manifest_work_resource {
    ($t:ty) => {
        impl kube::Resource for $t {
            type DynamicType = ();
            type Scope = NamespaceResourceScope;

            fn kind(dt: &()) -> Cow<'_, str> {
                ManifestWork::kind(dt)
            }
            fn group(dt: &()) -> Cow<'_, str> {
                ManifestWork::group(dt)
            }
            fn version(dt: &()) -> Cow<'_, str> {
                ManifestWork::version(dt)
            }
            fn api_version(dt: &()) -> Cow<'_, str> {
                ManifestWork::api_version(dt)
            }
            fn plural(dt: &()) -> Cow<'_, str> {
                ManifestWork::plural(dt)
            }
            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}
manifest_work_resource!(WorkLite);
manifest_work_resource!(WorkWire);

// A ManagedCluster is only needed for its existence: its name.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub(crate) struct ClusterLite {
    #[serde(default, deserialize_with = "name_only")]
    pub metadata: ObjectMeta,
}

fn name_only<'de, D: serde::Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    let m = WireMeta::deserialize(d)?;
    Ok(ObjectMeta {
        name: m.name,
        uid: m.uid,
        resource_version: m.resource_version,
        ..Default::default()
    })
}

impl kube::Resource for ClusterLite {
    type DynamicType = ();
    type Scope = ClusterResourceScope;

    fn kind(dt: &()) -> Cow<'_, str> {
        argocd_pull_api::ocm::cluster::ManagedCluster::kind(dt)
    }
    fn group(dt: &()) -> Cow<'_, str> {
        argocd_pull_api::ocm::cluster::ManagedCluster::group(dt)
    }
    fn version(dt: &()) -> Cow<'_, str> {
        argocd_pull_api::ocm::cluster::ManagedCluster::version(dt)
    }
    fn api_version(dt: &()) -> Cow<'_, str> {
        argocd_pull_api::ocm::cluster::ManagedCluster::api_version(dt)
    }
    fn plural(dt: &()) -> Cow<'_, str> {
        argocd_pull_api::ocm::cluster::ManagedCluster::plural(dt)
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// An Application as the controllers cache it: the metadata (without managedFields and the
/// last-applied annotation), the status fields the status rules compare, and the spec and
/// requested operation as compact JSON text, parsed only when a work is (re)built
/// ([`AppLite::to_application`]). A typed spec costs a map per object; text is one allocation.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(from = "WireApp")]
pub(crate) struct AppLite {
    pub metadata: ObjectMeta,
    /// `spec` as the API server sent it (`{}` when absent).
    spec: Box<str>,
    /// `operation`, as sent.
    operation: Option<Box<str>>,
    /// Only the compared fields (see [`compact_status`]).
    pub status: Option<ApplicationStatus>,
}

#[derive(Deserialize)]
struct WireApp {
    #[serde(default, deserialize_with = "meta_without_managed_fields")]
    metadata: ObjectMeta,
    #[serde(default)]
    spec: Option<Box<RawValue>>,
    #[serde(default)]
    operation: Option<Box<RawValue>>,
    #[serde(default)]
    status: Option<ApplicationStatus>,
}

impl From<WireApp> for AppLite {
    fn from(w: WireApp) -> Self {
        let mut metadata = w.metadata;
        strip_meta(&mut metadata);
        AppLite {
            metadata,
            spec: w.spec.map_or_else(|| "{}".into(), Into::into),
            operation: w.operation.map(Into::into),
            status: w.status.map(compact_status),
        }
    }
}

impl From<Application> for AppLite {
    fn from(app: Application) -> Self {
        let mut metadata = app.metadata;
        strip_meta(&mut metadata);
        AppLite {
            metadata,
            spec: serde_json::to_string(&app.spec)
                .unwrap_or_else(|_| "{}".into())
                .into(),
            operation: app
                .operation
                .map(|o| serde_json::to_string(&o).unwrap_or_default().into()),
            status: app.status.map(compact_status),
        }
    }
}

impl AppLite {
    /// The typed Application (spec and operation parsed; status compacted).
    pub fn to_application(&self) -> Result<Application, serde_json::Error> {
        Ok(Application {
            metadata: self.metadata.clone(),
            spec: serde_json::from_str(&self.spec)?,
            operation: self
                .operation
                .as_deref()
                .map(serde_json::from_str)
                .transpose()?,
            status: self.status.clone(),
        })
    }

    /// Health status string, if reported.
    pub fn health_status(&self) -> Option<&str> {
        self.status.as_ref()?.health.as_ref()?.status.as_deref()
    }

    /// Sync status string, if reported.
    pub fn sync_status(&self) -> Option<&str> {
        self.status.as_ref()?.sync.as_ref()?.status.as_deref()
    }

    /// The spec as JSON text.
    pub fn spec_json(&self) -> &str {
        &self.spec
    }

    /// The requested operation as JSON text, if any.
    pub fn operation_json(&self) -> Option<&str> {
        self.operation.as_deref()
    }
}

/// An object's metadata without `managedFields`: serde skips them without building them (a
/// field manager's tree of `f:` keys per writer, the largest part of an Application's metadata).
fn meta_without_managed_fields<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<ObjectMeta, D::Error> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Meta {
        #[serde(default)]
        annotations: Option<BTreeMap<String, String>>,
        #[serde(default)]
        creation_timestamp: Option<Time>,
        #[serde(default)]
        deletion_grace_period_seconds: Option<i64>,
        #[serde(default)]
        deletion_timestamp: Option<Time>,
        #[serde(default)]
        finalizers: Option<Vec<String>>,
        #[serde(default)]
        generate_name: Option<String>,
        #[serde(default)]
        generation: Option<i64>,
        #[serde(default)]
        labels: Option<BTreeMap<String, String>>,
        #[serde(default)]
        name: Option<String>,
        #[serde(default)]
        namespace: Option<String>,
        #[serde(default)]
        owner_references: Option<Vec<OwnerReference>>,
        #[serde(default)]
        resource_version: Option<String>,
        #[serde(default)]
        self_link: Option<String>,
        #[serde(default)]
        uid: Option<String>,
    }
    let m = Meta::deserialize(d)?;
    Ok(ObjectMeta {
        annotations: m.annotations,
        creation_timestamp: m.creation_timestamp,
        deletion_grace_period_seconds: m.deletion_grace_period_seconds,
        deletion_timestamp: m.deletion_timestamp,
        finalizers: m.finalizers,
        generate_name: m.generate_name,
        generation: m.generation,
        labels: m.labels,
        managed_fields: None,
        name: m.name,
        namespace: m.namespace,
        owner_references: m.owner_references,
        resource_version: m.resource_version,
        self_link: m.self_link,
        uid: m.uid,
    })
}

fn strip_meta(meta: &mut ObjectMeta) {
    meta.managed_fields = None;
    if let Some(a) = meta.annotations.as_mut() {
        a.remove(ANNOTATION_LAST_APPLIED);
    }
}

impl kube::Resource for AppLite {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(dt: &()) -> Cow<'_, str> {
        Application::kind(dt)
    }
    fn group(dt: &()) -> Cow<'_, str> {
        Application::group(dt)
    }
    fn version(dt: &()) -> Cow<'_, str> {
        Application::version(dt)
    }
    fn api_version(dt: &()) -> Cow<'_, str> {
        Application::api_version(dt)
    }
    fn plural(dt: &()) -> Cow<'_, str> {
        Application::plural(dt)
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

fn compact_status(s: ApplicationStatus) -> ApplicationStatus {
    ApplicationStatus {
        health: s.health.map(|h| HealthStatus {
            status: h.status,
            ..Default::default()
        }),
        sync: s.sync.map(|y| SyncStatus {
            status: y.status,
            revision: y.revision,
            ..Default::default()
        }),
        operation_state: s.operation_state.map(|o| OperationState {
            phase: o.phase,
            started_at: o.started_at,
            // only whether it is an object is read
            operation: o.operation.map(|v| {
                if v.is_object() {
                    serde_json::Value::Object(Default::default())
                } else {
                    v
                }
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use argocd_pull_api::argocd::Application;
    use argocd_pull_domain::{WorkOptions, application_identifier, desired_work, spec_digest};
    use serde_json::json;

    fn work_json() -> serde_json::Value {
        let app: Application = serde_json::from_value(json!({
            "metadata": {"name": "app1", "namespace": "argocd", "uid": "abcdef-1",
                "labels": {"apps.open-cluster-management.io/pull-to-ocm-managed-cluster": "true"},
                "annotations": {"apps.open-cluster-management.io/ocm-managed-cluster": "c1"}},
            "spec": {"project": "default", "destination": {"namespace": "guestbook"}}
        }))
        .unwrap();
        let work = desired_work(&app, &WorkOptions::default()).unwrap();
        let mut v = serde_json::to_value(&work).unwrap();
        v["metadata"]["uid"] = json!("w-uid");
        v["metadata"]["resourceVersion"] = json!("7");
        v["metadata"]["generation"] = json!(1);
        v["metadata"]["managedFields"] = json!([{"manager": "x", "fieldsV1": {"f:spec": {}}}]);
        v["status"] = json!({
            "conditions": [{"type": "Applied", "status": "True", "reason": "x", "message": "m",
                "lastTransitionTime": "2024-01-01T00:00:00Z"}],
            "resourceStatus": {"manifests": [{
                "resourceMeta": {"ordinal": 0, "group": "argoproj.io", "version": "v1alpha1",
                    "kind": "Application", "resource": "applications", "name": "app1", "namespace": "argocd"},
                "statusFeedback": {"values": [
                    {"name": "healthStatus", "fieldValue": {"type": "String", "string": "Healthy"}},
                    {"name": "syncStatus", "fieldValue": {"type": "String", "string": "Synced"}}]},
                "conditions": [{"type": "Available", "status": "True", "reason": "x", "message": "m",
                    "lastTransitionTime": "2024-01-01T00:00:00Z"}]
            }]}
        });
        v
    }

    #[test]
    fn projection_keeps_what_the_rules_read() {
        let v = work_json();
        let full: ManifestWork = serde_json::from_value(v.clone()).unwrap();
        let lite: WorkLite = serde_json::from_value(v).unwrap();
        // decoding the wire form and projecting a typed work agree
        assert_eq!(lite, WorkLite::from_work(&full));
        assert_eq!(lite.metadata.name, full.metadata.name);
        assert_eq!(lite.metadata.labels, full.metadata.labels);
        assert_eq!(lite.metadata.annotations, full.metadata.annotations);
        assert_eq!(lite.metadata.resource_version.as_deref(), Some("7"));
        assert_eq!(lite.metadata.managed_fields, None);
        assert_eq!(lite.spec_digest, spec_digest(&full.spec));
        let id = application_identifier(&full, "app1").unwrap();
        assert_eq!(lite.application_identifier("app1"), Some(id.clone()));
        assert_eq!(
            lite.feedback_for(&id),
            FeedbackValues::from_work(&full, &id)
        );
        assert_eq!(lite.feedback_for(&id).health(), Some("Healthy"));
        assert!(lite.has_feedback());
    }

    #[test]
    fn the_projection_of_our_create_equals_the_decoded_one() {
        let mut v = work_json();
        v.as_object_mut().unwrap().remove("status");
        let full: ManifestWork = serde_json::from_value(v.clone()).unwrap();
        let answer: MetaOnly = serde_json::from_value(v.clone()).unwrap();
        let created = WorkLite::created(answer, &full, spec_digest(&full.spec));
        assert_eq!(created, serde_json::from_value::<WorkLite>(v).unwrap());
    }

    #[test]
    fn the_version_we_wrote_is_not_parsed_again() {
        let v = work_json();
        let ours: WorkLite = serde_json::from_value(v.clone()).unwrap();
        // the same uid and resourceVersion with a spec that would not even parse: taken over
        let mut wire = v.clone();
        wire["spec"] = json!({"workload": 5});
        let wire: WorkWire = serde_json::from_value(wire).unwrap();
        let spec = wire.spec_of(Some(&ours)).unwrap();
        assert_eq!(wire.clone().with_spec(spec), ours);
        // any other version is parsed
        let mut newer = ours.clone();
        newer.metadata.resource_version = Some("6".into());
        assert!(wire.spec_of(Some(&newer)).is_err());
        assert!(wire.spec_of(None).is_err());
        let mut other_uid = ours.clone();
        other_uid.metadata.uid = Some("other".into());
        assert!(wire.spec_of(Some(&other_uid)).is_err());
    }

    #[test]
    fn a_work_without_status_has_no_feedback() {
        let mut v = work_json();
        v.as_object_mut().unwrap().remove("status");
        let lite: WorkLite = serde_json::from_value(v).unwrap();
        assert!(!lite.has_feedback());
        assert_eq!(
            lite.feedback_for(&lite.application_identifier("app1").unwrap()),
            FeedbackValues::default()
        );
    }

    #[test]
    fn the_compact_application_parses_back_to_the_typed_one() {
        let v = json!({
            "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
            "metadata": {"name": "a", "namespace": "argocd", "uid": "u1", "resourceVersion": "3",
                "labels": {"apps.open-cluster-management.io/pull-to-ocm-managed-cluster": "true"},
                "annotations": {"apps.open-cluster-management.io/ocm-managed-cluster": "c1",
                    "kubectl.kubernetes.io/last-applied-configuration": "{}"},
                "finalizers": ["resources-finalizer.argocd.argoproj.io"],
                "managedFields": [{"manager": "x"}]},
            "spec": {"project": "default", "destination": {"server": "https://s", "namespace": "g"},
                "source": {"repoURL": "https://r", "path": "p", "helm": {"values": "a: 1"}},
                "syncPolicy": {"automated": {"prune": true}}},
            "operation": {"sync": {"revision": "r"}},
            "status": {"health": {"status": "Healthy", "message": "m"}, "resources": [{"kind": "Pod"}]}
        });
        let lite: AppLite = serde_json::from_value(v.clone()).unwrap();
        let typed: Application = serde_json::from_value(v).unwrap();
        let expected = AppLite::from(typed.clone()).to_application().unwrap();
        let back = lite.to_application().unwrap();
        assert_eq!(back, expected);
        assert_eq!(back.spec, typed.spec);
        assert_eq!(back.operation, typed.operation);
        assert_eq!(back.metadata.managed_fields, None);
        assert_eq!(back.metadata.annotations.as_ref().map(|a| a.len()), Some(1));
        assert_eq!(lite.health_status(), Some("Healthy"));
        assert_eq!(back.status.unwrap().resources, None);
    }

    #[test]
    fn an_application_without_spec_or_operation_parses_to_the_defaults() {
        let v = json!({"metadata": {"name": "a", "namespace": "argocd"}});
        let lite: AppLite = serde_json::from_value(v.clone()).unwrap();
        let typed: Application = serde_json::from_value(v).unwrap();
        assert_eq!(lite.to_application().unwrap(), typed);
        assert_eq!(lite.operation_json(), None);
    }

    #[test]
    fn compact_application_status_keeps_the_compared_fields() {
        let app: Application = serde_json::from_value(json!({
            "metadata": {"name": "a", "namespace": "argocd"},
            "status": {"health": {"status": "Healthy", "message": "m"},
                "sync": {"status": "Synced", "revision": "r1", "comparedTo": {"x": 1}},
                "operationState": {"phase": "Running", "startedAt": "t", "message": "m",
                    "operation": {"sync": {"revision": "r"}}},
                "resources": [{"kind": "Pod", "name": "p"}],
                "history": [{"id": 1}]}
        }))
        .unwrap();
        let app = AppLite::from(app);
        assert_eq!(
            serde_json::to_value(app.status.unwrap()).unwrap(),
            json!({"health": {"status": "Healthy"}, "sync": {"status": "Synced", "revision": "r1"},
                "operationState": {"phase": "Running", "startedAt": "t", "operation": {}}})
        );
    }
}
