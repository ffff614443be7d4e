//! Faults on the real env (`../shared/realenv`: kube-apiserver + etcd + OCM on loopback), shared
//! by the env-gated fault suites of the controllers and the GitOpsCluster automation: the hub
//! API server stopped and started again by the env's own `up.sh`, a fixed watch retry, and a
//! write retried while the API server is away.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use kube::runtime::utils::Backoff;

/// While it lives the hub API server is down; dropping it (also when a test fails) runs
/// `$REALK8S/up.sh`, which starts what is not running and waits until the env answers.
pub struct ApiServerDown {
    up: PathBuf,
    /// The suite's prefix in what this prints.
    label: &'static str,
}

impl ApiServerDown {
    /// Starts the API server again now (what dropping the guard does).
    pub fn restart(self) {
        drop(self);
    }
}

impl Drop for ApiServerDown {
    fn drop(&mut self) {
        let t0 = Instant::now();
        // up.sh gives the API server 60 s to answer; on a busy machine a start can take longer,
        // and up.sh is idempotent: try up to three times.
        let mut out = up_without_inherited_fds(&self.up).output();
        for _ in 0..2 {
            if matches!(&out, Ok(o) if o.status.success()) {
                break;
            }
            out = up_without_inherited_fds(&self.up).output();
        }
        let label = self.label;
        match out {
            Ok(o) if o.status.success() => {
                eprintln!("{label}: {} hub up again after {:?}", utc(), t0.elapsed())
            }
            Ok(o) => eprintln!(
                "{label}: {} failed: {}{}",
                self.up.display(),
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ),
            Err(e) => eprintln!("{label}: cannot run {}: {e}", self.up.display()),
        }
    }
}

/// Ends the hub kube-apiserver of the env at `realk8s` with `signal` (`-TERM` drains in-flight
/// requests for up to `drain`, then SIGKILL; `-KILL`: every connection reset at once) and waits
/// until the process is gone. Its pid file is removed so that `up.sh` starts a new one (a killed
/// process whose parent is gone may stay a zombie, which `kill -0` still finds). `label`
/// prefixes what is printed.
pub fn end_hub_apiserver(
    realk8s: &Path,
    signal: &str,
    drain: Duration,
    label: &'static str,
) -> ApiServerDown {
    let pidfile = realk8s.join("run/apiserver-hub.pid");
    let pid = std::fs::read_to_string(&pidfile)
        .unwrap_or_else(|e| panic!("{}: {e}", pidfile.display()))
        .trim()
        .to_string();
    let guard = ApiServerDown {
        up: realk8s.join("up.sh"),
        label,
    };
    let status = Command::new("kill").args([signal, &pid]).status().unwrap();
    assert!(status.success(), "kill {signal} {pid}");
    let proc = PathBuf::from(format!("/proc/{pid}"));
    let grace = Instant::now() + drain;
    let deadline = grace + Duration::from_secs(30);
    let mut killed = false;
    while proc.exists() && !is_zombie(&proc) {
        if !killed && signal != "-KILL" && Instant::now() > grace {
            eprintln!("{label}: kube-apiserver {pid} still drains after {drain:?}; SIGKILL");
            let _ = Command::new("kill").args(["-KILL", &pid]).status();
            killed = true;
        }
        assert!(Instant::now() < deadline, "kube-apiserver {pid} still runs");
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = std::fs::remove_file(&pidfile);
    eprintln!(
        "{label}: {} hub kube-apiserver {pid} stopped ({signal})",
        utc()
    );
    guard
}

/// `up.sh` with every file descriptor above stderr closed first: the daemons it starts (the
/// API server) outlive the test, and an inherited descriptor would go with them — the
/// `flock` on the shared env's lock file would then be held until the API server stops again.
fn up_without_inherited_fds(up: &Path) -> Command {
    let mut c = Command::new("bash");
    c.arg("-c")
        .arg(
            r#"for f in /proc/$$/fd/*; do n=${f##*/}; [ "$n" -gt 2 ] && eval "exec $n>&-"; done 2>/dev/null; exec "$0" "$@""#,
        )
        .arg(up);
    c
}

/// Whether the process of `/proc/<pid>` is a zombie (or gone).
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

/// Now, UTC (the fault suites' timeline).
pub fn utc() -> String {
    jiff::Timestamp::now().to_string()
}

/// A fixed watch retry interval (a test's view of the fleet re-lists as soon as the API server
/// answers, not after kube's growing backoff).
pub struct Every(pub Duration);

impl Iterator for Every {
    type Item = Duration;
    fn next(&mut self) -> Option<Duration> {
        Some(self.0)
    }
}

impl Backoff for Every {
    fn reset(&mut self) {}
}

/// Runs `f` until it succeeds (the API server may be down), every 200 ms for up to `limit`.
pub async fn retrying<F, Fut>(what: &str, limit: Duration, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = kube::Result<()>>,
{
    let t0 = Instant::now();
    loop {
        match f().await {
            Ok(()) => return,
            Err(e) if t0.elapsed() < limit => {
                tracing::debug!(what, error = %e, "retrying");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("{what}: {e}"),
        }
    }
}

/// [`retrying`] of a request for which the answer `done` (409: it exists already; 404: it is
/// gone) counts as success.
pub async fn retrying_unless<T, F, Fut>(what: &str, limit: Duration, done: u16, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = kube::Result<T>>,
{
    retrying(what, limit, || {
        let r = f();
        async move {
            match r.await {
                Err(kube::Error::Api(s)) if s.code == done => Ok(()),
                r => r.map(|_| ()),
            }
        }
    })
    .await
}

/// Polls (every 100 ms) until the API server answers a one-item list through `api`; returns
/// when it first did.
pub async fn until_answers<K>(api: &kube::Api<K>) -> Instant
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    loop {
        if api
            .list_metadata(&kube::api::ListParams::default().limit(1))
            .await
            .is_ok()
        {
            return Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
