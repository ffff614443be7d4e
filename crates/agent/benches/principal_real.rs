//! The agent model on a real hub API server (`../shared/realenv`): the principal, in its own
//! process with the hub as a `KubeStore` (as `argocd-pull principal` runs it), `BENCH_AGENTS`
//! (1000) managed agents in this process (real TLS gRPC streams, in-memory spokes), each with
//! `BENCH_APPS` (10) Applications in its hub namespace `pr-agent-<i>`, i.e. in etcd.
//!
//! ```sh
//! ARGOCD_PULL_E2E_HUB_KUBECONFIG=$REALK8S/hub.kubeconfig cargo bench -p argocd-pull-agent --bench principal_real
//! # phase 4 (the hub API server killed for 10 s mid-delivery) also needs, on a shared env:
//! ARGOCD_PULL_E2E_DISRUPTIVE=1 REALK8S=$REALK8S ...
//! ```
//!
//! Without the kubeconfig it prints `SKIP:` and exits 0. Phases (each line `PHASE name k=v…`):
//! 1. `floor`: the Applications written by 100 concurrent clients with nothing watching — the API
//!    server's own time to write them — then deleted again;
//! 2. `deliver`: principal and agents connected, the same Applications written: time until every
//!    agent holds all of its own, next to the time the writes took; principal CPU and peak RSS;
//!    the hub API server's requests on applications by verb (`apiserver_request_total`);
//! 3. `restart`: the principal stopped and started again on the same address with everything in
//!    place: time until every agent is back, and every request the new principal made of the
//!    API server until it is quiet (target: no GET per Application);
//! 4. `outage`: every Application changed (`targetRevision`) while the hub API server is killed
//!    (SIGKILL) for 10 s and started again (`$REALK8S/up.sh`): every agent ends with every
//!    Application at the new revision (0 lost), and how long after the API server answered.
//!
//! Results: docs/performance.md.

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use argocd_pull_agent::local::LocalPki;

use argocd_pull_agent_core::Mode;
use argocd_pull_agent_core::auth::throwaway_jwt_key;
use argocd_pull_agent_core::metrics::Metrics;
use argocd_pull_agent_core::store::{Kind, KubeStore, MemStore, Store};
use argocd_pull_agent_core::tls::TlsMaterial;
use argocd_pull_principal::{Principal, PrincipalConfig};
use argocd_pull_spoke::{Agent, AgentConfig};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::GroupVersionKind;
use serde_json::{Value, json};

const KUBECONFIG_ENV: &str = "ARGOCD_PULL_E2E_HUB_KUBECONFIG";
/// Concurrent writers, as the real env's load generator.
const WRITERS: usize = 100;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn agent_name(i: usize) -> String {
    format!("pr-agent-{i}")
}

fn app(ns: &str, i: usize, revision: &str) -> Value {
    json!({
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": format!("app-{i}"), "namespace": ns,
                     "labels": {"team": "platform"}},
        "spec": {"project": "default",
                 "source": {"repoURL": "https://github.com/argoproj/argocd-example-apps.git",
                            "path": format!("guestbook-{i}"), "targetRevision": revision},
                 "destination": {"server": "https://kubernetes.default.svc", "namespace": format!("guestbook-{i}")},
                 "syncPolicy": {"automated": {"prune": true}}}
    })
}

async fn hub_client() -> kube::Client {
    let path = std::env::var(KUBECONFIG_ENV).unwrap();
    let kc = kube::config::Kubeconfig::read_from(path).unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    kube::Client::try_from(cfg).unwrap()
}

fn apps_api(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("argoproj.io", "v1alpha1", "Application");
    let ar = ApiResource::from_gvk_with_plural(&gvk, "applications");
    Api::namespaced_with(client.clone(), ns, &ar)
}

fn proc_stat(pid: u32) -> (f64, u64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let f: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let ticks: f64 = f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0.0)
        + f.get(12).and_then(|v| v.parse().ok()).unwrap_or(0.0);
    let hwm = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0);
    (ticks / 100.0, hwm)
}

