//! `tracing` initialisation and the log flags every long-running command shares.
//!
//! [`LogArgs`] is flattened **globally** into the top-level `argocd-pull` command (crates/cli), so
//! `--log-level` / `--log-format` (and Argo CD's spellings `--loglevel` / `--logformat`) are
//! accepted by every subcommand, before or after its name. Subcommands must not define these
//! flags again (clap rejects duplicates). Their environment variables are `ARGOCD_PULL_LOG_LEVEL`
//! and `ARGOCD_PULL_LOG_FORMAT`; the binary falls back to argocd-agent's per-command variables
//! (`ARGOCD_PRINCIPAL_LOG_LEVEL` / `_FORMAT` for `principal`, `ARGOCD_AGENT_LOG_LEVEL` / `_FORMAT`
//! for `agent`) through [`LogArgs::with_env_fallback`], then to `RUST_LOG`, then to `info`.
//!
//! Colour (ANSI escapes) only when stderr is a terminal and `NO_COLOR` is not set; JSON is one
//! object per line.

use std::io::IsTerminal;

use tracing_subscriber::registry::Registry;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, layer::SubscriberExt};

/// Log line format.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line (for log collectors).
    Json,
}

/// The log flags (see the module docs).
#[derive(clap::Args, Clone, Debug, Default, PartialEq, Eq)]
pub struct LogArgs {
    /// Log level: trace, debug, info, warn, error (Argo CD's names; `warning`, `fatal` and
    /// `panic` are accepted too), or tracing directives such as `info,kube=debug`.
    /// Default: `RUST_LOG`, else info.
    #[arg(
        long = "log-level",
        visible_alias = "loglevel",
        env = "ARGOCD_PULL_LOG_LEVEL",
        global = true,
        value_name = "LEVEL",
        value_parser = parse_level
    )]
    pub log_level: Option<String>,
    /// Log format: text or json (one object per line).
    #[arg(
        long = "log-format",
        visible_alias = "logformat",
        env = "ARGOCD_PULL_LOG_FORMAT",
        global = true,
        value_enum,
        ignore_case = true,
        value_name = "FORMAT"
    )]
    pub log_format: Option<LogFormat>,
}

impl LogArgs {
    /// Fills what the flags and `ARGOCD_PULL_*` left unset from `<prefix>_LOG_LEVEL` and
    /// `<prefix>_LOG_FORMAT` (e.g. `ARGOCD_PRINCIPAL`). An invalid value is an error naming the
    /// variable.
    pub fn with_env_fallback(self, prefix: &str) -> anyhow::Result<Self> {
        self.with_fallback(prefix, |name| std::env::var(name).ok())
    }

    /// [`LogArgs::with_env_fallback`] with another source of variables.
    pub fn with_fallback(
        mut self,
        prefix: &str,
        var: impl Fn(&str) -> Option<String>,
    ) -> anyhow::Result<Self> {
        let var = |name: String| var(&name).filter(|v| !v.trim().is_empty());
        if self.log_level.is_none()
            && let Some(v) = var(format!("{prefix}_LOG_LEVEL"))
        {
            let level = parse_level(&v).map_err(|e| anyhow::anyhow!("{prefix}_LOG_LEVEL: {e}"))?;
            self.log_level = Some(level);
        }
        if self.log_format.is_none()
            && let Some(v) = var(format!("{prefix}_LOG_FORMAT"))
        {
            let format = <LogFormat as clap::ValueEnum>::from_str(&v, true).map_err(|_| {
                anyhow::anyhow!("{prefix}_LOG_FORMAT: invalid log format {v:?}: use text or json")
            })?;
            self.log_format = Some(format);
        }
        Ok(self)
    }

    /// The filter these flags describe: the level, else `RUST_LOG`, else `info`.
    pub fn filter(&self) -> EnvFilter {
        match &self.log_level {
            Some(l) => EnvFilter::new(l),
            None => EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        }
    }

    /// Installs the global subscriber described by these flags (see [`init_with`]).
    pub fn init(&self) -> anyhow::Result<()> {
        init_with(self.log_format.unwrap_or_default(), self.filter())
    }

    /// [`LogArgs::init`] plus `extra` beside the log output (the OTLP layer of
    /// [`crate::otel::Telemetry::layer`]).
    pub fn init_with_layer(
        &self,
        extra: Option<Box<dyn Layer<Registry> + Send + Sync>>,
    ) -> anyhow::Result<()> {
        init_layers(self.log_format.unwrap_or_default(), self.filter(), extra)
    }
}

/// Accepts Argo CD's / logrus' level names and tracing directives; returns a tracing directive.
pub fn parse_level(s: &str) -> Result<String, String> {
    let s = s.trim();
    let level = match s.to_ascii_lowercase().as_str() {
        "trace" => "trace",
        "debug" => "debug",
        "info" => "info",
        "warn" | "warning" => "warn",
        "error" | "fatal" | "panic" => "error",
        "off" => "off",
        _ => {
            // tracing directives (`info,kube=debug`)
            return match EnvFilter::try_new(s) {
                Ok(_) if !s.is_empty() && s.contains(['=', ',']) => Ok(s.to_string()),
                _ => Err(format!(
                    "invalid log level {s:?}: use trace, debug, info, warn or error \
                     (or directives like info,kube=debug)"
                )),
            };
        }
    };
    Ok(level.to_string())
}

