//! HTTP request handling shared by the in-process client and the HTTP server.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, header};
use http_body_util::{BodyExt, Limited};
use serde_json::{Value, json};

use crate::discovery::{group_list, openapi_gv, openapi_root, resource_list};
use crate::error::{ApiError, ApiResult};
use crate::list::list_bytes;
use crate::patch::patch;
use crate::response::{
    HubBody, convert_version, error_response, json_response, respond, to_partial,
};
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::State;
use crate::store::ops::{self, DeleteOpts, WriteOpts};
use crate::table::TableCtx;
use crate::{Inner, Verb, list, watch};

pub(crate) const MAX_BODY: usize = 3 * 1024 * 1024;

/// The in-process `tower::Service` behind [`crate::Hub::client`].
#[derive(Clone)]
pub(crate) struct HubService {
    inner: Arc<Inner>,
}

impl HubService {
    pub fn new(inner: Arc<Inner>) -> HubService {
        HubService { inner }
    }
}

impl<B> tower::Service<Request<B>> for HubService
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: std::fmt::Display + std::fmt::Debug + Send + Sync + std::error::Error + 'static,
{
    type Response = Response<HubBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<HubBody>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let inner = self.inner.clone();
        Box::pin(async move { Ok(serve_request(inner, req).await) })
    }
}

/// Reads the body (bounded) and answers.
pub(crate) async fn serve_request<B>(inner: Arc<Inner>, req: Request<B>) -> Response<HubBody>
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    let (parts, body) = req.into_parts();
    if let Some(len) = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
        && len > MAX_BODY
    {
        return error_response(&ApiError::too_large());
    }
    let bytes = match Limited::new(body, MAX_BODY).collect().await {
        Ok(c) => c.to_bytes(),
        Err(e) => {
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some()
            {
                return error_response(&ApiError::too_large());
            }
            return error_response(&ApiError::bad_request(format!(
                "error reading request body: {e}"
            )));
        }
    };
    handle(&inner, &parts, bytes)
}

pub(crate) fn query_map(q: Option<&str>) -> HashMap<String, String> {
    let mut m = HashMap::new();
    for pair in q.unwrap_or("").split('&').filter(|s| !s.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        m.insert(decode(k), decode(v));
    }
    m
}

fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                let h = std::str::from_utf8(&b[i + 1..i + 3])
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok());
                match h {
                    Some(x) => {
                        out.push(x);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

struct ResPath {
    group: String,
    version: String,
    ns: Option<String>,
    plural: String,
    name: Option<String>,
    sub: Option<String>,
    watch_prefix: bool,
}

fn parse_res_path(segs: &[&str]) -> Option<ResPath> {
    let (group, version, rest) = match segs {
        ["api", v, rest @ ..] => (String::new(), v.to_string(), rest),
        ["apis", g, v, rest @ ..] => (g.to_string(), v.to_string(), rest),
        _ => return None,
    };
    let (watch_prefix, rest) = match rest {
        ["watch", r @ ..] => (true, r),
        r => (false, r),
    };
    let (ns, rest) = match rest {
        ["namespaces", ns, r @ ..]
            if !r.is_empty() && !(r.len() == 1 && (r[0] == "status" || r[0] == "finalize")) =>
        {
            (Some(ns.to_string()), r)
        }
        r => (None, r),
    };
    let (plural, name, sub) = match rest {
        [p] => (p.to_string(), None, None),
        [p, n] => (p.to_string(), Some(n.to_string()), None),
        [p, n, s] => (p.to_string(), Some(n.to_string()), Some(s.to_string())),
        _ => return None,
    };
    Some(ResPath {
        group,
        version,
        ns,
        plural,
        name,
        sub,
        watch_prefix,
    })
}

/// `Accept: application/json;as=PartialObjectMetadata[List];g=meta.k8s.io;v=v1` (kube-rs
/// `Api<PartialObjectMetadata<K>>`, metadata watchers).
fn accepts_partial(parts: &http::request::Parts) -> bool {
    parts
        .headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| {
            v.split(',')
                .next()
                .is_some_and(|first| first.contains("as=PartialObjectMetadata"))
        })
}

fn accepts_table(parts: &http::request::Parts) -> bool {
    parts
        .headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| {
            v.split(',')
                .next()
                .is_some_and(|first| first.contains("as=Table"))
        })
}

