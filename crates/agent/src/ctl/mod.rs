//! `argocd-pull ctl …`: argocd-agent's `argocd-agentctl` command set on our binary
//! (`argocd-agentctl <cmd>` → `argocd-pull ctl <cmd>`), writing the peer's Kubernetes Secrets:
//!
//! * `pki init|issue principal|issue resource-proxy|issue agent <name>|inspect|delete` —
//!   `argocd-agent-ca`, `argocd-agent-principal-tls`, `argocd-agent-resource-proxy-tls`,
//!   `argocd-agent-client-tls` (peer: cmd/ctl/ca.go);
//! * `agent create|list|inspect|print-tls` — the Argo CD cluster secret `cluster-<agent>`
//!   (peer: cmd/ctl/agent.go, internal/argocd/cluster/conversion.go);
//! * `jwt create-key` — `argocd-agent-jwt` (peer: cmd/ctl/jwt.go);
//! * `blocklist tls add|remove|list` — ConfigMap `argocd-agent-tls-blocklist` (peer:
//!   cmd/ctl/blocklist.go).

mod agent;
mod blocklist;
mod ha;
mod jwt;
mod out;
mod pki;

use std::path::PathBuf;

use anyhow::Context;

pub use agent::{
    ANNOTATION_MANAGED_BY, ANNOTATION_SKIP_RECONCILE, DEFAULT_RESOURCE_PROXY, LABEL_AGENT_NAME,
    LABEL_SECRET_TYPE, cluster_secret, cluster_secret_name, server_url,
};

/// `argocd-pull ctl`
#[derive(clap::Args, Debug, Clone)]
pub struct CtlArgs {
    /// The Kubernetes context of the principal.
    #[arg(
        long = "principal-context",
        env = "ARGOCD_AGENT_PRINCIPAL_CONTEXT",
        global = true
    )]
    pub principal_context: Option<String>,
    /// The Kubernetes namespace the principal is installed in.
    #[arg(
        long = "principal-namespace",
        env = "ARGOCD_AGENT_PRINCIPAL_NAMESPACE",
        default_value = "argocd",
        global = true
    )]
    pub principal_namespace: String,
    /// The Kubernetes context of the agent.
    #[arg(
        long = "agent-context",
        env = "ARGOCD_AGENT_AGENT_CONTEXT",
        global = true
    )]
    pub agent_context: Option<String>,
    /// The Kubernetes namespace the agent is installed in.
    #[arg(
        long = "agent-namespace",
        env = "ARGOCD_AGENT_AGENT_NAMESPACE",
        default_value = "argocd",
        global = true
    )]
    pub agent_namespace: String,
    /// Path to a kubeconfig file (default: KUBECONFIG, ~/.kube/config, in-cluster).
    #[arg(long, global = true)]
    pub kubeconfig: Option<PathBuf>,
    #[command(subcommand)]
    pub command: CtlCommand,
}

#[derive(clap::Subcommand, Debug, Clone)]
pub enum CtlCommand {
    /// Inspect and manage agent configuration (Argo CD cluster secrets).
    #[command(subcommand, visible_alias = "agents")]
    Agent(agent::AgentCommand),
    /// !!NON-PROD!! Inspect and manage the principal's PKI (Kubernetes Secrets).
    #[command(subcommand)]
    Pki(pki::PkiCommand),
    /// Manage the JWT signing key.
    #[command(subcommand)]
    Jwt(jwt::JwtCommand),
    /// Manage blocklists.
    #[command(subcommand)]
    Blocklist(blocklist::BlocklistCommand),
    /// Manage HA state of the principal server
    #[command(subcommand)]
    Ha(ha::HaCommand),
}

/// Kubernetes clients of both sides.
#[derive(Clone)]
pub struct Clients {
    pub principal: kube::Client,
    pub principal_namespace: String,
    /// The agent's cluster (the principal's when no agent context is set).
    pub agent: kube::Client,
    pub agent_namespace: String,
    /// Whether the two contexts differ (or none was given for the agent).
    pub same_context: bool,
}

/// Runs a ctl command against the kube contexts it names and prints its output.
pub async fn run_ctl(args: CtlArgs) -> anyhow::Result<()> {
    use crate::cli::common::kube_client;
    if let CtlCommand::Ha(h) = &args.command {
        // the admin API: a kube client only for the port-forward
        let _ = rustls::crypto::ring::default_provider().install_default();
        return ha::run(h, &args).await;
    }
    let principal = kube_client(args.kubeconfig.as_ref(), args.principal_context.as_deref())
        .await
        .context("connecting to the principal's cluster")?;
    let same_context = args.agent_context.is_none() || args.agent_context == args.principal_context;
    let agent = if same_context {
        principal.clone()
    } else {
        kube_client(args.kubeconfig.as_ref(), args.agent_context.as_deref())
            .await
            .context("connecting to the agent's cluster")?
    };
    let clients = Clients {
        principal,
        principal_namespace: args.principal_namespace.clone(),
        agent,
        agent_namespace: args.agent_namespace.clone(),
        same_context,
    };
    let out = execute(&args.command, &clients).await?;
    print!("{out}");
    Ok(())
}

/// Runs a ctl command with the given clients; returns what it prints.
pub async fn execute(cmd: &CtlCommand, c: &Clients) -> anyhow::Result<String> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    match cmd {
        CtlCommand::Agent(a) => agent::run(a, c).await,
        CtlCommand::Pki(p) => pki::run(p, c).await,
        CtlCommand::Jwt(j) => jwt::run(j, c).await,
        CtlCommand::Blocklist(b) => blocklist::run(b, c).await,
        CtlCommand::Ha(_) => {
            anyhow::bail!("ctl ha talks to the principal's admin API: use run_ctl")
        }
    }
}

#[derive(clap::Parser, Debug)]
#[command(name = "argocd-pull")]
struct CtlCli {
    #[command(flatten)]
    args: CtlArgs,
}

impl CtlArgs {
    /// Parses `ctl` flags and subcommands (without the program name and `ctl`).
    pub fn try_parse_flags<I, T>(flags: I) -> Result<Self, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        use clap::Parser;
        let argv = std::iter::once("ctl".into()).chain(flags.into_iter().map(Into::into));
        CtlCli::try_parse_from(argv.collect::<Vec<std::ffi::OsString>>()).map(|c| c.args)
    }
}

#[cfg(test)]
mod tests;
