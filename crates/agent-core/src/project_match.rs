//! Which AppProjects an agent receives, and in what form: argocd-agent's
//! `internal/manager/appproject` `DoesAgentMatchWithProject` and `AgentSpecificAppProject`, with
//! Argo CD's `util/glob` (`Match`, `MatchStringInList(…, REGEXP)`) underneath.
//!
//! An agent matches an AppProject when
//! 1. no destination `name` is a deny pattern (`!<glob>`) matching the agent,
//! 2. a destination matches: its `name` globs the agent, or (no name) its `server` is `*` or
//!    carries `?agentName=<glob>` matching the agent (the resource-proxy URL form), and
//! 3. with namespace-based mapping (the default), `spec.sourceNamespaces` also matches the agent
//!    (each entry a glob, or `/regex/` matched unanchored).
//!
//! The agent's copy keeps only the matching destinations, rewritten to the in-cluster server,
//! drops `sourceNamespaces` (namespace-based mapping) and, for managed agents, `roles`.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};

use globset::{GlobBuilder, GlobMatcher};
use serde_json::{Value, json};

use crate::Mode;
use crate::objects::IN_CLUSTER_SERVER;

/// Compiled patterns kept at most (Argo CD's `DefaultGlobCacheSize`).
const CACHE_SIZE: usize = 10_000;

type Cache<T> = LazyLock<Mutex<HashMap<String, Option<T>>>>;
static GLOBS: Cache<GlobMatcher> = LazyLock::new(Default::default);
static REGEXES: Cache<regex::Regex> = LazyLock::new(Default::default);

fn cached<T: Clone>(
    cache: &Cache<T>,
    pattern: &str,
    compile: impl FnOnce() -> Option<T>,
) -> Option<T> {
    let mut map = cache.lock().expect("poisoned");
    if let Some(hit) = map.get(pattern) {
        return hit.clone();
    }
    let compiled = compile();
    if compiled.is_none() {
        tracing::warn!(pattern, "failed to compile pattern; it matches nothing");
    }
    if map.len() >= CACHE_SIZE {
        map.clear();
    }
    map.insert(pattern.to_string(), compiled.clone());
    compiled
}

/// Argo CD's `glob.Match(pattern, text)` (gobwas/glob with no separators): `*` any run, `?` one
/// character, `[abc]`/`[!a-z]` classes, `{a,b}` alternatives, `\` escapes. A pattern that does not
/// compile matches nothing.
pub fn glob(pattern: &str, text: &str) -> bool {
    if !pattern.contains(['*', '?', '[', '{', '\\']) {
        return pattern == text;
    }
    cached(&GLOBS, pattern, || {
        GlobBuilder::new(pattern)
            .literal_separator(false)
            .backslash_escape(true)
            .empty_alternates(true)
            .build()
            .ok()
            .map(|g| g.compile_matcher())
    })
    .is_some_and(|m| m.is_match(text))
}

/// Argo CD's `glob.MatchStringInList(list, item, REGEXP)`: an entry wrapped in `/…/` is a
/// regular expression matched anywhere in `item`, every entry is also tried as a glob.
pub fn in_list(list: &[&str], item: &str) -> bool {
    list.iter().any(|entry| {
        let is_regex = entry.len() >= 2 && entry.starts_with('/') && entry.ends_with('/');
        (is_regex
            && cached(&REGEXES, entry, || {
                regex::Regex::new(&entry[1..entry.len() - 1]).ok()
            })
            .is_some_and(|r| r.is_match(item)))
            || glob(entry, item)
    })
}

/// The `agentName` query parameter of a destination server URL
/// (`https://<resource-proxy>:9090?agentName=<agent>`), as Go's `url.Parse(..).Query().Get`.
fn server_agent_name(server: &str) -> Option<String> {
    let query = server.split_once('?')?.1;
    let query = query.split_once('#').map_or(query, |(q, _)| q);
    form_urlencoded::parse(query.as_bytes())
        .find(|(k, _)| k == "agentName")
        .map(|(_, v)| v.into_owned())
        .filter(|v| !v.is_empty())
}

/// Whether one destination (`{name, server, namespace}`) selects the agent.
fn destination_selects(dst: &Value, agent: &str) -> bool {
    let name = dst["name"].as_str().unwrap_or_default();
    let server = dst["server"].as_str().unwrap_or_default();
    if !name.is_empty() {
        return glob(name, agent);
    }
    match server {
        "" => false,
        "*" => true,
        s => server_agent_name(s).is_some_and(|p| glob(&p, agent)),
    }
}

