//! The hub kube-apiserver SIGKILLed under load, on the real env (`../shared/realenv`: a real
//! kube-apiserver 1.24 with its own etcd and OCM's hub controllers): the GitOpsCluster controller
//! (v1beta1, Placement → Argo CD cluster secrets) and the `argoCDAgentAddon` automation (v1alpha1:
//! a cluster secret, two ManifestWorks, an AddOnDeploymentConfig and a ManagedClusterAddOn per
//! cluster) converge once the API server answers again, nothing lost and nothing written twice.
//!
//! The controller under test is the shipped binary, `$ARGOCD_PULL_FAULTS_BIN controller` (every
//! hub controller in one process, default configuration), as a child process; its log
//! (`RUST_LOG=info,kube_runtime=debug`, or `ARGOCD_PULL_FAULTS_LOG`) goes to a file under the temp
//! dir, whose path is printed. Gates, each with a visible `SKIP:` line: the hub's admin kubeconfig
//! in `ARGOCD_PULL_E2E_HUB_KUBECONFIG`, `ARGOCD_PULL_E2E_DISRUPTIVE=1` (the env is shared; the
//! API server is brought back with `$REALK8S/up.sh`, also when a test fails) and
//! `ARGOCD_PULL_FAULTS_BIN`. `hack/e2e-real.sh --disruptive gitops` sets all three.
//!
//! The fleet: ManagedClusters `gfaults-1..50` in a cluster set of their own (`gfaults`), so that
//! the other suites' Placements (sets `default`, `faults`) never select them, and a Placement
//! over that set in the test's namespace; OCM's placement controller writes its decision (it
//! deletes any decision written by someone else). The load is clusters joining (created) or
//! leaving (deleted) the fleet. Each test removes its GitOpsCluster, clusters and namespaces at
//! the end, and what an interrupted run left at the start.
//!
//! What is measured comes from watches (reflectors with a fixed 100 ms retry, lists read from
//! etcd), not from polling LISTs: a restarted API server is slow for its first seconds and reads
//! from etcd every 100 ms would compete with the controller for it. Only the wait for the API
//! server's return polls (one `limit=1` LIST every 100 ms while it is down). OCM's placement and
//! registration controllers recover from the same outage at their own pace: each figure is given
//! from the API server's return and, where OCM had not caught up by then, from when it had.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use argocd_pull_gitops::addon;
use futures::StreamExt;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams,
};
use kube::runtime::reflector::{self, Store};
use kube::runtime::utils::Backoff;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

/// The `argocd-pull` binary run as the controller.
const BIN_ENV: &str = "ARGOCD_PULL_FAULTS_BIN";
/// The fleet's cluster set, and OCM's label that puts a cluster in it.
const CLUSTERSET: &str = "gfaults";
const CLUSTERSET_LABEL: &str = "cluster.open-cluster-management.io/clusterset";
/// The Placement of each test (in the test's namespace), and its GitOpsCluster.
const PLACEMENT: &str = "gfaults";
const GC: &str = "gfaults";
/// Clusters in the fleet before the load, and after it (mid-creates) or before it (mid-deletes).
const FIRST: usize = 10;
const TOTAL: usize = 50;
/// Where the loader pauses until the API server has been killed: the kill always comes mid-load.
const PAUSE_AT: usize = 25;
/// How long the API server stays down.
const OUTAGE: Duration = Duration::from_secs(10);
/// How long anything may take to converge before a test fails.
const CONVERGE: Duration = Duration::from_secs(180);
/// The fixed retry of the view's watches: no backoff of their own in what they measure.
const RETRY: Duration = Duration::from_millis(100);
/// The target: converged within this of the API server answering again.
const TARGET: Duration = Duration::from_secs(5);

/// One test at a time: each one kills the API server and owns the `gfaults` clusters.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn skip(test: &str, why: &str) {
    // stderr directly: libtest does not capture it, so the skip is visible
    let _ = writeln!(std::io::stderr(), "SKIP: faults::{test}: {why}");
}

fn cluster(i: usize) -> String {
    format!("gfaults-{i}")
}

fn clusters(range: std::ops::Range<usize>) -> BTreeSet<String> {
    range.map(|i| cluster(i + 1)).collect()
}

fn ar(api_version: &str, kind: &str, plural: &str) -> ApiResource {
    let (g, v) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(g, v, kind), plural)
}

fn managed_clusters() -> ApiResource {
    ar(
        "cluster.open-cluster-management.io/v1",
        "ManagedCluster",
        "managedclusters",
    )
}

fn decisions() -> ApiResource {
    ar(
        "cluster.open-cluster-management.io/v1beta1",
        "PlacementDecision",
        "placementdecisions",
    )
}

fn gitopsclusters(version: &str) -> ApiResource {
    ar(
        &format!("apps.open-cluster-management.io/{version}"),
        "GitOpsCluster",
        "gitopsclusters",
    )
}

fn secrets() -> ApiResource {
    ar("v1", "Secret", "secrets")
}

fn dapi(client: &Client, ar: &ApiResource, ns: Option<&str>) -> Api<DynamicObject> {
    match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, ar),
        None => Api::all_with(client.clone(), ar),
    }
}

