//! What a write must satisfy: names, metadata, namespaces, types, and the type-specific
//! side effects of a write (a Secret's `stringData`).

use super::*;

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

pub(super) fn truncate(s: &str) -> String {
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

pub(super) fn validate_name(rt: &ResourceType, name: &str) -> ApiResult<()> {
    let r = if rt.plural == "namespaces" && rt.group.is_empty() {
        util::validate_label(name)
    } else {
        util::validate_subdomain(name)
    };
    r.map_err(|m| ApiError::invalid(&rt.kind, &rt.group, name, "metadata.name", &m))
}

pub(super) fn validate_meta(rt: &ResourceType, name: &str, val: &Value) -> ApiResult<()> {
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
pub(super) fn check_namespace(
    st: &State,
    rt: &ResourceType,
    name: &str,
    ns: &str,
) -> ApiResult<()> {
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

pub(super) fn resolve_ns(rt: &ResourceType, url_ns: &str, val: &mut Value) -> ApiResult<String> {
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

pub(super) fn type_side_effects_on_write(
    rt: &ResourceType,
    new: &mut Value,
    name: &str,
) -> ApiResult<()> {
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
pub(super) fn fold_secret_string_data(secret: &mut Value) {
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
