//! The work agent's error.

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error(transparent)]
    Kube(#[from] kube::Error),
    #[error("{0}")]
    Other(String),
}
