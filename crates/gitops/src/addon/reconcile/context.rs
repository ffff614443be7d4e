//! What every step of the addon controller shares: its name in metrics and logs, its settings
//! ([`AddonConfig`]), its [`Error`] and the context a pass works from.

use argocd_pull_ops::reconcile_metrics::Reason;
use argocd_pull_ops::retry::Retries;
use kube::Client;
use kube::runtime::reflector::ObjectRef;

use crate::addon::GitOpsCluster;

use crate::metrics::Metrics;

pub(super) const CONTROLLER: &str = "argocd-agent-addon";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}: {1}")]
    Kube(String, #[source] kube::Error),
    /// Objects changed by another writer on every pass.
    #[error("{0}")]
    Conflict(String),
    /// Some writes or deletes failed (the others were made).
    #[error("{0}")]
    Incomplete(String),
    /// Bad input or a failed step: already reported in a condition.
    #[error("{0}")]
    Reported(String),
    /// A failure of the controller itself (a key-generation task that did not finish).
    #[error("{0}")]
    Internal(String),
}

/// The `reason` label of `reconcile_errors_total`.
impl Reason for Error {
    const REASONS: &'static [&'static str] = &[
        "conflict",
        "api",
        "transport",
        "incomplete",
        "reported",
        "internal",
    ];

    fn reason(&self) -> &'static str {
        match self {
            Error::Kube(_, e) => e.reason(),
            Error::Conflict(_) => "conflict",
            Error::Incomplete(_) => "incomplete",
            Error::Reported(_) => "reported",
            Error::Internal(_) => "internal",
        }
    }
}

pub(super) fn kube_err(what: &str) -> impl Fn(kube::Error) -> Error + '_ {
    move |e| Error::Kube(what.to_string(), e)
}

/// Settings of the addon controller.
#[derive(Clone, Debug)]
pub struct AddonConfig {
    /// The `argocd-pull` image the AddOnTemplate deploys as the agent.
    pub agent_image: String,
}

pub(super) struct Ctx {
    pub(super) client: Client,
    pub(super) config: AddonConfig,
    pub(super) metrics: Metrics,
    /// Failed passes per GitOpsCluster, for the retry backoff.
    pub(super) retries: Retries<ObjectRef<GitOpsCluster>>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use argocd_pull_ops::reconcile_metrics::{api_refusal as api, check_reasons};

    #[test]
    fn every_reason_is_listed_and_messages_are_unchanged() {
        check_reasons([
            kube_err("reading")(api(409)),
            kube_err("reading")(api(500)),
            kube_err("reading")(kube::Error::LinesCodecMaxLineLengthExceeded),
            Error::Conflict("x".into()),
            Error::Incomplete("x".into()),
            Error::Reported("x".into()),
            Error::Internal("x".into()),
        ])
        .unwrap();
        let e = kube_err("listing nodes")(api(500));
        assert_eq!(e.to_string(), format!("listing nodes: {}", api(500)));
    }
}
