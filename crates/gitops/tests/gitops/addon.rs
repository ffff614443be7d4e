//! GitOpsCluster v1alpha1 `argoCDAgentAddon` on the embedded hub: set-up, no churn, cleanup on
//! leave and on delete, bad input; and the v1alpha1/v1beta1 round trip through one CRD.

use std::collections::BTreeMap;

use argocd_pull_gitops::GitOpsConfig;
use argocd_pull_gitops::addon::{apply, pki};
use kube::api::{Api, DynamicObject, ListParams};
use serde_json::{Value, json};

use crate::util::{Env, eventually, eventually_within, secret_value};

/// The first pass generates an RSA-4096 JWT key: seconds, a minute when the tests of this binary
/// generate theirs at once on a busy 2-core machine.
pub(crate) const FIRST_PASS: std::time::Duration = std::time::Duration::from_secs(120);

const ALPHA: &str = "apps.open-cluster-management.io/v1alpha1";
const BETA: &str = "apps.open-cluster-management.io/v1beta1";
const ADDON: &str = "argocd-agent-addon";

pub(crate) fn addon_only() -> GitOpsConfig {
    GitOpsConfig {
        gitopscluster: false,
        report: false,
        addon_agent_image: "example.invalid/argocd-pull:test".into(),
        ..GitOpsConfig::default()
    }
}

async fn decide(env: &Env, clusters: &[&str]) {
    let d: Vec<Value> = clusters
        .iter()
        .map(|c| json!({"clusterName": c, "reason": ""}))
        .collect();
    env.patch(
        "cluster.open-cluster-management.io/v1beta1",
        "PlacementDecision",
        Some("argocd"),
        "placement-decision-1",
        json!({"status": {"decisions": d}}),
        true,
    )
    .await;
}

/// Namespace `argocd` with Placement `placement` deciding c1, c2, and (optionally) the
/// principal Service as a LoadBalancer with ingress 203.0.113.10.
pub(crate) async fn fleet(env: &Env, lb: bool) {
    for ns in ["argocd", "c1", "c2"] {
        env.namespace(ns, &[]).await;
    }
    if lb {
        env.create(json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "argocd-agent-principal", "namespace": "argocd"},
            "spec": {"type": "LoadBalancer", "ports": [{"name": "https", "port": 443}]}}))
            .await;
        env.patch(
            "v1",
            "Service",
            Some("argocd"),
            "argocd-agent-principal",
            json!({"status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.10"}]}}}),
            true,
        )
        .await;
    }
    env.create(
        json!({"apiVersion": "cluster.open-cluster-management.io/v1beta1", "kind": "Placement",
        "metadata": {"name": "placement", "namespace": "argocd"}, "spec": {}}),
    )
    .await;
    env.create(json!({"apiVersion": "cluster.open-cluster-management.io/v1beta1", "kind": "PlacementDecision",
        "metadata": {"name": "placement-decision-1", "namespace": "argocd",
            "labels": {"cluster.open-cluster-management.io/placement": "placement"}}}))
        .await;
    decide(env, &["c1", "c2"]).await;
}

pub(crate) async fn gitopscluster(env: &Env, kind: &str, addon: Value) {
    env.create(json!({"apiVersion": ALPHA, "kind": "GitOpsCluster",
        "metadata": {"name": "gc", "namespace": "argocd"},
        "spec": {"placementRef": {"kind": kind, "name": "placement"}, "argoCDAgentAddon": addon}}))
        .await;
}

