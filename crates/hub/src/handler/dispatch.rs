//! A request on a resource type, served from the store: get, list, watch, create, update,
//! patch, delete and deletecollection (and the lock on the store they take).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Response, header};
use serde_json::Value;

use super::request::{
    ResPath, accepts_partial, accepts_table, content_type, delete_opts, parse_json_body, write_opts,
};
use crate::error::{ApiError, ApiResult};
use crate::list::list_bytes;
use crate::patch::patch;
use crate::response::{HubBody, convert_version, json_response, respond, to_partial};
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::State;
use crate::store::ops;
use crate::table::TableCtx;
use crate::{Inner, Verb, list, watch};

pub(super) fn lock(inner: &Inner) -> std::sync::MutexGuard<'_, State> {
    inner.state.lock().unwrap_or_else(|e| e.into_inner())
}

pub(super) fn dispatch(
    inner: &Arc<Inner>,
    parts: &http::request::Parts,
    q: &HashMap<String, String>,
    rp: &ResPath,
    verb: Verb,
    body: Bytes,
) -> ApiResult<Response<HubBody>> {
    // Parse request bodies before taking the store lock.
    let mut parsed = match verb {
        Verb::Create | Verb::Update => Some(parse_json_body(&body, &content_type(parts))),
        _ => None,
    };
    let mut st = lock(inner);
    let rt = st
        .lookup(&rp.group, &rp.version, &rp.plural)
        .ok_or_else(ApiError::no_resource)?;
    if rp.ns.is_some() && !rt.namespaced {
        return Err(ApiError::no_resource());
    }
    if let Some(sub) = &rp.sub {
        let ok = sub == "status" && rt.version(&rp.version).is_some_and(|v| v.status);
        if !ok {
            return Err(ApiError::no_resource());
        }
        if !matches!(verb, Verb::Get | Verb::Update | Verb::Patch) {
            return Err(ApiError::method_not_allowed());
        }
    }
    if rt.namespaced
        && rp.ns.is_none()
        && matches!(
            verb,
            Verb::Get | Verb::Update | Verb::Patch | Verb::Delete | Verb::Create
        )
    {
        // Namespaced objects are addressed inside a namespace.
        return Err(ApiError::no_resource());
    }
    let ns = rp.ns.clone().unwrap_or_default();
    let version = rp.version.as_str();
    let key = rt.key();
    let table = accepts_table(parts).then(|| TableCtx {
        version: version.to_string(),
        include: q
            .get("includeObject")
            .cloned()
            .unwrap_or_else(|| "Metadata".into()),
    });
    let partial = table.is_none() && accepts_partial(parts);
    let out = |json: &Bytes| {
        if partial {
            to_partial(json)
        } else {
            convert_version(&rt, version, json)
        }
    };
    match verb {
        Verb::Get => {
            let name = rp.name.as_deref().unwrap_or("");
            let o = st
                .get(&key, &ns, name)
                .ok_or_else(|| ApiError::not_found(&rt.plural, &rt.group, name))?;
            if let Some(t) = &table {
                let v = o.value();
                return Ok(json_response(
                    200,
                    &t.table_for(&rt, &[v], Some(o.rv), None, true),
                ));
            }
            Ok(respond(200, "application/json", out(&o.json.bytes())))
        }
        Verb::List => list::list(
            &mut st,
            &rt,
            &rp.version,
            rp.ns.as_deref(),
            q,
            table,
            partial,
        ),
        Verb::DeleteCollection => {
            let label =
                LabelSelector::parse(q.get("labelSelector").map(|s| s.as_str()).unwrap_or(""))
                    .map_err(ApiError::bad_request)?;
            let field =
                FieldSelector::parse(q.get("fieldSelector").map(|s| s.as_str()).unwrap_or(""))
                    .map_err(ApiError::bad_request)?;
            let dopts = delete_opts(q, &body)?;
            let store = st.store(&key).ok_or_else(ApiError::no_resource)?;
            let targets: Vec<(String, String)> = store
                .iter_ns(rp.ns.as_deref())
                .filter(|((n, m), o)| field.matches(n, m) && label.matches(&o.labels))
                .map(|(k, _)| k.clone())
                .collect();
            let deleted = ops::delete_collection(&mut st, &rt, targets, &dopts);
            let rv = st.rv;
            let items: Vec<Bytes> = deleted.iter().map(out).collect();
            Ok(respond(
                200,
                "application/json",
                list_bytes(&rt, version, rv, None, None, &items),
            ))
        }
        Verb::Watch => {
            let label =
                LabelSelector::parse(q.get("labelSelector").map(|s| s.as_str()).unwrap_or(""))
                    .map_err(ApiError::bad_request)?;
            let mut field =
                FieldSelector::parse(q.get("fieldSelector").map(|s| s.as_str()).unwrap_or(""))
                    .map_err(ApiError::bad_request)?;
            if let Some(n) = &rp.name {
                field = FieldSelector::parse(&format!("metadata.name={n}"))
                    .map_err(ApiError::bad_request)?;
            }
            let send_initial = q.get("sendInitialEvents").map(|s| s.as_str()) == Some("true");
            let bookmarks = q.get("allowWatchBookmarks").map(|s| s.as_str()) == Some("true");
            let rv_s = q.get("resourceVersion").map(|s| s.as_str()).unwrap_or("");
            if send_initial {
                if q.get("resourceVersionMatch").map(|s| s.as_str()) != Some("NotOlderThan") {
                    return Err(ApiError::invalid(
                        "WatchOptions",
                        "meta.k8s.io",
                        "",
                        "resourceVersionMatch",
                        "Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
                    ));
                }
                if !bookmarks {
                    return Err(ApiError::invalid(
                        "WatchOptions",
                        "meta.k8s.io",
                        "",
                        "allowWatchBookmarks",
                        "Forbidden: sendInitialEvents requires setting allowWatchBookmarks to true",
                    ));
                }
            }
            let from_rv = match rv_s {
                "" | "0" => None,
                s => Some(s.parse::<u64>().map_err(|_| {
                    ApiError::bad_request(format!(
                        "resourceVersion: Invalid value: {s:?}: must be a decimal integer"
                    ))
                })?),
            };
            let timeout = q
                .get("timeoutSeconds")
                .and_then(|s| s.parse::<u64>().ok())
                .map(Duration::from_secs)
                .unwrap_or(Duration::from_secs(1800));
            let p = watch::WatchParams {
                ns: rp.ns.clone(),
                label,
                field,
                from_rv,
                send_initial_events: send_initial,
                bookmarks,
                bookmark_interval: inner.opts.bookmark_interval,
                timeout,
                version: version.to_string(),
                table,
                partial,
            };
            let body = watch::start(&st, rt.clone(), st.committed.clone(), p);
            drop(st);
            let mut r = Response::new(body);
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            r.headers_mut().insert(
                header::CACHE_CONTROL,
                HeaderValue::from_static("no-cache, private"),
            );
            Ok(r)
        }
        Verb::Create => {
            let v = parsed.take().unwrap_or_else(|| Ok(Value::Null))?;
            let opts = write_opts(q, parts)?;
            let w = ops::create(&mut st, &rt, &ns, v, &opts)?;
            Ok(respond(201, "application/json", out(&w.json)))
        }
        Verb::Update => {
            let v = parsed.take().unwrap_or_else(|| Ok(Value::Null))?;
            let opts = write_opts(q, parts)?;
            let name = rp.name.as_deref().unwrap_or("");
            let w = ops::update(&mut st, &rt, &ns, name, v, rp.sub.as_deref(), &opts)?;
            Ok(respond(200, "application/json", out(&w.json)))
        }
        Verb::Patch => {
            let name = rp.name.as_deref().unwrap_or("");
            let ct = content_type(parts);
            let opts = write_opts(q, parts)?;
            let w = patch(
                &mut st,
                &rt,
                &ns,
                name,
                rp.sub.as_deref(),
                &ct,
                &body,
                &opts,
                version,
            )?;
            let code = if w.created { 201 } else { 200 };
            Ok(respond(code, "application/json", out(&w.json)))
        }
        Verb::Delete => {
            let name = rp.name.as_deref().unwrap_or("");
            let dopts = delete_opts(q, &body)?;
            let json = ops::delete(&mut st, &rt, &ns, name, &dopts)?;
            Ok(respond(200, "application/json", out(&json)))
        }
    }
}
