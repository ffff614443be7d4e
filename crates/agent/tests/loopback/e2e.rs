//! Real clusters (env-gated): `ARGOCD_PULL_E2E_HUB_KUBECONFIG` and
//! `ARGOCD_PULL_E2E_MANAGED_KUBECONFIG`, both with the Argo CD CRDs installed. Runs a principal
//! against the hub and one managed agent against the managed cluster in this process, over loopback
//! mTLS with a throwaway PKI. The agent is named `e2e-<random>` (its namespace on the hub); on the
//! managed cluster it works in namespace `argocd` (created when missing). The namespaces named after
//! the agent are deleted at the end. Without the variables the test prints `SKIP: …` on stderr
//! (not captured) and passes.
use std::io::Write;

use argocd_pull_agent::start_local;
use argocd_pull_agent_core::Mode;
use argocd_pull_agent_core::store::{Kind, KubeStore, Store, StoreEvent};
use futures::StreamExt;
use serde_json::{Value, json};

use crate::harness::*;

const E2E_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

async fn client(path: &str) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(path)
        .unwrap_or_else(|e| panic!("reading kubeconfig {path}: {e}"));
    let cfg = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
        .await
        .unwrap_or_else(|e| panic!("kubeconfig {path}: {e}"));
    kube::Client::try_from(cfg).expect("kube client")
}

async fn wait_kube(
    s: &KubeStore,
    ns: &str,
    name: &str,
    what: &str,
    pred: impl Fn(Option<&Value>) -> bool,
) -> Option<Value> {
    wait_kind(s, Kind::Application, ns, name, what, pred).await
}

async fn wait_kind(
    s: &KubeStore,
    kind: Kind,
    ns: &str,
    name: &str,
    what: &str,
    pred: impl Fn(Option<&Value>) -> bool,
) -> Option<Value> {
    let mut w = s.watch(kind, Some(ns));
    let r = tokio::time::timeout(E2E_TIMEOUT, async {
        loop {
            let cur = s.get(kind, ns, name).await.unwrap();
            if pred(cur.as_ref()) {
                return cur;
            }
            match w.next().await {
                Some(Ok(
                    StoreEvent::Restarted(_) | StoreEvent::Applied(_) | StoreEvent::Deleted(_),
                )) => {}
                Some(Err(e)) => panic!("watch failed: {e}"),
                None => panic!("watch ended"),
            }
        }
    })
    .await;
    r.unwrap_or_else(|_| panic!("timed out waiting for {kind:?} {ns}/{name}: {what}"))
}

/// The real-cluster kubeconfigs, or `None` after printing why the test is skipped.
fn real_env(test: &str) -> Option<(String, String)> {
    match (
        std::env::var("ARGOCD_PULL_E2E_HUB_KUBECONFIG"),
        std::env::var("ARGOCD_PULL_E2E_MANAGED_KUBECONFIG"),
    ) {
        (Ok(h), Ok(m)) => Some((h, m)),
        _ => {
            let _ = writeln!(
                std::io::stderr(),
                "SKIP: {test} needs ARGOCD_PULL_E2E_HUB_KUBECONFIG and \
                 ARGOCD_PULL_E2E_MANAGED_KUBECONFIG (Argo CD CRDs installed on both)"
            );
            None
        }
    }
}

#[tokio::test]
async fn real_clusters_autonomous_round_trip() {
    let Some((hub_kc, managed_kc)) = real_env("real_clusters_autonomous_round_trip") else {
        return;
    };
    autonomous_round_trip(&hub_kc, &managed_kc).await;
}

#[tokio::test]
async fn autonomous_round_trip_through_kubeconfigs_of_served_embedded_hubs() {
    let (_dir, _servers, paths) = served_embedded_hubs().await;
    autonomous_round_trip(&paths[0], &paths[1]).await;
}

