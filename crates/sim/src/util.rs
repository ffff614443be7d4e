//! Small helpers shared by the simulators.

use argocd_pull_api::Condition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::Value;
use sha1::{Digest, Sha1};

/// Now, to the second (so that values survive a JSON round trip unchanged).
pub fn now() -> jiff::Timestamp {
    jiff::Timestamp::now()
        .round(jiff::Unit::Second)
        .unwrap_or_else(|_| jiff::Timestamp::now())
}

/// RFC 3339 text of [`now`].
pub fn now_rfc3339() -> String {
    now().to_string()
}

/// A condition whose `lastTransitionTime` is kept from `previous` when the status did not change.
pub fn condition(
    previous: &[Condition],
    type_: &str,
    status: bool,
    reason: &str,
    message: impl Into<String>,
    observed_generation: Option<i64>,
) -> Condition {
    let status = if status { "True" } else { "False" };
    let last_transition_time = previous
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .map(|c| c.last_transition_time.clone())
        .unwrap_or_else(|| Time(now()));
    Condition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: reason.to_string(),
        message: message.into(),
        observed_generation,
        last_transition_time,
    }
}

/// Whether every field of `want` is present in `have` with the same value (objects compared
/// key by key, arrays element by element with equal length, scalars by equality).
pub fn is_subset(want: &Value, have: &Value) -> bool {
    match (want, have) {
        (Value::Object(w), Value::Object(h)) => w
            .iter()
            .all(|(k, v)| h.get(k).is_some_and(|hv| is_subset(v, hv))),
        (Value::Array(w), Value::Array(h)) => {
            w.len() == h.len() && w.iter().zip(h).all(|(a, b)| is_subset(a, b))
        }
        (Value::Number(a), Value::Number(b)) => a.as_f64() == b.as_f64(),
        (w, h) => w == h,
    }
}

/// Hex SHA-1 of a JSON value's text.
pub fn hash_json(v: &Value) -> String {
    hex::encode(Sha1::digest(v.to_string().as_bytes()))
}

/// Hex SHA-1 of a string.
pub fn sha1_hex(s: &str) -> String {
    hex::encode(Sha1::digest(s.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn subset() {
        let have = json!({"a": {"b": 1, "c": [1, 2]}, "d": "x", "status": {}});
        assert!(is_subset(&json!({"a": {"b": 1}}), &have));
        assert!(is_subset(&json!({"a": {"c": [1, 2]}, "d": "x"}), &have));
        assert!(!is_subset(&json!({"a": {"c": [1]}}), &have));
        assert!(!is_subset(&json!({"e": null}), &have));
        assert!(!is_subset(&json!({"d": "y"}), &have));
    }

    #[test]
    fn transition_time_kept_only_for_same_status() {
        let first = condition(&[], "Applied", true, "R", "m", Some(1));
        let mut old = first.clone();
        old.last_transition_time = Time("2020-01-01T00:00:00Z".parse().unwrap());
        let same = condition(
            std::slice::from_ref(&old),
            "Applied",
            true,
            "R2",
            "m2",
            Some(2),
        );
        assert_eq!(same.last_transition_time, old.last_transition_time);
        let flipped = condition(&[old.clone()], "Applied", false, "R", "m", Some(2));
        assert_ne!(flipped.last_transition_time, old.last_transition_time);
    }
}
