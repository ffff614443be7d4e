//! An agent's state as the principal publishes it on the hub, on the agent's Argo CD cluster
//! secret `cluster-<agent>` (annotations in our domain, `argocd-pull.open-cluster-management.io/…`;
//! the peer has none): connection state and since when, mode, the agent's version, its cluster's
//! Kubernetes version, and a coarse count of the events queued for it. `argocd-pull ctl agent
//! list` reads them back, so what it shows comes from the hub and holds with several principal
//! replicas. The principal writes only what changed (a merge patch of the annotations that
//! differ): an agent that stays connected costs no write.
//!
//! Also Argo CD's own convention: a cluster secret labelled
//! `argocd.argoproj.io/auto-label-cluster-info=true` gets the Kubernetes version as label
//! `argocd.argoproj.io/kubernetes-version` (Argo CD's controller does this for the clusters it
//! connects to; it does not connect to an agent's).
//!
//! Pure: the model, its annotations both ways, version parsing and the patch.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use serde_json::{Map, Value, json};

use crate::Mode;

/// The prefix of every annotation we write on a cluster secret.
pub const PREFIX: &str = "argocd-pull.open-cluster-management.io/";
/// `Successful` or `Failed` (Argo CD's `ConnectionStatus` values).
pub const CONNECTION_STATE: &str = "argocd-pull.open-cluster-management.io/connection-state";
/// RFC 3339: when the state last changed (connected since / last seen).
pub const CONNECTION_SINCE: &str = "argocd-pull.open-cluster-management.io/connection-since";
/// Argo CD's connection message, with the reason when `Failed`.
pub const CONNECTION_MESSAGE: &str = "argocd-pull.open-cluster-management.io/connection-message";
/// `managed` or `autonomous`.
pub const AGENT_MODE: &str = "argocd-pull.open-cluster-management.io/agent-mode";
/// Which hub Applications are the agent's: `namespace` (its namespace on the hub) or
/// `destination` (`--destination-based-mapping`: `spec.destination.name` names it).
pub const APPLICATION_MAPPING: &str = "argocd-pull.open-cluster-management.io/application-mapping";
/// The agent's own version, or `unknown`.
pub const AGENT_VERSION: &str = "argocd-pull.open-cluster-management.io/agent-version";
/// The managed cluster's Kubernetes version (Argo CD's `serverVersion` form), or `unknown`.
pub const KUBERNETES_VERSION: &str = "argocd-pull.open-cluster-management.io/kubernetes-version";
/// Why a version is `unknown` (absent when both are known).
pub const VERSION_MESSAGE: &str = "argocd-pull.open-cluster-management.io/version-message";
/// Events queued for the agent on the principal, as a range (`0`, `1-9`, `10-99`, … `10000+`),
/// updated once a new range held for a whole sampling period.
pub const EVENTS_QUEUED: &str = "argocd-pull.open-cluster-management.io/events-queued";

/// Argo CD's opt-in label for cluster-info labels (`common.LabelKeyAutoLabelClusterInfo`).
pub const ARGOCD_AUTO_LABEL: &str = "argocd.argoproj.io/auto-label-cluster-info";
/// Argo CD's Kubernetes version label (`common.LabelKeyClusterKubernetesVersion`).
pub const ARGOCD_KUBERNETES_VERSION: &str = "argocd.argoproj.io/kubernetes-version";

/// gRPC response metadata of our principal's `Authenticate` / `RefreshToken`: the extensions it
/// understands (comma-separated). Our agent uses an extension only with a principal that names
/// it, so towards a peer principal it sends the peer's exact payloads.
pub const FEATURES_HEADER: &str = "argocd-pull-features";
/// `agentVersion` / `serverVersion` in `clusterCacheInfoUpdate` (and the info sent on connect).
pub const FEATURE_AGENT_INFO: &str = "agent-info";
/// `includeSyncedResourceList` in `request-resource-resync`.
pub const FEATURE_RESYNC_SYNCED_LIST: &str = "resync-synced-list";

/// What `unknown` versions are written as.
pub const UNKNOWN: &str = "unknown";

