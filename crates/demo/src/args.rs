//! `argocd-pull demo` options: the delivery model, the flags (each also readable from the
//! environment) and how a duration is written; the fixed set-up timeout.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// The delivery model the demo runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
#[non_exhaustive]
pub enum DemoModel {
    /// ManifestWorks wrapping Applications; status through ManifestWork feedback; a
    /// GitOpsCluster and the ApplicationSet reports.
    Basic,
    /// A principal and one agent per cluster over loopback mTLS (managed mode): Applications
    /// created on the hub in each agent's namespace.
    Agent,
    /// The agents are the source of truth: Applications created on the clusters appear on the hub.
    Autonomous,
}

/// `argocd-pull demo` options (each also readable from the environment).
#[derive(Clone, Debug, clap::Args)]
pub struct DemoArgs {
    /// Managed clusters to simulate.
    #[arg(long, env = "ARGOCD_PULL_DEMO_CLUSTERS", default_value_t = 5)]
    pub clusters: usize,
    /// Applications per cluster (one ApplicationSet each).
    #[arg(long, env = "ARGOCD_PULL_DEMO_APPS", default_value_t = 2)]
    pub apps: usize,
    /// Keep the hub up after the run (until Ctrl-C) to explore it with kubectl.
    #[arg(long, env = "ARGOCD_PULL_DEMO_KEEP_RUNNING")]
    pub keep_running: bool,
    /// Where to write the hub's kubeconfig [default: <temp dir>/argocd-pull-demo.kubeconfig].
    #[arg(long, env = "ARGOCD_PULL_DEMO_KUBECONFIG_OUT")]
    pub kubeconfig_out: Option<PathBuf>,
    /// How long to wait for everything to converge (e.g. 90s, 2m, 500ms).
    #[arg(long, env = "ARGOCD_PULL_DEMO_TIMEOUT", default_value = "60s", value_parser = parse_duration)]
    pub timeout: Duration,
    /// Delivery model.
    #[arg(long, env = "ARGOCD_PULL_DEMO_MODEL", value_enum, default_value_t = DemoModel::Basic)]
    pub model: DemoModel,
    /// Address the hub's HTTP API listens on (port 0: any free port).
    #[arg(long, env = "ARGOCD_PULL_DEMO_LISTEN", default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,
    /// Simulated Argo CD time to sync, then again to become healthy.
    #[arg(long, env = "ARGOCD_PULL_DEMO_SYNC_DELAY", default_value = "300ms", value_parser = parse_duration)]
    pub sync_delay: Duration,
    /// Make one Application fail its sync (the simulator's `sim.argocd-pull.io/fail`), to show
    /// how failures surface (Degraded on the hub, an error in the ApplicationSet report). The run
    /// then converges when that app is Degraded and the rest Synced and Healthy.
    #[arg(long, env = "ARGOCD_PULL_DEMO_WITH_FAILURE")]
    pub with_failure: bool,
}

impl Default for DemoArgs {
    fn default() -> Self {
        DemoArgs {
            clusters: 5,
            apps: 2,
            keep_running: false,
            kubeconfig_out: None,
            timeout: Duration::from_secs(60),
            model: DemoModel::Basic,
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            sync_delay: Duration::from_millis(300),
            with_failure: false,
        }
    }
}

/// Parses `90`, `90s`, `500ms`, `2m` or `1h`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| !c.is_ascii_digit() && c != '.') {
        Some(i) => (&s[..i], &s[i..]),
        None => (s, "s"),
    };
    let n: f64 = num
        .parse()
        .map_err(|_| format!("invalid duration {s:?}: expected e.g. 90s, 500ms, 2m"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(format!("invalid duration unit in {s:?}: use ms, s, m or h")),
    };
    Ok(Duration::from_secs_f64(secs))
}

/// How long to wait for a Placement's decisions and for the agents to connect.
pub(crate) const SETUP_TIMEOUT: Duration = Duration::from_secs(30);
