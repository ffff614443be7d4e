//! Repository Secrets: principal -> the managed agents their AppProject is sent to; local edits
//! reverted; follow project changes; resync after an agent restart resends nothing.
use argocd_pull_agent::local::LocalPki;
use argocd_pull_agent_core::Mode;
use argocd_pull_agent_core::metrics::Metrics;
use argocd_pull_agent_core::store::{Kind, MemStore, Store};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::{Value, json};

use crate::harness::*;

fn b64(s: &str) -> String {
    B64.encode(s)
}

fn repo_secret(name: &str, ty: &str, project: Option<&str>, password: &str) -> Value {
    let mut data = json!({"url": b64("https://git.example/team.git"), "password": b64(password)});
    if let Some(p) = project {
        data["project"] = json!(b64(p));
    }
    json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "namespace": "argocd",
                     "labels": {"argocd.argoproj.io/secret-type": ty}},
        "type": "Opaque", "data": data})
}

fn project(name: &str, dest: &str) -> Value {
    json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject",
        "metadata": {"name": name, "namespace": "argocd"},
        "spec": {"sourceRepos": ["*"], "destinations": [{"name": dest, "namespace": "*"}],
                 "sourceNamespaces": [dest]}})
}

async fn wait_secret(
    store: &MemStore,
    name: &str,
    what: &str,
    pred: impl Fn(Option<&Value>) -> bool,
) -> Option<Value> {
    wait_for_kind(store, Kind::Secret, "argocd", name, what, pred).await
}

fn password(s: Option<&Value>) -> Option<String> {
    s.and_then(|s| s["data"]["password"].as_str())
        .map(|p| String::from_utf8(B64.decode(p).unwrap()).unwrap())
}

#[tokio::test]
async fn repositories_follow_their_project_to_managed_agents() {
    let pki = LocalPki::new().unwrap();
    let (hub, spoke) = (MemStore::new(), MemStore::new());
    hub.create(Kind::AppProject, project("team", "agent-*"))
        .await
        .unwrap();
    hub.create(Kind::AppProject, project("other", "nobody"))
        .await
        .unwrap();
    let team = hub
        .create(
            Kind::Secret,
            repo_secret("repo-team", "repository", Some("team"), "pw1"),
        )
        .await
        .unwrap();
    for s in [
        repo_secret("creds-team", "repo-creds", Some("team"), "pw"),
        repo_secret("repo-other", "repository", Some("other"), "pw"),
        repo_secret("repo-unscoped", "repository", None, "pw"),
        repo_secret("cluster-x", "cluster", Some("team"), "pw"),
    ] {
        hub.create(Kind::Secret, s).await.unwrap();
    }
    let p = principal(&pki, &hub, "127.0.0.1:0").await;
    let a = agent(&pki, &p, "agent-a", Mode::Managed, &spoke).await;

    let got = wait_secret(&spoke, "repo-team", "delivered", |s| s.is_some())
        .await
        .unwrap();
    assert_eq!(
        got["metadata"]["annotations"]["argocd.argoproj.io/source-uid"], team["metadata"]["uid"],
        "the hub UID is kept as source-uid"
    );
    assert_eq!(password(Some(&got)).as_deref(), Some("pw1"));
    wait_secret(&spoke, "creds-team", "repo-creds delivered", |s| {
        s.is_some()
    })
    .await;
    wait_idle(|| p.agent_idle("agent-a") && a.idle()).await;
    for n in ["repo-other", "repo-unscoped", "cluster-x"] {
        assert!(
            spoke
                .get(Kind::Secret, "argocd", n)
                .await
                .unwrap()
                .is_none(),
            "{n} must stay on the hub"
        );
    }

    // a local edit is reverted; a local deletion is undone
    spoke
        .merge_patch(
            Kind::Secret,
            "argocd",
            "repo-team",
            json!({"data": {"password": b64("mine")}}),
        )
        .await
        .unwrap();
    wait_secret(&spoke, "repo-team", "local edit reverted", |s| {
        password(s).as_deref() == Some("pw1")
    })
    .await;
    spoke
        .delete(Kind::Secret, "argocd", "repo-team")
        .await
        .unwrap();
    wait_secret(&spoke, "repo-team", "local deletion undone", |s| {
        s.is_some()
    })
    .await;

    // a hub change flows down
    hub.merge_patch(
        Kind::Secret,
        "argocd",
        "repo-team",
        json!({"data": {"password": b64("pw2")}}),
    )
    .await
    .unwrap();
    wait_secret(&spoke, "repo-team", "hub change delivered", |s| {
        password(s).as_deref() == Some("pw2")
    })
    .await;

    // the project stops selecting the agent: its repositories go
    hub.merge_patch(
        Kind::AppProject,
        "argocd",
        "team",
        json!({"spec": {"destinations": [{"name": "nobody", "namespace": "*"}]}}),
    )
    .await
    .unwrap();
    wait_secret(&spoke, "repo-team", "deleted with the project match", |s| {
        s.is_none()
    })
    .await;
    wait_secret(
        &spoke,
        "creds-team",
        "deleted with the project match",
        |s| s.is_none(),
    )
    .await;

    // moving a repository to a project that selects the agent brings it back
    hub.merge_patch(
        Kind::Secret,
        "argocd",
        "repo-other",
        json!({"data": {"project": b64("team")}}),
    )
    .await
    .unwrap();
    hub.merge_patch(
        Kind::AppProject,
        "argocd",
        "team",
        json!({"spec": {"destinations": [{"name": "agent-a", "namespace": "*"}]}}),
    )
    .await
    .unwrap();
    wait_secret(&spoke, "repo-other", "now in a selecting project", |s| {
        s.is_some()
    })
    .await;
    // deleted on the hub: deleted on the agent
    hub.delete(Kind::Secret, "argocd", "repo-other")
        .await
        .unwrap();
    wait_secret(&spoke, "repo-other", "hub deletion", |s| s.is_none()).await;
    a.shutdown().await;
    p.shutdown().await;
}