fn content_type(parts: &http::request::Parts) -> String {
    parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

fn lock(inner: &Inner) -> std::sync::MutexGuard<'_, State> {
    inner.state.lock().unwrap_or_else(|e| e.into_inner())
}

pub(crate) fn handle(
    inner: &Arc<Inner>,
    parts: &http::request::Parts,
    body: Bytes,
) -> Response<HubBody> {
    let path = parts.uri.path().to_string();
    let q = query_map(parts.uri.query());
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    match segs.as_slice() {
        ["healthz", ..] | ["readyz", ..] | ["livez", ..] => {
            return respond(200, "text/plain; charset=utf-8", "ok");
        }
        ["version"] => {
            // a fault on `version` (GET): the API server does not tell its version
            if let Some(code) = inner.take_fault(Verb::Get, "version") {
                return error_response(&ApiError::new(
                    code,
                    "ServiceUnavailable",
                    format!("injected fault: {code}"),
                ));
            }
            return json_response(
                200,
                &json!({"major": "1", "minor": "37", "gitVersion": "v1.37.0-argocd-pull-hub",
                    "gitCommit": "", "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z",
                    "goVersion": "rust", "compiler": "rustc", "platform": "linux/amd64"}),
            );
        }
        ["api"] => {
            return json_response(
                200,
                &json!({"kind": "APIVersions", "versions": ["v1"],
                    "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": ""}]}),
            );
        }
        ["apis"] => return json_response(200, &group_list(&lock(inner))),
        ["apis", g] => {
            let st = lock(inner);
            let gl = group_list(&st);
            return match gl["groups"]
                .as_array()
                .and_then(|a| a.iter().find(|x| x["name"] == *g))
            {
                Some(grp) => {
                    let mut grp = grp.clone();
                    grp["kind"] = json!("APIGroup");
                    grp["apiVersion"] = json!("v1");
                    json_response(200, &grp)
                }
                None => error_response(&ApiError::no_resource()),
            };
        }
        ["api", v] => return resource_list(&lock(inner), "", v),
        ["apis", g, v] => return resource_list(&lock(inner), g, v),
        ["openapi", "v3"] => return json_response(200, &openapi_root(&lock(inner))),
        ["openapi", "v3", "api", v] => return openapi_gv(&lock(inner), "", v),
        ["openapi", "v3", "apis", g, v] => return openapi_gv(&lock(inner), g, v),
        ["openapi", ..] | ["swagger.json"] => return error_response(&ApiError::no_resource()),
        _ => {}
    }
    let Some(rp) = parse_res_path(&segs) else {
        return error_response(&ApiError::no_resource());
    };
    let is_watch =
        rp.watch_prefix || matches!(q.get("watch").map(|s| s.as_str()), Some("true") | Some("1"));
    let method = parts.method.clone();
    let verb = match (&method, rp.name.is_some()) {
        (&Method::GET, true) if is_watch => Verb::Watch,
        (&Method::GET, true) => Verb::Get,
        (&Method::GET, false) if is_watch => Verb::Watch,
        (&Method::GET, false) => Verb::List,
        (&Method::POST, false) => Verb::Create,
        (&Method::PUT, true) => Verb::Update,
        (&Method::PATCH, true) => Verb::Patch,
        (&Method::DELETE, true) => Verb::Delete,
        (&Method::DELETE, false) => Verb::DeleteCollection,
        _ => {
            inner.count(Verb::Get, &rp.plural, None);
            return error_response(&ApiError::method_not_allowed());
        }
    };
    inner.count(verb, &rp.plural, rp.sub.as_deref());
    inner.record(
        verb,
        &rp.plural,
        rp.sub.as_deref(),
        rp.ns.as_deref(),
        rp.name.as_deref(),
    );
    if let Some(code) = inner.take_fault(verb, &rp.plural) {
        return injected(code, &rp);
    }
    match dispatch(inner, parts, &q, &rp, verb, body) {
        Ok(r) => r,
        Err(e) => error_response(&e),
    }
}