/// An autonomous agent in front of the managed cluster (its own namespace there, so it never
/// sees another test's Applications): its Application and AppProject appear on the hub (in
/// namespace `<agent>`, project `<agent>-<name>`), its status follows, a hub edit is reverted,
/// and its deletion removes the hub copy.
async fn autonomous_round_trip(hub_kc: &str, managed_kc: &str) {
    use argocd_pull_agent::local::LocalPki;
    use argocd_pull_agent_core::auth::throwaway_jwt_key;
    use argocd_pull_agent_core::metrics::Metrics;
    use argocd_pull_principal::{Principal, PrincipalConfig};
    use argocd_pull_spoke::{Agent, AgentConfig};
    use std::sync::Arc;
    init();
    let (hub_c, managed_c) = (client(hub_kc).await, client(managed_kc).await);
    let (hub, managed) = (
        KubeStore::new(hub_c.clone()),
        KubeStore::new(managed_c.clone()),
    );
    let agent = format!("e2e-au-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    hub.ensure_namespace("argocd").await.unwrap();
    managed.ensure_namespace(&agent).await.unwrap();
    let pki = LocalPki::new().unwrap();
    let mut cfg = PrincipalConfig::new(
        "127.0.0.1:0".parse().unwrap(),
        pki.principal.clone(),
        throwaway_jwt_key(),
    );
    // --namespace-create-enable --namespace-create-pattern ^e2e-au- --namespace-create-labels
    cfg.namespace_create = Some(argocd_pull_principal::NamespaceCreate {
        pattern: Some(regex::Regex::new("^e2e-au-").unwrap()),
        labels: [("argocd-pull.test/e2e".to_string(), "autonomous".to_string())].into(),
    });
    let p = Principal::start(cfg, Arc::new(hub.clone()), Metrics::new("argocd_principal"))
        .await
        .unwrap();
    let mut c = AgentConfig::new(p.local_addr(), pki.agent(&agent).unwrap(), Mode::Autonomous);
    c.namespace = agent.clone();
    let a = Agent::start(c, Arc::new(managed.clone()), Metrics::new("argocd_agent"))
        .await
        .unwrap();
    tokio::time::timeout(E2E_TIMEOUT, a.wait_connected(0))
        .await
        .expect("agent connects");

    let name = "e2e-podinfo";
    let mut app_obj = app(&agent, name, "podinfo");
    app_obj.as_object_mut().unwrap().remove("unknownTopLevel");
    managed.create(Kind::Application, app_obj).await.unwrap();
    managed
        .create(
            Kind::AppProject,
            json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject",
                "metadata": {"name": "team", "namespace": agent},
                "spec": {"sourceRepos": ["*"],
                         "destinations": [{"server": "https://kubernetes.default.svc", "namespace": "*"}]}}),
        )
        .await
        .unwrap();
    let h = wait_kube(&hub, &agent, name, "copied to the hub", |o| o.is_some())
        .await
        .unwrap();
    let ns: k8s_openapi::api::core::v1::Namespace = kube::Api::all(hub_c.clone())
        .get(&agent)
        .await
        .expect("the hub namespace was created for the autonomous agent");
    assert_eq!(
        ns.metadata
            .labels
            .unwrap_or_default()
            .get("argocd-pull.test/e2e")
            .map(String::as_str),
        Some("autonomous")
    );
    assert_eq!(h["spec"]["source"]["path"], "podinfo");
    let hp = wait_kind(
        &hub,
        Kind::AppProject,
        "argocd",
        &format!("{agent}-team"),
        "project copied to the hub",
        |o| o.is_some(),
    )
    .await
    .unwrap();
    assert_eq!(hp["spec"]["sourceNamespaces"], json!([agent]));

    // status from the agent's cluster reaches the hub copy
    managed
        .merge_patch(
            Kind::Application,
            &agent,
            name,
            json!({"status": {"sync": {"status": "Synced"}, "health": {"status": "Healthy"}}}),
        )
        .await
        .unwrap();
    wait_kube(&hub, &agent, name, "status on the hub", |o| {
        o.is_some_and(|o| o["status"]["health"]["status"] == "Healthy")
    })
    .await;

    // the agent is the source of truth: a hub edit of the spec is reverted
    hub.merge_patch(
        Kind::Application,
        &agent,
        name,
        json!({"spec": {"source": {"path": "edited-on-hub"}}}),
    )
    .await
    .unwrap();
    wait_kube(&hub, &agent, name, "hub edit reverted", |o| {
        o.is_some_and(|o| o["spec"]["source"]["path"] == "podinfo")
    })
    .await;

    // deleted on the agent's cluster: gone on the hub
    managed
        .delete(Kind::Application, &agent, name)
        .await
        .unwrap();
    managed
        .delete(Kind::AppProject, &agent, "team")
        .await
        .unwrap();
    wait_kube(&hub, &agent, name, "hub copy deleted", |o| o.is_none()).await;
    wait_kind(
        &hub,
        Kind::AppProject,
        "argocd",
        &format!("{agent}-team"),
        "hub project deleted",
        |o| o.is_none(),
    )
    .await;
    a.shutdown().await;
    p.shutdown().await;
    // the agent's namespace on both sides (the principal created the hub's)
    delete_namespace(&hub_c, &agent).await;
    delete_namespace(&managed_c, &agent).await;
}

