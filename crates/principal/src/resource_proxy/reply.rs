//! The resource proxy's own HTTP answers (also those of container logs and the web terminal).

use std::convert::Infallible;

use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::{BodyExt, Full};

use argocd_pull_agent_core::resource::{reason_of, status_body};

/// A response of the proxy.
pub(crate) type Resp = Response<http_body_util::combinators::BoxBody<Bytes, Infallible>>;

/// A JSON response with `code` and `body`.
pub(crate) fn respond(code: u16, body: impl Into<Bytes>) -> Resp {
    let mut r = Response::new(Full::new(body.into()).boxed());
    *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    r
}

/// A Kubernetes `Status` failure with `code` and `message`.
pub(crate) fn failure(code: u16, message: &str) -> Resp {
    respond(code, status_body(code, reason_of(code), message))
}
