//! Command-line layer: `argocd-pull cmp generate` and `argocd-pull cmp install`.
//!
//! Option sources, highest first: command-line flag, then its environment variable (plugin env
//! `ARGOCD_ENV_<NAME>`, set from the Application's `spec.source.plugin.env`), then the plugin
//! parameter of the same name in `ARGOCD_APP_PARAMETERS` (`spec.source.plugin.parameters`).
//! All output is built in memory and printed only on success; errors go to stderr with a
//! non-zero exit and nothing on stdout.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::builder::BoolishValueParser;
use serde_json::Value;

use crate::source::{DirectoryOptions, split_globs};
use crate::{CmpError, DEFAULT_MAX_WORK_BYTES, GenerateOptions, Input, Target};

/// `argocd-pull cmp ...`
#[derive(Debug, clap::Args)]
#[command(about = "Argo CD Config Management Plugin: wrap manifests in OCM ManifestWorks")]
pub struct CmpArgs {
    #[command(subcommand)]
    pub command: CmpCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum CmpCommand {
    /// Print the ManifestWork(s) wrapping the manifests of the current directory (or stdin).
    Generate(Box<GenerateArgs>),
    /// Print what to apply to enable the plugin (plugin ConfigMap, repo-server sidecar patch,
    /// AppProject and RBAC, health checks for argocd-cm).
    Install(crate::install::InstallArgs),
}

/// Flags of `generate`. Every flag has an environment variable; the plugin-env ones use the
/// `ARGOCD_ENV_` prefix Argo CD gives to `spec.source.plugin.env` entries.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct GenerateArgs {
    /// Source directory (Argo CD runs the plugin in the application's source directory).
    #[arg(long, env = "ARGOCD_ENV_SOURCE_DIR", default_value = ".")]
    pub source_dir: PathBuf,
    /// Read one rendered YAML/JSON stream (helm template, kustomize build) from stdin instead.
    #[arg(long, env = "ARGOCD_ENV_STDIN", value_parser = BoolishValueParser::new(), num_args = 0..=1, default_missing_value = "true")]
    pub stdin: Option<bool>,
    /// Managed clusters, comma-separated: one ManifestWork per cluster, in its namespace.
    #[arg(long, env = "ARGOCD_ENV_TARGET_CLUSTER", value_delimiter = ',')]
    pub target_cluster: Vec<String>,
    /// Placement `[namespace/]name`: one ManifestWorkReplicaSet (namespace defaults to the
    /// application's destination namespace, ARGOCD_APP_NAMESPACE).
    #[arg(long, env = "ARGOCD_ENV_PLACEMENT")]
    pub placement: Option<String>,
    /// Include globs, comma-separated (`{a,b}` alternatives allowed), relative to the source dir.
    #[arg(long, env = "ARGOCD_ENV_INCLUDE")]
    pub include: Option<String>,
    /// Exclude globs, comma-separated.
    #[arg(long, env = "ARGOCD_ENV_EXCLUDE")]
    pub exclude: Option<String>,
    /// Descend into subdirectories (default true).
    #[arg(long, env = "ARGOCD_ENV_RECURSE", value_parser = BoolishValueParser::new())]
    pub recurse: Option<bool>,
    /// Per-work budget of compact JSON bytes (`512000`, `500Ki`, `1Mi`); default 500Ki.
    #[arg(long, env = "ARGOCD_ENV_MAX_WORK_BYTES")]
    pub max_work_bytes: Option<String>,
    /// Namespace for namespaced manifests that have none.
    #[arg(long, env = "ARGOCD_ENV_DEFAULT_NAMESPACE")]
    pub default_namespace: Option<String>,
    /// Base name of the works (default: the application name).
    #[arg(long, env = "ARGOCD_ENV_WORK_NAME")]
    pub work_name: Option<String>,
    /// Namespace of the hub Application (default: from an `<ns>_<name>` application name, else `argocd`).
    #[arg(long, env = "ARGOCD_ENV_APPLICATION_NAMESPACE")]
    pub application_namespace: Option<String>,
    /// Print nothing instead of failing when there is no manifest.
    #[arg(long, env = "ARGOCD_ENV_ALLOW_EMPTY", value_parser = BoolishValueParser::new(), num_args = 0..=1, default_missing_value = "true")]
    pub allow_empty: Option<bool>,
    /// Application name (set by Argo CD).
    #[arg(long, env = "ARGOCD_APP_NAME")]
    pub app_name: Option<String>,
    /// Application destination namespace (set by Argo CD).
    #[arg(long, env = "ARGOCD_APP_NAMESPACE")]
    pub destination_namespace: Option<String>,
    /// Plugin parameters as JSON (set by Argo CD).
    #[arg(long, env = "ARGOCD_APP_PARAMETERS", hide = true)]
    pub parameters: Option<String>,
    /// Application source path in the repository (set by Argo CD; used in messages).
    #[arg(long, env = "ARGOCD_APP_SOURCE_PATH", hide = true)]
    pub source_path: Option<String>,
    #[arg(long, env = "ARGOCD_APP_SOURCE_REPO_URL", hide = true)]
    pub source_repo_url: Option<String>,
    #[arg(long, env = "ARGOCD_APP_REVISION", hide = true)]
    pub revision: Option<String>,
    #[arg(long, env = "ARGOCD_APP_SOURCE_TARGET_REVISION", hide = true)]
    pub target_revision: Option<String>,
}