/// Longest version string accepted from an agent (a longer one is not a version).
const MAX_VERSION_LEN: usize = 64;

/// A version an agent reported: known, or unknown with the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reported {
    Known(String),
    Unknown(String),
}

impl Reported {
    pub fn known(&self) -> Option<&str> {
        match self {
            Reported::Known(v) => Some(v),
            Reported::Unknown(_) => None,
        }
    }

    /// The annotation value: the version or `unknown`.
    pub fn value(&self) -> &str {
        self.known().unwrap_or(UNKNOWN)
    }
}

impl Default for Reported {
    fn default() -> Self {
        Reported::Unknown("not reported by the agent yet".into())
    }
}

/// A string from an agent, safe to quote in a message (bounded, control characters escaped).
fn quoted(s: &str) -> String {
    let mut t: String = s.chars().take(MAX_VERSION_LEN).collect();
    if s.chars().count() > MAX_VERSION_LEN {
        t.push('…');
    }
    format!("{t:?}")
}

/// The agent's version as it reported it: a semantic version (`1.2.3`, `v0.5.0`,
/// `99.9.9-unreleased`, `0.1.0+abc`), else unknown with the reason.
pub fn agent_version(reported: &str) -> Reported {
    static RE: LazyLock<regex::Regex> = LazyLock::new(|| {
        regex::Regex::new(
            r"^v?(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$",
        )
        .expect("valid regex")
    });
    let re = &*RE;
    if reported.is_empty() {
        return Reported::Unknown("the agent reported no version".into());
    }
    if reported.len() > MAX_VERSION_LEN || !re.is_match(reported) {
        return Reported::Unknown(format!(
            "the agent reported version {}, which is not a semantic version (MAJOR.MINOR.PATCH)",
            quoted(reported)
        ));
    }
    Reported::Known(reported.to_string())
}

/// A cluster's Kubernetes version from its API server's `gitVersion`, in the form Argo CD ≥ 3.4
/// stores as `serverVersion` (gitops-engine `GetServerVersion`: k8s `version.ParseGeneric`, then
/// `v` + its numeric components, so `v1.24.17+k3s1` → `v1.24.17`); else unknown with the reason.
pub fn kubernetes_version(git_version: &str) -> Reported {
    // ParseGeneric: `^\s*v?([0-9]+(?:\.[0-9]+)*)(.*)*$`, at least MAJOR.MINOR, no leading zero in
    // MAJOR
    static RE: LazyLock<regex::Regex> =
        LazyLock::new(|| regex::Regex::new(r"^\s*v?([0-9]+(?:\.[0-9]+)*)").expect("valid regex"));
    let re = &*RE;
    let bad = || {
        Reported::Unknown(format!(
            "the agent's API server reported Kubernetes version {}, which is not a version",
            quoted(git_version)
        ))
    };
    if git_version.len() > MAX_VERSION_LEN {
        return bad();
    }
    let Some(numbers) = re.captures(git_version).and_then(|c| c.get(1)) else {
        return bad();
    };
    let parts: Vec<&str> = numbers.as_str().split('.').collect();
    if parts.len() < 2 || (parts[0].starts_with('0') && parts[0] != "0") {
        return bad();
    }
    let mut out = Vec::with_capacity(parts.len());
    for p in parts {
        match p.parse::<u64>() {
            Ok(n) => out.push(n.to_string()),
            Err(_) => return bad(),
        }
    }
    Reported::Known(format!("v{}", out.join(".")))
}

/// The range `n` queued events fall in.
pub fn queue_range(n: usize) -> &'static str {
    match n {
        0 => "0",
        1..=9 => "1-9",
        10..=99 => "10-99",
        100..=999 => "100-999",
        1000..=9999 => "1000-9999",
        _ => "10000+",
    }
}

/// An agent's connection as shown in Argo CD and on the hub.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Connection {
    Successful,
    Failed,
}

impl Connection {
    pub fn as_str(self) -> &'static str {
        match self {
            Connection::Successful => "Successful",
            Connection::Failed => "Failed",
        }
    }

    pub fn parse(s: &str) -> Option<Connection> {
        match s {
            "Successful" => Some(Connection::Successful),
            "Failed" => Some(Connection::Failed),
            _ => None,
        }
    }
}