async fn condition(env: &Env, type_: &str) -> Option<Value> {
    let gc = env
        .get(ALPHA, "GitOpsCluster", Some("argocd"), "gc")
        .await?;
    gc["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .cloned()
}

/// Every object carrying gc's owner labels, by (kind, ns, name) → resourceVersion.
async fn owned(env: &Env) -> BTreeMap<apply::Key, String> {
    apply::list_owned(&env.client, "argocd", "gc")
        .await
        .unwrap()
        .into_iter()
        .map(|(k, v)| {
            let rv = v["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or("")
                .to_string();
            (k, rv)
        })
        .collect()
}

fn decode(s: &Value, key: &str) -> String {
    secret_value(s, key).unwrap_or_else(|| panic!("secret key {key}"))
}

const ALL_TRUE: [&str; 13] = [
    "RBACReady",
    "ServerDiscovered",
    "JWTSecretReady",
    "CACertificateReady",
    "PrincipalCertificateReady",
    "ResourceProxyCertificateReady",
    "PlacementEvaluated",
    "ClustersImported",
    "ManifestWorkCreated",
    "ArgoCDCRDelivered",
    "AddonConfigured",
    "PlacementTolerationConfigured",
    "AddOnTemplateReady",
];

#[tokio::test]
async fn addon_sets_up_the_fleet_converges_and_cleans_up() {
    let env = Env::start(addon_only()).await;
    fleet(&env, true).await;
    gitopscluster(&env, "Placement", json!({"mode": "managed"})).await;

    for t in ALL_TRUE {
        let c = eventually_within(FIRST_PASS, &format!("{t} True"), || async {
            condition(&env, t).await.filter(|c| c["status"] == "True")
        })
        .await;
        assert!(c["reason"] == "Success", "{t}: {c}");
    }
    assert_eq!(
        condition(&env, "ServerDiscovered").await.unwrap()["message"],
        "Server at 203.0.113.10:443"
    );
    assert_eq!(
        condition(&env, "AddonConfigured").await.unwrap()["message"],
        "Addon configured for 2 clusters"
    );
    let gc = env
        .get(ALPHA, "GitOpsCluster", Some("argocd"), "gc")
        .await
        .unwrap();
    assert_eq!(
        gc["spec"]["argoCDAgentAddon"]["principalServerAddress"], "203.0.113.10",
        "written back"
    );
    assert_eq!(gc["spec"]["argoCDAgentAddon"]["principalServerPort"], "443");

    // Secrets: JWT, CA (+ bundle), principal (SANs ⊇ svc names, localhost set, address).
    let jwt = env
        .get("v1", "Secret", Some("argocd"), "argocd-agent-jwt")
        .await
        .unwrap();
    assert!(decode(&jwt, "jwt.key").starts_with("-----BEGIN PRIVATE KEY-----"));
    let ca = env
        .get("v1", "Secret", Some("argocd"), "argocd-agent-ca")
        .await
        .unwrap();
    assert_eq!(ca["type"], "kubernetes.io/tls");
    let ca_info = pki::parse(&decode(&ca, "tls.crt")).unwrap();
    assert!(ca_info.is_ca && ca_info.common_name.starts_with("argocd-agent-ca@"));
    let principal = env
        .get("v1", "Secret", Some("argocd"), "argocd-agent-principal-tls")
        .await
        .unwrap();
    let p = pki::parse(&decode(&principal, "tls.crt")).unwrap();
    assert!(p.server_auth && pki::signed_by(&p, &ca_info));
    for d in [
        "argocd-agent-principal.argocd.svc",
        "argocd-agent-principal.argocd.svc.cluster.local",
        "localhost",
    ] {
        assert!(p.dns.contains(d), "{d} in {:?}", p.dns);
    }
    for ip in ["127.0.0.1", "::1", "203.0.113.10"] {
        assert!(p.ips.contains(&ip.parse().unwrap()), "{ip}");
    }
    assert!(
        env.get(
            "v1",
            "Secret",
            Some("argocd"),
            "argocd-agent-resource-proxy-tls"
        )
        .await
        .is_some()
    );

    // Per cluster: cluster secret, CA work, CR work, ADC, MCA.
    let cs = env
        .get("v1", "Secret", Some("argocd"), "cluster-c1")
        .await
        .unwrap();
    let l = &cs["metadata"]["labels"];
    assert_eq!(l["argocd.argoproj.io/secret-type"], "cluster");
    assert_eq!(l["argocd-agent.argoproj-labs.io/agent-name"], "c1");
    assert_eq!(l["apps.open-cluster-management.io/cluster-name"], "c1");
    assert_eq!(l["placement-name"], "placement");
    assert_eq!(
        decode(&cs, "server"),
        "https://argocd-agent-resource-proxy:9090?agentName=c1"
    );
    let config: Value = serde_json::from_str(&decode(&cs, "config")).unwrap();
    let cert = crate::util::unb64(&config["tlsClientConfig"]["certData"]);
    let client = pki::parse(&cert).unwrap();
    assert!(client.common_name == "c1" && client.client_auth && pki::signed_by(&client, &ca_info));
    let work = env
        .get(
            "work.open-cluster-management.io/v1",
            "ManifestWork",
            Some("c1"),
            "argocd-agent-ca-mw",
        )
        .await
        .unwrap();
    assert_eq!(
        work["metadata"]["labels"]["apps.open-cluster-management.io/gitopscluster"],
        "true"
    );
    assert_eq!(
        work["metadata"]["annotations"]["apps.open-cluster-management.io/propagate-argocd-agent-ca"],
        "true"
    );
    assert_eq!(
        work["spec"]["workload"]["manifests"][0]["kind"],
        "Namespace"
    );
    let m = &work["spec"]["workload"]["manifests"][1];
    assert_eq!(
        (
            m["metadata"]["namespace"].as_str(),
            m["metadata"]["name"].as_str()
        ),
        (Some("argocd"), Some("argocd-agent-ca"))
    );
    assert_eq!(
        pki::parse(&crate::util::unb64(&m["data"]["ca.crt"]))
            .unwrap()
            .der,
        ca_info.der
    );
    assert!(
        env.get(
            "work.open-cluster-management.io/v1",
            "ManifestWork",
            Some("c2"),
            "argocd-agent-cr-argocd-gc"
        )
        .await
        .is_some()
    );
    let mca = env
        .get(
            "addon.open-cluster-management.io/v1alpha1",
            "ManagedClusterAddOn",
            Some("c1"),
            ADDON,
        )
        .await
        .unwrap();
    assert_eq!(
        mca["spec"]["configs"][0]["name"],
        "argocd-agent-addon-argocd-gc"
    );
    assert_eq!(
        mca["spec"]["configs"][1]["name"],
        "argocd-agent-addon-config"
    );
    let tmpl = env
        .get(
            "addon.open-cluster-management.io/v1alpha1",
            "AddOnTemplate",
            None,
            "argocd-agent-addon-argocd-gc",
        )
        .await
        .unwrap();
    assert_eq!(tmpl["spec"]["addonName"], ADDON);
    assert_eq!(
        tmpl["spec"]["registration"][0]["customSigner"]["signingCA"],
        json!({"name": "argocd-agent-ca", "namespace": "argocd"})
    );
    let deploy = &tmpl["spec"]["agentSpec"]["workload"]["manifests"][2];
    assert_eq!(
        deploy["spec"]["template"]["spec"]["containers"][0]["args"],
        json!(["agent"])
    );
    assert_eq!(
        deploy["spec"]["template"]["spec"]["containers"][0]["image"],
        "example.invalid/argocd-pull:test"
    );
    // Available follows the agent's stream: OCM's addon manager probes the Deployment's
    // readiness, and the readiness probe is the agent's stream-gated /healthz.
    let container = &deploy["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        container["readinessProbe"]["httpGet"],
        json!({"path": "/healthz", "port": "healthz"})
    );
    let healthz = container["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "healthz")
        .unwrap();
    assert!(
        container["env"].as_array().unwrap().iter().any(|e| {
            e["name"] == "ARGOCD_AGENT_HEALTH_CHECK_PORT"
                && e["value"].as_str() == Some(healthz["containerPort"].to_string().as_str())
        }),
        "the agent serves /healthz on the probed port: {container}"
    );
    assert_eq!(deploy["spec"]["strategy"], json!({"type": "Recreate"}));
    let placement = env
        .get(
            "cluster.open-cluster-management.io/v1beta1",
            "Placement",
            Some("argocd"),
            "placement",
        )
        .await
        .unwrap();
    assert_eq!(
        placement["spec"]["tolerations"].as_array().unwrap().len(),
        2
    );

    // No churn: a reconcile of the converged state writes nothing. Converged: the pass after
    // the address write-back has observed the new generation.
    eventually("status observes the latest generation", || async {
        let gc = env
            .get(ALPHA, "GitOpsCluster", Some("argocd"), "gc")
            .await?;
        let g = gc["metadata"]["generation"].clone();
        gc["status"]["conditions"]
            .as_array()?
            .iter()
            .all(|c| c["observedGeneration"] == g)
            .then_some(())
    })
    .await;
    let before = owned(&env).await;
    let reconciles = env.reconciles(ADDON);
    let counters = env.hub.counters();
    env.patch(
        ALPHA,
        "GitOpsCluster",
        Some("argocd"),
        "gc",
        json!({"metadata": {"annotations": {"touch": "1"}}}),
        false,
    )
    .await;
    eventually("another reconcile", || async {
        (env.reconciles(ADDON) > reconciles).then_some(())
    })
    .await;
    let writes = env.hub.counters().since(&counters);
    assert_eq!(
        writes.writes(),
        1,
        "only the test's own annotation: {:?}",
        writes.entries()
    );
    assert_eq!(owned(&env).await, before, "every resourceVersion unchanged");

    // A new LoadBalancer address (a new SAN) re-issues the principal certificate at once.
    env.patch(
        "v1",
        "Service",
        Some("argocd"),
        "argocd-agent-principal",
        json!({"status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.20"}]}}}),
        true,
    )
    .await;
    eventually("principal certificate with the new address", || async {
        let s = env
            .get("v1", "Secret", Some("argocd"), "argocd-agent-principal-tls")
            .await?;
        let c = pki::parse(&secret_value(&s, "tls.crt")?).ok()?;
        c.ips
            .contains(&"203.0.113.20".parse().unwrap())
            .then_some(())
    })
    .await;

    // c2 leaves the Placement: its objects go, c1's stay.
    decide(&env, &["c1"]).await;
    let c = eventually("RemovedClustersCleanedUp", || async {
        condition(&env, "RemovedClustersCleanedUp")
            .await
            .filter(|c| c["status"] == "True")
    })
    .await;
    assert_eq!(c["message"], "Cleaned up 1 removed cluster(s)");
    assert!(
        env.get("v1", "Secret", Some("argocd"), "cluster-c2")
            .await
            .is_none()
    );
    assert!(
        env.get(
            "addon.open-cluster-management.io/v1alpha1",
            "ManagedClusterAddOn",
            Some("c2"),
            ADDON
        )
        .await
        .is_none()
    );
    assert!(
        env.get(
            "work.open-cluster-management.io/v1",
            "ManifestWork",
            Some("c2"),
            "argocd-agent-ca-mw"
        )
        .await
        .is_none()
    );
    assert!(
        env.get(
            "addon.open-cluster-management.io/v1alpha1",
            "AddOnDeploymentConfig",
            Some("c2"),
            "argocd-agent-addon-config"
        )
        .await
        .is_none()
    );
    assert!(
        env.get("v1", "Secret", Some("argocd"), "cluster-c1")
            .await
            .is_some()
    );

    // Deleting the GitOpsCluster removes everything it created (our Decision), then itself.
    env.delete(ALPHA, "GitOpsCluster", Some("argocd"), "gc")
        .await;
    eventually("GitOpsCluster gone", || async {
        env.get(ALPHA, "GitOpsCluster", Some("argocd"), "gc")
            .await
            .is_none()
            .then_some(())
    })
    .await;
    assert!(owned(&env).await.is_empty(), "{:?}", owned(&env).await);
    assert!(
        env.get(
            "addon.open-cluster-management.io/v1alpha1",
            "ClusterManagementAddOn",
            None,
            ADDON
        )
        .await
        .is_none()
    );
    env.stop().await;
}

