//! Env-gated (`ARGOCD_PULL_E2E_HUB_KUBECONFIG`, `ARGOCD_PULL_E2E_MANAGED_KUBECONFIG`,
//! `ARGOCD_PULL_E2E_CLUSTER`, default `cluster1`): the `argocd-agent-addon` ManagedClusterAddOn's
//! `Available` follows the agent's stream to the principal, as OCM's own addon manager reports it
//! on the real env (/work/shared/realenv): `argocd-pull controller` (the addon controller only)
//! sets up a GitOpsCluster with `argoCDAgentAddon`; OCM's addon manager renders our AddOnTemplate
//! into its deploy ManifestWork and issues the agent's client certificate; then this test runs
//! `argocd-pull principal` on the hub's PKI and `argocd-pull agent` with the environment of the
//! Deployment OCM applied on the managed cluster, OCM's client certificate and the delivered CA.
//!
//! The env has no kubelet, so the test plays the kubelet's part, and only that: it runs the
//! Deployment's own readiness probe (path, port, period, thresholds) against the agent process and
//! writes the agent pod's `Ready` condition. Everything after it is real: the ReplicaSet and
//! Deployment controllers count the ready replica, the work agent feeds the Deployment's status
//! back, and OCM's addon manager sets `Available`; the controller adds `AgentConnected`, the
//! same in words that say where to look.
//!
//! Hub namespace `addon-available`, spoke namespace `addon-available-agent`: deleted at the end,
//! also when the test fails (the GitOpsCluster first, whose finalizer removes the addon).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use serde_json::{Value, json};

use crate::{Proc, free_port, temp_dir};

const NS: &str = "addon-available";
const AGENT_NS: &str = "addon-available-agent";
const GC: &str = "addon-available";
const ADDON: &str = "argocd-agent-addon";
/// OCM's client certificate names the cluster in its CN (as argocd-pull-integration's principal
/// configuration reads it).
const AUTH: &str = "mtls:subject:CN=system:open-cluster-management:cluster:([^:]+):addon:argocd-agent-addon:agent:argocd-agent-addon-agent";

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
            &PatchParams::apply("addon-available").force(),
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

/// Polls `f` every 500 ms until it returns `Some` (the API offers no event for "OCM changed a
/// condition" that this test could await more directly than its own watch-free reads).
async fn wait<T, F, Fut>(what: &str, secs: u64, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let t0 = Instant::now();
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
            eprintln!(
                "addon-available: ok ({:.1} s): {what}",
                t0.elapsed().as_secs_f64()
            );
            v
        }
        Err(_) => panic!("addon-available: timed out ({secs} s): {what}"),
    }
}

fn data(secret: &Value, key: &str) -> Vec<u8> {
    use base64::Engine;
    let b = secret["data"][key]
        .as_str()
        .unwrap_or_else(|| panic!("secret lacks {key}"));
    base64::engine::general_purpose::STANDARD.decode(b).unwrap()
}

/// The addon's `Available` condition: `(status, reason, message)`.
async fn available(hub: &kube::Client, cluster: &str) -> Option<(String, String, String)> {
    let mca = get(
        hub,
        "addon.open-cluster-management.io/v1alpha1",
        "ManagedClusterAddOn",
        "managedclusteraddons",
        Some(cluster),
        ADDON,
    )
    .await?;
    let c = mca["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Available")?
        .clone();
    let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
    Some((s("status"), s("reason"), s("message")))
}

