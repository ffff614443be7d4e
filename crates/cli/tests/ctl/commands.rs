//! `pki`, `agent`, `jwt`, `blocklist` and `version` through the binary, with the peer's output
//! lines and exit codes.

use crate::{Hubs, Side, data};

const P: &str = "--principal-context=principal";
const A: &str = "--agent-context=agent";
const EC: &str = "--key-algorithm=ecdsa-p256";

#[test]
fn usage_errors_exit_1_and_help_lists_every_peer_command() {
    let hubs = Hubs::start();
    let env = &hubs.env;
    let help = env.run(&["--help"]);
    let out = help.ok();
    for cmd in [
        "agent",
        "config",
        "validate",
        "pki",
        "jwt",
        "blocklist",
        "version",
    ] {
        assert!(out.contains(&format!("\n  {cmd} ")), "{cmd} missing: {out}");
    }
    // the peer (cobra) exits 1 on a usage error, with the usage
    assert_eq!(env.run(&[]).code, 1);
    let o = env.run(&["agent", "create"]);
    assert_eq!(o.code, 1, "{o:?}");
    assert!(o.stderr.contains("<NAME>"), "{o:?}");
    assert_eq!(env.run(&["agent", "list", "--no-such-flag"]).code, 1);

    // version: the peer's JSON keys, compact or indented
    let v: serde_json::Value = serde_json::from_str(env.run(&["version"]).ok()).unwrap();
    assert_eq!(v["name"], "argocd-pull");
    assert_eq!(v["version"], env!("CARGO_PKG_VERSION"));
    for k in ["gitRevision", "gitStatus", "buildDate", "argocdVersion"] {
        assert!(v.get(k).is_some(), "{k} in {v}");
    }
    let indented = env.run(&["version", "-i"]);
    assert!(indented.ok().starts_with("{\n  \"name\""), "{indented:?}");
}

