//! Create / update / patch / delete with the real apiserver's semantics.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::{Map, Value, json};

use super::{CRD_KEY, NS_KEY, Obj, SECRET_KEY, State};
use crate::apply;
use crate::error::{ApiError, ApiResult};
use crate::registry::{self, ResourceType};
use crate::util;

mod delete;
mod validate;

use delete::*;
pub(crate) use delete::{delete, delete_collection, drain};
pub(crate) use validate::check_type;
use validate::*;

#[derive(Default, Clone, Debug)]
pub(crate) struct WriteOpts {
    pub dry_run: bool,
    pub field_manager: Option<String>,
    pub force: bool,
    /// Manager name for `Update` entries when the request names none (User-Agent based).
    pub default_manager: Option<String>,
}

#[derive(Default, Clone, Debug)]
pub(crate) struct DeleteOpts {
    pub dry_run: bool,
    pub uid: Option<String>,
    pub rv: Option<String>,
    pub propagation: Option<String>,
}

/// The object as written (or the unchanged stored object), in storage form.
pub(crate) struct Written {
    pub json: Bytes,
    pub created: bool,
}

fn schema_of(rt: &ResourceType) -> Option<&Value> {
    rt.version(&rt.storage_version)
        .and_then(|v| v.schema.as_deref())
}

fn meta_mut(v: &mut Value) -> &mut Map<String, Value> {
    if !v.get("metadata").is_some_and(|m| m.is_object()) {
        v["metadata"] = json!({});
    }
    v["metadata"]
        .as_object_mut()
        .expect("metadata is an object")
}

fn meta_str<'a>(v: &'a Value, f: &str) -> Option<&'a str> {
    v.get("metadata")?.get(f)?.as_str()
}

pub(crate) fn create(
    st: &mut State,
    rt: &ResourceType,
    url_ns: &str,
    mut val: Value,
    opts: &WriteOpts,
) -> ApiResult<Written> {
    check_type(rt, &mut val)?;
    let ns = resolve_ns(rt, url_ns, &mut val)?;
    let m = meta_mut(&mut val);
    let mut name = m
        .get("name")
        .and_then(|n| n.as_str())
        .unwrap_or("")
        .to_string();
    if name.is_empty() {
        let gen_name = m
            .get("generateName")
            .and_then(|n| n.as_str())
            .unwrap_or("")
            .to_string();
        if gen_name.is_empty() {
            return Err(ApiError::invalid(
                &rt.kind,
                &rt.group,
                "",
                "metadata.name",
                "Required value: name or generateName is required",
            ));
        }
        let prefix: String = gen_name.chars().take(58).collect();
        name = format!("{prefix}{}", util::random_suffix());
        m.insert("name".into(), Value::String(name.clone()));
    }
    validate_name(rt, &name)?;
    validate_meta(rt, &name, &val)?;
    if rt.namespaced {
        check_namespace(st, rt, &name, &ns)?;
    }
    let key = rt.key();
    if st.get(&key, &ns, &name).is_some() {
        return Err(ApiError::already_exists(&rt.plural, &rt.group, &name));
    }
    let m = meta_mut(&mut val);
    m.insert("uid".into(), Value::String(util::new_uid()));
    m.insert(
        "creationTimestamp".into(),
        Value::String(util::now_rfc3339()),
    );
    m.insert("generation".into(), json!(1));
    for f in [
        "resourceVersion",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "selfLink",
    ] {
        m.remove(f);
    }
    if rt.has_status()
        && rt.key() != CRD_KEY
        && let Some(o) = val.as_object_mut()
    {
        o.remove("status");
    }
    type_side_effects_on_write(rt, &mut val, &name)?;
    if let Some(mgr) = &opts.field_manager {
        apply::record_update(None, &mut val, mgr, None, schema_of(rt));
    }
    if opts.dry_run {
        let json = Bytes::from(serde_json::to_vec(&val).unwrap_or_default());
        return Ok(Written {
            json,
            created: true,
        });
    }
    let obj = st.commit_put(&key, &ns, &name, val);
    Ok(Written {
        json: obj.json.bytes(),
        created: true,
    })
}

