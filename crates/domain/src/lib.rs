//! Pure domain rules of the basic pull model: no I/O, no clock, no Kubernetes client.
//!
//! Given the hub objects, these functions say what should exist:
//!
//! * [`select`] — is an Application propagated, and to which cluster;
//! * [`work`] — the ManifestWork for an Application (name, labels, annotations, payload,
//!   `manifestConfigs`, optional ACM extras), whether an existing work differs, and the merge patch
//!   that brings it in line;
//! * [`status`] — the hub Application status patch computed from ManifestWork feedback;
//! * [`sweep`] — which pull-labelled ManifestWorks are orphaned;
//! * [`json`] — JSON helpers (RFC 7386 merge-patch diff);
//! * [`meta`] — [`MetaView`], what the rules read of an object's metadata (typed objects and
//!   caches' projections alike).
//!
//! The behaviour is specified in `spec/basic-pull-model.md`; every rule has a table-driven test.

pub mod json;
pub mod meta;
pub mod select;
pub mod status;
pub mod sweep;
pub mod work;

pub use meta::MetaView;
pub use select::{is_pull_label, is_pull_labelled, selected_cluster, selected_cluster_of};
pub use status::{FeedbackValues, StatusPlan, application_identifier, status_patch};
pub use sweep::{HubAppRef, hub_app_ref, hub_app_ref_of, is_orphan, is_orphan_of};
pub use work::{
    DEFAULT_FEEDBACK_PATHS, SpecDigest, WorkError, WorkOptions, appset_hash, desired_work,
    is_application_identifier, normalized_spec_digest, payload, payload_identifier_in,
    payload_namespace, spec_digest, work_differs, work_metadata_differs, work_name,
    work_update_patch,
};
