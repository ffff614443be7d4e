//! charts/argocd-pull-principal: the agent model's principal, with the peer's names.

use serde_json::json;

use crate::helm::{self, assert_hardened, container, env, grants};

const CHART: &str = "argocd-pull-principal";

#[test]
fn default_render_is_a_hardened_principal_reading_the_peers_secrets() {
    let Some(h) = helm::helm("principal chart") else {
        return;
    };
    let objs = h.template(CHART, "argocd-pull-principal", "argocd", &[]);
    let ids: Vec<(String, String)> = [
        ("ClusterRole", "argocd-pull-principal"),
        ("ClusterRoleBinding", "argocd-pull-principal"),
        ("Deployment", "argocd-pull-principal"),
        ("Role", "argocd-pull-principal-repositories"),
        ("RoleBinding", "argocd-pull-principal-repositories"),
        // the Redis proxy is on by default, as the peer's chart
        ("Service", "argocd-agent-redis-proxy"),
        ("Service", "argocd-pull-principal"),
        ("Service", "argocd-pull-principal-metrics"),
        ("ServiceAccount", "argocd-pull-principal"),
    ]
    .iter()
    .map(|(k, n)| (k.to_string(), n.to_string()))
    .collect();
    assert_eq!(objs.ids(), ids);

    let d = objs.get("Deployment", "argocd-pull-principal");
    assert_hardened(d);
    let c = container(d);
    assert_eq!(c["args"], json!(["principal"]));
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    let e = env(c);
    // The peer's variable names (argocd-agent cmd/argocd-agent/principal.go).
    assert_eq!(e["ARGOCD_PRINCIPAL_LISTEN_PORT"], "8443");
    assert_eq!(e["ARGOCD_PRINCIPAL_NAMESPACE"], "argocd");
    assert_eq!(e["ARGOCD_PRINCIPAL_AUTH"], "mtls:CN=([^,]+)");
    assert_eq!(
        e["ARGOCD_PRINCIPAL_TLS_SERVER_CERT_PATH"],
        "/app/config/tls/tls.crt"
    );
    assert_eq!(
        e["ARGOCD_PRINCIPAL_TLS_SERVER_ROOT_CA_PATH"],
        "/app/config/ca/tls.crt"
    );
    assert_eq!(
        e["ARGOCD_PRINCIPAL_JWT_KEY_PATH"],
        "/app/config/jwt/jwt.key"
    );
    assert_eq!(e["ARGOCD_PRINCIPAL_DISABLE_REDIS_PROXY"], "false");
    assert_eq!(
        e["ARGOCD_PRINCIPAL_REDIS_SERVER_ADDRESS"],
        "argocd-redis:6379"
    );
    // TLS from the peer's Secrets.
    let secrets: Vec<&str> = d["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["secret"]["secretName"].as_str().unwrap())
        .collect();
    assert_eq!(
        secrets,
        [
            "argocd-agent-principal-tls",
            "argocd-agent-ca",
            "argocd-agent-jwt"
        ]
    );

    let grpc = objs.get("Service", "argocd-pull-principal");
    assert_eq!(grpc["spec"]["type"], "LoadBalancer");
    assert_eq!(
        grpc["spec"]["ports"],
        json!([{"name": "https", "protocol": "TCP", "port": 443, "targetPort": 8443}])
    );
    let g = grants(objs.get("ClusterRole", "argocd-pull-principal"));
    assert!(g.contains(&("argoproj.io".into(), "applications".into(), "watch".into())));
    assert!(g.contains(&("".into(), "namespaces".into(), "create".into())));
    assert!(
        !g.iter().any(|(_, r, _)| r == "secrets"),
        "TLS is mounted, not read; no secret is readable cluster-wide: {g:?}"
    );
    // repository Secrets are read in the principal's own namespace only; agents' cluster
    // secrets are patched with their state (docs/fleet-status.md), nothing else is written
    let repos = objs.get("Role", "argocd-pull-principal-repositories");
    assert_eq!(repos["metadata"]["namespace"], "argocd");
    let g = grants(repos);
    assert!(g.contains(&("".into(), "secrets".into(), "watch".into())));
    assert!(g.contains(&("".into(), "configmaps".into(), "watch".into())));
    // ... and the identity ConfigMap (argocd-agent-principal-identity) is created once
    assert!(g.contains(&("".into(), "configmaps".into(), "create".into())));
    assert!(
        g.iter()
            .all(|(_, r, v)| (["secrets", "configmaps"].contains(&r.as_str())
                && ["get", "list", "watch"].contains(&v.as_str()))
                || (r == "configmaps" && v == "create")
                || (r == "secrets" && v == "patch")),
        "{g:?}"
    );
    assert!(g.contains(&("".into(), "secrets".into(), "patch".into())));
    let e = env(container(objs.get("Deployment", "argocd-pull-principal")));
    assert_eq!(e["ARGOCD_PRINCIPAL_PUBLISH_AGENT_STATUS"], "true");
    assert_eq!(e["ARGOCD_PRINCIPAL_HEARTBEAT_INTERVAL"], "30s");
    assert_eq!(e["ARGOCD_PRINCIPAL_RESYNC_MIN_INTERVAL"], "0");
}

#[test]
fn agent_status_publishing_off_leaves_secrets_read_only() {
    let Some(h) = helm::helm("principal chart agent status") else {
        return;
    };
    let objs = h.template(
        CHART,
        "p",
        "argocd",
        &[
            "--set",
            "principal.agentStatus.publish=false",
            "--set",
            "principal.agentStatus.heartbeatInterval=10s",
            "--set",
            "principal.agentStatus.resyncMinInterval=5m",
        ],
    );
    let e = env(container(objs.get("Deployment", "p-argocd-pull-principal")));
    assert_eq!(e["ARGOCD_PRINCIPAL_PUBLISH_AGENT_STATUS"], "false");
    assert_eq!(e["ARGOCD_PRINCIPAL_HEARTBEAT_INTERVAL"], "10s");
    assert_eq!(e["ARGOCD_PRINCIPAL_RESYNC_MIN_INTERVAL"], "5m");
    let g = grants(objs.get("Role", "p-argocd-pull-principal-repositories"));
    assert!(
        !g.iter()
            .any(|(_, r, v)| r == "secrets" && v != "get" && v != "list" && v != "watch"),
        "{g:?}"
    );
    let err = h.template_err(
        CHART,
        &["--set", "principal.agentStatus.heartbeatInterval=often"],
    );
    assert!(err.contains("heartbeatInterval"), "{err}");
}

#[test]
fn proxies_and_monitoring_when_enabled() {
    let Some(h) = helm::helm("principal chart values") else {
        return;
    };
    let objs = h.template(
        CHART,
        "p",
        "argocd",
        &[
            "--set",
            "principal.redisProxy.enabled=true",
            "--set",
            "principal.resourceProxy.enabled=true",
            "--set",
            "serviceMonitor.enabled=true",
            "--set",
            "service.type=ClusterIP",
            "--set",
            "principal.tls.minVersion=tls1.2",
        ],
    );
    let redis = objs.get("Service", "argocd-agent-redis-proxy");
    assert_eq!(redis["spec"]["ports"][0]["port"], 6379);
    let rp = objs.get("Service", "argocd-agent-resource-proxy");
    assert_eq!(rp["spec"]["ports"][0]["port"], 9090);
    let d = objs.get("Deployment", "p-argocd-pull-principal");
    let c = container(d);
    let ports: Vec<&str> = c["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        ports,
        ["principal", "metrics", "redis-proxy", "resource-proxy"]
    );
    assert_eq!(env(c)["ARGOCD_PRINCIPAL_TLS_MIN_VERSION"], "tls1.2");
    assert!(
        objs.find("ServiceMonitor", "p-argocd-pull-principal")
            .is_some()
    );
    assert_eq!(
        objs.get("Service", "p-argocd-pull-principal")["spec"]["type"],
        "ClusterIP"
    );
}

#[test]
fn invalid_values_fail_naming_the_value() {
    let Some(h) = helm::helm("principal chart schema") else {
        return;
    };
    let e = h.template_err(CHART, &["--set", "principal.tls.minVersion=tls1.1"]);
    assert!(
        e.contains("/principal/tls/minVersion") && e.contains("'tls1.2', 'tls1.3'"),
        "{e}"
    );
    let e = h.template_err(CHART, &["--set", "principal.auth=userpass:/x"]);
    assert!(e.contains("/principal/auth") && e.contains("mtls:"), "{e}");
    // more than one replica only with an HA mode, and the message names both
    let e = h.template_err(CHART, &["--set", "replicaCount=3"]);
    assert!(
        e.contains("replicaCount 3 needs principal.ha.mode")
            && e.contains("active-passive")
            && e.contains("active-active"),
        "{e}"
    );
    let e = h.template_err(CHART, &["--set", "service.port=70000"]);
    assert!(e.contains("/service/port") && e.contains("maximum"), "{e}");
}

#[test]
fn self_registration_sets_its_flags_and_may_write_secrets_in_its_namespace_only() {
    let Some(h) = helm::helm("principal chart values") else {
        return;
    };
    let objs = h.template(
        CHART,
        "p",
        "argocd",
        &[
            "--set",
            "principal.selfRegistration.enabled=true",
            "--set",
            "principal.selfRegistration.clientCertSecretName=argocd-cluster-client",
        ],
    );
    let e = env(container(objs.get("Deployment", "p-argocd-pull-principal")));
    assert_eq!(
        e["ARGOCD_PRINCIPAL_ENABLE_SELF_CLUSTER_REGISTRATION"],
        "true"
    );
    assert_eq!(
        e["ARGOCD_PRINCIPAL_SELF_REGISTRATION_CLIENT_CERT_SECRET"],
        "argocd-cluster-client"
    );
    let g = grants(objs.get("Role", "p-argocd-pull-principal-repositories"));
    assert!(g.contains(&("".into(), "secrets".into(), "create".into())));
    let cluster = grants(objs.get("ClusterRole", "p-argocd-pull-principal"));
    assert!(!cluster.iter().any(|(_, r, _)| r == "secrets"));
}

#[test]
fn websocket_enable_reaches_the_principal_as_the_peers_variable() {
    let Some(h) = helm::helm("principal chart websocket") else {
        return;
    };
    for (args, want) in [
        (&[][..], "false"),
        (&["--set", "principal.websocket.enable=true"][..], "true"),
    ] {
        let objs = h.template(CHART, "p", "argocd", args);
        let e = env(container(objs.get("Deployment", "p-argocd-pull-principal")));
        assert_eq!(e["ARGOCD_PRINCIPAL_ENABLE_WEBSOCKET"], want);
    }
    let e = h.template_err(CHART, &["--set-string", "principal.websocket.enable=yes"]);
    assert!(e.contains("/principal/websocket/enable"), "{e}");
}

#[test]
fn the_allocator_returns_freed_memory_at_once_unless_told_otherwise() {
    let Some(h) = helm::helm("principal chart allocator") else {
        return;
    };
    for (args, want) in [
        (&[][..], Some("0")),
        (
            &["--set-string", "principal.allocatorPurgeDelay=10"][..],
            Some("10"),
        ),
        (
            &["--set-string", "principal.allocatorPurgeDelay="][..],
            None,
        ),
    ] {
        let objs = h.template(CHART, "p", "argocd", args);
        let e = env(container(objs.get("Deployment", "p-argocd-pull-principal")));
        assert_eq!(
            e.get("MIMALLOC_PURGE_DELAY").and_then(|v| v.as_str()),
            want,
            "{args:?}"
        );
    }
    let e = h.template_err(
        CHART,
        &["--set-string", "principal.allocatorPurgeDelay=10ms"],
    );
    assert!(e.contains("/principal/allocatorPurgeDelay"), "{e}");
}

#[test]
fn max_events_in_flight_reaches_the_principal_within_its_range() {
    let Some(h) = helm::helm("principal chart window") else {
        return;
    };
    for (args, want) in [
        (&[][..], "32"),
        (&["--set", "principal.maxEventsInFlight=4"][..], "4"),
    ] {
        let objs = h.template(CHART, "p", "argocd", args);
        let e = env(container(objs.get("Deployment", "p-argocd-pull-principal")));
        assert_eq!(e["ARGOCD_PRINCIPAL_MAX_EVENTS_IN_FLIGHT"], want, "{args:?}");
    }
    for bad in ["0", "10001"] {
        let e = h.template_err(
            CHART,
            &["--set", &format!("principal.maxEventsInFlight={bad}")],
        );
        assert!(e.contains("/principal/maxEventsInFlight"), "{e}");
    }
}

/// The pod selector of the principal's Deployment.
fn pod_selector(objs: &helm::Objects, release: &str) -> serde_json::Value {
    objs.get("Deployment", &format!("{release}-argocd-pull-principal"))["spec"]["selector"]
        ["matchLabels"]
        .clone()
}

/// `(apiGroup, resource, verb)` grants on Leases of the principal's Role.
fn lease_verbs(objs: &helm::Objects) -> Vec<String> {
    grants(objs.get("Role", "p-argocd-pull-principal-repositories"))
        .into_iter()
        .filter(|(g, r, _)| g == "coordination.k8s.io" && r == "leases")
        .map(|(_, _, v)| v)
        .collect()
}

#[test]
fn ha_active_passive_is_leader_election_on_one_lease_as_before() {
    let Some(h) = helm::helm("principal chart active-passive") else {
        return;
    };
    // `enabled: true` (kept for compatibility) and `mode: active-passive` are the same render
    let enabled = h
        .template_raw(
            CHART,
            "p",
            "argocd",
            &[
                "--set",
                "principal.ha.enabled=true",
                "--set",
                "replicaCount=2",
            ],
        )
        .unwrap();
    let mode = h
        .template_raw(
            CHART,
            "p",
            "argocd",
            &[
                "--set",
                "principal.ha.mode=active-passive",
                "--set",
                "replicaCount=2",
            ],
        )
        .unwrap();
    assert_eq!(enabled, mode);
    let objs = helm::Objects(helm::parse(&mode));
    let d = objs.get("Deployment", "p-argocd-pull-principal");
    assert_eq!(d["spec"]["replicas"], 2);
    let c = container(d);
    let e = env(c);
    assert_eq!(e["ARGOCD_PRINCIPAL_LEADER_ELECT"], "true");
    assert_eq!(e["ARGOCD_PRINCIPAL_LEASE_DURATION"], "3s");
    assert_eq!(
        e["POD_NAME"],
        json!({"fieldRef": {"fieldPath": "metadata.name"}})
    );
    assert_eq!(
        e["POD_IP"],
        json!({"fieldRef": {"fieldPath": "status.podIP"}})
    );
    for absent in [
        "ARGOCD_PRINCIPAL_HA_MODE",
        "ARGOCD_PRINCIPAL_HA_SHARDS",
        "ARGOCD_PRINCIPAL_HA_REPLICA_PORT",
    ] {
        assert!(!e.contains_key(absent), "{absent} in active-passive");
    }
    assert!(
        !c["ports"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "replica")
    );
    assert!(
        objs.find("Service", "p-argocd-pull-principal-replicas")
            .is_none()
    );
    assert_eq!(
        lease_verbs(&objs),
        ["create", "get", "list", "patch", "update", "watch"]
    );
    // a drain takes one replica at a time
    let pdb = objs.get("PodDisruptionBudget", "p-argocd-pull-principal");
    assert_eq!(pdb["apiVersion"], "policy/v1");
    assert_eq!(pdb["metadata"]["namespace"], "argocd");
    assert_eq!(pdb["spec"]["maxUnavailable"], 1);
    assert_eq!(
        pdb["spec"]["selector"]["matchLabels"],
        pod_selector(&objs, "p")
    );

    // one replica: HA on, but nothing to keep available
    let objs = h.template(
        CHART,
        "p",
        "argocd",
        &["--set", "principal.ha.enabled=true"],
    );
    assert!(objs.of_kind("PodDisruptionBudget").is_empty());
    assert_eq!(
        env(container(objs.get("Deployment", "p-argocd-pull-principal")))["ARGOCD_PRINCIPAL_LEADER_ELECT"],
        "true"
    );
}

#[test]
fn ha_active_active_serves_from_every_replica_with_shards_and_a_replica_port() {
    let Some(h) = helm::helm("principal chart active-active") else {
        return;
    };
    let objs = h.template(
        CHART,
        "p",
        "argocd",
        &[
            "--set",
            "principal.ha.mode=active-active",
            "--set",
            "replicaCount=3",
            "--set",
            "principal.ha.shards=64",
            "--set",
            "principal.ha.replicaPort=9406",
            "--set",
            "principal.ha.leaseDuration=5s",
        ],
    );
    let d = objs.get("Deployment", "p-argocd-pull-principal");
    assert_eq!(d["spec"]["replicas"], 3);
    let c = container(d);
    let e = env(c);
    assert_eq!(e["ARGOCD_PRINCIPAL_HA_MODE"], "active-active");
    assert_eq!(e["ARGOCD_PRINCIPAL_HA_SHARDS"], "64");
    assert_eq!(e["ARGOCD_PRINCIPAL_HA_REPLICA_PORT"], "9406");
    assert_eq!(e["ARGOCD_PRINCIPAL_LEASE_DURATION"], "5s");
    // the Lease holder identity is <POD_NAME>@<POD_IP>
    assert_eq!(
        e["POD_NAME"],
        json!({"fieldRef": {"fieldPath": "metadata.name"}})
    );
    assert_eq!(
        e["POD_IP"],
        json!({"fieldRef": {"fieldPath": "status.podIP"}})
    );
    assert!(
        !e.contains_key("ARGOCD_PRINCIPAL_LEADER_ELECT"),
        "active-active is not --leader-elect: {e:?}"
    );
    let replica = c["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "replica")
        .expect("a replica port");
    assert_eq!(
        *replica,
        json!({"name": "replica", "containerPort": 9406, "protocol": "TCP"})
    );

    // the replicas reach each other through a headless Service listing unready pods too
    let svc = objs.get("Service", "p-argocd-pull-principal-replicas");
    assert_eq!(svc["metadata"]["namespace"], "argocd");
    assert_eq!(svc["spec"]["clusterIP"], "None");
    assert_eq!(svc["spec"]["publishNotReadyAddresses"], true);
    assert_eq!(
        svc["spec"]["ports"],
        json!([{"name": "replica", "protocol": "TCP", "port": 9406, "targetPort": "replica"}])
    );
    assert_eq!(svc["spec"]["selector"], pod_selector(&objs, "p"));
    // agents still connect to the one gRPC Service
    assert_eq!(
        objs.get("Service", "p-argocd-pull-principal")["spec"]["ports"],
        json!([{"name": "https", "protocol": "TCP", "port": 443, "targetPort": 8443}])
    );

    // shard and membership Leases: created, renewed, watched; never patched or deleted
    assert_eq!(
        lease_verbs(&objs),
        ["create", "get", "list", "update", "watch"]
    );
    let pdb = objs.get("PodDisruptionBudget", "p-argocd-pull-principal");
    assert_eq!(pdb["spec"]["maxUnavailable"], 1);
    assert_eq!(
        pdb["spec"]["selector"]["matchLabels"],
        pod_selector(&objs, "p")
    );

    // the defaults; `enabled: true` beside `mode: active-active` is active-active
    let objs = h.template(
        CHART,
        "p",
        "argocd",
        &[
            "--set",
            "principal.ha.mode=active-active",
            "--set",
            "principal.ha.enabled=true",
            "--set",
            "replicaCount=2",
        ],
    );
    let e = env(container(objs.get("Deployment", "p-argocd-pull-principal")));
    assert_eq!(e["ARGOCD_PRINCIPAL_HA_MODE"], "active-active");
    assert_eq!(e["ARGOCD_PRINCIPAL_HA_SHARDS"], "32");
    assert_eq!(e["ARGOCD_PRINCIPAL_HA_REPLICA_PORT"], "8406");
    assert_eq!(e["ARGOCD_PRINCIPAL_LEASE_DURATION"], "3s");
    assert!(!e.contains_key("ARGOCD_PRINCIPAL_LEADER_ELECT"));
    assert_eq!(
        objs.get("Service", "p-argocd-pull-principal-replicas")["spec"]["ports"][0]["port"],
        8406
    );
    assert!(
        objs.find("PodDisruptionBudget", "p-argocd-pull-principal")
            .is_some()
    );
}

#[test]
fn bad_ha_values_fail_naming_the_fix() {
    let Some(h) = helm::helm("principal chart HA values") else {
        return;
    };
    let e = h.template_err(CHART, &["--set", "principal.ha.mode=active-standby"]);
    assert!(
        e.contains("/principal/ha/mode") && e.contains("'active-passive', 'active-active'"),
        "{e}"
    );
    // without the schema (--skip-schema-validation), the template says the same
    let e = h.template_err(
        CHART,
        &[
            "--skip-schema-validation",
            "--set",
            "principal.ha.mode=active-standby",
        ],
    );
    assert!(
        e.contains("principal.ha.mode \"active-standby\" is not supported: use active-passive")
            && e.contains("or active-active"),
        "{e}"
    );
    for shards in ["0", "1025"] {
        let e = h.template_err(
            CHART,
            &[
                "--set",
                "principal.ha.mode=active-active",
                "--set",
                &format!("principal.ha.shards={shards}"),
            ],
        );
        assert!(e.contains("/principal/ha/shards"), "{shards}: {e}");
    }
    // the replica port must not be one the principal already listens on
    for (port, taken) in [
        ("8443", "principal.listen.port"),
        ("8000", "principal.metrics.port"),
        ("6379", "the Redis proxy"),
    ] {
        let e = h.template_err(
            CHART,
            &[
                "--set",
                "principal.ha.mode=active-active",
                "--set",
                &format!("principal.ha.replicaPort={port}"),
            ],
        );
        assert!(
            e.contains(&format!(
                "principal.ha.replicaPort {port} is taken by {taken}"
            )),
            "{e}"
        );
    }
}