/// Parameters from `ARGOCD_APP_PARAMETERS`: `[{"name": ..., "string"|"array"|"map": ...}]`.
fn parse_parameters(json: &str) -> Result<Vec<(String, Vec<String>)>, CmpError> {
    let bad = |m: String| CmpError::Config(format!("ARGOCD_APP_PARAMETERS: {m}"));
    let value: Value = serde_json::from_str(json).map_err(|e| bad(format!("invalid JSON: {e}")))?;
    let Value::Array(items) = value else {
        return Err(bad("expected a JSON list".into()));
    };
    let mut out = Vec::new();
    for item in items {
        let name = item
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| bad(format!("parameter without a name: {item}")))?
            .to_string();
        if !crate::install::PARAMETERS.contains(&name.as_str()) {
            return Err(bad(format!(
                "unknown parameter {name:?} (known: {})",
                crate::install::PARAMETERS.join(", ")
            )));
        }
        let values = if let Some(s) = item.get("string").and_then(Value::as_str) {
            vec![s.to_string()]
        } else if let Some(Value::Array(a)) = item.get("array") {
            a.iter()
                .map(|v| {
                    v.as_str().map(str::to_string).ok_or_else(|| {
                        bad(format!("parameter {name:?}: array items must be strings"))
                    })
                })
                .collect::<Result<_, _>>()?
        } else {
            return Err(bad(format!(
                "parameter {name:?} needs a string or an array value"
            )));
        };
        out.push((name, values));
    }
    Ok(out)
}

/// Parses `512000`, `500Ki`, `500KiB`, `1Mi`, `1MiB`, `500k`, `1M`.
pub fn parse_bytes(s: &str) -> Result<usize, CmpError> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let mult = match unit.trim() {
        "" | "B" => 1,
        "k" | "K" | "kB" | "KB" => 1000,
        "Ki" | "KiB" => 1024,
        "M" | "MB" => 1_000_000,
        "Mi" | "MiB" => 1024 * 1024,
        _ => 0,
    };
    match num.parse::<usize>() {
        Ok(n) if mult > 0 && n > 0 => Ok(n * mult),
        _ => Err(CmpError::Config(format!(
            "max work bytes {s:?} is not a size (e.g. 512000, 500Ki, 1Mi)"
        ))),
    }
}

fn parse_bool(name: &str, s: &str) -> Result<bool, CmpError> {
    match s.trim().to_ascii_lowercase().as_str() {
        "true" | "yes" | "1" | "on" | "y" => Ok(true),
        "false" | "no" | "0" | "off" | "n" | "" => Ok(false),
        _ => Err(CmpError::Config(format!(
            "parameter {name:?}: {s:?} is not a boolean"
        ))),
    }
}

