//! Status feedback rules, evaluated like the OCM work agent does.
//!
//! * `JSONPaths`: each path must select exactly one value; a string becomes `String`, an integer
//!   `Integer`, a boolean `Boolean`, anything else (object, array, float) `JsonRaw` (the JSON text,
//!   at most [`JSON_RAW_LIMIT`] bytes — OCM's limit — or the value is dropped with an error).
//!   A path that selects nothing yields no value and no error.
//! * `WellKnownStatus`: the per-kind paths OCM ships (see [`well_known_paths`]); unknown kinds
//!   yield nothing.

use argocd_pull_api::ocm::work::{FeedbackRule, FeedbackValue, FieldValue};
use serde_json::Value;

use crate::jsonpath::JsonPath;

/// OCM's maximum length of a `JsonRaw` feedback value.
pub const JSON_RAW_LIMIT: usize = 1024;

/// The well-known status paths of OCM's work agent for `(group, kind)`.
pub fn well_known_paths(group: &str, kind: &str) -> &'static [(&'static str, &'static str)] {
    match (group, kind) {
        ("apps", "Deployment") => &[
            ("ReadyReplicas", ".status.readyReplicas"),
            ("Replicas", ".status.replicas"),
            ("AvailableReplicas", ".status.availableReplicas"),
        ],
        ("apps", "DaemonSet") => &[
            ("NumberReady", ".status.numberReady"),
            ("DesiredNumberScheduled", ".status.desiredNumberScheduled"),
            ("NumberAvailable", ".status.numberAvailable"),
        ],
        ("apps", "StatefulSet") => &[
            ("ReadyReplicas", ".status.readyReplicas"),
            ("Replicas", ".status.replicas"),
            ("AvailableReplicas", ".status.availableReplicas"),
        ],
        ("batch", "Job") => &[
            (
                "JobComplete",
                r#".status.conditions[?(@.type=="Complete")].status"#,
            ),
            ("JobSucceeded", ".status.succeeded"),
        ],
        ("", "Pod") => &[
            ("PodPhase", ".status.phase"),
            (
                "PodReady",
                r#".status.conditions[?(@.type=="Ready")].status"#,
            ),
        ],
        _ => &[],
    }
}

/// Converts a selected JSON value to a feedback value.
pub fn field_value(value: &Value, raw_limit: usize) -> Result<FieldValue, String> {
    Ok(match value {
        Value::String(s) => FieldValue::string(s.clone()),
        Value::Bool(b) => FieldValue {
            type_: "Boolean".into(),
            boolean: Some(*b),
            ..Default::default()
        },
        Value::Number(n) if n.as_i64().is_some() => FieldValue {
            type_: "Integer".into(),
            integer: n.as_i64(),
            ..Default::default()
        },
        Value::Null => return Err("value is null".into()),
        other => {
            let raw = other.to_string();
            if raw.len() > raw_limit {
                return Err(format!(
                    "JsonRaw value is {} bytes, more than the limit of {raw_limit}",
                    raw.len()
                ));
            }
            FieldValue {
                type_: "JsonRaw".into(),
                json_raw: Some(raw),
                ..Default::default()
            }
        }
    })
}

/// Evaluates `rules` on `object`. Returns the values (in rule order) and the errors met.
pub fn evaluate(
    rules: &[FeedbackRule],
    group: &str,
    kind: &str,
    object: &Value,
    raw_limit: usize,
) -> (Vec<FeedbackValue>, Vec<String>) {
    let mut values = Vec::new();
    let mut errors = Vec::new();
    let mut unknown = Vec::new();
    let mut push = |name: &str, path: &str| match JsonPath::parse(path) {
        Err(e) => errors.push(e.to_string()),
        Ok(p) => {
            let selected = p.select(object);
            match selected.len() {
                0 => {}
                1 => match field_value(selected[0], raw_limit) {
                    Ok(fv) => values.push(FeedbackValue {
                        name: name.to_string(),
                        field_value: fv,
                    }),
                    Err(e) => errors.push(format!("{name}: {e}")),
                },
                n => errors.push(format!("{name}: path {path} selects {n} values, not one")),
            }
        }
    };
    for rule in rules {
        match rule.type_.as_str() {
            "WellKnownStatus" => {
                for (name, path) in well_known_paths(group, kind) {
                    push(name, path);
                }
            }
            "JSONPaths" => {
                for jp in &rule.json_paths {
                    push(&jp.name, &jp.path);
                }
            }
            other => unknown.push(format!("unknown feedback rule type {other:?}")),
        }
    }
    errors.extend(unknown);
    (values, errors)
}

#[cfg(test)]
mod tests {
    use super::*;
    use argocd_pull_api::ocm::work::JsonPath as Jp;
    use serde_json::json;

    fn rule(paths: &[(&str, &str)]) -> FeedbackRule {
        FeedbackRule {
            type_: "JSONPaths".into(),
            json_paths: paths
                .iter()
                .map(|(n, p)| Jp {
                    name: n.to_string(),
                    path: p.to_string(),
                    version: None,
                })
                .collect(),
        }
    }

    #[test]
    fn pull_model_paths_give_strings() {
        let app = json!({"status": {"health": {"status": "Healthy"}, "sync": {"status": "Synced", "revision": "abc"}}});
        let (v, e) = evaluate(
            &[rule(&[
                ("healthStatus", ".status.health.status"),
                ("syncStatus", ".status.sync.status"),
                ("operationStatePhase", ".status.operationState.phase"),
            ])],
            "argoproj.io",
            "Application",
            &app,
            JSON_RAW_LIMIT,
        );
        assert!(e.is_empty(), "{e:?}");
        assert_eq!(v.len(), 2, "missing path yields no value");
        assert_eq!(v[0].field_value, FieldValue::string("Healthy"));
        assert_eq!(v[1].name, "syncStatus");
    }

    #[test]
    fn types_integer_boolean_jsonraw_and_limit() {
        let obj = json!({"status": {"n": 3, "ok": true, "f": 1.5, "list": [{"a": 1}], "big": "x".repeat(10)}});
        let (v, e) = evaluate(
            &[rule(&[
                ("n", ".status.n"),
                ("ok", ".status.ok"),
                ("f", ".status.f"),
                ("list", ".status.list"),
            ])],
            "",
            "ConfigMap",
            &obj,
            JSON_RAW_LIMIT,
        );
        assert!(e.is_empty());
        assert_eq!(v[0].field_value.integer, Some(3));
        assert_eq!(v[1].field_value.boolean, Some(true));
        assert_eq!(v[2].field_value.type_, "JsonRaw");
        assert_eq!(v[3].field_value.json_raw.as_deref(), Some(r#"[{"a":1}]"#));
        let (v, e) = evaluate(&[rule(&[("list", ".status")])], "", "X", &obj, 10);
        assert!(v.is_empty());
        assert!(e[0].contains("limit of 10"), "{e:?}");
    }

    #[test]
    fn well_known_deployment() {
        let d = json!({"status": {"readyReplicas": 2, "replicas": 3, "availableReplicas": 2}});
        let (v, _) = evaluate(
            &[FeedbackRule {
                type_: "WellKnownStatus".into(),
                json_paths: vec![],
            }],
            "apps",
            "Deployment",
            &d,
            JSON_RAW_LIMIT,
        );
        let names: Vec<_> = v.iter().map(|x| x.name.as_str()).collect();
        assert_eq!(names, ["ReadyReplicas", "Replicas", "AvailableReplicas"]);
        assert_eq!(v[1].field_value.integer, Some(3));
    }
}
