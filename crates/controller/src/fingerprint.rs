//! What of an object each controller reacts to: a change outside it (a status-only update of
//! an Application, the work agent's status on a ManifestWork) triggers nothing.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use crate::cache::{AppLite, WorkLite};

/// What of an Application the propagation controller reacts to (status-only updates are not).
pub(crate) fn app_fingerprint(app: &AppLite) -> u64 {
    let mut h = DefaultHasher::new();
    app.metadata.uid.hash(&mut h);
    // hashed as the maps were (`Pairs` hashes as a `BTreeMap`)
    app.labels().hash(&mut h);
    app.annotations().hash(&mut h);
    app.metadata.finalizers.hash(&mut h);
    app.metadata
        .owner_references
        .as_ref()
        .map(|o| o.len())
        .hash(&mut h);
    app.metadata.deletion_timestamp.is_some().hash(&mut h);
    // the JSON text as the API server sent it
    app.spec_json().hash(&mut h);
    app.operation_json().hash(&mut h);
    h.finish()
}

/// What of a ManifestWork the propagation controller reacts to (spec, labels, annotations).
pub(crate) fn work_fingerprint(work: &WorkLite) -> u64 {
    let mut h = DefaultHasher::new();
    work.metadata.uid.hash(&mut h);
    work.labels().hash(&mut h);
    work.annotations().hash(&mut h);
    work.metadata.deletion_timestamp.is_some().hash(&mut h);
    work.spec_digest.hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The Application fingerprint as it was computed when the cache kept the label and
    /// annotation maps in the metadata.
    fn with_maps(app: &AppLite) -> u64 {
        let meta = app.to_application().unwrap().metadata;
        let mut h = DefaultHasher::new();
        meta.uid.hash(&mut h);
        meta.labels.hash(&mut h);
        meta.annotations.hash(&mut h);
        meta.finalizers.hash(&mut h);
        meta.owner_references.as_ref().map(|o| o.len()).hash(&mut h);
        meta.deletion_timestamp.is_some().hash(&mut h);
        app.spec_json().hash(&mut h);
        app.operation_json().hash(&mut h);
        h.finish()
    }

    fn app(meta: serde_json::Value) -> AppLite {
        serde_json::from_value(json!({"metadata": meta, "spec": {"project": "p"}})).unwrap()
    }

    #[test]
    fn labels_and_annotations_count_as_the_maps_did() {
        let apps = [
            app(json!({"name": "a", "uid": "u"})),
            app(json!({"name": "a", "uid": "u", "labels": {}})),
            app(json!({"name": "a", "uid": "u", "annotations": {}})),
            app(json!({"name": "a", "uid": "u", "labels": {"l": "1"}})),
            app(json!({"name": "a", "uid": "u", "labels": {"l": "2"}})),
            app(json!({"name": "a", "uid": "u", "labels": {"l": "1", "m": ""}})),
            app(json!({"name": "a", "uid": "u", "annotations": {"l": "1"}})),
            app(json!({"name": "a", "uid": "u", "labels": {"l": "1"}, "annotations": {"a": "x"}})),
        ];
        for (i, a) in apps.iter().enumerate() {
            assert_eq!(app_fingerprint(a), with_maps(a), "{i}");
            for (j, b) in apps.iter().enumerate() {
                assert_eq!(app_fingerprint(a) == app_fingerprint(b), i == j, "{i} {j}");
            }
        }
        // the last-applied annotation is not kept, so it changes nothing
        let last = app(json!({"name": "a", "uid": "u", "annotations": {"l": "1",
            "kubectl.kubernetes.io/last-applied-configuration": "{}"}}));
        assert_eq!(app_fingerprint(&last), app_fingerprint(&apps[6]));
    }

    #[test]
    fn a_work_fingerprint_follows_its_labels_and_annotations() {
        let work = |meta: serde_json::Value| -> WorkLite {
            serde_json::from_value(json!({"metadata": meta, "spec": {}})).unwrap()
        };
        let works = [
            work(json!({"name": "w", "uid": "u"})),
            work(json!({"name": "w", "uid": "u", "labels": {}})),
            work(json!({"name": "w", "uid": "u", "labels": {"l": "1"}})),
            work(json!({"name": "w", "uid": "u", "annotations": {"l": "1"}})),
            work(json!({"name": "w", "uid": "u", "annotations": {"l": "2"}})),
        ];
        for (i, a) in works.iter().enumerate() {
            for (j, b) in works.iter().enumerate() {
                assert_eq!(
                    work_fingerprint(a) == work_fingerprint(b),
                    i == j,
                    "{i} {j}"
                );
            }
        }
    }
}
