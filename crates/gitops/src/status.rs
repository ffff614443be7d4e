//! GitOpsCluster status: conditions, `phase` and `message` (pure).

use argocd_pull_api::Condition;
use argocd_pull_api::gitops::{GitOpsCluster, GitOpsClusterStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// Condition types (the ACM names).
pub const READY: &str = "Ready";
pub const PLACEMENT_RESOLVED: &str = "PlacementResolved";
pub const ARGO_SERVER_VERIFIED: &str = "ArgoServerVerified";
pub const CLUSTERS_REGISTERED: &str = "ClustersRegistered";
pub const APPSET_RESOURCES_READY: &str = "ApplicationSetResourcesReady";
/// `True` when the spec uses fields this implementation accepts but does not implement.
pub const UNSUPPORTED_FIELDS: &str = "UnsupportedFields";

/// The longest `status.message` (ACM cuts the cluster list at 4096 characters).
pub const MAX_MESSAGE: usize = 4096;

/// One evaluated step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Check {
    pub ok: bool,
    pub reason: String,
    pub message: String,
}

impl Check {
    pub fn ok(reason: &str, message: impl Into<String>) -> Check {
        Check {
            ok: true,
            reason: reason.into(),
            message: message.into(),
        }
    }
    pub fn failed(reason: &str, message: impl Into<String>) -> Check {
        Check {
            ok: false,
            reason: reason.into(),
            message: message.into(),
        }
    }
}

/// What a reconcile found, step by step; a step after a failed one is not evaluated (`None`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    pub argo_namespace: String,
    pub argo_server: Option<Check>,
    pub appset_resources: Option<Check>,
    pub placement: Option<Check>,
    pub clusters: Option<Check>,
    /// Names of the clusters whose Secret is in place.
    pub registered: Vec<String>,
    /// Spec fields accepted but not implemented (`spec.gitopsAddon`, …).
    pub unsupported: Vec<String>,
}

/// The spec fields a GitOpsCluster sets that this implementation does not act on.
pub fn unsupported_fields(gc: &GitOpsCluster) -> Vec<String> {
    let mut out = Vec::new();
    let spec = &gc.spec;
    if spec.create_policy_template == Some(true) {
        out.push("spec.createPolicyTemplate".to_string());
    }
    if spec.gitops_addon.as_ref().is_some_and(|v| !v.is_null()) {
        out.push("spec.gitopsAddon".to_string());
    }
    if spec
        .argo_server
        .cluster
        .as_deref()
        .is_some_and(|c| !c.is_empty())
    {
        out.push("spec.argoServer.cluster".to_string());
    }
    out
}

/// Cuts `s` to at most `max` characters (on a character boundary).
pub fn truncate_chars(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => s[..i].to_string(),
        None => s.to_string(),
    }
}

/// `Added managed clusters [a b] to gitops namespace <ns>`, the cluster list cut at 4096 chars.
pub fn success_message(clusters: &[String], argo_namespace: &str) -> String {
    let list = truncate_chars(&clusters.join(" "), MAX_MESSAGE);
    format!("Added managed clusters [{list}] to gitops namespace {argo_namespace}")
}

fn condition(type_: &str, check: Option<&Check>, generation: Option<i64>) -> Condition {
    let (status, reason, message) = match check {
        Some(c) if c.ok => ("True", c.reason.clone(), c.message.clone()),
        Some(c) => ("False", c.reason.clone(), c.message.clone()),
        None => (
            "Unknown",
            "NotEvaluated".to_string(),
            "not evaluated because an earlier step failed".to_string(),
        ),
    };
    Condition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason,
        message: truncate_chars(&message, 32768),
        observed_generation: generation,
        last_transition_time: Time(jiff::Timestamp::UNIX_EPOCH),
    }
}

