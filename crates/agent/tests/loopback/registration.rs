//! `--enable-self-cluster-registration`: an agent's first login creates its Argo CD cluster secret
//! (the peer's labels, resource-proxy server URL, a resource-proxy bearer token, the shared client
//! certificate); a later login refreshes an invalid token; a cluster secret made by hand is never
//! touched.

use std::sync::Arc;

use argocd_pull_agent::local::LocalPki;

use argocd_pull_agent_core::Mode;
use argocd_pull_agent_core::auth::TokenIssuer;
use argocd_pull_agent_core::auth::throwaway_jwt_key;
use argocd_pull_agent_core::metrics::Metrics;
use argocd_pull_agent_core::store::{KubeStore, MemStore, Store};
use argocd_pull_principal::cluster_secrets::SecretsClient;
use argocd_pull_principal::{Principal, PrincipalConfig, SelfRegistration};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::PostParams;
use serde_json::Value;

use crate::harness::*;

const APP_CRD: &str = include_str!("../../../api/crds/argocd/application-crd.yaml");
const PROJECT_CRD: &str = include_str!("../../../api/crds/argocd/appproject-crd.yaml");

fn secret(name: &str, labels: &[(&str, &str)], data: &[(&str, &[u8])]) -> Secret {
    let mut s = Secret::default();
    s.metadata.name = Some(name.into());
    s.metadata.namespace = Some("argocd".into());
    s.metadata.labels = Some(
        labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    );
    s.data = Some(
        data.iter()
            .map(|(k, v)| (k.to_string(), ByteString(v.to_vec())))
            .collect(),
    );
    s
}

fn config(s: &Secret) -> Value {
    serde_json::from_slice(&s.data.as_ref().unwrap()["config"].0).unwrap()
}

#[tokio::test]
async fn self_registration_creates_refreshes_and_leaves_manual_cluster_secrets_alone() {
    init();
    let hub = argocd_pull_hub::Hub::new();
    hub.install_crds_yaml(APP_CRD).unwrap();
    hub.install_crds_yaml(PROJECT_CRD).unwrap();
    let client = hub.client();
    KubeStore::new(client.clone())
        .ensure_namespace("argocd")
        .await
        .unwrap();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "argocd");
    let pki = LocalPki::new().unwrap();
    let shared = pki.agent("argocd-server").unwrap();
    secrets
        .create(
            &PostParams::default(),
            &secret(
                "selfreg-client",
                &[],
                &[
                    ("tls.crt", &shared.cert_pem),
                    ("tls.key", &shared.key_pem),
                    ("ca.crt", &shared.ca_pem),
                ],
            ),
        )
        .await
        .unwrap();
    let manual = secrets
        .create(
            &PostParams::default(),
            &secret(
                "cluster-manual",
                &[
                    ("argocd.argoproj.io/secret-type", "cluster"),
                    ("argocd-agent.argoproj-labs.io/agent-name", "manual"),
                ],
                &[("server", b"https://by-hand.example"), ("name", b"manual")],
            ),
        )
        .await
        .unwrap();

    let jwt = throwaway_jwt_key();
    let mut cfg = PrincipalConfig::new(
        "127.0.0.1:0".parse().unwrap(),
        pki.principal.clone(),
        jwt.clone(),
    );
    cfg.cluster_secrets = Some(SecretsClient(client.clone()));
    cfg.self_registration = Some(SelfRegistration {
        client_cert_secret: "selfreg-client".into(),
        resource_proxy_address: "rp.example:9090".into(),
    });
    let p = Principal::start(
        cfg,
        Arc::new(KubeStore::new(client.clone())),
        Metrics::new("argocd_principal"),
    )
    .await
    .unwrap();
    let tokens = TokenIssuer::from_pem(&jwt).unwrap();

    // first login: the cluster secret is created before the agent gets its tokens
    let a = agent(&pki, &p, "edge-1", Mode::Managed, &MemStore::new()).await;
    let s = secrets.get("cluster-edge-1").await.unwrap();
    let labels = s.metadata.labels.clone().unwrap();
    assert_eq!(
        labels["argocd-agent.argoproj-labs.io/self-registered-cluster"],
        "true"
    );
    assert_eq!(labels["argocd-agent.argoproj-labs.io/agent-name"], "edge-1");
    assert_eq!(labels["argocd.argoproj.io/secret-type"], "cluster");
    assert_eq!(
        s.metadata.annotations.clone().unwrap()["argocd.argoproj.io/skip-reconcile"],
        "true"
    );
    assert_eq!(
        s.data.as_ref().unwrap()["server"].0,
        b"https://rp.example:9090?agentName=edge-1"
    );
    let cfg = config(&s);
    let token = cfg["bearerToken"].as_str().unwrap().to_string();
    assert_eq!(tokens.verify_resource_proxy(&token).unwrap(), "edge-1");
    assert!(cfg["tlsClientConfig"]["certData"].is_string());
    a.shutdown().await;

    // an invalid token is replaced at the next login; a valid one stays
    let mut broken = s.clone();
    let mut c = cfg.clone();
    c["bearerToken"] = "not-a-token".into();
    broken
        .data
        .as_mut()
        .unwrap()
        .insert("config".into(), ByteString(serde_json::to_vec(&c).unwrap()));
    secrets
        .replace("cluster-edge-1", &PostParams::default(), &broken)
        .await
        .unwrap();
    let a = agent(&pki, &p, "edge-1", Mode::Managed, &MemStore::new()).await;
    let fixed = config(&secrets.get("cluster-edge-1").await.unwrap());
    let new_token = fixed["bearerToken"].as_str().unwrap();
    assert_eq!(tokens.verify_resource_proxy(new_token).unwrap(), "edge-1");
    a.shutdown().await;

    // self-registration never touches a cluster secret made by hand: what Argo CD reads (data,
    // labels, its annotations) stays; only the principal's status annotations may be added
    let m = agent(&pki, &p, "manual", Mode::Managed, &MemStore::new()).await;
    let after = secrets.get("cluster-manual").await.unwrap();
    assert_eq!(after.data, manual.data, "the manual cluster secret's data");
    assert_eq!(
        after.metadata.labels, manual.metadata.labels,
        "the manual cluster secret's labels"
    );
    let not_ours = |s: &Secret| {
        s.metadata
            .annotations
            .clone()
            .unwrap_or_default()
            .into_iter()
            .filter(|(k, _)| !k.starts_with("argocd-pull.open-cluster-management.io/"))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        not_ours(&after),
        not_ours(&manual),
        "the manual cluster secret's annotations"
    );
    m.shutdown().await;
    p.shutdown().await;
}
