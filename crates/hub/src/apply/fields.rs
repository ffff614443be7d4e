//! `metadata.managedFields`: its `fieldsV1` trees as sets of field paths, and its entries read
//! from and written back to an object.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use super::leaves::Path;

/// fieldsV1 tree → paths.
pub(super) fn parse_fields(v: &Value, prefix: &mut Path, out: &mut BTreeSet<Path>) {
    match v.as_object() {
        Some(m) if !m.is_empty() => {
            for (k, c) in m {
                prefix.push(k.clone());
                parse_fields(c, prefix, out);
                prefix.pop();
            }
        }
        _ => {
            if !prefix.is_empty() {
                out.insert(prefix.clone());
            }
        }
    }
}

/// paths → fieldsV1 tree.
pub(super) fn to_fields(paths: &BTreeSet<Path>) -> Value {
    let mut root = Map::new();
    for p in paths {
        let mut cur = &mut root;
        for seg in p {
            let e = cur
                .entry(seg.clone())
                .or_insert_with(|| Value::Object(Map::new()));
            cur = e.as_object_mut().expect("fields tree node is an object");
        }
    }
    Value::Object(root)
}

#[derive(Clone, Debug)]
pub(super) struct Entry {
    pub(super) manager: String,
    pub(super) operation: String,
    pub(super) api_version: String,
    pub(super) time: String,
    pub(super) subresource: Option<String>,
    pub(super) fields: BTreeSet<Path>,
}

pub(super) fn read_entries(v: &Value) -> Vec<Entry> {
    let Some(arr) = v
        .pointer("/metadata/managedFields")
        .and_then(|m| m.as_array())
    else {
        return Vec::new();
    };
    arr.iter()
        .map(|e| {
            let mut fields = BTreeSet::new();
            if let Some(f) = e.get("fieldsV1") {
                parse_fields(f, &mut Vec::new(), &mut fields);
            }
            Entry {
                manager: e["manager"].as_str().unwrap_or("").to_string(),
                operation: e["operation"].as_str().unwrap_or("Update").to_string(),
                api_version: e["apiVersion"].as_str().unwrap_or("").to_string(),
                time: e["time"].as_str().unwrap_or("").to_string(),
                subresource: e["subresource"].as_str().map(String::from),
                fields,
            }
        })
        .collect()
}

pub(super) fn write_entries(v: &mut Value, entries: Vec<Entry>) {
    let arr: Vec<Value> = entries
        .into_iter()
        .filter(|e| !e.fields.is_empty())
        .map(|e| {
            let mut o = json!({
                "manager": e.manager,
                "operation": e.operation,
                "apiVersion": e.api_version,
                "time": e.time,
                "fieldsType": "FieldsV1",
                "fieldsV1": to_fields(&e.fields),
            });
            if let Some(s) = e.subresource {
                o["subresource"] = json!(s);
            }
            o
        })
        .collect();
    if let Some(m) = v.get_mut("metadata").and_then(|m| m.as_object_mut()) {
        if arr.is_empty() {
            m.remove("managedFields");
        } else {
            m.insert("managedFields".into(), Value::Array(arr));
        }
    }
}
