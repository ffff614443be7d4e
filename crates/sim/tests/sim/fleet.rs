use argocd_pull_api::argocd::Application;
use argocd_pull_api::ocm::cluster::ManagedCluster;
use kube::api::Api;

use crate::common::*;

#[tokio::test]
async fn fleet_registers_clusters_like_ocm() {
    let fleet = fleet_with(3, argocd_pull_sim::CrdFlavor::Full).await;
    assert_eq!(fleet.cluster_names(), ["cluster1", "cluster2", "cluster3"]);
    let mcs: Api<ManagedCluster> = Api::all(fleet.hub_client());
    let mc = mcs.get("cluster2").await.unwrap();
    assert_eq!(mc.spec.hub_accepts_client, Some(true));
    let labels = mc.metadata.labels.unwrap();
    assert_eq!(labels["name"], "cluster2");
    assert_eq!(labels["cloud"], "Google");
    let conds = mc.status.unwrap().conditions.unwrap();
    assert!(
        conds
            .iter()
            .any(|c| c.type_ == "ManagedClusterConditionAvailable" && c.status == "True")
    );
    assert!(!mc.spec.managed_cluster_client_configs.unwrap().is_empty());
    // Cluster namespaces on the hub; Argo CD's API and namespace on each cluster.
    let nss: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(fleet.hub_client());
    for n in ["cluster1", "argocd", "open-cluster-management"] {
        assert!(nss.get_opt(n).await.unwrap().is_some(), "{n}");
    }
    let c = fleet.cluster("cluster3").unwrap();
    assert!(
        c.applications("argocd")
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    let _: Api<Application> = Api::all(c.client());
    // Duplicate and unknown names are errors.
    let e = fleet
        .add_cluster("cluster1", Default::default())
        .await
        .unwrap_err();
    assert!(e.to_string().contains("cluster1"), "{e}");
    assert!(fleet.remove_cluster("nope").await.is_err());
    fleet.shutdown().await;
}

#[tokio::test]
async fn served_hub_answers_http() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let fleet = fleet(1).await;
    let server = fleet.serve("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let kubeconfig = server.kubeconfig_yaml();
    assert!(kubeconfig.contains(&server.url()), "{kubeconfig}");
    let cfg = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::from_yaml(&kubeconfig).unwrap(),
        &Default::default(),
    )
    .await
    .unwrap();
    let client = kube::Client::try_from(cfg).unwrap();
    let mcs: Api<ManagedCluster> = Api::all(client);
    assert_eq!(mcs.list(&Default::default()).await.unwrap().items.len(), 1);
    server.shutdown().await;
    fleet.shutdown().await;
}
