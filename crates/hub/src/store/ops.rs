//! Create / update / patch / delete with the real apiserver's semantics.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::{Map, Value, json};

use super::{CRD_KEY, NS_KEY, Obj, SECRET_KEY, State};
use crate::apply;
use crate::error::{ApiError, ApiResult};
use crate::registry::{self, ResourceType};
use crate::util;

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

/// Checks apiVersion/kind of a request body against the URL's type; normalizes apiVersion to
/// the storage version.
pub(crate) fn check_type(rt: &ResourceType, val: &mut Value) -> ApiResult<()> {
    if !val.is_object() {
        return Err(ApiError::bad_request(format!(
            "the object provided is not a JSON object: {}",
            truncate(&val.to_string())
        )));
    }
    let kind = val.get("kind").and_then(|k| k.as_str()).unwrap_or("");
    if kind.is_empty() {
        return Err(ApiError::bad_request(format!(
            "Object 'Kind' is missing in '{}'",
            truncate(&val.to_string())
        )));
    }
    let av = val.get("apiVersion").and_then(|k| k.as_str()).unwrap_or("");
    let served = rt.versions.iter().any(|v| rt.api_version(&v.name) == av);
    if !served {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({av}) does not match the expected API version ({})",
            rt.storage_api_version()
        )));
    }
    if kind != rt.kind {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({kind}) does not match the expected kind ({})",
            rt.kind
        )));
    }
    if !val
        .get("metadata")
        .is_none_or(|m| m.is_object() || m.is_null())
    {
        return Err(ApiError::bad_request(
            "metadata: must be an object".to_string(),
        ));
    }
    val["apiVersion"] = Value::String(rt.storage_api_version());
    Ok(())
}

fn truncate(s: &str) -> String {
    if s.len() > 200 {
        let mut end = 200;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}...", &s[..end])
    } else {
        s.to_string()
    }
}

fn validate_name(rt: &ResourceType, name: &str) -> ApiResult<()> {
    let r = if rt.plural == "namespaces" && rt.group.is_empty() {
        util::validate_label(name)
    } else {
        util::validate_subdomain(name)
    };
    r.map_err(|m| ApiError::invalid(&rt.kind, &rt.group, name, "metadata.name", &m))
}

fn validate_meta(rt: &ResourceType, name: &str, val: &Value) -> ApiResult<()> {
    let mut causes = Vec::new();
    for field in ["labels", "annotations"] {
        if let Some(m) = val.pointer(&format!("/metadata/{field}")) {
            match m.as_object() {
                Some(m) => {
                    for (k, v) in m {
                        if !v.is_string() {
                            causes.push((
                                format!("metadata.{field}.{k}"),
                                "Invalid value: must be a string".to_string(),
                            ));
                        } else if field == "labels"
                            && crate::selector::LabelSelector::parse(&format!(
                                "{k}={}",
                                v.as_str().unwrap_or("")
                            ))
                            .is_err()
                        {
                            causes.push((
                                "metadata.labels".to_string(),
                                format!("Invalid value: \"{}\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character", v.as_str().unwrap_or("")),
                            ));
                        }
                    }
                }
                None if m.is_null() => {}
                None => causes.push((
                    format!("metadata.{field}"),
                    "Invalid value: must be a map of strings".to_string(),
                )),
            }
        }
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid_many(&rt.kind, &rt.group, name, &causes))
    }
}

/// Namespace must exist and not be terminating (NamespaceLifecycle admission).
fn check_namespace(st: &State, rt: &ResourceType, name: &str, ns: &str) -> ApiResult<()> {
    match st.namespace_state(ns) {
        None => Err(ApiError::not_found("namespaces", "", ns)),
        Some(true) => Err(ApiError::forbidden(format!(
            "{} \"{name}\" is forbidden: unable to create new content in namespace {ns} because it is being terminated",
            crate::error::qualified(&rt.plural, &rt.group)
        ))
        .with_details(json!({"name": ns, "kind": "namespaces", "causes": [{"reason": "NamespaceTerminating", "message": format!("namespace {ns} is being terminated"), "field": "metadata.namespace"}]}))),
        Some(false) => Ok(()),
    }
}

