//! Issue 30 through the built binary: `argocd-pull principal` and `argocd-pull agent` processes,
//! embedded hubs served over HTTP (a principal cluster and an agent cluster, contexts
//! `principal` and `agent` of one kubeconfig), the PKI from `argocd-pull pki`:
//!
//! * `status`: what the hub shows of each agent (its cluster secret) and `ctl agent list` in
//!   every format — connection, since when, versions (unknown with the reason when the agent's
//!   API server does not answer), mode, Applications, events queued; `Failed` within 2 × the
//!   heartbeat interval of a drop and back; never `Failed` across a principal restart; no write
//!   in a steady state;
//! * `failover`: `--leader-elect` with two replicas, the active one killed: never `Failed`;
//! * `resync`: `--resync-interval` recovers an update the hub lost; `--resync-min-interval`
//!   refuses rounds that come too soon.

mod failover;
mod real;
mod resync;
mod status;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use argocd_pull_agent_core::agent_status::{self as st, AgentStatus};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::Api;
use kube::api::{DynamicObject, PostParams};
use kube::runtime::watcher;

pub const BIN: &str = env!("CARGO_BIN_EXE_argocd-pull");
/// Waiting for a process or the hub to get somewhere (a debug build on a busy machine).
pub const T: Duration = Duration::from_secs(120);
/// The principal's `--heartbeat-interval` in these tests.
pub const HEARTBEAT: Duration = Duration::from_secs(2);

const APP_CRD: &str = include_str!("../../../api/crds/argocd/application-crd.yaml");
const PROJECT_CRD: &str = include_str!("../../../api/crds/argocd/appproject-crd.yaml");

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A child whose output lines go to a channel (and are echoed for debugging).
pub struct Proc {
    name: String,
    child: Child,
    lines: Mutex<mpsc::Receiver<String>>,
}

