//! Hub Application status from ManifestWork status feedback.

use std::collections::BTreeMap;

use argocd_pull_api::argocd::ApplicationStatus;
use argocd_pull_api::ocm::work::{FeedbackValue, ManifestWork, ResourceIdentifier};
use serde_json::{Map, Value, json};

pub use crate::work::payload_identifier as application_identifier;

pub const HEALTHY: &str = "Healthy";
pub const PROGRESSING: &str = "Progressing";

/// The feedback values of one manifest, by rule name, rendered as text whatever their type.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FeedbackValues {
    pub values: BTreeMap<String, String>,
}

impl FeedbackValues {
    /// Collects the values the work reports for the manifest `id` names (by identifier, not by
    /// index). Values of any type are kept as text; values with no content are skipped.
    pub fn from_work(work: &ManifestWork, id: &ResourceIdentifier) -> Self {
        Self::from_values(work.feedback_for(id))
    }

    pub fn from_values(values: &[FeedbackValue]) -> Self {
        FeedbackValues {
            values: values
                .iter()
                .filter_map(|v| Some((v.name.clone(), v.field_value.as_text()?)))
                .collect(),
        }
    }

    /// The non-empty value of rule `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.values
            .get(name)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }
    pub fn health(&self) -> Option<&str> {
        self.get("healthStatus")
    }
    pub fn sync(&self) -> Option<&str> {
        self.get("syncStatus")
    }
    pub fn revision(&self) -> Option<&str> {
        self.get("syncRevision")
    }
    pub fn phase(&self) -> Option<&str> {
        self.get("operationStatePhase")
    }
    pub fn started_at(&self) -> Option<&str> {
        self.get("operationStateStartedAt")
    }
}

/// A status write: the JSON merge patch for the hub Application (`{"status": {...}}`).
#[derive(Clone, Debug, PartialEq)]
pub struct StatusPlan {
    pub patch: Value,
    /// The patch writes `Progressing` on the way to `Healthy`: once it is written, compute again
    /// from the patched status to get the final step.
    pub intermediate: bool,
}

