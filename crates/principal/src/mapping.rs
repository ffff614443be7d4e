//! Destination-based mapping on the principal (`--destination-based-mapping`, the peer's
//! `destinationBasedMapping`; peer: docs/concepts/agent-mapping.md, principal/callbacks.go
//! `getAgentNameForApp`/`handleAppAgentChange`, principal/event.go L240, principal/server.go
//! `defaultAppFilterChain`, internal/resync/resync.go).
//!
//! * A managed agent's hub Applications are the ones whose `spec.destination.name` names it, in
//!   any admitted namespace; they keep their namespace on the agent. Applications of autonomous
//!   agents stay in namespace `<agent>` (mapping is for managed agents only).
//! * Admitted namespaces: the principal's own plus `--allowed-namespaces` (peer:
//!   `defaultAppFilterChain`); with no `--allowed-namespaces`, every namespace (this project's
//!   decision without mapping, kept). Applications without a destination name, or naming
//!   `in-cluster`, go to no agent.
//! * An agent whose Argo CD lives in another namespace than the principal's puts the principal's
//!   namespace's Applications into its own namespace and marks them with
//!   [`NAMESPACE_REMAPPED`]; what it reports back with the mark in its own namespace belongs to
//!   the principal's namespace.
//! * Per-agent keys (views, send queue) are `<namespace>/<name>`.
//!
//! Pure functions here; the index of routes (hub app → agent) lives in [`Routes`].

use std::collections::HashMap;

use serde_json::Value;

use argocd_pull_agent_core::objects as o;

pub use argocd_pull_agent_core::objects::NAMESPACE_REMAPPED;

/// The destination name of an Argo CD in-cluster destination: never an agent.
const IN_CLUSTER: &str = "in-cluster";

/// The agent a hub Application goes to under destination-based mapping: its
/// `spec.destination.name`, none when empty or `in-cluster`.
pub fn target_agent(hub: &Value) -> Option<&str> {
    hub["spec"]["destination"]["name"]
        .as_str()
        .filter(|n| !n.is_empty() && *n != IN_CLUSTER)
}

/// Whether a hub namespace is the principal's (peer: `defaultAppFilterChain` admits the
/// principal's namespace and `--allowed-namespaces`; none given admits all, as without mapping).
pub fn admitted(ns: &str, principal_ns: &str, allowed: &[String]) -> bool {
    if allowed.is_empty() || ns == principal_ns {
        return true;
    }
    let l: Vec<&str> = allowed.iter().map(String::as_str).collect();
    argocd_pull_agent_core::project_match::in_list(&l, ns)
}

/// `<namespace>/<name>`: a hub Application's per-agent key.
pub fn key(ns: &str, name: &str) -> String {
    format!("{ns}/{name}")
}

/// The hub namespace of an Application an agent reports (principal/event.go L240): the
/// namespace it gives, except a remapped one in the agent's own namespace, which is the
/// principal's.
pub fn hub_namespace<'a>(
    reported: &'a Value,
    agent_ns: Option<&str>,
    principal_ns: &'a str,
) -> &'a str {
    let ns = o::namespace(reported);
    if o::annotation(reported, NAMESPACE_REMAPPED).is_some() && Some(ns) == agent_ns {
        principal_ns
    } else {
        ns
    }
}

/// A namespace named in a resync or error payload (no annotation travels there): the agent's
/// own namespace stands for the principal's when they differ and the hub has nothing there
/// (peer: resync `newRequestUpdateFromObject` sends the principal's namespace itself; ErrorData
/// carries the agent's).
pub fn hub_namespace_candidates<'a>(
    ns: &'a str,
    agent_ns: Option<&str>,
    principal_ns: &'a str,
) -> Vec<&'a str> {
    if Some(ns) == agent_ns && ns != principal_ns {
        vec![ns, principal_ns]
    } else {
        vec![ns]
    }
}

/// The Application (`(namespace, name)`) an agent-served Redis key of Argo CD's names:
/// `app|{managed-resources,resources-tree}|[<ns>_]<app>|<version>`, no `<ns>_` meaning the
/// principal's namespace; `None` for the keys the hub Redis keeps (peer: redisproxy.go
/// `extractAgentNameFromRedisCommandKey`).
pub fn redis_app_of_key<'a>(
    key: &'a str,
    principal_ns: &'a str,
) -> Result<Option<(&'a str, &'a str)>, String> {
    Ok(argocd_pull_agent_core::redis_wire::app_field_of_key(key)?
        .map(|app| app.split_once('_').unwrap_or((principal_ns, app))))
}

/// Which agent each hub Application (`<ns>/<name>`) was routed to, kept by the hub watcher: a
/// changed destination deletes the app from the agent it left (peer: `handleAppAgentChange`),
/// and the resync answers come from here.
#[derive(Default)]
pub struct Routes {
    by_app: HashMap<String, String>,
}

