//! Real clusters (env-gated: `ARGOCD_PULL_E2E_HUB_KUBECONFIG`, `ARGOCD_PULL_E2E_MANAGED_KUBECONFIG`,
//! the Argo CD CRDs installed on both): the principal process on the hub, a managed agent process
//! on the managed cluster. What a real API server does here: the agent's `GET /version`, the
//! principal's merge patch of the cluster secret's annotations, `ctl agent list` over the real
//! hub. Everything lives in namespaces named after a random suffix, deleted at the end. Without
//! the variables the test prints `SKIP: …` and passes.

use std::process::Command;
use std::time::Instant;

use argocd_pull_agent_core::agent_status as st;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::Api;
use kube::api::{DeleteParams, PostParams};

use crate::*;

async fn client(path: &str) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(path).unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    kube::Client::try_from(cfg).unwrap()
}

async fn namespace(c: &kube::Client, name: &str) {
    let ns: Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap();
    Api::<Namespace>::all(c.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_clusters_show_the_agents_state_and_kubernetes_version() {
    let (Ok(hub_kc), Ok(managed_kc)) = (
        std::env::var("ARGOCD_PULL_E2E_HUB_KUBECONFIG"),
        std::env::var("ARGOCD_PULL_E2E_MANAGED_KUBECONFIG"),
    ) else {
        eprintln!(
            "SKIP: fleet::real needs ARGOCD_PULL_E2E_HUB_KUBECONFIG and ARGOCD_PULL_E2E_MANAGED_KUBECONFIG"
        );
        return;
    };
    let _ = rustls::crypto::ring::default_provider().install_default();
    let suffix = format!("{:08x}", rand_u32());
    let (pns, agent) = (format!("fleet-e2e-{suffix}"), format!("e2e-{suffix}"));
    let local = format!("{agent}-local");
    let (hub, managed) = (client(&hub_kc).await, client(&managed_kc).await);
    namespace(&hub, &pns).await;
    namespace(&hub, &agent).await;
    namespace(&managed, &local).await;
    let dir = tempfile::tempdir().unwrap();
    let pki = dir.path().join("pki");
    let out = Command::new(BIN)
        .args(["pki", "--dir", pki.to_str().unwrap(), "--agent", &agent])
        .output()
        .unwrap();
    assert!(out.status.success());
    let f = |n: &str| pki.join(n).display().to_string();
    let r = |n: &str| std::fs::read(pki.join(n)).unwrap();
    let s = argocd_pull_agent_core::cluster_secret::cluster_secret(
        &agent,
        &pns,
        &format!("https://argocd-agent-resource-proxy:9090?agentName={agent}"),
        Default::default(),
        &r(&format!("{agent}.crt")),
        &r(&format!("{agent}.key")),
        &r("ca.crt"),
    )
    .unwrap();
    let secrets: Api<Secret> = Api::namespaced(hub.clone(), &pns);
    secrets.create(&PostParams::default(), &s).await.unwrap();
    let want_version =
        st::kubernetes_version(&managed.apiserver_version().await.unwrap().git_version);

    let grpc = free_port();
    let hub_path = std::path::PathBuf::from(&hub_kc);
    let principal = Proc::spawn(
        "principal",
        &[
            "principal".into(),
            "--listen-host=127.0.0.1".into(),
            format!("--listen-port={grpc}"),
            format!("--tls-cert={}", f("principal.crt")),
            format!("--tls-key={}", f("principal.key")),
            format!("--root-ca-path={}", f("ca.crt")),
            format!("--jwt-key={}", f("jwt.key")),
            format!("--namespace={pns}"),
            format!("--allowed-namespaces={agent}"),
            "--metrics-port=0".into(),
            format!("--healthz-port={}", free_port()),
            "--enable-resource-proxy=false".into(),
            "--disable-redis-proxy".into(),
            "--redis-server-address=127.0.0.1:1".into(),
            format!("--heartbeat-interval={}s", HEARTBEAT.as_secs()),
        ],
        &hub_path,
    );
    principal.wait_for_line(&["principal listening"]);
    let agent_args = vec![
        "agent".to_string(),
        "--server-address=127.0.0.1".into(),
        format!("--server-port={grpc}"),
        "--server-name=localhost".into(),
        "--agent-mode=managed".into(),
        format!("--namespace={local}"),
        format!("--root-ca-path={}", f("ca.crt")),
        format!("--tls-client-cert={}", f(&format!("{agent}.crt"))),
        format!("--tls-client-key={}", f(&format!("{agent}.key"))),
        "--metrics-port=0".into(),
        format!("--healthz-port={}", free_port()),
        "--redis-addr=127.0.0.1:1".into(),
    ];
    let a = Proc::spawn(&agent, &agent_args, std::path::Path::new(&managed_kc));

    let shown = wait_shown(&secrets, &agent, "connected with its version", |s| {
        s.connection == st::Connection::Successful && s.kubernetes_version.known().is_some()
    })
    .await;
    assert_eq!(shown.kubernetes_version, want_version);
    assert!(
        shown.kubernetes_version.known().unwrap().starts_with("v1."),
        "{shown:?}"
    );
    let ctl = tokio::task::block_in_place(|| {
        Command::new(BIN)
            .args([
                "ctl",
                "agent",
                "list",
                "-o",
                "json",
                "--principal-namespace",
                &pns,
            ])
            .env("KUBECONFIG", &hub_kc)
            .env("HOME", dir.path())
            .output()
            .unwrap()
    });
    assert!(
        ctl.status.success(),
        "{}",
        String::from_utf8_lossy(&ctl.stderr)
    );
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&ctl.stdout).unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["connected"], true);
    assert_eq!(rows[0]["kubernetesVersion"], want_version.known().unwrap());

    let gone = Instant::now();
    a.stop("KILL");
    let f = wait_shown(&secrets, &agent, "Failed", |s| {
        s.connection == st::Connection::Failed
    })
    .await;
    assert!(gone.elapsed() <= HEARTBEAT * 2, "{:?}", gone.elapsed());
    assert!(
        f.message.contains("disconnected with principal: "),
        "{}",
        f.message
    );
    drop(principal);
    for ns in [&pns, &agent] {
        let _ = Api::<Namespace>::all(hub.clone())
            .delete(ns, &DeleteParams::default())
            .await;
    }
    let _ = Api::<Namespace>::all(managed)
        .delete(&local, &DeleteParams::default())
        .await;
}

fn rand_u32() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos(),
    );
    h.finish() as u32
}