impl Proc {
    pub fn spawn(name: &str, args: &[String], kubeconfig: &Path) -> Proc {
        let mut child = Command::new(BIN)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .env("NO_COLOR", "1")
            .env("KUBECONFIG", kubeconfig)
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {name}: {e}"));
        let (tx, lines) = mpsc::channel();
        for out in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let (tx, name) = (tx.clone(), name.to_string());
            std::thread::spawn(move || {
                for l in BufReader::new(out).lines().map_while(Result::ok) {
                    eprintln!("[{name}] {l}");
                    let _ = tx.send(l);
                }
            });
        }
        Proc {
            name: name.to_string(),
            child,
            lines: Mutex::new(lines),
        }
    }

    /// Waits for an output line containing every one of `needles` (the logs are the events).
    pub fn wait_for_line(&self, needles: &[&str]) -> String {
        let deadline = Instant::now() + T;
        let lines = self.lines.lock().unwrap();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let l = tokio::task::block_in_place(|| lines.recv_timeout(left));
            match l {
                Ok(l) if needles.iter().all(|n| l.contains(n)) => return l,
                Ok(_) => {}
                Err(_) => panic!("{}: no output line containing {needles:?}", self.name),
            }
        }
    }

    /// Waits until each of `sets` matched a line (every needle of the set), in any order.
    pub fn wait_for_lines(&self, sets: &[&[&str]]) {
        let deadline = Instant::now() + T;
        let lines = self.lines.lock().unwrap();
        let mut left: Vec<&[&str]> = sets.to_vec();
        while !left.is_empty() {
            let wait = deadline.saturating_duration_since(Instant::now());
            match tokio::task::block_in_place(|| lines.recv_timeout(wait)) {
                Ok(l) => left.retain(|set| !set.iter().all(|n| l.contains(n))),
                Err(_) => panic!("{}: no output lines containing {left:?}", self.name),
            }
        }
    }

    /// Sends `sig` (`TERM`, `KILL`) and waits for the process to end.
    pub fn stop(mut self, sig: &str) {
        let st = Command::new("sh")
            .arg("-c")
            .arg(format!("kill -{sig} {}", self.child.id()))
            .status()
            .unwrap();
        assert!(st.success());
        tokio::task::block_in_place(|| {
            let _ = self.child.wait();
        });
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What a ctl run printed and its exit code.
pub struct Out {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// Three embedded hubs over HTTP (contexts `principal`, `agent`, `agent-2`), a kubeconfig
/// naming them, the PKI for `agents`.
pub struct Env {
    pub principal_hub: argocd_pull_hub::Hub,
    pub agent_hub: argocd_pull_hub::Hub,
    pub agent_hub_2: argocd_pull_hub::Hub,
    _servers: Vec<argocd_pull_hub::HubServer>,
    pub kubeconfig: PathBuf,
    pub pki: PathBuf,
    _dir: tempfile::TempDir,
}

impl Env {
    pub async fn new(agents: &[&str]) -> Env {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let (principal_hub, agent_hub, agent_hub_2) = (
            argocd_pull_hub::Hub::new(),
            argocd_pull_hub::Hub::new(),
            argocd_pull_hub::Hub::new(),
        );
        for h in [&principal_hub, &agent_hub, &agent_hub_2] {
            h.install_crds_yaml(APP_CRD).unwrap();
            h.install_crds_yaml(PROJECT_CRD).unwrap();
        }
        let addr: std::net::SocketAddr = "127.0.0.1:0".parse().unwrap();
        let servers = vec![
            principal_hub.serve(addr).await.unwrap(),
            agent_hub.serve(addr).await.unwrap(),
            agent_hub_2.serve(addr).await.unwrap(),
        ];
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: principal\n  cluster:\n    server: {}\n- name: agent\n  cluster:\n    server: {}\n- name: agent-2\n  cluster:\n    server: {}\ncontexts:\n- name: principal\n  context:\n    cluster: principal\n    user: u\n- name: agent\n  context:\n    cluster: agent\n    user: u\n- name: agent-2\n  context:\n    cluster: agent-2\n    user: u\ncurrent-context: principal\nusers:\n- name: u\n  user: {{}}\n",
                servers[0].url(),
                servers[1].url(),
                servers[2].url()
            ),
        )
        .unwrap();
        let pki = dir.path().join("pki");
        let out = Command::new(BIN)
            .args(["pki", "--dir", pki.to_str().unwrap(), "--agent"])
            .arg(agents.join(","))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let env = Env {
            principal_hub,
            agent_hub,
            agent_hub_2,
            _servers: servers,
            kubeconfig,
            pki,
            _dir: dir,
        };
        env.namespace(&env.principal_hub, "argocd").await;
        env
    }

    pub async fn namespace(&self, hub: &argocd_pull_hub::Hub, name: &str) {
        let ns: Namespace =
            serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap();
        let _ = Api::<Namespace>::all(hub.client())
            .create(&PostParams::default(), &ns)
            .await;
    }

    /// The Argo CD cluster secret `cluster-<agent>` on the principal's hub.
    pub async fn cluster_secret(&self, agent: &str) {
        let f = |n: &str| std::fs::read(self.pki.join(n)).unwrap();
        let s = argocd_pull_agent_core::cluster_secret::cluster_secret(
            agent,
            "argocd",
            &format!("https://argocd-agent-resource-proxy:9090?agentName={agent}"),
            Default::default(),
            &f(&format!("{agent}.crt")),
            &f(&format!("{agent}.key")),
            &f("ca.crt"),
        )
        .unwrap();
        self.secrets()
            .create(&PostParams::default(), &s)
            .await
            .unwrap();
    }

    pub fn secrets(&self) -> Api<Secret> {
        Api::namespaced(self.principal_hub.client(), "argocd")
    }

    /// Creates any namespaced object on `hub`.
    pub async fn create(&self, hub: &argocd_pull_hub::Hub, obj: serde_json::Value) {
        let c = hub.client();
        let gvk = kube::api::GroupVersionKind::try_from(
            &serde_json::from_value::<kube::api::TypeMeta>(obj.clone()).unwrap(),
        )
        .unwrap();
        let (ar, _) = kube::discovery::pinned_kind(&c, &gvk).await.unwrap();
        let ns = obj["metadata"]["namespace"].as_str().unwrap().to_string();
        let api = Api::<DynamicObject>::namespaced_with(c, &ns, &ar);
        let o: DynamicObject = serde_json::from_value(obj).unwrap();
        api.create(&PostParams::default(), &o).await.unwrap();
    }

    fn pki_file(&self, n: &str) -> String {
        self.pki.join(n).display().to_string()
    }

    /// `argocd-pull principal` flags for this environment.
    pub fn principal_args(&self, grpc: u16, extra: &[&str]) -> Vec<String> {
        let mut v: Vec<String> = vec![
            "principal".into(),
            "--listen-host=127.0.0.1".into(),
            format!("--listen-port={grpc}"),
            format!("--tls-cert={}", self.pki_file("principal.crt")),
            format!("--tls-key={}", self.pki_file("principal.key")),
            format!("--root-ca-path={}", self.pki_file("ca.crt")),
            format!("--jwt-key={}", self.pki_file("jwt.key")),
            "--namespace=argocd".into(),
            "--kubecontext=principal".into(),
            "--metrics-port=0".into(),
            format!("--healthz-port={}", free_port()),
            "--enable-resource-proxy=false".into(),
            "--disable-redis-proxy".into(),
            // no Argo CD Redis here: the cluster-info writes fail fast (and are logged)
            "--redis-server-address=127.0.0.1:1".into(),
            format!("--heartbeat-interval={}s", HEARTBEAT.as_secs()),
        ];
        // a flag in `extra` replaces the default one
        let name = |a: &str| a.split('=').next().unwrap_or_default().to_string();
        v.retain(|d| !extra.iter().any(|e| name(e) == name(d)));
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    }

    pub fn principal(&self, name: &str, grpc: u16, extra: &[&str]) -> Proc {
        let p = Proc::spawn(name, &self.principal_args(grpc, extra), &self.kubeconfig);
        p.wait_for_line(&["principal listening"]);
        p
    }

    /// `argocd-pull agent <name>` against the principal at `grpc`, its Applications in
    /// namespace `<name>-local` of the agent hub (`--kubecontext=agent-2` in `extra`: the second).
    pub async fn agent(&self, name: &str, mode: &str, grpc: u16, extra: &[&str]) -> Proc {
        let hub = match extra.contains(&"--kubecontext=agent-2") {
            true => &self.agent_hub_2,
            false => &self.agent_hub,
        };
        self.namespace(hub, &format!("{name}-local")).await;
        let mut args: Vec<String> = vec!["agent".into(), "--server-address=127.0.0.1".into()];
        args.extend([
            format!("--server-port={grpc}"),
            "--server-name=localhost".into(),
            format!("--agent-mode={mode}"),
            format!("--namespace={name}-local"),
            format!("--root-ca-path={}", self.pki_file("ca.crt")),
            format!(
                "--tls-client-cert={}",
                self.pki_file(&format!("{name}.crt"))
            ),
            format!("--tls-client-key={}", self.pki_file(&format!("{name}.key"))),
            "--metrics-port=0".into(),
            format!("--healthz-port={}", free_port()),
            "--redis-addr=127.0.0.1:1".into(),
        ]);
        args.push("--kubecontext=agent".into());
        // a flag in `extra` replaces the default one
        let flag = |a: &str| a.split('=').next().unwrap_or_default().to_string();
        args.retain(|d| !extra.iter().any(|e| flag(e) == flag(d)));
        args.extend(extra.iter().map(|s| s.to_string()));
        Proc::spawn(name, &args, &self.kubeconfig)
    }

    /// `argocd-pull ctl <args>` against the principal's hub.
    pub fn ctl(&self, args: &[&str]) -> Out {
        let out = tokio::task::block_in_place(|| {
            Command::new(BIN)
                .arg("ctl")
                .args(args)
                .env("KUBECONFIG", &self.kubeconfig)
                .env("HOME", self._dir.path())
                .env_remove("ARGOCD_AGENT_PRINCIPAL_CONTEXT")
                .env_remove("ARGOCD_AGENT_PRINCIPAL_NAMESPACE")
                .output()
                .unwrap()
        });
        let o = Out {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        };
        eprintln!(
            "$ argocd-pull ctl {}\n{}{}",
            args.join(" "),
            o.stdout,
            o.stderr
        );
        o
    }

    /// `ctl agent list -o json`, by agent name.
    pub fn agent_list_json(&self) -> BTreeMap<String, serde_json::Value> {
        let o = self.ctl(&["agent", "list", "-o", "json"]);
        assert_eq!(o.code, 0, "{}", o.stderr);
        let v: Vec<serde_json::Value> = serde_json::from_str(&o.stdout).unwrap();
        v.into_iter()
            .map(|r| (r["name"].as_str().unwrap().to_string(), r))
            .collect()
    }
}

