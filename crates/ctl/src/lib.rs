//! `argocd-pull ctl …`: argocd-agent's `argocd-agentctl` command set on our binary
//! (`argocd-agentctl <cmd>` → `argocd-pull ctl <cmd>`), writing the peer's Kubernetes Secrets:
//!
//! * `pki init|issue principal|issue resource-proxy|issue agent <name>|inspect|dump|propagate|delete`
//!   — `argocd-agent-ca`, `argocd-agent-principal-tls`, `argocd-agent-resource-proxy-tls`,
//!   `argocd-agent-client-tls` (peer: cmd/ctl/ca.go);
//! * `agent create|list|inspect|print-tls|reconfigure` — the Argo CD cluster secret
//!   `cluster-<agent>` (peer: cmd/ctl/agent.go, internal/argocd/cluster/conversion.go);
//! * `jwt create-key|inspect-key|delete-key` — `argocd-agent-jwt` (peer: cmd/ctl/jwt.go);
//! * `blocklist tls add|remove|list` — ConfigMap `argocd-agent-tls-blocklist` (peer:
//!   cmd/ctl/blocklist.go);
//! * `config create|add|edit|delete|list` — the local file naming principals and agents
//!   (peer: cmd/ctl/config.go), `--principal` / `--agent` / `--config`;
//! * `validate principal|agent` — checks of an installation (peer: cmd/ctl/validate.go);
//! * `version` (peer: cmd/ctl/main.go).
//!
//! Errors are printed as the peer's `cmdutil.Fatal` does (`[FATAL]: <message>`, exit code 1);
//! outcomes the peer reports with exit code 1 but no `[FATAL]` (e.g. `No agents found.`) are
//! [`Exit`] errors carrying their own output.

mod agent;
pub mod agent_list;
mod blocklist;
mod config;
mod ha;
mod jwt;
mod out;
mod pki;
mod serving;
mod validate;

use std::path::PathBuf;

use anyhow::Context;

pub use config::LocalConfig;

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
    /// The symbolic name of a principal in the config file.
    #[arg(long = "principal", global = true)]
    pub principal: Option<String>,
    /// The symbolic name of an agent in the config file.
    #[arg(long = "agent", global = true)]
    pub agent: Option<String>,
    /// The path to the local config file to use (default: ~/.config/argocd-agent/ctl.conf).
    #[arg(long = "config", global = true)]
    pub config: Option<PathBuf>,
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
    /// Operations related to config file for the ctl.
    #[command(subcommand)]
    Config(config::ConfigCommand),
    /// Validate principal and agent installations.
    #[command(subcommand, visible_alias = "check-config")]
    Validate(validate::ValidateCommand),
    /// !!NON-PROD!! Inspect and manage the principal's PKI (Kubernetes Secrets).
    #[command(subcommand)]
    Pki(pki::PkiCommand),
    /// Inspect and manage JWT signing keys.
    #[command(subcommand)]
    Jwt(jwt::JwtCommand),
    /// Manage blocklists.
    #[command(subcommand)]
    Blocklist(blocklist::BlocklistCommand),
    /// Display the version of the ctl.
    Version {
        /// Display indented JSON.
        #[arg(short, long)]
        indent: bool,
    },
    /// Manage HA state of the principal server
    #[command(subcommand)]
    Ha(ha::HaCommand),
}

/// A command outcome that is not `[FATAL]`: what to print and the exit code (peer: e.g.
/// `agent list` prints `No agents found.` to stdout and exits 1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exit {
    pub stdout: String,
    pub stderr: String,
    pub code: u8,
}

impl Exit {
    /// `msg` on stdout, exit `code`.
    pub fn stdout(msg: impl Into<String>, code: u8) -> Self {
        Exit {
            stdout: msg.into(),
            stderr: String::new(),
            code,
        }
    }
    /// `msg` on stderr, exit `code`.
    pub fn stderr(msg: impl Into<String>, code: u8) -> Self {
        Exit {
            stdout: String::new(),
            stderr: msg.into(),
            code,
        }
    }
}

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}{}", self.stdout, self.stderr)
    }
}

impl std::error::Error for Exit {}

/// Kubernetes clients of both sides.
#[derive(Clone)]
pub struct Clients {
    pub principal: kube::Client,
    pub principal_namespace: String,
    /// The agent's cluster (the principal's when no agent context is set).
    pub agent: kube::Client,
    pub agent_namespace: String,
    /// Whether the two contexts are the same (or none was given for the agent).
    pub same_context: bool,
    /// The kube contexts as resolved from the flags or the local config (`None`: the current one).
    pub principal_context: Option<String>,
    pub agent_context: Option<String>,
}

/// A side's kube context and namespace (peer: `componentConfig`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub context: Option<String>,
    pub namespace: String,
}