/// The status for an outcome. Times are taken from `previous` when nothing about a condition
/// (or the whole status) changed, so that recomputing an unchanged state gives an equal value
/// and nothing is written.
pub fn compute(
    outcome: &Outcome,
    previous: Option<&GitOpsClusterStatus>,
    generation: Option<i64>,
    now: jiff::Timestamp,
) -> GitOpsClusterStatus {
    let critical = [
        (ARGO_SERVER_VERIFIED, outcome.argo_server.as_ref()),
        (APPSET_RESOURCES_READY, outcome.appset_resources.as_ref()),
        (PLACEMENT_RESOLVED, outcome.placement.as_ref()),
        (CLUSTERS_REGISTERED, outcome.clusters.as_ref()),
    ];
    let first_failure = critical
        .iter()
        .find(|(_, c)| c.is_none_or(|c| !c.ok))
        .map(|(t, c)| (*t, c.cloned()));
    let ready = match &first_failure {
        None => Check::ok("Success", "all conditions are met"),
        Some((t, Some(c))) => Check::failed(&c.reason, format!("{t}: {}", c.message)),
        Some((t, None)) => Check::failed("NotEvaluated", format!("{t} was not evaluated")),
    };
    let mut conditions: Vec<Condition> = critical
        .iter()
        .map(|(t, c)| condition(t, *c, generation))
        .collect();
    conditions.push(condition(READY, Some(&ready), generation));
    let unsupported = if outcome.unsupported.is_empty() {
        Check::failed(
            "AllFieldsSupported",
            "every field set in the spec is implemented",
        )
    } else {
        Check::ok(
            "FieldsNotImplemented",
            format!(
                "accepted but not implemented (no effect): {}",
                outcome.unsupported.join(", ")
            ),
        )
    };
    conditions.push(condition(
        UNSUPPORTED_FIELDS,
        Some(&unsupported),
        generation,
    ));
    conditions.sort_by(|a, b| a.type_.cmp(&b.type_));

    // Keep transition times of conditions whose status did not change.
    let prev_conditions = previous.map(|p| p.conditions.as_slice()).unwrap_or(&[]);
    for c in &mut conditions {
        c.last_transition_time = match prev_conditions.iter().find(|p| p.type_ == c.type_) {
            Some(p) if p.status == c.status => p.last_transition_time.clone(),
            _ => Time(now),
        };
    }
    let (phase, message) = match &first_failure {
        None => (
            "successful",
            success_message(&outcome.registered, &outcome.argo_namespace),
        ),
        Some(_) => ("failed", truncate_chars(&ready.message, MAX_MESSAGE)),
    };
    let mut status = GitOpsClusterStatus {
        conditions,
        last_update_time: previous.and_then(|p| p.last_update_time.clone()),
        message: Some(message),
        phase: Some(phase.to_string()),
    };
    if previous != Some(&status) {
        status.last_update_time = Some(Time(now));
    }
    status
}

