//! Command-line arguments and entry points for `argocd-pull principal|agent|pki|ctl`.
//!
//! Flags and environment variables carry argocd-agent's names and defaults
//! (peer: cmd/argocd-agent/{principal,agent}.go); our own extras stay as additions, and the flags
//! of our previous release are hidden aliases. `docs/compatibility.md` has the full table.

mod agent;
mod creds;
mod ha;
mod principal;
mod redis;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

pub use agent::{AgentArgs, run_agent, run_agent_in, run_agent_until};
pub use principal::{PrincipalArgs, run_principal, run_principal_in, run_principal_until};

use argocd_pull_agent_core::store::{Kind, KubeStore, Store};
use argocd_pull_ops::CancellationToken;

/// After SIGTERM / Ctrl-C, at most this long for a graceful stop; then the command returns anyway
/// (exit 0) so the process always ends well within Kubernetes' default 30 s grace period.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// `argocd-pull pki` (local files; the Kubernetes-Secret PKI is `argocd-pull ctl pki`).
#[derive(clap::Args, Debug, Clone)]
pub struct PkiArgs {
    /// Output directory.
    #[arg(long, env = "ARGOCD_PULL_PKI_DIR", default_value = "pki")]
    pub dir: std::path::PathBuf,
    /// Agent names (one client certificate each).
    #[arg(long = "agent", env = "ARGOCD_PULL_PKI_AGENTS", value_delimiter = ',')]
    pub agents: Vec<String>,
    /// Extra DNS names / IPs for the principal certificate.
    #[arg(long = "san", env = "ARGOCD_PULL_PKI_SANS", value_delimiter = ',')]
    pub sans: Vec<String>,
    /// Overwrite existing files.
    #[arg(long, default_value_t = false)]
    pub force: bool,
}

/// Creates a CA, the principal certificate, agent certificates and the JWT key as local files.
pub async fn run_pki(args: PkiArgs) -> anyhow::Result<()> {
    let files = tokio::task::spawn_blocking(move || {
        argocd_pull_agent_core::pki::write_local_pki(
            &args.dir,
            &args.agents,
            &args.sans,
            args.force,
        )
    })
    .await??;
    for f in files {
        println!("{}", f.display());
    }
    Ok(())
}

/// `store`, or the cluster of `client`, or of the current kube context.
async fn store_or(
    store: Option<Arc<dyn Store>>,
    client: Option<kube::Client>,
    which: &str,
) -> anyhow::Result<Arc<dyn Store>> {
    if let Some(s) = store {
        return Ok(s);
    }
    let client = match client {
        Some(c) => c,
        None => argocd_pull_agent_core::kube_client::infer()
            .await
            .with_context(|| format!("connecting to the {which} cluster"))?,
    };
    Ok(Arc::new(KubeStore::new(client)))
}

/// `--label-selector`, parsed up front so a typo stops the command with the reason.
fn label_selector(
    s: &str,
) -> anyhow::Result<Option<(String, argocd_pull_ops::labels::LabelSelector)>> {
    if s.trim().is_empty() {
        return Ok(None);
    }
    argocd_pull_agent_core::selector::parse(s)
        .map(|sel| Some((s.to_string(), sel)))
        .map_err(|e| anyhow::anyhow!("--label-selector: {e}"))
}

/// The store as seen through `--label-selector` (Applications, AppProjects and Secrets), its
/// writes and watch events logged for `--full-detail`.
fn selected(
    store: Arc<dyn Store>,
    selector: Option<(String, argocd_pull_ops::labels::LabelSelector)>,
    who: &str,
) -> Arc<dyn Store> {
    // --full-detail: writes and watch events as debug lines (only when those are written)
    let store: Arc<dyn Store> = if argocd_pull_agent_core::full_detail::enabled() {
        Arc::new(argocd_pull_agent_core::full_detail::LoggedStore::new(store))
    } else {
        store
    };
    match selector {
        None => store,
        Some((text, sel)) => {
            tracing::info!(selector = %text, "{who} informers are using the label selector");
            Arc::new(argocd_pull_agent_core::selector::SelectedStore::new(
                store,
                sel,
                vec![Kind::Application, Kind::AppProject, Kind::Secret],
            ))
        }
    }
}

/// How often a running principal or agent re-reads its TLS material (files or Secrets): a
/// re-issued certificate or a rotated CA bundle applies to new connections within this time.
pub const TLS_RELOAD_INTERVAL: Duration = Duration::from_secs(60);