fn injected(code: u16, rp: &ResPath) -> Response<HubBody> {
    let name = rp.name.clone().unwrap_or_default();
    let e = match code {
        409 => ApiError::modified(&rp.plural, &rp.group, &name),
        500 => ApiError::internal("injected fault: internal error"),
        429 => ApiError::new(429, "TooManyRequests", "injected fault: too many requests"),
        404 => ApiError::not_found(&rp.plural, &rp.group, &name),
        503 => ApiError::new(
            503,
            "ServiceUnavailable",
            "injected fault: service unavailable",
        ),
        c => ApiError::new(c, "InternalError", format!("injected fault: {c}")),
    };
    error_response(&e)
}

fn parse_json_body(body: &Bytes, ct: &str) -> ApiResult<Value> {
    if ct.contains("protobuf") || ct.contains("cbor") {
        return Err(ApiError::unsupported_media(ct));
    }
    let yaml = ct.contains("yaml");
    crate::util::parse_body(body, yaml).map_err(|e| {
        ApiError::bad_request(format!("couldn't get version/kind; json parse error: {e}"))
    })
}

fn dry_run(q: &HashMap<String, String>) -> ApiResult<bool> {
    match q.get("dryRun").map(|s| s.as_str()) {
        None | Some("") => Ok(false),
        Some("All") => Ok(true),
        Some(other) => Err(ApiError::bad_request(format!(
            "Invalid dryRun value: {other:?}: supported values: \"All\""
        ))),
    }
}

fn write_opts(q: &HashMap<String, String>, parts: &http::request::Parts) -> ApiResult<WriteOpts> {
    // The real server names an unnamed manager after the User-Agent's product token.
    let ua_manager = parts
        .headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .and_then(|ua| ua.split('/').next())
        .filter(|s| !s.is_empty())
        .map(|s| s.chars().take(128).collect::<String>());
    Ok(WriteOpts {
        dry_run: dry_run(q)?,
        field_manager: q.get("fieldManager").filter(|s| !s.is_empty()).cloned(),
        force: matches!(q.get("force").map(|s| s.as_str()), Some("true") | Some("1")),
        default_manager: ua_manager,
    })
}

fn dispatch(
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

fn delete_opts(q: &HashMap<String, String>, body: &Bytes) -> ApiResult<DeleteOpts> {
    let mut o = DeleteOpts {
        dry_run: dry_run(q)?,
        propagation: q.get("propagationPolicy").cloned(),
        ..Default::default()
    };
    if !body.is_empty() {
        let v: Value = serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("invalid DeleteOptions: {e}")))?;
        if let Some(p) = v.get("propagationPolicy").and_then(|p| p.as_str()) {
            o.propagation = Some(p.to_string());
        }
        if let Some(u) = v.pointer("/preconditions/uid").and_then(|p| p.as_str()) {
            o.uid = Some(u.to_string());
        }
        if let Some(r) = v
            .pointer("/preconditions/resourceVersion")
            .and_then(|p| p.as_str())
        {
            o.rv = Some(r.to_string());
        }
        if let Some(d) = v.get("dryRun").and_then(|d| d.as_array()) {
            for x in d {
                match x.as_str() {
                    Some("All") => o.dry_run = true,
                    other => {
                        return Err(ApiError::bad_request(format!(
                            "Invalid dryRun value: {other:?}: supported values: \"All\""
                        )));
                    }
                }
            }
        }
    }
    if let Some(p) = &o.propagation
        && !matches!(p.as_str(), "Orphan" | "Background" | "Foreground")
    {
        return Err(ApiError::bad_request(format!(
            "propagationPolicy: Unsupported value: {p:?}: supported values: \"Foreground\", \"Background\", \"Orphan\""
        )));
    }
    Ok(o)
}
