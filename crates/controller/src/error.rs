use argocd_pull_domain::WorkError;
use argocd_pull_ops::reconcile_metrics::Reason;

/// Why a reconcile failed (retried with backoff).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("invalid Application: {0}")]
    InvalidApplication(#[from] WorkError),
    #[error("ManagedCluster {0:?} does not exist; waiting for it")]
    ClusterMissing(String),
    #[error("namespace {0:?} of the ManagedCluster does not exist; waiting for it")]
    NamespaceMissing(String),
    #[error("{0} changed while it was being written; retrying")]
    Conflict(String),
}

/// The `reason` label of `reconcile_errors_total`.
impl Reason for Error {
    const REASONS: &'static [&'static str] = &[
        "conflict",
        "api",
        "transport",
        "invalid_application",
        "cluster_missing",
        "namespace_missing",
    ];

    fn reason(&self) -> &'static str {
        match self {
            Error::Kube(e) => e.reason(),
            Error::InvalidApplication(_) => "invalid_application",
            Error::ClusterMissing(_) => "cluster_missing",
            Error::NamespaceMissing(_) => "namespace_missing",
            Error::Conflict(_) => "conflict",
        }
    }
}

pub(crate) use argocd_pull_ops::api_error::is_status;

#[cfg(test)]
mod tests {
    use super::*;
    use argocd_pull_ops::reconcile_metrics::check_reasons;

    #[test]
    fn every_reason_is_listed() {
        let api = |code| {
            kube::Error::Api(Box::new(
                kube::core::Status::failure("x", "y").with_code(code),
            ))
        };
        check_reasons([
            Error::Kube(api(409)),
            Error::Kube(api(500)),
            Error::Kube(kube::Error::SerdeError(
                serde_json::from_str::<u8>("x").unwrap_err(),
            )),
            Error::InvalidApplication(WorkError::MissingName),
            Error::ClusterMissing("c".into()),
            Error::NamespaceMissing("c".into()),
            Error::Conflict("x".into()),
        ])
        .unwrap();
        assert_eq!(Error::Conflict("x".into()).reason(), "conflict");
    }
}
