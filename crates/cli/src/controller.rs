//! `argocd-pull controller`: every hub controller in one process — the basic pull model
//! (propagation, status, cleanup), GitOpsCluster → cluster secrets and the ApplicationSet report —
//! under one admin server (`/metrics`, `/healthz`, `/readyz`), one leader-election Lease and one
//! graceful shutdown. Each controller can be switched off by a flag.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use argocd_pull_controller::cli::ControllerArgs;
use argocd_pull_gitops::{GitOpsArgs, GitOpsConfig};
use argocd_pull_ops::CancellationToken;
use argocd_pull_ops::admin::{self, Readiness};
use argocd_pull_ops::apis::{ApiGate, GateOptions};
use argocd_pull_ops::leader::{self, LeaderConfig};
use argocd_pull_ops::metrics::Registry;
use argocd_pull_ops::shutdown;

#[derive(clap::Args, Debug)]
pub struct HubControllerArgs {
    #[command(flatten)]
    pub basic: ControllerArgs,
    #[command(flatten)]
    pub gitops: GitOpsArgs,
}

impl HubControllerArgs {
    /// The two controller configurations these flags describe. With the report on, the
    /// propagation controller adds the report's feedback rules to the works of
    /// ApplicationSet-owned Applications (the only ones the report reads).
    pub fn configs(&self) -> (argocd_pull_controller::ControllerConfig, GitOpsConfig) {
        let mut basic = self.basic.config();
        let gitops = GitOpsConfig::from(self.gitops.clone());
        if gitops.report {
            basic.work.appset_feedback = argocd_pull_gitops::report::extra_feedback_rules();
        }
        (basic, gitops)
    }
}

/// How long the controllers get to stop after SIGTERM (then they are abandoned), and how long
/// releasing the Lease and closing the admin server may take: 6 + 2 + 1 s, inside
/// [`shutdown::GRACE`] (10 s).
const STOP_CONTROLLERS: Duration = Duration::from_secs(6);
const RELEASE_LEASE: Duration = Duration::from_secs(2);
const STOP_ADMIN: Duration = Duration::from_secs(1);

/// Runs the hub controllers until SIGTERM/Ctrl-C (or the loss of leadership).
pub async fn run(args: HubControllerArgs) -> anyhow::Result<()> {
    run_until(args, shutdown::on_signal()).await
}

