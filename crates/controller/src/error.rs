use argocd_pull_domain::WorkError;

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

impl Error {
    /// Every value of [`Error::reason`].
    pub const REASONS: [&'static str; 6] = [
        "conflict",
        "api",
        "transport",
        "invalid_application",
        "cluster_missing",
        "namespace_missing",
    ];

    /// A short label for the `reconcile_errors_total{reason}` metric.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Kube(kube::Error::Api(ae)) if ae.code == 409 => "conflict",
            Error::Kube(kube::Error::Api(_)) => "api",
            Error::Kube(_) => "transport",
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

    #[test]
    fn every_reason_is_listed() {
        let api = |code| {
            kube::Error::Api(Box::new(
                kube::core::Status::failure("x", "y").with_code(code),
            ))
        };
        for e in [
            Error::Kube(api(409)),
            Error::Kube(api(500)),
            Error::Kube(kube::Error::SerdeError(
                serde_json::from_str::<u8>("x").unwrap_err(),
            )),
            Error::ClusterMissing("c".into()),
            Error::NamespaceMissing("c".into()),
            Error::Conflict("x".into()),
        ] {
            assert!(Error::REASONS.contains(&e.reason()), "{}", e.reason());
        }
        assert!(Error::REASONS.contains(&"invalid_application"));
    }
}