/// Which hub Applications belong to an agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppMapping {
    /// The Applications in the hub namespace named after the agent.
    Namespace,
    /// The Applications whose `spec.destination.name` is the agent (`--destination-based-mapping`).
    Destination,
}

impl AppMapping {
    pub fn as_str(self) -> &'static str {
        match self {
            AppMapping::Namespace => "namespace",
            AppMapping::Destination => "destination",
        }
    }

    pub fn parse(s: &str) -> Option<AppMapping> {
        match s {
            "namespace" => Some(AppMapping::Namespace),
            "destination" => Some(AppMapping::Destination),
            _ => None,
        }
    }
}

/// Everything published about one agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentStatus {
    pub connection: Connection,
    /// When `connection` last changed.
    pub since: jiff::Timestamp,
    /// Argo CD's connection message (with the reason when `Failed`).
    pub message: String,
    pub mode: Option<Mode>,
    pub mapping: Option<AppMapping>,
    pub agent_version: Reported,
    pub kubernetes_version: Reported,
    /// [`queue_range`] of the events queued for the agent.
    pub events_queued: &'static str,
}

/// RFC 3339 with seconds, as Kubernetes writes times.
pub fn rfc3339(t: jiff::Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

impl AgentStatus {
    /// The annotations (our prefix only).
    pub fn annotations(&self) -> BTreeMap<String, String> {
        let mut m = BTreeMap::new();
        let mut put = |k: &str, v: &str| {
            m.insert(k.to_string(), v.to_string());
        };
        put(CONNECTION_STATE, self.connection.as_str());
        put(CONNECTION_SINCE, &rfc3339(self.since));
        put(CONNECTION_MESSAGE, &self.message);
        if let Some(mode) = self.mode {
            put(AGENT_MODE, mode.as_str());
        }
        if let Some(mp) = self.mapping {
            put(APPLICATION_MAPPING, mp.as_str());
        }
        put(AGENT_VERSION, self.agent_version.value());
        put(KUBERNETES_VERSION, self.kubernetes_version.value());
        let reasons: Vec<String> = [
            ("agent version", &self.agent_version),
            ("Kubernetes version", &self.kubernetes_version),
        ]
        .iter()
        .filter_map(|(what, r)| match r {
            Reported::Unknown(why) => Some(format!("{what} unknown: {why}")),
            Reported::Known(_) => None,
        })
        .collect();
        if !reasons.is_empty() {
            put(VERSION_MESSAGE, &reasons.join("; "));
        }
        put(EVENTS_QUEUED, self.events_queued);
        m
    }

    /// Reads what a principal published (`None`: nothing, or no readable connection state).
    pub fn from_annotations(a: &BTreeMap<String, String>) -> Option<AgentStatus> {
        let connection = Connection::parse(a.get(CONNECTION_STATE)?)?;
        let since = a.get(CONNECTION_SINCE)?.parse().ok()?;
        let why = |what: &str| {
            a.get(VERSION_MESSAGE)
                .and_then(|m| {
                    m.split("; ")
                        .find_map(|p| p.strip_prefix(&format!("{what} unknown: ")))
                })
                .unwrap_or("not published")
                .to_string()
        };
        let version = |k: &str, what: &str| match a.get(k).map(String::as_str) {
            Some(v) if v != UNKNOWN && !v.is_empty() => Reported::Known(v.to_string()),
            _ => Reported::Unknown(why(what)),
        };
        Some(AgentStatus {
            connection,
            since,
            message: a.get(CONNECTION_MESSAGE).cloned().unwrap_or_default(),
            mode: a.get(AGENT_MODE).and_then(|m| Mode::parse(m)),
            mapping: a
                .get(APPLICATION_MAPPING)
                .and_then(|m| AppMapping::parse(m)),
            agent_version: version(AGENT_VERSION, "agent version"),
            kubernetes_version: version(KUBERNETES_VERSION, "Kubernetes version"),
            events_queued: a.get(EVENTS_QUEUED).map(|v| range_of(v)).unwrap_or("0"),
        })
    }
}

/// The static range string equal to `v` (an unknown value reads as `0`).
fn range_of(v: &str) -> &'static str {
    ["0", "1-9", "10-99", "100-999", "1000-9999", "10000+"]
        .into_iter()
        .find(|r| *r == v)
        .unwrap_or("0")
}

