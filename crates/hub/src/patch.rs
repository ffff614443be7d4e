//! PATCH: JSON patch, merge patch, strategic merge patch and server-side apply.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::{Value, json};

use crate::apply;
use crate::error::{ApiError, ApiResult};
use crate::registry::ResourceType;
use crate::store::State;
use crate::store::ops::{self, WriteOpts};

pub(crate) fn schema_of<'a>(rt: &'a ResourceType, version: &str) -> Option<&'a Value> {
    rt.version(version)
        .or_else(|| rt.version(&rt.storage_version))
        .and_then(|v| v.schema.as_deref())
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn patch(
    st: &mut State,
    rt: &Arc<ResourceType>,
    ns: &str,
    name: &str,
    sub: Option<&str>,
    ct: &str,
    body: &Bytes,
    opts: &WriteOpts,
    version: &str,
) -> ApiResult<ops::Written> {
    let schema = schema_of(rt, version).cloned();
    let is_apply = ct == "application/apply-patch+yaml" || ct == "application/apply-patch+cbor";
    if opts.force && !is_apply {
        return Err(ApiError::bad_request(
            "force: Forbidden: may not be specified for non-apply patch",
        ));
    }
    let existing = st.get(&rt.key(), ns, name);
    if is_apply {
        if ct.ends_with("cbor") {
            return Err(ApiError::unsupported_media(ct));
        }
        let mgr = opts.field_manager.clone().ok_or_else(|| {
            ApiError::bad_request(
                "PATCH, application/apply-patch+yaml requires fieldManager to be set",
            )
        })?;
        let mut cfg = crate::util::parse_body(body, true)
            .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?;
        ops::check_type(rt, &mut cfg)?;
        let cfg_name = cfg
            .pointer("/metadata/name")
            .and_then(|n| n.as_str())
            .unwrap_or("")
            .to_owned();
        // The apiserver merges the configuration onto the live object before it compares names,
        // so a configuration without a name applies to an existing object (kube-lease-manager
        // relies on it); creating through apply needs the name.
        if cfg_name.is_empty() && existing.is_some() {
            if !cfg.get("metadata").is_some_and(Value::is_object) {
                cfg["metadata"] = json!({});
            }
            cfg["metadata"]["name"] = json!(name);
        } else if cfg_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({cfg_name}) does not match the name on the URL ({name})"
            )));
        }
        let cfg_ns = cfg
            .pointer("/metadata/namespace")
            .and_then(|n| n.as_str())
            .unwrap_or("");
        if rt.namespaced && !cfg_ns.is_empty() && cfg_ns != ns {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        let live = existing.as_ref().map(|o| o.value());
        let av = rt.api_version(version);
        let input = apply::ApplyInput {
            live: live.as_ref(),
            cfg: &cfg,
            manager: &mgr,
            force: opts.force,
            schema: schema.as_ref(),
            status_request: sub == Some("status"),
            status_sub: rt.has_status(),
            api_version: &av,
        };
        let new = apply::apply(&input).map_err(|c| {
            let causes: Vec<Value> = c
                .0
                .iter()
                .map(|(m, a, p)| json!({"reason": "FieldManagerConflict", "message": format!("conflict with \"{m}\" using {a}"), "field": p}))
                .collect();
            ApiError::new(409, "Conflict", c.message())
                .with_details(json!({"name": name, "group": rt.group, "kind": rt.plural, "causes": causes}))
        })?;
        return match existing {
            None => {
                if sub.is_some() {
                    return Err(ApiError::not_found(&rt.plural, &rt.group, name));
                }
                let mut new = new;
                new["apiVersion"] = json!(rt.storage_api_version());
                new["kind"] = json!(rt.kind);
                ops::create(
                    st,
                    rt,
                    ns,
                    new,
                    &WriteOpts {
                        field_manager: None,
                        ..opts.clone()
                    },
                )
                .map(|mut w| {
                    w.created = true;
                    w
                })
            }
            Some(old) => ops::finish_update(st, rt, ns, name, &old, new, sub, opts, true),
        };
    }
    let old = existing.ok_or_else(|| ApiError::not_found(&rt.plural, &rt.group, name))?;
    let mut doc = old.value();
    match ct {
        "application/merge-patch+json" => {
            let p: Value = serde_json::from_slice(body)
                .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
            if !p.is_object() {
                return Err(ApiError::bad_request(
                    "error decoding patch: a merge patch must be a JSON object",
                ));
            }
            json_patch::merge(&mut doc, &p);
        }
        "application/json-patch+json" => {
            let p: json_patch::Patch = serde_json::from_slice(body)
                .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
            apply_json_patch(&mut doc, &p)?;
        }
        "application/strategic-merge-patch+json" => {
            if !rt.builtin {
                return Err(ApiError::unsupported_media(ct));
            }
            let p: Value = serde_json::from_slice(body)
                .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
            if !p.is_object() {
                return Err(ApiError::bad_request(
                    "error decoding patch: a strategic merge patch must be a JSON object",
                ));
            }
            strategic_merge(&mut doc, &p);
        }
        other => return Err(ApiError::unsupported_media(other)),
    }
    // A patch may not change identity.
    if doc.pointer("/metadata/name").and_then(|n| n.as_str()) != Some(name) {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({}) does not match the name on the URL ({name})",
            doc.pointer("/metadata/name")
                .and_then(|n| n.as_str())
                .unwrap_or("")
        )));
    }
    ops::finish_update(st, rt, ns, name, &old, doc, sub, opts, false)
}