async fn apply(client: &Client, ar: &ApiResource, obj: Value) {
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

fn is_code<T>(r: &kube::Result<T>, code: u16) -> bool {
    matches!(r, Err(kube::Error::Api(s)) if s.code == code)
}

/// Runs `f` until it succeeds (the API server may be down), for up to [`CONVERGE`].
async fn retrying<F, Fut>(what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = kube::Result<()>>,
{
    let t0 = Instant::now();
    loop {
        match f().await {
            Ok(()) => return,
            Err(e) if t0.elapsed() < CONVERGE => {
                tracing::debug!(what, error = %e, "retrying");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("{what}: {e}"),
        }
    }
}

/// Waits, polling every 500 ms for at most [`CONVERGE`], until `done` (setup and cleanup only,
/// never while something is measured).
async fn eventually<F, Fut>(what: &str, mut done: F)
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

struct Real {
    hub: Client,
    kubeconfig: PathBuf,
    realk8s: PathBuf,
    bin: PathBuf,
    logs: PathBuf,
}

/// The real env, or `None` with a visible SKIP.
async fn real(test: &str) -> Option<Real> {
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
struct Controller {
    child: Child,
    log: PathBuf,
}

impl Controller {
    fn spawn(real: &Real, name: &str) -> Controller {
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

    fn logged(&self, needle: &str) -> bool {
        std::fs::read_to_string(&self.log).is_ok_and(|s| s.contains(needle))
    }

    fn assert_running(&mut self) {
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

/// While it lives the hub API server is down; dropping it runs `$REALK8S/up.sh` (also when a
/// test fails), which starts what is not running and waits until the env answers.
struct ApiServerDown {
    up: PathBuf,
}

impl Drop for ApiServerDown {
    fn drop(&mut self) {
        let t0 = Instant::now();
        // up.sh gives the API server 60 s; on a busy machine a start can take longer, and
        // up.sh is idempotent: up to three tries
        let mut out = up_without_inherited_fds(&self.up).output();
        for _ in 0..2 {
            if matches!(&out, Ok(o) if o.status.success()) {
                break;
            }
            out = up_without_inherited_fds(&self.up).output();
        }
        match out {
            Ok(o) if o.status.success() => {
                eprintln!("gitops-faults: up.sh done after {:?}", t0.elapsed())
            }
            Ok(o) => eprintln!(
                "gitops-faults: {} failed: {}{}",
                self.up.display(),
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ),
            Err(e) => eprintln!("gitops-faults: cannot run {}: {e}", self.up.display()),
        }
    }
}

/// `up.sh` with every descriptor above stderr closed: the API server it starts outlives the
/// test and must not inherit the `flock` on the shared env's lock file.
fn up_without_inherited_fds(up: &Path) -> Command {
    let mut c = Command::new("bash");
    c.arg("-c")
        .arg(
            r#"for f in /proc/$$/fd/*; do n=${f##*/}; [ "$n" -gt 2 ] && eval "exec $n>&-"; done 2>/dev/null; exec "$0" "$@""#,
        )
        .arg(up);
    c
}

fn is_zombie(proc: &Path) -> bool {
    std::fs::read_to_string(proc.join("stat"))
        .map(|s| {
            s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(true)
}

impl Real {
    /// SIGKILLs the hub kube-apiserver (no drain: every connection reset at once) and waits
    /// until the process is gone. Its pid file is removed so that `up.sh` starts a new one (a
    /// killed process whose parent is gone may stay a zombie, which `kill -0` still finds).
    fn kill_hub_apiserver(&self) -> ApiServerDown {
        let pidfile = self.realk8s.join("run/apiserver-hub.pid");
        let pid = std::fs::read_to_string(&pidfile)
            .unwrap_or_else(|e| panic!("{}: {e}", pidfile.display()))
            .trim()
            .to_string();
        let guard = ApiServerDown {
            up: self.realk8s.join("up.sh"),
        };
        let status = Command::new("kill").args(["-KILL", &pid]).status().unwrap();
        assert!(status.success(), "kill -KILL {pid}");
        let proc = PathBuf::from(format!("/proc/{pid}"));
        let deadline = Instant::now() + Duration::from_secs(30);
        while proc.exists() && !is_zombie(&proc) {
            assert!(Instant::now() < deadline, "kube-apiserver {pid} still runs");
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = std::fs::remove_file(&pidfile);
        eprintln!(
            "gitops-faults: {} hub kube-apiserver {pid} killed (SIGKILL)",
            utc()
        );
        guard
    }
}

// ----- what the test sees: watches ------------------------------------------------------------

/// A fixed retry interval.
struct Every(Duration);

impl Iterator for Every {
    type Item = Duration;
    fn next(&mut self) -> Option<Duration> {
        Some(self.0)
    }
}

impl Backoff for Every {
    fn reset(&mut self) {}
}

/// What to watch: a name for it, the resource, a namespace (`None`: all), a label selector.
struct Watched {
    name: &'static str,
    ar: ApiResource,
    ns: Option<String>,
    labels: String,
}

/// Objects as the watches last delivered them.
struct View {
    stores: BTreeMap<&'static str, Store<DynamicObject>>,
    /// Bumped on every watch event.
    changed: watch::Receiver<u64>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for View {
    fn drop(&mut self) {
        self.tasks.iter().for_each(JoinHandle::abort);
    }
}

impl View {
    /// Starts the watches; returns once each has listed.
    async fn start(client: &Client, watched: Vec<Watched>) -> View {
        let (bump, changed) = watch::channel(0u64);
        let mut stores = BTreeMap::new();
        let mut tasks = Vec::new();
        for w in watched {
            let writer = reflector::store::Writer::new(w.ar.clone());
            let store = writer.as_reader();
            let api = dapi(client, &w.ar, w.ns.as_deref());
            // read from etcd when (re-)listing: a restarted API server's watch cache is not
            // filled yet
            let mut config =
                watcher::Config::default().list_semantic(watcher::ListSemantic::MostRecent);
            if !w.labels.is_empty() {
                config = config.labels(&w.labels);
            }
            let stream = watcher(api, config).backoff(Every(RETRY)).reflect(writer);
            let bump = bump.clone();
            tasks.push(tokio::spawn(async move {
                let mut stream = std::pin::pin!(stream);
                while let Some(ev) = stream.next().await {
                    if ev.is_ok() {
                        bump.send_modify(|n| *n += 1);
                    }
                }
            }));
            stores.insert(w.name, store);
        }
        let view = View {
            stores,
            changed,
            tasks,
        };
        let ready = futures::future::join_all(view.stores.values().map(|s| s.wait_until_ready()));
        tokio::time::timeout(CONVERGE, ready)
            .await
            .expect("the view's watches never listed");
        view
    }

    fn objects(&self, name: &str) -> Vec<Arc<DynamicObject>> {
        self.stores[name].state()
    }

    /// Waits until `check` holds (checked after every change, at most every 10 ms); returns
    /// when it first did. Panics with `what` and the last check after [`CONVERGE`].
    async fn until<T: std::fmt::Display>(
        &self,
        what: &str,
        mut check: impl FnMut(&Self) -> (bool, T),
    ) -> Instant {
        let mut changed = self.changed.clone();
        let deadline = tokio::time::Instant::now() + CONVERGE;
        loop {
            changed.borrow_and_update();
            let (done, last) = check(self);
            if done {
                eprintln!("gitops-faults: {} {what}: {last}", utc());
                return Instant::now();
            }
            let next = tokio::time::timeout_at(deadline, changed.changed()).await;
            assert!(
                matches!(next, Ok(Ok(()))),
                "{what}: not within {CONVERGE:?}: {last}"
            );
            // let a burst of events land before checking again
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The clusters the Placement's decisions list.
    fn decided(&self) -> BTreeSet<String> {
        self.objects("decisions")
            .iter()
            .flat_map(|d| {
                d.data["status"]["decisions"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            })
            .filter_map(|d| d["clusterName"].as_str().map(str::to_string))
            .collect()
    }

    /// The fleet's ManagedClusters (being deleted or not).
    fn clusters(&self) -> BTreeSet<String> {
        self.objects("clusters")
            .iter()
            .map(|c| c.name_any())
            .collect()
    }

    /// `kind/namespace/name` → UID of every object of `names` (view names).
    fn uids(&self, names: &[&str]) -> BTreeMap<String, String> {
        names
            .iter()
            .flat_map(|n| {
                self.objects(n).into_iter().map(move |o| {
                    (
                        format!("{n}/{}/{}", o.namespace().unwrap_or_default(), o.name_any()),
                        o.uid().unwrap_or_default(),
                    )
                })
            })
            .collect()
    }

    fn gitopscluster(&self) -> Option<Value> {
        self.objects("gc").first().map(|g| g.data.clone())
    }
}

/// Objects that existed before the fault and still exist kept their UID (none was deleted and
/// written again).
fn assert_not_recreated(before: &BTreeMap<String, String>, after: &BTreeMap<String, String>) {
    let recreated: Vec<&String> = before
        .iter()
        .filter(|(k, uid)| after.get(*k).is_some_and(|u| u != *uid))
        .map(|(k, _)| k)
        .collect();
    assert!(recreated.is_empty(), "written again: {recreated:?}");
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// The wall-clock time, to find a moment in the controller's log.
fn utc() -> String {
    jiff::Timestamp::now().to_string()
}

// ----- the fleet --------------------------------------------------------------------------------

/// The test's namespace (its GitOpsCluster, Placement and, for v1beta1, the Argo CD namespace
/// with a stand-in server Service) and the `gfaults` clusters.
struct Scene {
    hub: Client,
    ns: String,
}

impl Scene {
    /// Removes what an interrupted run left, then makes the namespace, the cluster set, its
    /// binding and the Placement.
    async fn new(real: &Real, ns: &str) -> Scene {
        let scene = Scene {
            hub: real.hub.clone(),
            ns: ns.to_string(),
        };
        let crd: Value = serde_saphyr::from_str(argocd_pull_api::crds::GITOPSCLUSTER).unwrap();
        apply(
            &scene.hub,
            &ar(
                "apiextensions.k8s.io/v1",
                "CustomResourceDefinition",
                "customresourcedefinitions",
            ),
            crd,
        )
        .await;
        scene.delete_gitopscluster().await;
        scene.delete_all_clusters().await;
        let namespaces = dapi(&scene.hub, &ar("v1", "Namespace", "namespaces"), None);
        for n in clusters(0..TOTAL).iter().chain([&scene.ns]) {
            eventually(&format!("namespace {n} not terminating"), || async {
                namespaces
                    .get_opt(n)
                    .await
                    .ok()
                    .flatten()
                    .is_none_or(|o| o.metadata.deletion_timestamp.is_none())
            })
            .await;
        }
        apply(
            &scene.hub,
            &ar("v1", "Namespace", "namespaces"),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
        )
        .await;
        apply(
            &scene.hub,
            &ar(
                "cluster.open-cluster-management.io/v1beta2",
                "ManagedClusterSet",
                "managedclustersets",
            ),
            json!({"apiVersion": "cluster.open-cluster-management.io/v1beta2",
                "kind": "ManagedClusterSet", "metadata": {"name": CLUSTERSET},
                "spec": {"clusterSelector": {"selectorType": "ExclusiveClusterSetLabel"}}}),
        )
        .await;
        apply(
            &scene.hub,
            &ar(
                "cluster.open-cluster-management.io/v1beta2",
                "ManagedClusterSetBinding",
                "managedclustersetbindings",
            ),
            json!({"apiVersion": "cluster.open-cluster-management.io/v1beta2",
                "kind": "ManagedClusterSetBinding",
                "metadata": {"name": CLUSTERSET, "namespace": ns},
                "spec": {"clusterSet": CLUSTERSET}}),
        )
        .await;
        // no agent runs for these clusters: OCM taints them unreachable
        apply(
            &scene.hub,
            &ar(
                "cluster.open-cluster-management.io/v1beta1",
                "Placement",
                "placements",
            ),
            json!({"apiVersion": "cluster.open-cluster-management.io/v1beta1", "kind": "Placement",
                "metadata": {"name": PLACEMENT, "namespace": ns},
                "spec": {"clusterSets": [CLUSTERSET], "tolerations": [
                    {"key": "cluster.open-cluster-management.io/unreachable", "operator": "Exists"},
                    {"key": "cluster.open-cluster-management.io/unavailable", "operator": "Exists"}]}}),
        )
        .await;
        scene
    }

    /// The Argo CD server Service the v1beta1 controller looks for (a stand-in: nothing serves
    /// it).
    async fn argo_server(&self) {
        apply(
            &self.hub,
            &ar("v1", "Service", "services"),
            json!({"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "gfaults-argocd-server", "namespace": self.ns, "labels": {
                    "app.kubernetes.io/component": "server", "app.kubernetes.io/part-of": "argocd"}},
                "spec": {"ports": [{"name": "https", "port": 443, "targetPort": 8080}]}}),
        )
        .await;
    }

    /// Creates clusters `range` (0-based: `gfaults-<i+1>`), five at once, each with its
    /// namespace first (as OCM's registration would; the addon writes into it), retrying while
    /// the API server is down.
    async fn create_clusters(&self, range: std::ops::Range<usize>) {
        let namespaces = dapi(&self.hub, &ar("v1", "Namespace", "namespaces"), None);
        let mcs = dapi(&self.hub, &managed_clusters(), None);
        futures::stream::iter(range)
            .map(|i| {
                let (namespaces, mcs) = (namespaces.clone(), mcs.clone());
                async move {
                    let name = cluster(i + 1);
                    let ns: DynamicObject = serde_json::from_value(json!({
                        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}))
                    .unwrap();
                    let mc: DynamicObject = serde_json::from_value(json!({
                        "apiVersion": "cluster.open-cluster-management.io/v1",
                        "kind": "ManagedCluster",
                        "metadata": {"name": name, "labels": {CLUSTERSET_LABEL: CLUSTERSET}},
                        "spec": {"hubAcceptsClient": true}}))
                    .unwrap();
                    for (api, obj) in [(&namespaces, &ns), (&mcs, &mc)] {
                        retrying(
                            &format!("create {} {name}", obj.types.as_ref().unwrap().kind),
                            || async {
                                let r = api.create(&PostParams::default(), obj).await;
                                if is_code(&r, 409) {
                                    return Ok(());
                                }
                                r.map(|_| ())
                            },
                        )
                        .await;
                    }
                }
            })
            .buffer_unordered(5)
            .collect::<Vec<()>>()
            .await;
    }

    /// Deletes ManagedClusters `range` (0-based), five at once, retrying while the API server
    /// is down; then removes OCM's finalizers from them, so that they go at once rather than
    /// when OCM's registration controller has recovered from the outage too (50 to 80 s on the
    /// real env): what is measured is this controller's recovery. (No finalizer can be added
    /// once the deletion started; the test deletes the clusters' namespaces at the end.)
    async fn delete_clusters(&self, range: std::ops::Range<usize>) {
        let mcs = dapi(&self.hub, &managed_clusters(), None);
        futures::stream::iter(range)
            .map(|i| {
                let mcs = mcs.clone();
                async move {
                    let name = cluster(i + 1);
                    retrying(&format!("delete ManagedCluster {name}"), || async {
                        let r = mcs.delete(&name, &DeleteParams::default()).await;
                        if is_code(&r, 404) {
                            return Ok(());
                        }
                        r.map(|_| ())
                    })
                    .await;
                    let strip = json!({"metadata": {"finalizers": null}});
                    retrying(&format!("finalizers of ManagedCluster {name}"), || async {
                        let r = mcs
                            .patch(&name, &PatchParams::default(), &Patch::Merge(&strip))
                            .await;
                        if is_code(&r, 404) {
                            return Ok(());
                        }
                        r.map(|_| ())
                    })
                    .await;
                }
            })
            .buffer_unordered(5)
            .collect::<Vec<()>>()
            .await;
    }

    /// Deletes every ManagedCluster of the `gfaults` set and waits until they are gone.
    async fn delete_all_clusters(&self) {
        let mcs = dapi(&self.hub, &managed_clusters(), None);
        let lp = ListParams::default().labels(&format!("{CLUSTERSET_LABEL}={CLUSTERSET}"));
        let left = mcs
            .list_metadata(&lp)
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        for m in &left {
            let _ = mcs.delete(&m.name_any(), &DeleteParams::default()).await;
        }
        eventually("the gfaults ManagedClusters deleted", || async {
            mcs.list_metadata(&lp)
                .await
                .is_ok_and(|l| l.items.is_empty())
        })
        .await;
    }

    /// Deletes the GitOpsCluster (a running controller removes the addon's finalizer after
    /// cleaning up) and waits until it is gone; without a controller, strips the finalizer.
    async fn delete_gitopscluster(&self) {
        let gcs = dapi(&self.hub, &gitopsclusters("v1beta1"), Some(&self.ns));
        if gcs.get_opt(GC).await.ok().flatten().is_none() {
            return;
        }
        let _ = gcs.delete(GC, &DeleteParams::default()).await;
        let t0 = Instant::now();
        while gcs.get_opt(GC).await.ok().flatten().is_some() {
            if t0.elapsed() > Duration::from_secs(60) {
                let strip = json!({"metadata": {"finalizers": null}});
                let _ = gcs
                    .patch(GC, &PatchParams::default(), &Patch::Merge(&strip))
                    .await;
            }
            assert!(t0.elapsed() < CONVERGE, "GitOpsCluster {GC} not deleted");
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Removes everything: the GitOpsCluster (first, while the controller runs), the clusters,
    /// their namespaces, the test's namespace and the cluster set.
    async fn finish(&self, controller: Controller) {
        self.delete_gitopscluster().await;
        drop(controller);
        self.delete_all_clusters().await;
        let namespaces = dapi(&self.hub, &ar("v1", "Namespace", "namespaces"), None);
        for n in clusters(0..TOTAL).iter().chain([&self.ns]) {
            let _ = namespaces.delete(n, &DeleteParams::default()).await;
        }
        let _ = dapi(
            &self.hub,
            &ar(
                "cluster.open-cluster-management.io/v1beta2",
                "ManagedClusterSet",
                "managedclustersets",
            ),
            None,
        )
        .delete(CLUSTERSET, &DeleteParams::default())
        .await;
    }

    /// Polls (every 100 ms) until the API server answers a list of the test's GitOpsClusters;
    /// returns when it first did.
    async fn until_answers(&self) -> Instant {
        let api = dapi(&self.hub, &gitopsclusters("v1beta1"), Some(&self.ns));
        loop {
            if api
                .list_metadata(&ListParams::default().limit(1))
                .await
                .is_ok()
            {
                return Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The view of a test: the fleet's ManagedClusters, the Placement's decisions, the
    /// GitOpsCluster, and `more`.
    async fn view(&self, version: &str, more: Vec<Watched>) -> View {
        let mut watched = vec![
            Watched {
                name: "clusters",
                ar: managed_clusters(),
                ns: None,
                labels: format!("{CLUSTERSET_LABEL}={CLUSTERSET}"),
            },
            Watched {
                name: "decisions",
                ar: decisions(),
                ns: Some(self.ns.clone()),
                labels: format!("{}={PLACEMENT}", argocd_pull_api::names::LABEL_PLACEMENT),
            },
            Watched {
                name: "gc",
                ar: gitopsclusters(version),
                ns: Some(self.ns.clone()),
                labels: String::new(),
            },
        ];
        watched.extend(more);
        View::start(&self.hub, watched).await
    }
}

/// Kills the hub API server, lets `killed` go, keeps the API server down for [`OUTAGE`] (the
/// length of the fault, not a synchronisation), starts it again and returns when it first
/// answered, with `up.sh` (still waiting for the rest of the env).
async fn outage(real: &Real, scene: &Scene, killed: &Notify) -> (Instant, JoinHandle<()>) {
    let down = tokio::task::block_in_place(|| real.kill_hub_apiserver());
    killed.notify_one();
    tokio::time::sleep(OUTAGE).await;
    eprintln!("gitops-faults: {} starting the hub API server", utc());
    let up = tokio::task::spawn_blocking(move || drop(down));
    let back = scene.until_answers().await;
    eprintln!("gitops-faults: {} the hub API server answers again", utc());
    (back, up)
}

// ----- GitOpsCluster v1beta1 --------------------------------------------------------------------

const V1BETA1_NS_CREATE: &str = "gfaults-create";
const V1BETA1_NS_DELETE: &str = "gfaults-delete";

/// The cluster secret of `cluster` (the default ManagedServiceAccount's name).
fn secret_name(cluster: &str) -> String {
    argocd_pull_gitops::secrets::cluster_secret_name(
        cluster,
        argocd_pull_gitops::secrets::DEFAULT_MANAGED_SERVICE_ACCOUNT,
    )
}

/// The GitOpsCluster's secrets as watched: name → the cluster it names.
fn owned_secrets(view: &View, ns: &str) -> BTreeMap<String, String> {
    let owner = format!("{ns}/{GC}");
    view.objects("secrets")
        .iter()
        .filter(|s| {
            s.annotations()
                .get(argocd_pull_gitops::secrets::ANNOTATION_GITOPSCLUSTER)
                == Some(&owner)
        })
        .map(|s| {
            (
                s.name_any(),
                s.labels()
                    .get(argocd_pull_api::names::LABEL_CLUSTER_NAME)
                    .cloned()
                    .unwrap_or_default(),
            )
        })
        .collect()
}

/// Exactly the secrets of `want`, each naming its cluster.
fn has_secrets_of(view: &View, ns: &str, want: &BTreeSet<String>) -> (bool, String) {
    let got = owned_secrets(view, ns);
    let expected: BTreeMap<String, String> =
        want.iter().map(|c| (secret_name(c), c.clone())).collect();
    let missing = expected.keys().filter(|k| !got.contains_key(*k)).count();
    let extra = got.keys().filter(|k| !expected.contains_key(*k)).count();
    (
        got == expected,
        format!(
            "{} secrets, {missing} missing, {extra} not wanted",
            got.len()
        ),
    )
}

/// The GitOpsCluster's status says every cluster of `want` is registered.
fn status_lists(view: &View, ns: &str, want: &BTreeSet<String>) -> (bool, String) {
    let names: Vec<String> = want.iter().cloned().collect();
    let expected = argocd_pull_gitops::status::success_message(&names, ns);
    let Some(gc) = view.gitopscluster() else {
        return (false, "no GitOpsCluster".into());
    };
    let phase = gc["status"]["phase"].as_str().unwrap_or_default();
    let message = gc["status"]["message"].as_str().unwrap_or_default();
    (
        phase == "successful" && message == expected,
        format!("phase {phase:?}, message {message:.200}"),
    )
}

async fn v1beta1_scene(real: &Real, ns: &str) -> (Scene, View) {
    let scene = Scene::new(real, ns).await;
    scene.argo_server().await;
    apply(
        &scene.hub,
        &gitopsclusters("v1beta1"),
        json!({"apiVersion": "apps.open-cluster-management.io/v1beta1", "kind": "GitOpsCluster",
            "metadata": {"name": GC, "namespace": ns},
            "spec": {"argoServer": {"argoNamespace": ns},
                     "placementRef": {"kind": "Placement", "name": PLACEMENT}}}),
    )
    .await;
    let view = scene
        .view(
            "v1beta1",
            vec![Watched {
                name: "secrets",
                ar: secrets(),
                ns: Some(ns.to_string()),
                labels: format!(
                    "{}=cluster",
                    argocd_pull_api::names::LABEL_ARGOCD_SECRET_TYPE
                ),
            }],
        )
        .await;
    (scene, view)
}

/// A GitOpsCluster (v1beta1) over a Placement of the `gfaults` set, 10 clusters registered;
/// while 40 more clusters join, the hub API server is SIGKILLed for [`OUTAGE`]. After it answers
/// again: every cluster has its Argo CD cluster secret, the GitOpsCluster's status lists all 50,
/// and the secrets of before the kill kept their UIDs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gitopscluster_recovers_after_apiserver_kill_mid_creates() {
    const TEST: &str = "gitopscluster_recovers_after_apiserver_kill_mid_creates";
    let Some(real) = real(TEST).await else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let ns = V1BETA1_NS_CREATE;
    let (scene, view) = v1beta1_scene(&real, ns).await;
    let mut ctl = Controller::spawn(&real, "gitopscluster-creates");
    scene.create_clusters(0..FIRST).await;
    let first = clusters(0..FIRST);
    view.until("the first 10 registered", |v| has_secrets_of(v, ns, &first))
        .await;

    let all = clusters(0..TOTAL);
    let killed = Notify::new();
    let mut loaded = None;
    let mut before = BTreeMap::new();
    let mut back = None;
    tokio::join!(
        async {
            scene.create_clusters(FIRST..PAUSE_AT).await;
            killed.notified().await;
            scene.create_clusters(PAUSE_AT..TOTAL).await;
            loaded = Some(Instant::now());
        },
        async {
            view.until("secrets of the clusters joining", |v| {
                let n = owned_secrets(v, ns).len();
                (n >= FIRST + 5, n)
            })
            .await;
            before = view.uids(&["secrets"]);
            back = Some(outage(&real, &scene, &killed).await);
        }
    );
    let (back, up) = back.unwrap();
    let at_kill = before.len();
    assert!(
        at_kill < TOTAL,
        "the kill came after the controller had finished"
    );
    let decided_at = view
        .until("OCM's decision lists the 50", |v| {
            let d = v.decided();
            (d == all, d.len())
        })
        .await;
    let secrets_at = view
        .until("every cluster secret", |v| has_secrets_of(v, ns, &all))
        .await;
    let status_at = view
        .until("the GitOpsCluster's status", |v| status_lists(v, ns, &all))
        .await;
    ctl.assert_running();
    assert!(
        ctl.logged("the API server does not answer"),
        "the controller never saw the API server go away; see {}",
        ctl.log.display()
    );
    up.await.unwrap();
    // confirmed by a fresh read
    let listed: BTreeMap<String, String> =
        Api::<k8s_openapi::api::core::v1::Secret>::namespaced(scene.hub.clone(), ns)
            .list(&ListParams::default().labels(argocd_pull_api::names::LABEL_ACM_CLUSTER))
            .await
            .unwrap()
            .items
            .into_iter()
            .map(|s| {
                (
                    format!("secrets/{ns}/{}", s.name_any()),
                    s.metadata.uid.unwrap_or_default(),
                )
            })
            .collect();
    let want: BTreeSet<String> = all
        .iter()
        .map(|c| format!("secrets/{ns}/{}", secret_name(c)))
        .collect();
    assert_eq!(listed.keys().cloned().collect::<BTreeSet<_>>(), want);
    assert_not_recreated(&before, &listed);
    let loaded = loaded.expect("the loader finished");
    let from = back.max(decided_at);
    eprintln!(
        "gitops-faults: RECOVERY gitopscluster creates: {at_kill} of {TOTAL} cluster secrets at \
         the kill; the last ManagedCluster created {:.2} s and OCM's decision complete {:.2} s \
         after the API server answered again; cluster secrets converged {:.2} s, the status {:.2} \
         s after the API server answered again ({:.2} s / {:.2} s after the later of that and the \
         decision)",
        secs(loaded.saturating_duration_since(back)),
        secs(decided_at.saturating_duration_since(back)),
        secs(secrets_at.saturating_duration_since(back)),
        secs(status_at.saturating_duration_since(back)),
        secs(secrets_at.saturating_duration_since(from)),
        secs(status_at.saturating_duration_since(from)),
    );
    report_target(
        &ctl,
        status_at.max(secrets_at).saturating_duration_since(from),
    );
    drop(view);
    scene.finish(ctl).await;
}

/// A GitOpsCluster (v1beta1) with 50 clusters registered; while 40 of the ManagedClusters are
/// deleted, the hub API server is SIGKILLed for [`OUTAGE`]. After it answers again: the secrets of
/// the 40 are gone (the default policy: a secret goes with its ManagedCluster), the 10 others
/// kept theirs (same UIDs), the status lists the 10.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gitopscluster_recovers_after_apiserver_kill_mid_deletes() {
    const TEST: &str = "gitopscluster_recovers_after_apiserver_kill_mid_deletes";
    let Some(real) = real(TEST).await else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let ns = V1BETA1_NS_DELETE;
    let (scene, view) = v1beta1_scene(&real, ns).await;
    let mut ctl = Controller::spawn(&real, "gitopscluster-deletes");
    scene.create_clusters(0..TOTAL).await;
    let all = clusters(0..TOTAL);
    view.until("the 50 registered", |v| has_secrets_of(v, ns, &all))
        .await;
    let kept = clusters(0..FIRST);
    let before: BTreeMap<String, String> = view
        .uids(&["secrets"])
        .into_iter()
        .filter(|(k, _)| {
            kept.iter()
                .any(|c| k.ends_with(&format!("/{}", secret_name(c))))
        })
        .collect();
    assert_eq!(before.len(), FIRST);

    let killed = Notify::new();
    let mut unloaded = None;
    let mut at_kill = 0;
    let mut back = None;
    tokio::join!(
        async {
            scene.delete_clusters(FIRST..PAUSE_AT).await;
            killed.notified().await;
            scene.delete_clusters(PAUSE_AT..TOTAL).await;
            unloaded = Some(Instant::now());
        },
        async {
            view.until("secrets of the clusters leaving", |v| {
                let n = owned_secrets(v, ns).len();
                (n <= TOTAL - 5, n)
            })
            .await;
            at_kill = owned_secrets(&view, ns).len();
            back = Some(outage(&real, &scene, &killed).await);
        }
    );
    let (back, up) = back.unwrap();
    assert!(
        at_kill > FIRST,
        "the kill came after the controller had finished"
    );
    let gone_at = view
        .until("the 40 ManagedClusters gone", |v| {
            let c = v.clusters();
            (c == kept, c.len())
        })
        .await;
    let secrets_at = view
        .until("only the 10 secrets left", |v| has_secrets_of(v, ns, &kept))
        .await;
    let status_at = view
        .until("the GitOpsCluster's status", |v| status_lists(v, ns, &kept))
        .await;
    ctl.assert_running();
    assert!(
        ctl.logged("the API server does not answer"),
        "the controller never saw the API server go away; see {}",
        ctl.log.display()
    );
    up.await.unwrap();
    let listed: BTreeMap<String, String> =
        Api::<k8s_openapi::api::core::v1::Secret>::namespaced(scene.hub.clone(), ns)
            .list(&ListParams::default().labels(argocd_pull_api::names::LABEL_ACM_CLUSTER))
            .await
            .unwrap()
            .items
            .into_iter()
            .map(|s| {
                (
                    format!("secrets/{ns}/{}", s.name_any()),
                    s.metadata.uid.unwrap_or_default(),
                )
            })
            .collect();
    assert_eq!(listed.len(), FIRST, "{listed:?}");
    assert_not_recreated(&before, &listed);
    assert!(before.keys().all(|k| listed.contains_key(k)));
    let unloaded = unloaded.expect("the loader finished");
    let from = back.max(gone_at);
    eprintln!(
        "gitops-faults: RECOVERY gitopscluster deletes: {at_kill} of {TOTAL} cluster secrets at \
         the kill; the last delete {:.2} s and the last ManagedCluster gone {:.2} s after the API \
         server answered again; the 40 secrets removed {:.2} s, \
         the status {:.2} s after the API server answered again ({:.2} s / {:.2} s after the \
         later of that and the clusters gone)",
        secs(unloaded.saturating_duration_since(back)),
        secs(gone_at.saturating_duration_since(back)),
        secs(secrets_at.saturating_duration_since(back)),
        secs(status_at.saturating_duration_since(back)),
        secs(secrets_at.saturating_duration_since(from)),
        secs(status_at.saturating_duration_since(from)),
    );
    report_target(
        &ctl,
        status_at.max(secrets_at).saturating_duration_since(from),
    );
    drop(view);
    scene.finish(ctl).await;
}

/// Says whether the controller's part met the ≤ 5 s target (a visible line, not an assertion:
/// the figure depends on the machine's load; docs/reliability.md records it).
fn report_target(ctl: &Controller, took: Duration) {
    if took > TARGET {
        eprintln!(
            "gitops-faults: TARGET MISSED: {:.2} s > {TARGET:?}; see {}",
            secs(took),
            ctl.log.display()
        );
    }
}

// ----- argoCDAgentAddon (v1alpha1) --------------------------------------------------------------

const ADDON_NS: &str = "gfaults-addon";
const AGENT_NS: &str = "gfaults-agent";

/// What the addon automation writes per cluster, by view name, namespace and name.
fn addon_objects(ns: &str, of: &BTreeSet<String>) -> BTreeSet<(String, String, String)> {
    let mut out = BTreeSet::new();
    for c in of {
        out.insert(("secrets".into(), ns.into(), format!("cluster-{c}")));
        out.insert(("addons".into(), c.clone(), addon::ADDON_NAME.into()));
        out.insert(("configs".into(), c.clone(), addon::ADDON_CONFIG.into()));
        out.insert(("works".into(), c.clone(), addon::CA_WORK.into()));
        out.insert((
            "works".into(),
            c.clone(),
            addon::desired::cr_work_name(ns, GC),
        ));
    }
    out
}

const ADDON_VIEWS: [&str; 4] = ["secrets", "addons", "configs", "works"];

/// The per-cluster objects the view holds (the hub-wide secrets left out).
fn per_cluster(view: &View, ns: &str) -> BTreeSet<(String, String, String)> {
    ADDON_VIEWS
        .iter()
        .flat_map(|n| {
            view.objects(n).into_iter().filter_map(move |o| {
                let name = o.name_any();
                if *n == "secrets" && !name.starts_with("cluster-") {
                    return None;
                }
                Some((
                    n.to_string(),
                    o.namespace().unwrap_or_else(|| ns.to_string()),
                    name,
                ))
            })
        })
        .collect()
}

fn has_addon_objects_of(view: &View, ns: &str, want: &BTreeSet<String>) -> (bool, String) {
    let got = per_cluster(view, ns);
    let expected = addon_objects(ns, want);
    let missing = expected.difference(&got).count();
    let extra = got.difference(&expected).count();
    (
        got == expected,
        format!(
            "{} objects, {missing} missing, {extra} not wanted",
            got.len()
        ),
    )
}

/// The conditions that count the clusters say all of `want`, True.
fn addon_status_lists(view: &View, want: &BTreeSet<String>) -> (bool, String) {
    let Some(gc) = view.gitopscluster() else {
        return (false, "no GitOpsCluster".into());
    };
    let n = want.len();
    let conds = gc["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let expected = [
        (
            addon::COND_CLUSTERS_IMPORTED,
            format!("Imported {n} clusters to ArgoCD"),
        ),
        (
            addon::COND_MANIFEST_WORK_CREATED,
            format!("Created ManifestWorks for {n} clusters"),
        ),
        (
            addon::COND_ADDON_CONFIGURED,
            format!("Addon configured for {n} clusters"),
        ),
    ];
    let mut last = String::new();
    let ok = expected.iter().all(|(t, m)| {
        let c = conds.iter().find(|c| c["type"] == *t);
        let ok = c.is_some_and(|c| c["status"] == "True" && c["message"] == *m);
        if !ok {
            last = format!(
                "{t}: {}",
                c.map(|c| c["message"].to_string()).unwrap_or_default()
            );
        }
        ok
    });
    (ok, last)
}

/// A GitOpsCluster (v1alpha1, `spec.argoCDAgentAddon`) over a Placement of the `gfaults` set, 10
/// clusters set up; while 40 more clusters join, the hub API server is SIGKILLed for [`OUTAGE`].
/// After it answers again: every cluster has its cluster secret, CA and ArgoCD CR ManifestWorks,
/// AddOnDeploymentConfig and ManagedClusterAddOn, nothing else; the conditions count the 50;
/// every object of before the kill kept its UID.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn addon_recovers_after_apiserver_kill_mid_creates() {
    const TEST: &str = "addon_recovers_after_apiserver_kill_mid_creates";
    let Some(real) = real(TEST).await else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let ns = ADDON_NS;
    let scene = Scene::new(&real, ns).await;
    apply(
        &scene.hub,
        &gitopsclusters("v1alpha1"),
        json!({"apiVersion": "apps.open-cluster-management.io/v1alpha1", "kind": "GitOpsCluster",
            "metadata": {"name": GC, "namespace": ns},
            "spec": {"placementRef": {"kind": "Placement", "name": PLACEMENT},
                     "argoCDAgentAddon": {"principalServerAddress": "principal.example.com",
                        "principalServerPort": "8443", "mode": "managed",
                        "agentNamespace": AGENT_NS}}}),
    )
    .await;
    let owner = addon::apply::selector(ns, GC);
    let (addons_ar, _) = addon::apply::resource("ManagedClusterAddOn");
    let (configs_ar, _) = addon::apply::resource("AddOnDeploymentConfig");
    let (works_ar, _) = addon::apply::resource("ManifestWork");
    let watched = |name, ar, ns: Option<&str>| Watched {
        name,
        ar,
        ns: ns.map(str::to_string),
        labels: owner.clone(),
    };
    let view = scene
        .view(
            "v1alpha1",
            vec![
                watched("secrets", secrets(), Some(ns)),
                watched("addons", addons_ar, None),
                watched("configs", configs_ar, None),
                watched("works", works_ar, None),
            ],
        )
        .await;
    let mut ctl = Controller::spawn(&real, "addon-creates");
    scene.create_clusters(0..FIRST).await;
    let first = clusters(0..FIRST);
    view.until("the first 10 set up", |v| {
        has_addon_objects_of(v, ns, &first)
    })
    .await;

    let all = clusters(0..TOTAL);
    let killed = Notify::new();
    let mut loaded = None;
    let mut before = BTreeMap::new();
    let mut at_kill = 0;
    let mut back = None;
    tokio::join!(
        async {
            scene.create_clusters(FIRST..PAUSE_AT).await;
            killed.notified().await;
            scene.create_clusters(PAUSE_AT..TOTAL).await;
            loaded = Some(Instant::now());
        },
        async {
            view.until("addons of the clusters joining", |v| {
                let n = v.objects("addons").len();
                (n >= FIRST + 5, n)
            })
            .await;
            before = view.uids(&ADDON_VIEWS);
            at_kill = view.objects("addons").len();
            back = Some(outage(&real, &scene, &killed).await);
        }
    );
    let (back, up) = back.unwrap();
    assert!(
        at_kill < TOTAL,
        "the kill came after the controller had finished"
    );
    let decided_at = view
        .until("OCM's decision lists the 50", |v| {
            let d = v.decided();
            (d == all, d.len())
        })
        .await;
    let objects_at = view
        .until("every cluster's objects", |v| {
            has_addon_objects_of(v, ns, &all)
        })
        .await;
    let status_at = view
        .until("the GitOpsCluster's conditions", |v| {
            addon_status_lists(v, &all)
        })
        .await;
    ctl.assert_running();
    assert!(
        ctl.logged("the API server does not answer"),
        "the controller never saw the API server go away; see {}",
        ctl.log.display()
    );
    up.await.unwrap();
    // confirmed by a fresh read: exactly one of each, none written twice
    let owned = addon::apply::list_owned(&scene.hub, ns, GC).await.unwrap();
    let view_name = |kind: &str| match kind {
        "Secret" => "secrets",
        "ManagedClusterAddOn" => "addons",
        "AddOnDeploymentConfig" => "configs",
        "ManifestWork" => "works",
        _ => "",
    };
    let listed: BTreeMap<String, String> = owned
        .iter()
        .filter(|(k, _)| !view_name(&k.0).is_empty())
        .map(|((kind, ons, name), v)| {
            (
                format!("{}/{ons}/{name}", view_name(kind)),
                v["metadata"]["uid"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect();
    let listed_per_cluster: BTreeSet<(String, String, String)> = listed
        .keys()
        .filter_map(|k| {
            let mut p = k.splitn(3, '/');
            let (v, ons, name) = (p.next()?, p.next()?, p.next()?);
            (v != "secrets" || name.starts_with("cluster-"))
                .then(|| (v.to_string(), ons.to_string(), name.to_string()))
        })
        .collect();
    assert_eq!(listed_per_cluster, addon_objects(ns, &all));
    assert_not_recreated(&before, &listed);
    let loaded = loaded.expect("the loader finished");
    let from = back.max(decided_at);
    eprintln!(
        "gitops-faults: RECOVERY addon creates: {at_kill} of {TOTAL} ManagedClusterAddOns at the \
         kill; the last ManagedCluster created {:.2} s and OCM's decision complete {:.2} s after \
         the API server answered again; every cluster's objects converged {:.2} s, the conditions \
         {:.2} s after the API server answered again ({:.2} s / {:.2} s after the later of that \
         and the decision)",
        secs(loaded.saturating_duration_since(back)),
        secs(decided_at.saturating_duration_since(back)),
        secs(objects_at.saturating_duration_since(back)),
        secs(status_at.saturating_duration_since(back)),
        secs(objects_at.saturating_duration_since(from)),
        secs(status_at.saturating_duration_since(from)),
    );
    report_target(
        &ctl,
        status_at.max(objects_at).saturating_duration_since(from),
    );
    drop(view);
    scene.finish(ctl).await;
}
