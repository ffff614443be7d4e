//! What the GitOpsCluster and add-on fault tests drive: the real env, the controller as a child
//! process and the hub API server's process.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub use argocd_pull_realenv_faults::{
    ApiServerDown, Every, end_hub_apiserver, retrying_unless, utc,
};
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use serde_json::Value;

/// The `argocd-pull` binary run as the controller.
pub const BIN_ENV: &str = "ARGOCD_PULL_FAULTS_BIN";
/// The fleet's cluster set, and OCM's label that puts a cluster in it.
pub const CLUSTERSET: &str = "gfaults";
pub const CLUSTERSET_LABEL: &str = "cluster.open-cluster-management.io/clusterset";
/// The Placement of each test (in the test's namespace), and its GitOpsCluster.
pub const PLACEMENT: &str = "gfaults";
pub const GC: &str = "gfaults";
/// Clusters in the fleet before the load, and after it (mid-creates) or before it (mid-deletes).
pub const FIRST: usize = 10;
pub const TOTAL: usize = 50;
/// Where the loader pauses until the API server has been killed: the kill always comes mid-load.
pub const PAUSE_AT: usize = 25;
/// How long the API server stays down.
pub const OUTAGE: Duration = Duration::from_secs(10);
/// How long anything may take to converge before a test fails.
pub const CONVERGE: Duration = Duration::from_secs(180);
/// The fixed retry of the view's watches: no backoff of their own in what they measure.
pub const RETRY: Duration = Duration::from_millis(100);
/// The target: converged within this of the API server answering again.
pub const TARGET: Duration = Duration::from_secs(5);

/// One test at a time: each one kills the API server and owns the `gfaults` clusters.
pub static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

pub fn skip(test: &str, why: &str) {
    // stderr directly: libtest does not capture it, so the skip is visible
    let _ = writeln!(std::io::stderr(), "SKIP: faults::{test}: {why}");
}

pub fn cluster(i: usize) -> String {
    format!("gfaults-{i}")
}

pub fn clusters(range: std::ops::Range<usize>) -> BTreeSet<String> {
    range.map(|i| cluster(i + 1)).collect()
}

pub fn ar(api_version: &str, kind: &str, plural: &str) -> ApiResource {
    let (g, v) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(g, v, kind), plural)
}

pub fn managed_clusters() -> ApiResource {
    ar(
        "cluster.open-cluster-management.io/v1",
        "ManagedCluster",
        "managedclusters",
    )
}

pub fn decisions() -> ApiResource {
    ar(
        "cluster.open-cluster-management.io/v1beta1",
        "PlacementDecision",
        "placementdecisions",
    )
}

pub fn gitopsclusters(version: &str) -> ApiResource {
    ar(
        &format!("apps.open-cluster-management.io/{version}"),
        "GitOpsCluster",
        "gitopsclusters",
    )
}

pub fn secrets() -> ApiResource {
    ar("v1", "Secret", "secrets")
}

pub fn dapi(client: &Client, ar: &ApiResource, ns: Option<&str>) -> Api<DynamicObject> {
    match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, ar),
        None => Api::all_with(client.clone(), ar),
    }
}

pub async fn apply(client: &Client, ar: &ApiResource, obj: Value) {
    let name = obj["metadata"]["name"].as_str().unwrap().to_string();
    let ns = obj["metadata"]["namespace"].as_str();
    dapi(client, ar, ns)
        .patch(
            &name,
            &PatchParams::apply("argocd-pull-gitops-faults").force(),
            &Patch::Apply(&obj),
        )
        .await
        .unwrap_or_else(|e| panic!("applying {} {name}: {e}", ar.kind));
}