/// Install helper: create, or replace unconditionally.
pub(crate) fn create_or_replace(st: &mut State, rt: &ResourceType, val: Value) -> ApiResult<()> {
    let name = meta_str(&val, "name").unwrap_or("").to_string();
    let ns = meta_str(&val, "namespace").unwrap_or("").to_string();
    let opts = WriteOpts::default();
    if st.get(&rt.key(), &ns, &name).is_some() {
        let mut v = val;
        meta_mut(&mut v).remove("resourceVersion");
        update(st, rt, &ns, &name, v, None, &opts).map(|_| ())
    } else {
        create(st, rt, &ns, val, &opts).map(|_| ())
    }
}

/// PUT: replace an object (main resource or `/status`).
pub(crate) fn update(
    st: &mut State,
    rt: &ResourceType,
    ns: &str,
    name: &str,
    mut body: Value,
    sub: Option<&str>,
    opts: &WriteOpts,
) -> ApiResult<Written> {
    check_type(rt, &mut body)?;
    let body_name = meta_str(&body, "name").unwrap_or("");
    if body_name != name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({name})"
        )));
    }
    let body_ns = meta_str(&body, "namespace").unwrap_or("");
    if rt.namespaced && !body_ns.is_empty() && body_ns != ns {
        return Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    let old = st
        .get(&rt.key(), ns, name)
        .ok_or_else(|| ApiError::not_found(&rt.plural, &rt.group, name))?;
    finish_update(st, rt, ns, name, &old, body, sub, opts, false)
}

fn spec_changed(old: &Value, new: &Value, ignore_status: bool) -> bool {
    let empty = Map::new();
    let o = old.as_object().unwrap_or(&empty);
    let n = new.as_object().unwrap_or(&empty);
    let skip = |k: &str| {
        k == "metadata" || k == "apiVersion" || k == "kind" || (ignore_status && k == "status")
    };
    let ok = o.iter().filter(|(k, _)| !skip(k)).count();
    let nk = n.iter().filter(|(k, _)| !skip(k)).count();
    ok != nk
        || o.iter()
            .filter(|(k, _)| !skip(k))
            .any(|(k, v)| n.get(k) != Some(v))
}

