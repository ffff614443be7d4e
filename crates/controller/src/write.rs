//! Writes shared by the controllers.

use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::Value;

use crate::error::is_status;

/// Immediate retries of a write answered 409 (a write without preconditions can be resent as is).
const CONFLICT_RETRIES: usize = 5;

/// A JSON merge patch as `field_manager`, resent at once when the API server answers 409.
pub(crate) async fn patch_with_retry<K>(
    api: &Api<K>,
    name: &str,
    field_manager: &str,
    patch: Value,
) -> Result<K, kube::Error>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let pp = PatchParams {
        field_manager: Some(field_manager.to_string()),
        ..Default::default()
    };
    let mut attempt = 0;
    loop {
        match api.patch(name, &pp, &Patch::Merge(&patch)).await {
            Err(e) if is_status(&e, 409) && attempt < CONFLICT_RETRIES => {
                attempt += 1;
                tracing::debug!(name, attempt, "conflict; retrying the patch");
            }
            r => return r,
        }
    }
}
