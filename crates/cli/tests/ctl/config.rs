//! `config …` and the `--principal` / `--agent` / `--config` global flags.

use crate::{Hubs, path_str};

#[test]
fn config_file_names_principals_and_agents_for_every_command() {
    let hubs = Hubs::start();
    let env = &hubs.env;
    let default_path = env.home.join(".config/argocd-agent/ctl.conf");

    // no file yet
    assert!(
        env.run(&["config", "list"])
            .fatal()
            .starts_with("Failed to read config"),
    );

    // config create: one question per kubeconfig context, then the default principal
    // contexts in name order: agent, then principal
    let answers = "agent\nedge-ns\nedge\nprincipal\nargocd\nhub\nhub\n";
    let o = env.run_stdin(
        &[
            "config",
            "create",
            &format!("--kubeconfig-path={}", path_str(&env.kubeconfig)),
        ],
        Some(answers),
    );
    assert!(
        o.ok().ends_with(&format!(
            "Successfully wrote config to {}\n",
            default_path.display()
        )),
        "{o:?}"
    );
    assert!(
        o.stdout
            .contains("Found context agent, is this a principal or agent?")
    );
    assert!(o.stdout.contains("> hub\n"));
    let text = std::fs::read_to_string(&default_path).unwrap();
    assert!(text.contains("default-principal: hub"), "{text}");
    assert!(text.contains("kube-context: principal"), "{text}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&default_path)
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    // input that ends early is an error, nothing written
    let partial = env.home.join("partial.conf");
    let o = env.run_stdin(
        &[
            "config",
            "create",
            &format!("--kubeconfig-path={}", path_str(&env.kubeconfig)),
            &format!("--output-path={}", path_str(&partial)),
        ],
        Some("agent\n"),
    );
    assert!(o.fatal().contains("EOF"), "{o:?}");
    assert!(!partial.exists());

    let list = env.run(&["config", "list"]);
    assert_eq!(
        list.ok(),
        "COMPONENT  NAME  CONTEXT    NAMESPACE\nprincipal  hub   principal  argocd\nagent      edge  agent      edge-ns\n"
    );
    assert_eq!(
        env.run(&["config", "list", "principal"]).ok(),
        "NAME  CONTEXT    NAMESPACE  DEFAULT\nhub   principal  argocd     X\n"
    );

    // add / edit / delete
    assert_eq!(
        env.run(&[
            "config",
            "add",
            "agent",
            "--name=edge2",
            "--context=agent",
            "--namespace=argocd"
        ])
        .ok(),
        "New agent edge2 added successfully\n"
    );
    assert_eq!(
        env.run(&[
            "config",
            "add",
            "agent",
            "--name=edge2",
            "--context=agent",
            "--namespace=argocd"
        ])
        .fatal(),
        "An agent with the name edge2 already exists"
    );
    assert_eq!(
        env.run(&["config", "add", "principal", "--name=p2", "--context=x"])
            .code,
        1,
        "--namespace is required"
    );
    assert_eq!(
        env.run(&[
            "config",
            "edit",
            "agent",
            "--name=edge2",
            "--namespace=other"
        ])
        .ok(),
        "Agent edge2 updated successfully\n"
    );
    assert_eq!(
        env.run(&["config", "edit", "principal", "--name=nope"])
            .fatal(),
        "The principal nope does not exist in the config"
    );
    assert_eq!(
        env.run(&["config", "delete", "principal", "--name=hub"])
            .fatal(),
        "Cannot delete the default principal"
    );
    assert_eq!(
        env.run(&["config", "delete", "agent", "--name=edge2"]).ok(),
        "Agent edge2 deleted successfully\n"
    );
    assert_eq!(
        env.run(&["config", "list", "agent"]).ok(),
        "NAME  CONTEXT  NAMESPACE\nedge  agent    edge-ns\n"
    );

    // the default principal and --agent resolve contexts and namespaces for cluster commands
    hubs.namespace(crate::Side::Agent, "edge-ns");
    env.run(&["pki", "init", "--key-algorithm=ecdsa-p256"]).ok();
    assert!(
        hubs.secret(crate::Side::Principal, "argocd", "argocd-agent-ca")
            .is_some(),
        "pki init went to the default principal (context principal, namespace argocd)"
    );
    assert_eq!(
        env.run(&[
            "--agent=edge",
            "pki",
            "issue",
            "agent",
            "edge",
            "--key-algorithm=ecdsa-p256"
        ])
        .ok(),
        "Secret edge-ns/argocd-agent-client-tls created\nAgent CA secret edge-ns/argocd-agent-ca created\n"
    );
    assert_eq!(
        env.run(&["--agent=nope", "agent", "list"]).fatal(),
        "Agent nope does not exist in config"
    );
    assert_eq!(
        env.run(&["--principal=nope", "agent", "list"]).fatal(),
        "Principal nope does not exist in config"
    );
    // the context flags win over the file
    let o = env.run(&[
        "--principal-context=agent",
        "--principal-namespace=edge-ns",
        "pki",
        "inspect",
    ]);
    assert!(o.fatal().starts_with("CA is not initialized"), "{o:?}");

    // --config elsewhere; an invalid file is warned about and ignored
    let other = env.home.join("other.conf");
    std::fs::write(
        &other,
        "contexts:\n  principals:\n    p: {kube-context: '', namespace: x}\n",
    )
    .unwrap();
    let o = env.run(&[
        &format!("--config={}", path_str(&other)),
        "--principal-context=principal",
        "agent",
        "list",
    ]);
    assert!(
        o.stderr
            .contains("[WARN]: invalid config: principal p has blank kube-context, defaulting to using no config"),
        "{o:?}"
    );
}
