//! JSON helpers.

use serde_json::{Map, Value};

/// The RFC 7386 JSON merge patch that turns `old` into `new`, or `None` when they are equal.
///
/// Objects are diffed key by key (a key missing from `new` becomes `null`); any other value
/// (arrays included) is replaced whole. `null` values inside `new` cannot be expressed by a merge
/// patch and are treated as "absent".
pub fn merge_diff(old: &Value, new: &Value) -> Option<Value> {
    match (old, new) {
        (Value::Object(o), Value::Object(n)) => {
            let mut patch = Map::new();
            for (k, nv) in n {
                if nv.is_null() {
                    if o.get(k).is_some_and(|ov| !ov.is_null()) {
                        patch.insert(k.clone(), Value::Null);
                    }
                    continue;
                }
                match o.get(k) {
                    Some(ov) => {
                        if let Some(p) = merge_diff(ov, nv) {
                            patch.insert(k.clone(), p);
                        }
                    }
                    None => {
                        patch.insert(k.clone(), nv.clone());
                    }
                }
            }
            for (k, ov) in o {
                if !n.contains_key(k) && !ov.is_null() {
                    patch.insert(k.clone(), Value::Null);
                }
            }
            (!patch.is_empty()).then_some(Value::Object(patch))
        }
        _ if old == new => None,
        _ => Some(new.clone()),
    }
}

/// Applies an RFC 7386 merge patch to `target` in place.
pub fn merge_apply(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(t) = target else {
        unreachable!("made an object above")
    };
    for (k, v) in p {
        if v.is_null() {
            t.remove(k);
        } else {
            merge_apply(t.entry(k.clone()).or_insert(Value::Null), v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_diff_table() {
        let cases = [
            (json!({"a": 1}), json!({"a": 1}), None),
            (json!({"a": 1}), json!({"a": 2}), Some(json!({"a": 2}))),
            (
                json!({"a": 1, "b": 2}),
                json!({"a": 1}),
                Some(json!({"b": null})),
            ),
            (
                json!({"a": {"x": 1, "y": 2}}),
                json!({"a": {"x": 1}}),
                Some(json!({"a": {"y": null}})),
            ),
            (
                json!({"a": [1, 2]}),
                json!({"a": [2, 1]}),
                Some(json!({"a": [2, 1]})),
            ),
            (
                json!({}),
                json!({"a": {"b": 1}}),
                Some(json!({"a": {"b": 1}})),
            ),
            (
                json!({"a": 1}),
                json!({"a": null}),
                Some(json!({"a": null})),
            ),
            (json!({"a": null}), json!({}), None),
            (json!("s"), json!({"a": 1}), Some(json!({"a": 1}))),
            // key order does not matter
            (json!({"a": 1, "b": 2}), json!({"b": 2, "a": 1}), None),
        ];
        for (old, new, want) in cases {
            let got = merge_diff(&old, &new);
            assert_eq!(got, want, "{old} -> {new}");
            if let Some(p) = got {
                let mut applied = old.clone();
                merge_apply(&mut applied, &p);
                let mut expected = new.clone();
                strip_nulls(&mut expected);
                assert_eq!(applied, expected, "applying {p} to {old}");
            }
        }
    }

    fn strip_nulls(v: &mut Value) {
        if let Value::Object(m) = v {
            m.retain(|_, v| !v.is_null());
            m.values_mut().for_each(strip_nulls);
        }
    }
}