/// Whether log lines written to stderr get ANSI colours: only on a terminal, and not with
/// `NO_COLOR` set (<https://no-color.org>).
pub fn use_colour() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// Installs the global subscriber: stderr, `format`, filter from `RUST_LOG` (default `info`).
/// Calling it again (e.g. from several tests) is harmless: the first subscriber stays.
pub fn init(format: LogFormat) -> anyhow::Result<()> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    init_with(format, filter)
}

/// Installs the global subscriber: stderr, `format`, `filter`; colour only on a terminal.
pub fn init_with(format: LogFormat, filter: EnvFilter) -> anyhow::Result<()> {
    init_layers(format, filter, None)
}

/// [`init_with`] plus `extra`, a layer with its own filter beside the log output. The log output
/// never shows the spans of [`crate::otel::TARGET`] (whatever the level), so with OTLP tracing off
/// those spans are disabled where they are created.
pub fn init_layers(
    format: LogFormat,
    filter: EnvFilter,
    extra: Option<Box<dyn Layer<Registry> + Send + Sync>>,
) -> anyhow::Result<()> {
    let filter = filter.add_directive(
        format!("{}=off", crate::otel::TARGET)
            .parse()
            .expect("a valid directive"),
    );
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let fmt: Box<dyn Layer<Registry> + Send + Sync> = match format {
        LogFormat::Text => fmt.with_ansi(use_colour()).boxed(),
        LogFormat::Json => fmt.json().flatten_event(true).with_ansi(false).boxed(),
    };
    let mut layers = vec![fmt.with_filter(filter).boxed()];
    layers.extend(extra);
    let result = tracing_subscriber::registry().with(layers).try_init();
    if let Err(e) = result {
        tracing::debug!(error = %e, "a tracing subscriber was already installed");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        log: LogArgs,
    }

    fn parse(args: &[&str]) -> Result<LogArgs, clap::Error> {
        Cli::try_parse_from(std::iter::once("x").chain(args.iter().copied())).map(|c| c.log)
    }

    #[test]
    fn argo_cd_and_argocd_agent_spellings() {
        for args in [
            ["--log-level", "debug", "--log-format", "json"],
            ["--loglevel", "debug", "--logformat", "json"],
            ["--log-level", "DEBUG", "--logformat", "JSON"],
        ] {
            let l = parse(&args).unwrap();
            assert_eq!(l.log_level.as_deref(), Some("debug"), "{args:?}");
            assert_eq!(l.log_format, Some(LogFormat::Json), "{args:?}");
        }
        assert_eq!(
            parse(&["--log-level", "warning"])
                .unwrap()
                .log_level
                .as_deref(),
            Some("warn")
        );
        assert_eq!(
            parse(&["--log-level", "fatal"])
                .unwrap()
                .log_level
                .as_deref(),
            Some("error")
        );
        assert_eq!(
            parse(&["--log-level", "info,kube=debug"])
                .unwrap()
                .log_level
                .as_deref(),
            Some("info,kube=debug")
        );
    }

    #[test]
    fn bad_values_name_the_choices() {
        let e = parse(&["--log-level", "loud"]).unwrap_err().to_string();
        assert!(e.contains("use trace, debug, info, warn or error"), "{e}");
        let e = parse(&["--log-format", "xml"]).unwrap_err().to_string();
        assert!(e.contains("text") && e.contains("json"), "{e}");
    }

    #[test]
    fn per_command_environment_fallback() {
        let env = |name: &str| match name {
            "ARGOCD_PRINCIPAL_LOG_LEVEL" => Some("Warning".to_string()),
            "ARGOCD_PRINCIPAL_LOG_FORMAT" => Some("json".to_string()),
            "ARGOCD_AGENT_LOG_LEVEL" => Some("loud".to_string()),
            _ => None,
        };
        let l = LogArgs::default()
            .with_fallback("ARGOCD_PRINCIPAL", env)
            .unwrap();
        assert_eq!(l.log_level.as_deref(), Some("warn"));
        assert_eq!(l.log_format, Some(LogFormat::Json));
        // the flag (or ARGOCD_PULL_*) wins
        let flags = LogArgs {
            log_level: Some("debug".into()),
            log_format: Some(LogFormat::Text),
        };
        assert_eq!(
            flags
                .clone()
                .with_fallback("ARGOCD_PRINCIPAL", env)
                .unwrap(),
            flags
        );
        let e = LogArgs::default()
            .with_fallback("ARGOCD_AGENT", env)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("ARGOCD_AGENT_LOG_LEVEL: invalid log level"),
            "{e}"
        );
    }
}