#[test]
fn pki_agent_jwt_and_blocklist_commands_write_the_peers_secrets() {
    let hubs = Hubs::start();
    let env = &hubs.env;

    // pki init
    let o = env.run(&[P, "pki", "init", EC]);
    assert_eq!(
        o.ok(),
        "Generating CA and storing it in secret\nSuccess. CA data stored in secret argocd/argocd-agent-ca\n"
    );
    let ca = hubs
        .secret(Side::Principal, "argocd", "argocd-agent-ca")
        .unwrap();
    let ca_pem = String::from_utf8(data(&ca, "tls.crt")).unwrap();
    assert_eq!(
        env.run(&[P, "pki", "init"]).fatal(),
        "CA secret already exist. Please delete it before generating."
    );
    assert!(
        env.run(&[P, "pki", "init", "--force", "--key-algorithm=ecdsa-p521"])
            .fatal()
            .contains("ecdsa-p521")
    );
    assert!(
        env.run(&[
            P,
            "pki",
            "init",
            "--force",
            "--key-algorithm=rsa",
            "--key-size=1024"
        ])
        .fatal()
        .contains("unsupported RSA key size 1024")
    );

    // pki dump
    assert_eq!(
        env.run(&[P, "pki", "dump"]).fatal(),
        "One of --all, --key or --cert must be specified."
    );
    assert_eq!(env.run(&[P, "pki", "dump", "--cert"]).ok(), ca_pem);
    let all = env.run(&[P, "pki", "dump", "--all"]);
    assert!(all.ok().starts_with(&ca_pem), "{all:?}");
    assert!(all.ok().contains("-----BEGIN PRIVATE KEY-----"), "{all:?}");

    // pki issue principal / resource-proxy
    assert_eq!(
        env.run(&[
            P,
            "pki",
            "issue",
            "principal",
            EC,
            "--dns=localhost,principal.example"
        ])
        .ok(),
        "Secret argocd/argocd-agent-principal-tls created\n"
    );
    assert_eq!(
        env.run(&[P, "pki", "issue", "principal", EC]).fatal(),
        "Certificate exists, please use --upsert to reissue."
    );
    assert_eq!(
        env.run(&[P, "pki", "issue", "principal", EC, "-u"]).ok(),
        "Secret argocd/argocd-agent-principal-tls updated.\n"
    );
    let o = env.run(&[P, "pki", "issue", "resource-proxy", EC]);
    assert_eq!(o.code, 1);
    assert_eq!(
        o.stdout,
        "Please pass at least one of --ip or --dns options or use --no-san to create certificate without SAN\n"
    );
    env.run(&[P, "pki", "issue", "resource-proxy", EC, "--no-san"])
        .ok();
    assert_eq!(
        env.run(&[
            P,
            "pki",
            "new-cert",
            "resource-proxy",
            EC,
            "--ip=10.0.0.1",
            "-u"
        ])
        .ok(),
        "Secret argocd/argocd-agent-resource-proxy-tls updated.\n"
    );
    let days = env.run(&[P, "pki", "issue", "principal", EC, "-u", "--days=4000"]);
    assert!(
        days.fatal().contains("exceeds CA expiry"),
        "a leaf cannot outlive its CA: {days:?}"
    );

    // pki inspect (json, text, --full)
    let sum: serde_json::Value =
        serde_json::from_str(env.run(&[P, "pki", "inspect"]).ok()).unwrap();
    assert_eq!(
        sum["ca"]["subject"],
        "CN=argocd-agent-ca,O=DO NOT USE IN PRODUCTION"
    );
    assert_eq!(sum["ca"]["keyType"], "ECDSA");
    assert_eq!(sum["resourceProxy"]["ips"], serde_json::json!(["10.0.0.1"]));
    assert!(sum["ca"].get("pem").is_none(), "summary only: {sum}");
    let full: serde_json::Value =
        serde_json::from_str(env.run(&[P, "pki", "inspect", "--full"]).ok()).unwrap();
    assert_eq!(full["ca"]["pem"], ca_pem.as_str());
    assert_eq!(full["ca"]["isCA"], true);
    assert_eq!(
        full["principal"]["extKeyUsage"],
        serde_json::json!(["ServerAuth"])
    );
    let text = env.run(&[P, "pki", "inspect", "-o", "text"]);
    assert!(text.ok().contains("CA Subject:"), "{text:?}");

    // pki issue agent: both contexts, into the agent's cluster
    assert!(
        env.run(&[P, "pki", "issue", "agent", "edge", EC])
            .fatal()
            .starts_with("Both principal and agent kubecontext must be set.")
    );
    assert!(
        env.run(&[
            P,
            "--agent-context=principal",
            "pki",
            "issue",
            "agent",
            "edge",
            EC
        ])
        .fatal()
        .contains("--same-context")
    );
    assert_eq!(
        env.run(&[P, A, "pki", "issue", "agent", "edge", EC]).ok(),
        "Secret argocd/argocd-agent-client-tls created\nAgent CA secret argocd/argocd-agent-ca created\n"
    );
    let agent_ca = hubs
        .secret(Side::Agent, "argocd", "argocd-agent-ca")
        .unwrap();
    assert_eq!(agent_ca.type_.as_deref(), Some("Opaque"));
    assert_eq!(data(&agent_ca, "ca.crt"), ca_pem.as_bytes());

    // pki propagate
    assert_eq!(
        env.run(&[P, "pki", "propagate"]).fatal(),
        "Must specify both principal and agent contexts."
    );
    assert_eq!(
        env.run(&[P, "--agent-context=principal", "pki", "propagate"])
            .fatal(),
        "PKI and agent cannot reside within the same context."
    );
    assert_eq!(
        env.run(&[P, A, "pki", "propagate"]).fatal(),
        "Agent CA secret already exists. Please delete it before propagating."
    );
    hubs.namespace(Side::Agent, "edge-ns");
    assert_eq!(
        env.run(&[P, A, "--agent-namespace=edge-ns", "pki", "propagate"])
            .ok(),
        "Agent CA secret edge-ns/argocd-agent-ca created\n"
    );
    env.run(&[P, A, "pki", "propagate", "--force"]).ok();

    // agent create / list / inspect / print-tls
    let o = env.run(&[P, "agent", "list"]);
    assert_eq!((o.code, o.stdout.as_str()), (1, "No agents found.\n"));
    assert_eq!(
        env.run(&[P, "agent", "create", "edge", EC, "-l", "env=prod"])
            .ok(),
        "Agent edge created\n"
    );
    assert_eq!(
        env.run(&[P, "agent", "create", "edge", EC]).fatal(),
        "Agent edge exists."
    );
    assert!(
        env.run(&[P, "agent", "create", "Bad_Name", EC])
            .fatal()
            .contains("invalid agent name")
    );
    assert_eq!(
        env.run(&[P, "agent", "create", "x", "--tls-from-secret=a"])
            .fatal(),
        "Both --tls-from-secret and --ca-from-secret must be provided together"
    );
    assert_eq!(
        env.run(&[
            P,
            "agent",
            "create",
            "x",
            "--tls-from-secret=argocd-agent-principal-tls",
            "--ca-from-secret=argocd/argocd-agent-ca",
            "--key-size=2048"
        ])
        .fatal(),
        "--key-algorithm and --key-size are only used when generating certificates from the PKI"
    );
    assert_eq!(env.run(&[P, "agents", "list"]).ok(), "edge\n");
    assert_eq!(
        env.run(&[P, "agent", "list", "-l", "env=dev"]).stdout,
        "No agents found.\n"
    );
    let inspect: serde_json::Value =
        serde_json::from_str(env.run(&[P, "agent", "inspect", "edge"]).ok()).unwrap();
    assert_eq!(
        inspect["server"],
        "https://argocd-agent-resource-proxy:9090?agentName=edge"
    );
    assert_eq!(inspect["name"], "edge");
    let o = env.run(&[P, "agent", "inspect", "nope"]);
    assert_eq!(
        (o.code, o.stderr.as_str()),
        (1, "No such agent configured: nope\n")
    );
    let o = env.run(&[P, "agent", "print-tls", "nope"]);
    assert_eq!(
        (o.code, o.stderr.as_str()),
        (1, "Agent 'nope' is not configured.\n")
    );
    assert_eq!(
        env.run(&[P, "agent", "print-tls", "edge", "-t", "ca"]).ok(),
        ca_pem
    );
    let cert_before = env.run(&[P, "agent", "dump-tls", "edge"]).ok().to_string();
    assert!(cert_before.starts_with("-----BEGIN CERTIFICATE-----"));
    assert!(
        env.run(&[P, "agent", "print-tls", "edge", "-t", "pfx"])
            .fatal()
            .contains("expected one of cert, key, or ca")
    );

    // agent reconfigure: announced on stderr as the peer's cmd.Println
    let o = env.run(&[
        P,
        "agent",
        "reconfigure",
        "edge",
        "--resource-proxy-server=rp.example.com:9443",
        "--resource-proxy-username=u1",
    ]);
    assert_eq!(o.code, 0, "{o:?}");
    assert_eq!(
        o.stderr,
        "Setting new server address\nSetting new username\nCluster configuration saved\n"
    );
    let inspect: serde_json::Value =
        serde_json::from_str(env.run(&[P, "agent", "inspect", "edge"]).ok()).unwrap();
    assert_eq!(
        inspect["server"],
        "https://rp.example.com:9443?agentName=edge"
    );
    let secret = hubs
        .secret(Side::Principal, "argocd", "cluster-edge")
        .unwrap();
    let config: serde_json::Value = serde_json::from_slice(&data(&secret, "config")).unwrap();
    assert_eq!(config["username"], "u1");
    assert_eq!(
        secret.metadata.labels.as_ref().unwrap()["env"],
        "prod",
        "labels kept"
    );
    // nothing changed: nothing printed, nothing written
    let o = env.run(&[
        P,
        "agent",
        "reconfigure",
        "edge",
        "--resource-proxy-username=u1",
    ]);
    assert_eq!((o.code, o.stderr.as_str(), o.stdout.as_str()), (0, "", ""));
    assert_eq!(
        env.run(&[P, "agent", "reconfigure", "edge", "--key-size=2048"])
            .fatal(),
        "--key-algorithm and --key-size are only used with --reissue-client-cert"
    );
    let o = env.run(&[P, "agent", "reconfigure", "nope", "--reissue-client-cert"]);
    assert_eq!(
        (o.code, o.stderr.as_str()),
        (1, "No configuration found for agent nope\n")
    );
    let o = env.run(&[
        P,
        "agent",
        "reconfigure",
        "edge",
        "--reissue-client-cert",
        "--key-algorithm=ed25519",
    ]);
    assert_eq!(o.stderr, "Cluster configuration saved\n", "{o:?}");
    let cert_after = env.run(&[P, "agent", "print-tls", "edge"]).ok().to_string();
    assert_ne!(cert_before, cert_after, "a new client certificate");

    // jwt
    assert_eq!(
        env.run(&[P, "jwt", "create-key"]).ok(),
        "Generating JWT signing key...\nSuccess. JWT signing key created and stored in secret argocd/argocd-agent-jwt\n"
    );
    assert_eq!(
        env.run(&[P, "jwt", "create-key"]).fatal(),
        "JWT secret already exists. Use --upsert to recreate it."
    );
    let key: serde_json::Value =
        serde_json::from_str(env.run(&[P, "jwt", "inspect-key"]).ok()).unwrap();
    assert_eq!(key["keyType"], "RSA");
    assert_eq!(key["keyLength"], 4096);
    assert_eq!(key["sha256"].as_str().unwrap().len(), 64);
    assert!(key["created"].as_str().unwrap().ends_with("+0000"), "{key}");
    let o = env.run_stdin(&[P, "jwt", "delete-key"], Some("n\n"));
    assert_eq!(o.code, 0);
    assert!(o.stdout.ends_with("[y/N]: Aborted.\n"), "{o:?}");
    assert!(
        hubs.secret(Side::Principal, "argocd", "argocd-agent-jwt")
            .is_some()
    );
    // the answer is not echoed: the prompt and the outcome share a line
    assert_eq!(
        env.run_stdin(&[P, "jwt", "delete-key"], Some("y\n")).ok(),
        "Are you sure you want to delete the JWT signing key? [y/N]: JWT signing key secret argocd/argocd-agent-jwt deleted successfully.\n"
    );
    assert_eq!(
        env.run(&[P, "jwt", "delete-key", "-f"]).ok(),
        "JWT secret argocd/argocd-agent-jwt does not exist.\n"
    );
    assert!(
        env.run(&[P, "jwt", "inspect-key"])
            .fatal()
            .starts_with("Could not read JWT signing key from secret")
    );

    // blocklist
    let fp = "AB".repeat(32);
    assert_eq!(
        env.run(&[P, "blocklist", "tls", "list"]).ok(),
        "No entries in the blocklist.\n"
    );
    assert_eq!(
        env.run(&[P, "blocklist", "tls", "add", &fp]).ok(),
        format!("Added to blocklist: {fp}\n")
    );
    assert_eq!(
        env.run(&[P, "blocklist", "tls", "add", &fp]).ok(),
        "Fingerprint already in blocklist.\n"
    );
    assert_eq!(
        env.run(&[P, "blocklist", "tls", "list"]).ok(),
        format!("FINGERPRINT\n{fp}\n")
    );
    assert_eq!(
        env.run(&[P, "blocklist", "tls", "remove", &fp]).ok(),
        format!("Removed from blocklist: {fp}\n")
    );
    assert_eq!(
        env.run(&[P, "blocklist", "tls", "remove", &fp]).ok(),
        "Fingerprint not found in blocklist.\n"
    );

    // pki delete: asks for an uppercase YES
    let o = env.run_stdin(&[P, "pki", "delete"], Some("yes\n"));
    assert_eq!(o.code, 1);
    assert!(o.stdout.ends_with("yes\nAborted.\n"), "{o:?}");
    let o = env.run_stdin(&[P, "pki", "delete"], Some("YES\n"));
    assert!(o.ok().ends_with("CA successfully deleted.\n"), "{o:?}");
    assert_eq!(env.run(&[P, "pki", "delete"]).fatal(), "CA not configured.");
    assert!(
        env.run(&[P, "agent", "create", "other", EC])
            .fatal()
            .contains("CA is not initialized")
    );
}
