//! HTTP request handling shared by the in-process client and the HTTP server.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited};
use serde_json::{Value, json};

use crate::error::{ApiError, ApiResult};
use crate::registry::ResourceType;
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::ops::{self, DeleteOpts, WriteOpts};
use crate::store::{Obj, Snapshot, State};
use crate::table::TableCtx;
use crate::{Inner, Verb, apply, watch};

pub(crate) type HubBody = http_body_util::combinators::UnsyncBoxBody<Bytes, Infallible>;

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

fn full(b: impl Into<Bytes>) -> HubBody {
    Full::new(b.into())
        .map_err(|e: Infallible| match e {})
        .boxed_unsync()
}

fn respond(code: u16, ct: &str, body: impl Into<Bytes>) -> Response<HubBody> {
    let mut r = Response::new(full(body));
    *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_str(ct).unwrap_or(HeaderValue::from_static("application/json")),
    );
    r
}

fn json_response(code: u16, v: &Value) -> Response<HubBody> {
    respond(code, "application/json", v.to_string())
}

pub(crate) fn error_response(e: &ApiError) -> Response<HubBody> {
    json_response(e.code, &e.to_status())
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

/// Version conversion (conversion strategy None: only apiVersion changes).
pub(crate) fn convert_version(rt: &ResourceType, version: &str, json: &Bytes) -> Bytes {
    if version == rt.storage_version {
        return json.clone();
    }
    let mut v: Value = serde_json::from_slice(json).unwrap_or_default();
    v["apiVersion"] = Value::String(rt.api_version(version));
    Bytes::from(v.to_string())
}

fn version_priority(v: &str) -> (u8, u32, u32) {
    // v1 > v1beta2 > v1beta1 > v1alpha1 ; higher major first
    let rest = v.strip_prefix('v').unwrap_or("");
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    let major = digits.parse::<u32>().unwrap_or(0);
    let tail = &rest[digits.len()..];
    let (stage, minor) = if tail.is_empty() {
        (3, 0)
    } else if let Some(b) = tail.strip_prefix("beta") {
        (2, b.parse().unwrap_or(0))
    } else if let Some(a) = tail.strip_prefix("alpha") {
        (1, a.parse().unwrap_or(0))
    } else {
        (0, 0)
    };
    (stage, major, minor)
}

fn sorted_versions(rt: &ResourceType) -> Vec<String> {
    let mut v: Vec<String> = rt.versions.iter().map(|x| x.name.clone()).collect();
    v.sort_by_key(|b| std::cmp::Reverse(version_priority(b)));
    v
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

/// The `meta.k8s.io/v1 PartialObjectMetadata` form of an object.
pub(crate) fn to_partial(json: &Bytes) -> Bytes {
    let v: Value = serde_json::from_slice(json).unwrap_or_default();
    let p = json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
        "metadata": v.get("metadata").cloned().unwrap_or(json!({}))});
    Bytes::from(p.to_string())
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

fn group_list(st: &State) -> Value {
    let mut groups: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    let mut order: Vec<String> = Vec::new();
    let mut types: Vec<&Arc<ResourceType>> = st.stores.values().map(|s| &s.rt).collect();
    types.sort_by_key(|t| (!t.builtin, t.group.clone()));
    for rt in types {
        if rt.group.is_empty() {
            continue;
        }
        if !groups.contains_key(&rt.group) {
            order.push(rt.group.clone());
        }
        let e = groups.entry(rt.group.clone()).or_default();
        for v in sorted_versions(rt) {
            if !e.contains(&v) {
                e.push(v);
            }
        }
    }
    let arr: Vec<Value> = order
        .iter()
        .map(|g| {
            let mut vs = groups[g].clone();
            vs.sort_by_key(|b| std::cmp::Reverse(version_priority(b)));
            let versions: Vec<Value> = vs
                .iter()
                .map(|v| json!({"groupVersion": format!("{g}/{v}"), "version": v}))
                .collect();
            json!({"name": g, "versions": versions, "preferredVersion": versions[0]})
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": arr})
}

/// `/openapi/v3`: the group-version index kubectl reads to learn that the server validates
/// fields itself (`fieldValidation`), so it skips client-side schema validation.
fn openapi_root(st: &State) -> Value {
    let mut paths = serde_json::Map::new();
    for s in st.stores.values() {
        for v in &s.rt.versions {
            let gv = if s.rt.group.is_empty() {
                format!("api/{}", v.name)
            } else {
                format!("apis/{}/{}", s.rt.group, v.name)
            };
            paths.insert(
                gv.clone(),
                json!({"serverRelativeURL": format!("/openapi/v3/{gv}?hash={}", st.rv)}),
            );
        }
    }
    json!({"paths": paths})
}

/// A minimal OpenAPI v3 document of one group-version: the PATCH operations with their query
/// parameters and GVK extension (no schemas).
fn openapi_gv(st: &State, group: &str, version: &str) -> Response<HubBody> {
    let mut paths = serde_json::Map::new();
    let params = json!([
        {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
        {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
        {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
        {"name": "force", "in": "query", "schema": {"type": "boolean", "uniqueItems": true}}
    ]);
    let mut found = false;
    for s in st.stores.values() {
        let rt = &s.rt;
        if rt.group != group || rt.version(version).is_none() {
            continue;
        }
        found = true;
        let prefix = if group.is_empty() {
            format!("/api/{version}")
        } else {
            format!("/apis/{group}/{version}")
        };
        let p = if rt.namespaced {
            format!("{prefix}/namespaces/{{namespace}}/{}/{{name}}", rt.plural)
        } else {
            format!("{prefix}/{}/{{name}}", rt.plural)
        };
        let gvk = json!({"group": group, "version": version, "kind": rt.kind});
        paths.insert(
            p,
            json!({"patch": {"operationId": format!("patch{}", rt.kind), "parameters": params,
                "x-kubernetes-action": "patch", "x-kubernetes-group-version-kind": gvk,
                "responses": {"200": {"description": "OK"}}}}),
        );
    }
    if !found {
        return error_response(&ApiError::no_resource());
    }
    json_response(
        200,
        &json!({"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "v1.37.0"},
            "paths": paths, "components": {"schemas": {}}}),
    )
}

fn resource_list(st: &State, group: &str, version: &str) -> Response<HubBody> {
    let mut resources = Vec::new();
    let mut types: Vec<&Arc<ResourceType>> = st
        .stores
        .values()
        .map(|s| &s.rt)
        .filter(|rt| rt.group == group && rt.version(version).is_some())
        .collect();
    if types.is_empty() {
        return error_response(&ApiError::no_resource());
    }
    types.sort_by_key(|t| t.plural.clone());
    for rt in types {
        resources.extend(rt.discovery(version));
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    json_response(
        200,
        &json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}),
    )
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

fn schema_of<'a>(rt: &'a ResourceType, version: &str) -> Option<&'a Value> {
    rt.version(version)
        .or_else(|| rt.version(&rt.storage_version))
        .and_then(|v| v.schema.as_deref())
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
        Verb::List => list(inner, &mut st, &rt, rp, q, table, partial),
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

#[allow(clippy::too_many_arguments)]
fn patch(
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
fn apply_json_patch(doc: &mut Value, p: &json_patch::Patch) -> ApiResult<()> {
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
fn strategic_merge(doc: &mut Value, patch: &Value) {
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

fn by_name(v: &Value) -> bool {
    v.as_array().is_some_and(|a| {
        a.iter()
            .all(|x| x.get("name").is_some_and(|n| n.is_string()))
    })
}

fn strip_directives(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|k, _| !k.starts_with('$'));
            m.values_mut().for_each(strip_directives);
        }
        Value::Array(a) => a.iter_mut().for_each(strip_directives),
        _ => {}
    }
}

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

fn list(
    _inner: &Arc<Inner>,
    st: &mut State,
    rt: &Arc<ResourceType>,
    rp: &ResPath,
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
    let version = rp.version.as_str();
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
            let all: Vec<Arc<Obj>> = match (&name, &rp.ns) {
                (Some(n), Some(ns)) => store
                    .objects
                    .get(&(ns.clone(), n.clone()))
                    .filter(|o| label.matches(&o.labels))
                    .cloned()
                    .into_iter()
                    .collect(),
                _ => store
                    .iter_ns(rp.ns.as_deref())
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
