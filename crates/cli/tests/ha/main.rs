//! Principal HA through the real binary: `--leader-elect` with the cluster from `KUBECONFIG`
//! (issue 29) and cross-cluster replication (`--ha-enabled`, `argocd-pull ctl ha`).
//!
//! The Kubernetes APIs are `argocd-pull demo --keep-running` processes (embedded hubs served
//! over HTTP with a kubeconfig); the PKI comes from `argocd-pull pki`.

mod active_active;
mod cross_cluster;
mod leader_elect;
mod real;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_argocd-pull");
/// Waiting for a process to get somewhere (a debug build on a busy machine).
pub(crate) const STARTUP: Duration = Duration::from_secs(120);

pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A child whose output lines go to a channel (and are echoed for debugging).
pub(crate) struct Proc {
    name: String,
    child: Child,
    lines: mpsc::Receiver<String>,
    pub(crate) log: Arc<Mutex<Vec<String>>>,
}

impl Proc {
    pub(crate) fn spawn(name: &str, args: &[String], env: &[(&str, &Path)]) -> Proc {
        let mut cmd = Command::new(BIN);
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .env("NO_COLOR", "1")
            .env_remove("KUBECONFIG");
        for (k, v) in env {
            cmd.env(k, v);
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
            let (tx, log, name) = (tx.clone(), log.clone(), name.to_string());
            std::thread::spawn(move || {
                for l in BufReader::new(out).lines().map_while(Result::ok) {
                    log.lock().unwrap().push(l.clone());
                    eprintln!("[{name}] {l}");
                    let _ = tx.send(l);
                }
            });
        }
        Proc {
            name: name.to_string(),
            child,
            lines,
            log,
        }
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits for the process to exit on its own: its exit code (`None`: killed by a signal).
    pub(crate) fn wait_exit(&mut self, within: Duration) -> Option<i32> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s.code();
            }
            assert!(
                Instant::now() < deadline,
                "{}: did not exit within {within:?}",
                self.name
            );
            std::thread::sleep(Duration::from_millis(50));
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
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs the binary to completion: (exit code, stdout, stderr).
pub(crate) fn run(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(BIN)
        .args(args)
        .env_remove("KUBECONFIG")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A fresh directory under the temp dir for one test.
pub(crate) fn temp_dir(what: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("argocd-pull-ha-{what}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `argocd-pull pki` into `dir` with the given agents.
pub(crate) fn pki(dir: &Path, agents: &str) {
    let (code, _, err) = run(&["pki", "--dir", dir.to_str().unwrap(), "--agent", agents]);
    assert_eq!(code, Some(0), "argocd-pull pki: {err}");
}

/// `argocd-pull demo --keep-running` (an embedded hub), once its kubeconfig is written.
pub(crate) fn demo_hub(name: &str, kubeconfig: &Path) -> Proc {
    let hub = Proc::spawn(
        name,
        &[
            "demo".into(),
            "--clusters=1".into(),
            "--apps=1".into(),
            "--keep-running".into(),
            format!("--kubeconfig-out={}", kubeconfig.display()),
        ],
        &[],
    );
    hub.wait_for_line("kubeconfig");
    hub
}

/// An HTTP GET on loopback: (status, headers and body as text).
pub(crate) fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
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
    let code = r.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, r))
}