impl Routes {
    /// Records `app → agent` (`None`: routed nowhere); returns the agent it was routed to
    /// before when that differs.
    pub fn set(&mut self, app: &str, agent: Option<&str>) -> Option<String> {
        let old = match agent {
            Some(a) => self.by_app.insert(app.to_string(), a.to_string()),
            None => self.by_app.remove(app),
        };
        old.filter(|o| Some(o.as_str()) != agent)
    }

    pub fn get(&self, app: &str) -> Option<&str> {
        self.by_app.get(app).map(String::as_str)
    }

    /// The hub Applications (`(ns, name)`) routed to `agent`.
    pub fn of_agent(&self, agent: &str) -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = self
            .by_app
            .iter()
            .filter(|(_, a)| a.as_str() == agent)
            .filter_map(|(k, _)| o::split_ns_name(k).map(|(n, m)| (n.to_string(), m.to_string())))
            .collect();
        v.sort();
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn app(ns: &str, dst: Value) -> Value {
        json!({"metadata": {"name": "guestbook", "namespace": ns}, "spec": {"destination": dst}})
    }

    #[test]
    fn the_destination_name_picks_the_agent_and_in_cluster_picks_none() {
        assert_eq!(
            target_agent(&app(
                "team-a",
                json!({"name": "agent-x", "namespace": "gb"})
            )),
            Some("agent-x")
        );
        assert_eq!(
            target_agent(&app(
                "agent-x",
                json!({"server": "https://kubernetes.default.svc"})
            )),
            None,
            "the namespace does not route under mapping"
        );
        assert_eq!(target_agent(&app("a", json!({"name": ""}))), None);
        assert_eq!(target_agent(&app("a", json!({"name": "in-cluster"}))), None);
        assert_eq!(target_agent(&json!({"metadata": {"name": "x"}})), None);
    }

    #[test]
    fn the_principal_namespace_is_always_admitted_and_the_list_takes_globs() {
        let allowed = vec!["team-*".to_string()];
        assert!(admitted("argocd", "argocd", &allowed));
        assert!(admitted("team-a", "argocd", &allowed));
        assert!(!admitted("other", "argocd", &allowed));
        assert!(admitted("other", "argocd", &[]), "no list: every namespace");
    }

    #[test]
    fn a_remapped_report_in_the_agent_namespace_belongs_to_the_principal_namespace() {
        let mut r = app("agent-ns", json!({}));
        assert_eq!(hub_namespace(&r, Some("agent-ns"), "argocd"), "agent-ns");
        o::set_annotation(&mut r, NAMESPACE_REMAPPED, "true");
        assert_eq!(hub_namespace(&r, Some("agent-ns"), "argocd"), "argocd");
        assert_eq!(
            hub_namespace(&r, Some("elsewhere"), "argocd"),
            "agent-ns",
            "the mark only counts in the agent's own namespace"
        );
        let t = app("team-a", json!({}));
        assert_eq!(hub_namespace(&t, Some("agent-ns"), "argocd"), "team-a");
    }

    #[test]
    fn resync_namespaces_try_the_principal_namespace_for_the_agent_namespace() {
        assert_eq!(
            hub_namespace_candidates("agent-ns", Some("agent-ns"), "argocd"),
            vec!["agent-ns", "argocd"]
        );
        assert_eq!(
            hub_namespace_candidates("team-a", Some("agent-ns"), "argocd"),
            vec!["team-a"]
        );
        assert_eq!(
            hub_namespace_candidates("argocd", Some("argocd"), "argocd"),
            vec!["argocd"]
        );
    }

    #[test]
    fn redis_keys_name_the_app_and_a_bare_name_is_in_the_principal_namespace() {
        assert_eq!(
            redis_app_of_key("app|managed-resources|team-a_gb|1.8.3", "argocd"),
            Ok(Some(("team-a", "gb")))
        );
        assert_eq!(
            redis_app_of_key("app|resources-tree|gb|1.8.3.gz", "argocd"),
            Ok(Some(("argocd", "gb")))
        );
        assert_eq!(redis_app_of_key("git-refs|x", "argocd"), Ok(None));
        assert!(redis_app_of_key("app|resources-tree|gb", "argocd").is_err());
    }

    #[test]
    fn routes_report_the_agent_an_app_left() {
        let mut r = Routes::default();
        assert_eq!(r.set("team-a/gb", Some("agent-x")), None);
        assert_eq!(r.set("team-a/gb", Some("agent-x")), None, "unchanged");
        assert_eq!(r.set("team-b/gb", Some("agent-x")), None);
        assert_eq!(
            r.of_agent("agent-x"),
            vec![
                ("team-a".to_string(), "gb".to_string()),
                ("team-b".to_string(), "gb".to_string())
            ]
        );
        assert_eq!(r.set("team-a/gb", Some("agent-y")), Some("agent-x".into()));
        assert_eq!(r.get("team-a/gb"), Some("agent-y"));
        assert_eq!(r.set("team-a/gb", None), Some("agent-y".into()));
        assert_eq!(r.get("team-a/gb"), None);
        assert_eq!(r.set("team-a/gb", None), None);
    }
}
