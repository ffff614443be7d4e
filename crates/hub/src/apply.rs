//! Server-side apply and `metadata.managedFields` (a simplified structured-merge-diff).
//!
//! Field paths are leaves of the object: `f:<field>` for object members, `k:{..}` for items of
//! `x-kubernetes-list-type: map` lists (plus a `.` marker for the item itself), `v:<json>` for
//! `set` lists; every other list is atomic (one leaf).
//!
//! This file: the two writes that change managedFields, apply and update; `leaves`: an object as
//! field paths; `fields`: managedFields entries; `merge`: merging a configuration into an object;
//! `conflicts`: what an apply contests.

mod conflicts;
mod fields;
mod leaves;
mod merge;

use std::collections::BTreeSet;

use serde_json::{Value, json};

use conflicts::{Conflicts, path_string};
use fields::{Entry, read_entries, write_entries};
use leaves::{Leaves, Path, leaves};
use merge::{merge, remove_path};

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