#[tokio::test]
async fn an_agent_restart_with_nothing_changed_resends_no_repository() {
    let pki = LocalPki::new().unwrap();
    let (hub, spoke) = (MemStore::new(), MemStore::new());
    hub.create(Kind::AppProject, project("team", "c1"))
        .await
        .unwrap();
    hub.create(
        Kind::Secret,
        repo_secret("repo-team", "repository", Some("team"), "pw"),
    )
    .await
    .unwrap();
    let p = principal(&pki, &hub, "127.0.0.1:0").await;
    let a = agent(&pki, &p, "c1", Mode::Managed, &spoke).await;
    wait_secret(&spoke, "repo-team", "delivered", |s| s.is_some()).await;
    wait_idle(|| p.agent_idle("c1") && a.idle()).await;
    a.shutdown().await;

    let sent = |t: &str| Metrics::total(&p.metrics().events_sent, t);
    let before = [
        "create",
        "spec-update",
        "delete",
        "response-synced-resource",
    ]
    .map(sent);
    let acks = sent("processed");
    let a = agent(&pki, &p, "c1", Mode::Managed, &spoke).await;
    // the restarted agent sends 2 request-updates (the project, the repository) and 1
    // request-synced-resource-list whose set includes the repository; each is ACKed once handled
    wait_idle(|| sent("processed") >= acks + 3 && p.agent_idle("c1") && a.idle()).await;
    assert_eq!(
        [
            "create",
            "spec-update",
            "delete",
            "response-synced-resource"
        ]
        .map(sent),
        before,
        "[create, spec-update, delete, response-synced-resource] resent"
    );
    a.shutdown().await;
    p.shutdown().await;
}

#[tokio::test]
async fn the_gpg_keys_configmap_goes_to_every_managed_agent() {
    let pki = LocalPki::new().unwrap();
    let (hub, spoke, auto) = (MemStore::new(), MemStore::new(), MemStore::new());
    let cm = |name: &str, key: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "argocd"},
            "data": {"4AEE18F83AFDEB23": key}})
    };
    let hub_cm = hub
        .create(
            Kind::ConfigMap,
            cm(
                "argocd-gpg-keys-cm",
                "-----BEGIN PGP PUBLIC KEY BLOCK----- 1",
            ),
        )
        .await
        .unwrap();
    hub.create(Kind::ConfigMap, cm("argocd-cm", "other"))
        .await
        .unwrap();
    let p = principal(&pki, &hub, "127.0.0.1:0").await;
    let a = agent(&pki, &p, "gpg-m", Mode::Managed, &spoke).await;
    let b = agent(&pki, &p, "gpg-a", Mode::Autonomous, &auto).await;
    let wait = |s: &MemStore, what: &'static str, pred: fn(Option<&Value>) -> bool| {
        let s = s.clone();
        async move {
            wait_for_kind(
                &s,
                Kind::ConfigMap,
                "argocd",
                "argocd-gpg-keys-cm",
                what,
                pred,
            )
            .await
        }
    };
    let got = wait(&spoke, "delivered", |c| c.is_some()).await.unwrap();
    assert_eq!(
        got["metadata"]["annotations"]["argocd.argoproj.io/source-uid"],
        hub_cm["metadata"]["uid"]
    );
    // a local edit is reverted
    spoke
        .merge_patch(
            Kind::ConfigMap,
            "argocd",
            "argocd-gpg-keys-cm",
            json!({"data": {"4AEE18F83AFDEB23": "mine"}}),
        )
        .await
        .unwrap();
    wait(&spoke, "local edit reverted", |c| {
        c.is_some_and(|c| c["data"]["4AEE18F83AFDEB23"] == "-----BEGIN PGP PUBLIC KEY BLOCK----- 1")
    })
    .await;
    // a hub change flows down; a hub deletion removes it
    hub.merge_patch(
        Kind::ConfigMap,
        "argocd",
        "argocd-gpg-keys-cm",
        json!({"data": {"NEWKEY": "2"}}),
    )
    .await
    .unwrap();
    wait(&spoke, "hub change delivered", |c| {
        c.is_some_and(|c| c["data"]["NEWKEY"] == "2")
    })
    .await;
    assert!(
        p.metrics()
            .encode()
            .contains("argocd_principal_gpg_keys_count 2\n"),
        "the peer's gauge counts the keys"
    );
    hub.delete(Kind::ConfigMap, "argocd", "argocd-gpg-keys-cm")
        .await
        .unwrap();
    wait(&spoke, "hub deletion", |c| c.is_none()).await;
    wait_idle(|| p.agent_idle("gpg-m") && p.agent_idle("gpg-a") && a.idle() && b.idle()).await;
    assert!(
        spoke
            .get(Kind::ConfigMap, "argocd", "argocd-cm")
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        auto.get(Kind::ConfigMap, "argocd", "argocd-gpg-keys-cm")
            .await
            .unwrap()
            .is_none(),
        "autonomous agents keep their own keys"
    );
    a.shutdown().await;
    b.shutdown().await;
    p.shutdown().await;
}
