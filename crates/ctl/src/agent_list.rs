//! `ctl agent list`: the peer's output (one agent name a line) by default; with `-o wide`, `-o
//! json` or `-o yaml` each agent's state read from the hub only — its cluster secret (the status
//! a principal published there, see [`argocd_pull_agent_core::agent_status`]) and the hub's Applications — so it
//! is the same whichever principal replica serves the agent: connected or not and since when,
//! mode, agent and Kubernetes versions, events queued for it, and its Applications by sync and
//! health status. Two list calls whatever the number of agents (the Applications paginated).

use std::collections::{BTreeMap, HashMap};

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{ApiResource, DynamicObject, ListParams};
use serde::Serialize;

use argocd_pull_agent_core::agent_status::{self, AgentStatus, AppMapping, Connection};

/// Applications listed per call.
const PAGE: u32 = 500;

/// How `agent list` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// The peer's: names only.
    Name,
    Wide,
    Json,
    Yaml,
}

impl Format {
    pub fn parse(s: &str) -> anyhow::Result<Format> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "" | "name" => Format::Name,
            "wide" => Format::Wide,
            "json" => Format::Json,
            "yaml" => Format::Yaml,
            other => bail!("Unknown output format: {other} (name, wide, json or yaml)"),
        })
    }
}

/// An agent's Applications on the hub by sync and health status.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AppCounts {
    pub total: u64,
    pub synced: u64,
    pub out_of_sync: u64,
    pub healthy: u64,
    pub degraded: u64,
    pub missing: u64,
}

impl AppCounts {
    fn add(&mut self, app: &serde_json::Value) {
        self.total += 1;
        match app["status"]["sync"]["status"].as_str() {
            Some("Synced") => self.synced += 1,
            Some("OutOfSync") => self.out_of_sync += 1,
            _ => {}
        }
        match app["status"]["health"]["status"].as_str() {
            Some("Healthy") => self.healthy += 1,
            Some("Degraded") => self.degraded += 1,
            Some("Missing") => self.missing += 1,
            _ => {}
        }
    }
}

/// One agent as `agent list -o json|yaml` prints it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentRow {
    pub name: String,
    /// `null`: no principal published this agent's state.
    pub connected: Option<bool>,
    /// `Successful`, `Failed` (Argo CD's values) or `Unknown`.
    pub connection_state: String,
    /// RFC 3339: connected since, or last seen.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    pub agent_version: String,
    pub kubernetes_version: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub version_message: String,
    /// A range (`0`, `1-9`, `10-99`, …) or `unknown`.
    pub events_queued: String,
    pub applications: AppCounts,
    /// The active/active principal replica serving the agent (the holder of its shard Lease,
    /// `none` while nobody holds it); absent when the principal does not run active/active.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replica: Option<String>,
}

/// The row of an agent from what its cluster secret shows.
pub fn row(name: &str, published: Option<&AgentStatus>, apps: AppCounts) -> AgentRow {
    let Some(p) = published else {
        return AgentRow {
            name: name.to_string(),
            connected: None,
            connection_state: "Unknown".into(),
            since: None,
            message: "no principal has published this agent's state: it has not connected since its cluster secret was created, or the principal runs with --publish-agent-status=false".into(),
            mode: None,
            agent_version: agent_status::UNKNOWN.into(),
            kubernetes_version: agent_status::UNKNOWN.into(),
            version_message: String::new(),
            events_queued: agent_status::UNKNOWN.into(),
            applications: apps,
            replica: None,
        };
    };
    let reasons: Vec<String> = [
        ("agent version", &p.agent_version),
        ("Kubernetes version", &p.kubernetes_version),
    ]
    .iter()
    .filter_map(|(what, r)| match r {
        agent_status::Reported::Unknown(why) => Some(format!("{what} unknown: {why}")),
        agent_status::Reported::Known(_) => None,
    })
    .collect();
    AgentRow {
        name: name.to_string(),
        connected: Some(p.connection == Connection::Successful),
        connection_state: p.connection.as_str().into(),
        since: Some(agent_status::rfc3339(p.since)),
        message: p.message.clone(),
        mode: p.mode.map(|m| m.as_str().to_string()),
        agent_version: p.agent_version.value().into(),
        kubernetes_version: p.kubernetes_version.value().into(),
        version_message: reasons.join("; "),
        events_queued: p.events_queued.into(),
        applications: apps,
        replica: None,
    }
}

/// Counts every agent's Applications: those in its hub namespace, or (`destination` mapping)
/// those whose `spec.destination.name` names it.
pub fn count_apps<'a>(
    agents: &[(String, Option<AppMapping>)],
    apps: impl IntoIterator<Item = &'a serde_json::Value>,
) -> HashMap<String, AppCounts> {
    let by_dest: HashMap<&str, ()> = agents
        .iter()
        .filter(|(_, m)| *m == Some(AppMapping::Destination))
        .map(|(n, _)| (n.as_str(), ()))
        .collect();
    let by_ns: HashMap<&str, ()> = agents
        .iter()
        .filter(|(_, m)| *m != Some(AppMapping::Destination))
        .map(|(n, _)| (n.as_str(), ()))
        .collect();
    let mut out: HashMap<String, AppCounts> = HashMap::new();
    for app in apps {
        let ns = app["metadata"]["namespace"].as_str().unwrap_or_default();
        let dest = app["spec"]["destination"]["name"]
            .as_str()
            .unwrap_or_default();
        if by_ns.contains_key(ns) {
            out.entry(ns.to_string()).or_default().add(app);
        } else if by_dest.contains_key(dest) {
            out.entry(dest.to_string()).or_default().add(app);
        }
    }
    out
}

