//! Real-env check of the `argoCDAgentAddon` path (OCM's real addon manager and work agent):
//! run when `ARGOCD_PULL_E2E_HUB_KUBECONFIG` and `ARGOCD_PULL_E2E_MANAGED_KUBECONFIG` name an OCM
//! hub and its managed cluster (`ARGOCD_PULL_E2E_CLUSTER`, default `cluster1`); `openssl` on PATH.
//! Uses its own names (hub namespace `addon-e2e`, spoke namespace `addon-e2e-agent`), deleted at
//! the end, also when the test fails (the GitOpsCluster is deleted first, so that its finalizer
//! removes the addon, works and secrets). Two controller instances run at once, as during a
//! Lease hand-over: one CA reaches the spoke, and neither rewrites the other's objects.

use std::io::Write as _;
use std::time::Duration;

use argocd_pull_gitops::GitOpsConfig;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams,
};
use serde_json::{Value, json};

const NS: &str = "addon-e2e";
const AGENT_NS: &str = "addon-e2e-agent";
const GC: &str = "e2e-addon";

async fn client(path: &str) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(path).expect("kubeconfig readable");
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("kubeconfig valid");
    kube::Client::try_from(config).expect("client")
}

fn api(
    c: &kube::Client,
    av: &str,
    kind: &str,
    plural: &str,
    ns: Option<&str>,
) -> Api<DynamicObject> {
    let (g, v) = av.split_once('/').unwrap_or(("", av));
    let ar = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(g, v, kind), plural);
    match ns {
        Some(ns) => Api::namespaced_with(c.clone(), ns, &ar),
        None => Api::all_with(c.clone(), &ar),
    }
}

async fn apply(c: &kube::Client, plural: &str, obj: Value) {
    let av = obj["apiVersion"].as_str().unwrap();
    let kind = obj["kind"].as_str().unwrap();
    let name = obj["metadata"]["name"].as_str().unwrap().to_string();
    let ns = obj["metadata"]["namespace"].as_str();
    api(c, av, kind, plural, ns)
        .patch(
            &name,
            &PatchParams::apply("addon-e2e").force(),
            &Patch::Apply(&obj),
        )
        .await
        .unwrap_or_else(|e| panic!("applying {kind} {name}: {e}"));
}

async fn get(
    c: &kube::Client,
    av: &str,
    kind: &str,
    plural: &str,
    ns: Option<&str>,
    name: &str,
) -> Option<Value> {
    api(c, av, kind, plural, ns)
        .get_opt(name)
        .await
        .ok()
        .flatten()
        .map(|o| serde_json::to_value(o).unwrap())
}

