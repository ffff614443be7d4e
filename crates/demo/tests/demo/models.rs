//! Each model converges, checked on the hub it leaves running (not only through the outcome).

use std::time::Duration;

use argocd_pull_api::argocd::Application;
use argocd_pull_api::gitops::GitOpsCluster;
use argocd_pull_api::ocm::work::ManifestWork;
use argocd_pull_api::report::{MulticlusterApplicationSetReport, ReportSummary};
use argocd_pull_demo::{Demo, DemoArgs, DemoModel};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::ResourceExt;
use kube::api::{Api, ListParams};

fn args(dir: &tempfile::TempDir, model: DemoModel, clusters: usize, apps: usize) -> DemoArgs {
    DemoArgs {
        clusters,
        apps,
        model,
        kubeconfig_out: Some(dir.path().join("kc.yaml")),
        timeout: Duration::from_secs(60),
        sync_delay: Duration::from_millis(20),
        ..Default::default()
    }
}

fn summary(clusters: u32, synced: u32, healthy: u32) -> ReportSummary {
    ReportSummary {
        clusters: clusters.to_string(),
        synced: synced.to_string(),
        not_synced: (clusters - synced).to_string(),
        healthy: healthy.to_string(),
        not_healthy: (clusters - healthy).to_string(),
        in_progress: "0".into(),
    }
}