#[tokio::test]
async fn bad_input_is_a_false_condition_naming_the_fix_and_writes_nothing() {
    let env = Env::start(addon_only()).await;
    fleet(&env, false).await;
    gitopscluster(&env, "PlacementRule", json!({})).await;
    let c = eventually("PlacementEvaluated False", || async {
        condition(&env, "PlacementEvaluated")
            .await
            .filter(|c| c["status"] == "False")
    })
    .await;
    assert!(c["message"].as_str().unwrap().contains("invalid placement kind: PlacementRule, expected Placement; set spec.placementRef.kind to Placement"), "{c}");
    assert!(owned(&env).await.is_empty(), "nothing half-made");
    // the failed pass is counted with its reason: reported in a condition
    let errors = r#"argocd_pull_argocd_pull_gitops_reconcile_errors_total{controller="argocd-agent-addon",reason="reported"}"#;
    eventually("reconcile error counted", || async {
        (env.metric(errors) >= 1).then_some(())
    })
    .await;
    assert_eq!(
        env.metric(r#"argocd_pull_argocd_pull_gitops_reconcile_errors_total{controller="argocd-agent-addon",reason="api"}"#),
        0
    );
    assert!(
        env.metric(r#"argocd_pull_argocd_pull_gitops_reconcile_failures_total{controller="argocd-agent-addon"}"#)
            >= 1
    );
    assert!(
        env.metric(r#"argocd_pull_argocd_pull_gitops_reconcile_duration_seconds_count{controller="argocd-agent-addon"}"#)
            >= 1
    );

    // Fixed kind, a Placement that does not exist.
    env.patch(
        ALPHA,
        "GitOpsCluster",
        Some("argocd"),
        "gc",
        json!({"spec": {"placementRef": {"kind": "Placement", "name": "missing"}}}),
        false,
    )
    .await;
    let c = eventually("PlacementEvaluated False: not found", || async {
        condition(&env, "PlacementEvaluated").await.filter(|c| {
            c["message"]
                .as_str()
                .is_some_and(|m| m.contains("not found"))
        })
    })
    .await;
    assert!(
        c["message"].as_str().unwrap().contains(
            "placement argocd/missing not found; create it or fix spec.placementRef.name"
        ),
        "{c}"
    );
    assert!(owned(&env).await.is_empty(), "nothing half-made");

    // The right Placement, but no principal Service and no address in spec.
    env.patch(
        ALPHA,
        "GitOpsCluster",
        Some("argocd"),
        "gc",
        json!({"spec": {"placementRef": {"kind": "Placement", "name": "placement"}}}),
        false,
    )
    .await;
    let c = eventually("ServerDiscovered False", || async {
        condition(&env, "ServerDiscovered")
            .await
            .filter(|c| c["status"] == "False")
    })
    .await;
    assert_eq!(c["reason"], "ServerNotDiscovered");
    assert!(
        c["message"]
            .as_str()
            .unwrap()
            .contains("set spec.argoCDAgentAddon.principalServerAddress"),
        "{c}"
    );
    assert!(owned(&env).await.is_empty(), "nothing half-made");

    // A custom CR list without an ArgoCD.
    env.patch(ALPHA, "GitOpsCluster", Some("argocd"), "gc", json!({"spec": {"argoCDAgentAddon": {
        "principalServerAddress": "principal.example.com", "principalServerPort": "443",
        "argoCDCRManifestWork": {"manifests": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}]}}}}), false).await;
    let c = eventually("ArgoCDCRDelivered False", || async {
        condition(&env, "ArgoCDCRDelivered")
            .await
            .filter(|c| c["status"] == "False")
    })
    .await;
    assert!(
        c["message"]
            .as_str()
            .unwrap()
            .starts_with("Invalid ArgoCDCRManifestWork: no argoproj.io/v1beta1 ArgoCD"),
        "{c}"
    );
    assert!(owned(&env).await.is_empty(), "nothing half-made");
    env.stop().await;
}

/// One CRD, two shapes: a v1alpha1 object read and patched as v1beta1 keeps its agent fields,
/// and the v1beta1 fields survive a read through v1alpha1.
#[tokio::test]
async fn v1alpha1_and_v1beta1_round_trip_without_field_loss() {
    // The v1beta1 (ACM) controller runs too: it must leave a v1alpha1 object alone.
    let env = Env::start(GitOpsConfig {
        report: false,
        addon: false,
        ..GitOpsConfig::default()
    })
    .await;
    env.namespace("rt", &[]).await;
    env.create(json!({"apiVersion": ALPHA, "kind": "GitOpsCluster", "metadata": {"name": "rt", "namespace": "rt"},
        "spec": {"placementRef": {"kind": "Placement", "name": "p"},
                 "argoCDAgentAddon": {"principalServerAddress": "1.2.3.4", "agentNamespace": "agents"}}}))
        .await;
    let beta = env
        .get(BETA, "GitOpsCluster", Some("rt"), "rt")
        .await
        .unwrap();
    assert_eq!(beta["apiVersion"], BETA);
    assert_eq!(beta["spec"]["argoCDAgentAddon"]["agentNamespace"], "agents");
    eventually("the v1beta1 controller saw it", || async {
        (env.reconciles("gitopscluster") > 0).then_some(())
    })
    .await;
    let seen = env
        .get(BETA, "GitOpsCluster", Some("rt"), "rt")
        .await
        .unwrap();
    assert!(
        seen["status"].is_null(),
        "no v1beta1 status on a v1alpha1 object: {}",
        seen["status"]
    );
    env.patch(BETA, "GitOpsCluster", Some("rt"), "rt", json!({"spec": {"argoServer": {"argoNamespace": "argocd"}, "createBlankClusterSecrets": true}}), false).await;
    let alpha = env
        .get(ALPHA, "GitOpsCluster", Some("rt"), "rt")
        .await
        .unwrap();
    assert_eq!(
        alpha["spec"]["argoCDAgentAddon"]["principalServerAddress"],
        "1.2.3.4"
    );
    assert_eq!(alpha["spec"]["argoServer"]["argoNamespace"], "argocd");
    assert_eq!(alpha["spec"]["createBlankClusterSecrets"], true);
    let typed: Api<argocd_pull_api::addon::GitOpsCluster> =
        Api::namespaced(env.client.clone(), "rt");
    assert_eq!(
        typed
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        1
    );
    let _unused: Option<DynamicObject> = None;
    env.stop().await;
}

/// Point 5 on the controller: a CA past 80 % of its life is rotated, the bundle (in
/// `argocd-agent-ca`'s `ca.crt`, the ConfigMap and the spoke's CA work) carries old and new CA,
/// a leaf of the old CA still in its grace is kept, and a leaf past 80 % is re-issued.
#[tokio::test]
async fn ca_rotation_ships_old_and_new_ca_and_reissues_due_leaves() {
    use argocd_pull_gitops::addon::discovery;
    let env = Env::start(addon_only()).await;
    fleet(&env, false).await;
    let now = time::OffsetDateTime::now_utc();
    let old_ca = pki::new_ca(now - time::Duration::days(300)).unwrap();
    let sans = discovery::principal_sans(None, &[], "argocd", "principal.example.com");
    let principal = pki::issue(
        &old_ca,
        &pki::Leaf::Server(sans),
        now - time::Duration::days(1),
    )
    .unwrap();
    let proxy = pki::issue(
        &old_ca,
        &pki::Leaf::Server(discovery::resource_proxy_sans("argocd")),
        now - time::Duration::days(25),
    )
    .unwrap();
    let owner = json!({"gitopscluster.apps.open-cluster-management.io/name": "gc",
        "gitopscluster.apps.open-cluster-management.io/namespace": "argocd"});
    for (name, pem) in [
        ("argocd-agent-ca", &old_ca),
        ("argocd-agent-principal-tls", &principal),
        ("argocd-agent-resource-proxy-tls", &proxy),
    ] {
        env.create(json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": {"name": name, "namespace": "argocd", "labels": owner},
            "data": {"tls.crt": crate::util::b64(&pem.cert), "tls.key": crate::util::b64(&pem.key)}}))
            .await;
    }
    gitopscluster(
        &env,
        "Placement",
        json!({"principalServerAddress": "principal.example.com", "principalServerPort": "443"}),
    )
    .await;
    eventually_within(FIRST_PASS, "AddonConfigured True", || async {
        condition(&env, "AddonConfigured")
            .await
            .filter(|c| c["status"] == "True")
    })
    .await;
    let ca = env
        .get("v1", "Secret", Some("argocd"), "argocd-agent-ca")
        .await
        .unwrap();
    let new_ca = pki::parse(&secret_value(&ca, "tls.crt").unwrap()).unwrap();
    let old = pki::parse(&old_ca.cert).unwrap();
    assert_ne!(
        new_ca.der, old.der,
        "the CA past 80 % of its life is re-issued"
    );
    let bundle = pki::parse_all(&secret_value(&ca, "ca.crt").unwrap());
    assert_eq!(
        bundle.iter().map(|c| c.der.clone()).collect::<Vec<_>>(),
        vec![new_ca.der.clone(), old.der.clone()],
        "new first, then old"
    );
    let work = env
        .get(
            "work.open-cluster-management.io/v1",
            "ManifestWork",
            Some("c1"),
            "argocd-agent-ca-mw",
        )
        .await
        .unwrap();
    let shipped = pki::parse_all(&crate::util::unb64(
        &work["spec"]["workload"]["manifests"][1]["data"]["ca.crt"],
    ));
    assert_eq!(
        shipped.len(),
        2,
        "spokes trust old and new CA during the rotation"
    );
    let p = env
        .get("v1", "Secret", Some("argocd"), "argocd-agent-principal-tls")
        .await
        .unwrap();
    assert_eq!(
        secret_value(&p, "tls.crt").unwrap(),
        principal.cert,
        "kept through the rotation grace"
    );
    let rp = env
        .get(
            "v1",
            "Secret",
            Some("argocd"),
            "argocd-agent-resource-proxy-tls",
        )
        .await
        .unwrap();
    let rp = pki::parse(&secret_value(&rp, "tls.crt").unwrap()).unwrap();
    assert!(
        pki::signed_by(&rp, &new_ca),
        "the leaf past 80 % is re-issued by the new CA"
    );
    let cm = env
        .get("v1", "ConfigMap", Some("argocd"), "argocd-agent-ca-bundle")
        .await
        .unwrap();
    assert_eq!(
        pki::parse_all(cm["data"]["ca-bundle.crt"].as_str().unwrap()).len(),
        2
    );
    env.stop().await;
}

