//! The compact Application and the ManagedCluster name the caches keep.

use std::borrow::Cow;

use argocd_pull_api::ObjectMeta;
use argocd_pull_api::argocd::{
    Application, ApplicationStatus, HealthStatus, OperationState, SyncStatus,
};
use argocd_pull_api::names::ANNOTATION_LAST_APPLIED;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use k8s_openapi::{ClusterResourceScope, NamespaceResourceScope};
use serde::Deserialize;
use serde_json::value::RawValue;
use std::collections::BTreeMap;

use super::{Tags, WireMeta};

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
/// last-applied annotation; its labels and annotations in compact form, apart), the status
/// fields the status rules compare, and the spec and requested operation as compact JSON text,
/// parsed only when a work is (re)built ([`AppLite::to_application`]). A typed spec costs a map
/// per object; text is one allocation.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(from = "WireApp")]
pub(crate) struct AppLite {
    /// Without managedFields, labels and annotations (`None` here: they are in `tags`).
    pub metadata: ObjectMeta,
    /// The labels and annotations (without the last-applied annotation); read them through
    /// [`MetaView`](argocd_pull_domain::MetaView) or `tags`, never `metadata`.
    pub tags: Tags,
    /// `spec` as the API server sent it (`{}` when absent).
    spec: Box<str>,
    /// `operation`, as sent.
    operation: Option<Box<str>>,
    /// Only the compared fields (see [`compact_status`]), boxed: an Application without a
    /// status (not yet reported by its cluster) does not pay for the status' 600 bytes.
    pub status: Option<Box<ApplicationStatus>>,
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
        let tags = strip_meta(&mut metadata);
        AppLite {
            metadata,
            tags,
            spec: w.spec.map_or_else(|| "{}".into(), Into::into),
            operation: w.operation.map(Into::into),
            status: w.status.map(compact_status),
        }
    }
}

impl From<Application> for AppLite {
    fn from(app: Application) -> Self {
        let mut metadata = app.metadata;
        let tags = strip_meta(&mut metadata);
        AppLite {
            metadata,
            tags,
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
    /// The typed Application (labels and annotations as maps again, spec and operation parsed;
    /// status compacted).
    pub fn to_application(&self) -> Result<Application, serde_json::Error> {
        let mut metadata = self.metadata.clone();
        self.tags.restore(&mut metadata);
        Ok(Application {
            metadata,
            spec: serde_json::from_str(&self.spec)?,
            operation: self
                .operation
                .as_deref()
                .map(serde_json::from_str)
                .transpose()?,
            status: self.status.as_deref().cloned(),
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

/// Drops managedFields and the last-applied annotation, and takes the labels and annotations out.
fn strip_meta(meta: &mut ObjectMeta) -> Tags {
    meta.managed_fields = None;
    if let Some(a) = meta.annotations.as_mut() {
        a.remove(ANNOTATION_LAST_APPLIED);
    }
    Tags::take(meta)
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

fn compact_status(s: ApplicationStatus) -> Box<ApplicationStatus> {
    Box::new(ApplicationStatus {
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
    })
}
