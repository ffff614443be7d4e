//! What the rules read of an object's metadata, whatever form it is kept in.

use argocd_pull_api::ObjectMeta;
use argocd_pull_api::argocd::Application;
use argocd_pull_api::ocm::work::ManifestWork;

/// The metadata the rules of [`select`](crate::select), [`sweep`](crate::sweep) and
/// [`work_metadata_differs`](crate::work_metadata_differs) read: identity, deletion, one label,
/// one annotation.
///
/// Implemented for the typed objects, whose `ObjectMeta` is whole, and by caches that keep an
/// object's labels and annotations apart from its `ObjectMeta` (the controller's projections hold
/// them in a compact form and leave the `ObjectMeta` maps empty). There is deliberately no
/// implementation for a bare `ObjectMeta`: a projection's `metadata` passed to a rule would read
/// no label at all, so that does not compile.
pub trait MetaView {
    /// The object's `ObjectMeta`, for its identity and deletion (not for its labels and
    /// annotations, which a cache may keep elsewhere: [`MetaView::label`], [`MetaView::annotation`]).
    fn object_meta(&self) -> &ObjectMeta;
    /// The value of label `key`.
    fn label(&self, key: &str) -> Option<&str>;
    /// The value of annotation `key`.
    fn annotation(&self, key: &str) -> Option<&str>;

    /// `metadata.name`.
    fn object_name(&self) -> Option<&str> {
        self.object_meta().name.as_deref()
    }
    /// `metadata.namespace`.
    fn object_namespace(&self) -> Option<&str> {
        self.object_meta().namespace.as_deref()
    }
    /// `metadata.uid`.
    fn object_uid(&self) -> Option<&str> {
        self.object_meta().uid.as_deref()
    }
    /// Whether `metadata.deletionTimestamp` is set.
    fn is_being_deleted(&self) -> bool {
        self.object_meta().deletion_timestamp.is_some()
    }
}

/// The [`MetaView`] of a whole `ObjectMeta` (labels and annotations in its maps).
macro_rules! whole_meta_view {
    ($t:ty) => {
        impl MetaView for $t {
            fn object_meta(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn label(&self, key: &str) -> Option<&str> {
                entry(&self.metadata.labels, key)
            }
            fn annotation(&self, key: &str) -> Option<&str> {
                entry(&self.metadata.annotations, key)
            }
        }
    };
}
whole_meta_view!(Application);
whole_meta_view!(ManifestWork);

fn entry<'a>(
    map: &'a Option<std::collections::BTreeMap<String, String>>,
    key: &str,
) -> Option<&'a str> {
    map.as_ref()?.get(key).map(String::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_typed_object_shows_its_metadata() {
        let app: Application = serde_json::from_value(json!({"metadata": {
            "name": "a", "namespace": "argocd", "uid": "u",
            "deletionTimestamp": "2024-01-01T00:00:00Z",
            "labels": {"l": "1"}, "annotations": {"a": ""}}}))
        .unwrap();
        assert_eq!(app.object_name(), Some("a"));
        assert_eq!(app.object_namespace(), Some("argocd"));
        assert_eq!(app.object_uid(), Some("u"));
        assert!(app.is_being_deleted());
        assert_eq!(app.label("l"), Some("1"));
        assert_eq!(app.label("a"), None);
        assert_eq!(app.annotation("a"), Some(""));
        let work = ManifestWork::new("w", Default::default());
        assert_eq!(work.object_name(), Some("w"));
        assert!(!work.is_being_deleted());
        assert_eq!((work.label("l"), work.annotation("a")), (None, None));
    }
}