async fn wait<T, F, Fut>(what: &str, secs: u64, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let poll = async {
        loop {
            if let Some(v) = f().await {
                return v;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    };
    match tokio::time::timeout(Duration::from_secs(secs), poll).await {
        Ok(v) => {
            eprintln!("addon-e2e: ok: {what}");
            v
        }
        Err(_) => panic!("addon-e2e: timed out ({secs} s): {what}"),
    }
}

fn unb64(v: &Value) -> String {
    use base64::Engine;
    String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(v.as_str().unwrap_or(""))
            .unwrap(),
    )
    .unwrap()
}

fn openssl(args: &[&str], stdin_files: &[(&str, &str)]) -> String {
    let dir = std::env::temp_dir().join(format!("addon-e2e-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (n, body) in stdin_files {
        std::fs::write(dir.join(n), body).unwrap();
    }
    let out = std::process::Command::new("openssl")
        .args(args)
        .current_dir(&dir)
        .output()
        .expect("openssl runs");
    let s = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "openssl {args:?}: {s}");
    s
}

/// Removes a GitOpsCluster left by an interrupted run (the running controller finalizes it).
async fn cleanup(hub: &kube::Client) {
    let gcs = api(
        hub,
        "apps.open-cluster-management.io/v1alpha1",
        "GitOpsCluster",
        "gitopsclusters",
        Some(NS),
    );
    if gcs.delete(GC, &DeleteParams::default()).await.is_ok() {
        wait("leftover GitOpsCluster finalized", 120, || async {
            gcs.get_opt(GC).await.ok().flatten().is_none().then_some(())
        })
        .await;
    }
}

#[tokio::test]
async fn e2e_addon_on_the_real_env() {
    let (Ok(hub_path), Ok(mgd_path)) = (
        std::env::var("ARGOCD_PULL_E2E_HUB_KUBECONFIG"),
        std::env::var("ARGOCD_PULL_E2E_MANAGED_KUBECONFIG"),
    ) else {
        let _ = writeln!(
            std::io::stderr(),
            "SKIP: ARGOCD_PULL_E2E_HUB_KUBECONFIG / ARGOCD_PULL_E2E_MANAGED_KUBECONFIG are not set"
        );
        return;
    };
    let cluster = std::env::var("ARGOCD_PULL_E2E_CLUSTER").unwrap_or_else(|_| "cluster1".into());
    let _ = rustls::crypto::ring::default_provider().install_default();
    let hub = client(&hub_path).await;
    let mgd = client(&mgd_path).await;

    // The CRD (both versions), a namespace bound to the clusterset, a Placement for the cluster.
    let crd: Value = serde_saphyr::from_str(argocd_pull_api::crds::GITOPSCLUSTER).unwrap();
    apply(&hub, "customresourcedefinitions", crd).await;
    // An earlier run deletes its namespaces at the end: wait until they are gone.
    for (c, n) in [(&hub, NS), (&mgd, AGENT_NS)] {
        wait(&format!("namespace {n} not terminating"), 120, || async {
            get(c, "v1", "Namespace", "namespaces", None, n)
                .await
                .is_none_or(|o| o["metadata"]["deletionTimestamp"].is_null())
                .then_some(())
        })
        .await;
    }
    apply(
        &hub,
        "namespaces",
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}),
    )
    .await;
    apply(
        &hub,
        "managedclustersetbindings",
        json!({"apiVersion": "cluster.open-cluster-management.io/v1beta2",
        "kind": "ManagedClusterSetBinding", "metadata": {"name": "default", "namespace": NS},
        "spec": {"clusterSet": "default"}}),
    )
    .await;
    apply(&hub, "placements", json!({"apiVersion": "cluster.open-cluster-management.io/v1beta1", "kind": "Placement",
        "metadata": {"name": GC, "namespace": NS},
        "spec": {"clusterSets": ["default"], "predicates": [{"requiredClusterSelector": {"labelSelector": {
            "matchLabels": {"cluster.open-cluster-management.io/clusterset": "default"}}}}]}})).await;

    // Two controller instances, as during a Lease hand-over: they must agree on one CA (the
    // bundle that reaches the spoke is the hub's, below) and leave each other's writes alone
    // (no churn, below).
    let config = GitOpsConfig {
        gitopscluster: false,
        report: false,
        addon_agent_image: "example.invalid/argocd-pull:e2e".into(),
        ..GitOpsConfig::default()
    };
    let (a, b) = tokio::join!(
        argocd_pull_gitops::start(hub.clone(), config.clone()),
        argocd_pull_gitops::start(hub.clone(), config)
    );
    let running = [a.expect("start"), b.expect("start")];
    cleanup(&hub).await;
    let result = tokio::spawn(addon_round_trip(hub.clone(), mgd.clone(), cluster)).await;
    if result.is_err() {
        cleanup(&hub).await;
    }
    for r in running {
        tokio::time::timeout(Duration::from_secs(10), r.shutdown())
            .await
            .unwrap();
    }
    // The namespaces: the hub's (the RBAC and the Placement), and the spoke's agent namespace,
    // which the CA work orphans on purpose.
    let ns = |c: &kube::Client| api(c, "v1", "Namespace", "namespaces", None);
    let _ = ns(&mgd).delete(AGENT_NS, &DeleteParams::default()).await;
    let _ = ns(&hub).delete(NS, &DeleteParams::default()).await;
    if let Err(e) = result {
        std::panic::resume_unwind(e.into_panic());
    }
}

