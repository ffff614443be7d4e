//! `ctl config …` (peer: cmd/ctl/config.go): the ctl's local file naming principals and agents by
//! kube context and namespace, so `--principal <name>` / `--agent <name>` replace the context
//! and namespace flags. The file is the peer's (`~/.config/argocd-agent/ctl.conf`, YAML):
//!
//! ```yaml
//! contexts:
//!   principals:
//!     hub: {kube-context: hub-admin, namespace: argocd}
//!   agents:
//!     edge-1: {kube-context: edge-1-admin, namespace: argocd}
//! default-principal: hub
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};

use super::Target;
use super::out::tabwriter;

/// The peer's `localConfig`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LocalConfig {
    #[serde(default)]
    pub contexts: Contexts,
    #[serde(rename = "default-principal", default)]
    pub default_principal: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Contexts {
    #[serde(default, deserialize_with = "null_as_empty")]
    pub principals: BTreeMap<String, ComponentConfig>,
    #[serde(default, deserialize_with = "null_as_empty")]
    pub agents: BTreeMap<String, ComponentConfig>,
}

fn null_as_empty<'de, D>(d: D) -> Result<BTreeMap<String, ComponentConfig>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    Ok(Option::<BTreeMap<String, ComponentConfig>>::deserialize(d)?.unwrap_or_default())
}

/// The peer's `componentConfig`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ComponentConfig {
    #[serde(rename = "kube-context", default)]
    pub kube_context: String,
    #[serde(default)]
    pub namespace: String,
}

impl ComponentConfig {
    pub fn target(&self) -> Target {
        Target {
            context: Some(self.kube_context.clone()).filter(|c| !c.is_empty()),
            namespace: self.namespace.clone(),
        }
    }
}

/// `~/.config/argocd-agent/ctl.conf` (the peer's `getDefaultCfgPath`).
pub fn default_path() -> PathBuf {
    home().join(".config").join("argocd-agent").join("ctl.conf")
}

fn home() -> PathBuf {
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."))
}

impl LocalConfig {
    /// The peer's `validateConfig`: no blank names, contexts or namespaces; the default principal
    /// exists.
    pub fn validate(&self) -> anyhow::Result<()> {
        for (kind, map) in [
            ("agent", &self.contexts.agents),
            ("principal", &self.contexts.principals),
        ] {
            for (name, c) in map {
                if name.is_empty() {
                    bail!("invalid config: {kind} name cannot be empty");
                }
                if c.kube_context.is_empty() {
                    bail!("invalid config: {kind} {name} has blank kube-context");
                }
                if c.namespace.is_empty() {
                    bail!("invalid config: {kind} {name} has blank namespace");
                }
            }
        }
        if !self.default_principal.is_empty()
            && !self
                .contexts
                .principals
                .contains_key(&self.default_principal)
        {
            bail!(
                "invalid config: the default principal {} does not exist in principal contexts",
                self.default_principal
            );
        }
        Ok(())
    }

    /// Reads the file (`Err` when it is missing or not the config's YAML).
    pub fn read(path: &Path) -> anyhow::Result<Self> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("open {}", path.display()))?;
        if text.trim().is_empty() {
            return Ok(Self::default());
        }
        serde_saphyr::from_str(&text).with_context(|| format!("parsing {}", path.display()))
    }

    /// Writes the file (directories created, mode 0600), through a temporary file so a failed
    /// write never leaves half a config.
    pub fn write(&self, path: &Path) -> anyhow::Result<()> {
        let dir = path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let yaml = serde_saphyr::to_string(self).context("encoding the config")?;
        let tmp = dir.join(format!(
            ".{}.tmp",
            path.file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("ctl.conf")
        ));
        std::fs::write(&tmp, yaml).with_context(|| format!("writing {}", tmp.display()))?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))?;
        }
        std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))?;
        Ok(())
    }
}

/// The config for a command that talks to clusters (peer: `loadLocalConfig`): none when the file
/// does not exist, an error when it cannot be read, and a warning (then none) when it is invalid.
pub fn load_for_command(path: &Path) -> anyhow::Result<LocalConfig> {
    if !path.exists() {
        return Ok(LocalConfig::default());
    }
    let cfg = LocalConfig::read(path).context("An error occurred while reading config")?;
    if let Err(e) = cfg.validate() {
        eprintln!("[WARN]: {e}, defaulting to using no config");
        return Ok(LocalConfig::default());
    }
    Ok(cfg)
}

