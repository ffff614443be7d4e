//! The long-running commands as real processes: SIGTERM / SIGINT end them with exit code 0
//! within 10 s whatever their watches and connections are doing (issue #15); OTLP tracing of
//! the principal and the agent against a real OTLP gRPC receiver (`otlp`).
//!
//! The Kubernetes API is `argocd-pull demo --keep-running` (an embedded hub served over HTTP with
//! a kubeconfig); the PKI comes from `argocd-pull pki`.

mod addon_available;
mod agent;
mod controller;
mod dashboards;
mod flags;
mod full_detail;
mod grpc_metrics;
mod health;
mod informer_buffer;
mod kube_tuning;
mod otlp;
mod pprof;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_argocd-pull");
/// The promise of issue #15.
const EXIT_WITHIN: Duration = Duration::from_secs(10);
/// Waiting for a process to get somewhere (a debug build on a busy machine).
const STARTUP: Duration = Duration::from_secs(120);

pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A child whose stderr and stdout lines are forwarded to a channel (and echoed for debugging).
pub(crate) struct Proc {
    name: &'static str,
    child: Child,
    lines: mpsc::Receiver<String>,
    /// Every line the process wrote (stdout and stderr).
    pub(crate) log: Arc<Mutex<Vec<String>>>,
}

impl Proc {
    pub(crate) fn spawn(name: &'static str, args: &[String], kubeconfig: Option<&Path>) -> Proc {
        Self::spawn_env(name, args, kubeconfig, &[])
    }

    /// [`Proc::spawn`] with extra environment variables.
    pub(crate) fn spawn_env(
        name: &'static str,
        args: &[String],
        kubeconfig: Option<&Path>,
        env: &[(&str, &str)],
    ) -> Proc {
        let mut cmd = Command::new(BIN);
        cmd.envs(env.iter().copied());
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .env("NO_COLOR", "1")
            .env_remove("KUBECONFIG");
        if let Some(k) = kubeconfig {
            cmd.env("KUBECONFIG", k);
        }
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {name}: {e}"));
        let (tx, lines) = mpsc::channel();
        let log: Arc<Mutex<Vec<String>>> = Arc::default();
        for out in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let tx = tx.clone();
            let log = log.clone();
            std::thread::spawn(move || {
                for l in BufReader::new(out).lines().map_while(Result::ok) {
                    log.lock().unwrap().push(l.clone());
                    eprintln!("[{name}] {l}");
                    let _ = tx.send(l);
                }
            });
        }
        Proc {
            name,
            child,
            lines,
            log,
        }
    }

    /// Waits for an output line containing `needle` (the processes' logs are the events).
    pub(crate) fn wait_for_line(&self, needle: &str) -> String {
        let deadline = Instant::now() + STARTUP;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) if l.contains(needle) => return l,
                Ok(_) => {}
                Err(_) => panic!("{}: no output line containing {needle:?}", self.name),
            }
        }
    }

    pub(crate) fn signal(&self, sig: &str) {
        // `kill` is a builtin of every POSIX sh
        let st = Command::new("sh")
            .arg("-c")
            .arg(format!("kill -{sig} {}", self.child.id()))
            .status()
            .unwrap();
        assert!(st.success(), "kill -{sig} {}", self.child.id());
    }

    /// Sends `sig` and returns the exit status and how long the process took to end.
    /// The process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    pub(crate) fn stop(mut self, sig: &str) -> (ExitStatus, Duration) {
        let t0 = Instant::now();
        self.signal(sig);
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                return (st, t0.elapsed());
            }
            if t0.elapsed() > EXIT_WITHIN {
                let _ = self.child.kill();
                panic!(
                    "{} did not exit within {EXIT_WITHIN:?} after SIG{sig}",
                    self.name
                );
            }
            // process exit has no awaitable event in std; poll the wait status
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) fn run(args: &[&str]) {
    let out = Command::new(BIN).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "argocd-pull {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A fresh directory under the temp dir for one test.
/// Writes to `path` a kubeconfig for the API server at `server` (`http://…`, no credentials).
pub(crate) fn write_kubeconfig(path: &Path, server: &str) {
    std::fs::write(
        path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\nusers:\n- name: u\n  user: {{}}\n"
        ),
    )
    .unwrap();
}

pub(crate) fn temp_dir(what: &str) -> std::path::PathBuf {
    let dir =
        std::env::temp_dir().join(format!("argocd-pull-signals-{what}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Deletes a CRD through the API the kubeconfig names.
pub(crate) fn kubectl_delete_crd(kubeconfig: &Path, name: &str) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let kc = kube::config::Kubeconfig::read_from(kubeconfig).unwrap();
        let config =
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .unwrap();
        let client = kube::Client::try_from(config).unwrap();
        kube::Api::<CustomResourceDefinition>::all(client)
            .delete(name, &Default::default())
            .await
            .unwrap_or_else(|e| panic!("deleting CRD {name}: {e}"));
    });
}

/// `argocd-pull demo --keep-running` (an embedded hub with one simulated cluster), once it has
/// written its kubeconfig to `kubeconfig`.
pub(crate) fn demo_hub(kubeconfig: &Path) -> Proc {
    let hub = Proc::spawn(
        "hub",
        &[
            "demo".into(),
            "--clusters=1".into(),
            "--apps=1".into(),
            "--keep-running".into(),
            format!("--kubeconfig-out={}", kubeconfig.display()),
        ],
        None,
    );
    hub.wait_for_line("kubeconfig");
    hub
}
