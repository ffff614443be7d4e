//! `argocd-pull controller`: every hub controller in one process — the basic pull model
//! (propagation, status, cleanup), GitOpsCluster → cluster secrets and the ApplicationSet report —
//! under one admin server (`/metrics`, `/healthz`, `/readyz`), one leader-election Lease and one
//! graceful shutdown. Each controller can be switched off by a flag.

use std::sync::Arc;

use anyhow::Context as _;
use argocd_pull_controller::cli::ControllerArgs;
use argocd_pull_gitops::{GitOpsArgs, GitOpsConfig};
use argocd_pull_ops::admin::{self, Readiness};
use argocd_pull_ops::leader::{self, LeaderConfig};
use argocd_pull_ops::metrics::Registry;
use argocd_pull_ops::{logging, shutdown};

#[derive(clap::Args, Debug)]
pub struct HubControllerArgs {
    #[command(flatten)]
    pub basic: ControllerArgs,
    #[command(flatten)]
    pub gitops: GitOpsArgs,
}

impl HubControllerArgs {
    /// The two controller configurations these flags describe. With the report on, the
    /// propagation controller adds the report's feedback rules to every work.
    pub fn configs(&self) -> (argocd_pull_controller::ControllerConfig, GitOpsConfig) {
        let mut basic = self.basic.config();
        let gitops = GitOpsConfig::from(self.gitops.clone());
        if gitops.report {
            basic.work.extra_feedback = argocd_pull_gitops::report::extra_feedback_rules();
        }
        (basic, gitops)
    }
}

/// Runs the hub controllers until SIGTERM/Ctrl-C (or the loss of leadership).
pub async fn run(args: HubControllerArgs) -> anyhow::Result<()> {
    logging::init(args.basic.log_format)?;
    argocd_pull_controller::install_crypto_provider();
    let token = shutdown::on_signal();
    let client = kube::Client::try_default()
        .await
        .context("no Kubernetes cluster found: set KUBECONFIG or run inside a cluster")?;

    let (mut basic, gitops) = args.configs();
    let mut registry = Registry::with_prefix("argocd_pull");
    basic.metrics.register(&mut registry);
    gitops.metrics.register(&mut registry);
    let readiness = Readiness::default();
    basic.readiness = readiness.clone();
    let (addr, server) = admin::bind(
        args.basic.admin_addr,
        Arc::new(registry),
        readiness,
        token.clone(),
    )
    .await?;
    let server = tokio::spawn(server);
    tracing::info!(%addr, "admin server listening (/metrics, /healthz, /readyz)");

    let leadership = if args.basic.leader_elect() {
        let cfg = LeaderConfig::new(args.basic.lease_name.clone(), args.basic.lease_namespace());
        match leader::acquire(client.clone(), &cfg, &token).await? {
            Some(l) => Some(l),
            None => return Ok(()), // shut down while waiting for the Lease
        }
    } else {
        None
    };

    let basic_running = argocd_pull_controller::start(client.clone(), basic).await?;
    let gitops_running = argocd_pull_gitops::start(client, gitops).await?;
    tracing::info!(?args, "argocd-pull controller running");

    let lost = async {
        match &leadership {
            Some(l) => l.lost().await,
            None => std::future::pending().await,
        }
    };
    let result = tokio::select! {
        _ = token.cancelled() => Ok(()),
        _ = lost => Err(anyhow::anyhow!("leadership lost; exiting so that a new leader takes over")),
    };
    basic_running.shutdown().await;
    gitops_running.shutdown().await;
    if let Some(l) = leadership {
        l.release().await;
    }
    token.cancel();
    server.await??;
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: HubControllerArgs,
    }

    #[test]
    fn no_flags_runs_every_hub_controller_with_report_feedback() {
        let (basic, gitops) = Cli::try_parse_from(["controller"]).unwrap().args.configs();
        assert!(basic.propagation && basic.status && basic.cleanup);
        assert!(gitops.gitopscluster && gitops.report);
        assert_eq!(
            basic.work.extra_feedback,
            argocd_pull_gitops::report::extra_feedback_rules()
        );
        assert!(!basic.work.extra_feedback.is_empty());
    }

    #[test]
    fn each_controller_can_be_switched_off() {
        let cli = Cli::try_parse_from([
            "controller",
            "--disable-propagation",
            "--disable-status",
            "--disable-cleanup",
            "--gitopscluster=false",
            "--appset-report=false",
        ])
        .unwrap();
        let (basic, gitops) = cli.args.configs();
        assert!(!basic.propagation && !basic.status && !basic.cleanup);
        assert!(!gitops.gitopscluster && !gitops.report);
        assert!(
            basic.work.extra_feedback.is_empty(),
            "no report, no extra feedback rules"
        );
    }
}
