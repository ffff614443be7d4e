//! A deleted GitOpsCluster cleaned up: everything it created deleted (the shared
//! ClusterManagementAddOn with the last AddOnTemplate of ours), then its finalizer removed.

use std::collections::BTreeSet;

use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use serde_json::json;

use super::context::{Ctx, Error, kube_err};
use crate::addon::apply;
use crate::addon::*;

pub(super) async fn finalize(
    ctx: &Ctx,
    gc: &GitOpsCluster,
    ns: &str,
    name: &str,
) -> Result<Action, Error> {
    let owned = apply::list_owned(&ctx.client, ns, name)
        .await
        .map_err(kube_err("listing owned objects"))?;
    let (_, errors) = apply::sweep(&ctx.client, &owned, &BTreeSet::new()).await;
    if !errors.is_empty() {
        return Err(Error::Incomplete(format!("cleanup: {}", errors.join("; "))));
    }
    // The shared ClusterManagementAddOn goes with the last AddOnTemplate of ours.
    let (ar, _) = apply::resource("AddOnTemplate");
    let left = Api::<kube::api::DynamicObject>::all_with(ctx.client.clone(), &ar)
        .list(&ListParams::default().labels(&format!("{LABEL_MANAGED_BY}={MANAGED_BY}")))
        .await
        .map_err(kube_err("listing AddOnTemplates"))?;
    if left.items.is_empty() {
        let (ar, _) = apply::resource("ClusterManagementAddOn");
        let _ = Api::<kube::api::DynamicObject>::all_with(ctx.client.clone(), &ar)
            .delete(ADDON_NAME, &Default::default())
            .await;
    }
    let finalizers: Vec<String> = gc
        .finalizers()
        .iter()
        .filter(|f| *f != FINALIZER)
        .cloned()
        .collect();
    Api::<GitOpsCluster>::namespaced(ctx.client.clone(), ns)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": finalizers, "resourceVersion": gc.resource_version()}})),
        )
        .await
        .map_err(kube_err("removing the finalizer"))?;
    tracing::info!(gitopscluster = %format!("{ns}/{name}"), objects = owned.len(), "cleaned up");
    Ok(Action::await_change())
}