/// The hub API server's `apiserver_request_total`, summed by (verb, resource), for the resources
/// the agent model reads and writes.
async fn requests(client: &kube::Client) -> BTreeMap<(String, String), f64> {
    let req = http::Request::get("/metrics").body(Vec::new()).unwrap();
    let text = client.request_text(req).await.unwrap_or_default();
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let get = |k: &str| {
            labels
                .split(',')
                .find_map(|kv| kv.strip_prefix(&format!("{k}=\"")))
                .map(|v| v.trim_end_matches('"').to_string())
                .unwrap_or_default()
        };
        let resource = get("resource");
        if !matches!(
            resource.as_str(),
            "applications" | "appprojects" | "secrets" | "configmaps" | "namespaces"
        ) {
            continue;
        }
        *out.entry((get("verb"), resource)).or_default() += value.parse::<f64>().unwrap_or(0.0);
    }
    out
}

fn delta(a: &BTreeMap<(String, String), f64>, b: &BTreeMap<(String, String), f64>) -> String {
    b.iter()
        .filter_map(|(k, v)| {
            let d = v - a.get(k).copied().unwrap_or(0.0);
            (d > 0.0).then(|| format!("{}:{}={d}", k.0, k.1))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn count(
    a: &BTreeMap<(String, String), f64>,
    b: &BTreeMap<(String, String), f64>,
    verbs: &[&str],
) -> f64 {
    b.iter()
        .filter(|((verb, res), _)| res == "applications" && verbs.contains(&verb.as_str()))
        .map(|(k, v)| v - a.get(k).copied().unwrap_or(0.0))
        .sum::<f64>()
        // an empty sum of f64 is -0.0, printed as "-0"
        + 0.0
}

/// The child: the principal on `BENCH_ADDR` with the real hub as its store, until stdin closes.
async fn child() {
    let dir = std::path::PathBuf::from(std::env::var("BENCH_DIR").unwrap());
    let read = |f: &str| std::fs::read(dir.join(f)).unwrap();
    let tls = TlsMaterial {
        cert_pem: read("tls.crt"),
        key_pem: read("tls.key"),
        ca_pem: read("ca.crt"),
    };
    let jwt = String::from_utf8(read("jwt.key")).unwrap();
    let addr = std::env::var("BENCH_ADDR").unwrap().parse().unwrap();
    let mut cfg = PrincipalConfig::new(addr, tls, jwt);
    cfg.allowed_namespaces = vec!["pr-agent-*".into()];
    let store = KubeStore::new(hub_client().await);
    let p = Principal::start(cfg, Arc::new(store), Metrics::new("argocd_principal"))
        .await
        .unwrap();
    println!("ready {}", p.local_addr());
    std::io::stdout().flush().unwrap();
    let mut s = String::new();
    let _ =
        tokio::task::spawn_blocking(
            move || while std::io::stdin().read_line(&mut s).unwrap_or(0) > 0 {},
        )
        .await;
    p.shutdown().await;
}

struct Child {
    child: std::process::Child,
}

impl Child {
    fn spawn(dir: &std::path::Path, addr: &str) -> Child {
        let mut c = Command::new(std::env::current_exe().unwrap())
            .env("BENCH_ROLE", "principal")
            .env("BENCH_DIR", dir)
            .env("BENCH_ADDR", addr)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(c.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert!(line.starts_with("ready "), "principal: {line}");
        Child { child: c }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Graceful stop (stdin closed), at most 15 s.
    fn stop(mut self) {
        drop(self.child.stdin.take());
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(15) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Writes `f(agent, app)` for every Application, `WRITERS` at once, retrying each until it
/// succeeds (the API server may be away); returns the wall time.
async fn write_all<F, Fut>(agents: usize, apps: usize, f: F) -> Duration
where
    F: Fn(usize, usize) -> Fut,
    Fut: Future<Output = kube::Result<()>>,
{
    let t0 = Instant::now();
    futures::stream::iter((0..agents).flat_map(|a| (0..apps).map(move |i| (a, i))))
        .map(|(a, i)| {
            let fut = &f;
            async move {
                loop {
                    match fut(a, i).await {
                        Ok(()) => return,
                        Err(kube::Error::Api(s)) if s.code == 409 => return,
                        Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
                    }
                }
            }
        })
        .buffer_unordered(WRITERS)
        .collect::<Vec<()>>()
        .await;
    t0.elapsed()
}

async fn delete_all(client: &kube::Client, agents: usize) {
    let all = Api::<DynamicObject>::all_with(client.clone(), &{
        let gvk = GroupVersionKind::gvk("argoproj.io", "v1alpha1", "Application");
        ApiResource::from_gvk_with_plural(&gvk, "applications")
    });
    // the namespaces that still hold Applications of this bench, all of them at first; a
    // delete that failed (a slow API server times it out) is issued again
    let mut left: Vec<String> = (0..agents).map(agent_name).collect();
    loop {
        futures::stream::iter(left)
            .map(|ns| {
                let api = apps_api(client, &ns);
                async move {
                    if let Err(e) = api
                        .delete_collection(&DeleteParams::default(), &ListParams::default())
                        .await
                    {
                        eprintln!("deleting the Applications of {ns}: {e}; trying again");
                    }
                }
            })
            .buffer_unordered(20)
            .collect::<Vec<()>>()
            .await;
        // until etcd holds none of them
        let Ok(listed) = all.list_metadata(&ListParams::default()).await else {
            tokio::time::sleep(Duration::from_millis(500)).await;
            left = (0..agents).map(agent_name).collect();
            continue;
        };
        let mut namespaces: Vec<String> = listed
            .items
            .iter()
            .filter_map(|o| o.metadata.namespace.clone())
            .filter(|n| n.starts_with("pr-agent-"))
            .collect();
        namespaces.dedup();
        if namespaces.is_empty() {
            return;
        }
        left = namespaces;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// How many Applications the agents hold at `revision` (all of theirs when `apps` each).
async fn delivered(agents: &[(Agent, MemStore)], revision: &str) -> usize {
    let mut n = 0;
    for (_, s) in agents {
        for a in s.list(Kind::Application, Some("argocd")).await.unwrap() {
            if a["spec"]["source"]["targetRevision"] == revision {
                n += 1;
            }
        }
    }
    n
}

async fn until_delivered(agents: &[(Agent, MemStore)], want: usize, revision: &str) -> Duration {
    let t0 = Instant::now();
    loop {
        let have = delivered(agents, revision).await;
        if have == want {
            return t0.elapsed();
        }
        assert!(
            t0.elapsed() < Duration::from_secs(900),
            "only {have} of {want} Applications at {revision} after 15 minutes"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Polls the API server's request counters until they stopped moving for `quiet`.
async fn until_quiet(client: &kube::Client, quiet: Duration) -> BTreeMap<(String, String), f64> {
    let mut last = requests(client).await;
    let mut since = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = requests(client).await;
        // our own GET /metrics is not counted in these resources
        if now != last {
            last = now;
            since = Instant::now();
        } else if since.elapsed() >= quiet {
            return last;
        }
    }
}

fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    if std::env::var("BENCH_ROLE").is_ok() {
        rt.block_on(child());
        return;
    }
    if std::env::var_os(KUBECONFIG_ENV).is_none() {
        let _ = writeln!(
            std::io::stderr(),
            "SKIP: principal_real needs {KUBECONFIG_ENV} (a real hub, ../shared/realenv)"
        );
        return;
    }
    rt.block_on(drive());
}

async fn drive() {
    let (n, apps) = (env("BENCH_AGENTS", 1000), env("BENCH_APPS", 10));
    let total = n * apps;
    let port = env("BENCH_PORT", 18_443);
    let addr = format!("127.0.0.1:{port}");
    let client = hub_client().await;
    let uptime = || {
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    };
    println!("agents={n} apps_per_agent={apps} load={}", uptime());

    // hub namespaces, nothing left from an earlier run
    let namespaces: Api<Namespace> = Api::all(client.clone());
    futures::stream::iter(0..n)
        .map(|a| {
            let namespaces = namespaces.clone();
            async move {
                let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": agent_name(a)}});
                namespaces
                    .patch(
                        &agent_name(a),
                        &PatchParams::apply("principal-real-bench"),
                        &Patch::Apply(ns),
                    )
                    .await
                    .unwrap();
            }
        })
        .buffer_unordered(WRITERS)
        .collect::<Vec<()>>()
        .await;
    delete_all(&client, n).await;

    let create = |a: usize, i: usize| {
        let api = apps_api(&client, &agent_name(a));
        async move {
            let obj: DynamicObject = serde_json::from_value(app(&agent_name(a), i, "v1")).unwrap();
            api.create(&Default::default(), &obj).await.map(|_| ())
        }
    };

    // 1. floor
    let floor = write_all(n, apps, create).await;
    println!(
        "PHASE floor applications={total} write_s={:.2} load={}",
        floor.as_secs_f64(),
        uptime()
    );
    delete_all(&client, n).await;

    // 2. delivery
    let pki = LocalPki::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    for (f, b) in [
        ("tls.crt", &pki.principal.cert_pem),
        ("tls.key", &pki.principal.key_pem),
        ("ca.crt", &pki.principal.ca_pem),
    ] {
        std::fs::write(dir.path().join(f), b).unwrap();
    }
    std::fs::write(dir.path().join("jwt.key"), throwaway_jwt_key()).unwrap();
    let principal = Child::spawn(dir.path(), &addr);
    let mut agents: Vec<(Agent, MemStore)> = Vec::new();
    for i in 0..n {
        let c = AgentConfig::new(
            addr.parse().unwrap(),
            pki.agent(&agent_name(i)).unwrap(),
            Mode::Managed,
        );
        let store = MemStore::with_capacity(apps);
        let a = Agent::start(c, Arc::new(store.clone()), Metrics::new("argocd_agent"))
            .await
            .unwrap();
        agents.push((a, store));
    }
    let t0 = Instant::now();
    while agents.iter().any(|(a, _)| !a.is_connected()) {
        assert!(
            t0.elapsed() < Duration::from_secs(300),
            "agents not connected"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let connected = t0.elapsed();
    let (cpu0, _) = proc_stat(principal.pid());
    let m0 = requests(&client).await;
    let (written, delivered_in) = tokio::join!(
        write_all(n, apps, create),
        until_delivered(&agents, total, "v1")
    );
    let m1 = until_quiet(&client, Duration::from_secs(3)).await;
    let (cpu1, hwm) = proc_stat(principal.pid());
    println!(
        "PHASE deliver applications={total} connected_s={:.2} write_s={:.2} delivered_s={:.2} \
         principal_cpu_s={:.2} principal_peak_rss_mib={:.1} reads_per_app={:.3} writes_per_app={:.3} load={}",
        connected.as_secs_f64(),
        written.as_secs_f64(),
        delivered_in.as_secs_f64(),
        cpu1 - cpu0,
        hwm as f64 / 1024.0,
        (count(&m0, &m1, &["GET", "LIST", "WATCH"])) / total as f64,
        (count(&m0, &m1, &["POST", "PUT", "PATCH", "DELETE", "APPLY"]) - total as f64)
            / total as f64,
        uptime()
    );
    println!(
        "  requests (incl. the bench's {total} POSTs): {}",
        delta(&m0, &m1)
    );

    // 3. restart with everything in place
    let before = requests(&client).await;
    let conns: Vec<u64> = agents.iter().map(|(a, _)| a.connections()).collect();
    principal.stop();
    let t0 = Instant::now();
    let principal = Child::spawn(dir.path(), &addr);
    while agents
        .iter()
        .zip(&conns)
        .any(|((a, _), c)| a.connections() <= *c || !a.is_connected())
    {
        assert!(t0.elapsed() < Duration::from_secs(300), "agents not back");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let back = t0.elapsed();
    let after = until_quiet(&client, Duration::from_secs(5)).await;
    let (cpu, hwm) = proc_stat(principal.pid());
    assert_eq!(delivered(&agents, "v1").await, total, "lost in the restart");
    println!(
        "PHASE restart agents_back_s={:.2} principal_cpu_s={cpu:.2} principal_peak_rss_mib={:.1} \
         gets_of_applications={} load={}",
        back.as_secs_f64(),
        hwm as f64 / 1024.0,
        count(&before, &after, &["GET"]),
        uptime()
    );
    println!("  requests: {}", delta(&before, &after));

    // 4. every Application changed while the hub API server is killed for 10 s
    let disruptive = std::env::var("ARGOCD_PULL_E2E_DISRUPTIVE").as_deref() == Ok("1");
    match std::env::var_os("REALK8S").filter(|_| disruptive) {
        None => println!(
            "SKIP: phase outage needs ARGOCD_PULL_E2E_DISRUPTIVE=1 and REALK8S (it stops the shared hub API server)"
        ),
        Some(realk8s) => {
            let realk8s = std::path::PathBuf::from(realk8s);
            let patch = |a: usize, i: usize| {
                let api = apps_api(&client, &agent_name(a));
                async move {
                    let p = json!({"spec": {"source": {"targetRevision": "v2"}}});
                    api.patch(
                        &format!("app-{i}"),
                        &PatchParams::default(),
                        &Patch::Merge(&p),
                    )
                    .await
                    .map(|_| ())
                }
            };
            let t0 = Instant::now();
            let mut back_at = None;
            let mut restart = None;
            let (_, _) = tokio::join!(write_all(n, apps, patch), async {
                // a third of the changes delivered, then the kill
                while delivered(&agents, "v2").await < total / 3 {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                let pid = std::fs::read_to_string(realk8s.join("run/apiserver-hub.pid"))
                    .unwrap()
                    .trim()
                    .to_string();
                let at_kill = delivered(&agents, "v2").await;
                Command::new("kill").args(["-KILL", &pid]).status().unwrap();
                while std::path::Path::new(&format!("/proc/{pid}")).exists()
                    && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
                        .unwrap_or_default()
                        .contains(") Z")
                {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                let _ = std::fs::remove_file(realk8s.join("run/apiserver-hub.pid"));
                println!("  hub API server killed with {at_kill} of {total} changes delivered");
                tokio::time::sleep(Duration::from_secs(10)).await;
                let up = realk8s.join("up.sh");
                restart = Some(tokio::task::spawn_blocking(move || {
                    // the daemons up.sh starts must not inherit this process' descriptors
                    Command::new("bash")
                        .arg("-c")
                        .arg(r#"for f in /proc/$$/fd/*; do n=${f##*/}; [ "$n" -gt 2 ] && eval "exec $n>&-"; done 2>/dev/null; exec "$0""#)
                        .arg(up)
                        .output()
                }));
                let api = apps_api(&client, &agent_name(0));
                while api
                    .list_metadata(&ListParams::default().limit(1))
                    .await
                    .is_err()
                {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                back_at = Some(Instant::now());
            });
            let after_write = t0.elapsed();
            until_delivered(&agents, total, "v2").await;
            let back = back_at.unwrap();
            let since_back = back.elapsed();
            if let Some(r) = restart {
                let _ = r.await;
            }
            println!(
                "PHASE outage applications={total} all_changed_s={:.2} delivered_after_api_back_s={:.2} lost=0 load={}",
                after_write.as_secs_f64(),
                since_back.as_secs_f64(),
                uptime()
            );
        }
    }

    principal.stop();
    for (a, _) in agents {
        a.shutdown().await;
    }
    // the namespaces go with their Applications (the hub's namespace controller)
    futures::stream::iter(0..n)
        .map(|a| {
            let namespaces = namespaces.clone();
            async move {
                let _ = namespaces
                    .delete(&agent_name(a), &DeleteParams::default())
                    .await;
            }
        })
        .buffer_unordered(WRITERS)
        .collect::<Vec<()>>()
        .await;
}
