use argocd_pull_api::ocm::cluster::Placement;
use argocd_pull_api::ocm::work::{ManifestWork, ManifestWorkReplicaSet};
use argocd_pull_sim::replicaset::{FINALIZER, LABEL_REPLICASET};
use argocd_pull_sim::wait::{wait_deleted, wait_for, wait_for_list};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::common::*;

fn summary(s: &ManifestWorkReplicaSet, field: &str) -> Option<i64> {
    s.status
        .as_ref()?
        .extra
        .get("summary")?
        .get(field)?
        .as_i64()
}

fn condition(s: &ManifestWorkReplicaSet, t: &str) -> Option<(String, String)> {
    let c = s
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == t)?;
    Some((c.status.clone(), c.reason.clone()))
}

#[tokio::test]
async fn replicaset_fans_out_to_the_placement_follows_it_and_cleans_up() {
    // default labels: cloud Amazon for cluster1 and cluster4, Google for cluster2
    let fleet = fleet(4).await;
    let hub = fleet.hub_client();
    let sets: Api<ManifestWorkReplicaSet> = Api::namespaced(hub.clone(), "argocd");
    let set: ManifestWorkReplicaSet = serde_json::from_value(json!({
        "apiVersion": "work.open-cluster-management.io/v1alpha1", "kind": "ManifestWorkReplicaSet",
        "metadata": {"name": "guestbook", "namespace": "argocd"},
        "spec": {
            "placementRefs": [{"name": "amazon", "rolloutStrategy": {"type": "All"}}],
            "manifestWorkTemplate": {"workload": {"manifests": [{
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "settings", "namespace": "default"},
                "data": {"mode": "fan-out"},
            }]}},
        },
    }))
    .unwrap();
    sets.create(&PostParams::default(), &set).await.unwrap();

    // no placement yet: not verified, nothing distributed
    let s = wait_for(&sets, "guestbook", T, |s: &ManifestWorkReplicaSet| {
        condition(s, "PlacementVerified").is_some()
    })
    .await
    .unwrap();
    assert_eq!(
        condition(&s, "PlacementVerified"),
        Some(("False".into(), "PlacementDecisionNotFound".into()))
    );
    assert_eq!(summary(&s, "total"), Some(0));
    assert!(s.finalizers().iter().any(|f| f == FINALIZER));

    let placements: Api<Placement> = Api::namespaced(hub.clone(), "argocd");
    placements
        .create(&PostParams::default(), &amazon_placement())
        .await
        .unwrap();

    // one work per selected cluster, applied by the work agent, summarized on the replica set
    let s = wait_for(&sets, "guestbook", T, |s: &ManifestWorkReplicaSet| {
        summary(s, "available") == Some(2)
    })
    .await
    .unwrap();
    assert_eq!(summary(&s, "total"), Some(2));
    assert_eq!(summary(&s, "applied"), Some(2));
    assert_eq!(
        condition(&s, "PlacementVerified"),
        Some(("True".into(), "AsExpected".into()))
    );
    assert_eq!(
        condition(&s, "ManifestworkApplied"),
        Some(("True".into(), "AsExpected".into()))
    );
    for cluster in ["cluster1", "cluster4"] {
        let work = Api::<ManifestWork>::namespaced(hub.clone(), cluster)
            .get("guestbook")
            .await
            .unwrap();
        assert_eq!(work.labels()[LABEL_REPLICASET], "argocd.guestbook");
        let cm = Api::<ConfigMap>::namespaced(fleet.cluster(cluster).unwrap().client(), "default")
            .get("settings")
            .await
            .unwrap();
        assert_eq!(cm.data.unwrap()["mode"], "fan-out");
    }
    assert!(
        Api::<ManifestWork>::namespaced(hub.clone(), "cluster2")
            .get_opt("guestbook")
            .await
            .unwrap()
            .is_none()
    );

    // the placement moves to other clusters: works follow
    placements
        .patch(
            "amazon",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"predicates": [{"requiredClusterSelector": {"labelSelector": {"matchLabels": {"cloud": "Google"}}}}]}})),
        )
        .await
        .unwrap();
    let all_works: Api<ManifestWork> = Api::all(hub.clone());
    wait_for_list(&all_works, T, |ws| {
        let mut names: Vec<_> = ws
            .iter()
            .filter(|w| {
                w.labels().get(LABEL_REPLICASET).map(String::as_str) == Some("argocd.guestbook")
            })
            .filter_map(|w| w.namespace())
            .collect();
        names.sort();
        names == ["cluster2"]
    })
    .await
    .unwrap();

    // deleting the replica set deletes its works, then the replica set
    sets.delete("guestbook", &DeleteParams::default())
        .await
        .unwrap();
    wait_deleted(&sets, "guestbook", T).await.unwrap();
    let works = Api::<ManifestWork>::namespaced(hub.clone(), "cluster2");
    wait_deleted(&works, "guestbook", T).await.unwrap();
    fleet.shutdown().await;
}