/// The merge patch that brings the hub Application's status in line with the feedback, or `None`
/// when nothing changed or the feedback has no health or sync status yet.
///
/// * writes `status.health.status`, `status.sync.status`, `status.sync.revision` (when reported);
/// * when an operation phase is reported: `status.operationState.phase`, `.startedAt` (the
///   reported one, else the one already on the hub, else `now` — so it stays stable), and
///   `.operation = {}` when the hub has none;
/// * a move into `Healthy` from anything but `Healthy`/`Progressing` first writes `Progressing`
///   (so ApplicationSet progressive sync sees a transition); it never happens without a change.
pub fn status_patch(
    current: Option<&ApplicationStatus>,
    feedback: &FeedbackValues,
    now: &str,
) -> Option<StatusPlan> {
    let health = feedback.health()?;
    let sync = feedback.sync()?;
    let cur_health = current
        .and_then(|s| s.health.as_ref())
        .and_then(|h| h.status.as_deref());
    let cur_sync = current.and_then(|s| s.sync.as_ref());
    let cur_op = current.and_then(|s| s.operation_state.as_ref());

    let mut intermediate = false;
    let health = if health == HEALTHY && !matches!(cur_health, Some(HEALTHY | PROGRESSING)) {
        intermediate = true;
        PROGRESSING
    } else {
        health
    };

    let mut status = Map::new();
    if cur_health != Some(health) {
        status.insert("health".into(), json!({"status": health}));
    }
    let mut sync_patch = Map::new();
    if cur_sync.and_then(|s| s.status.as_deref()) != Some(sync) {
        sync_patch.insert("status".into(), json!(sync));
    }
    if let Some(rev) = feedback.revision()
        && cur_sync.and_then(|s| s.revision.as_deref()) != Some(rev)
    {
        sync_patch.insert("revision".into(), json!(rev));
    }
    if !sync_patch.is_empty() {
        status.insert("sync".into(), Value::Object(sync_patch));
    }
    if let Some(phase) = feedback.phase() {
        let mut op = Map::new();
        if cur_op.and_then(|o| o.phase.as_deref()) != Some(phase) {
            op.insert("phase".into(), json!(phase));
        }
        let cur_started = cur_op
            .and_then(|o| o.started_at.as_deref())
            .filter(|s| !s.is_empty());
        let started = feedback.started_at().or(cur_started).unwrap_or(now);
        if cur_started != Some(started) {
            op.insert("startedAt".into(), json!(started));
        }
        if cur_op
            .and_then(|o| o.operation.as_ref())
            .is_none_or(|o| !o.is_object())
        {
            op.insert("operation".into(), json!({}));
        }
        if !op.is_empty() {
            status.insert("operationState".into(), Value::Object(op));
        }
    }
    if status.is_empty() {
        return None;
    }
    Some(StatusPlan {
        patch: json!({ "status": status }),
        intermediate,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use argocd_pull_api::ocm::work::FieldValue;

    const NOW: &str = "2030-01-01T00:00:00Z";

    fn fb(pairs: &[(&str, &str)]) -> FeedbackValues {
        FeedbackValues {
            values: pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    fn status(v: Value) -> ApplicationStatus {
        serde_json::from_value(v).unwrap()
    }

    fn apply(cur: Option<ApplicationStatus>, patch: &Value) -> ApplicationStatus {
        let mut doc = json!({"status": serde_json::to_value(cur.unwrap_or_default()).unwrap()});
        crate::json::merge_apply(&mut doc, patch);
        serde_json::from_value(doc["status"].clone()).unwrap()
    }

    #[test]
    fn status_patch_table() {
        let full = [
            ("healthStatus", "Healthy"),
            ("syncStatus", "Synced"),
            ("syncRevision", "abc"),
            ("operationStatePhase", "Succeeded"),
            ("operationStateStartedAt", "2024-01-01T00:00:00Z"),
        ];
        struct Case {
            name: &'static str,
            current: Option<Value>,
            feedback: Vec<(&'static str, &'static str)>,
            want: Option<(Value, bool)>,
        }
        let cases = vec![
            Case {
                name: "no feedback yet",
                current: None,
                feedback: vec![],
                want: None,
            },
            Case {
                name: "health without sync",
                current: None,
                feedback: vec![("healthStatus", "Healthy")],
                want: None,
            },
            Case {
                name: "empty sync is no sync",
                current: None,
                feedback: vec![("healthStatus", "Healthy"), ("syncStatus", "")],
                want: None,
            },
            Case {
                name: "first Healthy goes through Progressing",
                current: None,
                feedback: full.to_vec(),
                want: Some((
                    json!({"status": {
                        "health": {"status": "Progressing"},
                        "sync": {"status": "Synced", "revision": "abc"},
                        "operationState": {"phase": "Succeeded", "startedAt": "2024-01-01T00:00:00Z", "operation": {}}
                    }}),
                    true,
                )),
            },
            Case {
                name: "Progressing to Healthy is direct",
                current: Some(
                    json!({"health": {"status": "Progressing"}, "sync": {"status": "Synced", "revision": "abc"},
                    "operationState": {"phase": "Succeeded", "startedAt": "2024-01-01T00:00:00Z", "operation": {}}}),
                ),
                feedback: full.to_vec(),
                want: Some((json!({"status": {"health": {"status": "Healthy"}}}), false)),
            },
            Case {
                name: "Degraded to Healthy goes through Progressing",
                current: Some(
                    json!({"health": {"status": "Degraded"}, "sync": {"status": "Synced"}}),
                ),
                feedback: vec![("healthStatus", "Healthy"), ("syncStatus", "Synced")],
                want: Some((
                    json!({"status": {"health": {"status": "Progressing"}}}),
                    true,
                )),
            },
            Case {
                name: "steady Healthy writes nothing",
                current: Some(
                    json!({"health": {"status": "Healthy"}, "sync": {"status": "Synced", "revision": "abc"},
                    "operationState": {"phase": "Succeeded", "startedAt": "2024-01-01T00:00:00Z", "operation": {}}}),
                ),
                feedback: full.to_vec(),
                want: None,
            },
            Case {
                name: "Healthy to Degraded is direct",
                current: Some(
                    json!({"health": {"status": "Healthy"}, "sync": {"status": "Synced"}}),
                ),
                feedback: vec![("healthStatus", "Degraded"), ("syncStatus", "Synced")],
                want: Some((json!({"status": {"health": {"status": "Degraded"}}}), false)),
            },
            Case {
                name: "sync change only",
                current: Some(
                    json!({"health": {"status": "Healthy"}, "sync": {"status": "Synced", "revision": "a"}}),
                ),
                feedback: vec![
                    ("healthStatus", "Healthy"),
                    ("syncStatus", "OutOfSync"),
                    ("syncRevision", "b"),
                ],
                want: Some((
                    json!({"status": {"sync": {"status": "OutOfSync", "revision": "b"}}}),
                    false,
                )),
            },
            Case {
                name: "missing startedAt uses now once",
                current: Some(
                    json!({"health": {"status": "Healthy"}, "sync": {"status": "Synced"}}),
                ),
                feedback: vec![
                    ("healthStatus", "Healthy"),
                    ("syncStatus", "Synced"),
                    ("operationStatePhase", "Running"),
                ],
                want: Some((
                    json!({"status": {"operationState": {"phase": "Running", "startedAt": NOW, "operation": {}}}}),
                    false,
                )),
            },
            Case {
                name: "missing startedAt keeps the hub's",
                current: Some(
                    json!({"health": {"status": "Healthy"}, "sync": {"status": "Synced"},
                    "operationState": {"phase": "Running", "startedAt": "2020-01-01T00:00:00Z", "operation": {"sync": {}}}}),
                ),
                feedback: vec![
                    ("healthStatus", "Healthy"),
                    ("syncStatus", "Synced"),
                    ("operationStatePhase", "Succeeded"),
                ],
                want: Some((
                    json!({"status": {"operationState": {"phase": "Succeeded"}}}),
                    false,
                )),
            },
            Case {
                name: "no phase leaves operationState alone",
                current: Some(
                    json!({"health": {"status": "Healthy"}, "sync": {"status": "Synced"}}),
                ),
                feedback: vec![
                    ("healthStatus", "Healthy"),
                    ("syncStatus", "Synced"),
                    ("operationStateStartedAt", "2024-01-01T00:00:00Z"),
                ],
                want: None,
            },
        ];
        for c in cases {
            let cur = c.current.map(status);
            let got = status_patch(cur.as_ref(), &fb(&c.feedback), NOW);
            assert_eq!(
                got.clone().map(|p| (p.patch, p.intermediate)),
                c.want,
                "case {:?}",
                c.name
            );
            // Applying the patches converges: at most two steps, then nothing to write.
            let mut cur = cur;
            let mut steps = 0;
            while let Some(plan) = status_patch(cur.as_ref(), &fb(&c.feedback), NOW) {
                cur = Some(apply(cur, &plan.patch));
                steps += 1;
                assert!(steps <= 2, "case {:?} does not converge", c.name);
            }
        }
    }

    #[test]
    fn two_step_only_on_real_transition() {
        let feedback = fb(&[("healthStatus", "Healthy"), ("syncStatus", "Synced")]);
        let first = status_patch(None, &feedback, NOW).unwrap();
        assert!(first.intermediate);
        let cur = apply(None, &first.patch);
        assert_eq!(
            cur.health.as_ref().unwrap().status.as_deref(),
            Some("Progressing")
        );
        let second = status_patch(Some(&cur), &feedback, NOW).unwrap();
        assert!(!second.intermediate);
        let cur = apply(Some(cur), &second.patch);
        assert_eq!(
            cur.health.as_ref().unwrap().status.as_deref(),
            Some("Healthy")
        );
        assert_eq!(status_patch(Some(&cur), &feedback, NOW), None);
    }

    #[test]
    fn non_string_feedback_is_tolerated() {
        let values = vec![
            FeedbackValue {
                name: "healthStatus".into(),
                field_value: FieldValue::string("Healthy"),
            },
            FeedbackValue {
                name: "syncStatus".into(),
                field_value: FieldValue {
                    type_: "JsonRaw".into(),
                    json_raw: Some("Synced".into()),
                    ..Default::default()
                },
            },
            FeedbackValue {
                name: "syncRevision".into(),
                field_value: FieldValue {
                    type_: "Integer".into(),
                    integer: Some(42),
                    ..Default::default()
                },
            },
            FeedbackValue {
                name: "operationStatePhase".into(),
                field_value: FieldValue {
                    type_: "Boolean".into(),
                    ..Default::default()
                },
            },
        ];
        let feedback = FeedbackValues::from_values(&values);
        assert_eq!(feedback.health(), Some("Healthy"));
        assert_eq!(feedback.sync(), Some("Synced"));
        assert_eq!(feedback.revision(), Some("42"));
        assert_eq!(feedback.phase(), None);
    }
}
