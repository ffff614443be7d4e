//! LIST: selectors, pagination (`limit`/`continue`), tables and partial metadata.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use http::Response;
use serde_json::{Value, json};

use crate::error::{ApiError, ApiResult};
use crate::registry::ResourceType;
use crate::response::*;
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::{Obj, Snapshot, State};
use crate::table::TableCtx;

pub(crate) fn list_bytes(
    rt: &ResourceType,
    version: &str,
    rv: u64,
    cont: Option<&str>,
    remaining: Option<usize>,
    items: &[Bytes],
) -> Bytes {
    let mut b = BytesMut::with_capacity(items.iter().map(|i| i.len() + 1).sum::<usize>() + 256);
    let mut meta = json!({"resourceVersion": rv.to_string()});
    if let Some(c) = cont {
        meta["continue"] = json!(c);
    }
    if let Some(r) = remaining {
        meta["remainingItemCount"] = json!(r);
    }
    b.put_slice(
        format!(
            "{{\"kind\":{},\"apiVersion\":{},\"metadata\":{},\"items\":[",
            Value::String(rt.list_kind.clone()),
            Value::String(rt.api_version(version)),
            meta
        )
        .as_bytes(),
    );
    for (i, it) in items.iter().enumerate() {
        if i > 0 {
            b.put_u8(b',');
        }
        b.put_slice(it);
    }
    b.put_slice(b"]}");
    b.freeze()
}

fn encode_continue(id: u64, off: usize, rv: u64) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(json!({"id": id, "off": off, "rv": rv}).to_string())
}

fn decode_continue(s: &str) -> ApiResult<(u64, usize, u64)> {
    use base64::Engine;
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(s.trim_end_matches('='))
        .map_err(|e| ApiError::bad_request(format!("continue key is not valid: {e}")))?;
    let v: Value = serde_json::from_slice(&raw)
        .map_err(|e| ApiError::bad_request(format!("continue key is not valid: {e}")))?;
    match (v["id"].as_u64(), v["off"].as_u64(), v["rv"].as_u64()) {
        (Some(i), Some(o), Some(r)) => Ok((i, o as usize, r)),
        _ => Err(ApiError::bad_request(
            "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)",
        )),
    }
}

pub(crate) fn list(
    st: &mut State,
    rt: &Arc<ResourceType>,
    version: &str,
    ns: Option<&str>,
    q: &HashMap<String, String>,
    table: Option<TableCtx>,
    partial: bool,
) -> ApiResult<Response<HubBody>> {
    let label = LabelSelector::parse(q.get("labelSelector").map(|s| s.as_str()).unwrap_or(""))
        .map_err(ApiError::bad_request)?;
    let field = FieldSelector::parse(q.get("fieldSelector").map(|s| s.as_str()).unwrap_or(""))
        .map_err(ApiError::bad_request)?;
    let limit = match q.get("limit").map(|s| s.as_str()) {
        None | Some("") => 0usize,
        Some(s) => s
            .parse::<i64>()
            .map_err(|_| ApiError::bad_request(format!("limit: Invalid value: {s:?}")))?
            .max(0) as usize,
    };
    if let Some(m) = q.get("resourceVersionMatch").map(|s| s.as_str()) {
        let rv = q.get("resourceVersion").map(|s| s.as_str()).unwrap_or("");
        match m {
            "" => {}
            "NotOlderThan" | "Exact" if rv.is_empty() => {
                return Err(ApiError::invalid(
                    "ListOptions",
                    "meta.k8s.io",
                    "",
                    "resourceVersionMatch",
                    "Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided",
                ));
            }
            "NotOlderThan" => {}
            "Exact" => {
                if rv.parse::<u64>().ok() != Some(st.rv) {
                    return Err(ApiError::gone(format!(
                        "too old resource version: {rv} ({})",
                        st.rv
                    )));
                }
            }
            other => {
                return Err(ApiError::bad_request(format!(
                    "resourceVersionMatch: Unsupported value: {other:?}"
                )));
            }
        }
    }
    let (items, rv, next, remaining): (Vec<Arc<Obj>>, u64, Option<String>, Option<usize>) =
        if let Some(c) = q.get("continue").filter(|s| !s.is_empty()) {
            let (id, off, rv) = decode_continue(c)?;
            let snap = st.snapshots.iter().find(|s| s.id == id).ok_or_else(|| {
                ApiError::gone("The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.")
            })?;
            if snap.rv != rv || off > snap.items.len() {
                return Err(ApiError::bad_request(
                    "continue key is not valid: inconsistent continue token",
                ));
            }
            let all = snap.items.clone();
            let end = if limit == 0 {
                all.len()
            } else {
                (off + limit).min(all.len())
            };
            let next = (end < all.len()).then(|| encode_continue(id, end, rv));
            let remaining = next.as_ref().map(|_| all.len() - end);
            (all[off..end].to_vec(), rv, next, remaining)
        } else {
            let store = st.store(&rt.key()).ok_or_else(ApiError::no_resource)?;
            let name = field.exact_name().map(String::from);
            let all: Vec<Arc<Obj>> = match (&name, &ns) {
                (Some(n), Some(ns)) => store
                    .objects
                    .get(&(ns.to_string(), n.clone()))
                    .filter(|o| label.matches(&o.labels))
                    .cloned()
                    .into_iter()
                    .collect(),
                _ => store
                    .iter_ns(ns)
                    .filter(|((ns, n), o)| field.matches(ns, n) && label.matches(&o.labels))
                    .map(|(_, o)| o.clone())
                    .collect(),
            };
            let rv = st.rv;
            if limit > 0 && all.len() > limit {
                st.snapshot_seq += 1;
                let id = st.snapshot_seq;
                let first = all[..limit].to_vec();
                let remaining = all.len() - limit;
                st.snapshots.push_back(Snapshot {
                    id,
                    rv,
                    items: Arc::new(all),
                });
                while st.snapshots.len() > st.snapshot_cap {
                    st.snapshots.pop_front();
                }
                (
                    first,
                    rv,
                    Some(encode_continue(id, limit, rv)),
                    Some(remaining),
                )
            } else {
                (all, rv, None, None)
            }
        };
    let remaining = if label.is_empty() && field.is_empty() {
        remaining
    } else {
        None
    };
    if let Some(t) = table {
        let vals: Vec<Value> = items.iter().map(|o| o.value()).collect();
        return Ok(json_response(
            200,
            &t.table_for(rt, &vals, Some(rv), next, true),
        ));
    }
    let bytes: Vec<Bytes> = items
        .iter()
        .map(|o| {
            if partial {
                to_partial(&o.json.bytes())
            } else {
                convert_version(rt, version, &o.json.bytes())
            }
        })
        .collect();
    let mut body = list_bytes(rt, version, rv, next.as_deref(), remaining, &bytes);
    if partial {
        // Same layout, generic list kind.
        let head = format!(
            "{{\"kind\":{},\"apiVersion\":{},",
            Value::String(rt.list_kind.clone()),
            Value::String(rt.api_version(version))
        );
        let rest = body.slice(head.len()..);
        let mut b = BytesMut::new();
        b.put_slice(b"{\"kind\":\"PartialObjectMetadataList\",\"apiVersion\":\"meta.k8s.io/v1\",");
        b.put_slice(&rest);
        body = b.freeze();
    }
    Ok(respond(200, "application/json", body))
}