#[derive(clap::Subcommand, Debug, Clone)]
pub enum ConfigCommand {
    /// Creates and populates a local user config file by asking, for each context of the
    /// kubeconfig, whether it is a principal or an agent.
    Create {
        /// Path to where kubeconfig file lives (default: ~/.kube/config).
        #[arg(long = "kubeconfig-path")]
        kubeconfig_path: Option<PathBuf>,
        /// Path to write output to (default: the --config path).
        #[arg(long = "output-path")]
        output_path: Option<PathBuf>,
    },
    /// Add new entries to the local config file.
    #[command(subcommand)]
    Add(AddCommand),
    /// Edit entries in the local config file.
    #[command(subcommand)]
    Edit(EditCommand),
    /// Delete entries from the local config file.
    #[command(subcommand)]
    Delete(DeleteCommand),
    /// List components in the config.
    List {
        #[command(subcommand)]
        which: Option<ListWhich>,
    },
}

#[derive(clap::Subcommand, Debug, Clone)]
pub enum AddCommand {
    /// Add new principal to the local config file.
    Principal(AddPrincipalArgs),
    /// Add new agent to the local config file.
    Agent(AddArgs),
}

#[derive(clap::Subcommand, Debug, Clone)]
pub enum EditCommand {
    /// Edit a principal in the local config file.
    Principal(EditPrincipalArgs),
    /// Edit an agent in the local config file.
    Agent(EditArgs),
}

#[derive(clap::Subcommand, Debug, Clone)]
pub enum DeleteCommand {
    /// Remove a principal from the local config file.
    Principal(NameArgs),
    /// Remove an agent from the local config file.
    Agent(NameArgs),
}

#[derive(clap::Subcommand, Debug, Clone)]
pub enum ListWhich {
    /// List principals in the config.
    Principal,
    /// List agents in the config.
    Agent,
}

#[derive(clap::Args, Debug, Clone)]
pub struct AddArgs {
    /// The symbolic name to use.
    #[arg(long, required = true)]
    pub name: String,
    /// The kube context.
    #[arg(long, required = true)]
    pub context: String,
    /// The namespace it is installed in.
    #[arg(long, required = true)]
    pub namespace: String,
}

#[derive(clap::Args, Debug, Clone)]
pub struct AddPrincipalArgs {
    #[command(flatten)]
    pub add: AddArgs,
    /// Set the new principal to default.
    #[arg(long = "set-default")]
    pub set_default: bool,
}

#[derive(clap::Args, Debug, Clone)]
pub struct EditArgs {
    /// The symbolic name of the entry to edit.
    #[arg(long, required = true)]
    pub name: String,
    /// The new kube context.
    #[arg(long, default_value = "")]
    pub context: String,
    /// The new namespace.
    #[arg(long, default_value = "")]
    pub namespace: String,
}

#[derive(clap::Args, Debug, Clone)]
pub struct EditPrincipalArgs {
    #[command(flatten)]
    pub edit: EditArgs,
    /// Set the principal to the default.
    #[arg(long = "set-default")]
    pub set_default: bool,
}

#[derive(clap::Args, Debug, Clone)]
pub struct NameArgs {
    /// The symbolic name of the entry to delete.
    #[arg(long, required = true)]
    pub name: String,
}

fn read_for_edit(path: &Path) -> anyhow::Result<LocalConfig> {
    LocalConfig::read(path).context("Failed to read config")
}

fn save(cfg: &LocalConfig, path: &Path) -> anyhow::Result<()> {
    cfg.validate()?;
    cfg.write(path).context("Failed to write config")
}