/// `3s`, `4m12s`, `25m`, `5h3m`, `21h`, `6d` (as kubectl prints ages).
pub fn age(d: std::time::Duration) -> String {
    let s = d.as_secs();
    match s {
        0..120 => format!("{s}s"),
        120..600 => format!("{}m{}s", s / 60, s % 60),
        600..10_800 => format!("{}m", s / 60),
        10_800..28_800 => format!("{}h{}m", s / 3600, (s % 3600) / 60),
        28_800..172_800 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

/// The `-o wide` table (with a `REPLICA` column when the principal runs active/active).
pub fn table(rows: &[AgentRow], now: jiff::Timestamp) -> String {
    let replicas = rows.iter().any(|r| r.replica.is_some());
    let mut head = vec![
        "NAME",
        "MODE",
        "CONNECTED",
        "SINCE",
        "AGENT-VERSION",
        "KUBERNETES",
        "APPS",
        "SYNCED",
        "OUT-OF-SYNC",
        "HEALTHY",
        "DEGRADED",
        "MISSING",
        "QUEUED",
    ];
    if replicas {
        head.push("REPLICA");
    }
    let mut lines: Vec<Vec<String>> = vec![head.iter().map(|h| h.to_string()).collect()];
    for r in rows {
        let since = r
            .since
            .as_deref()
            .and_then(|s| s.parse::<jiff::Timestamp>().ok())
            .map(|t| {
                let secs = now.as_second().saturating_sub(t.as_second()).max(0);
                age(std::time::Duration::from_secs(secs as u64))
            })
            .unwrap_or_else(|| "-".into());
        let a = &r.applications;
        lines.push(vec![
            r.name.clone(),
            r.mode.clone().unwrap_or_else(|| "-".into()),
            match r.connected {
                Some(true) => "yes".into(),
                Some(false) => "no".into(),
                None => "unknown".into(),
            },
            since,
            r.agent_version.clone(),
            r.kubernetes_version.clone(),
            a.total.to_string(),
            a.synced.to_string(),
            a.out_of_sync.to_string(),
            a.healthy.to_string(),
            a.degraded.to_string(),
            a.missing.to_string(),
            r.events_queued.clone(),
        ]);
        if replicas {
            let l = lines.last_mut().expect("just pushed");
            l.push(r.replica.clone().unwrap_or_else(|| "-".into()));
        }
    }
    let widths: Vec<usize> = (0..head.len())
        .map(|i| lines.iter().map(|l| l[i].len()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for l in lines {
        let cells: Vec<String> = l
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<w$}", w = widths[i]))
            .collect();
        out.push_str(cells.join("   ").trim_end());
        out.push('\n');
    }
    out
}

fn application_resource() -> ApiResource {
    ApiResource {
        group: "argoproj.io".into(),
        version: "v1alpha1".into(),
        api_version: "argoproj.io/v1alpha1".into(),
        kind: "Application".into(),
        plural: "applications".into(),
    }
}

/// Every Application on the hub (all namespaces, paginated); none when the CRD is not installed.
async fn hub_applications(client: &kube::Client) -> anyhow::Result<Vec<serde_json::Value>> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &application_resource());
    let mut out = Vec::new();
    let mut lp = ListParams::default().limit(PAGE);
    loop {
        let page = match api.list(&lp).await {
            Ok(p) => p,
            Err(kube::Error::Api(e)) if e.code == 404 => return Ok(Vec::new()),
            Err(e) => return Err(e).context("Could not list the hub's Applications"),
        };
        out.extend(
            page.items
                .into_iter()
                .map(|o| serde_json::to_value(o).unwrap_or_default()),
        );
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(c) => lp = ListParams::default().limit(PAGE).continue_token(&c),
            None => return Ok(out),
        }
    }
}

