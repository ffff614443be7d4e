//! What the fault tests drive: the real env (`/work/shared/realenv`), the controller as a child
//! process, a fleet of Applications in a namespace of their own, a TCP proxy that can cut the
//! controller off the API server, the hub API server's process, etcd, and a least-privilege
//! identity for the controller.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use argocd_pull_api::argocd::Application;
use argocd_pull_api::names::{
    ANNOTATION_HUB_APPLICATION_NAMESPACE, ANNOTATION_OCM_MANAGED_CLUSTER,
    FINALIZER_ARGOCD_RESOURCES, LABEL_PULL_TO_OCM,
};
use argocd_pull_api::ocm::cluster::ManagedCluster;
use argocd_pull_api::ocm::work::ManifestWork;
use argocd_pull_domain::{WorkOptions, desired_work, work_differs, work_name};
pub use argocd_pull_realenv_faults::ApiServerDown;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};

/// Set (to a kubeconfig path) in the environment of the controller child process.
pub const CHILD_ENV: &str = "ARGOCD_PULL_FAULTS_CHILD_KUBECONFIG";
/// When set, the path of an `argocd-pull` binary the fault tests run as the controller
/// (`argocd-pull controller`) instead of this test binary's library controllers.
pub const BIN_ENV: &str = "ARGOCD_PULL_FAULTS_BIN";
/// Clusters shared by the fault tests (ManagedCluster + namespace; no work agent serves them).
pub const CLUSTERS: [&str; 5] = ["faults-1", "faults-2", "faults-3", "faults-4", "faults-5"];
/// OCM's cluster-set label.
pub const CLUSTERSET_LABEL: &str = "cluster.open-cluster-management.io/clusterset";
/// How long the controller gets to converge after a fault.
pub const CONVERGE: Duration = Duration::from_secs(180);

pub fn skip(test: &str, why: &str) {
    // stderr directly: libtest does not capture it, so the skip is visible
    let _ = writeln!(std::io::stderr(), "SKIP: faults::{test}: {why}");
}

/// The real env, or `None` (with a visible SKIP) when it is not configured. `disruptive` tests
/// (they stop the hub API server) also need `ARGOCD_PULL_E2E_DISRUPTIVE=1`: the env is shared.
pub async fn real(test: &str, disruptive: bool) -> Option<Real> {
    let Ok(path) = std::env::var("ARGOCD_PULL_E2E_HUB_KUBECONFIG") else {
        skip(test, "ARGOCD_PULL_E2E_HUB_KUBECONFIG is not set");
        return None;
    };
    if disruptive && std::env::var("ARGOCD_PULL_E2E_DISRUPTIVE").as_deref() != Ok("1") {
        skip(
            test,
            "it stops the hub API server of a shared env; set ARGOCD_PULL_E2E_DISRUPTIVE=1 to run it",
        );
        return None;
    }
    argocd_pull_controller::install_crypto_provider();
    let kubeconfig = PathBuf::from(path);
    let realk8s = std::env::var_os("REALK8S")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            kubeconfig
                .parent()
                .expect("the hub kubeconfig lies in $REALK8S")
                .to_path_buf()
        });
    let hub = client(&kubeconfig).await;
    let logs = std::env::temp_dir().join(format!("argocd-pull-faults-{}", std::process::id()));
    std::fs::create_dir_all(&logs).unwrap();
    Some(Real {
        hub,
        kubeconfig,
        realk8s,
        logs,
    })
}

pub async fn client(path: &Path) -> Client {
    let kc = Kubeconfig::read_from(path).unwrap();
    let cfg = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .unwrap();
    Client::try_from(cfg).unwrap()
}

pub struct Real {
    /// Admin client of the hub.
    pub hub: Client,
    pub kubeconfig: PathBuf,
    pub realk8s: PathBuf,
    /// Where the controller children log.
    pub logs: PathBuf,
}

impl Real {
    /// The hub's address (from the kubeconfig), e.g. 127.0.0.1:6443.
    pub fn hub_addr(&self) -> SocketAddr {
        let kc = Kubeconfig::read_from(&self.kubeconfig).unwrap();
        let server = kc.clusters[0]
            .cluster
            .as_ref()
            .and_then(|c| c.server.clone())
            .unwrap();
        let hostport = server.trim_start_matches("https://").trim_end_matches('/');
        hostport.parse().expect("the hub server is an IP:port")
    }