/// Runs the hub controllers until `token` is cancelled (or the loss of leadership). Shutdown is
/// bounded whatever the API server does: controllers that do not stop within 6 s are abandoned,
/// the Lease release gets 2 s.
pub async fn run_until(args: HubControllerArgs, token: CancellationToken) -> anyhow::Result<()> {
    argocd_pull_controller::install_crypto_provider();
    // Watches: kube's HTTP/1.1 client, each watch on a connection of its own. The reconciles'
    // requests: one multiplexed HTTP/2 connection (`argocd_pull_ops::client`), as client-go
    // makes them — kube's client opened a TCP + TLS connection per concurrent request, i.e. up
    // to `--concurrency` handshakes in a burst (issue 32; docs/performance.md, "Basic pull
    // model on a real API server").
    let client = kube::Client::try_default()
        .await
        .context("no Kubernetes cluster found: set KUBECONFIG or run inside a cluster")?;
    let requests = argocd_pull_ops::client::infer()
        .await
        .context("no Kubernetes cluster found: set KUBECONFIG or run inside a cluster")?;

    let (mut basic, gitops) = args.configs();
    let run_basic = basic.propagation || basic.status || basic.cleanup;
    let mut features = argocd_pull_gitops::features(&gitops);
    if run_basic {
        features.push(argocd_pull_controller::feature(&basic));
    }
    let readiness = Readiness::default();
    if !run_basic {
        readiness.set(true); // no caches to fill
    }
    let gate = ApiGate::new(
        client.clone(),
        features,
        readiness.clone(),
        GateOptions::default(),
    );
    let mut registry = Registry::with_prefix("argocd_pull");
    basic.metrics.register(&mut registry);
    gitops.metrics.register(&mut registry);
    gate.register(&mut registry);
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
        // `acquire` returns `None` when shut down while waiting; its first API calls are raced
        // with the token too (an unreachable API server must not delay the exit).
        let acquired = tokio::select! {
            r = leader::acquire(client.clone(), &cfg, &token) => r?,
            _ = token.cancelled() => None,
        };
        match acquired {
            Some(l) => Some(l),
            None => {
                stop_admin(server).await;
                return Ok(());
            }
        }
    } else {
        None
    };

    let mut tasks = vec![(
        "api-discovery".to_string(),
        tokio::spawn(gate.clone().run(token.clone())),
    )];
    if run_basic {
        let (gate, client, token) = (gate.clone(), client.clone(), token.clone());
        tasks.push((
            argocd_pull_controller::FEATURE.to_string(),
            tokio::spawn(async move {
                gate.supervise(argocd_pull_controller::FEATURE, token, |t| {
                    run_basic_controllers(client.clone(), requests.clone(), basic.clone(), t)
                })
                .await
            }),
        ));
    }
    let gitops_running = argocd_pull_gitops::start_gated(client, gitops, Some(gate)).await?;
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
    tracing::info!("stopping: no new reconcile starts, in-flight writes finish");
    token.cancel();
    let (basic_clean, gitops_clean) = tokio::join!(
        shutdown::join_within(tasks, STOP_CONTROLLERS),
        gitops_running.shutdown_within(STOP_CONTROLLERS)
    );
    if let Some(l) = leadership
        && tokio::time::timeout(RELEASE_LEASE, l.release())
            .await
            .is_err()
    {
        tracing::warn!(
            "releasing the leader Lease timed out; another replica takes over when it expires"
        );
    }
    stop_admin(server).await;
    tracing::info!(
        clean = basic_clean && gitops_clean,
        "argocd-pull controller stopped"
    );
    result
}

/// The basic pull-model controllers until `token`; a failed start (RBAC, API errors) is retried
/// with backoff.
async fn run_basic_controllers(
    watches: kube::Client,
    requests: kube::Client,
    config: argocd_pull_controller::ControllerConfig,
    token: CancellationToken,
) {
    let mut delay = Duration::from_secs(5);
    loop {
        let started = tokio::select! {
            r = argocd_pull_controller::start_split(watches.clone(), requests.clone(), config.clone()) => r,
            _ = token.cancelled() => return,
        };
        match started {
            Ok(running) => {
                token.cancelled().await;
                running.shutdown_within(STOP_CONTROLLERS).await;
                return;
            }
            Err(e) => {
                tracing::error!(feature = argocd_pull_controller::FEATURE, error = %format!("{e:#}"), retry_in_s = delay.as_secs(), "cannot start the pull-model controllers");
                tokio::select! {
                    _ = token.cancelled() => return,
                    _ = tokio::time::sleep(delay) => {}
                }
                delay = (delay * 2).min(Duration::from_secs(300));
            }
        }
    }
}

async fn stop_admin(server: tokio::task::JoinHandle<anyhow::Result<()>>) {
    match tokio::time::timeout(STOP_ADMIN, server).await {
        Ok(Ok(Ok(()))) => {}
        Ok(Ok(Err(e))) => tracing::warn!(error = %format!("{e:#}"), "admin server failed"),
        Ok(Err(e)) => tracing::warn!(error = %e, "admin server task failed"),
        Err(_) => tracing::warn!("admin server did not stop in time"),
    }
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
            basic.work.appset_feedback,
            argocd_pull_gitops::report::extra_feedback_rules()
        );
        assert!(!basic.work.appset_feedback.is_empty());
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
            basic.work.appset_feedback.is_empty(),
            "no report, no extra feedback rules"
        );
    }
}