pub fn published(s: &Secret) -> Option<AgentStatus> {
    AgentStatus::from_annotations(&s.metadata.annotations.clone().unwrap_or_default())
}

/// Waits on the watch of `cluster-<agent>` until what it shows satisfies `pred`.
pub async fn wait_shown(
    secrets: &Api<Secret>,
    agent: &str,
    what: &str,
    pred: impl Fn(&AgentStatus) -> bool,
) -> AgentStatus {
    let cfg = watcher::Config::default().fields(&format!("metadata.name=cluster-{agent}"));
    let mut w = watcher::watcher(secrets.clone(), cfg).boxed();
    let r = tokio::time::timeout(T, async {
        while let Some(e) = w.next().await {
            if let Ok(watcher::Event::Apply(s) | watcher::Event::InitApply(s)) = e
                && let Some(p) = published(&s)
                && pred(&p)
            {
                return p;
            }
        }
        panic!("watch ended");
    })
    .await;
    r.unwrap_or_else(|_| panic!("timed out waiting for {agent}: {what}"))
}

/// Every state `cluster-<agent>` shows from now on.
pub fn record(secrets: &Api<Secret>, agent: &str) -> Arc<Mutex<Vec<AgentStatus>>> {
    let seen: Arc<Mutex<Vec<AgentStatus>>> = Arc::default();
    let s2 = seen.clone();
    let cfg = watcher::Config::default().fields(&format!("metadata.name=cluster-{agent}"));
    let mut w = watcher::watcher(secrets.clone(), cfg).boxed();
    tokio::spawn(async move {
        while let Some(e) = w.next().await {
            if let Ok(watcher::Event::Apply(s) | watcher::Event::InitApply(s)) = e
                && let Some(p) = published(&s)
            {
                s2.lock().unwrap().push(p);
            }
        }
    });
    seen
}