/// Whether `new` differs from `previous` in anything but `lastUpdateTime`.
pub fn changed(previous: Option<&GitOpsClusterStatus>, new: &GitOpsClusterStatus) -> bool {
    match previous {
        None => true,
        Some(p) => {
            let mut a = p.clone();
            a.last_update_time = None;
            let mut b = new.clone();
            b.last_update_time = None;
            a != b
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_ok(clusters: &[&str]) -> Outcome {
        Outcome {
            argo_namespace: "argocd".into(),
            argo_server: Some(Check::ok("Success", "found")),
            appset_resources: Some(Check::ok("Success", "created")),
            placement: Some(Check::ok("Success", "resolved")),
            clusters: Some(Check::ok("Success", "registered")),
            registered: clusters.iter().map(|s| s.to_string()).collect(),
            unsupported: vec![],
        }
    }

    fn cond<'a>(s: &'a GitOpsClusterStatus, t: &str) -> &'a Condition {
        s.conditions.iter().find(|c| c.type_ == t).unwrap()
    }

    #[test]
    fn success_status() {
        let now = jiff::Timestamp::from_second(1_000).unwrap();
        let s = compute(&all_ok(&["c1", "c2"]), None, Some(3), now);
        assert_eq!(s.phase.as_deref(), Some("successful"));
        assert_eq!(
            s.message.as_deref(),
            Some("Added managed clusters [c1 c2] to gitops namespace argocd")
        );
        assert_eq!(cond(&s, READY).status, "True");
        assert_eq!(cond(&s, UNSUPPORTED_FIELDS).status, "False");
        assert_eq!(cond(&s, READY).observed_generation, Some(3));
        assert_eq!(s.last_update_time, Some(Time(now)));
    }

    #[test]
    fn failure_marks_later_steps_unknown_and_ready_false() {
        let mut o = all_ok(&[]);
        o.argo_server = Some(Check::failed(
            "NamespaceNotAuthorized",
            "namespace argocd lacks the label",
        ));
        o.appset_resources = None;
        o.placement = None;
        o.clusters = None;
        let s = compute(&o, None, None, jiff::Timestamp::UNIX_EPOCH);
        assert_eq!(s.phase.as_deref(), Some("failed"));
        assert_eq!(
            s.message.as_deref(),
            Some("ArgoServerVerified: namespace argocd lacks the label")
        );
        assert_eq!(cond(&s, ARGO_SERVER_VERIFIED).status, "False");
        assert_eq!(cond(&s, PLACEMENT_RESOLVED).status, "Unknown");
        assert_eq!(cond(&s, READY).status, "False");
        assert_eq!(cond(&s, READY).reason, "NamespaceNotAuthorized");
    }

    #[test]
    fn recomputing_an_unchanged_state_is_equal() {
        let t1 = jiff::Timestamp::from_second(1_000).unwrap();
        let t2 = jiff::Timestamp::from_second(2_000).unwrap();
        let first = compute(&all_ok(&["c1"]), None, None, t1);
        let again = compute(&all_ok(&["c1"]), Some(&first), None, t2);
        assert_eq!(first, again);
        assert!(!changed(Some(&first), &again));
        let more = compute(&all_ok(&["c1", "c2"]), Some(&first), None, t2);
        assert!(changed(Some(&first), &more));
        assert_eq!(more.last_update_time, Some(Time(t2)));
        assert_eq!(
            cond(&more, READY).last_transition_time,
            Time(t1),
            "Ready stayed True"
        );
    }

    #[test]
    fn message_cluster_list_is_cut_at_4096() {
        let clusters: Vec<String> = (0..2000).map(|i| format!("cluster-{i}")).collect();
        let m = success_message(&clusters, "argocd");
        let list = m
            .strip_prefix("Added managed clusters [")
            .unwrap()
            .strip_suffix("] to gitops namespace argocd")
            .unwrap();
        assert_eq!(list.chars().count(), MAX_MESSAGE);
        assert_eq!(truncate_chars("héllo", 2), "hé");
    }

    #[test]
    fn unsupported_fields_are_reported() {
        let mut gc = GitOpsCluster::new("g", Default::default());
        assert!(unsupported_fields(&gc).is_empty());
        gc.spec.create_policy_template = Some(true);
        gc.spec.gitops_addon = Some(serde_json::json!({"enabled": true}));
        assert_eq!(
            unsupported_fields(&gc),
            vec!["spec.createPolicyTemplate", "spec.gitopsAddon"]
        );
        let mut o = all_ok(&["c"]);
        o.unsupported = unsupported_fields(&gc);
        let s = compute(&o, None, None, jiff::Timestamp::UNIX_EPOCH);
        let c = cond(&s, UNSUPPORTED_FIELDS);
        assert_eq!(c.status, "True");
        assert!(c.message.contains("spec.gitopsAddon"), "{}", c.message);
        assert_eq!(cond(&s, READY).status, "True", "not critical");
    }
}
