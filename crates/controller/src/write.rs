//! Writes shared by the controllers.

use argocd_pull_ops::conflict::read_modify_write;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::Value;

use crate::error::is_status;

/// Tries of a write answered 409: the first and 5 immediate retries (a write without
/// preconditions can be resent as is).
const CONFLICT_ATTEMPTS: u32 = 1 + 5;

/// A JSON merge patch as `field_manager`, resent at once when the API server answers 409; the
/// last 409 when it kept conflicting.
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
    let patch = Patch::Merge(&patch);
    read_modify_write(
        name,
        CONFLICT_ATTEMPTS,
        |e| is_status(e, 409),
        // the patch is computed once: nothing to read again
        || async { Ok(()) },
        |()| api.patch(name, &pp, &patch),
    )
    .await
    .map_err(|e| e.into_last())
}
