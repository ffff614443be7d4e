//! What every step of the addon controller shares: its name in metrics and logs, its settings
//! ([`AddonConfig`]), its [`Error`], the context a pass works from, and the retry backoff.

use std::time::Duration;

use kube::Client;

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
    /// Consecutive failed passes per GitOpsCluster (`ns/name`), for the retry backoff.
    pub(super) failures: std::sync::Mutex<std::collections::HashMap<String, u32>>,
}

/// Retry delay after `n` consecutive failures: 5 s doubling to 5 min.
pub fn retry_delay(n: u32) -> Duration {
    Duration::from_secs(
        5u64.saturating_mul(1 << n.saturating_sub(1).min(6))
            .min(300),
    )
}
