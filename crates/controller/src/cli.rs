//! Flags of the basic pull-model controllers, flattened into `argocd-pull controller` (the
//! binary's `controller` command runs them beside the GitOpsCluster and report controllers).
//!
//! ```text
//! argocd-pull controller [--disable-propagation] [--disable-status] [--disable-cleanup]
//!                        [--binding-gate] [--acm-extras] [--sweep-interval 5m]
//!                        [--admin-addr 0.0.0.0:8080] [--concurrency 32]
//!                        [--leader-elect auto|true|false] [--lease-name ..] [--lease-namespace ..]
//! ```
//!
//! The log flags (`--log-level`, `--log-format`) are global flags of the `argocd-pull` command
//! (`argocd_pull_ops::logging::LogArgs`).
//!
//! Every flag has an `ARGOCD_PULL_*` environment variable. The cluster is found the usual way
//! (`KUBECONFIG` / `~/.kube/config`, then the in-cluster service account).

use std::net::SocketAddr;
use std::time::Duration;

use argocd_pull_domain::WorkOptions;

use crate::ControllerConfig;

/// Whether to hold a Lease before running.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LeaderElect {
    /// On when running inside a cluster (`KUBERNETES_SERVICE_HOST` set), off otherwise.
    Auto,
    True,
    False,
}

/// Flags of `argocd-pull controller`.
#[derive(clap::Args, Clone, Debug)]
pub struct ControllerArgs {
    /// Do not propagate Applications to ManifestWorks.
    #[arg(long, env = "ARGOCD_PULL_DISABLE_PROPAGATION")]
    pub disable_propagation: bool,
    /// Do not write ManifestWork feedback back to Application status.
    #[arg(long, env = "ARGOCD_PULL_DISABLE_STATUS")]
    pub disable_status: bool,
    /// Do not delete ManifestWorks whose Application is gone.
    #[arg(long, env = "ARGOCD_PULL_DISABLE_CLEANUP")]
    pub disable_cleanup: bool,
    /// Propagate only when a PlacementDecision in the Application's namespace lists the cluster
    /// (ACM's behaviour).
    #[arg(long, env = "ARGOCD_PULL_BINDING_GATE")]
    pub binding_gate: bool,
    /// Also send a Namespace (the destination's) and an AppProject, orphaned on delete (ACM's
    /// behaviour).
    #[arg(long, env = "ARGOCD_PULL_ACM_EXTRAS")]
    pub acm_extras: bool,
    /// Period of the cleanup sweep (e.g. `30s`, `5m`, `1h`).
    #[arg(long, env = "ARGOCD_PULL_SWEEP_INTERVAL", default_value = "5m", value_parser = parse_duration)]
    pub sweep_interval: Duration,
    /// Address of the admin server (`/metrics`, `/healthz`, `/readyz`).
    #[arg(long, env = "ARGOCD_PULL_ADMIN_ADDR", default_value = "0.0.0.0:8080")]
    pub admin_addr: SocketAddr,
    /// Concurrent reconciles per controller.
    #[arg(long, env = "ARGOCD_PULL_CONCURRENCY", default_value_t = 32)]
    pub concurrency: u16,
    /// Hold a Lease before running (one active replica).
    #[arg(
        long,
        env = "ARGOCD_PULL_LEADER_ELECT",
        value_enum,
        default_value = "auto"
    )]
    pub leader_elect: LeaderElect,
    /// Name of the leader-election Lease.
    #[arg(
        long,
        env = "ARGOCD_PULL_LEASE_NAME",
        default_value = "argocd-pull-controller"
    )]
    pub lease_name: String,
    /// Namespace of the Lease (default: the pod's namespace, else `argocd-pull`).
    #[arg(long, env = "ARGOCD_PULL_LEASE_NAMESPACE")]
    pub lease_namespace: Option<String>,
}

/// Parses `250ms`, `30s`, `5m`, `1h` (or plain seconds).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("invalid duration {s:?}: expected e.g. 30s, 5m, 1h"))?;
    let d = match unit {
        "" | "s" => Duration::from_secs(n),
        "ms" => Duration::from_millis(n),
        "m" => Duration::from_secs(n * 60),
        "h" => Duration::from_secs(n * 3600),
        _ => return Err(format!("invalid duration unit in {s:?}: use ms, s, m or h")),
    };
    if d.is_zero() {
        return Err(format!("duration {s:?} must be positive"));
    }
    Ok(d)
}

impl ControllerArgs {
    /// The library configuration these flags describe.
    pub fn config(&self) -> ControllerConfig {
        ControllerConfig {
            propagation: !self.disable_propagation,
            status: !self.disable_status,
            cleanup: !self.disable_cleanup,
            binding_gate: self.binding_gate,
            work: WorkOptions {
                acm_extras: self.acm_extras,
                ..Default::default()
            },
            sweep_interval: self.sweep_interval,
            concurrency: self.concurrency.max(1),
            ..Default::default()
        }
    }

    /// Whether to hold the Lease (`auto`: only inside a cluster).
    pub fn leader_elect(&self) -> bool {
        match self.leader_elect {
            LeaderElect::True => true,
            LeaderElect::False => false,
            LeaderElect::Auto => std::env::var_os("KUBERNETES_SERVICE_HOST").is_some(),
        }
    }

    /// The Lease namespace: the flag, else the pod's namespace, else `argocd-pull`.
    pub fn lease_namespace(&self) -> String {
        self.lease_namespace
            .clone()
            .or_else(|| {
                std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
                    .ok()
                    .map(|s| s.trim().to_string())
            })
            .or_else(|| std::env::var("POD_NAMESPACE").ok())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "argocd-pull".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: ControllerArgs,
    }

    #[test]
    fn no_flags_runs_everything() {
        let cli = Cli::try_parse_from(["x"]).unwrap();
        let c = cli.args.config();
        assert!(c.propagation && c.status && c.cleanup);
        assert!(!c.binding_gate && !c.work.acm_extras);
        assert_eq!(c.sweep_interval, Duration::from_secs(300));
    }

    #[test]
    fn flags_switch_controllers() {
        let cli = Cli::try_parse_from([
            "x",
            "--disable-status",
            "--disable-cleanup",
            "--binding-gate",
            "--acm-extras",
            "--sweep-interval",
            "30s",
            "--leader-elect",
            "false",
        ])
        .unwrap();
        let c = cli.args.config();
        assert!(c.propagation && !c.status && !c.cleanup && c.binding_gate && c.work.acm_extras);
        assert_eq!(c.sweep_interval, Duration::from_secs(30));
        assert!(!cli.args.leader_elect());
    }

    #[test]
    fn durations() {
        for (s, d) in [
            ("250ms", Duration::from_millis(250)),
            ("30s", Duration::from_secs(30)),
            ("30", Duration::from_secs(30)),
            ("5m", Duration::from_secs(300)),
            ("1h", Duration::from_secs(3600)),
        ] {
            assert_eq!(parse_duration(s), Ok(d), "{s}");
        }
        for bad in ["", "5x", "m", "0s", "-1s"] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }
}