/// What a cluster secret carries now (the parts we write or read).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SecretState {
    /// The secret's name (`cluster-<agent>` as `agent create` writes it).
    pub name: String,
    /// Its annotations under [`PREFIX`].
    pub annotations: BTreeMap<String, String>,
    /// Argo CD's [`ARGOCD_AUTO_LABEL`] is `true`.
    pub auto_label: bool,
    /// Argo CD's [`ARGOCD_KUBERNETES_VERSION`] label.
    pub kubernetes_label: Option<String>,
}

impl SecretState {
    /// From a secret's labels and annotations.
    pub fn from_meta(
        name: &str,
        labels: Option<&BTreeMap<String, String>>,
        annotations: Option<&BTreeMap<String, String>>,
    ) -> SecretState {
        SecretState {
            name: name.to_string(),
            annotations: annotations
                .map(|a| {
                    a.iter()
                        .filter(|(k, _)| k.starts_with(PREFIX))
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect()
                })
                .unwrap_or_default(),
            auto_label: labels
                .and_then(|l| l.get(ARGOCD_AUTO_LABEL))
                .is_some_and(|v| v == "true"),
            kubernetes_label: labels.and_then(|l| l.get(ARGOCD_KUBERNETES_VERSION).cloned()),
        }
    }

    /// The JSON merge patch that makes this secret publish `status` (`None`: nothing to write).
    /// Our annotations that `status` no longer has are removed; nothing else is touched.
    pub fn patch_for(&self, status: &AgentStatus) -> Option<Value> {
        let want = status.annotations();
        let mut ann = Map::new();
        for (k, v) in &want {
            if self.annotations.get(k) != Some(v) {
                ann.insert(k.clone(), json!(v));
            }
        }
        for k in self.annotations.keys() {
            if !want.contains_key(k) {
                ann.insert(k.clone(), Value::Null);
            }
        }
        let mut labels = Map::new();
        if self.auto_label
            && let Some(v) = status.kubernetes_version.known()
            && self.kubernetes_label.as_deref() != Some(v)
        {
            labels.insert(ARGOCD_KUBERNETES_VERSION.into(), json!(v));
        }
        if ann.is_empty() && labels.is_empty() {
            return None;
        }
        let mut meta = Map::new();
        if !ann.is_empty() {
            meta.insert("annotations".into(), Value::Object(ann));
        }
        if !labels.is_empty() {
            meta.insert("labels".into(), Value::Object(labels));
        }
        Some(json!({ "metadata": meta }))
    }

