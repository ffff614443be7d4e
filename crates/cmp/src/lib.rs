//! `argocd-pull cmp`: an Argo CD Config Management Plugin that wraps an application's manifests
//! in OCM `ManifestWork`s (one per target cluster) or a `ManifestWorkReplicaSet` (a Placement).
//!
//! The library is a pipeline of pure steps — [`source`] (discover and parse input) →
//! [`manifest::check`] and `finish` (validate, default namespaces, serialize) →
//! [`manifest::order`] → [`plan()`] (name and split works under a byte budget) → [`render()`]
//! (deterministic JSON documents) — plus [`install`] (what to apply to enable the plugin) and a
//! thin [`cli`] layer. See the crate README for the design.

pub mod block_yaml;
pub mod cli;
mod envelope;
pub mod error;
pub mod fast_yaml;
pub mod feedback;
pub mod install;
mod load;
pub mod manifest;
mod options;
mod plan;
mod render;
pub mod source;

pub use envelope::{
    ANNOTATION_HUB_APPLICATION_NAME, ANNOTATION_HUB_APPLICATION_NAMESPACE, ANNOTATION_SYNC_OPTIONS,
    LABEL_MANAGED_BY, MANAGED_BY, REPLICASET_API_VERSION, WORK_API_VERSION,
};
pub use error::{CmpError, Origin};
pub use load::{load_manifests, read_input};
use options::validate_options;
pub use options::{DEFAULT_MAX_WORK_BYTES, GenerateOptions, Input, Target, check_dns1123};
pub use plan::{Plan, plan};
pub use render::{render, render_to};

/// The whole pipeline: returns the output text (empty only with `allow_empty`).
pub fn generate(input: &Input, options: &GenerateOptions) -> Result<String, CmpError> {
    Ok(match build(input, options)? {
        Some(plan) => render(&plan, options),
        None => String::new(),
    })
}

/// Everything but the rendering: reads, validates and plans the works. `None` when the input
/// holds no manifest and `allow_empty` is set. Every input error is found here, so a caller
/// that renders only after this returns writes nothing for bad input.
pub fn build(input: &Input, options: &GenerateOptions) -> Result<Option<Plan>, CmpError> {
    validate_options(options)?;
    let manifests = load_manifests(input, options)?;
    if manifests.is_empty() {
        if options.allow_empty {
            return Ok(None);
        }
        let where_ = match input {
            Input::Directory { path, options: d } => {
                let mut s = format!(" in {}", path.display());
                if !d.include.is_empty() {
                    s.push_str(&format!(" (include: {})", d.include.join(",")));
                }
                if !d.exclude.is_empty() {
                    s.push_str(&format!(" (exclude: {})", d.exclude.join(",")));
                }
                s
            }
            Input::Stream { name, .. } => format!(" in {name}"),
        };
        return Err(CmpError::NoManifests(format!(
            "{where_}; set ARGOCD_ENV_ALLOW_EMPTY=true (--allow-empty) to print no work"
        )));
    }
    plan(manifests, options).map(Some)
}
