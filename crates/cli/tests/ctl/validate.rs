//! `validate principal|agent` through the binary: every check passes on a complete installation,
//! and each kind of mistake shows up as the peer words it, with exit code 1.

use serde_json::json;

use crate::{Hubs, Side};

const P: &str = "--principal-context=principal";
const A: &str = "--agent-context=agent";
const EC: &str = "--key-algorithm=ecdsa-p256";

fn deployment(ns: &str, name: &str, component: &str) -> serde_json::Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns, "labels": {
            "app.kubernetes.io/part-of": "argocd", "app.kubernetes.io/component": component}},
        "spec": {"selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"containers": [{"name": "c", "image": "x"}]}}}
    })
}

fn redis_policy(ns: &str, from: &str) -> serde_json::Value {
    json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": "argocd-redis-network-policy", "namespace": ns},
        "spec": {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "argocd-redis"}},
                 "ingress": [{"from": [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": from}}}]}]}
    })
}

/// Prints checks `(name fragment, passed)` of a validate output.
fn results(stdout: &str) -> Vec<(String, bool)> {
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix("* "))
        .map(|l| (l.to_string(), l.ends_with("✅")))
        .collect()
}

#[test]
fn validate_principal_and_agent_report_each_check_as_the_peer() {
    let hubs = Hubs::start();
    let env = &hubs.env;

    // an empty principal namespace: most checks fail, exit 1
    let o = env.run(&[P, "validate", "principal"]);
    assert_eq!(o.code, 1, "{o:?}");
    assert_eq!(o.stderr, "[FATAL]: one or more checks failed\n");
    assert!(o.stdout.starts_with("Configuration validation results:\n"));
    assert!(
        o.stdout.contains(
            "* Verifying Argo CD is running in cluster-scoped mode: ❌\nERROR: neither ArgoCD CR nor argocd-cm ConfigMap found in namespace argocd\n"
        ),
        "{o:?}"
    );
    assert!(
        o.stdout.contains("* Verifying principal public CA certificate exists and is valid (argocd/argocd-agent-ca): ❌\nERROR: could not read TLS secret argocd/argocd-agent-ca: secrets \"argocd-agent-ca\" not found\n"),
        "{o:?}"
    );

    // a complete installation
    env.run(&[P, "pki", "init", EC]).ok();
    env.run(&[P, "pki", "issue", "principal", EC]).ok();
    env.run(&[P, "pki", "issue", "resource-proxy", EC, "--dns=rp"])
        .ok();
    env.run(&[P, "jwt", "create-key", "--key-size=2048"]).ok();
    env.run(&[P, "agent", "create", "edge", EC]).ok();
    env.run(&[P, A, "pki", "issue", "agent", "edge", EC]).ok();
    hubs.namespace(Side::Principal, "edge");
    hubs.apply(
        Side::Principal,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "argocd-cm", "namespace": "argocd"}, "data": {}}),
    );
    hubs.apply(
        Side::Principal,
        redis_policy("argocd", "argocd-agent-principal"),
    );
    for (name, c) in [
        ("argocd-repo-server", "repo-server"),
        ("argocd-redis", "redis"),
        ("argocd-dex-server", "dex-server"),
        ("argocd-server", "server"),
    ] {
        hubs.apply(Side::Principal, deployment("argocd", name, c));
    }
    hubs.apply(Side::Agent, redis_policy("argocd", "argocd-agent-agent"));
    for (name, c) in [
        ("argocd-repo-server", "repo-server"),
        ("argocd-redis", "redis"),
        ("argocd-application-controller", "application-controller"),
    ] {
        hubs.apply(Side::Agent, deployment("argocd", name, c));
    }
    let o = env.run(&[P, "validate", "principal"]);
    let r = results(o.ok());
    assert_eq!(r.len(), 10, "{o:?}");
    assert!(r.iter().all(|(_, ok)| *ok), "{o:?}");
    let o = env.run(&[P, A, "check-config", "agent"]);
    let r = results(o.ok());
    assert_eq!(r.len(), 16, "principal checks then agent checks: {o:?}");
    assert!(
        o.stdout.contains(
            "* Verifying agent mTLS certificate is signed by principal CA certificate: ✅"
        ),
        "{o:?}"
    );

    // mistakes
    hubs.apply(
        Side::Principal,
        deployment(
            "argocd",
            "argocd-application-controller",
            "application-controller",
        ),
    );
    hubs.apply(
        Side::Principal,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "argocd-cm", "namespace": "argocd"},
               "data": {"application.namespaces": "team-*"}}),
    );
    env.run(&[
        P,
        "agent",
        "reconfigure",
        "edge",
        "--resource-proxy-server=http://rp:9090",
    ])
    .ok();
    let o = env.run(&[P, "validate", "principal"]);
    assert_eq!(o.code, 1);
    for expected in [
        "ERROR: the following invalid components were found: application-controller (argocd-application-controller)",
        "ERROR: argo CD configured for namespaced mode (applicationNamespaces is set), must be configured for cluster-scoped mode",
        "ERROR: the following agent cluster secrets in argocd are not https: cluster-edge\nthe following agent cluster secrets in argocd are missing the agentName param: cluster-edge",
    ] {
        assert!(o.stdout.contains(expected), "{expected}\n{o:?}");
    }
    // the agent's certificate names a namespace the principal lacks; another CA signed it
    env.run(&[P, A, "pki", "issue", "agent", "other", EC, "-u"])
        .ok();
    env.run(&[P, "pki", "init", EC, "--force"]).ok();
    let o = env.run(&[P, A, "validate", "agent"]);
    for expected in [
        "* Verifying namespace on principal matches agent certificate subject: ❌\nERROR: namespace 'other' not found on principal cluster",
        "* Verifying agent mTLS certificate is signed by principal CA certificate: ❌\nERROR: agent certificate not signed by principal CA",
    ] {
        assert!(o.stdout.contains(expected), "{expected}\n{o:?}");
    }
    assert!(
        env.run(&[P, "validate", "agent"])
            .fatal()
            .starts_with("An agent and principal must be provided for this command")
    );
}