/// Resolves flags, plugin env and parameters into the library's input and options.
pub fn resolve(args: &GenerateArgs) -> Result<(InputSpec, GenerateOptions), CmpError> {
    let mut a = args.clone();
    if let Some(json) = args.parameters.as_deref().filter(|s| !s.trim().is_empty()) {
        for (name, values) in parse_parameters(json)? {
            let single = || values.join(",");
            match name.as_str() {
                "target-cluster" if a.target_cluster.is_empty() => {
                    a.target_cluster = values
                        .iter()
                        .flat_map(|v| v.split(','))
                        .map(str::to_string)
                        .collect();
                }
                "placement" if a.placement.is_none() => a.placement = Some(single()),
                "include" if a.include.is_none() => a.include = Some(single()),
                "exclude" if a.exclude.is_none() => a.exclude = Some(single()),
                "recurse" if a.recurse.is_none() => a.recurse = Some(parse_bool(&name, &single())?),
                "max-work-bytes" if a.max_work_bytes.is_none() => a.max_work_bytes = Some(single()),
                "default-namespace" if a.default_namespace.is_none() => {
                    a.default_namespace = Some(single())
                }
                "work-name" if a.work_name.is_none() => a.work_name = Some(single()),
                "application-namespace" if a.application_namespace.is_none() => {
                    a.application_namespace = Some(single());
                }
                "allow-empty" if a.allow_empty.is_none() => {
                    a.allow_empty = Some(parse_bool(&name, &single())?)
                }
                "stdin" if a.stdin.is_none() => a.stdin = Some(parse_bool(&name, &single())?),
                _ => {} // set by a flag or plugin env, which win
            }
        }
    }

    let raw_app = a
        .app_name
        .as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| {
            CmpError::Config(
                "ARGOCD_APP_NAME is not set (--app-name); Argo CD sets it for plugins".into(),
            )
        })?;
    // Argo CD passes `<namespace>_<name>` for applications outside its own namespace.
    let (ns_from_name, app_name) = match raw_app.split_once('_') {
        Some((ns, name)) => (Some(ns.to_string()), name.to_string()),
        None => (None, raw_app.to_string()),
    };
    let app_namespace = a
        .application_namespace
        .clone()
        .filter(|s| !s.is_empty())
        .or(ns_from_name)
        .unwrap_or_else(|| "argocd".to_string());
    let work_name = a
        .work_name
        .clone()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| app_name.clone());

    let clusters: Vec<String> = a
        .target_cluster
        .iter()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    let placement = a
        .placement
        .as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty());
    let target = match (clusters.is_empty(), placement) {
        (false, Some(_)) => {
            return Err(CmpError::Config(
                "both TARGET_CLUSTER and PLACEMENT are set; choose one".into(),
            ));
        }
        (false, None) => Target::Clusters(clusters),
        (true, Some(p)) => {
            let (ns, name) = match p.split_once('/') {
                Some((ns, name)) => (ns.to_string(), name.to_string()),
                None => (
                    a.destination_namespace.clone().filter(|s| !s.is_empty()).ok_or_else(|| {
                        CmpError::Config(format!(
                            "placement {p:?} has no namespace: write <namespace>/<name> or set the application's destination namespace"
                        ))
                    })?,
                    p.to_string(),
                ),
            };
            Target::Placement {
                namespace: ns,
                name,
            }
        }
        (true, None) => Target::Clusters(Vec::new()), // rejected with a clear message by generate
    };

    let max_work_bytes = match &a.max_work_bytes {
        Some(s) if !s.trim().is_empty() => parse_bytes(s)?,
        _ => DEFAULT_MAX_WORK_BYTES,
    };
    let options = GenerateOptions {
        work_name,
        app_name,
        app_namespace,
        target,
        max_work_bytes,
        default_namespace: a.default_namespace.clone().filter(|s| !s.is_empty()),
        allow_empty: a.allow_empty.unwrap_or(false),
        display_prefix: a.source_path.clone(),
    };
    let input = if a.stdin.unwrap_or(false) {
        InputSpec::Stdin
    } else {
        InputSpec::Directory {
            path: a.source_dir.clone(),
            options: DirectoryOptions {
                recurse: a.recurse.unwrap_or(true),
                include: a.include.as_deref().map(split_globs).unwrap_or_default(),
                exclude: a.exclude.as_deref().map(split_globs).unwrap_or_default(),
            },
        }
    };
    Ok((input, options))
}