/// Two GitOpsClusters selecting the same cluster: the first serves it, the second reports it and
/// leaves the shared per-cluster objects alone (no overwrite war).
#[tokio::test]
async fn a_cluster_is_served_by_one_gitopscluster_only() {
    let env = Env::start(addon_only()).await;
    fleet(&env, false).await;
    let addr = json!({"principalServerAddress": "p.example.com", "principalServerPort": "443"});
    gitopscluster(&env, "Placement", addr.clone()).await;
    eventually_within(FIRST_PASS, "first GitOpsCluster set up", || async {
        condition(&env, "AddonConfigured")
            .await
            .filter(|c| c["status"] == "True")
    })
    .await;
    env.namespace("team", &[]).await;
    env.create(
        json!({"apiVersion": "cluster.open-cluster-management.io/v1beta1", "kind": "Placement",
        "metadata": {"name": "placement", "namespace": "team"}, "spec": {}}),
    )
    .await;
    env.create(json!({"apiVersion": "cluster.open-cluster-management.io/v1beta1", "kind": "PlacementDecision",
        "metadata": {"name": "placement-decision-1", "namespace": "team",
            "labels": {"cluster.open-cluster-management.io/placement": "placement"}}}))
        .await;
    env.patch(
        "cluster.open-cluster-management.io/v1beta1",
        "PlacementDecision",
        Some("team"),
        "placement-decision-1",
        json!({"status": {"decisions": [{"clusterName": "c1", "reason": ""}]}}),
        true,
    )
    .await;
    env.create(json!({"apiVersion": ALPHA, "kind": "GitOpsCluster", "metadata": {"name": "gc", "namespace": "team"},
        "spec": {"placementRef": {"kind": "Placement", "name": "placement"}, "argoCDAgentAddon": addr}}))
        .await;
    let c = eventually_within(FIRST_PASS, "second GitOpsCluster reports c1", || async {
        let gc = env.get(ALPHA, "GitOpsCluster", Some("team"), "gc").await?;
        gc["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "ClustersImported" && c["status"] == "False")
            .cloned()
    })
    .await;
    assert_eq!(
        c["message"],
        "Failed to import clusters: [c1] (already served by GitOpsCluster argocd/gc; select each cluster from one GitOpsCluster only)"
    );
    let mca = env
        .get(
            "addon.open-cluster-management.io/v1alpha1",
            "ManagedClusterAddOn",
            Some("c1"),
            ADDON,
        )
        .await
        .unwrap();
    assert_eq!(
        mca["metadata"]["labels"]["gitopscluster.apps.open-cluster-management.io/namespace"],
        "argocd"
    );
    assert!(
        env.get("v1", "Secret", Some("team"), "cluster-c1")
            .await
            .is_none()
    );

    // A second GitOpsCluster with argoCDAgentAddon in the same namespace is refused.
    env.create(json!({"apiVersion": ALPHA, "kind": "GitOpsCluster", "metadata": {"name": "gc2", "namespace": "argocd"},
        "spec": {"placementRef": {"kind": "Placement", "name": "placement"},
                 "argoCDAgentAddon": {"principalServerAddress": "p.example.com", "principalServerPort": "443"}}}))
        .await;
    let c = eventually("gc2 refused", || async {
        let gc = env
            .get(ALPHA, "GitOpsCluster", Some("argocd"), "gc2")
            .await?;
        gc["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "CACertificateReady" && c["status"] == "False")
            .cloned()
    })
    .await;
    assert!(
        c["message"]
            .as_str()
            .unwrap()
            .contains("already served by GitOpsCluster argocd/gc"),
        "{c}"
    );
    let ca = env
        .get("v1", "Secret", Some("argocd"), "argocd-agent-ca")
        .await
        .unwrap();
    assert_eq!(
        ca["metadata"]["labels"]["gitopscluster.apps.open-cluster-management.io/name"],
        "gc"
    );
    env.stop().await;
}
