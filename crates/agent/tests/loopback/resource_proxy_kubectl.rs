//! The resource proxy with real `kubectl` (skipped with `SKIP:` when it is not on PATH): on the
//! embedded API server, on the real managed cluster (env-gated), and through a local deployment.

use argocd_pull_agent_core::Mode;
use argocd_pull_agent_core::resource::kubeconfig_yaml;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::{Value, json};

use crate::harness::*;
use crate::resource_proxy::{agent_on, cm, raw, rig};

/// Runs `kubectl --kubeconfig <kc> <args>`: (success, stdout, stderr).
async fn kubectl(
    kubectl: &std::path::Path,
    kc: &std::path::Path,
    args: &[&str],
) -> (bool, String, String) {
    let out = tokio::time::timeout(
        T,
        tokio::process::Command::new(kubectl)
            .arg("--kubeconfig")
            .arg(kc)
            .args(args)
            .env("HOME", kc.parent().unwrap())
            .output(),
    )
    .await
    .expect("kubectl finishes")
    .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// api-resources, get with a label selector, get -o json, describe, and a not-found error.
async fn kubectl_suite(kc: &std::path::Path, ns: &str, name: &str, describe_events: bool) {
    let k = which_kubectl().expect("kubectl");
    let (ok, out, err) = kubectl(&k, kc, &["api-resources"]).await;
    assert!(ok, "{err}");
    assert!(
        out.contains("configmaps") && out.contains("deployments"),
        "{out}"
    );
    let (ok, out, err) = kubectl(&k, kc, &["get", "configmaps", "-n", ns, "-l", "app=web"]).await;
    assert!(ok, "{err}");
    assert!(out.contains(name), "{out}");
    let (ok, out, err) = kubectl(&k, kc, &["get", "configmap", name, "-n", ns, "-o", "json"]).await;
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["data"]["k"], "v");
    let mut args = vec!["describe", "configmap", name, "-n", ns];
    if !describe_events {
        // the embedded API server has no field selectors on events: describe without them there
        args.push("--show-events=false");
    }
    let (ok, out, err) = kubectl(&k, kc, &args).await;
    assert!(ok, "{err}");
    assert!(out.contains(name) && out.contains("Data"), "{out}");
    let (ok, _, err) = kubectl(&k, kc, &["get", "configmap", "nope", "-n", ns]).await;
    assert!(!ok);
    assert!(
        err.contains("NotFound") || err.contains("not found"),
        "{err}"
    );
}

#[tokio::test]
async fn kubectl_through_the_proxy() {
    if which_kubectl().is_none() {
        skip("SKIP: kubectl not on PATH; the kubectl-through-the-proxy test did not run");
        return;
    }
    let r = rig(&["c1"], |_| {}).await;
    Api::<ConfigMap>::namespaced(r.agents[0].2.client(), "default")
        .create(
            &PostParams::default(),
            &cm("web-config", json!({"app": "web"})),
        )
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    std::fs::write(
        &kc,
        kubeconfig_yaml(&r.url, &r.pki.agent("c1").unwrap(), "c1"),
    )
    .unwrap();
    kubectl_suite(&kc, "default", "web-config", false).await;
}

/// Env-gated: the agent in front of the real managed cluster (`ARGOCD_PULL_E2E_MANAGED_KUBECONFIG`),
/// the principal in this process, real `kubectl` through the proxy. Works in a fresh namespace
/// `e2e-rp-<random>` and deletes it afterwards.
#[tokio::test]
async fn real_cluster_kubectl_through_the_resource_proxy() {
    let Ok(managed_kc) = std::env::var("ARGOCD_PULL_E2E_MANAGED_KUBECONFIG") else {
        skip(
            "SKIP: real_cluster_kubectl_through_the_resource_proxy needs ARGOCD_PULL_E2E_MANAGED_KUBECONFIG",
        );
        return;
    };
    if which_kubectl().is_none() {
        skip("SKIP: real_cluster_kubectl_through_the_resource_proxy needs kubectl on PATH");
        return;
    }
    init();
    let kc = kube::config::Kubeconfig::read_from(&managed_kc).unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
        .await
        .unwrap();
    let managed = kube::Client::try_from(cfg).unwrap();
    let ns = format!("e2e-rp-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let nss = Api::<k8s_openapi::api::core::v1::Namespace>::all(managed.clone());
    nss.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap(),
    )
    .await
    .unwrap();
    let mut obj = cm("web-config", json!({"app": "web"}));
    obj.metadata.namespace = Some(ns.clone());
    Api::<ConfigMap>::namespaced(managed.clone(), &ns)
        .create(&PostParams::default(), &obj)
        .await
        .unwrap();
    let r = rig(&[], |_| {}).await;
    let a = agent_on(&r.pki, &r.principal, "cluster1", managed.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    std::fs::write(
        &kc,
        kubeconfig_yaml(&r.url, &r.pki.agent("cluster1").unwrap(), "cluster1"),
    )
    .unwrap();
    kubectl_suite(&kc, &ns, "web-config", true).await;
    // and the typed client: a write and its conflict come back as the real API server says
    let api = Api::<ConfigMap>::namespaced(r.client("cluster1").await, &ns);
    match api.create(&PostParams::default(), &obj).await {
        Err(kube::Error::Api(s)) => assert_eq!((s.code, s.reason.as_str()), (409, "AlreadyExists")),
        other => panic!("want 409, got {other:?}"),
    }
    a.shutdown().await;
    let _ = nss.delete(&ns, &DeleteParams::default()).await;
}

fn which_kubectl() -> Option<std::path::PathBuf> {
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join("kubectl"))
            .find(|f| f.is_file())
    })
}

#[tokio::test]
async fn a_local_deployment_serves_each_agents_cluster_through_the_proxy() {
    init();
    let with_crds = || {
        let h = argocd_pull_hub::Hub::new();
        h.install_crds_yaml(include_str!(
            "../../../api/crds/argocd/application-crd.yaml"
        ))
        .unwrap();
        h.install_crds_yaml(include_str!("../../../api/crds/argocd/appproject-crd.yaml"))
            .unwrap();
        h
    };
    let (hub, spoke) = (with_crds(), with_crds());
    Api::<ConfigMap>::namespaced(spoke.client(), "default")
        .create(&PostParams::default(), &cm("on-spoke", json!({})))
        .await
        .unwrap();
    let d = argocd_pull_agent::start_local(
        hub.client(),
        vec![("spoke-1".into(), spoke.client())],
        Mode::Managed,
    )
    .await
    .unwrap();
    d.wait_connected(T).await.unwrap();
    let kc = d
        .resource_proxy_kubeconfig("spoke-1")
        .unwrap()
        .expect("proxy on");
    let cfg = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::from_yaml(&kc).unwrap(),
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .unwrap();
    let c = kube::Client::try_from(cfg).unwrap();
    let (st, body) = raw(
        &c,
        "GET",
        "/api/v1/namespaces/default/configmaps/on-spoke",
        vec![],
    )
    .await;
    assert_eq!(st, 200, "{body}");
    let api = Api::<ConfigMap>::namespaced(c, "default");
    assert!(api.get_opt("on-spoke").await.unwrap().is_some());
    d.shutdown().await;
}

/// Prints a `SKIP:` line straight to stderr (not captured by the test harness, so CI shows it).
fn skip(msg: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{msg}");
}
