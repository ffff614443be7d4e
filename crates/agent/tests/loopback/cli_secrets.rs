//! `principal` and `agent` run on the TLS material and JWT key that `ctl` writes as the peer's
//! Secrets, and name a missing Secret.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::Api;

use argocd_pull_agent_core::store::{KubeStore, Store};
use argocd_pull_ctl::{Clients, CtlArgs, execute};

const T: Duration = Duration::from_secs(60);
const APP_CRD: &str = include_str!("../../../api/crds/argocd/application-crd.yaml");
const PROJECT_CRD: &str = include_str!("../../../api/crds/argocd/appproject-crd.yaml");

fn hub() -> argocd_pull_hub::Hub {
    let h = argocd_pull_hub::Hub::new();
    h.install_crds_yaml(APP_CRD).unwrap();
    h.install_crds_yaml(PROJECT_CRD).unwrap();
    h
}

async fn clients(principal: &argocd_pull_hub::Hub, agent: &argocd_pull_hub::Hub) -> Clients {
    for (h, ns) in [(principal, "argocd"), (agent, "agent-ns")] {
        KubeStore::new(h.client())
            .ensure_namespace(ns)
            .await
            .unwrap();
    }
    Clients {
        principal: principal.client(),
        principal_namespace: "argocd".into(),
        agent: agent.client(),
        agent_namespace: "agent-ns".into(),
        same_context: false,
        principal_context: Some("principal".into()),
        agent_context: Some("agent".into()),
    }
}

/// Runs a ctl command with ECDSA keys (the peer's RSA 4096 default is slow in a debug build).
async fn ctl(c: &Clients, args: &[&str]) -> anyhow::Result<String> {
    let mut args: Vec<&str> = args.to_vec();
    if matches!(args.as_slice(), ["pki", "init", ..] | ["pki", "issue", ..]) {
        args.push("--key-algorithm=ecdsa-p256");
    }
    let a = CtlArgs::try_parse_flags(&args).map_err(|e| anyhow::anyhow!("{e}"))?;
    execute(&a.command, c).await
}

async fn secret(client: &kube::Client, ns: &str, name: &str) -> Secret {
    Api::<Secret>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .unwrap_or_else(|e| panic!("secret {ns}/{name}: {e}"))
}

/// Waits for namespace `ns` on `client`'s cluster (with `--namespace-create-enable` the principal
/// creates `<agent>` when an autonomous agent's first Application arrives); returns its labels.
async fn namespace_appears(client: &kube::Client, ns: &str) -> BTreeMap<String, String> {
    let api = Api::<Namespace>::all(client.clone());
    let mut w = kube::runtime::watcher(api, kube::runtime::watcher::Config::default()).boxed();
    tokio::time::timeout(T, async {
        while let Some(ev) = w.next().await {
            if let kube::runtime::watcher::Event::Apply(n)
            | kube::runtime::watcher::Event::InitApply(n) = ev.unwrap()
                && n.metadata.name.as_deref() == Some(ns)
            {
                return n.metadata.labels.unwrap_or_default();
            }
        }
        panic!("watch ended");
    })
    .await
    .unwrap_or_else(|_| panic!("namespace {ns} never appeared"))
}

#[tokio::test]
async fn principal_and_agent_run_on_tls_and_jwt_from_the_peers_secrets() {
    let (ph, ah) = (hub(), hub());
    let c = clients(&ph, &ah).await;
    ctl(&c, &["pki", "init"]).await.unwrap();
    ctl(&c, &["pki", "issue", "principal"]).await.unwrap();
    ctl(&c, &["pki", "issue", "agent", "edge"]).await.unwrap();
    // 2048 bits keeps the test quick; the peer's (and our default) size is 4096
    let out = ctl(&c, &["jwt", "create-key", "--key-size", "2048"])
        .await
        .unwrap();
    assert!(
        out.contains("stored in secret argocd/argocd-agent-jwt"),
        "{out}"
    );
    let j = secret(&c.principal, "argocd", "argocd-agent-jwt").await;
    let data = j.data.unwrap_or_default();
    assert_eq!(data.keys().collect::<Vec<_>>(), ["jwt.key"]);
    assert!(
        String::from_utf8(data["jwt.key"].0.clone())
            .unwrap()
            .starts_with("-----BEGIN PRIVATE KEY-----")
    );
    let e = ctl(&c, &["jwt", "create-key"])
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("--upsert"), "{e}");

    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let pargs = argocd_pull_agent::cli::PrincipalArgs::try_parse_flags([
        "--listen-host=127.0.0.1".to_string(),
        format!("--listen-port={port}"),
        "--disable-redis-proxy".into(),
        "--namespace=argocd".into(),
        "--metrics-port=0".into(),
        "--healthz-port=0".into(),
        "--namespace-create-enable".into(),
        "--namespace-create-pattern=^ed".into(),
        "--namespace-create-labels=team=edge,tier=test".into(),
    ])
    .unwrap();
    let aargs = argocd_pull_agent::cli::AgentArgs::try_parse_flags([
        "--server-address=localhost".to_string(),
        format!("--server-port={port}"),
        "--agent-mode=autonomous".into(),
        "--namespace=agent-ns".into(),
        "--metrics-port=0".into(),
        "--healthz-port=0".into(),
    ])
    .unwrap();
    let stop = argocd_pull_ops::CancellationToken::new();
    let p = tokio::spawn(argocd_pull_agent::cli::run_principal_in(
        pargs,
        c.principal.clone(),
        stop.clone(),
    ));
    let a = tokio::spawn(argocd_pull_agent::cli::run_agent_in(
        aargs,
        c.agent.clone(),
        stop.clone(),
    ));
    // once the agent (CN=edge from Secret argocd-agent-client-tls) authenticated against the CA
    // and JWT key from Secrets, its first Application makes the principal create namespace
    // "edge" (--namespace-create-*), labelled
    KubeStore::new(c.agent.clone())
        .create(
            argocd_pull_agent_core::store::Kind::Application,
            serde_json::json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
                "metadata": {"name": "web", "namespace": "agent-ns"},
                "spec": {"project": "default",
                         "source": {"repoURL": "https://example.com/r.git", "path": "web"},
                         "destination": {"server": "https://kubernetes.default.svc", "namespace": "web"}}}),
        )
        .await
        .unwrap();
    let labels = namespace_appears(&c.principal, "edge").await;
    assert_eq!(labels.get("team").map(String::as_str), Some("edge"));
    assert_eq!(labels.get("tier").map(String::as_str), Some("test"));
    stop.cancel();
    for t in [p, a] {
        tokio::time::timeout(T, t).await.unwrap().unwrap().unwrap();
    }
}

#[tokio::test]
async fn principal_reports_a_missing_secret_by_name() {
    let (ph, ah) = (hub(), hub());
    let c = clients(&ph, &ah).await;
    let pargs = argocd_pull_agent::cli::PrincipalArgs::try_parse_flags([
        "--listen-host=127.0.0.1",
        "--listen-port=0",
        "--disable-redis-proxy",
        "--namespace=argocd",
        "--metrics-port=0",
        "--healthz-port=0",
    ])
    .unwrap();
    let e = argocd_pull_agent::cli::run_principal_in(
        pargs,
        c.principal.clone(),
        argocd_pull_ops::CancellationToken::new(),
    )
    .await
    .unwrap_err();
    let msg = format!("{e:#}");
    assert!(
        msg.contains("argocd/argocd-agent-principal-tls not found"),
        "{msg}"
    );
}