/// Asserts every recorded state is `Successful` since `since`.
pub fn never_failed(seen: &Arc<Mutex<Vec<AgentStatus>>>, since: &AgentStatus, what: &str) {
    let since = since.since;
    let states = seen.lock().unwrap().clone();
    assert!(!states.is_empty(), "{what}: the watch saw the secret");
    for s in &states {
        assert_eq!(
            s.connection,
            st::Connection::Successful,
            "{what}: never Failed: {states:?}"
        );
        assert_eq!(s.since, since, "{what}: connected since the same time");
    }
}

/// An Application for the hub or an agent's cluster.
pub fn app(ns: &str, name: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"project": "default",
                 "source": {"repoURL": "https://example.com/repo.git", "path": "p", "targetRevision": "HEAD"},
                 "destination": {"server": "https://kubernetes.default.svc", "namespace": "guestbook"}}
    })
}

/// A metric's value in a `/metrics` text (summed over the series matching `labels`).
pub fn metric(text: &str, name: &str, labels: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name) && l.contains(labels))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// An HTTP GET on loopback: the body.
pub fn http_get(port: u16, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n"
    )
    .ok()?;
    let mut r = String::new();
    s.read_to_string(&mut r).ok()?;
    Some(r.split_once("\r\n\r\n")?.1.to_string())
}