pub async fn run(cmd: &ConfigCommand, path: &Path) -> anyhow::Result<String> {
    match cmd {
        ConfigCommand::Create {
            kubeconfig_path,
            output_path,
        } => {
            let kubeconfig = kubeconfig_path
                .clone()
                .unwrap_or_else(|| home().join(".kube").join("config"));
            let out = output_path.clone().unwrap_or_else(|| path.to_path_buf());
            create(&kubeconfig, &out)
        }
        ConfigCommand::Add(AddCommand::Principal(p)) => {
            let mut cfg = read_for_edit(path)?;
            let a = &p.add;
            if cfg.contexts.principals.contains_key(&a.name) {
                bail!("A principal with the name {} already exists", a.name);
            }
            cfg.contexts.principals.insert(
                a.name.clone(),
                ComponentConfig {
                    kube_context: a.context.clone(),
                    namespace: a.namespace.clone(),
                },
            );
            if p.set_default {
                cfg.default_principal = a.name.clone();
            }
            save(&cfg, path)?;
            Ok(format!("New principal {} added successfully\n", a.name))
        }
        ConfigCommand::Add(AddCommand::Agent(a)) => {
            let mut cfg = read_for_edit(path)?;
            if cfg.contexts.agents.contains_key(&a.name) {
                bail!("An agent with the name {} already exists", a.name);
            }
            cfg.contexts.agents.insert(
                a.name.clone(),
                ComponentConfig {
                    kube_context: a.context.clone(),
                    namespace: a.namespace.clone(),
                },
            );
            save(&cfg, path)?;
            Ok(format!("New agent {} added successfully\n", a.name))
        }
        ConfigCommand::Edit(EditCommand::Principal(p)) => {
            let mut cfg = read_for_edit(path)?;
            let e = &p.edit;
            let entry = cfg.contexts.principals.get_mut(&e.name).with_context(|| {
                format!("The principal {} does not exist in the config", e.name)
            })?;
            edit(entry, e);
            if p.set_default {
                cfg.default_principal = e.name.clone();
            }
            save(&cfg, path)?;
            Ok(format!("Principal {} updated successfully\n", e.name))
        }
        ConfigCommand::Edit(EditCommand::Agent(e)) => {
            let mut cfg = read_for_edit(path)?;
            let entry =
                cfg.contexts.agents.get_mut(&e.name).with_context(|| {
                    format!("The agent {} does not exist in the config", e.name)
                })?;
            edit(entry, e);
            save(&cfg, path)?;
            Ok(format!("Agent {} updated successfully\n", e.name))
        }
        ConfigCommand::Delete(DeleteCommand::Principal(n)) => {
            let mut cfg = read_for_edit(path)?;
            if !cfg.contexts.principals.contains_key(&n.name) {
                bail!("The principal {} does not exist in the config", n.name);
            }
            if cfg.default_principal == n.name {
                bail!("Cannot delete the default principal");
            }
            cfg.contexts.principals.remove(&n.name);
            save(&cfg, path)?;
            Ok(format!("Principal {} deleted successfully\n", n.name))
        }
        ConfigCommand::Delete(DeleteCommand::Agent(n)) => {
            let mut cfg = read_for_edit(path)?;
            if cfg.contexts.agents.remove(&n.name).is_none() {
                bail!("The agent {} does not exist in the config", n.name);
            }
            save(&cfg, path)?;
            Ok(format!("Agent {} deleted successfully\n", n.name))
        }
        ConfigCommand::List { which } => {
            let cfg = read_for_edit(path)?;
            let row = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
            let mut rows = Vec::new();
            match which {
                None => {
                    rows.push(row(&["COMPONENT", "NAME", "CONTEXT", "NAMESPACE"]));
                    for (n, c) in &cfg.contexts.principals {
                        rows.push(row(&["principal", n, &c.kube_context, &c.namespace]));
                    }
                    for (n, c) in &cfg.contexts.agents {
                        rows.push(row(&["agent", n, &c.kube_context, &c.namespace]));
                    }
                }
                Some(ListWhich::Principal) => {
                    rows.push(row(&["NAME", "CONTEXT", "NAMESPACE", "DEFAULT"]));
                    for (n, c) in &cfg.contexts.principals {
                        let d = if *n == cfg.default_principal { "X" } else { "" };
                        rows.push(row(&[n, &c.kube_context, &c.namespace, d]));
                    }
                }
                Some(ListWhich::Agent) => {
                    rows.push(row(&["NAME", "CONTEXT", "NAMESPACE"]));
                    for (n, c) in &cfg.contexts.agents {
                        rows.push(row(&[n, &c.kube_context, &c.namespace]));
                    }
                }
            }
            Ok(tabwriter(&rows))
        }
    }
}

