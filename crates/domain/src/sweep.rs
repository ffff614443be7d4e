//! Which pull-labelled ManifestWorks no longer have a reason to exist.

use argocd_pull_api::argocd::Application;
use argocd_pull_api::names::{
    ANNOTATION_HUB_APPLICATION_NAME, ANNOTATION_HUB_APPLICATION_NAMESPACE, LABEL_PULL_TO_OCM,
};
use argocd_pull_api::ocm::work::ManifestWork;

use crate::meta::MetaView;
use crate::select::{is_pull_label, selected_cluster_of};
use crate::work::work_name;

/// The hub Application a work was made for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HubAppRef<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
}

/// The hub Application named by a pull-labelled work's two annotations (`None` when the work is not
/// pull-labelled or either annotation is missing or empty: such a work is not ours).
pub fn hub_app_ref(work: &ManifestWork) -> Option<HubAppRef<'_>> {
    hub_app_ref_of(work)
}

/// [`hub_app_ref`] from a work's metadata alone (for caches that keep a projection of works).
pub fn hub_app_ref_of<M: MetaView + ?Sized>(meta: &M) -> Option<HubAppRef<'_>> {
    if !is_pull_label(meta.label(LABEL_PULL_TO_OCM)) {
        return None;
    }
    let namespace = meta.annotation(ANNOTATION_HUB_APPLICATION_NAMESPACE)?;
    let name = meta.annotation(ANNOTATION_HUB_APPLICATION_NAME)?;
    if namespace.is_empty() || name.is_empty() {
        return None;
    }
    Some(HubAppRef { namespace, name })
}

/// Whether `work` should be deleted, given the hub Application its annotations name (`app`, `None`
/// when it does not exist):
///
/// * not ours (no pull label or annotations) or already being deleted → no;
/// * the Application is gone, or no longer selected → yes;
/// * the Application now targets another cluster, or was re-created (another uid, so another work
///   name) → yes, this work is stale;
/// * otherwise no.
pub fn is_orphan(work: &ManifestWork, app: Option<&Application>) -> bool {
    is_orphan_of(work, app)
}

/// [`is_orphan`] from a work's and its Application's metadata alone (the rule reads nothing
/// else): the typed objects or a cache's projections of them.
pub fn is_orphan_of<W, A>(work: &W, app: Option<&A>) -> bool
where
    W: MetaView + ?Sized,
    A: MetaView + ?Sized,
{
    if hub_app_ref_of(work).is_none() || work.is_being_deleted() {
        return false;
    }
    let Some(app) = app else { return true };
    let Some(cluster) = selected_cluster_of(app) else {
        return true;
    };
    let (Some(name), Some(uid)) = (app.object_name(), app.object_uid()) else {
        return false;
    };
    work.object_namespace() != Some(cluster)
        || work.object_name() != Some(work_name(name, uid).as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use argocd_pull_api::names::ANNOTATION_OCM_MANAGED_CLUSTER;
    use serde_json::json;

    fn work(ns: &str, name: &str, labelled: bool, annotated: bool, deleting: bool) -> ManifestWork {
        let mut meta = json!({"name": name, "namespace": ns});
        if labelled {
            meta["labels"] = json!({LABEL_PULL_TO_OCM: "true"});
        }
        if annotated {
            meta["annotations"] = json!({
                ANNOTATION_HUB_APPLICATION_NAMESPACE: "argocd",
                ANNOTATION_HUB_APPLICATION_NAME: "app1",
            });
        }
        if deleting {
            meta["deletionTimestamp"] = json!("2024-01-01T00:00:00Z");
        }
        serde_json::from_value(json!({
            "apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
            "metadata": meta, "spec": {}
        }))
        .unwrap()
    }

    fn app(label: &str, cluster: &str, uid: &str) -> Application {
        serde_json::from_value(json!({"metadata": {
            "name": "app1", "namespace": "argocd", "uid": uid,
            "labels": {LABEL_PULL_TO_OCM: label},
            "annotations": {ANNOTATION_OCM_MANAGED_CLUSTER: cluster}
        }}))
        .unwrap()
    }

    #[test]
    fn orphan_table() {
        let live = app("true", "c1", "abcdefgh");
        let cases = [
            (
                "current work",
                work("c1", "app1-abcde", true, true, false),
                Some(live.clone()),
                false,
            ),
            (
                "app gone",
                work("c1", "app1-abcde", true, true, false),
                None,
                true,
            ),
            (
                "app unselected",
                work("c1", "app1-abcde", true, true, false),
                Some(app("false", "c1", "abcdefgh")),
                true,
            ),
            (
                "app moved cluster",
                work("c1", "app1-abcde", true, true, false),
                Some(app("true", "c2", "abcdefgh")),
                true,
            ),
            (
                "app re-created",
                work("c1", "app1-abcde", true, true, false),
                Some(app("true", "c1", "zzzzzzz")),
                true,
            ),
            (
                "not pull-labelled",
                work("c1", "app1-abcde", false, true, false),
                None,
                false,
            ),
            (
                "not annotated",
                work("c1", "app1-abcde", true, false, false),
                None,
                false,
            ),
            (
                "already deleting",
                work("c1", "app1-abcde", true, true, true),
                None,
                false,
            ),
        ];
        for (name, w, a, want) in cases {
            assert_eq!(is_orphan(&w, a.as_ref()), want, "{name}");
        }
    }
}
