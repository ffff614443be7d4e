//! ctl commands against the embedded hub: the Secrets they write have the peer's shape, the
//! certificates verify, and `principal` / `agent` run on TLS material and a JWT key read from them.

use std::collections::BTreeMap;

use base64::Engine as _;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use x509_parser::prelude::*;

use super::*;
use argocd_pull_agent_core::store::{KubeStore, Store};

const APP_CRD: &str = include_str!("../../api/crds/argocd/application-crd.yaml");
const PROJECT_CRD: &str = include_str!("../../api/crds/argocd/appproject-crd.yaml");

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

/// Runs a ctl command; key-generating commands get ECDSA keys unless the test names an
/// algorithm (the peer's RSA 4096 default is slow in a debug build).
async fn ctl(c: &Clients, args: &[&str]) -> anyhow::Result<String> {
    let mut args: Vec<&str> = args.to_vec();
    let generates = matches!(
        args.as_slice(),
        ["pki", "init", ..] | ["pki", "issue", ..] | ["agent", "create", ..]
    );
    if generates
        && !args.iter().any(|a| a.starts_with("--key-algorithm"))
        && !args.iter().any(|a| a.contains("from-secret"))
    {
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

fn data(s: &Secret, k: &str) -> Vec<u8> {
    s.data.as_ref().unwrap()[k].0.clone()
}

fn keys(s: &Secret) -> Vec<String> {
    s.data.as_ref().unwrap().keys().cloned().collect()
}

fn der(pem: &[u8]) -> Vec<u8> {
    argocd_pull_agent_core::tls::parse_certs(pem).unwrap()[0].to_vec()
}

/// `leaf` is signed by `ca` and has subject `subject`.
fn verify_chain(leaf_pem: &[u8], ca_pem: &[u8], subject: &str) {
    let (leaf_der, ca_der) = (der(leaf_pem), der(ca_pem));
    let (_, leaf) = parse_x509_certificate(&leaf_der).unwrap();
    let (_, ca) = parse_x509_certificate(&ca_der).unwrap();
    leaf.verify_signature(Some(ca.public_key()))
        .expect("the certificate is signed by the CA");
    assert_eq!(leaf.issuer(), ca.subject());
    assert_eq!(
        argocd_pull_agent_core::tls::subject_string(&leaf_der).unwrap(),
        subject
    );
    assert!(leaf.validity().is_valid());
}

#[tokio::test]
async fn pki_init_and_agent_create_write_the_peers_secrets() {
    let (ph, ah) = (hub(), hub());
    let c = clients(&ph, &ah).await;

    // pki init: the CA
    let out = ctl(&c, &["pki", "init"]).await.unwrap();
    assert!(
        out.contains("CA data stored in secret argocd/argocd-agent-ca"),
        "{out}"
    );
    let ca = secret(&c.principal, "argocd", "argocd-agent-ca").await;
    assert_eq!(ca.type_.as_deref(), Some("kubernetes.io/tls"));
    assert_eq!(keys(&ca), ["tls.crt", "tls.key"]);
    let ca_pem = data(&ca, "tls.crt");
    let ca_der = der(&ca_pem);
    let (_, ca_x) = parse_x509_certificate(&ca_der).unwrap();
    assert!(ca_x.is_ca());
    ca_x.verify_signature(None).expect("self-signed");
    assert_eq!(
        argocd_pull_agent_core::tls::subject_string(&ca_der).unwrap(),
        "CN=argocd-agent-ca,O=DO NOT USE IN PRODUCTION"
    );
    let e = ctl(&c, &["pki", "init"]).await.unwrap_err().to_string();
    assert!(e.contains("already exist"), "{e}");

    // pki issue principal / resource-proxy
    ctl(
        &c,
        &[
            "pki",
            "issue",
            "principal",
            "--dns",
            "localhost,principal.example",
        ],
    )
    .await
    .unwrap();
    let p = secret(&c.principal, "argocd", "argocd-agent-principal-tls").await;
    assert_eq!(p.type_.as_deref(), Some("kubernetes.io/tls"));
    verify_chain(
        &data(&p, "tls.crt"),
        &ca_pem,
        "CN=argocd-agent-principal,O=DO NOT USE IN PRODUCTION",
    );
    let e = ctl(&c, &["pki", "issue", "principal"])
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("--upsert"), "{e}");
    let out = ctl(
        &c,
        &[
            "pki",
            "issue",
            "principal",
            "--upsert",
            "--dns=localhost,principal.example",
        ],
    )
    .await
    .unwrap();
    assert!(out.contains("updated"), "{out}");
    ctl(
        &c,
        &["pki", "issue", "resource-proxy", "--dns", "rp.example"],
    )
    .await
    .unwrap();
    let rp = secret(&c.principal, "argocd", "argocd-agent-resource-proxy-tls").await;
    verify_chain(
        &data(&rp, "tls.crt"),
        &ca_pem,
        "CN=argocd-agent-resource-proxy,O=DO NOT USE IN PRODUCTION",
    );

    // pki issue agent: client certificate and CA into the agent's cluster
    ctl(&c, &["pki", "issue", "agent", "foo"]).await.unwrap();
    let at = secret(&c.agent, "agent-ns", "argocd-agent-client-tls").await;
    verify_chain(
        &data(&at, "tls.crt"),
        &ca_pem,
        "CN=foo,O=DO NOT USE IN PRODUCTION",
    );
    let aca = secret(&c.agent, "agent-ns", "argocd-agent-ca").await;
    assert_eq!(keys(&aca), ["ca.crt"]);
    assert_eq!(data(&aca, "ca.crt"), ca_pem);

    // agent create: the cluster secret
    let out = ctl(&c, &["agent", "create", "foo", "-l", "env=prod"])
        .await
        .unwrap();
    assert_eq!(out, "Agent foo created\n");
    let s = secret(&c.principal, "argocd", "cluster-foo").await;
    assert_eq!(
        s.metadata.labels.clone().unwrap(),
        BTreeMap::from([
            (
                "argocd-agent.argoproj-labs.io/agent-name".to_string(),
                "foo".to_string()
            ),
            (
                "argocd.argoproj.io/secret-type".to_string(),
                "cluster".to_string()
            ),
            ("env".to_string(), "prod".to_string()),
        ])
    );
    assert_eq!(
        s.metadata.annotations.clone().unwrap(),
        BTreeMap::from([
            (
                "argocd.argoproj.io/skip-reconcile".to_string(),
                "true".to_string()
            ),
            ("managed-by".to_string(), "argocd-agent".to_string()),
        ])
    );
    assert_eq!(keys(&s), ["config", "name", "server"]);
    assert_eq!(data(&s, "name"), b"foo");
    assert_eq!(
        String::from_utf8(data(&s, "server")).unwrap(),
        "https://argocd-agent-resource-proxy:9090?agentName=foo"
    );
    let config: serde_json::Value = serde_json::from_slice(&data(&s, "config")).unwrap();
    let tls = &config["tlsClientConfig"];
    assert_eq!(config.as_object().unwrap().len(), 1, "{config}");
    assert_eq!(tls["insecure"], false);
    let mut fields: Vec<_> = tls.as_object().unwrap().keys().cloned().collect();
    fields.sort();
    assert_eq!(fields, ["caData", "certData", "insecure", "keyData"]);
    let b64 = |k: &str| {
        base64::engine::general_purpose::STANDARD
            .decode(tls[k].as_str().unwrap())
            .unwrap()
    };
    assert_eq!(b64("caData"), ca_pem);
    let cert_pem = b64("certData");
    verify_chain(&cert_pem, &ca_pem, "CN=foo,O=DO NOT USE IN PRODUCTION");
    argocd_pull_agent_core::tls::client_config(
        &argocd_pull_agent_core::tls::TlsMaterial {
            cert_pem: cert_pem.clone(),
            key_pem: b64("keyData"),
            ca_pem: ca_pem.clone(),
        },
        false,
    )
    .expect("certData and keyData are a usable client identity");
    let e = ctl(&c, &["agent", "create", "foo"])
        .await
        .unwrap_err()
        .to_string();
    assert_eq!(e, "Agent foo exists.");
    let e = ctl(
        &c,
        &[
            "agent",
            "create",
            "bar",
            "--resource-proxy-server",
            "no port",
        ],
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(e.contains("invalid address"), "{e}");
    assert!(
        Api::<Secret>::namespaced(c.principal.clone(), "argocd")
            .get_opt("cluster-bar")
            .await
            .unwrap()
            .is_none(),
        "nothing written on bad input"
    );

    // list / inspect / print-tls
    ctl(
        &c,
        &[
            "agent",
            "create",
            "bar",
            "--resource-proxy-server",
            "rp.example:443",
        ],
    )
    .await
    .unwrap();
    assert_eq!(ctl(&c, &["agent", "list"]).await.unwrap(), "bar\nfoo\n");
    assert_eq!(
        ctl(&c, &["agent", "list", "-l", "env=prod"]).await.unwrap(),
        "foo\n"
    );
    let out = ctl(&c, &["agent", "inspect", "foo"]).await.unwrap();
    assert!(
        out.starts_with("{\n \"server\""),
        "one-space indent like Go: {out}"
    );
    let j: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        j["server"],
        "https://argocd-agent-resource-proxy:9090?agentName=foo"
    );
    assert_eq!(j["name"], "foo");
    use sha2::Digest;
    assert_eq!(
        j["fingerprint"],
        hex::encode_upper(sha2::Sha256::digest(der(&cert_pem)))
    );
    let parse = |k: &str| {
        ::time::OffsetDateTime::parse(
            j[k].as_str().unwrap(),
            &::time::format_description::well_known::Rfc3339,
        )
        .unwrap()
    };
    assert_eq!(
        (parse("notValidAfter") - parse("notValidBefore")).whole_days(),
        180
    );
    let text = ctl(&c, &["agent", "inspect", "foo", "-o", "text"])
        .await
        .unwrap();
    assert!(text.contains("Fingerprint (SHA-256):"), "{text}");
    assert_eq!(
        ctl(&c, &["agent", "print-tls", "foo", "-t", "ca"])
            .await
            .unwrap()
            .as_bytes(),
        ca_pem
    );
    assert_eq!(
        ctl(&c, &["agent", "print-tls", "foo"])
            .await
            .unwrap()
            .as_bytes(),
        cert_pem
    );
    let e = ctl(&c, &["agent", "inspect", "nope"])
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("No such agent configured: nope"), "{e}");

    // pki inspect / delete
    let j: serde_json::Value =
        serde_json::from_str(&ctl(&c, &["pki", "inspect"]).await.unwrap()).unwrap();
    assert_eq!(
        j["ca"]["subject"],
        "CN=argocd-agent-ca,O=DO NOT USE IN PRODUCTION"
    );
    assert_eq!(j["ca"]["keyType"], "ECDSA");
    assert_eq!(
        j["principal"]["dns"],
        serde_json::json!(["localhost", "principal.example"])
    );
    assert_eq!(j["principal"]["ips"], serde_json::json!(["127.0.0.1"]));
    assert!(j["ca"].get("warnings").is_none(), "{j}");
    assert_eq!(
        ctl(&c, &["pki", "delete", "--yes"]).await.unwrap(),
        "CA successfully deleted.\n"
    );
    let e = ctl(&c, &["agent", "create", "baz"])
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("CA is not initialized"), "{e}");
}

