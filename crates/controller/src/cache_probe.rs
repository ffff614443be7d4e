//! The watch caches' projections, decoded from an object's JSON as the watch decodes them: for
//! measuring what a cached object costs on the heap (`benches/cache_heap.rs`), nothing else.
//! The types stay private; callers only hold and drop them.

use crate::cache::{AppLite, WorkLite};

/// What the Application cache keeps of `json` (one Application).
pub fn cached_application(json: &[u8]) -> serde_json::Result<impl Sized + Send + Sync + 'static> {
    serde_json::from_slice::<AppLite>(json)
}

/// What the ManifestWork cache keeps of `json` (one ManifestWork).
pub fn cached_work(json: &[u8]) -> serde_json::Result<impl Sized + Send + Sync + 'static> {
    serde_json::from_slice::<WorkLite>(json)
}