async fn addon_round_trip(hub: kube::Client, mgd: kube::Client, cluster: String) {
    apply(&hub, "gitopsclusters", json!({"apiVersion": "apps.open-cluster-management.io/v1alpha1", "kind": "GitOpsCluster",
        "metadata": {"name": GC, "namespace": NS},
        "spec": {"placementRef": {"kind": "Placement", "name": GC},
                 "argoCDAgentAddon": {"principalServerAddress": "principal.example.com", "principalServerPort": "8443",
                                      "mode": "managed", "agentNamespace": AGENT_NS}}})).await;

    let gc_get = || {
        get(
            &hub,
            "apps.open-cluster-management.io/v1alpha1",
            "GitOpsCluster",
            "gitopsclusters",
            Some(NS),
            GC,
        )
    };
    wait("all 13 conditions True", 120, || async {
        let gc = gc_get().await?;
        let c = gc["status"]["conditions"].as_array()?.clone();
        let all = c
            .iter()
            .filter(|c| c["type"] != "RemovedClustersCleanedUp")
            .all(|c| c["status"] == "True");
        (c.len() >= 13 && all).then_some(())
    })
    .await;

    // Secrets, checked with openssl.
    let sec = |n: &'static str| get(&hub, "v1", "Secret", "secrets", Some(NS), n);
    let ca = sec("argocd-agent-ca").await.unwrap();
    let principal = sec("argocd-agent-principal-tls").await.unwrap();
    let cs = get(
        &hub,
        "v1",
        "Secret",
        "secrets",
        Some(NS),
        &format!("cluster-{cluster}"),
    )
    .await
    .unwrap();
    let config: Value = serde_json::from_str(&unb64(&cs["data"]["config"])).unwrap();
    let files = [
        ("ca.pem", unb64(&ca["data"]["tls.crt"])),
        ("principal.pem", unb64(&principal["data"]["tls.crt"])),
        ("client.pem", unb64(&config["tlsClientConfig"]["certData"])),
    ];
    let files: Vec<(&str, &str)> = files.iter().map(|(n, b)| (*n, b.as_str())).collect();
    let ca_text = openssl(&["x509", "-in", "ca.pem", "-noout", "-text"], &files);
    assert!(
        ca_text.contains("CA:TRUE") && ca_text.contains("Subject: CN = argocd-agent-ca@"),
        "{ca_text}"
    );
    assert!(
        openssl(&["verify", "-CAfile", "ca.pem", "principal.pem"], &files)
            .contains("principal.pem: OK")
    );
    let p = openssl(
        &[
            "x509",
            "-in",
            "principal.pem",
            "-noout",
            "-ext",
            "subjectAltName,extendedKeyUsage",
        ],
        &files,
    );
    for want in [
        "DNS:principal.example.com",
        "DNS:argocd-agent-principal.addon-e2e.svc",
        "DNS:localhost",
        "IP Address:127.0.0.1",
        "TLS Web Server Authentication",
    ] {
        assert!(p.contains(want), "principal cert lacks {want}: {p}");
    }
    assert!(
        openssl(&["verify", "-CAfile", "ca.pem", "client.pem"], &files).contains("client.pem: OK")
    );
    let c = openssl(
        &[
            "x509",
            "-in",
            "client.pem",
            "-noout",
            "-subject",
            "-ext",
            "extendedKeyUsage",
        ],
        &files,
    );
    assert!(
        c.contains(&format!("CN = {cluster}")) && c.contains("TLS Web Client Authentication"),
        "{c}"
    );
    assert_eq!(
        unb64(&cs["data"]["server"]),
        format!("https://argocd-agent-resource-proxy:9090?agentName={cluster}")
    );

    // OCM's addon manager renders the template into its deploy work; the work agent applies it.
    wait(
        "addon-argocd-agent-addon-deploy-0 in the cluster namespace",
        120,
        || async {
            get(
                &hub,
                "work.open-cluster-management.io/v1",
                "ManifestWork",
                "manifestworks",
                Some(&cluster),
                "addon-argocd-agent-addon-deploy-0",
            )
            .await
        },
    )
    .await;
    let spoke_ca = wait("Secret argocd-agent-ca on the spoke", 120, || async {
        get(
            &mgd,
            "v1",
            "Secret",
            "secrets",
            Some(AGENT_NS),
            "argocd-agent-ca",
        )
        .await
    })
    .await;
    assert_eq!(
        unb64(&spoke_ca["data"]["ca.crt"]),
        unb64(&ca["data"]["ca.crt"]),
        "the bundle reaches the spoke"
    );
    let deploy = wait("agent Deployment on the spoke", 120, || async {
        get(
            &mgd,
            "apps/v1",
            "Deployment",
            "deployments",
            Some(AGENT_NS),
            "argocd-agent-addon",
        )
        .await
    })
    .await;
    let env = &deploy["spec"]["template"]["spec"]["containers"][0]["env"];
    assert!(
        env.as_array()
            .unwrap()
            .iter()
            .any(|e| e["name"] == "ARGOCD_AGENT_REMOTE_SERVER"
                && e["value"] == "principal.example.com"),
        "{env}"
    );
    assert!(
        env.as_array()
            .unwrap()
            .iter()
            .any(|e| e["name"] == "ARGOCD_AGENT_NAMESPACE" && e["value"] == AGENT_NS),
        "{env}"
    );

    // OCM's addon manager signs the agent's CSR with our CA (CustomSigner registration).
    let client_cert = wait(
        "OCM-issued agent client certificate on the spoke",
        180,
        || async {
            get(
                &mgd,
                "v1",
                "Secret",
                "secrets",
                Some(AGENT_NS),
                argocd_pull_gitops::addon::CLIENT_CERT_SECRET,
            )
            .await
            .filter(|s| s["data"]["tls.crt"].is_string())
        },
    )
    .await;
    let agent_files = [
        ("ca.pem", unb64(&ca["data"]["tls.crt"])),
        ("agent.pem", unb64(&client_cert["data"]["tls.crt"])),
    ];
    let agent_files: Vec<(&str, &str)> =
        agent_files.iter().map(|(n, b)| (*n, b.as_str())).collect();
    assert!(
        openssl(&["verify", "-CAfile", "ca.pem", "agent.pem"], &agent_files)
            .contains("agent.pem: OK")
    );
    let subject = openssl(
        &["x509", "-in", "agent.pem", "-noout", "-subject"],
        &agent_files,
    );
    assert!(subject.contains(&format!("system:open-cluster-management:cluster:{cluster}:addon:argocd-agent-addon:agent:argocd-agent-addon-agent")), "{subject}");

    // Nothing changes in 20 s: the resourceVersions of everything we own stay.
    let owned = || async {
        argocd_pull_gitops::addon::apply::list_owned(&hub, NS, GC)
            .await
            .unwrap()
            .into_iter()
            // Spec changes: `generation` where the kind has one (OCM updates the status of
            // ManagedClusterAddOns and ManifestWorks), else the resourceVersion.
            .map(|(k, v)| {
                let m = &v["metadata"];
                (
                    k,
                    if m["generation"].is_null() {
                        m["resourceVersion"].clone()
                    } else {
                        m["generation"].clone()
                    },
                )
            })
            .collect::<Vec<_>>()
    };
    let before = (
        owned().await,
        gc_get().await.unwrap()["metadata"]["resourceVersion"].clone(),
    );
    tokio::time::sleep(Duration::from_secs(20)).await; // the assertion is "nothing in 20 s"
    let after = (
        owned().await,
        gc_get().await.unwrap()["metadata"]["resourceVersion"].clone(),
    );
    assert_eq!(before, after, "no churn in 20 s");
    eprintln!(
        "addon-e2e: ok: no write in 20 s ({} objects)",
        before.0.len()
    );

    // The cluster leaves the Placement: its addon, secret and works go.
    apply(&hub, "placements", json!({"apiVersion": "cluster.open-cluster-management.io/v1beta1", "kind": "Placement",
        "metadata": {"name": GC, "namespace": NS},
        "spec": {"clusterSets": ["default"], "predicates": [{"requiredClusterSelector": {"labelSelector": {
            "matchLabels": {"addon-e2e": "selects-nothing"}}}}]}})).await;
    wait("RemovedClustersCleanedUp True", 120, || async {
        let gc = gc_get().await?;
        gc["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "RemovedClustersCleanedUp" && c["status"] == "True")
            .cloned()
    })
    .await;
    // the condition may already have been True before the Placement changed: what is awaited
    // is the cluster's objects themselves going
    wait(
        "the cluster's addon, secret and CA work removed",
        120,
        || async {
            let addon = get(
                &hub,
                "addon.open-cluster-management.io/v1alpha1",
                "ManagedClusterAddOn",
                "managedclusteraddons",
                Some(&cluster),
                "argocd-agent-addon",
            )
            .await;
            let secret = get(
                &hub,
                "v1",
                "Secret",
                "secrets",
                Some(NS),
                &format!("cluster-{cluster}"),
            )
            .await;
            let ca_work = get(
                &hub,
                "work.open-cluster-management.io/v1",
                "ManifestWork",
                "manifestworks",
                Some(&cluster),
                "argocd-agent-ca-mw",
            )
            .await;
            (addon.is_none() && secret.is_none() && ca_work.is_none()).then_some(())
        },
    )
    .await;
    wait(
        "agent Deployment removed from the spoke on leave",
        180,
        || async {
            get(
                &mgd,
                "apps/v1",
                "Deployment",
                "deployments",
                Some(AGENT_NS),
                "argocd-agent-addon",
            )
            .await
            .is_none()
            .then_some(())
        },
    )
    .await;

    // Delete: everything goes (finalizer), the spoke loses the agent.
    api(
        &hub,
        "apps.open-cluster-management.io/v1alpha1",
        "GitOpsCluster",
        "gitopsclusters",
        Some(NS),
    )
    .delete(GC, &DeleteParams::default())
    .await
    .unwrap();
    wait("GitOpsCluster gone after cleanup", 120, || async {
        gc_get().await.is_none().then_some(())
    })
    .await;
    assert!(owned().await.is_empty());
    assert!(
        get(&hub, "v1", "Secret", "secrets", Some(NS), "argocd-agent-ca")
            .await
            .is_none()
    );
}
