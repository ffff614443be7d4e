//! What the watch caches keep: compact projections instead of whole objects.
//!
//! A ManifestWork embeds the whole payload Application (and, in its status, conditions per
//! manifest); caching 10,000 of them as typed objects costs well over 100 MiB. The work cache keeps
//! [`WorkLite`] instead: the metadata the rules read, a [`SpecDigest`] of the spec and the
//! feedback values of the payload Application. The watch stream is deserialized straight into it,
//! so the payload only lives while one event is decoded. Where the full spec is needed (an update
//! whose merge patch must be computed), the work is read from the API server — which only happens
//! when the Application really changed.
//!
//! Both projections keep labels and annotations apart from their `ObjectMeta` (whose maps stay
//! `None`), in the compact form of [`tags`]: read them through
//! [`MetaView`](argocd_pull_domain::MetaView), `tags` or the inherent `labels()`/`annotations()`.

use std::borrow::Cow;

use argocd_pull_api::ObjectMeta;
use argocd_pull_api::names::ANNOTATION_LAST_APPLIED;
use argocd_pull_api::ocm::work::{
    FeedbackValue, ManifestResourceMeta, ManifestWork, ManifestWorkSpec, ResourceIdentifier,
};
use argocd_pull_domain::work::normalize_spec;
use argocd_pull_domain::{
    FeedbackValues, MetaView, SpecDigest, is_application_identifier, normalized_spec_digest,
    payload_identifier_in,
};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::Deserialize;
use serde_json::value::RawValue;
use std::collections::BTreeMap;

mod app;
mod tags;

pub(crate) use app::{AppLite, ClusterLite};
pub(crate) use tags::{Pairs, Tags};

/// The feedback a work reports for one Application manifest, as text by rule name.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct AppFeedback {
    pub id: ResourceIdentifier,
    pub values: FeedbackValues,
}

/// A ManifestWork as the controllers need it (see the module docs).
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct WorkLite {
    /// name, namespace, uid, resourceVersion, generation, deletionTimestamp; not the labels and
    /// annotations (`None` here): they are in `tags`.
    pub metadata: ObjectMeta,
    /// The labels and annotations (without the last-applied annotation); read them through
    /// [`MetaView`] or `tags`, never `metadata`.
    pub tags: Tags,
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
        let (metadata, tags) = WireMeta::from_meta(&work.metadata).into_meta();
        WorkWire {
            metadata,
            tags,
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
        let (metadata, tags) = answer.metadata.into_meta();
        WorkLite {
            metadata,
            tags,
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
    /// As [`WorkLite::metadata`].
    pub metadata: ObjectMeta,
    tags: Tags,
    spec: Option<Box<RawValue>>,
    status: Option<WireStatus>,
}

impl<'de> Deserialize<'de> for WorkWire {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let w = WireWork::deserialize(d)?;
        let (metadata, tags) = w.metadata.into_meta();
        Ok(WorkWire {
            metadata,
            tags,
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
            tags: self.tags,
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

    /// The metadata without labels and annotations, and those (without the last-applied
    /// annotation) apart.
    fn into_meta(self) -> (ObjectMeta, Tags) {
        let mut annotations = self.annotations;
        if let Some(a) = annotations.as_mut() {
            a.remove(ANNOTATION_LAST_APPLIED);
        }
        let mut meta = ObjectMeta {
            name: self.name,
            namespace: self.namespace,
            uid: self.uid,
            resource_version: self.resource_version,
            generation: self.generation,
            labels: self.labels,
            annotations,
            deletion_timestamp: self.deletion_timestamp,
            ..Default::default()
        };
        let tags = Tags::take(&mut meta);
        (meta, tags)
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

/// The [`MetaView`] of a projection: its `metadata`, and its labels and annotations from `tags`.
macro_rules! projection_meta_view {
    ($t:ty) => {
        impl MetaView for $t {
            fn object_meta(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn label(&self, key: &str) -> Option<&str> {
                self.tags.label(key)
            }
            fn annotation(&self, key: &str) -> Option<&str> {
                self.tags.annotation(key)
            }
        }
    };
}
projection_meta_view!(WorkLite);
projection_meta_view!(AppLite);

/// A projection's labels and annotations; these inherent methods shadow `ResourceExt`'s, which
/// would read the (empty) `metadata` maps.
macro_rules! projection_tags {
    ($t:ty) => {
        impl $t {
            /// The labels (`None`: the object has none).
            pub fn labels(&self) -> Option<&Pairs> {
                self.tags.labels.as_ref()
            }
            /// The annotations (`None`: the object has none).
            pub fn annotations(&self) -> Option<&Pairs> {
                self.tags.annotations.as_ref()
            }
        }
    };
}
projection_tags!(WorkLite);
projection_tags!(AppLite);

#[cfg(test)]
mod tests;