/// RFC 6902 JSON patch with the apiserver's (evanphx/json-patch) leniency: a `test` for `null`
/// succeeds when the path is missing but its parent exists (kube-rs `finalizer()` relies on it).
pub(crate) fn apply_json_patch(doc: &mut Value, p: &json_patch::Patch) -> ApiResult<()> {
    let fail = |e: String| {
        ApiError::new(
            422,
            "Invalid",
            format!("the server rejected our request due to an error in our request: {e}"),
        )
    };
    for op in p.iter() {
        if let json_patch::PatchOperation::Test(t) = op
            && t.value.is_null()
        {
            let path = t.path.as_str();
            if doc.pointer(path).is_none() {
                let parent = path.rsplit_once('/').map(|(p, _)| p).unwrap_or("");
                if doc.pointer(parent).is_some() {
                    continue;
                }
                return Err(fail(format!(
                    "test operation does not apply: is missing path: {path}"
                )));
            }
        }
        json_patch::patch(doc, std::slice::from_ref(op)).map_err(|e| fail(e.to_string()))?;
    }
    Ok(())
}

/// Strategic merge patch for built-ins: a JSON merge patch in which lists of objects that all
/// carry `name` are merged by name, `$patch: delete` removes an item, `$retainKeys` and other
/// directives are ignored.
pub(crate) fn strategic_merge(doc: &mut Value, patch: &Value) {
    match (doc.as_object_mut(), patch.as_object()) {
        (Some(d), Some(p)) => {
            for (k, pv) in p {
                if k.starts_with('$') {
                    continue;
                }
                if pv.is_null() {
                    d.remove(k);
                    continue;
                }
                match d.get_mut(k) {
                    Some(dv) if dv.is_object() && pv.is_object() => strategic_merge(dv, pv),
                    Some(dv) if dv.is_array() && pv.is_array() && by_name(dv) && by_name(pv) => {
                        let da = dv.as_array_mut().expect("array");
                        for item in pv.as_array().expect("array") {
                            let n = item.get("name").cloned();
                            let del = item.get("$patch").and_then(|x| x.as_str()) == Some("delete");
                            let pos = da.iter().position(|x| x.get("name") == n.as_ref());
                            match (pos, del) {
                                (Some(i), true) => {
                                    da.remove(i);
                                }
                                (Some(i), false) => strategic_merge(&mut da[i], item),
                                (None, false) => {
                                    let mut it = item.clone();
                                    strip_directives(&mut it);
                                    da.push(it)
                                }
                                (None, true) => {}
                            }
                        }
                    }
                    _ => {
                        let mut v = pv.clone();
                        strip_directives(&mut v);
                        d.insert(k.clone(), v);
                    }
                }
            }
        }
        _ => *doc = patch.clone(),
    }
}

pub(crate) fn by_name(v: &Value) -> bool {
    v.as_array().is_some_and(|a| {
        a.iter()
            .all(|x| x.get("name").is_some_and(|n| n.is_string()))
    })
}

pub(crate) fn strip_directives(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|k, _| !k.starts_with('$'));
            m.values_mut().for_each(strip_directives);
        }
        Value::Array(a) => a.iter_mut().for_each(strip_directives),
        _ => {}
    }
}
