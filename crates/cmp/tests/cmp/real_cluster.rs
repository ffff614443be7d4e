//! End-to-end against a real OCM hub, gated by environment: ARGOCD_PULL_E2E_HUB_KUBECONFIG (a
//! kubeconfig for the hub) and ARGOCD_PULL_E2E_CLUSTER (a managed cluster whose work agent is
//! running). Without them the test prints "SKIP: ..." and passes.
//!
//! generate → server-side apply the ManifestWork on the hub → wait (watch, with a timeout) until
//! the work is Applied and Available and the Deployment's status feedback reports an available
//! replica → delete the work.

use std::io::Write as _;
use std::time::Duration;

use argocd_pull_cmp::{GenerateOptions, Input, Target};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::wait::await_condition;

use crate::support::{condition_true, feedback};

#[tokio::test]
async fn e2e_generate_apply_and_see_feedback_on_a_real_hub() {
    let (Ok(kubeconfig), Ok(cluster)) = (
        std::env::var("ARGOCD_PULL_E2E_HUB_KUBECONFIG"),
        std::env::var("ARGOCD_PULL_E2E_CLUSTER"),
    ) else {
        // Written to stderr directly: libtest does not capture it, so the skip is visible.
        let _ = writeln!(
            std::io::stderr(),
            "SKIP: set ARGOCD_PULL_E2E_HUB_KUBECONFIG and ARGOCD_PULL_E2E_CLUSTER to run the real-cluster CMP e2e test"
        );
        return;
    };
    let _ = rustls::crypto::ring::default_provider().install_default();
    let kc = kube::config::Kubeconfig::read_from(&kubeconfig).expect("read hub kubeconfig");
    let config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .expect("hub kubeconfig");
    let client = kube::Client::try_from(config).expect("hub client");

    let suffix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        % 100_000;
    let app = format!("e2e-cmp-{suffix}");
    let ns = format!("argocd-pull-e2e-{suffix}");
    let stream = format!(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n---\n\
         apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: pause\n  namespace: {ns}\n\
         spec:\n  replicas: 1\n  selector: {{matchLabels: {{app: pause}}}}\n  template:\n    metadata: {{labels: {{app: pause}}}}\n\
         \x20   spec:\n      containers: [{{name: pause, image: \"registry.k8s.io/pause:3.9\"}}]\n"
    );
    let options = GenerateOptions {
        work_name: app.clone(),
        app_name: app.clone(),
        app_namespace: "argocd".into(),
        target: Target::Clusters(vec![cluster.clone()]),
        max_work_bytes: argocd_pull_cmp::DEFAULT_MAX_WORK_BYTES,
        default_namespace: None,
        allow_empty: false,
        display_prefix: None,
    };
    let out = argocd_pull_cmp::generate(
        &Input::Stream {
            name: "<e2e>".into(),
            text: stream,
        },
        &options,
    )
    .expect("generate");
    let work: DynamicObject = serde_json::from_str(&out).expect("one work");

    let gvk = GroupVersionKind::gvk("work.open-cluster-management.io", "v1", "ManifestWork");
    let ar = ApiResource::from_gvk_with_plural(&gvk, "manifestworks");
    let api: Api<DynamicObject> = Api::namespaced_with(client, &cluster, &ar);
    api.patch(
        &app,
        &PatchParams::apply("argocd-pull-e2e").force(),
        &Patch::Apply(&work),
    )
    .await
    .expect("apply the ManifestWork to the hub");

    let ready = await_condition(api.clone(), &app, |w: Option<&DynamicObject>| {
        w.is_some_and(|w| {
            condition_true(w, "Applied")
                && condition_true(w, "Available")
                // `Replicas` comes from the managed cluster's deployment controller; a real
                // environment with no kubelet (../shared/realenv) never runs the pod, so
                // `AvailableReplicas` would never come back
                && feedback(w, "Deployment", "pause", "Replicas") == Some(1)
        })
    });
    let result = tokio::time::timeout(Duration::from_secs(300), ready).await;
    let last = api.get(&app).await.ok();
    let _ = api.delete(&app, &DeleteParams::foreground()).await;
    let work = result
        .unwrap_or_else(|_| {
            panic!(
                "work not Applied/Available with Replicas feedback in 300s; last seen: {last:#?}"
            )
        })
        .expect("watch")
        .expect("work exists");
    assert_eq!(
        feedback(&work, "Deployment", "pause", "DesiredReplicas"),
        Some(1)
    );
}