fn resolve_ns(rt: &ResourceType, url_ns: &str, val: &mut Value) -> ApiResult<String> {
    let body_ns = meta_str(val, "namespace").unwrap_or("").to_string();
    if !rt.namespaced {
        meta_mut(val).remove("namespace");
        return Ok(String::new());
    }
    if !body_ns.is_empty() && !url_ns.is_empty() && body_ns != url_ns {
        return Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    let ns = if url_ns.is_empty() {
        body_ns
    } else {
        url_ns.to_string()
    };
    if ns.is_empty() {
        return Err(ApiError::bad_request(
            "namespace is required for a namespaced resource",
        ));
    }
    meta_mut(val).insert("namespace".into(), Value::String(ns.clone()));
    Ok(ns)
}

fn type_side_effects_on_write(rt: &ResourceType, new: &mut Value, name: &str) -> ApiResult<()> {
    if rt.key() == SECRET_KEY {
        fold_secret_string_data(new);
    }
    if rt.key() == CRD_KEY {
        registry::crd_to_type(new).map_err(|e| {
            let (field, msg) = e.split_once(": ").unwrap_or(("spec", e.as_str()));
            ApiError::invalid(&rt.kind, &rt.group, name, field, msg)
        })?;
        let status = registry::crd_status(new, &util::now_rfc3339());
        new["status"] = status;
    }
    if rt.key() == NS_KEY {
        if new.pointer("/spec/finalizers").is_none() {
            new["spec"] = json!({"finalizers": ["kubernetes"]});
        }
        let phase = if new.pointer("/metadata/deletionTimestamp").is_some() {
            "Terminating"
        } else {
            "Active"
        };
        new["status"] = json!({"phase": phase});
    }
    Ok(())
}

/// Like the real apiserver: a Secret's write-only `stringData` is merged into `data` (base64,
/// `stringData` wins) and dropped; `type` defaults to `Opaque`.
fn fold_secret_string_data(secret: &mut Value) {
    use base64::Engine as _;
    let Some(obj) = secret.as_object_mut() else {
        return;
    };
    if let Some(Value::Object(string_data)) = obj.remove("stringData") {
        let data = obj
            .entry("data")
            .or_insert_with(|| Value::Object(Map::new()));
        if !data.is_object() {
            *data = Value::Object(Map::new());
        }
        if let Some(data) = data.as_object_mut() {
            for (k, v) in string_data {
                let text = match v {
                    Value::String(s) => s,
                    other => other.to_string(),
                };
                let encoded = base64::engine::general_purpose::STANDARD.encode(text);
                data.insert(k, Value::String(encoded));
            }
        }
    }
    obj.entry("type")
        .or_insert_with(|| Value::String("Opaque".into()));
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

/// Removes an object now and queues the side effects.
fn remove(
    st: &mut State,
    key: &str,
    ns: &str,
    name: &str,
    val: Value,
    orphan: bool,
    work: &mut Vec<Work>,
) -> Bytes {
    let json = st.commit_remove(key, ns, name, val.clone());
    if key == CRD_KEY
        && let Ok(t) = registry::crd_to_type(&val)
    {
        let tkey = t.key();
        let items: Vec<(String, String, Arc<Obj>)> = st
            .store(&tkey)
            .map(|s| {
                s.objects
                    .iter()
                    .map(|((n, m), o)| (n.clone(), m.clone(), o.clone()))
                    .collect()
            })
            .unwrap_or_default();
        for (n, m, o) in items {
            let v = o.value();
            st.commit_remove(&tkey, &n, &m, v);
            if !o.uid.is_empty() {
                work.push(Work::Gc(o.uid.to_string()));
            }
        }
        st.unregister(&tkey);
    }
    if let Some(uid) = meta_str(&val, "uid") {
        if orphan {
            orphan_dependents(st, uid);
        } else {
            work.push(Work::Gc(uid.to_string()));
        }
    }
    if !ns.is_empty() && st.namespace_state(ns) == Some(true) {
        work.push(Work::CheckNs(ns.to_string()));
    }
    json
}

fn owner_exists(st: &State, r: &Value, dep_ns: &str) -> bool {
    let (Some(av), Some(kind), Some(name), Some(uid)) = (
        r.get("apiVersion").and_then(|x| x.as_str()),
        r.get("kind").and_then(|x| x.as_str()),
        r.get("name").and_then(|x| x.as_str()),
        r.get("uid").and_then(|x| x.as_str()),
    ) else {
        return false;
    };
    let Some(rt) = st.lookup_kind(av, kind) else {
        return false;
    };
    let ns = if rt.namespaced { dep_ns } else { "" };
    st.get(&rt.key(), ns, name).is_some_and(|o| &*o.uid == uid)
}

fn orphan_dependents(st: &mut State, uid: &str) {
    let Some(deps) = st.dependents.remove(uid) else {
        return;
    };
    for (key, ns, name) in deps {
        let Some(o) = st.get(&key, &ns, &name) else {
            continue;
        };
        let mut v = o.value();
        let Some(refs) = v
            .pointer_mut("/metadata/ownerReferences")
            .and_then(|r| r.as_array_mut())
        else {
            continue;
        };
        let before = refs.len();
        refs.retain(|r| r.get("uid").and_then(|u| u.as_str()) != Some(uid));
        if refs.len() != before {
            if refs.is_empty() {
                meta_mut(&mut v).remove("ownerReferences");
            }
            st.commit_put(&key, &ns, &name, v);
        }
    }
}

/// Runs queued garbage collection and namespace finalization to completion.
pub(crate) fn drain(st: &mut State, mut work: Vec<Work>) {
    let mut guard = 0usize;
    while let Some(w) = work.pop() {
        guard += 1;
        if guard > 10_000_000 {
            tracing::error!("hub: cascade did not converge");
            break;
        }
        match w {
            Work::Gc(uid) => {
                let Some(deps) = st.dependents.remove(uid.as_str()) else {
                    continue;
                };
                for (key, ns, name) in deps {
                    let Some(o) = st.get(&key, &ns, &name) else {
                        continue;
                    };
                    let mut v = o.value();
                    let refs: Vec<Value> = v
                        .pointer("/metadata/ownerReferences")
                        .and_then(|r| r.as_array())
                        .cloned()
                        .unwrap_or_default();
                    if !refs
                        .iter()
                        .any(|r| r.get("uid").and_then(|u| u.as_str()) == Some(uid.as_str()))
                    {
                        continue;
                    }
                    let others: Vec<Value> = refs
                        .into_iter()
                        .filter(|r| r.get("uid").and_then(|u| u.as_str()) != Some(uid.as_str()))
                        .collect();
                    if others.iter().any(|r| owner_exists(st, r, &ns)) {
                        meta_mut(&mut v).insert("ownerReferences".into(), Value::Array(others));
                        st.commit_put(&key, &ns, &name, v);
                    } else {
                        let _ =
                            delete_inner(st, &key, &ns, &name, &DeleteOpts::default(), &mut work);
                    }
                }
            }
            Work::CheckNs(ns) => {
                let empty = st
                    .stores
                    .values()
                    .filter(|s| s.rt.namespaced)
                    .all(|s| s.iter_ns(Some(&ns)).next().is_none());
                if !empty {
                    continue;
                }
                if let Some(o) = st.get(NS_KEY, "", &ns) {
                    let v = o.value();
                    if v.pointer("/metadata/deletionTimestamp").is_some()
                        && finalizers(&v).is_empty()
                    {
                        remove(st, NS_KEY, "", &ns, v, false, &mut work);
                    }
                }
            }
        }
    }
}

pub(crate) fn delete(
    st: &mut State,
    rt: &ResourceType,
    ns: &str,
    name: &str,
    opts: &DeleteOpts,
) -> ApiResult<Bytes> {
    let mut work = Vec::new();
    let r = delete_inner(st, &rt.key(), ns, name, opts, &mut work);
    drain(st, work);
    r
}

fn delete_inner(
    st: &mut State,
    key: &str,
    ns: &str,
    name: &str,
    opts: &DeleteOpts,
    work: &mut Vec<Work>,
) -> ApiResult<Bytes> {
    let rt = st.type_by_key(key).ok_or_else(ApiError::no_resource)?;
    let old = st
        .get(key, ns, name)
        .ok_or_else(|| ApiError::not_found(&rt.plural, &rt.group, name))?;
    let mut v = old.value();
    if let Some(uid) = &opts.uid
        && **uid != *old.uid
    {
        return Err(ApiError::conflict(
            &rt.plural,
            &rt.group,
            name,
            &format!(
                "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                old.uid
            ),
        ));
    }
    if let Some(rv) = &opts.rv
        && *rv != old.rv.to_string()
    {
        return Err(ApiError::conflict(
            &rt.plural,
            &rt.group,
            name,
            &format!(
                "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                old.rv
            ),
        ));
    }
    let orphan = opts.propagation.as_deref() == Some("Orphan");
    let is_ns = key == NS_KEY;
    let has_finalizers = !finalizers(&v).is_empty();
    if is_ns || has_finalizers {
        if v.pointer("/metadata/deletionTimestamp").is_some() {
            return Ok(old.json.bytes());
        }
        let m = meta_mut(&mut v);
        m.insert(
            "deletionTimestamp".into(),
            Value::String(util::now_rfc3339()),
        );
        m.insert("deletionGracePeriodSeconds".into(), json!(0));
        if is_ns {
            v["status"] = json!({"phase": "Terminating"});
        }
        if opts.dry_run {
            return Ok(Bytes::from(serde_json::to_vec(&v).unwrap_or_default()));
        }
        let obj = st.commit_put(key, ns, name, v);
        if is_ns {
            let keys: Vec<(String, String)> = st
                .stores
                .iter()
                .filter(|(_, s)| s.rt.namespaced)
                .flat_map(|(k, s)| {
                    s.iter_ns(Some(name))
                        .map(|((_, n), _)| (k.clone(), n.clone()))
                        .collect::<Vec<_>>()
                })
                .collect();
            for (k, n) in keys {
                let _ = delete_inner(st, &k, name, &n, &DeleteOpts::default(), work);
            }
            work.push(Work::CheckNs(name.to_string()));
        }
        return Ok(obj.json.bytes());
    }
    if opts.dry_run {
        return Ok(old.json.bytes());
    }
    Ok(remove(st, key, ns, name, v, orphan, work))
}

/// Deletes every object matching a filter; returns the deleted objects' final JSON.
pub(crate) fn delete_collection(
    st: &mut State,
    rt: &ResourceType,
    targets: Vec<(String, String)>,
    opts: &DeleteOpts,
) -> Vec<Bytes> {
    let mut work = Vec::new();
    let mut out = Vec::new();
    for (ns, name) in targets {
        if let Ok(j) = delete_inner(st, &rt.key(), &ns, &name, opts, &mut work) {
            out.push(j);
        }
    }
    drain(st, work);
    out
}