fn edit(entry: &mut ComponentConfig, e: &EditArgs) {
    if !e.context.is_empty() {
        entry.kube_context = e.context.clone();
    }
    if !e.namespace.is_empty() {
        entry.namespace = e.namespace.clone();
    }
}

/// Prompts until `valid` accepts the answer (peer: `cmdutil.ReadFromTerm(prompt, -1, valid)`);
/// the end of the input is an error.
fn ask(
    lines: &mut impl Iterator<Item = std::io::Result<String>>,
    out: &mut String,
    prompt: &str,
    valid: impl Fn(&str) -> bool,
) -> anyhow::Result<String> {
    use std::io::Write;
    loop {
        print!("{out}{prompt}: ");
        out.clear();
        std::io::stdout().flush()?;
        let Some(line) = lines.next() else {
            bail!("EOF: the input ended before every question was answered");
        };
        let line = line?;
        if valid(&line) {
            return Ok(line);
        }
    }
}

/// `config create` (peer: `CreateLocalConfig`): one question per kubeconfig context (principal,
/// agent or blank to skip), its namespace and a name, then the default principal.
fn create(kubeconfig: &Path, out_path: &Path) -> anyhow::Result<String> {
    let kc =
        kube::config::Kubeconfig::read_from(kubeconfig).context("Failed to load kubeconfig")?;
    let mut cfg = LocalConfig::default();
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines_compat();
    let mut pending = String::new();
    let mut contexts: Vec<String> = kc.contexts.iter().map(|c| c.name.clone()).collect();
    contexts.sort();
    for context in contexts {
        let kind = ask(
            &mut lines,
            &mut pending,
            &format!(
                "Found context {context}, is this a principal or agent? If is neither type leave blank to skip."
            ),
            |s| s == "principal" || s == "agent" || s.is_empty(),
        )?;
        if kind.is_empty() {
            pending.push('\n');
            continue;
        }
        let namespace = ask(
            &mut lines,
            &mut pending,
            &format!("Which namespace is the {kind} installed in?"),
            |s| !s.trim().is_empty() && !s.trim().contains(' '),
        )?
        .trim()
        .to_string();
        let existing = if kind == "principal" {
            cfg.contexts.principals.clone()
        } else {
            cfg.contexts.agents.clone()
        };
        let name = ask(
            &mut lines,
            &mut pending,
            &format!("What name would you like to use for this {kind}?"),
            |s| {
                let s = s.trim();
                !s.is_empty() && !s.contains(' ') && !existing.contains_key(s)
            },
        )?
        .trim()
        .to_string();
        let entry = ComponentConfig {
            kube_context: context.clone(),
            namespace,
        };
        if kind == "principal" {
            cfg.contexts.principals.insert(name, entry);
        } else {
            cfg.contexts.agents.insert(name, entry);
        }
        pending.push('\n');
    }
    if !cfg.contexts.principals.is_empty() {
        for name in cfg.contexts.principals.keys() {
            pending.push_str(&format!("> {name}\n"));
        }
        let principals = cfg.contexts.principals.clone();
        let default = ask(
            &mut lines,
            &mut pending,
            "Which of the above principals do you want to use as the default?",
            |s| principals.contains_key(s.trim()),
        )?;
        cfg.default_principal = default.trim().to_string();
        pending.push('\n');
    }
    cfg.write(out_path).context("Error writing config")?;
    Ok(format!(
        "{pending}Successfully wrote config to {}\n",
        out_path.display()
    ))
}

/// Lines of a buffered reader without their line endings.
trait LinesCompat {
    fn lines_compat(self) -> Box<dyn Iterator<Item = std::io::Result<String>>>;
}

impl<R: std::io::BufRead + 'static> LinesCompat for R {
    fn lines_compat(self) -> Box<dyn Iterator<Item = std::io::Result<String>>> {
        Box::new(
            self.lines()
                .map(|l| l.map(|s| s.trim_end_matches('\r').to_string())),
        )
    }
}