/// Waits, polling every 500 ms for at most [`CONVERGE`], until `done` (setup and cleanup only,
/// never while something is measured).
pub async fn eventually<F, Fut>(what: &str, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let t0 = Instant::now();
    while !done().await {
        assert!(t0.elapsed() < CONVERGE, "{what}: not within {CONVERGE:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

// ----- the env, the API server, the controller process --------------------------------------

pub struct Real {
    pub hub: Client,
    pub kubeconfig: PathBuf,
    pub realk8s: PathBuf,
    pub bin: PathBuf,
    pub logs: PathBuf,
}

/// The real env, or `None` with a visible SKIP.
pub async fn real(test: &str) -> Option<Real> {
    let Ok(path) = std::env::var("ARGOCD_PULL_E2E_HUB_KUBECONFIG") else {
        skip(test, "ARGOCD_PULL_E2E_HUB_KUBECONFIG is not set");
        return None;
    };
    if std::env::var("ARGOCD_PULL_E2E_DISRUPTIVE").as_deref() != Ok("1") {
        skip(
            test,
            "it kills the hub API server of a shared env; set ARGOCD_PULL_E2E_DISRUPTIVE=1 to run it",
        );
        return None;
    }
    let Some(bin) = std::env::var_os(BIN_ENV) else {
        skip(
            test,
            "it runs the argocd-pull binary: set ARGOCD_PULL_FAULTS_BIN",
        );
        return None;
    };
    let _ = rustls::crypto::ring::default_provider().install_default();
    let kubeconfig = PathBuf::from(path);
    let realk8s = std::env::var_os("REALK8S")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            kubeconfig
                .parent()
                .expect("the hub kubeconfig lies in $REALK8S")
                .to_path_buf()
        });
    let kc = kube::config::Kubeconfig::read_from(&kubeconfig).expect("kubeconfig readable");
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("kubeconfig valid");
    let hub = Client::try_from(config).expect("client");
    let logs =
        std::env::temp_dir().join(format!("argocd-pull-gitops-faults-{}", std::process::id()));
    std::fs::create_dir_all(&logs).unwrap();
    Some(Real {
        hub,
        kubeconfig,
        realk8s,
        bin: PathBuf::from(bin),
        logs,
    })
}

/// `argocd-pull controller` as a child process (killed when dropped).
pub struct Controller {
    pub child: Child,
    pub log: PathBuf,
}

impl Controller {
    pub fn spawn(real: &Real, name: &str) -> Controller {
        let log = real.logs.join(format!("{name}.log"));
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap();
        let child = Command::new(&real.bin)
            .args([
                "controller",
                "--admin-addr",
                "127.0.0.1:0",
                "--leader-elect",
                "false",
            ])
            .env("KUBECONFIG", &real.kubeconfig)
            .env(
                "RUST_LOG",
                std::env::var("ARGOCD_PULL_FAULTS_LOG")
                    .unwrap_or_else(|_| "info,kube_runtime=debug".into()),
            )
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap_or_else(|e| panic!("{}: {e}", real.bin.display()));
        eprintln!(
            "gitops-faults: controller pid {} logs to {}",
            child.id(),
            log.display()
        );
        Controller { child, log }
    }

    pub fn logged(&self, needle: &str) -> bool {
        std::fs::read_to_string(&self.log).is_ok_and(|s| s.contains(needle))
    }

    /// Still running, and it noticed the outage.
    pub fn assert_survived_the_outage(&mut self) {
        self.assert_running();
        assert!(
            self.logged("the API server does not answer"),
            "the controller never saw the API server go away; see {}",
            self.log.display()
        );
    }

    pub fn assert_running(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!(
                "the controller exited ({status}); see {}",
                self.log.display()
            );
        }
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Real {
    /// SIGKILLs the hub kube-apiserver (no drain: every connection reset at once) and waits
    /// until the process is gone. Its pid file is removed so that `up.sh` starts a new one (a
    /// killed process whose parent is gone may stay a zombie, which `kill -0` still finds).
    pub fn kill_hub_apiserver(&self) -> ApiServerDown {
        end_hub_apiserver(&self.realk8s, "-KILL", Duration::ZERO, "gitops-faults")
    }
}

/// Objects that existed before the fault and still exist kept their UID (none was deleted and
/// written again).
pub fn assert_not_recreated(before: &BTreeMap<String, String>, after: &BTreeMap<String, String>) {
    let recreated: Vec<&String> = before
        .iter()
        .filter(|(k, uid)| after.get(*k).is_some_and(|u| u != *uid))
        .map(|(k, _)| k)
        .collect();
    assert!(recreated.is_empty(), "written again: {recreated:?}");
}

pub fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}