/// Which principal and agent the command is about (peer: `determineConfigs`): the context flags
/// (with the namespace flags) first, then `--principal` / `--agent` looked up in the config file,
/// then the config's default principal, then the current kube context with the namespace flags.
pub fn resolve_targets(args: &CtlArgs, cfg: &LocalConfig) -> anyhow::Result<(Target, Target)> {
    let principal = if let Some(ctx) = args.principal_context.clone().filter(|c| !c.is_empty()) {
        Target {
            context: Some(ctx),
            namespace: args.principal_namespace.clone(),
        }
    } else if let Some(name) = &args.principal {
        let c = cfg
            .contexts
            .principals
            .get(name)
            .ok_or_else(|| anyhow::anyhow!("Principal {name} does not exist in config"))?;
        c.target()
    } else if let Some(c) = cfg.contexts.principals.get(&cfg.default_principal) {
        c.target()
    } else {
        Target {
            context: None,
            namespace: args.principal_namespace.clone(),
        }
    };
    let agent = if let Some(ctx) = args.agent_context.clone().filter(|c| !c.is_empty()) {
        Target {
            context: Some(ctx),
            namespace: args.agent_namespace.clone(),
        }
    } else if let Some(name) = &args.agent {
        let c = cfg
            .contexts
            .agents
            .get(name)
            .ok_or_else(|| anyhow::anyhow!("Agent {name} does not exist in config"))?;
        c.target()
    } else {
        Target {
            context: None,
            namespace: args.agent_namespace.clone(),
        }
    };
    Ok((principal, agent))
}

impl CtlArgs {
    /// `--config`, else `~/.config/argocd-agent/ctl.conf` (the peer's path).
    pub fn config_path(&self) -> PathBuf {
        self.config.clone().unwrap_or_else(config::default_path)
    }
}

/// Runs a ctl command against the kube contexts it names and prints its output; returns the
/// process exit code (peer: 0, or 1 with `[FATAL]: <message>` on stderr).
pub async fn run_ctl(args: CtlArgs) -> u8 {
    match run_ctl_output(&args).await {
        Ok(out) => {
            print!("{out}");
            0
        }
        Err(e) => match e.downcast_ref::<Exit>() {
            Some(x) => {
                print!("{}", x.stdout);
                eprint!("{}", x.stderr);
                x.code
            }
            None => {
                eprintln!("[FATAL]: {e:#}");
                1
            }
        },
    }
}

/// What a ctl command prints on success; `Err` is `[FATAL]` or an [`Exit`].
pub async fn run_ctl_output(args: &CtlArgs) -> anyhow::Result<String> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    match &args.command {
        CtlCommand::Version { indent } => return Ok(version_json(*indent) + "\n"),
        CtlCommand::Config(c) => return config::run(c, &args.config_path()).await,
        // the HA admin API (a kube client only for the port-forward); prints as it goes
        CtlCommand::Ha(h) => return ha::run(h, args).await.map(|()| String::new()),
        _ => {}
    }
    let cfg = config::load_for_command(&args.config_path())?;
    let (p, a) = resolve_targets(args, &cfg)?;
    let clients = connect(args, p, a).await?;
    execute(&args.command, &clients).await
}

/// Kubernetes clients for the resolved principal and agent.
pub async fn connect(args: &CtlArgs, p: Target, a: Target) -> anyhow::Result<Clients> {
    use argocd_pull_agent_core::settings::kube_client;
    let principal = kube_client(args.kubeconfig.as_ref(), p.context.as_deref())
        .await
        .context("connecting to the principal's cluster")?;
    let same_context = a.context.is_none() || a.context == p.context;
    let agent = if same_context {
        principal.clone()
    } else {
        kube_client(args.kubeconfig.as_ref(), a.context.as_deref())
            .await
            .context("connecting to the agent's cluster")?
    };
    Ok(Clients {
        principal,
        principal_namespace: p.namespace,
        agent,
        agent_namespace: a.namespace,
        same_context,
        principal_context: p.context,
        agent_context: a.context,
    })
}

/// Runs a ctl command with the given clients; returns what it prints.
pub async fn execute(cmd: &CtlCommand, c: &Clients) -> anyhow::Result<String> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    match cmd {
        CtlCommand::Agent(a) => agent::run(a, c).await,
        CtlCommand::Pki(p) => pki::run(p, c).await,
        CtlCommand::Jwt(j) => jwt::run(j, c).await,
        CtlCommand::Blocklist(b) => blocklist::run(b, c).await,
        CtlCommand::Validate(v) => validate::run(v, c).await,
        CtlCommand::Version { indent } => Ok(version_json(*indent) + "\n"),
        CtlCommand::Config(_) => {
            anyhow::bail!("config commands work on the local file, not on clusters")
        }
        CtlCommand::Ha(_) => {
            anyhow::bail!("ctl ha talks to the principal's admin API, not to Secrets")
        }
    }
}

/// The peer's `version.New(...).JSON(indent)`: the same keys, ours for the Go-only ones.
pub fn version_json(indent: bool) -> String {
    let v = serde_json::json!({
        "name": "argocd-pull",
        "version": argocd_pull_agent_core::VERSION,
        "gitRevision": option_env!("ARGOCD_PULL_GIT_REVISION").unwrap_or("unknown"),
        "gitStatus": option_env!("ARGOCD_PULL_GIT_STATUS").unwrap_or("unknown"),
        "rustVersion": env!("CARGO_PKG_RUST_VERSION"),
        "buildDate": option_env!("ARGOCD_PULL_BUILD_DATE").unwrap_or("unknown"),
        "argocdVersion": "unknown",
    });
    if indent {
        out::go_json_indent(&v, "  ")
    } else {
        v.to_string()
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