    /// This state after `patch` was applied.
    pub fn applied(&self, status: &AgentStatus) -> SecretState {
        let mut s = self.clone();
        s.annotations = status.annotations();
        if s.auto_label
            && let Some(v) = status.kubernetes_version.known()
        {
            s.kubernetes_label = Some(v.to_string());
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status() -> AgentStatus {
        AgentStatus {
            connection: Connection::Successful,
            since: "2026-11-25T10:00:00Z".parse().unwrap(),
            message: "Agent: 'c1' is connected with principal".into(),
            mode: Some(Mode::Managed),
            mapping: Some(AppMapping::Namespace),
            agent_version: Reported::Known("0.1.0".into()),
            kubernetes_version: Reported::Known("v1.24.17".into()),
            events_queued: "0",
        }
    }

    #[test]
    fn kubernetes_versions_take_argocds_form_and_bad_ones_are_unknown_with_the_reason() {
        let k = |s: &str| kubernetes_version(s);
        assert_eq!(k("v1.24.17+k3s1"), Reported::Known("v1.24.17".into()));
        assert_eq!(k("v1.30.2-eks-1552ad0"), Reported::Known("v1.30.2".into()));
        assert_eq!(
            k("v1.37.0-argocd-pull-hub"),
            Reported::Known("v1.37.0".into())
        );
        assert_eq!(k("1.29"), Reported::Known("v1.29".into()));
        for bad in ["", "banana", "v1", "v01.2.3", "vX.Y", &"9".repeat(100)] {
            match k(bad) {
                Reported::Unknown(why) => assert!(why.contains("not a version"), "{bad}: {why}"),
                other => panic!("{bad:?} accepted as {other:?}"),
            }
        }
    }

    #[test]
    fn agent_versions_must_be_semantic_versions() {
        for ok in ["0.1.0", "v0.5.0", "99.9.9-unreleased", "1.2.3+abc.1"] {
            assert_eq!(agent_version(ok), Reported::Known(ok.into()));
        }
        assert_eq!(
            agent_version(""),
            Reported::Unknown("the agent reported no version".into())
        );
        match agent_version("latest\n") {
            Reported::Unknown(why) => {
                assert!(why.contains("\"latest\\n\""), "quoted and escaped: {why}");
                assert!(why.contains("not a semantic version"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn queue_ranges_are_decades() {
        let r: Vec<&str> = [0, 1, 9, 10, 99, 100, 5000, 123_456]
            .into_iter()
            .map(queue_range)
            .collect();
        assert_eq!(
            r,
            [
                "0",
                "1-9",
                "1-9",
                "10-99",
                "10-99",
                "100-999",
                "1000-9999",
                "10000+"
            ]
        );
    }

    #[test]
    fn annotations_round_trip_and_name_the_unknown_versions_reason() {
        let mut s = status();
        assert_eq!(
            AgentStatus::from_annotations(&s.annotations()),
            Some(s.clone())
        );
        assert!(!s.annotations().contains_key(VERSION_MESSAGE));
        s.kubernetes_version = Reported::Unknown("GET /version failed: 503".into());
        s.connection = Connection::Failed;
        s.events_queued = "10-99";
        let a = s.annotations();
        assert_eq!(a[KUBERNETES_VERSION], "unknown");
        assert_eq!(
            a[VERSION_MESSAGE],
            "Kubernetes version unknown: GET /version failed: 503"
        );
        assert_eq!(AgentStatus::from_annotations(&a), Some(s));
        assert_eq!(AgentStatus::from_annotations(&BTreeMap::new()), None);
    }

    #[test]
    fn the_patch_carries_only_what_differs_and_nothing_when_equal() {
        let s = status();
        let empty = SecretState::default();
        let p = empty.patch_for(&s).unwrap();
        assert_eq!(
            p["metadata"]["annotations"].as_object().unwrap().len(),
            s.annotations().len()
        );
        assert!(
            p["metadata"].get("labels").is_none(),
            "no auto-label opt-in"
        );
        let published = empty.applied(&s);
        assert_eq!(published.patch_for(&s), None, "steady state: no write");
        let mut later = s.clone();
        later.events_queued = "1-9";
        assert_eq!(
            published.patch_for(&later),
            Some(json!({"metadata": {"annotations": {EVENTS_QUEUED: "1-9"}}}))
        );
        // a version that became known drops the reason
        let mut unknown = s.clone();
        unknown.agent_version = Reported::Unknown("x".into());
        let p = empty.applied(&unknown).patch_for(&s).unwrap();
        assert_eq!(p["metadata"]["annotations"][VERSION_MESSAGE], Value::Null);
        assert_eq!(p["metadata"]["annotations"][AGENT_VERSION], "0.1.0");
    }

    #[test]
    fn argocds_kubernetes_version_label_only_on_opt_in() {
        let labels = BTreeMap::from([(ARGOCD_AUTO_LABEL.to_string(), "true".to_string())]);
        let st = SecretState::from_meta("cluster-c1", Some(&labels), None);
        let p = st.patch_for(&status()).unwrap();
        assert_eq!(
            p["metadata"]["labels"],
            json!({ARGOCD_KUBERNETES_VERSION: "v1.24.17"})
        );
        assert_eq!(st.applied(&status()).patch_for(&status()), None);
    }
}
