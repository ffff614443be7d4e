//! `argocd-pull principal` and `argocd-pull agent` as real processes: SIGTERM / SIGINT end them
//! with exit code 0 within 10 s whatever their connections are doing (issue #15).
//!
//! The Kubernetes API is `argocd-pull demo --keep-running` (an embedded hub served over HTTP with
//! a kubeconfig); the PKI comes from `argocd-pull pki`.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_argocd-pull");
/// The promise of issue #15.
const EXIT_WITHIN: Duration = Duration::from_secs(10);
/// Waiting for a process to get somewhere (a debug build on a busy machine).
const STARTUP: Duration = Duration::from_secs(120);

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A child whose stderr and stdout lines are forwarded to a channel (and echoed for debugging).
struct Proc {
    name: &'static str,
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Proc {
    fn spawn(name: &'static str, args: &[String], kubeconfig: Option<&Path>) -> Proc {
        let mut cmd = Command::new(BIN);
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
        for out in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for l in BufReader::new(out).lines().map_while(Result::ok) {
                    eprintln!("[{name}] {l}");
                    let _ = tx.send(l);
                }
            });
        }
        Proc { name, child, lines }
    }

    /// Waits for an output line containing `needle` (the processes' logs are the events).
    fn wait_for_line(&self, needle: &str) -> String {
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

    fn signal(&self, sig: &str) {
        // `kill` is a builtin of every POSIX sh
        let st = Command::new("sh")
            .arg("-c")
            .arg(format!("kill -{sig} {}", self.child.id()))
            .status()
            .unwrap();
        assert!(st.success(), "kill -{sig} {}", self.child.id());
    }

    /// Sends `sig` and returns the exit status and how long the process took to end.
    fn stop(mut self, sig: &str) -> (ExitStatus, Duration) {
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

fn run(args: &[&str]) {
    let out = Command::new(BIN).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "argocd-pull {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn agent_args(pki: &Path, server: SocketAddr, healthz: u16) -> Vec<String> {
    let f = |n: &str| pki.join(n).display().to_string();
    vec![
        "agent".into(),
        format!("--server-address={}", server.ip()),
        format!("--server-port={}", server.port()),
        "--server-name=localhost".into(),
        "--agent-mode=managed".into(),
        "--namespace=edge-local".into(),
        format!("--root-ca-path={}", f("ca.crt")),
        format!("--tls-client-cert={}", f("edge.crt")),
        format!("--tls-client-key={}", f("edge.key")),
        "--metrics-port=0".into(),
        format!("--healthz-port={healthz}"),
    ]
}

#[test]
fn principal_and_agent_exit_0_within_10s_on_sigterm_and_sigint_whatever_the_connections() {
    let dir = std::env::temp_dir().join(format!("argocd-pull-signals-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("hub.kubeconfig");
    let pki = dir.join("pki");
    run(&["pki", "--dir", pki.to_str().unwrap(), "--agent", "edge"]);

    // a Kubernetes API for both components
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

    // 1. an agent that cannot reach its principal (nothing listens there)
    let nowhere: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let lonely = Proc::spawn(
        "lonely-agent",
        &agent_args(&pki, nowhere, free_port()),
        Some(&kubeconfig),
    );
    lonely.wait_for_line("connection to principal failed");
    let (st, took) = lonely.stop("TERM");
    assert_eq!(st.code(), Some(0), "agent without principal: {st:?}");
    eprintln!("agent without a principal stopped in {took:?}");

    // 2. a principal with a connected agent: SIGINT the principal, then SIGTERM the agent that
    //    lost it
    let grpc: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let f = |n: &str| pki.join(n).display().to_string();
    let principal = Proc::spawn(
        "principal",
        &[
            "principal".into(),
            "--listen-host=127.0.0.1".into(),
            format!("--listen-port={}", grpc.port()),
            format!("--tls-cert={}", f("principal.crt")),
            format!("--tls-key={}", f("principal.key")),
            format!("--root-ca-path={}", f("ca.crt")),
            format!("--jwt-key={}", f("jwt.key")),
            "--namespace=argocd".into(),
            "--metrics-port=0".into(),
            format!("--healthz-port={}", free_port()),
        ],
        Some(&kubeconfig),
    );
    principal.wait_for_line("principal listening");
    let agent = Proc::spawn(
        "agent",
        &agent_args(&pki, grpc, free_port()),
        Some(&kubeconfig),
    );
    // the principal logs each agent that opens its event stream
    principal.wait_for_line("agent subscribed");
    let (st, took) = principal.stop("INT");
    assert_eq!(
        st.code(),
        Some(0),
        "principal with a connected agent: {st:?}"
    );
    eprintln!("principal with a connected agent stopped in {took:?}");
    let (st, took) = agent.stop("TERM");
    assert_eq!(st.code(), Some(0), "agent that lost its principal: {st:?}");
    eprintln!("agent that lost its principal stopped in {took:?}");

    drop(hub);
    let _ = std::fs::remove_dir_all(&dir);
}