fn finalizers(v: &Value) -> Vec<String> {
    v.pointer("/metadata/finalizers")
        .and_then(|f| f.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// The shared tail of update, patch and apply: preconditions, status isolation, immutable
/// metadata, generation, finalization, no-op detection, commit.
#[allow(clippy::too_many_arguments)]
pub(crate) fn finish_update(
    st: &mut State,
    rt: &ResourceType,
    ns: &str,
    name: &str,
    old: &Arc<Obj>,
    mut new: Value,
    sub: Option<&str>,
    opts: &WriteOpts,
    via_apply: bool,
) -> ApiResult<Written> {
    let old_val = old.value();
    if let Some(rv) = meta_str(&new, "resourceVersion").filter(|s| !s.is_empty()) {
        if rv.parse::<u64>().is_err() {
            return Err(ApiError::bad_request(format!(
                "metadata.resourceVersion: Invalid value: {rv:?}: must be a decimal integer"
            )));
        }
        if rv != old.rv.to_string() {
            return Err(ApiError::modified(&rt.plural, &rt.group, name));
        }
    }
    if !new.is_object() {
        return Err(ApiError::bad_request("the result is not a JSON object"));
    }
    if !new.get("metadata").is_none_or(|m| m.is_object()) {
        return Err(ApiError::bad_request("metadata: must be an object"));
    }
    let status_sub = rt.has_status();
    if sub == Some("status") {
        let status = new.get("status").cloned();
        let managed = new.pointer("/metadata/managedFields").cloned();
        new = old_val.clone();
        match status {
            Some(s) if !s.is_null() => new["status"] = s,
            _ => {
                if let Some(o) = new.as_object_mut() {
                    o.remove("status");
                }
            }
        }
        if via_apply && let Some(mf) = managed {
            meta_mut(&mut new).insert("managedFields".into(), mf);
        }
    } else if status_sub {
        match old_val.get("status") {
            Some(s) => new["status"] = s.clone(),
            None => {
                if let Some(o) = new.as_object_mut() {
                    o.remove("status");
                }
            }
        }
    }
    new["apiVersion"] = Value::String(rt.storage_api_version());
    new["kind"] = Value::String(rt.kind.clone());
    // Immutable / system-owned metadata.
    let old_meta = old_val.get("metadata").cloned().unwrap_or(json!({}));
    {
        let m = meta_mut(&mut new);
        for f in [
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
        ] {
            match old_meta.get(f) {
                Some(v) => {
                    m.insert(f.into(), v.clone());
                }
                None => {
                    m.remove(f);
                }
            }
        }
        m.insert("name".into(), Value::String(name.to_string()));
        if rt.namespaced {
            m.insert("namespace".into(), Value::String(ns.to_string()));
        } else {
            m.remove("namespace");
        }
        if !m.contains_key("managedFields")
            && let Some(mf) = old_meta.get("managedFields")
        {
            m.insert("managedFields".into(), mf.clone());
        }
        m.insert("resourceVersion".into(), Value::String(old.rv.to_string()));
    }
    validate_meta(rt, name, &new)?;
    let deleting = old_meta.get("deletionTimestamp").is_some();
    if deleting {
        let old_f = finalizers(&old_val);
        let added: Vec<String> = finalizers(&new)
            .into_iter()
            .filter(|f| !old_f.contains(f))
            .collect();
        if !added.is_empty() {
            return Err(ApiError::invalid(
                &rt.kind,
                &rt.group,
                name,
                "metadata.finalizers",
                &format!(
                    "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers {added:?}"
                ),
            ));
        }
    }
    if spec_changed(&old_val, &new, status_sub || rt.builtin) {
        let g = old_meta
            .get("generation")
            .and_then(|g| g.as_i64())
            .unwrap_or(1);
        meta_mut(&mut new).insert("generation".into(), json!(g + 1));
    }
    if rt.key() == SECRET_KEY {
        fold_secret_string_data(&mut new);
    }
    if rt.key() == CRD_KEY || rt.key() == NS_KEY {
        // Keep the server-written status of these types.
        let keep = old_val.get("status").cloned();
        type_side_effects_on_write(rt, &mut new, name)?;
        if rt.key() == CRD_KEY
            && let Some(k) = keep
            && let Some(conds) = k.get("conditions")
        {
            new["status"]["conditions"] = conds.clone();
        }
    }
    if !via_apply && (opts.field_manager.is_some() || old_meta.get("managedFields").is_some()) {
        let mgr = opts
            .field_manager
            .clone()
            .or_else(|| opts.default_manager.clone())
            .unwrap_or_else(|| "unknown".to_string());
        apply::record_update(Some(&old_val), &mut new, &mgr, sub, schema_of(rt));
    }
    if deleting && finalizers(&new).is_empty() {
        if opts.dry_run {
            return Ok(Written {
                json: Bytes::from(serde_json::to_vec(&new).unwrap_or_default()),
                created: false,
            });
        }
        let mut work = Vec::new();
        let json = remove(st, &rt.key(), ns, name, new, false, &mut work);
        drain(st, work);
        return Ok(Written {
            json,
            created: false,
        });
    }
    if new == old_val {
        return Ok(Written {
            json: old.json.bytes(),
            created: false,
        });
    }
    if opts.dry_run {
        return Ok(Written {
            json: Bytes::from(serde_json::to_vec(&new).unwrap_or_default()),
            created: false,
        });
    }
    let obj = st.commit_put(&rt.key(), ns, name, new);
    Ok(Written {
        json: obj.json.bytes(),
        created: false,
    })
}

#[derive(Debug)]
pub(crate) enum Work {
    Gc(String),
    CheckNs(String),
}