fn destinations(project: &Value) -> &[Value] {
    project["spec"]["destinations"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
}

/// `DoesAgentMatchWithProject`.
pub fn agent_matches(agent: &str, project: &Value, destination_mapping: bool) -> bool {
    let dsts = destinations(project);
    let denied = dsts.iter().any(|d| {
        d["name"]
            .as_str()
            .and_then(|n| n.strip_prefix('!'))
            .is_some_and(|p| glob(p, agent))
    });
    if denied || !dsts.iter().any(|d| destination_selects(d, agent)) {
        return false;
    }
    if destination_mapping {
        return true;
    }
    let sources: Vec<&str> = project["spec"]["sourceNamespaces"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    in_list(&sources, agent)
}

/// `AgentSpecificAppProject`: the agent's copy of a project it matches.
pub fn agent_specific(
    project: &Value,
    agent: &str,
    destination_mapping: bool,
    mode: Mode,
) -> Value {
    let mut out = project.clone();
    let kept: Vec<Value> = destinations(project)
        .iter()
        .filter(|d| destination_selects(d, agent))
        .map(|d| {
            let mut d = d.clone();
            d["name"] = json!("in-cluster");
            d["server"] = json!(IN_CLUSTER_SERVER);
            d
        })
        .collect();
    out["spec"]["destinations"] = Value::Array(kept);
    if let Some(spec) = out["spec"].as_object_mut() {
        if !destination_mapping {
            spec.remove("sourceNamespaces");
        }
        if mode != Mode::Autonomous {
            spec.remove("roles");
        }
    }
    out
}

/// Managed mode: the agent-specific form of a hub AppProject, or `None` when the project does not
/// select the agent (destinations, deny patterns and `sourceNamespaces`, as argocd-agent: see
/// this module). Metadata (uid, resourceVersion) is kept: it makes the event ids.
/// `mapped` (destination-based mapping): `sourceNamespaces` is neither required nor removed.
pub fn project_for_agent(p: &Value, agent: &str, mapped: bool) -> Option<Value> {
    if !agent_matches(agent, p, mapped) {
        return None;
    }
    let mut out = agent_specific(p, agent, mapped, crate::Mode::Managed);
    if let Some(m) = out.as_object_mut() {
        m.remove("status");
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn project(dsts: Value, sources: Value) -> Value {
        json!({"metadata": {"name": "p", "namespace": "argocd"},
            "spec": {"destinations": dsts, "sourceNamespaces": sources,
                     "roles": [{"name": "ci"}]}})
    }

    #[test]
    fn globs_as_gobwas() {
        assert!(glob("*", "cluster-a"));
        assert!(glob("cluster-*", "cluster-a"));
        assert!(glob("cluster-?", "cluster-a"));
        assert!(!glob("cluster-?", "cluster-ab"));
        assert!(glob("cluster-[ab]", "cluster-b"));
        assert!(!glob("cluster-[!ab]", "cluster-b"));
        assert!(glob("{east,west}-*", "west-1"));
        assert!(!glob("{east,west}-*", "north-1"));
        assert!(glob(r"a\*", "a*"));
        assert!(!glob(r"a\*", "ab"));
        assert!(glob("a/*", "a/b/c"), "no separators: * crosses /");
        assert!(
            !glob("cluster-[", "cluster-["),
            "a broken pattern matches nothing"
        );
        assert!(glob("exact", "exact"));
        assert!(!glob("exact", "exactly"));
    }

    #[test]
    fn source_namespaces_take_globs_and_slash_regexes() {
        assert!(in_list(&["other", "agent-*"], "agent-1"));
        assert!(in_list(&["/^agent-[0-9]+$/"], "agent-12"));
        assert!(in_list(&["/gent/"], "agent-12"), "a regex matches anywhere");
        assert!(!in_list(&["/^agent-[0-9]+$/"], "agent-x"));
        assert!(!in_list(&[], "agent-1"));
        assert!(!in_list(&["/(/"], "("), "a broken regex matches nothing");
    }

    #[test]
    fn a_project_needs_a_destination_and_a_source_namespace_for_the_agent() {
        let p = project(
            json!([{"name": "agent-*", "namespace": "guestbook"}]),
            json!(["agent-*"]),
        );
        assert!(agent_matches("agent-1", &p, false));
        assert!(!agent_matches("other", &p, false));
        let no_sources = project(json!([{"name": "agent-*"}]), json!([]));
        assert!(!agent_matches("agent-1", &no_sources, false));
        assert!(
            agent_matches("agent-1", &no_sources, true),
            "destination mapping ignores sourceNamespaces"
        );
    }

    #[test]
    fn a_deny_pattern_wins_over_any_match() {
        let p = project(json!([{"name": "*"}, {"name": "!agent-2"}]), json!(["*"]));
        assert!(agent_matches("agent-1", &p, false));
        assert!(!agent_matches("agent-2", &p, false));
    }

    #[test]
    fn server_only_destinations_match_by_star_or_agent_name_query() {
        let star = project(json!([{"server": "*", "namespace": "*"}]), json!(["*"]));
        assert!(agent_matches("a1", &star, false));
        let proxy = project(
            json!([{"server": "https://rp:9090?agentName=a%2A"}, {"server": "https://x?foo=a1"}]),
            json!(["*"]),
        );
        assert!(
            agent_matches("a1", &proxy, false),
            "agentName is URL-decoded and globbed"
        );
        assert!(!agent_matches("b1", &proxy, false));
        let plain = project(
            json!([{"server": "https://kubernetes.default.svc"}]),
            json!(["*"]),
        );
        assert!(!agent_matches("a1", &plain, false));
    }

    #[test]
    fn the_agent_copy_keeps_matching_destinations_in_cluster_and_drops_roles() {
        let p = project(
            json!([{"name": "agent-*", "namespace": "gb", "server": "https://c1"},
                   {"name": "other", "namespace": "o"},
                   {"server": "https://rp?agentName=agent-1", "namespace": "x"}]),
            json!(["agent-*"]),
        );
        let f = agent_specific(&p, "agent-1", false, Mode::Managed);
        assert_eq!(
            f["spec"]["destinations"],
            json!([{"name": "in-cluster", "namespace": "gb", "server": IN_CLUSTER_SERVER},
                   {"name": "in-cluster", "namespace": "x", "server": IN_CLUSTER_SERVER}])
        );
        assert!(f["spec"].get("sourceNamespaces").is_none());
        assert!(f["spec"].get("roles").is_none());
        let d = agent_specific(&p, "agent-1", true, Mode::Autonomous);
        assert_eq!(d["spec"]["sourceNamespaces"], json!(["agent-*"]));
        assert_eq!(d["spec"]["roles"], json!([{"name": "ci"}]));
    }
}
