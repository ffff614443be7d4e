use argocd_pull_api::names::LABEL_PLACEMENT;
use argocd_pull_api::ocm::cluster::{ManagedCluster, Placement, PlacementDecision};
use argocd_pull_sim::wait::{wait_for, wait_for_list};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::common::*;

fn names(d: &PlacementDecision) -> Vec<String> {
    d.cluster_names().map(str::to_string).collect()
}

#[tokio::test]
async fn placement_selects_by_labels_and_follows_label_changes() {
    // Default labels: cloud Amazon, Google, Azure, Amazon, Google for cluster1..5.
    let fleet = fleet(5).await;
    let hub = fleet.hub_client();
    let placements: Api<Placement> = Api::namespaced(hub.clone(), "argocd");
    let decisions: Api<PlacementDecision> = Api::namespaced(hub.clone(), "argocd");
    placements
        .create(&PostParams::default(), &amazon_placement())
        .await
        .unwrap();
    let d = wait_for(
        &decisions,
        "amazon-decision-1",
        T,
        |d: &PlacementDecision| names(d) == ["cluster1", "cluster4"],
    )
    .await
    .unwrap();
    assert_eq!(
        d.metadata.labels.as_ref().unwrap()[LABEL_PLACEMENT],
        "amazon"
    );
    assert_eq!(
        d.metadata.owner_references.as_ref().unwrap()[0].kind,
        "Placement"
    );
    let p = wait_for(&placements, "amazon", T, |p: &Placement| {
        p.status
            .as_ref()
            .and_then(|s| s.number_of_selected_clusters)
            == Some(2)
    })
    .await
    .unwrap();
    let conds = p.status.unwrap().conditions.unwrap();
    assert!(
        conds
            .iter()
            .any(|c| c.type_ == "PlacementSatisfied" && c.status == "True")
    );

    // cluster2 moves to Amazon: re-evaluated.
    let mcs: Api<ManagedCluster> = Api::all(hub.clone());
    mcs.patch(
        "cluster2",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"cloud": "Amazon"}}})),
    )
    .await
    .unwrap();
    wait_for(
        &decisions,
        "amazon-decision-1",
        T,
        |d: &PlacementDecision| names(d) == ["cluster1", "cluster2", "cluster4"],
    )
    .await
    .unwrap();

    // numberOfClusters caps the selection (sorted by name).
    placements
        .patch(
            "amazon",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"numberOfClusters": 1}})),
        )
        .await
        .unwrap();
    wait_for(
        &decisions,
        "amazon-decision-1",
        T,
        |d: &PlacementDecision| names(d) == ["cluster1"],
    )
    .await
    .unwrap();

    // Removing a cluster removes it from decisions.
    placements
        .patch(
            "amazon",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"numberOfClusters": null}})),
        )
        .await
        .unwrap();
    fleet.remove_cluster("cluster1").await.unwrap();
    wait_for(
        &decisions,
        "amazon-decision-1",
        T,
        |d: &PlacementDecision| names(d) == ["cluster2", "cluster4"],
    )
    .await
    .unwrap();
    assert!(mcs.get_opt("cluster1").await.unwrap().is_none());
    fleet.shutdown().await;
}

#[tokio::test]
async fn large_selection_is_split_into_decisions_of_100() {
    let mut cfg = argocd_pull_sim::FleetConfig::with_clusters(150);
    cfg.argo_sim = false;
    cfg.work_agent = false;
    cfg.hub_argocd_crds = argocd_pull_sim::CrdFlavor::Slim;
    let fleet = argocd_pull_sim::Fleet::start(cfg).await.unwrap();
    let hub = fleet.hub_client();
    let placements: Api<Placement> = Api::namespaced(hub.clone(), "argocd");
    placements
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "all", "namespace": "argocd"}, "spec": {}
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    let decisions: Api<PlacementDecision> = Api::namespaced(hub.clone(), "argocd");
    let all = wait_for_list(&decisions, T, |ds: &[PlacementDecision]| {
        ds.iter().map(|d| d.cluster_names().count()).sum::<usize>() == 150
    })
    .await
    .unwrap();
    let mut sizes: Vec<(String, usize)> = all
        .iter()
        .map(|d| (d.metadata.name.clone().unwrap(), d.cluster_names().count()))
        .collect();
    sizes.sort();
    assert_eq!(
        sizes,
        [
            ("all-decision-1".to_string(), 100),
            ("all-decision-2".to_string(), 50)
        ]
    );
    let listed = decisions
        .list(&ListParams::default().labels(&format!("{LABEL_PLACEMENT}=all")))
        .await
        .unwrap();
    assert_eq!(listed.items.len(), 2);
    fleet.shutdown().await;
}

#[tokio::test]
async fn bad_selector_is_reported_as_misconfigured() {
    let fleet = fleet(2).await;
    let placements: Api<Placement> = Api::namespaced(fleet.hub_client(), "argocd");
    placements
        .create(&PostParams::default(), &serde_json::from_value(json!({
            "metadata": {"name": "bad", "namespace": "argocd"},
            "spec": {"predicates": [{"requiredClusterSelector": {"labelSelector": {"matchExpressions": [
                {"key": "cloud", "operator": "Like", "values": ["A"]}]}}}]}
        })).unwrap())
        .await
        .unwrap();
    let p = wait_for(&placements, "bad", T, |p: &Placement| p.status.is_some())
        .await
        .unwrap();
    let conds = p.status.unwrap().conditions.unwrap();
    let m = conds
        .iter()
        .find(|c| c.type_ == "PlacementMisconfigured")
        .unwrap();
    assert_eq!(m.status, "True");
    assert!(m.message.contains("Like"), "{}", m.message);
    fleet.shutdown().await;
}