/// Waits for `shutdown`, re-reading the TLS material every [`TLS_RELOAD_INTERVAL`] and handing a
/// changed one to `apply` (connected peers keep their streams).
async fn reload_tls_until<F, Fut>(
    shutdown: &CancellationToken,
    mut last: argocd_pull_agent_core::tls::TlsMaterial,
    load: F,
    apply: impl Fn(&argocd_pull_agent_core::tls::TlsMaterial) -> anyhow::Result<()>,
) where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<argocd_pull_agent_core::tls::TlsMaterial>>,
{
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(TLS_RELOAD_INTERVAL) => {}
        }
        match load().await {
            Ok(m) if m != last => match apply(&m) {
                Ok(()) => last = m,
                Err(e) => {
                    tracing::warn!(error = %format!("{e:#}"), "reloading TLS material failed; keeping the current one")
                }
            },
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "re-reading TLS material failed; keeping the current one")
            }
        }
    }
}

/// Runs `fut` until it ends or `shutdown` is cancelled. Startup steps (Secrets, DNS, the API
/// server) may hang while a signal arrives: the signal wins and the command ends with `Ok`.
async fn or_shutdown<T>(
    shutdown: &CancellationToken,
    fut: impl std::future::Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<Option<T>> {
    tokio::select! {
        r = fut => r.map(Some),
        _ = shutdown.cancelled() => Ok(None),
    }
}

/// Awaits `fut` (a graceful stop) for at most [`SHUTDOWN_GRACE`]; logs when it is cut short.
async fn bounded_stop(what: &str, fut: impl std::future::Future<Output = ()>) {
    if tokio::time::timeout(SHUTDOWN_GRACE, fut).await.is_err() {
        tracing::warn!(
            what,
            grace = ?SHUTDOWN_GRACE,
            "graceful stop did not finish in time; exiting anyway"
        );
    }
}

/// Binds the admin server (`/metrics`, `/healthz`, `/readyz`) on `metrics` and, when different,
/// on `healthz` too (the peer's separate health port). Port 0 of the peer's flags means "off";
/// the legacy `--metrics-addr` may use port 0 for an ephemeral port.
async fn serve_admin(
    m: &argocd_pull_agent_core::metrics::Metrics,
    addrs: &[std::net::SocketAddr],
    shutdown: &CancellationToken,
) -> anyhow::Result<Vec<tokio::task::JoinHandle<anyhow::Result<()>>>> {
    let mut tasks = Vec::new();
    for a in addrs {
        let (bound, task) = m
            .serve_admin(*a, shutdown.clone())
            .await
            .with_context(|| format!("binding the metrics/health server on {a}"))?;
        tracing::info!(%bound, "metrics and health endpoints");
        tasks.push(task);
    }
    Ok(tasks)
}

/// `--pprof-port`: the profiling server on 127.0.0.1 (0: none). It stops with `shutdown`.
async fn serve_pprof(
    port: u16,
    shutdown: &CancellationToken,
) -> anyhow::Result<Option<tokio::task::JoinHandle<()>>> {
    if port == 0 {
        return Ok(None);
    }
    let (_, task) = argocd_pull_agent_core::pprof::serve(port, shutdown.clone()).await?;
    Ok(Some(task))
}

/// Admin listen addresses from the peer's port flags, or the legacy address.
fn admin_addrs(
    host: std::net::IpAddr,
    metrics_port: u16,
    healthz_port: u16,
    legacy: Option<std::net::SocketAddr>,
) -> Vec<std::net::SocketAddr> {
    if let Some(a) = legacy {
        return vec![a];
    }
    let mut v = Vec::new();
    for p in [metrics_port, healthz_port] {
        let a = std::net::SocketAddr::new(host, p);
        if p != 0 && !v.contains(&a) {
            v.push(a);
        }
    }
    v
}

#[derive(clap::Parser, Debug)]
#[command(name = "argocd-pull")]
struct PrincipalCli {
    #[command(flatten)]
    args: PrincipalArgs,
}

#[derive(clap::Parser, Debug)]
#[command(name = "argocd-pull")]
struct AgentCli {
    #[command(flatten)]
    args: AgentArgs,
}

impl PrincipalArgs {
    /// Parses command-line flags (without the program name), as `argocd-pull principal` would.
    pub fn try_parse_flags<I, T>(flags: I) -> Result<Self, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        use clap::Parser;
        let argv = std::iter::once("principal".into()).chain(flags.into_iter().map(Into::into));
        PrincipalCli::try_parse_from(argv.collect::<Vec<std::ffi::OsString>>()).map(|c| c.args)
    }
}

impl AgentArgs {
    /// Parses command-line flags (without the program name), as `argocd-pull agent` would.
    pub fn try_parse_flags<I, T>(flags: I) -> Result<Self, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        use clap::Parser;
        let argv = std::iter::once("agent".into()).chain(flags.into_iter().map(Into::into));
        AgentCli::try_parse_from(argv.collect::<Vec<std::ffi::OsString>>()).map(|c| c.args)
    }
}
