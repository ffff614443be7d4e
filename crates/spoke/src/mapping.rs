//! Destination-based mapping on a managed agent (`--destination-based-mapping`; peer:
//! agent/inbound.go `getTargetNamespaceForApp`, `isNamespaceAllowed`, `ensureNamespaceExists`,
//! agent/agent.go `NewAgent`, internal/resync/resync.go `newRequestUpdateFromObject` and
//! `ProcessIncomingSyncedResource`):
//!
//! * the principal's Applications keep their namespace here, except those of the principal's
//!   own namespace when this agent's Argo CD lives elsewhere: they go into the agent's
//!   namespace, marked with [`NAMESPACE_REMAPPED`];
//! * an Application may only be written in the agent's namespace or one `--allowed-namespaces`
//!   matches (globs or `/regex/`); `--create-namespace` creates a missing namespace first;
//! * resync names a remapped Application by the principal's namespace.
//!
//! Without mapping none of this runs (everything lives in the agent's namespace).

use serde_json::Value;

use argocd_pull_agent_core::objects as o;

pub use argocd_pull_agent_core::objects::NAMESPACE_REMAPPED;

/// Where an Application the principal sent in namespace `app_ns` lives here, and whether it is
/// remapped (peer: `getTargetNamespaceForApp`; an unknown principal namespace keeps `app_ns`).
pub fn target_namespace(app_ns: &str, principal_ns: &str, agent_ns: &str) -> (String, bool) {
    if !principal_ns.is_empty() && app_ns == principal_ns && agent_ns != principal_ns {
        (agent_ns.to_string(), true)
    } else {
        (app_ns.to_string(), false)
    }
}

/// Whether Applications may be written in `ns` (peer: `isNamespaceAllowed`: the agent's own
/// namespace and `--allowed-namespaces`).
pub fn namespace_allowed(ns: &str, agent_ns: &str, allowed: &[String]) -> bool {
    ns == agent_ns || {
        let l: Vec<&str> = allowed.iter().map(String::as_str).collect();
        argocd_pull_agent_core::project_match::in_list(&l, ns)
    }
}

/// The namespace a resync names a local Application by (peer: `newRequestUpdateFromObject`):
/// the principal's for a remapped one, else its own.
pub fn peer_namespace<'a>(local: &'a Value, principal_ns: &'a str) -> &'a str {
    match o::annotation(local, NAMESPACE_REMAPPED) {
        Some(_) if !principal_ns.is_empty() => principal_ns,
        _ => o::namespace(local),
    }
}

/// Where to look up an Application the principal names in `ns` during resync (peer:
/// `ProcessIncomingSyncedResource`: the principal's namespace stands for the agent's).
pub fn lookup_namespace<'a>(ns: &'a str, principal_ns: &str, agent_ns: &'a str) -> &'a str {
    if ns == principal_ns { agent_ns } else { ns }
}

/// The key of a local Application in the agent's maps: `<ns>/<name>`.
pub fn key(ns: &str, name: &str) -> String {
    format!("{ns}/{name}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_the_principal_namespace_is_remapped_and_only_when_the_agent_lives_elsewhere() {
        assert_eq!(
            target_namespace("team-a", "argocd", "agent-ns"),
            ("team-a".into(), false)
        );
        assert_eq!(
            target_namespace("argocd", "argocd", "agent-ns"),
            ("agent-ns".into(), true)
        );
        assert_eq!(
            target_namespace("argocd", "argocd", "argocd"),
            ("argocd".into(), false)
        );
        assert_eq!(
            target_namespace("argocd", "", "agent-ns"),
            ("argocd".into(), false),
            "principal namespace unknown: kept"
        );
    }

    #[test]
    fn the_agent_namespace_and_the_allowed_list_admit() {
        let allowed = vec!["team-*".to_string(), "/^ops-[0-9]+$/".to_string()];
        assert!(namespace_allowed("argocd", "argocd", &[]));
        assert!(namespace_allowed("team-a", "argocd", &allowed));
        assert!(namespace_allowed("ops-12", "argocd", &allowed));
        assert!(!namespace_allowed("ops-x", "argocd", &allowed));
        assert!(!namespace_allowed("team-a", "argocd", &[]));
    }

    #[test]
    fn resync_names_remapped_apps_by_the_principal_namespace() {
        let plain = json!({"metadata": {"name": "a", "namespace": "team-a"}});
        assert_eq!(peer_namespace(&plain, "argocd"), "team-a");
        let remapped = json!({"metadata": {"name": "a", "namespace": "agent-ns",
            "annotations": {NAMESPACE_REMAPPED: "true"}}});
        assert_eq!(peer_namespace(&remapped, "argocd"), "argocd");
        assert_eq!(lookup_namespace("argocd", "argocd", "agent-ns"), "agent-ns");
        assert_eq!(lookup_namespace("team-a", "argocd", "agent-ns"), "team-a");
    }
}
