//! What of an object each controller reacts to: a change outside it (a status-only update of
//! an Application, the work agent's status on a ManifestWork) triggers nothing.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use crate::cache::{AppLite, WorkLite};

/// What of an Application the propagation controller reacts to (status-only updates are not).
pub(crate) fn app_fingerprint(app: &AppLite) -> u64 {
    let mut h = DefaultHasher::new();
    app.metadata.uid.hash(&mut h);
    app.metadata.labels.hash(&mut h);
    app.metadata.annotations.hash(&mut h);
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
    work.metadata.labels.hash(&mut h);
    work.metadata.annotations.hash(&mut h);
    work.metadata.deletion_timestamp.is_some().hash(&mut h);
    work.spec_digest.hash(&mut h);
    h.finish()
}