#[tokio::test]
async fn blocklist_tls_add_list_remove_as_the_peer() {
    let (ph, ah) = (hub(), hub());
    let c = clients(&ph, &ah).await;
    assert_eq!(
        ctl(&c, &["blocklist", "tls", "list"]).await.unwrap(),
        "No entries in the blocklist.\n"
    );
    let fp = argocd_pull_agent_core::blocklist::fingerprint(b"a certificate");
    let colons = fp
        .as_bytes()
        .chunks(2)
        .map(|p| std::str::from_utf8(p).unwrap().to_ascii_lowercase())
        .collect::<Vec<_>>()
        .join(":");
    assert_eq!(
        ctl(&c, &["blocklist", "tls", "add", &colons])
            .await
            .unwrap(),
        format!("Added to blocklist: {fp}\n")
    );
    assert_eq!(
        ctl(&c, &["blocklist", "tls", "add", &fp]).await.unwrap(),
        "Fingerprint already in blocklist.\n"
    );
    assert_eq!(
        ctl(&c, &["blocklist", "tls", "list"]).await.unwrap(),
        format!("FINGERPRINT\n{fp}\n")
    );
    let cm =
        Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(c.principal.clone(), "argocd")
            .get("argocd-agent-tls-blocklist")
            .await
            .unwrap();
    assert_eq!(cm.data.unwrap().get(&fp).map(String::as_str), Some(""));
    let e = ctl(&c, &["blocklist", "tls", "add", "not-a-fingerprint"])
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("64 hex digits"), "{e}");
    assert_eq!(
        ctl(&c, &["blocklist", "tls", "remove", &fp]).await.unwrap(),
        format!("Removed from blocklist: {fp}\n")
    );
    assert_eq!(
        ctl(&c, &["blocklist", "tls", "remove", &fp]).await.unwrap(),
        "Fingerprint not found in blocklist.\n"
    );
}
