//! An object as its managed leaves: field path → value, per the schema's list types
//! (`x-kubernetes-list-type` map and set lists are itemised, other lists are atomic).

use std::collections::BTreeMap;

use serde_json::{Map, Value};

pub(super) type Path = Vec<String>;
pub(super) type Leaves = BTreeMap<Path, Value>;

const SYSTEM_META: &[&str] = &[
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
    "generateName",
];

pub(super) fn child_schema<'a>(s: Option<&'a Value>, k: &str) -> Option<&'a Value> {
    let s = s?;
    s.get("properties")
        .and_then(|p| p.get(k))
        .or_else(|| s.get("additionalProperties").filter(|a| a.is_object()))
}

pub(super) enum ListType<'a> {
    Atomic,
    Map(Vec<&'a str>),
    Set,
}

pub(super) fn list_type(s: Option<&Value>) -> ListType<'_> {
    let Some(s) = s else {
        return ListType::Atomic;
    };
    match s.get("x-kubernetes-list-type").and_then(|t| t.as_str()) {
        Some("map") => {
            let keys: Vec<&str> = s
                .get("x-kubernetes-list-map-keys")
                .and_then(|k| k.as_array())
                .map(|a| a.iter().filter_map(|x| x.as_str()).collect())
                .unwrap_or_default();
            if keys.is_empty() {
                ListType::Atomic
            } else {
                ListType::Map(keys)
            }
        }
        Some("set") => ListType::Set,
        _ => ListType::Atomic,
    }
}

pub(super) fn item_key(item: &Value, keys: &[&str]) -> Option<String> {
    let mut m = Map::new();
    for k in keys {
        if let Some(v) = item.get(*k) {
            m.insert((*k).to_string(), v.clone());
        }
    }
    if m.is_empty() {
        return None;
    }
    Some(format!("k:{}", Value::Object(m)))
}

fn flatten_into(v: &Value, schema: Option<&Value>, prefix: &mut Path, out: &mut Leaves) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, c) in m {
                prefix.push(format!("f:{k}"));
                flatten_child(c, child_schema(schema, k), prefix, out);
                prefix.pop();
            }
        }
        other => {
            out.insert(prefix.clone(), other.clone());
        }
    }
}

fn flatten_child(c: &Value, schema: Option<&Value>, prefix: &mut Path, out: &mut Leaves) {
    match c {
        Value::Array(items) => match list_type(schema) {
            ListType::Map(keys) => {
                let item_schema = schema.and_then(|s| s.get("items"));
                let mut ok = true;
                let mut local = Leaves::new();
                for it in items {
                    let Some(k) = item_key(it, &keys) else {
                        ok = false;
                        break;
                    };
                    prefix.push(k);
                    prefix.push(".".into());
                    local.insert(prefix.clone(), Value::Bool(true));
                    prefix.pop();
                    flatten_into(it, item_schema, prefix, &mut local);
                    prefix.pop();
                }
                if ok && !items.is_empty() {
                    out.extend(local);
                } else {
                    out.insert(prefix.clone(), c.clone());
                }
            }
            ListType::Set
                if items.iter().all(|i| !i.is_object() && !i.is_array()) && !items.is_empty() =>
            {
                for it in items {
                    prefix.push(format!("v:{it}"));
                    out.insert(prefix.clone(), it.clone());
                    prefix.pop();
                }
            }
            _ => {
                out.insert(prefix.clone(), c.clone());
            }
        },
        Value::Object(_) => flatten_into(c, schema, prefix, out),
        _ => {
            out.insert(prefix.clone(), c.clone());
        }
    }
}

/// The managed leaves of an object: system metadata, apiVersion/kind excluded; `status`
/// included only when `with_status`, `spec`-side only when `with_main`.
pub(super) fn leaves(
    v: &Value,
    schema: Option<&Value>,
    with_main: bool,
    with_status: bool,
) -> Leaves {
    let mut out = Leaves::new();
    let Some(m) = v.as_object() else {
        return out;
    };
    for (k, c) in m {
        if k == "apiVersion" || k == "kind" {
            continue;
        }
        if k == "status" && !with_status {
            continue;
        }
        if k != "status" && !with_main {
            continue;
        }
        let mut prefix = vec![format!("f:{k}")];
        if k == "metadata" {
            if let Some(mm) = c.as_object() {
                for (mk, mv) in mm {
                    if SYSTEM_META.contains(&mk.as_str()) {
                        continue;
                    }
                    prefix.push(format!("f:{mk}"));
                    flatten_child(mv, None, &mut prefix, &mut out);
                    prefix.pop();
                }
            }
            continue;
        }
        flatten_child(c, child_schema(schema, k), &mut prefix, &mut out);
    }
    out
}