#[tokio::test]
async fn real_clusters_managed_round_trip() {
    let Some((hub_kc, managed_kc)) = real_env("real_clusters_managed_round_trip") else {
        return;
    };
    round_trip(&hub_kc, &managed_kc).await;
}

/// The same round trip against two embedded hubs served over HTTP, reached through kubeconfig
/// files (checks the e2e path itself without real clusters).
#[tokio::test]
async fn round_trip_through_kubeconfigs_of_served_embedded_hubs() {
    let (_dir, _servers, paths) = served_embedded_hubs().await;
    round_trip(&paths[0], &paths[1]).await;
}

type Served = (
    tempfile::TempDir,
    Vec<(argocd_pull_hub::Hub, argocd_pull_hub::HubServer)>,
    Vec<String>,
);

/// Two embedded hubs ("hub", "managed") with the Argo CD CRDs, served over HTTP, and their
/// kubeconfig paths.
async fn served_embedded_hubs() -> Served {
    let dir = tempfile::tempdir().unwrap();
    let mut servers = Vec::new();
    let mut paths = Vec::new();
    for n in ["hub", "managed"] {
        let h = argocd_pull_hub::Hub::new();
        h.install_crds_yaml(include_str!(
            "../../../api/crds/argocd/application-crd.yaml"
        ))
        .unwrap();
        h.install_crds_yaml(include_str!("../../../api/crds/argocd/appproject-crd.yaml"))
            .unwrap();
        let srv = h.serve("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let p = dir.path().join(format!("{n}.kubeconfig"));
        srv.write_kubeconfig(&p).unwrap();
        paths.push(p.to_string_lossy().to_string());
        servers.push((h, srv));
    }
    (dir, servers, paths)
}

async fn round_trip(hub_kc: &str, managed_kc: &str) {
    init();
    let (hub_c, managed_c) = (client(hub_kc).await, client(managed_kc).await);
    let (hub, managed) = (
        KubeStore::new(hub_c.clone()),
        KubeStore::new(managed_c.clone()),
    );
    managed.ensure_namespace("argocd").await.unwrap();
    let agent = format!("e2e-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let name = "e2e-guestbook";
    let d = start_local(
        hub_c.clone(),
        vec![(agent.clone(), managed_c)],
        Mode::Managed,
    )
    .await
    .unwrap();
    d.wait_connected(E2E_TIMEOUT).await.unwrap();
    // a managed agent's hub namespace is the operator's to create (as with argocd-agent)
    hub.ensure_namespace(&agent).await.unwrap();
    let _ = managed.delete(Kind::Application, "argocd", name).await;

    // hub -> managed
    let mut a = app(&agent, name, "guestbook");
    a.as_object_mut().unwrap().remove("unknownTopLevel");
    hub.create(Kind::Application, a).await.unwrap();
    let l = wait_kube(
        &managed,
        "argocd",
        name,
        "created on the managed cluster",
        |o| o.is_some(),
    )
    .await
    .unwrap();
    assert_eq!(l["spec"]["destination"]["name"], "in-cluster");

    // managed -> hub: status
    managed
        .merge_patch(
            Kind::Application,
            "argocd",
            name,
            json!({"status": {"sync": {"status": "OutOfSync"}, "health": {"status": "Missing"}}}),
        )
        .await
        .unwrap();
    // a real application controller may rewrite the status: wait until both sides agree
    tokio::time::timeout(E2E_TIMEOUT, async {
        loop {
            let m = managed
                .get(Kind::Application, "argocd", name)
                .await
                .unwrap();
            let h = hub.get(Kind::Application, &agent, name).await.unwrap();
            if let (Some(m), Some(h)) = (m, h)
                && !m["status"].is_null()
                && m["status"] == h["status"]
            {
                return;
            }
            // two clusters, no single watch covers both: poll
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    })
    .await
    .expect("status reaches the hub");

    // an AppProject selecting the agent and a repository Secret of that project reach the
    // managed cluster; the project's deletion takes both away
    hub.ensure_namespace("argocd").await.unwrap();
    let proj = format!("{agent}-team");
    let repo = format!("{agent}-repo");
    hub.create(
        Kind::AppProject,
        json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject",
            "metadata": {"name": proj, "namespace": "argocd"},
            "spec": {"sourceRepos": ["*"], "destinations": [{"name": agent, "namespace": "*"}],
                     "sourceNamespaces": [agent]}}),
    )
    .await
    .unwrap();
    let b64 = |x: &str| base64::Engine::encode(&base64::engine::general_purpose::STANDARD, x);
    hub.create(
        Kind::Secret,
        json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": repo, "namespace": "argocd",
                         "labels": {"argocd.argoproj.io/secret-type": "repository"}},
            "type": "Opaque",
            "data": {"project": b64(&proj), "url": b64("https://git.example/e2e.git")}}),
    )
    .await
    .unwrap();
    let lp = wait_kind(
        &managed,
        Kind::AppProject,
        "argocd",
        &proj,
        "project delivered",
        |o| o.is_some(),
    )
    .await
    .unwrap();
    assert_eq!(lp["spec"]["destinations"][0]["name"], "in-cluster");
    let ls = wait_kind(
        &managed,
        Kind::Secret,
        "argocd",
        &repo,
        "repository delivered",
        |o| o.is_some(),
    )
    .await
    .unwrap();
    assert_eq!(ls["data"]["url"], b64("https://git.example/e2e.git"));
    hub.delete(Kind::AppProject, "argocd", &proj).await.unwrap();
    wait_kind(
        &managed,
        Kind::Secret,
        "argocd",
        &repo,
        "repository removed",
        |o| o.is_none(),
    )
    .await;
    wait_kind(
        &managed,
        Kind::AppProject,
        "argocd",
        &proj,
        "project removed",
        |o| o.is_none(),
    )
    .await;
    hub.delete(Kind::Secret, "argocd", &repo).await.unwrap();

    // delete on the hub: gone on both sides (finalizers, if any, are handled by the agent flow)
    hub.delete(Kind::Application, &agent, name).await.unwrap();
    wait_kube(
        &managed,
        "argocd",
        name,
        "deleted on the managed cluster",
        |o| o.is_none(),
    )
    .await;
    wait_kube(&hub, &agent, name, "deleted on the hub", |o| o.is_none()).await;
    d.shutdown().await;
    delete_namespace(&hub_c, &agent).await;
}

/// Deletes a namespace the test made (not waiting: nothing reuses the random name).
async fn delete_namespace(c: &kube::Client, ns: &str) {
    let _ = kube::Api::<k8s_openapi::api::core::v1::Namespace>::all(c.clone())
        .delete(ns, &Default::default())
        .await;
}
