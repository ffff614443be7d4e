//! charts/argocd-pull-agent: the agent on a managed cluster, with the peer's names.

use crate::helm::{self, assert_hardened, container, env, grants};

const CHART: &str = "argocd-pull-agent";

#[test]
fn default_render_is_a_namespaced_hardened_agent() {
    let Some(h) = helm::helm("agent chart") else {
        return;
    };
    let objs = h.template(CHART, "argocd-pull-agent", "argocd", &[]);
    let ids: Vec<(String, String)> = [
        ("Deployment", "argocd-pull-agent"),
        ("Role", "argocd-pull-agent"),
        ("RoleBinding", "argocd-pull-agent"),
        ("Service", "argocd-pull-agent-metrics"),
        ("ServiceAccount", "argocd-pull-agent"),
    ]
    .iter()
    .map(|(k, n)| (k.to_string(), n.to_string()))
    .collect();
    assert_eq!(objs.ids(), ids, "no cluster-wide RBAC for the agent");
    let d = objs.get("Deployment", "argocd-pull-agent");
    assert_hardened(d);
    let c = container(d);
    assert_eq!(c["args"], serde_json::json!(["agent"]));
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(c["ports"][0]["containerPort"], 8181);
    let e = env(c);
    assert_eq!(e["ARGOCD_AGENT_MODE"], "managed");
    assert_eq!(
        e["ARGOCD_AGENT_REMOTE_SERVER"],
        "principal.server.address.com"
    );
    assert_eq!(e["ARGOCD_AGENT_REMOTE_PORT"], "443");
    assert_eq!(e["ARGOCD_AGENT_NAMESPACE"], "argocd");
    assert_eq!(e["ARGOCD_AGENT_TLS_ROOT_CA_PATH"], "/app/config/ca/ca.crt");
    let role = objs.get("Role", "argocd-pull-agent");
    assert_eq!(role["metadata"]["namespace"], "argocd");
    let g = grants(role);
    assert!(g.contains(&("argoproj.io".into(), "appprojects".into(), "update".into())));
    assert!(
        g.contains(&("".into(), "secrets".into(), "create".into())),
        "repository Secrets"
    );
    assert!(
        g.iter()
            .all(|(grp, r, _)| grp == "argoproj.io" || r == "secrets" || r == "configmaps"),
        "{g:?}"
    );
}

#[test]
fn non_default_values() {
    let Some(h) = helm::helm("agent chart values") else {
        return;
    };
    let objs = h.template(
        CHART,
        "cluster1",
        "gitops",
        &[
            "--set",
            "agentMode=autonomous",
            "--set",
            "server=principal.example.com",
            "--set-string",
            "serverPort=8443",
            "--set",
            "tlsSecretName=my-client-tls",
            "--set",
            "rbac.create=false",
            "--set",
            "probes.liveness.enabled=false",
            "--set",
            "resyncInterval=10m",
        ],
    );
    let d = objs.get("Deployment", "cluster1-argocd-pull-agent");
    let c = container(d);
    let e = env(c);
    assert_eq!(e["ARGOCD_AGENT_MODE"], "autonomous");
    assert_eq!(e["ARGOCD_AGENT_RESYNC_INTERVAL"], "10m");
    assert_eq!(e["ARGOCD_AGENT_REMOTE_SERVER"], "principal.example.com");
    assert_eq!(e["ARGOCD_AGENT_REMOTE_PORT"], "8443");
    assert_eq!(e["ARGOCD_AGENT_NAMESPACE"], "gitops");
    assert!(c.get("livenessProbe").is_none());
    assert_eq!(
        d["spec"]["template"]["spec"]["volumes"][0]["secret"]["secretName"],
        "my-client-tls"
    );
    assert!(objs.of_kind("Role").is_empty());
}

#[test]
fn invalid_values_fail_naming_the_value() {
    let Some(h) = helm::helm("agent chart schema") else {
        return;
    };
    let e = h.template_err(CHART, &["--set", "agentMode=pull"]);
    assert!(
        e.contains("/agentMode") && e.contains("'managed', 'autonomous'"),
        "{e}"
    );
    let e = h.template_err(CHART, &["--set", "server=https://principal:443"]);
    assert!(e.contains("/server"), "{e}");
    let e = h.template_err(CHART, &["--set", "keepAliveInterval=often"]);
    assert!(e.contains("/keepAliveInterval"), "{e}");
    let e = h.template_err(CHART, &["--set", "resyncInterval=daily"]);
    assert!(e.contains("/resyncInterval"), "{e}");
}

#[test]
fn enable_websocket_reaches_the_agent_as_the_peers_variable() {
    let Some(h) = helm::helm("agent chart websocket") else {
        return;
    };
    for (args, want) in [
        (&[][..], "false"),
        (&["--set", "enableWebSocket=true"][..], "true"),
    ] {
        let objs = h.template(CHART, "c", "argocd", args);
        let e = env(container(objs.get("Deployment", "c-argocd-pull-agent")));
        assert_eq!(e["ARGOCD_AGENT_ENABLE_WEBSOCKET"], want);
    }
    let e = h.template_err(CHART, &["--set-string", "enableWebSocket=yes"]);
    assert!(e.contains("/enableWebSocket"), "{e}");
}

#[test]
fn destination_based_mapping_reaches_the_agent_with_the_cluster_rbac_it_needs() {
    let Some(h) = helm::helm("agent chart destination-based mapping") else {
        return;
    };
    let objs = h.template(
        CHART,
        "c",
        "argocd",
        &[
            "--set",
            "destinationBasedMapping=true",
            "--set",
            "createNamespace=true",
            "--set-string",
            "allowedNamespaces=team-*",
        ],
    );
    let e = env(container(objs.get("Deployment", "c-argocd-pull-agent")));
    assert_eq!(e["ARGOCD_AGENT_DESTINATION_BASED_MAPPING"], "true");
    assert_eq!(e["ARGOCD_AGENT_CREATE_NAMESPACE"], "true");
    assert_eq!(e["ARGOCD_AGENT_ALLOWED_NAMESPACES"], "team-*");
    let g = grants(objs.get("ClusterRole", "c-argocd-pull-agent"));
    assert!(g.contains(&("".into(), "namespaces".into(), "create".into())));
    assert!(g.contains(&("argoproj.io".into(), "applications".into(), "update".into())));
    assert!(
        g.iter()
            .all(|(_, r, _)| r == "namespaces" || r == "applications"),
        "{g:?}"
    );
    let b = objs.get("ClusterRoleBinding", "c-argocd-pull-agent");
    assert_eq!(b["subjects"][0]["namespace"], "argocd");
    // without mapping: no cluster-wide RBAC, mapping off
    let objs = h.template(CHART, "c", "argocd", &[]);
    assert!(objs.of_kind("ClusterRole").is_empty());
    let e = env(container(objs.get("Deployment", "c-argocd-pull-agent")));
    assert_eq!(e["ARGOCD_AGENT_DESTINATION_BASED_MAPPING"], "false");
    assert!(!e.contains_key("ARGOCD_AGENT_ALLOWED_NAMESPACES"));
}
