//! HTTP request handling shared by the in-process client and the HTTP server.
//!
//! This file: the in-process service, reading the body, the discovery and health paths, and
//! injected faults; `request`: what a request says; `dispatch`: resource requests on the store.

mod dispatch;
mod request;

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Method, Request, Response, header};
use http_body_util::{BodyExt, Limited};
use serde_json::json;

use crate::discovery::{group_list, openapi_gv, openapi_root, resource_list};
use crate::error::ApiError;
use crate::response::{HubBody, error_response, json_response, respond};
use crate::{Inner, Verb};
use dispatch::{dispatch, lock};
use request::{ResPath, parse_res_path, query_map};

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
