//! `argocd-pull`: Argo CD pull-model delivery for Open Cluster Management fleets.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod controller;
mod crds;

/// mimalloc instead of the C library's allocator: on the static musl build, musl's allocator was
/// a quarter of the controller's CPU and more than half of `cmp generate`'s time
/// (docs/performance.md, "Allocator of the binary"). Built with arena eager commit off
/// and 32 MiB arenas (`.cargo/config.toml`), which keep the peak RSS near the system allocator's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Argo CD pull-model delivery for Open Cluster Management (OCM) fleets.
///
/// Managed clusters pull their Argo CD applications from the hub instead of the hub pushing
/// with stored credentials. Run `argocd-pull demo` to see it work with no cluster at all.
#[derive(Parser, Debug)]
#[command(
    name = "argocd-pull",
    version,
    propagate_version = true,
    max_term_width = 100
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// `--log-level` / `--log-format`, global: accepted by every subcommand.
    #[command(flatten)]
    log: argocd_pull_ops::logging::LogArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run every hub controller: basic pull model (Application → ManifestWork, status back, cleanup),
    /// GitOpsCluster → Argo CD cluster secrets, and the ApplicationSet report. Each can be switched off.
    Controller(controller::HubControllerArgs),
    /// Run the whole product on an embedded hub and a simulated fleet: no cluster, no Docker.
    Demo(argocd_pull_demo::DemoArgs),
    /// Config Management Plugin mode: wrap rendered manifests in ManifestWorks (run by Argo CD's cmp-server).
    Cmp(argocd_pull_cmp::cli::CmpArgs),
    /// Agent-based model: run the principal beside the hub's Argo CD (agents connect to it over mTLS gRPC).
    Principal(argocd_pull_agent::cli::PrincipalArgs),
    /// Agent-based model: run the agent on a managed cluster (connects out to the principal).
    Agent(argocd_pull_agent::cli::AgentArgs),
    /// Create a CA, principal and agent certificates and a JWT signing key for a local agent-model setup.
    Pki(argocd_pull_agent::cli::PkiArgs),
    /// Agent-based model: argocd-agentctl's commands (agent, pki, jwt, blocklist, config, validate, ha, version).
    Ctl(argocd_pull_ctl::CtlArgs),
    /// Print the CustomResourceDefinitions argocd-pull serves (GitOpsCluster, MulticlusterApplicationSetReport).
    Crds(crds::CrdsArgs),
    /// Print the version.
    Version,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => return usage_error(e),
    };
    let log = cli.log;
    match cli.command {
        Command::Controller(args) => {
            serve(log, None, None, Workers::CONTROLLER, controller::run(args))
        }
        Command::Demo(args) => demo(args),
        Command::Cmp(args) => argocd_pull_cmp::cli::run(args),
        Command::Principal(args) => serve(
            log,
            Some("ARGOCD_PRINCIPAL"),
            args.otlp.settings(),
            Workers::PerCpu,
            argocd_pull_agent::cli::run_principal(args),
        ),
        Command::Agent(args) => serve(
            log,
            Some("ARGOCD_AGENT"),
            args.otlp.settings(args.mode.as_str()),
            Workers::PerCpu,
            argocd_pull_agent::cli::run_agent(args),
        ),
        Command::Pki(args) => block_on(argocd_pull_agent::cli::run_pki(args)),
        Command::Ctl(args) => run_async(async { Ok(argocd_pull_ctl::run_ctl(args).await) })
            .map_or(ExitCode::FAILURE, ExitCode::from),
        Command::Crds(args) => crds::run(&args),
        Command::Version => {
            println!("argocd-pull {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
    }
}

/// A command-line error: help and version exit 0; a usage error exits 2, except under `ctl`,
/// which exits 1 as argocd-agentctl (cobra) does.
fn usage_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    let _ = e.print();
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => ExitCode::SUCCESS,
        _ if is_ctl() => ExitCode::FAILURE,
        _ => ExitCode::from(2),
    }
}

/// Whether the command line names the `ctl` subcommand (the first word that is not a flag or a
/// global flag's value).
fn is_ctl() -> bool {
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if a == "--log-level" || a == "--log-format" {
            args.next();
            continue;
        }
        if a.starts_with('-') {
            continue;
        }
        return a == "ctl";
    }
    false
}

/// The demo's own exit code (0 converged, 1 timeout, 2 failed); 2 also when it cannot start.
fn demo(args: argocd_pull_demo::DemoArgs) -> ExitCode {
    run_async(argocd_pull_demo::run(args)).unwrap_or(ExitCode::from(2))
}

