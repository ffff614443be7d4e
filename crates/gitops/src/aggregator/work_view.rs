//! The ManifestWork as the aggregator reads it: [`WorkView`], a compact projection decoded
//! straight from the API response (metadata the report needs and the Application's feedback; the
//! payload is skipped).

use argocd_pull_api::ocm::work::{ManifestWork, ManifestWorkStatus};
use kube::Resource;
use kube::api::ObjectMeta;
use serde::Deserialize;

/// A ManifestWork as the aggregator reads it: a compact projection decoded straight from the
/// API response. Of the metadata only name, namespace, resourceVersion, deletionTimestamp, the
/// `application-set` label and the two annotations the report needs are kept (managedFields and
/// everything else are skipped unallocated); of the status only the feedback values of the Argo CD
/// Application manifest. The payload (`spec`) is never decoded.
#[derive(Clone, Debug, Default)]
pub struct WorkView {
    pub metadata: ObjectMeta,
    pub status: Option<ManifestWorkStatus>,
}

impl<'de> Deserialize<'de> for WorkView {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = slim::Work::deserialize(d)?;
        Ok(raw.into())
    }
}

/// The serde projection behind [`WorkView`] (undeclared fields are skipped by serde without
/// allocating, `IgnoredAny`-style).
mod slim {
    use std::collections::BTreeMap;
    use std::fmt;

    use argocd_pull_api::names;
    use argocd_pull_api::ocm::work::{
        ManifestCondition, ManifestResourceMeta, ManifestResourceStatus, ManifestWorkStatus,
        StatusFeedbackResult,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use kube::api::ObjectMeta;
    use serde::Deserialize;
    use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, Visitor};

    #[derive(Deserialize)]
    pub(super) struct Work {
        #[serde(default)]
        metadata: Meta,
        #[serde(default)]
        status: Option<Status>,
    }

    #[derive(Default, Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Meta {
        #[serde(default)]
        name: Option<String>,
        #[serde(default)]
        namespace: Option<String>,
        #[serde(default)]
        resource_version: Option<String>,
        #[serde(default)]
        deletion_timestamp: Option<Time>,
        #[serde(default, deserialize_with = "labels")]
        labels: Option<BTreeMap<String, String>>,
        #[serde(default, deserialize_with = "annotations")]
        annotations: Option<BTreeMap<String, String>>,
    }

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Status {
        #[serde(default)]
        resource_status: Option<ResourceStatus>,
    }

    #[derive(Deserialize)]
    struct ResourceStatus {
        #[serde(default)]
        manifests: Vec<Manifest>,
    }

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Manifest {
        #[serde(default)]
        resource_meta: ResourceMeta,
        #[serde(default)]
        status_feedback: Option<StatusFeedbackResult>,
    }

    #[derive(Default, Deserialize)]
    struct ResourceMeta {
        #[serde(default)]
        group: String,
        #[serde(default)]
        kind: String,
        #[serde(default)]
        resource: String,
    }

    /// A string map keeping only the keys in `keep` (the other values are skipped).
    struct FilteredMap(&'static [&'static str]);

    impl<'de> Visitor<'de> for FilteredMap {
        type Value = Option<BTreeMap<String, String>>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a map of strings")
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_none<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_map(self)
        }
        fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Self::Value, A::Error> {
            let mut out = BTreeMap::new();
            while let Some(k) = m.next_key_seed(Key(self.0))? {
                match k {
                    Some(k) => {
                        out.insert(k.to_string(), m.next_value::<String>()?);
                    }
                    None => {
                        m.next_value::<IgnoredAny>()?;
                    }
                }
            }
            Ok(Some(out))
        }
    }

    /// A map key matched against the wanted keys without allocating.
    struct Key(&'static [&'static str]);

    impl<'de> DeserializeSeed<'de> for Key {
        type Value = Option<&'static str>;
        fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_str(self)
        }
    }

    impl<'de> Visitor<'de> for Key {
        type Value = Option<&'static str>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a string key")
        }
        fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
            Ok(self.0.iter().find(|k| **k == v).copied())
        }
    }

    fn labels<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<Option<BTreeMap<String, String>>, D::Error> {
        d.deserialize_option(FilteredMap(&[names::LABEL_APPLICATION_SET]))
    }

    fn annotations<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<Option<BTreeMap<String, String>>, D::Error> {
        d.deserialize_option(FilteredMap(&[
            names::HOSTING_APPLICATIONSET,
            names::ANNOTATION_HUB_APPLICATION_NAME,
        ]))
    }

    impl From<Work> for super::WorkView {
        fn from(w: Work) -> Self {
            let m = w.metadata;
            // Only the Argo CD Application manifest's feedback is read (`application_feedback`
            // takes the first such manifest); keep just that one.
            let manifests: Vec<ManifestCondition> = w
                .status
                .and_then(|s| s.resource_status)
                .into_iter()
                .flat_map(|rs| rs.manifests)
                .find(|m| {
                    m.resource_meta.group == "argoproj.io"
                        && (m.resource_meta.resource == "applications"
                            || m.resource_meta.kind == "Application")
                })
                .map(|m| ManifestCondition {
                    resource_meta: ManifestResourceMeta {
                        group: m.resource_meta.group,
                        kind: m.resource_meta.kind,
                        resource: m.resource_meta.resource,
                        ..Default::default()
                    },
                    status_feedback: m.status_feedback,
                    conditions: Vec::new(),
                })
                .into_iter()
                .collect();
            super::WorkView {
                metadata: ObjectMeta {
                    name: m.name,
                    namespace: m.namespace,
                    resource_version: m.resource_version,
                    deletion_timestamp: m.deletion_timestamp,
                    labels: m.labels,
                    annotations: m.annotations,
                    ..Default::default()
                },
                status: Some(ManifestWorkStatus {
                    conditions: Vec::new(),
                    resource_status: Some(ManifestResourceStatus { manifests }),
                }),
            }
        }
    }
}

impl Resource for WorkView {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;
    fn kind(_: &()) -> std::borrow::Cow<'_, str> {
        ManifestWork::kind(&())
    }
    fn group(_: &()) -> std::borrow::Cow<'_, str> {
        ManifestWork::group(&())
    }
    fn version(_: &()) -> std::borrow::Cow<'_, str> {
        ManifestWork::version(&())
    }
    fn plural(_: &()) -> std::borrow::Cow<'_, str> {
        ManifestWork::plural(&())
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}