/// The addon's `AgentConnected` condition (argocd-pull's words for the same): `(status, reason,
/// message)`.
async fn agent_connected(hub: &kube::Client, cluster: &str) -> Option<(String, String, String)> {
    let mca = get(
        hub,
        "addon.open-cluster-management.io/v1alpha1",
        "ManagedClusterAddOn",
        "managedclusteraddons",
        Some(cluster),
        ADDON,
    )
    .await?;
    let c = mca["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "AgentConnected")?
        .clone();
    let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
    Some((s("status"), s("reason"), s("message")))
}

/// `kubectl get managedclusteraddons -A` (what a person runs), when kubectl is on PATH.
fn kubectl_get_addons(kubeconfig: &str) -> Option<String> {
    let out = std::process::Command::new("kubectl")
        .args([
            "--kubeconfig",
            kubeconfig,
            "get",
            "managedclusteraddons",
            "-A",
        ])
        .output()
        .ok()?;
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The row of `cluster`'s agent addon in `kubectl get managedclusteraddons -A`, split in columns
/// (NAMESPACE NAME AVAILABLE DEGRADED PROGRESSING).
fn addon_row(table: &str, cluster: &str) -> Vec<String> {
    table
        .lines()
        .map(|l| l.split_whitespace().map(String::from).collect::<Vec<_>>())
        .find(|cols| {
            cols.first().map(String::as_str) == Some(cluster)
                && cols.get(1).map(String::as_str) == Some(ADDON)
        })
        .unwrap_or_else(|| panic!("no {cluster}/{ADDON} row in:\n{table}"))
}

/// The kubelet's readiness prober for the agent's pods: the Deployment's own `readinessProbe`
/// (HTTP GET of `path` on the agent process, `period`, failure / success thresholds), its verdict
/// written as the pods' `Ready` condition. Runs until aborted.
async fn kubelet(mgd: kube::Client, probe: Value, port: u16) {
    let path = probe["httpGet"]["path"].as_str().unwrap().to_string();
    let period = Duration::from_secs(probe["periodSeconds"].as_u64().unwrap_or(10));
    let timeout = Duration::from_secs(probe["timeoutSeconds"].as_u64().unwrap_or(1));
    let fail_after = probe["failureThreshold"].as_u64().unwrap_or(3);
    let ok_after = probe["successThreshold"].as_u64().unwrap_or(1);
    let pods: Api<Pod> = Api::namespaced(mgd, AGENT_NS);
    let (mut ready, mut oks, mut fails) = (false, 0u64, 0u64);
    let mut tick = tokio::time::interval(period);
    loop {
        tick.tick().await;
        if http_ok(port, &path, timeout).await {
            (oks, fails) = (oks + 1, 0);
        } else {
            (oks, fails) = (0, fails + 1);
        }
        if !ready && oks >= ok_after {
            ready = true;
        } else if ready && fails >= fail_after {
            ready = false;
        }
        let Ok(list) = pods
            .list(&ListParams::default().labels(&format!("app={ADDON}")))
            .await
        else {
            continue;
        };
        let want = if ready { "True" } else { "False" };
        for p in list.items {
            let name = p.metadata.name.clone().unwrap_or_default();
            let has = p
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
                .map(|c| c.status.clone());
            if p.metadata.deletion_timestamp.is_some() || has.as_deref() == Some(want) {
                continue;
            }
            let cond = |t: &str, s: &str| json!({"type": t, "status": s});
            let status = json!({"status": {"phase": "Running", "conditions": [
                cond("PodScheduled", "True"), cond("Initialized", "True"),
                cond("ContainersReady", want), cond("Ready", want)]}});
            match pods
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
                .await
            {
                Ok(_) => eprintln!("addon-available: kubelet stand-in: pod {name} Ready={want}"),
                Err(e) => eprintln!("addon-available: kubelet stand-in: pod {name}: {e}"),
            }
        }
    }
}

/// One HTTP GET on 127.0.0.1:`port`: a 2xx/3xx answer within `timeout` (the kubelet's rule).
async fn http_ok(port: u16, path: &str, timeout: Duration) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let attempt = async {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .ok()?;
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await
        .ok()?;
        let mut out = String::new();
        s.read_to_string(&mut out).await.ok()?;
        out.split_whitespace().nth(1)?.parse::<u16>().ok()
    };
    matches!(
        tokio::time::timeout(timeout, attempt).await,
        Ok(Some(200..=399))
    )
}

/// Removes what an interrupted run left (the GitOpsCluster's finalizer needs a running
/// controller, so this runs while it does).
async fn remove_gitopscluster(hub: &kube::Client) {
    let gcs = api(
        hub,
        "apps.open-cluster-management.io/v1alpha1",
        "GitOpsCluster",
        "gitopsclusters",
        Some(NS),
    );
    if gcs.delete(GC, &DeleteParams::default()).await.is_ok() {
        wait("GitOpsCluster finalized", 120, || async {
            gcs.get_opt(GC).await.ok().flatten().is_none().then_some(())
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_addon_available_follows_the_agents_stream() {
    let (Ok(hub_path), Ok(mgd_path)) = (
        std::env::var("ARGOCD_PULL_E2E_HUB_KUBECONFIG"),
        std::env::var("ARGOCD_PULL_E2E_MANAGED_KUBECONFIG"),
    ) else {
        let _ = writeln!(
            std::io::stderr(),
            "SKIP: addon Available on the real env: ARGOCD_PULL_E2E_HUB_KUBECONFIG / ARGOCD_PULL_E2E_MANAGED_KUBECONFIG are not set"
        );
        return;
    };
    let cluster = std::env::var("ARGOCD_PULL_E2E_CLUSTER").unwrap_or_else(|_| "cluster1".into());
    let _ = rustls::crypto::ring::default_provider().install_default();
    let hub = client(&hub_path).await;
    let mgd = client(&mgd_path).await;
    let dir = temp_dir("addon-available");

    // The CRD, a namespace bound to the clusterset, a Placement of the `default` set (the
    // cluster's).
    let crd: Value = serde_saphyr::from_str(argocd_pull_api::crds::GITOPSCLUSTER).unwrap();
    apply(&hub, "customresourcedefinitions", crd).await;
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

    // The addon controller only, as a process.
    let controller = Proc::spawn(
        "controller",
        &[
            "controller".into(),
            "--disable-propagation".into(),
            "--disable-status".into(),
            "--disable-cleanup".into(),
            "--gitopscluster=false".into(),
            "--appset-report=false".into(),
            "--argocd-agent-addon=true".into(),
            "--leader-elect=false".into(),
            format!("--admin-addr=127.0.0.1:{}", free_port()),
            "--addon-agent-image=example.invalid/argocd-pull:e2e".into(),
        ],
        Some(Path::new(&hub_path)),
    );
    remove_gitopscluster(&hub).await;
    let grpc_port = free_port();
    let result = tokio::spawn(round_trip(
        hub.clone(),
        mgd.clone(),
        cluster,
        hub_path.clone(),
        mgd_path.clone(),
        dir,
        grpc_port,
    ))
    .await;
    remove_gitopscluster(&hub).await;
    drop(controller);
    for (c, n) in [(&hub, NS), (&mgd, AGENT_NS)] {
        let _ = Api::<Namespace>::all(c.clone())
            .delete(n, &DeleteParams::default())
            .await;
    }
    if let Err(e) = result {
        std::panic::resume_unwind(e.into_panic());
    }
}

async fn round_trip(
    hub: kube::Client,
    mgd: kube::Client,
    cluster: String,
    hub_path: String,
    mgd_path: String,
    dir: std::path::PathBuf,
    grpc_port: u16,
) {
    apply(&hub, "gitopsclusters", json!({"apiVersion": "apps.open-cluster-management.io/v1alpha1", "kind": "GitOpsCluster",
        "metadata": {"name": GC, "namespace": NS},
        "spec": {"placementRef": {"kind": "Placement", "name": GC},
                 "argoCDAgentAddon": {"principalServerAddress": "127.0.0.1", "principalServerPort": grpc_port.to_string(),
                                      "mode": "managed", "agentNamespace": AGENT_NS}}})).await;

    // The hub's PKI, for the principal.
    let secret = |ns: &'static str, name: String| {
        let c = if ns == NS { hub.clone() } else { mgd.clone() };
        async move {
            wait(&format!("Secret {ns}/{name}"), 180, || async {
                get(&c, "v1", "Secret", "secrets", Some(ns), &name)
                    .await
                    .filter(|s| s["data"].is_object())
            })
            .await
        }
    };
    let write = |name: &str, bytes: Vec<u8>| {
        let p = dir.join(name);
        std::fs::write(&p, bytes).unwrap();
        p.display().to_string()
    };
    let principal_tls = secret(NS, "argocd-agent-principal-tls".into()).await;
    let ca = secret(NS, "argocd-agent-ca".into()).await;
    let jwt = secret(NS, "argocd-agent-jwt".into()).await;
    let principal_args = vec![
        "principal".to_string(),
        "--listen-host=127.0.0.1".into(),
        format!("--listen-port={grpc_port}"),
        format!(
            "--tls-cert={}",
            write("principal.crt", data(&principal_tls, "tls.crt"))
        ),
        format!(
            "--tls-key={}",
            write("principal.key", data(&principal_tls, "tls.key"))
        ),
        format!(
            "--root-ca-path={}",
            write("hub-ca.crt", data(&ca, "ca.crt"))
        ),
        format!("--jwt-key={}", write("jwt.key", data(&jwt, "jwt.key"))),
        format!("--auth={AUTH}"),
        "--namespace=argocd".into(),
        format!("--metrics-port={}", free_port()),
        "--healthz-port=0".into(),
        format!("--redis-proxy-listen-address=127.0.0.1:{}", free_port()),
        "--enable-resource-proxy=false".into(),
    ];

    // What OCM delivered to the managed cluster: the Deployment, its client certificate, the CA.
    let deploy = wait(
        "agent Deployment applied by OCM's work agent",
        180,
        || async {
            get(
                &mgd,
                "apps/v1",
                "Deployment",
                "deployments",
                Some(AGENT_NS),
                ADDON,
            )
            .await
        },
    )
    .await;
    let container = deploy["spec"]["template"]["spec"]["containers"][0].clone();
    let client_cert = secret(
        AGENT_NS,
        argocd_pull_gitops::addon::CLIENT_CERT_SECRET.into(),
    )
    .await;
    let spoke_ca = secret(AGENT_NS, "argocd-agent-ca".into()).await;

    // Before any agent runs, the addon is never reported healthy.
    let before = wait(
        "the addon manager reports Available for the undeployed agent",
        180,
        || async { available(&hub, &cluster).await },
    )
    .await;
    eprintln!("addon-available: before the agent runs: {before:?}");
    assert_ne!(before.0, "True", "no agent runs yet: {before:?}");
    let words = wait("AgentConnected before the agent runs", 60, || async {
        agent_connected(&hub, &cluster).await
    })
    .await;
    eprintln!("addon-available: AgentConnected before the agent runs: {words:?}");
    assert_ne!(words.0, "True", "{words:?}");

    // The agent, with the Deployment's environment; files and ports are the host's.
    let healthz_port = free_port();
    let mut env: BTreeMap<String, String> = container["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap().to_string(),
                e["value"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    assert_eq!(
        env["ARGOCD_AGENT_NAMESPACE"], AGENT_NS,
        "{{{{INSTALL_NAMESPACE}}}} rendered by OCM"
    );
    env.insert(
        "ARGOCD_AGENT_TLS_CLIENT_CERT_PATH".into(),
        write("agent.crt", data(&client_cert, "tls.crt")),
    );
    env.insert(
        "ARGOCD_AGENT_TLS_CLIENT_KEY_PATH".into(),
        write("agent.key", data(&client_cert, "tls.key")),
    );
    env.insert(
        "ARGOCD_AGENT_TLS_ROOT_CA_PATH".into(),
        write("spoke-ca.crt", data(&spoke_ca, "ca.crt")),
    );
    env.insert("ARGOCD_AGENT_METRICS_PORT".into(), free_port().to_string());
    // the probe's named port is the one the Deployment gives the agent's health server
    let probe = container["readinessProbe"].clone();
    let probe_port = probe["httpGet"]["port"].as_str().unwrap();
    let declared = container["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == probe_port)
        .unwrap_or_else(|| panic!("no container port named {probe_port}"))["containerPort"]
        .to_string();
    assert_eq!(
        env["ARGOCD_AGENT_HEALTH_CHECK_PORT"], declared,
        "the probe reaches the agent's health server"
    );
    env.insert(
        "ARGOCD_AGENT_HEALTH_CHECK_PORT".into(),
        healthz_port.to_string(),
    );
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let agent = Proc::spawn_env("agent", &["agent".into()], Some(Path::new(&mgd_path)), &env);
    let kubelet = tokio::spawn(kubelet(mgd.clone(), probe, healthz_port));
    // the managed cluster's ReplicaSet controller makes the pod the stand-in reports on
    wait(
        "the agent pod created by the managed cluster's controllers",
        120,
        || async {
            let pods: Api<Pod> = Api::namespaced(mgd.clone(), AGENT_NS);
            let list = pods
                .list(&ListParams::default().labels(&format!("app={ADDON}")))
                .await
                .ok()?;
            (!list.items.is_empty()).then_some(())
        },
    )
    .await;

    // 1. The stream comes up: Available True.
    let mut principal = Proc::spawn("principal", &principal_args, Some(Path::new(&hub_path)));
    principal.wait_for_line("principal listening");
    let t0 = Instant::now();
    let up = wait(
        "Available True while the agent's stream is up",
        180,
        || async { available(&hub, &cluster).await.filter(|a| a.0 == "True") },
    )
    .await;
    eprintln!(
        "addon-available: stream up -> {up:?} after {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    assert_eq!(up.1, "ProbeAvailable", "{up:?}");
    let words = wait("AgentConnected True", 60, || async {
        agent_connected(&hub, &cluster)
            .await
            .filter(|c| c.0 == "True")
    })
    .await;
    eprintln!("addon-available: {words:?}");
    assert!(
        words.2.contains(&format!("127.0.0.1:{grpc_port}")),
        "{words:?}"
    );
    if let Some(table) = kubectl_get_addons(&hub_path) {
        eprintln!("{table}");
        assert_eq!(addon_row(&table, &cluster)[2], "True", "{table}");
    }

    // 2. The principal goes away: the agent's stream drops, Available turns False.
    let (st, _) = principal.stop("TERM");
    assert!(st.success(), "principal exit: {st:?}");
    let t0 = Instant::now();
    let down = wait("Available False once the stream is down", 180, || async {
        available(&hub, &cluster).await.filter(|a| a.0 == "False")
    })
    .await;
    eprintln!(
        "addon-available: stream down -> {down:?} after {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    assert_eq!(down.1, "ProbeUnavailable", "{down:?}");
    let words = wait("AgentConnected False, saying where to look", 60, || async {
        agent_connected(&hub, &cluster)
            .await
            .filter(|c| c.0 == "False")
    })
    .await;
    eprintln!("addon-available: {words:?}");
    assert_eq!(words.1, "NotConnected", "{words:?}");
    for want in [
        format!(
            "The argocd-pull agent on {cluster} has no stream to its principal at 127.0.0.1:{grpc_port}"
        ),
        format!("kubectl -n {AGENT_NS} logs deploy/{ADDON}"),
    ] {
        assert!(words.2.contains(&want), "{want}: {words:?}");
    }
    if let Some(table) = kubectl_get_addons(&hub_path) {
        eprintln!("{table}");
        assert_eq!(addon_row(&table, &cluster)[2], "False", "{table}");
    }

    // 3. A principal again: the agent reconnects by itself, Available True again.
    principal = Proc::spawn("principal", &principal_args, Some(Path::new(&hub_path)));
    principal.wait_for_line("principal listening");
    let t0 = Instant::now();
    let again = wait(
        "Available True again after the agent reconnected",
        180,
        || async { available(&hub, &cluster).await.filter(|a| a.0 == "True") },
    )
    .await;
    eprintln!(
        "addon-available: stream back -> {again:?} after {:.1} s",
        t0.elapsed().as_secs_f64()
    );

    kubelet.abort();
    drop(agent);
    drop(principal);
}
