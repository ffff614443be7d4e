//! Errors: every variant names what is wrong and where (file, document index, line).

use std::fmt;

/// Where a document came from: a file (relative to the source directory) or `<stdin>`,
/// its 1-based document index within that file, and the line its first content starts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    pub file: String,
    /// 1-based index of the document in its file (empty and comment-only documents count,
    /// a preamble before the first `---` does not when it holds no content).
    pub document: usize,
    /// 1-based line of the document's start in its file.
    pub line: usize,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: document {} (line {})",
            self.file, self.document, self.line
        )
    }
}

/// Everything `generate` can reject. Nothing is written when one of these is returned.
#[derive(Debug, thiserror::Error)]
pub enum CmpError {
    #[error("{origin}: invalid YAML: {message}")]
    InvalidYaml { origin: Origin, message: String },
    #[error("{origin}: invalid JSON: {message}")]
    InvalidJson { origin: Origin, message: String },
    #[error("{origin}: {message}")]
    InvalidManifest { origin: Origin, message: String },
    #[error("duplicate resource {identity}: {first} and {second} (each resource may appear once)")]
    Duplicate {
        identity: String,
        first: Origin,
        second: Origin,
    },
    #[error(
        "{origin}: {kind}/{name} is {size} bytes, larger than the per-work budget of {budget} bytes \
         (raise --max-work-bytes / ARGOCD_ENV_MAX_WORK_BYTES, or make the object smaller)"
    )]
    ObjectTooLarge {
        origin: Origin,
        kind: String,
        name: String,
        size: usize,
        budget: usize,
    },
    #[error("cannot read {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("no manifests found{0}")]
    NoManifests(String),
    /// A configuration problem: missing target, invalid name, bad option value, unknown parameter.
    #[error("{0}")]
    Config(String),
}