    /// A copy of the admin kubeconfig whose server is `addr` (the hub's serving certificate names
    /// 127.0.0.1, whatever the port).
    pub fn kubeconfig_via(&self, addr: SocketAddr, name: &str) -> PathBuf {
        let mut kc = Kubeconfig::read_from(&self.kubeconfig).unwrap();
        for c in &mut kc.clusters {
            if let Some(cluster) = c.cluster.as_mut() {
                cluster.server = Some(format!("https://{addr}"));
            }
        }
        let path = self.logs.join(format!("{name}.kubeconfig"));
        // JSON is YAML
        std::fs::write(&path, serde_json::to_vec(&kc).unwrap()).unwrap();
        path
    }

    /// A kubeconfig for `token` against the hub (CA from the admin kubeconfig).
    pub fn kubeconfig_with_token(&self, token: &str, name: &str) -> PathBuf {
        let kc = Kubeconfig::read_from(&self.kubeconfig).unwrap();
        let cluster = kc.clusters[0].cluster.clone().unwrap();
        let v = json!({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "hub", "cluster": {
                "server": cluster.server,
                "certificate-authority-data": cluster.certificate_authority_data,
            }}],
            "users": [{"name": name, "user": {"token": token}}],
            "contexts": [{"name": "hub", "context": {"cluster": "hub", "user": name}}],
            "current-context": "hub",
        });
        let path = self.logs.join(format!("{name}.kubeconfig"));
        std::fs::write(&path, serde_json::to_vec(&v).unwrap()).unwrap();
        path
    }

    /// Applies argocd-pull's own CRDs (`deploy/crds/`: GitOpsCluster, the ApplicationSet
    /// report) server-side, and waits until the API server serves them.
    pub async fn apply_own_crds(&self) {
        use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
        let yaml = include_str!("../../../../../deploy/crds/argocd-pull-crds.yaml");
        let docs: Vec<Value> = serde_saphyr::from_multiple(yaml).unwrap();
        let crds: Api<CustomResourceDefinition> = Api::all(self.hub.clone());
        for doc in docs.into_iter().filter(|d| d.is_object()) {
            let name = doc["metadata"]["name"].as_str().unwrap().to_string();
            crds.patch(
                &name,
                &PatchParams::apply("argocd-pull-faults").force(),
                &Patch::Apply(doc),
            )
            .await
            .unwrap();
            let t0 = Instant::now();
            while !crds.get(&name).await.unwrap().status.is_some_and(|s| {
                s.conditions
                    .iter()
                    .flatten()
                    .any(|c| c.type_ == "Established" && c.status == "True")
            }) {
                assert!(
                    t0.elapsed() < Duration::from_secs(60),
                    "CRD {name} not established"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }

    /// Starts the controller as a child process talking to the hub through `kubeconfig`.
    pub fn spawn_controller(&self, kubeconfig: &Path, name: &str) -> ControllerProcess {
        let log = self.logs.join(format!("{name}.log"));
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap();
        // the shipped binary when one is named (every hub controller, as users run it), else
        // this test binary's `controller_process` (the library's pull-model controllers)
        let mut cmd = match std::env::var_os(BIN_ENV) {
            Some(bin) => {
                let mut c = Command::new(bin);
                c.args([
                    "controller",
                    "--admin-addr",
                    "127.0.0.1:0",
                    "--leader-elect",
                    "false",
                ])
                .env("KUBECONFIG", kubeconfig);
                c
            }
            None => {
                let mut c = Command::new(std::env::current_exe().unwrap());
                c.args([
                    "faults::controller_process",
                    "--exact",
                    "--ignored",
                    "--nocapture",
                    "--test-threads",
                    "1",
                ]);
                c
            }
        };
        let child = cmd
            .env(CHILD_ENV, kubeconfig)
            .env(
                "RUST_LOG",
                std::env::var("ARGOCD_PULL_FAULTS_LOG")
                    .unwrap_or_else(|_| "info,kube_runtime=debug".into()),
            )
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap();
        eprintln!(
            "faults: controller pid {} logs to {}",
            child.id(),
            log.display()
        );
        ControllerProcess { child, log }
    }

    /// Stops the hub kube-apiserver (SIGTERM, SIGKILL after 15 s, then waits for the process to end). The returned
    /// guard starts it again with `$REALK8S/up.sh` when dropped (also on a failing test).
    pub fn stop_hub_apiserver(&self) -> ApiServerDown {
        self.end_hub_apiserver("-TERM", Duration::from_secs(15))
    }

    /// Kills the hub kube-apiserver (SIGKILL: no drain, every connection reset at once) and
    /// waits for the process to end. The returned guard starts it again with `$REALK8S/up.sh`.
    pub fn kill_hub_apiserver(&self) -> ApiServerDown {
        self.end_hub_apiserver("-KILL", Duration::ZERO)
    }

    fn end_hub_apiserver(&self, signal: &str, drain: Duration) -> ApiServerDown {
        argocd_pull_realenv_faults::end_hub_apiserver(&self.realk8s, signal, drain, "faults")
    }

    /// The current revision of the hub's etcd, then a compaction to it (through etcd's gRPC
    /// gateway, `http://127.0.0.1:2379`, as the realenv README gives it). Returns the revision.
    pub fn compact_etcd(&self) -> i64 {
        let etcd = std::env::var("ARGOCD_PULL_E2E_HUB_ETCD")
            .unwrap_or_else(|_| "http://127.0.0.1:2379".into());
        let range = curl_json(&format!("{etcd}/v3/kv/range"), &json!({"key": "Lw=="}));
        let rev: i64 = range["header"]["revision"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no revision in {range}"));
        let answer = curl_json(
            &format!("{etcd}/v3/kv/compaction"),
            &json!({"revision": rev.to_string(), "physical": true}),
        );
        assert!(answer.get("error").is_none(), "compaction: {answer}");
        eprintln!("faults: hub etcd compacted at revision {rev}");
        rev
    }
}

fn curl_json(url: &str, body: &Value) -> Value {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10", "-X", "POST", "-d"])
        .arg(body.to_string())
        .arg(url)
        .output()
        .expect("curl runs");
    assert!(
        out.status.success(),
        "curl {url}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{url}: {e}: {}", String::from_utf8_lossy(&out.stdout)))
}

/// The controller child process (killed, -9, when dropped).
pub struct ControllerProcess {
    child: Child,
    pub log: PathBuf,
}

impl ControllerProcess {
    /// `kill -9`.
    pub fn kill9(&mut self) {
        let _ = self.child.kill(); // SIGKILL on Unix
        let _ = self.child.wait();
        eprintln!("faults: controller {} killed (-9)", self.child.id());
    }

    /// Whether the child's log has a line containing `needle`.
    pub fn logged(&self, needle: &str) -> bool {
        std::fs::read_to_string(&self.log).is_ok_and(|s| s.contains(needle))
    }

    /// Waits (polling its log) until the controller logged `needle`.
    pub async fn wait_logged(&mut self, needle: &str, within: Duration) {
        self.wait_logged_any(&[needle], within).await;
    }

    /// Waits until the controller logged one of `needles`; returns which.
    pub async fn wait_logged_any<'a>(&mut self, needles: &[&'a str], within: Duration) -> &'a str {
        let t0 = Instant::now();
        loop {
            if let Some(n) = needles.iter().find(|n| self.logged(n)) {
                return n;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "the controller exited ({status}) before logging one of {needles:?}; see {}",
                    self.log.display()
                );
            }
            assert!(
                t0.elapsed() < within,
                "the controller did not log one of {needles:?} within {within:?}; see {}",
                self.log.display()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
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

impl Drop for ControllerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The Applications of one test: namespace `faults-<test>`, spread over [`CLUSTERS`].
pub struct Fleet {
    pub hub: Client,
    pub ns: String,
    /// How the controller under test builds works (the audit compares with them).
    pub options: WorkOptions,
}

pub fn app_name(i: usize) -> String {
    format!("app-{i}")
}

impl Fleet {
    /// Makes the clusters and the namespace, and removes what an earlier run left behind.
    pub async fn new(hub: &Client, test: &str) -> Fleet {
        let fleet = Fleet {
            hub: hub.clone(),
            ns: format!("faults-{test}"),
            options: WorkOptions::default(),
        };
        let pp = PostParams::default();
        let namespaces: Api<Namespace> = Api::all(hub.clone());
        let clusters: Api<ManagedCluster> = Api::all(hub.clone());
        for name in CLUSTERS.iter().copied().chain([fleet.ns.as_str()]) {
            // the namespace an earlier run deleted may still be terminating
            let t0 = Instant::now();
            while namespaces
                .get_opt(name)
                .await
                .ok()
                .flatten()
                .is_some_and(|n| n.metadata.deletion_timestamp.is_some())
            {
                assert!(
                    t0.elapsed() < CONVERGE,
                    "namespace {name} still terminating"
                );
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            let ns = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
            ok_or_exists(namespaces.create(&pp, &ns).await);
        }
        // In a cluster set of their own (`faults`), so that OCM does not add them to `default`
        // and the other real-env suites, which place on `default`, never select them.
        for name in CLUSTERS {
            let c = json!({
                "apiVersion": "cluster.open-cluster-management.io/v1", "kind": "ManagedCluster",
                "metadata": {"name": name, "labels": {CLUSTERSET_LABEL: "faults"}},
                "spec": {"hubAcceptsClient": true}
            });
            clusters
                .patch(
                    name,
                    &PatchParams::apply("argocd-pull-faults").force(),
                    &Patch::Apply(&c),
                )
                .await
                .unwrap_or_else(|e| panic!("ManagedCluster {name}: {e}"));
        }
        fleet.clean().await;
        fleet
    }

    pub fn apps(&self) -> Api<Application> {
        Api::namespaced(self.hub.clone(), &self.ns)
    }

    pub fn cluster_of(i: usize) -> &'static str {
        CLUSTERS[i % CLUSTERS.len()]
    }

    pub fn app_json(&self, i: usize) -> Value {
        json!({
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Application",
            "metadata": {
                "name": app_name(i),
                "namespace": self.ns,
                "labels": {LABEL_PULL_TO_OCM: "true"},
                "annotations": {
                    ANNOTATION_OCM_MANAGED_CLUSTER: Self::cluster_of(i),
                    "apps.open-cluster-management.io/ocm-managed-cluster-app-namespace": "argocd",
                },
                "finalizers": [FINALIZER_ARGOCD_RESOURCES],
            },
            "spec": {
                "project": "default",
                "destination": {"server": "https://kubernetes.default.svc", "namespace": "guestbook"},
                "source": {"repoURL": "https://github.com/argoproj/argocd-example-apps.git",
                           "path": "guestbook", "targetRevision": "HEAD"},
                "syncPolicy": {"automated": {"prune": true}},
            }
        })
    }

    /// Creates Applications `range` (50 at once), retrying each while the API server does not
    /// answer (a fault may be under way); `extra` is merged into each.
    pub async fn create(&self, range: std::ops::Range<usize>, extra: Value) {
        let api = self.apps();
        futures::stream::iter(range)
            .map(|i| {
                let api = api.clone();
                let mut v = self.app_json(i);
                argocd_pull_domain::json::merge_apply(&mut v, &extra);
                async move {
                    let app: Application = serde_json::from_value(v).unwrap();
                    retrying(&format!("create {}", app_name(i)), || async {
                        match api.create(&PostParams::default(), &app).await {
                            Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
                            r => r.map(|_| ()),
                        }
                    })
                    .await
                }
            })
            .buffer_unordered(50)
            .collect::<Vec<()>>()
            .await;
    }

    /// Deletes Applications `range` (their finalizer stays: the controller must remove it).
    pub async fn delete(&self, range: std::ops::Range<usize>) {
        let api = self.apps();
        futures::stream::iter(range)
            .map(|i| {
                let api = api.clone();
                async move {
                    retrying(&format!("delete {}", app_name(i)), || async {
                        match api.delete(&app_name(i), &DeleteParams::default()).await {
                            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
                            r => r.map(|_| ()),
                        }
                    })
                    .await
                }
            })
            .buffer_unordered(50)
            .collect::<Vec<()>>()
            .await;
    }

    /// Every pull-labelled work of this fleet (by its hub-application-namespace annotation).
    pub async fn works(&self) -> kube::Result<Vec<ManifestWork>> {
        let mut all = Vec::new();
        for c in CLUSTERS {
            let api: Api<ManifestWork> = Api::namespaced(self.hub.clone(), c);
            let list = api
                .list(&ListParams::default().labels(LABEL_PULL_TO_OCM))
                .await?;
            all.extend(list.items.into_iter().filter(|w| {
                w.metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(ANNOTATION_HUB_APPLICATION_NAMESPACE))
                    == Some(&self.ns)
            }));
        }
        Ok(all)
    }

    /// Compares the Applications with their works (see [`Audit`]).
    pub async fn audit(&self) -> kube::Result<Audit> {
        let apps = self.apps().list(&ListParams::default()).await?.items;
        let works = self.works().await?;
        Ok(Audit::of_with(&apps, &works, &self.options))
    }

    /// Polls [`Fleet::audit`] until the fleet has `live` Applications and nothing is lost or
    /// stuck; panics with the last audit after [`CONVERGE`].
    pub async fn converged(&self, live: usize) -> Audit {
        self.converged_every(live, Duration::from_millis(500))
            .await
            .0
    }

    async fn converged_every(&self, live: usize, every: Duration) -> (Audit, Instant) {
        let t0 = Instant::now();
        let mut last = None;
        while t0.elapsed() < CONVERGE {
            match self.audit().await {
                Ok(a) if a.apps == live && a.is_clean() => {
                    eprintln!("faults: {}: converged in {:?}: {a}", self.ns, t0.elapsed());
                    return (a, Instant::now());
                }
                Ok(a) => last = Some(a.to_string()),
                Err(e) => last = Some(format!("audit failed: {e}")),
            }
            tokio::time::sleep(every).await;
        }
        panic!(
            "{}: not converged to {live} Applications within {CONVERGE:?}: {}",
            self.ns,
            last.unwrap_or_default()
        );
    }

    /// Polls (every 100 ms) until the API server answers a list of this fleet's Applications;
    /// returns when it first did.
    pub async fn until_answers(&self) -> Instant {
        argocd_pull_realenv_faults::until_answers(&self.apps()).await
    }

    /// The UID of every work of this fleet, by namespace/name.
    pub async fn work_uids(&self) -> std::collections::HashMap<String, String> {
        self.works()
            .await
            .unwrap()
            .into_iter()
            .map(|w| {
                (
                    format!(
                        "{}/{}",
                        w.metadata.namespace.unwrap_or_default(),
                        w.metadata.name.unwrap_or_default()
                    ),
                    w.metadata.uid.unwrap_or_default(),
                )
            })
            .collect()
    }

    /// Plays the OCM work agent for the works of Applications `range` (which must exist):
    /// writes Healthy/Synced feedback into their status, 50 at once.
    pub async fn report_healthy(&self, range: std::ops::Range<usize>) {
        let works = self.works().await.unwrap();
        let wanted: std::collections::HashSet<String> = range.map(app_name).collect();
        futures::stream::iter(works.into_iter().filter(|w| {
            w.spec.workload.manifests[0]["metadata"]["name"]
                .as_str()
                .is_some_and(|n| wanted.contains(n))
        }))
        .map(|w| {
            let hub = self.hub.clone();
            async move {
                let p = &w.spec.workload.manifests[0];
                let status = json!({"status": {"resourceStatus": {"manifests": [{
                    "resourceMeta": {"ordinal": 0, "group": "argoproj.io", "version": "v1alpha1",
                        "kind": "Application", "resource": "applications",
                        "name": p["metadata"]["name"], "namespace": p["metadata"]["namespace"]},
                    "statusFeedback": {"values": [
                        {"name": "healthStatus", "fieldValue": {"type": "String", "string": "Healthy"}},
                        {"name": "syncStatus", "fieldValue": {"type": "String", "string": "Synced"}},
                    ]},
                    "conditions": []
                }]}}});
                let api: Api<ManifestWork> =
                    Api::namespaced(hub, w.metadata.namespace.as_deref().unwrap());
                let name = w.metadata.name.clone().unwrap();
                retrying(&format!("feedback of {name}"), || async {
                    api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
                        .await
                        .map(|_| ())
                })
                .await
            }
        })
        .buffer_unordered(50)
        .collect::<Vec<()>>()
        .await;
    }

    /// How many of Applications `range` report Healthy and Synced.
    pub async fn healthy(&self, range: std::ops::Range<usize>) -> kube::Result<usize> {
        let apps = self.apps().list(&ListParams::default()).await?.items;
        Ok(self.count_healthy(range, apps.iter()))
    }

    /// How many of the Applications of `range` among `apps` report Healthy and Synced.
    pub fn count_healthy<'a>(
        &self,
        range: std::ops::Range<usize>,
        apps: impl Iterator<Item = &'a Application>,
    ) -> usize {
        let wanted: std::collections::HashSet<String> = range.map(app_name).collect();
        apps.filter(|a| a.metadata.name.as_ref().is_some_and(|n| wanted.contains(n)))
            .filter(|a| {
                let s = a.status.as_ref();
                s.and_then(|s| s.health.as_ref()?.status.as_deref()) == Some("Healthy")
                    && s.and_then(|s| s.sync.as_ref()?.status.as_deref()) == Some("Synced")
            })
            .count()
    }

    /// Polls until at most `n` works of this fleet are left; returns how many were.
    pub async fn until_works_at_most(&self, n: usize) -> usize {
        let t0 = Instant::now();
        loop {
            if let Ok(w) = self.works().await
                && w.len() <= n
            {
                return w.len();
            }
            assert!(t0.elapsed() < CONVERGE, "{}: more than {n} works", self.ns);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Deletes Applications `range` without waiting for the controller: their resources
    /// finalizer is removed first, so they are gone at once and only the cleanup controller
    /// (delete event, sweep) removes their works.
    pub async fn delete_unfinalized(&self, range: std::ops::Range<usize>) {
        let api = self.apps();
        futures::stream::iter(range.clone())
            .map(|i| {
                let api = api.clone();
                async move {
                    let strip = json!({"metadata": {"finalizers": null}});
                    retrying(&format!("strip {}", app_name(i)), || async {
                        api.patch(&app_name(i), &PatchParams::default(), &Patch::Merge(&strip))
                            .await
                            .map(|_| ())
                    })
                    .await;
                }
            })
            .buffer_unordered(50)
            .collect::<Vec<()>>()
            .await;
        self.delete(range).await;
    }

    /// Polls until at least `n` works of this fleet exist.
    pub async fn until_works(&self, n: usize) {
        let t0 = Instant::now();
        loop {
            if self.works().await.is_ok_and(|w| w.len() >= n) {
                return;
            }
            assert!(t0.elapsed() < CONVERGE, "{}: fewer than {n} works", self.ns);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// [`Fleet::clean`], then deletes the fleet's namespace (the clusters `faults-1..5` stay:
    /// every fault test uses them, and they hold nothing once each fleet is clean).
    pub async fn finish(&self) {
        self.clean().await;
        let _ = Api::<Namespace>::all(self.hub.clone())
            .delete(&self.ns, &DeleteParams::default())
            .await;
    }

    /// Removes the fleet's Applications (finalizers stripped) and works.
    pub async fn clean(&self) {
        let api = self.apps();
        let names: Vec<String> = api
            .list_metadata(&ListParams::default())
            .await
            .map(|l| {
                l.items
                    .into_iter()
                    .filter_map(|m| m.metadata.name)
                    .collect()
            })
            .unwrap_or_default();
        futures::stream::iter(names)
            .map(|n| {
                let api = api.clone();
                async move {
                    let strip = json!({"metadata": {"finalizers": null}});
                    let _ = api
                        .patch(&n, &PatchParams::default(), &Patch::Merge(&strip))
                        .await;
                    let _ = api.delete(&n, &DeleteParams::default()).await;
                }
            })
            .buffer_unordered(50)
            .collect::<Vec<()>>()
            .await;
        let works = self.works().await.unwrap_or_default();
        futures::stream::iter(works)
            .map(|w| {
                let api: Api<ManifestWork> = Api::namespaced(
                    self.hub.clone(),
                    w.metadata.namespace.as_deref().unwrap_or_default(),
                );
                async move {
                    let _ = api
                        .delete(
                            w.metadata.name.as_deref().unwrap_or_default(),
                            &DeleteParams::default(),
                        )
                        .await;
                }
            })
            .buffer_unordered(50)
            .collect::<Vec<()>>()
            .await;
    }
}

pub fn ok_or_exists<T>(r: kube::Result<T>) {
    match r {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("{e}"),
    }
}

/// Runs `f` until it succeeds, for up to [`CONVERGE`] (a fault may make the API server
/// unreachable for a while).
pub async fn retrying<F, Fut>(what: &str, f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = kube::Result<()>>,
{
    argocd_pull_realenv_faults::retrying(what, CONVERGE, f).await
}

/// Applications against works.
#[derive(Debug, Default)]
pub struct Audit {
    /// Applications in the namespace (being deleted or not).
    pub apps: usize,
    pub works: usize,
    /// A live Application without its work, or with a work that differs from the desired one.
    pub lost: Vec<String>,
    /// A work without a live Application, an Application still being deleted (finalizer left
    /// on it), or one whose `operation` was not handed over.
    pub stuck: Vec<String>,
}

impl Audit {
    pub fn of_with(apps: &[Application], works: &[ManifestWork], options: &WorkOptions) -> Audit {
        let mut audit = Audit {
            apps: apps.len(),
            works: works.len(),
            ..Default::default()
        };
        let by_key: std::collections::HashMap<(String, String), &ManifestWork> = works
            .iter()
            .map(|w| {
                (
                    (
                        w.metadata.namespace.clone().unwrap_or_default(),
                        w.metadata.name.clone().unwrap_or_default(),
                    ),
                    w,
                )
            })
            .collect();
        let mut wanted = std::collections::HashSet::new();
        for app in apps {
            let name = app.metadata.name.clone().unwrap_or_default();
            if app.metadata.deletion_timestamp.is_some() {
                audit.stuck.push(format!("{name}: still being deleted"));
                continue;
            }
            if app.operation.is_some() {
                audit
                    .stuck
                    .push(format!("{name}: operation not handed over"));
            }
            let cluster = app
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(ANNOTATION_OCM_MANAGED_CLUSTER))
                .cloned()
                .unwrap_or_default();
            let key = (
                cluster,
                work_name(&name, app.metadata.uid.as_deref().unwrap_or_default()),
            );
            match by_key.get(&key) {
                None => audit
                    .lost
                    .push(format!("{name}: no ManifestWork {}", key.1)),
                Some(w) => {
                    let desired = desired_work(app, options).unwrap();
                    if work_differs(w, &desired) {
                        audit.lost.push(format!("{name}: ManifestWork differs"));
                    }
                }
            }
            wanted.insert(key);
        }
        for key in by_key.keys() {
            if !wanted.contains(key) {
                audit
                    .stuck
                    .push(format!("work {}/{}: orphaned", key.0, key.1));
            }
        }
        audit.lost.sort();
        audit.stuck.sort();
        audit
    }

    pub fn is_clean(&self) -> bool {
        self.lost.is_empty() && self.stuck.is_empty()
    }
}

impl std::fmt::Display for Audit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} Applications, {} works, {} lost {:?}, {} stuck {:?}",
            self.apps,
            self.works,
            self.lost.len(),
            &self.lost[..self.lost.len().min(5)],
            self.stuck.len(),
            &self.stuck[..self.stuck.len().min(5)],
        )
    }
}

/// A TCP proxy in front of the hub: `cut` closes every connection through it and refuses new
/// ones until `restore` (TLS passes through untouched).
pub struct Proxy {
    pub addr: SocketAddr,
    blocked: Arc<AtomicBool>,
    cut: tokio::sync::watch::Sender<u64>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    pub async fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let blocked = Arc::new(AtomicBool::new(false));
        let (cut, _) = tokio::sync::watch::channel(0u64);
        let (b, c) = (blocked.clone(), cut.clone());
        let task = tokio::spawn(async move {
            while let Ok((mut down, _)) = listener.accept().await {
                if b.load(Ordering::SeqCst) {
                    drop(down);
                    continue;
                }
                let mut cut = c.subscribe();
                tokio::spawn(async move {
                    let Ok(mut up) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut down, &mut up) => {}
                        _ = cut.changed() => {}
                    }
                });
            }
        });
        Proxy {
            addr,
            blocked,
            cut,
            task,
        }
    }

    pub fn cut(&self) {
        self.blocked.store(true, Ordering::SeqCst);
        self.cut.send_modify(|g| *g += 1);
    }

    pub fn restore(&self) {
        self.blocked.store(false, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
        self.cut.send_modify(|g| *g += 1);
    }
}
