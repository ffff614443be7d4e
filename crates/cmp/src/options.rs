//! What `generate` is asked: where the manifests come from ([`Input`]), where the works go
//! ([`Target`]) and the rest of its options, and their validation.

use std::path::PathBuf;

use crate::error::CmpError;
use crate::source::DirectoryOptions;

/// Default per-work byte budget: 500 KiB of compact JSON, a third of etcd's default 1.5 MiB
/// request limit (room for status, managed fields and server-side metadata).
pub const DEFAULT_MAX_WORK_BYTES: usize = 500 * 1024;

/// Where the manifests come from.
#[derive(Debug, Clone)]
pub enum Input {
    /// A source directory (Argo CD runs the plugin in the application's source directory).
    Directory {
        path: PathBuf,
        options: DirectoryOptions,
    },
    /// A rendered stream (e.g. `helm template` or `kustomize build` output), named in messages.
    Stream { name: String, text: String },
}

/// Where the works go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// One ManifestWork per managed cluster, in the cluster's namespace.
    Clusters(Vec<String>),
    /// One ManifestWorkReplicaSet in the Placement's namespace.
    Placement { namespace: String, name: String },
}

/// Everything `generate` needs besides the input.
#[derive(Debug, Clone)]
pub struct GenerateOptions {
    /// Base name of the works (the Argo CD application name unless overridden).
    pub work_name: String,
    /// Hub Application name and namespace, recorded in annotations on every work.
    pub app_name: String,
    pub app_namespace: String,
    pub target: Target,
    /// Per-work budget in bytes of compact JSON.
    pub max_work_bytes: usize,
    /// Namespace given to namespaced manifests that have none.
    pub default_namespace: Option<String>,
    /// Print nothing (instead of failing) when the input holds no manifest.
    pub allow_empty: bool,
    /// Prefix for file names in messages (the app's source path in the repository).
    pub display_prefix: Option<String>,
}

/// Checks a DNS-1123 subdomain (`max` ≤ 253) or, with `label`, a DNS-1123 label (≤ 63).
pub fn check_dns1123(what: &str, value: &str, label: bool) -> Result<(), CmpError> {
    let max = if label { 63 } else { 253 };
    let part_ok = |p: &str| {
        !p.is_empty()
            && p.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !p.starts_with('-')
            && !p.ends_with('-')
    };
    let ok = value.len() <= max
        && if label {
            part_ok(value)
        } else {
            value.split('.').all(part_ok)
        };
    if ok {
        Ok(())
    } else {
        let kind = if label {
            "DNS-1123 label"
        } else {
            "DNS-1123 subdomain"
        };
        Err(CmpError::Config(format!(
            "{what} {value:?} is not a valid {kind} (lowercase letters, digits and '-'{}, at most {max} characters)",
            if label { "" } else { " in '.'-separated parts" }
        )))
    }
}

pub(crate) fn validate_options(o: &GenerateOptions) -> Result<(), CmpError> {
    check_dns1123("work name", &o.work_name, false)?;
    match &o.target {
        Target::Clusters(clusters) => {
            if clusters.is_empty() {
                return Err(CmpError::Config(
                    "no target: set ARGOCD_ENV_TARGET_CLUSTER (comma-separated cluster names) or ARGOCD_ENV_PLACEMENT".into(),
                ));
            }
            for c in clusters {
                check_dns1123("target cluster", c, true)?;
            }
        }
        Target::Placement { namespace, name } => {
            check_dns1123("placement namespace", namespace, true)?;
            check_dns1123("placement name", name, false)?;
        }
    }
    if let Some(ns) = &o.default_namespace {
        check_dns1123("default namespace", ns, true)?;
    }
    Ok(())
}