/// Input before stdin is read.
#[derive(Debug, Clone)]
pub enum InputSpec {
    Stdin,
    Directory {
        path: PathBuf,
        options: DirectoryOptions,
    },
}

fn context(args: &GenerateArgs) -> String {
    let mut parts = Vec::new();
    if let Some(v) = &args.app_name {
        parts.push(format!("application {v}"));
    }
    if let Some(v) = &args.source_repo_url {
        parts.push(format!("repo {v}"));
    }
    if let Some(v) = args.revision.as_ref().or(args.target_revision.as_ref()) {
        parts.push(format!("revision {v}"));
    }
    if let Some(v) = &args.source_path {
        parts.push(format!("path {v}"));
    }
    parts.join(", ")
}

/// Runs `generate` up to the plan: resolves the options, reads stdin when it is the input,
/// and returns the plan (`None` for an allowed empty input) with its options. The input is
/// dropped before returning, so rendering does not hold it.
pub fn plan_generate(
    args: &GenerateArgs,
    stdin: &mut dyn Read,
) -> Result<(Option<crate::Plan>, GenerateOptions), CmpError> {
    let (input_spec, options) = resolve(args)?;
    let input = match input_spec {
        InputSpec::Stdin => {
            let mut text = String::new();
            stdin
                .read_to_string(&mut text)
                .map_err(|source| CmpError::Io {
                    path: "<stdin>".into(),
                    source,
                })?;
            Input::Stream {
                name: "<stdin>".into(),
                text,
            }
        }
        InputSpec::Directory { path, options } => Input::Directory { path, options },
    };
    let plan = crate::build(&input, &options)?;
    Ok((plan, options))
}

/// Runs a `cmp` subcommand with explicit I/O (for tests and embedding).
pub fn run_with_io(
    args: CmpArgs,
    stdin: &mut dyn Read,
    stdout: &mut dyn Write,
    stderr: &mut dyn Write,
) -> ExitCode {
    // Every input error is found before the first byte is written: nothing on stdout for bad
    // input. The works are rendered straight into a buffered stdout.
    let written = match &args.command {
        CmpCommand::Generate(g) => match plan_generate(g, stdin) {
            Ok((plan, options)) => {
                let mut out = std::io::BufWriter::with_capacity(256 * 1024, stdout);
                plan.map_or(Ok(()), |plan| crate::render_to(&plan, &options, &mut out))
                    .and_then(|()| out.flush())
            }
            Err(e) => {
                let ctx = context(g);
                let _ = if ctx.is_empty() {
                    writeln!(stderr, "argocd-pull cmp generate: {e}")
                } else {
                    writeln!(stderr, "argocd-pull cmp generate: {e}\n  ({ctx})")
                };
                return ExitCode::FAILURE;
            }
        },
        CmpCommand::Install(i) => match crate::install::render(i) {
            Ok(text) => stdout
                .write_all(text.as_bytes())
                .and_then(|()| stdout.flush()),
            Err(e) => {
                let _ = writeln!(stderr, "argocd-pull cmp install: {e}");
                return ExitCode::FAILURE;
            }
        },
    };
    match written {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let _ = writeln!(stderr, "argocd-pull cmp: cannot write output: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Entry point for the `argocd-pull` binary: real stdin/stdout/stderr.
pub fn run(args: CmpArgs) -> ExitCode {
    let stdin = std::io::stdin();
    let stdout = std::io::stdout();
    let stderr = std::io::stderr();
    run_with_io(
        args,
        &mut stdin.lock(),
        &mut stdout.lock(),
        &mut stderr.lock(),
    )
}
