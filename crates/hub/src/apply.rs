//! Server-side apply and `metadata.managedFields` (a simplified structured-merge-diff).
//!
//! Field paths are leaves of the object: `f:<field>` for object members, `k:{..}` for items of
//! `x-kubernetes-list-type: map` lists (plus a `.` marker for the item itself), `v:<json>` for
//! `set` lists; every other list is atomic (one leaf).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

pub(crate) type Path = Vec<String>;
type Leaves = BTreeMap<Path, Value>;

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

fn child_schema<'a>(s: Option<&'a Value>, k: &str) -> Option<&'a Value> {
    let s = s?;
    s.get("properties")
        .and_then(|p| p.get(k))
        .or_else(|| s.get("additionalProperties").filter(|a| a.is_object()))
}

enum ListType<'a> {
    Atomic,
    Map(Vec<&'a str>),
    Set,
}

fn list_type(s: Option<&Value>) -> ListType<'_> {
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

fn item_key(item: &Value, keys: &[&str]) -> Option<String> {
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
fn leaves(v: &Value, schema: Option<&Value>, with_main: bool, with_status: bool) -> Leaves {
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

/// fieldsV1 tree → paths.
fn parse_fields(v: &Value, prefix: &mut Path, out: &mut BTreeSet<Path>) {
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
fn to_fields(paths: &BTreeSet<Path>) -> Value {
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
struct Entry {
    manager: String,
    operation: String,
    api_version: String,
    time: String,
    subresource: Option<String>,
    fields: BTreeSet<Path>,
}

fn read_entries(v: &Value) -> Vec<Entry> {
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

fn write_entries(v: &mut Value, entries: Vec<Entry>) {
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

/// Records a non-apply write (`Update` operation): the manager takes ownership of the fields it
/// changed; fields that disappeared are released by everyone.
pub(crate) fn record_update(
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    sub: Option<&str>,
    schema: Option<&Value>,
) {
    let with_status = sub == Some("status");
    let n = leaves(new, schema, !with_status, true);
    let o = old
        .map(|o| leaves(o, schema, !with_status, true))
        .unwrap_or_default();
    let changed: BTreeSet<Path> = n
        .iter()
        .filter(|(p, v)| o.get(*p) != Some(*v))
        .map(|(p, _)| p.clone())
        .collect();
    let removed: BTreeSet<Path> = o.keys().filter(|p| !n.contains_key(*p)).cloned().collect();
    if changed.is_empty() && removed.is_empty() {
        return;
    }
    let api_version = new["apiVersion"].as_str().unwrap_or("").to_string();
    let mut entries = read_entries(new);
    for e in &mut entries {
        e.fields.retain(|p| !removed.contains(p));
        if !(e.manager == manager && e.operation == "Update") {
            e.fields.retain(|p| !changed.contains(p));
        }
    }
    let sub_s = sub.map(String::from);
    match entries
        .iter_mut()
        .find(|e| e.manager == manager && e.operation == "Update" && e.subresource == sub_s)
    {
        Some(e) => {
            e.fields.extend(changed);
            e.time = crate::util::now_rfc3339();
            e.api_version = api_version;
        }
        None => entries.push(Entry {
            manager: manager.to_string(),
            operation: "Update".into(),
            api_version,
            time: crate::util::now_rfc3339(),
            subresource: sub_s,
            fields: changed,
        }),
    }
    write_entries(new, entries);
}

pub(crate) fn path_string(p: &Path) -> String {
    let mut s = String::new();
    for seg in p {
        if let Some(f) = seg.strip_prefix("f:") {
            s.push('.');
            s.push_str(f);
        } else if let Some(k) = seg.strip_prefix("k:") {
            let inner = serde_json::from_str::<Value>(k)
                .ok()
                .and_then(|v| v.as_object().cloned())
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| format!("{k}={v}"))
                        .collect::<Vec<_>>()
                        .join(",")
                })
                .unwrap_or_default();
            s.push_str(&format!("[{inner}]"));
        } else if let Some(v) = seg.strip_prefix("v:") {
            s.push_str(&format!("[={v}]"));
        }
    }
    s
}

pub(crate) struct Conflicts(pub Vec<(String, String, String)>); // manager, apiVersion, path

impl Conflicts {
    pub fn message(&self) -> String {
        let n = self.0.len();
        let mut by_mgr: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
        for (m, a, p) in &self.0 {
            by_mgr
                .entry((m.clone(), a.clone()))
                .or_default()
                .push(p.clone());
        }
        if n == 1 {
            let (m, a, p) = &self.0[0];
            return format!("Apply failed with 1 conflict: conflict with \"{m}\" using {a}: {p}");
        }
        let mut s = format!("Apply failed with {n} conflicts: ");
        let parts: Vec<String> = by_mgr
            .iter()
            .map(|((m, a), ps)| {
                if ps.len() == 1 {
                    format!("conflict with \"{m}\" using {a}: {}", ps[0])
                } else {
                    format!(
                        "conflicts with \"{m}\" using {a}:\n{}",
                        ps.iter()
                            .map(|p| format!("- {p}"))
                            .collect::<Vec<_>>()
                            .join("\n")
                    )
                }
            })
            .collect();
        s.push_str(&parts.join("\n"));
        s
    }
}

fn remove_path(v: &mut Value, p: &[String]) {
    let Some((first, rest)) = p.split_first() else {
        return;
    };
    if let Some(f) = first.strip_prefix("f:") {
        let Some(m) = v.as_object_mut() else { return };
        if rest.is_empty() {
            m.remove(f);
            return;
        }
        if let Some(c) = m.get_mut(f) {
            remove_path(c, rest);
            let empty = c.as_object().is_some_and(|o| o.is_empty())
                || c.as_array().is_some_and(|a| a.is_empty());
            if empty {
                m.remove(f);
            }
        }
    } else if let Some(k) = first.strip_prefix("k:") {
        let Ok(Value::Object(keys)) = serde_json::from_str::<Value>(k) else {
            return;
        };
        let Some(arr) = v.as_array_mut() else { return };
        let idx = arr
            .iter()
            .position(|it| keys.iter().all(|(kk, kv)| it.get(kk) == Some(kv)));
        if let Some(i) = idx {
            if rest.first().map(|s| s.as_str()) == Some(".") {
                arr.remove(i);
            } else {
                remove_path(&mut arr[i], rest);
            }
        }
    } else if let Some(val) = first.strip_prefix("v:") {
        let Ok(target) = serde_json::from_str::<Value>(val) else {
            return;
        };
        if let Some(arr) = v.as_array_mut() {
            arr.retain(|x| *x != target);
        }
    }
}

fn merge(live: &mut Value, cfg: &Value, schema: Option<&Value>) {
    match (live.as_object_mut(), cfg.as_object()) {
        (Some(lm), Some(cm)) => {
            for (k, cv) in cm {
                let cs = child_schema(schema, k);
                match lm.get_mut(k) {
                    Some(lv) if lv.is_object() && cv.is_object() => merge(lv, cv, cs),
                    Some(lv) if lv.is_array() && cv.is_array() => merge_list(lv, cv, cs),
                    _ => {
                        lm.insert(k.clone(), cv.clone());
                    }
                }
            }
        }
        _ => *live = cfg.clone(),
    }
}

fn merge_list(live: &mut Value, cfg: &Value, schema: Option<&Value>) {
    let items_schema = schema.and_then(|s| s.get("items"));
    match list_type(schema) {
        ListType::Map(keys) => {
            let (Some(la), Some(ca)) = (live.as_array_mut(), cfg.as_array()) else {
                return;
            };
            for it in ca {
                let k = item_key(it, &keys);
                let pos = la
                    .iter()
                    .position(|l| k.is_some() && item_key(l, &keys) == k);
                match pos {
                    Some(i) => merge(&mut la[i], it, items_schema),
                    None => la.push(it.clone()),
                }
            }
        }
        ListType::Set => {
            let (Some(la), Some(ca)) = (live.as_array_mut(), cfg.as_array()) else {
                return;
            };
            for it in ca {
                if !la.contains(it) {
                    la.push(it.clone());
                }
            }
        }
        ListType::Atomic => *live = cfg.clone(),
    }
}

/// Whether applying `v` at `p` changes the live object: an empty map merged into a live map
/// changes nothing.
fn is_change(p: &Path, v: &Value, live: &Leaves) -> bool {
    if live.get(p) == Some(v) {
        return false;
    }
    if v.as_object().is_some_and(|o| o.is_empty()) {
        let has_children = live
            .range(p.clone()..)
            .next()
            .is_some_and(|(k, _)| k.starts_with(p) && k.len() > p.len());
        return !has_children;
    }
    true
}

pub(crate) struct ApplyInput<'a> {
    pub live: Option<&'a Value>,
    pub cfg: &'a Value,
    pub manager: &'a str,
    pub force: bool,
    pub schema: Option<&'a Value>,
    /// Request on the `/status` subresource.
    pub status_request: bool,
    /// The type has a status subresource (main-resource apply ignores `.status`).
    pub status_sub: bool,
    pub api_version: &'a str,
}

/// Server-side apply: returns the new object (with managedFields) or the conflicts.
pub(crate) fn apply(inp: &ApplyInput<'_>) -> Result<Value, Conflicts> {
    let with_status = inp.status_request || !inp.status_sub;
    let with_main = !inp.status_request;
    let a = leaves(inp.cfg, inp.schema, with_main, with_status);
    let empty = json!({});
    let live = inp.live.unwrap_or(&empty);
    let l = leaves(live, inp.schema, true, true);
    let mut entries = read_entries(live);
    let sub = inp.status_request.then(|| "status".to_string());
    // Conflicts: leaves this apply changes that another manager owns (exact paths, like
    // structured-merge-diff).
    let changed: BTreeSet<Path> = a
        .iter()
        .filter(|(p, v)| is_change(p, v, &l))
        .map(|(p, _)| p.clone())
        .collect();
    let mut conflicts = Vec::new();
    for p in &changed {
        for e in &entries {
            if e.manager == inp.manager && e.operation == "Apply" {
                continue;
            }
            if e.fields.contains(p) {
                conflicts.push((e.manager.clone(), e.api_version.clone(), path_string(p)));
            }
        }
    }
    if !conflicts.is_empty() && !inp.force {
        conflicts.sort();
        conflicts.dedup();
        return Err(Conflicts(conflicts));
    }
    let applied: BTreeSet<Path> = a.keys().cloned().collect();
    // Forced (or uncontested) changes move ownership to the applier.
    for e in &mut entries {
        if e.manager == inp.manager && e.operation == "Apply" {
            continue;
        }
        e.fields.retain(|f| !changed.contains(f));
    }
    let mut out = live.clone();
    if out.is_null() || !out.is_object() {
        out = json!({});
    }
    // Fields this manager applied before and no longer applies are removed unless someone
    // else owns them.
    let prev: BTreeSet<Path> = entries
        .iter()
        .filter(|e| e.manager == inp.manager && e.operation == "Apply" && e.subresource == sub)
        .flat_map(|e| e.fields.iter().cloned())
        .collect();
    for p in prev.difference(&applied) {
        let base: &[String] = match p.last().map(|s| s.as_str()) {
            Some(".") => &p[..p.len() - 1],
            _ => &p[..],
        };
        let owned_by_other = entries.iter().any(|e| {
            !(e.manager == inp.manager && e.operation == "Apply")
                && e.fields.iter().any(|f| f.starts_with(base))
        });
        let still_applied_below = applied.iter().any(|f| f.starts_with(base) && f != p);
        if !owned_by_other && !still_applied_below {
            remove_path(&mut out, p);
        }
    }
    // Merge the configuration.
    let mut cfg = inp.cfg.clone();
    if let Some(o) = cfg.as_object_mut() {
        if !with_status {
            o.remove("status");
        }
        if let Some(m) = o.get_mut("metadata").and_then(|m| m.as_object_mut()) {
            m.remove("managedFields");
        }
    }
    merge(&mut out, &cfg, inp.schema);
    // The object changed (apart from managedFields)? A no-op apply keeps the entry's timestamp,
    // so re-applying the same configuration is not a write (like the real server).
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(m) = v.get_mut("metadata").and_then(|m| m.as_object_mut()) {
            m.remove("managedFields");
        }
        v
    };
    let content_changed = strip(&out) != strip(live);
    let now = crate::util::now_rfc3339();
    match entries
        .iter_mut()
        .find(|e| e.manager == inp.manager && e.operation == "Apply" && e.subresource == sub)
    {
        Some(e) => {
            if content_changed || e.fields != applied || e.api_version != inp.api_version {
                e.time = now;
            }
            e.fields = applied;
            e.api_version = inp.api_version.to_string();
        }
        None => entries.push(Entry {
            manager: inp.manager.to_string(),
            operation: "Apply".into(),
            api_version: inp.api_version.to_string(),
            time: now,
            subresource: sub,
            fields: applied,
        }),
    }
    // Order: keep a stable order (existing first).
    if out.get("metadata").is_none() {
        out["metadata"] = json!({});
    }
    write_entries(&mut out, entries);
    Ok(out)
}

#[cfg(test)]
mod tests;