async fn reports(hub: &kube::Client) -> Vec<MulticlusterApplicationSetReport> {
    let api: Api<MulticlusterApplicationSetReport> = Api::namespaced(hub.clone(), "argocd");
    let mut items = api.list(&ListParams::default()).await.unwrap().items;
    items.sort_by_key(|r| r.name_any());
    items
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_model_registers_the_clusters_and_reports_every_applicationset() {
    let dir = tempfile::tempdir().unwrap();
    let demo = Demo::start(args(&dir, DemoModel::Basic, 2, 2))
        .await
        .unwrap();
    let outcome = demo.drive().await.unwrap();
    assert!(outcome.converged, "{outcome:#?}");
    let hub = demo.hub_client();

    let gc = Api::<GitOpsCluster>::namespaced(hub.clone(), "argocd")
        .get("argo-acm-importer")
        .await
        .unwrap();
    let status = gc.status.unwrap();
    assert_eq!(status.phase.as_deref(), Some("successful"));
    assert_eq!(
        status.message.as_deref(),
        Some("Added managed clusters [cluster1 cluster2] to gitops namespace argocd")
    );
    let secrets = Api::<Secret>::namespaced(hub.clone(), "argocd")
        .list(&ListParams::default().labels("argocd.argoproj.io/secret-type=cluster"))
        .await
        .unwrap()
        .items;
    let mut registered: Vec<String> = secrets
        .iter()
        .filter_map(|s| argocd_pull_gitops::secrets::secret_value(s, "name"))
        .collect();
    registered.sort();
    assert_eq!(registered, ["cluster1", "cluster2"]);
    let shown = outcome.state.gitopscluster.as_ref().unwrap();
    assert_eq!(
        (shown.phase.as_str(), outcome.state.cluster_secrets.len()),
        ("successful", 2)
    );
    // The GitOpsCluster prepared the ApplicationSet generator's ConfigMap.
    let cm = Api::<ConfigMap>::namespaced(hub.clone(), "argocd")
        .get("acm-placement")
        .await
        .unwrap();
    assert_eq!(
        cm.data.unwrap().get("kind").map(String::as_str),
        Some("placementdecisions")
    );

    let reports = reports(&hub).await;
    let names: Vec<String> = reports.iter().map(|r| r.name_any()).collect();
    assert_eq!(names, ["guestbook-app", "helm-guestbook-app"]);
    for r in &reports {
        let st = r.statuses.as_ref().unwrap();
        assert_eq!(st.summary, Some(summary(2, 2, 2)), "{}", r.name_any());
        let clusters: Vec<&str> = st
            .cluster_conditions
            .iter()
            .map(|c| c.cluster.as_str())
            .collect();
        assert_eq!(clusters, ["cluster1", "cluster2"]);
        assert!(
            st.resources.iter().any(|res| res.kind == "ConfigMap"),
            "the report lists what the apps deployed: {:?}",
            st.resources
        );
    }
    assert_eq!(outcome.state.reports.len(), 2);
    demo.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_model_with_failure_shows_the_error_in_the_report() {
    let dir = tempfile::tempdir().unwrap();
    let mut a = args(&dir, DemoModel::Basic, 2, 1);
    a.with_failure = true;
    let demo = Demo::start(a).await.unwrap();
    let outcome = demo.drive().await.unwrap();
    assert!(outcome.converged, "{outcome:#?}");
    let hub = demo.hub_client();

    let failing = Api::<Application>::namespaced(hub.clone(), "argocd")
        .get("cluster2-guestbook-app")
        .await
        .unwrap();
    assert_eq!(failing.health_status(), Some("Degraded"));
    let ok = Api::<Application>::namespaced(hub.clone(), "argocd")
        .get("cluster1-guestbook-app")
        .await
        .unwrap();
    assert_eq!(
        (ok.sync_status(), ok.health_status()),
        (Some("Synced"), Some("Healthy"))
    );

    let reports = reports(&hub).await;
    assert_eq!(reports.len(), 1);
    let st = reports[0].statuses.as_ref().unwrap();
    assert_eq!(st.summary, Some(summary(2, 1, 1)));
    let c2 = st
        .cluster_conditions
        .iter()
        .find(|c| c.cluster == "cluster2")
        .unwrap();
    assert_eq!(c2.conditions.len(), 1, "{c2:?}");
    assert_eq!(c2.conditions[0].type_, "SyncError");
    assert!(
        c2.conditions[0].message.contains("simulated sync failure"),
        "{c2:?}"
    );
    let c1 = st
        .cluster_conditions
        .iter()
        .find(|c| c.cluster == "cluster1")
        .unwrap();
    assert!(c1.conditions.is_empty(), "{c1:?}");
    demo.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_model_delivers_through_the_agents() {
    let dir = tempfile::tempdir().unwrap();
    let demo = Demo::start(args(&dir, DemoModel::Agent, 2, 2))
        .await
        .unwrap();
    let outcome = demo.drive().await.unwrap();
    assert!(outcome.converged, "{outcome:#?}");
    let hub = demo.hub_client();
    for cluster in ["cluster1", "cluster2"] {
        for app in ["guestbook", "helm-guestbook"] {
            let on_hub = Api::<Application>::namespaced(hub.clone(), cluster)
                .get(app)
                .await
                .unwrap();
            assert_eq!(
                (on_hub.sync_status(), on_hub.health_status()),
                (Some("Synced"), Some("Healthy")),
                "{cluster}/{app}"
            );
            // The status came from the copy on the cluster, written there by its Argo CD.
            let on_cluster = demo
                .fleet()
                .cluster(cluster)
                .unwrap()
                .applications("argocd");
            let local = on_cluster.get(app).await.unwrap();
            assert_eq!(local.health_status(), Some("Healthy"));
            assert_eq!(
                local.annotations().get("argocd.argoproj.io/source-uid"),
                on_hub.metadata.uid.as_ref()
            );
        }
    }
    // the printed resource-proxy kubeconfig reaches cluster1 through the principal and its agent
    let path = demo
        .resource_proxy_kubeconfig()
        .expect("resource proxy kubeconfig");
    let kc = kube::config::Kubeconfig::read_from(path).unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    let through_proxy = kube::Client::try_from(cfg).unwrap();
    let via_proxy = Api::<Application>::namespaced(through_proxy, "argocd")
        .get("guestbook")
        .await
        .expect("get through the resource proxy");
    assert_eq!(via_proxy.health_status(), Some("Healthy"));
    // The Applications did not travel in ManifestWorks: the only works are the GitOpsCluster's
    // set-up (the CA bundle and the ArgoCD CR for each cluster).
    let works = Api::<ManifestWork>::all(hub.clone())
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(
        works
            .items
            .iter()
            .all(|w| w.name_any() == "argocd-agent-ca-mw"
                || w.name_any().starts_with("argocd-agent-cr-")),
        "{:?}",
        works.items.iter().map(|w| w.name_any()).collect::<Vec<_>>()
    );
    // the cluster secrets Argo CD uses are the GitOpsCluster's
    let secrets = Api::<Secret>::namespaced(hub.clone(), "argocd");
    for cluster in ["cluster1", "cluster2"] {
        assert!(
            secrets
                .get_opt(&format!("cluster-{cluster}"))
                .await
                .unwrap()
                .is_some()
        );
    }
    assert!(outcome.state.gitopscluster.is_none() && outcome.state.reports.is_empty());
    demo.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn autonomous_model_brings_cluster_applications_to_the_hub() {
    let dir = tempfile::tempdir().unwrap();
    let demo = Demo::start(args(&dir, DemoModel::Autonomous, 2, 1))
        .await
        .unwrap();
    let outcome = demo.drive().await.unwrap();
    assert!(outcome.converged, "{outcome:#?}");
    let hub = demo.hub_client();
    for cluster in ["cluster1", "cluster2"] {
        let on_hub = Api::<Application>::namespaced(hub.clone(), cluster)
            .get("guestbook")
            .await
            .unwrap();
        assert_eq!(
            (on_hub.sync_status(), on_hub.health_status()),
            (Some("Synced"), Some("Healthy")),
            "{cluster}"
        );
        assert_eq!(on_hub.spec.project, format!("{cluster}-default"));
    }
    demo.shutdown().await;
}
