//! What a replicated object is: its kind in the peer's `Resource.kind` words (with the store
//! kind and event target it maps to) and its key in the source's cache.

use serde_json::Value;

use argocd_pull_agent_core::event::Target;
use argocd_pull_agent_core::store::Kind;

/// What a replicated object is, in the peer's `Resource.kind` words.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RKind {
    Application,
    AppProject,
    ApplicationSet,
    Repository,
    ClusterSecret,
}

impl RKind {
    pub fn as_str(self) -> &'static str {
        match self {
            RKind::Application => "Application",
            RKind::AppProject => "AppProject",
            RKind::ApplicationSet => "ApplicationSet",
            RKind::Repository => "Repository",
            RKind::ClusterSecret => "ClusterSecret",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [
            RKind::Application,
            RKind::AppProject,
            RKind::ApplicationSet,
            RKind::Repository,
            RKind::ClusterSecret,
        ]
        .into_iter()
        .find(|k| k.as_str() == s)
    }

    pub fn store_kind(self) -> Kind {
        match self {
            RKind::Application => Kind::Application,
            RKind::AppProject => Kind::AppProject,
            RKind::ApplicationSet => Kind::ApplicationSet,
            RKind::Repository | RKind::ClusterSecret => Kind::Secret,
        }
    }

    /// The event target (`None`: replicated by snapshot only, as the peer's cluster secrets).
    pub fn target(self) -> Option<Target> {
        match self {
            RKind::Application => Some(Target::Application),
            RKind::AppProject => Some(Target::AppProject),
            RKind::ApplicationSet => Some(Target::ApplicationSet),
            RKind::Repository => Some(Target::Repository),
            RKind::ClusterSecret => None,
        }
    }

    pub fn from_target(t: Target) -> Option<Self> {
        match t {
            Target::Application => Some(RKind::Application),
            Target::AppProject => Some(RKind::AppProject),
            Target::ApplicationSet => Some(RKind::ApplicationSet),
            Target::Repository => Some(RKind::Repository),
            _ => None,
        }
    }
}

/// Label of Argo CD's typed Secrets.
const SECRET_TYPE: &str = "argocd.argoproj.io/secret-type";

/// Which replicated kind a hub Secret of the principal's namespace is, if any: repository and
/// repo-creds Secrets, and cluster secrets of self-registered agents (the peer's
/// `GetClusterSecrets`: label `argocd-agent.argoproj-labs.io/self-registered-cluster=true`).
pub fn secret_kind(s: &Value) -> Option<RKind> {
    let labels = &s["metadata"]["labels"];
    match labels[SECRET_TYPE].as_str() {
        Some("repository" | "repo-creds") => Some(RKind::Repository),
        Some("cluster") if labels[crate::LABEL_SELF_REGISTERED] == "true" => {
            Some(RKind::ClusterSecret)
        }
        _ => None,
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    pub kind: RKind,
    pub namespace: String,
    pub name: String,
}