/// The rows of the agents whose cluster secrets are `secrets` (in namespace `ns`), counting the
/// hub's Applications and, with active/active replicas, naming the one serving each.
pub async fn rows(
    client: &kube::Client,
    ns: &str,
    secrets: &[Secret],
) -> anyhow::Result<Vec<AgentRow>> {
    let agents: Vec<(String, Option<AgentStatus>)> = secrets
        .iter()
        .map(|s| {
            let name = s.metadata.name.as_deref().unwrap_or_default();
            let agent = s
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(argocd_pull_agent_core::cluster_secret::LABEL_AGENT_NAME))
                .filter(|a| !a.is_empty())
                .cloned()
                .unwrap_or_else(|| name.strip_prefix("cluster-").unwrap_or(name).to_string());
            let ann: BTreeMap<String, String> = s.metadata.annotations.clone().unwrap_or_default();
            (agent, AgentStatus::from_annotations(&ann))
        })
        .collect();
    let apps = hub_applications(client).await?;
    let mappings: Vec<(String, Option<AppMapping>)> = agents
        .iter()
        .map(|(n, p)| (n.clone(), p.as_ref().and_then(|p| p.mapping)))
        .collect();
    let mut counts = count_apps(&mappings, &apps);
    // a ctl user without access to the Leases still gets the rest
    let serving = super::serving::read(client, ns).await.unwrap_or_else(|e| {
        eprintln!("warning: {e:#}");
        None
    });
    let mut rows: Vec<AgentRow> = agents
        .iter()
        .map(|(n, p)| AgentRow {
            replica: serving.as_ref().map(|s| s.replica(n)),
            ..row(n, p.as_ref(), counts.remove(n).unwrap_or_default())
        })
        .collect();
    rows.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(rows)
}

/// Prints `rows` as `format` (not [`Format::Name`]).
pub fn render(rows: &[AgentRow], format: Format) -> anyhow::Result<String> {
    match format {
        Format::Wide => Ok(table(rows, jiff::Timestamp::now())),
        Format::Json => super::out::render(&rows, "json", &[]),
        Format::Yaml => super::out::render(&rows, "yaml", &[]),
        Format::Name => Ok(rows.iter().map(|r| format!("{}\n", r.name)).collect()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use argocd_pull_agent_core::Mode;
    use argocd_pull_agent_core::agent_status::Reported;
    use serde_json::json;

    fn published(c: Connection, mapping: AppMapping) -> AgentStatus {
        AgentStatus {
            connection: c,
            since: "2026-11-25T10:00:00Z".parse().unwrap(),
            message: "m".into(),
            mode: Some(Mode::Managed),
            mapping: Some(mapping),
            agent_version: Reported::Known("0.1.0".into()),
            kubernetes_version: Reported::Unknown("no answer".into()),
            events_queued: "10-99",
        }
    }

    #[test]
    fn applications_are_counted_by_the_agents_mapping() {
        let app = |ns: &str, dest: &str, sync: &str, health: &str| {
            json!({"metadata": {"namespace": ns, "name": "x"}, "spec": {"destination": {"name": dest}},
                   "status": {"sync": {"status": sync}, "health": {"status": health}}})
        };
        let apps = [
            app("a", "", "Synced", "Healthy"),
            app("a", "", "OutOfSync", "Degraded"),
            app("a", "", "OutOfSync", "Missing"),
            app("team", "b", "Synced", "Progressing"),
            app("team", "a", "Synced", "Healthy"),
        ];
        let agents = [
            ("a".to_string(), Some(AppMapping::Namespace)),
            ("b".to_string(), Some(AppMapping::Destination)),
        ];
        let c = count_apps(&agents, &apps);
        assert_eq!(
            c["a"],
            AppCounts {
                total: 3,
                synced: 1,
                out_of_sync: 2,
                healthy: 1,
                degraded: 1,
                missing: 1
            },
            "by namespace only: the one in `team` naming `a` is not a's"
        );
        assert_eq!(c["b"].total, 1);
        assert_eq!(c["b"].synced, 1);
    }

    #[test]
    fn rows_tell_unknown_from_failed() {
        let r = row("a", None, AppCounts::default());
        assert_eq!(r.connected, None);
        assert_eq!(r.connection_state, "Unknown");
        let p = published(Connection::Failed, AppMapping::Namespace);
        let r = row("a", Some(&p), AppCounts::default());
        assert_eq!(r.connected, Some(false));
        assert_eq!(r.kubernetes_version, "unknown");
        assert_eq!(r.version_message, "Kubernetes version unknown: no answer");
        assert_eq!(r.events_queued, "10-99");
        let t = table(&[r], "2026-11-25T10:05:00Z".parse().unwrap());
        let mut lines = t.lines();
        assert!(lines.next().unwrap().starts_with("NAME   MODE"));
        let l: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
        assert_eq!(
            l,
            [
                "a", "managed", "no", "5m0s", "0.1.0", "unknown", "0", "0", "0", "0", "0", "0",
                "10-99"
            ]
        );
    }

    #[test]
    fn ages_read_like_kubectl() {
        let s = std::time::Duration::from_secs;
        let v: Vec<String> = [3, 252, 1500, 18_180, 75_600, 518_400]
            .into_iter()
            .map(|x| age(s(x)))
            .collect();
        assert_eq!(v, ["3s", "4m12s", "25m", "5h3m", "21h", "6d"]);
    }

    #[test]
    fn formats() {
        assert_eq!(Format::parse("").unwrap(), Format::Name);
        assert_eq!(Format::parse("JSON").unwrap(), Format::Json);
        assert!(
            Format::parse("xml")
                .unwrap_err()
                .to_string()
                .contains("name, wide, json or yaml")
        );
    }
}