/// How many worker threads a long-running command's async runtime has. tokio's own
/// `TOKIO_WORKER_THREADS` overrides either.
#[derive(Clone, Copy, Debug)]
enum Workers {
    /// One per CPU (tokio's default): the principal and the agent serve many streams at once.
    PerCpu,
    /// A fixed number.
    Fixed(usize),
}

impl Workers {
    /// The hub controllers wait on the API server, not on the CPU: one worker thread does their
    /// work with less CPU (no hand-over of tasks and wake-ups between threads) and a smaller heap
    /// (one allocator heap instead of one per thread) — docs/perf/controller.md, "Where the CPU
    /// goes on the real API server".
    const CONTROLLER: Workers = Workers::Fixed(1);
}

/// Runs a long-running command: logs initialised from the global flags (then argocd-agent's
/// `<env_prefix>_LOG_LEVEL` / `_LOG_FORMAT`), OTLP tracing when `otlp` is set (spans flushed
/// after the command returns), a multi-threaded runtime with `workers` worker threads (logged).
/// A bad log flag or OTLP address: exit 2.
fn serve(
    log: argocd_pull_ops::logging::LogArgs,
    env_prefix: Option<&str>,
    otlp: Option<argocd_pull_ops::otel::OtlpSettings>,
    workers: Workers,
    fut: impl std::future::Future<Output = anyhow::Result<()>>,
) -> ExitCode {
    let log = match env_prefix {
        Some(prefix) => log.with_env_fallback(prefix),
        None => Ok(log),
    };
    let log = match log {
        Ok(l) => l,
        Err(e) => {
            eprintln!("argocd-pull: {e:#}");
            return ExitCode::from(2);
        }
    };
    if let Some(Err(e)) = otlp.as_ref().map(|o| o.endpoint()) {
        eprintln!("argocd-pull: {e:#}");
        return ExitCode::from(2);
    }
    let run = run_async_on(workers, async move {
        // the exporter's channel lives on the runtime: set up inside it
        let telemetry = otlp
            .map(argocd_pull_ops::otel::Telemetry::start)
            .transpose()?;
        log.init_with_layer(telemetry.as_ref().map(|t| t.layer()))?;
        tracing::info!(
            worker_threads = tokio::runtime::Handle::current().metrics().num_workers(),
            "async runtime started (TOKIO_WORKER_THREADS sets its worker threads)"
        );
        if let Some(t) = &telemetry {
            t.log_started();
        }
        let result = fut.await;
        if let Some(t) = telemetry {
            t.shutdown().await;
        }
        result
    });
    run.map_or(ExitCode::FAILURE, |()| ExitCode::SUCCESS)
}

/// Runs `fut` to completion on a tokio runtime: success, or failure with the error printed.
fn block_on(fut: impl std::future::Future<Output = anyhow::Result<()>>) -> ExitCode {
    run_async(fut).map_or(ExitCode::FAILURE, |()| ExitCode::SUCCESS)
}

/// Runs `fut` on a new multi-threaded tokio runtime with a worker thread per CPU (see
/// [`run_async_on`]).
fn run_async<T>(fut: impl std::future::Future<Output = anyhow::Result<T>>) -> Option<T> {
    run_async_on(Workers::PerCpu, fut)
}

/// Runs `fut` on a new multi-threaded tokio runtime with `workers` worker threads (unless
/// `TOKIO_WORKER_THREADS` is set); an error is printed with its causes. Tasks and blocking
/// threads still running when `fut` returns (a DNS lookup of an unreachable API server…) get one
/// second, so the process exits promptly.
fn run_async_on<T>(
    workers: Workers,
    fut: impl std::future::Future<Output = anyhow::Result<T>>,
) -> Option<T> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all();
    if let Workers::Fixed(n) = workers
        && std::env::var_os("TOKIO_WORKER_THREADS").is_none()
    {
        builder.worker_threads(n);
    }
    let result = builder
        .build()
        .map_err(|e| anyhow::Error::new(e).context("starting the async runtime"))
        .and_then(|runtime| {
            let result = runtime.block_on(fut);
            runtime.shutdown_timeout(std::time::Duration::from_secs(1));
            result
        });
    result.inspect_err(|e| eprintln!("argocd-pull: {e:#}")).ok()
}

#[cfg(test)]
mod tests {
    use super::Cli;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}
