//! Real-cluster end-to-end check, run only when `ARGOCD_PULL_E2E_HUB_KUBECONFIG` names a
//! kubeconfig of an OCM hub with the GitOpsCluster and report CRDs installed
//! (`argocd-pull crds | kubectl apply -f -`). It works in a namespace of its own
//! (`gitops-e2e`, the Argo CD namespace of its GitOpsCluster), with a ManagedClusterSetBinding of
//! the `global` set there and, when no Argo CD server Service is there, a stand-in one; the
//! namespace is deleted at the end (also when the test fails) and at the start (left by an
//! interrupted run). Only the v1beta1 GitOpsCluster controller runs (the addon controller is
//! `addon_e2e`'s).

use std::io::Write as _;
use std::time::Duration;

use argocd_pull_gitops::GitOpsConfig;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;

#[tokio::test]
async fn e2e_gitopscluster_on_a_real_hub() {
    let Ok(path) = std::env::var("ARGOCD_PULL_E2E_HUB_KUBECONFIG") else {
        // Written to stderr directly: libtest does not capture it, so the skip is visible.
        let _ = writeln!(
            std::io::stderr(),
            "SKIP: ARGOCD_PULL_E2E_HUB_KUBECONFIG is not set"
        );
        return;
    };
    let _ = rustls::crypto::ring::default_provider().install_default();
    let kubeconfig = kube::config::Kubeconfig::read_from(&path).expect("kubeconfig readable");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("kubeconfig valid");
    let client = kube::Client::try_from(config).expect("client");
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    remove_namespace(&namespaces).await; // left by an interrupted run
    let running = argocd_pull_gitops::start(
        client.clone(),
        GitOpsConfig {
            addon: false,
            ..GitOpsConfig::default()
        },
    )
    .await
    .expect("start");
    let result = tokio::spawn(gitopscluster_over_the_global_set(client.clone())).await;
    running.shutdown().await;
    remove_namespace(&namespaces).await;
    if let Err(e) = result {
        std::panic::resume_unwind(e.into_panic());
    }
}

/// Deletes the test's namespace (with everything in it) and waits until it is gone.
async fn remove_namespace(namespaces: &Api<k8s_openapi::api::core::v1::Namespace>) {
    let _ = namespaces.delete(NS, &Default::default()).await;
    let gone = async {
        while namespaces.get_opt(NS).await.ok().flatten().is_some() {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    };
    if tokio::time::timeout(Duration::from_secs(120), gone)
        .await
        .is_err()
    {
        eprintln!("e2e: namespace {NS} still terminating after 120 s");
    }
}

const NS: &str = "gitops-e2e";

async fn gitopscluster_over_the_global_set(client: kube::Client) {
    // A GitOpsCluster over every cluster of the global set: Placement `e2e-all` in `gitops-e2e`.
    let ns = NS;
    let dynamic = |kind: &str, plural: &str, group: &str, version: &str| {
        let gvk = kube::api::GroupVersionKind::gvk(group, version, kind);
        let ar = kube::api::ApiResource::from_gvk_with_plural(&gvk, plural);
        Api::<DynamicObject>::namespaced_with(client.clone(), ns, &ar)
    };
    let ssa = PatchParams::apply("argocd-pull-e2e");
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    namespaces
        .patch(
            ns,
            &ssa,
            &Patch::Apply(
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
            ),
        )
        .await
        .expect("the test's namespace");
    dynamic(
        "ManagedClusterSetBinding",
        "managedclustersetbindings",
        "cluster.open-cluster-management.io",
        "v1beta2",
    )
    .patch(
        "global",
        &ssa,
        &Patch::Apply(
            json!({"apiVersion": "cluster.open-cluster-management.io/v1beta2",
            "kind": "ManagedClusterSetBinding", "metadata": {"name": "global", "namespace": ns},
            "spec": {"clusterSet": "global"}}),
        ),
    )
    .await
    .expect("ManagedClusterSetBinding global");
    let services: Api<k8s_openapi::api::core::v1::Service> = Api::namespaced(client.clone(), ns);
    let server_selector = "app.kubernetes.io/component=server,app.kubernetes.io/part-of=argocd";
    let stand_in = services
        .list(&kube::api::ListParams::default().labels(server_selector))
        .await
        .expect("list services")
        .items
        .is_empty();
    if stand_in {
        // its own name, so that it can never be an existing Service this test then deletes
        services
            .patch(
                "argocd-pull-e2e-argocd-server",
                &ssa,
                &Patch::Apply(json!({"apiVersion": "v1", "kind": "Service",
                    "metadata": {"name": "argocd-pull-e2e-argocd-server", "namespace": ns, "labels": {
                        "app.kubernetes.io/component": "server", "app.kubernetes.io/part-of": "argocd",
                        "argocd-pull.io/e2e-stand-in": "true"}},
                    "spec": {"ports": [{"name": "https", "port": 443, "targetPort": 8080}]}})),
            )
            .await
            .expect("stand-in Argo CD server Service");
    }
    let placement: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "cluster.open-cluster-management.io/v1beta1", "kind": "Placement",
        "metadata": {"name": "e2e-all", "namespace": ns},
        "spec": {"clusterSets": ["global"], "tolerations": [{"key": "cluster.open-cluster-management.io/unreachable", "operator": "Exists"}]}
    }))
    .unwrap();
    let _ = dynamic(
        "Placement",
        "placements",
        "cluster.open-cluster-management.io",
        "v1beta1",
    )
    .create(&PostParams::default(), &placement)
    .await;
    let gc: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "apps.open-cluster-management.io/v1beta1", "kind": "GitOpsCluster",
        "metadata": {"name": "e2e", "namespace": ns},
        "spec": {"argoServer": {"argoNamespace": ns}, "placementRef": {"kind": "Placement", "name": "e2e-all"}}
    }))
    .unwrap();
    let gcs = dynamic(
        "GitOpsCluster",
        "gitopsclusters",
        "apps.open-cluster-management.io",
        "v1beta1",
    );
    let _ = gcs.create(&PostParams::default(), &gc).await;

    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let found = tokio::time::timeout(Duration::from_secs(120), async {
        loop {
            let list = secrets
                .list(
                    &kube::api::ListParams::default()
                        .labels("apps.open-cluster-management.io/acm-cluster=true"),
                )
                .await
                .expect("list secrets");
            // secrets left by an earlier run do not count: the GitOpsCluster must say it is done
            let phase =
                gcs.get("e2e").await.expect("GitOpsCluster").data["status"]["phase"].clone();
            if !list.items.is_empty() && phase == "successful" {
                return list.items.len();
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    })
    .await
    .expect("cluster secrets and GitOpsCluster phase `successful` within 120 s");
    println!("e2e: {found} cluster secret(s)");
    let st = gcs.get("e2e").await.expect("GitOpsCluster");
    println!("e2e: status {}", st.data["status"]);
    // Deleted with the namespace: the GitOpsCluster, its Placement, the secrets.
    let _ = gcs.delete("e2e", &Default::default()).await;
}
