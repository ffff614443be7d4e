//! What every step of the addon controller shares: its name in metrics and logs, its settings
//! ([`AddonConfig`]), its [`Error`] and the context a pass works from.

use argocd_pull_ops::retry::Retries;
use kube::Client;
use kube::runtime::reflector::ObjectRef;

use crate::addon::GitOpsCluster;

use crate::metrics::Metrics;

pub(super) const CONTROLLER: &str = "argocd-agent-addon";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Kube(String),
    /// Bad input or a failed step: already reported in a condition.
    #[error("{0}")]
    Reported(String),
}

pub(super) fn kube_err(what: &str) -> impl Fn(kube::Error) -> Error + '_ {
    move |e| Error::Kube(format!("{what}: {e}"))
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
