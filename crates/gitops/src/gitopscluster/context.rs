//! What every step of the GitOpsCluster controller shares: its name in metrics and logs, its
//! [`Error`], and the context a reconcile works from (the client and the reflector stores).

use std::time::Instant;

use argocd_pull_api::gitops::GitOpsCluster;
use argocd_pull_api::ocm::cluster::{ManagedCluster, PlacementDecision};
use argocd_pull_ops::reconcile_metrics::Reason;
use argocd_pull_ops::retry::Retries;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::ApiResource;
use kube::runtime::reflector::{ObjectRef, Store};

use crate::GitOpsConfig;
use crate::metrics::Metrics;

pub(super) const CONTROLLER: &str = "gitopscluster";

/// Argo CD server Service labels.
pub(super) const ARGO_SERVER_SELECTOR: &str =
    "app.kubernetes.io/component=server,app.kubernetes.io/part-of=argocd";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}: {1}")]
    Kube(String, #[source] kube::Error),
    /// Some clusters could not be registered (the others were).
    #[error("{0}")]
    Incomplete(String),
}

/// The `reason` label of `reconcile_errors_total`.
impl Reason for Error {
    const REASONS: &'static [&'static str] = &["conflict", "api", "transport", "incomplete"];

    fn reason(&self) -> &'static str {
        match self {
            Error::Kube(_, e) => e.reason(),
            Error::Incomplete(_) => "incomplete",
        }
    }
}

/// The ManagedServiceAccount API (`authentication.open-cluster-management.io`), probed lazily.
pub(super) struct MsaApi {
    pub(super) checked: Option<Instant>,
    pub(super) resource: Option<ApiResource>,
}

pub(super) struct Ctx {
    pub(super) client: Client,
    pub(super) config: GitOpsConfig,
    pub(super) metrics: Metrics,
    pub(super) decisions: Store<PlacementDecision>,
    pub(super) clusters: Store<ManagedCluster>,
    pub(super) secrets: Store<Secret>,
    pub(super) msa: tokio::sync::Mutex<MsaApi>,
    /// Failed reconciles per GitOpsCluster, for the retry backoff.
    pub(super) retries: Retries<ObjectRef<GitOpsCluster>>,
}

pub(super) fn kerr(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let what = what.into();
    move |e| Error::Kube(what, e)
}

pub(super) use argocd_pull_ops::api_error::is_status;

#[cfg(test)]
mod tests {
    use super::*;
    use argocd_pull_ops::reconcile_metrics::{api_refusal as api, check_reasons};

    #[test]
    fn every_reason_is_listed() {
        check_reasons([
            Error::Kube("w".into(), api(409)),
            Error::Kube("w".into(), api(403)),
            Error::Kube("w".into(), kube::Error::LinesCodecMaxLineLengthExceeded),
            Error::Incomplete("c".into()),
        ])
        .unwrap();
    }
}
