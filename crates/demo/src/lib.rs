//! `argocd-pull demo`: argocd-pull end to end with no cluster at all.
//!
//! Starts a simulated OCM fleet ([`argocd_pull_sim::Fleet`]) whose hub is also served over HTTP
//! (a kubeconfig is written) and runs one delivery model on it:
//!
//! * **basic** (default): the hub controllers (propagation, status, cleanup), the GitOpsCluster
//!   controller and the ApplicationSet report aggregator. The demo applies what a user would — an
//!   Argo CD server Service, a Placement and a `GitOpsCluster` registering its clusters with Argo
//!   CD — and the sample workload the way an ApplicationSet with a `clusterDecisionResource`
//!   generator would (a Placement and an ApplicationSet per app, one generated Application per
//!   selected cluster, owned by its ApplicationSet). Converged: every Application Synced and
//!   Healthy, the GitOpsCluster `successful`, every ApplicationSet's
//!   `MulticlusterApplicationSetReport` showing all its clusters synced and healthy.
//! * **agent**: set up through a `GitOpsCluster` with `spec.argoCDAgentAddon` and a Placement, as
//!   a platform team does: the addon controller writes the PKI and the cluster secrets, the demo
//!   runs the principal with them and one agent per cluster in this process (managed mode; the
//!   simulated fleet runs no pods for the addon's agent Deployment); Applications created in each
//!   agent's namespace on the hub go down to the clusters, status comes back through the agents.
//! * **autonomous**: the same with the agents as the source of truth: Applications created on the
//!   clusters appear on the hub.
//!
//! It prints progress and ends with tables of the hub Applications (and in the basic model the
//! GitOpsCluster and the reports). [`Demo`] is the library form (tests inspect the hub it leaves
//! running); [`run`] is `argocd-pull demo`. See `crates/demo/README.md`.

mod addon;
mod apply;
mod args;
mod demo;
mod progress;
mod state;
pub mod workload;

use std::process::ExitCode;

pub use args::{DemoArgs, DemoModel, parse_duration};
pub use demo::{Demo, Outcome};
pub use state::{
    AppRow, Expectation, GitOpsClusterRow, ReportError, ReportRow, State, print_columns,
};
pub use workload::{application_set, generate_application};

/// Runs the demo: exit code 0 when everything converged, 1 on timeout, 2 when the run failed
/// after the start.
pub async fn run(args: DemoArgs) -> anyhow::Result<ExitCode> {
    // SIGTERM as well as Ctrl-C, from the start: a process manager stops the demo gracefully
    // whether it is still converging or keeping the hub up
    let stop = argocd_pull_ops::shutdown::on_signal();
    let keep_running = args.keep_running;
    let demo = Demo::start(args).await?;
    let driven = tokio::select! {
        r = demo.drive() => Some(r),
        _ = stop.cancelled() => None,
    };
    let stopped_early = driven.is_none();
    let code = match driven {
        Some(Ok(o)) if o.converged => ExitCode::SUCCESS,
        Some(Ok(_)) => ExitCode::from(1),
        Some(Err(e)) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
        // stopped before it converged: not a failure of the product
        None => ExitCode::SUCCESS,
    };
    if keep_running && !stopped_early {
        demo.print_explore_hints();
        stop.cancelled().await;
    }
    const STOP_WITHIN: std::time::Duration = std::time::Duration::from_secs(8);
    if tokio::time::timeout(STOP_WITHIN, demo.shutdown())
        .await
        .is_err()
    {
        eprintln!("warning: the demo did not stop within {STOP_WITHIN:?}; exiting anyway");
    }
    Ok(code)
}
