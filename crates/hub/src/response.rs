//! Responses: the body type, status and JSON answers, the forms an object is served in
//! (another version of its CRD, `PartialObjectMetadata`).

use std::convert::Infallible;

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::{BodyExt, Full};
use serde_json::{Value, json};

use crate::error::ApiError;
use crate::registry::ResourceType;

pub(crate) type HubBody = http_body_util::combinators::UnsyncBoxBody<Bytes, Infallible>;

pub(crate) fn full(b: impl Into<Bytes>) -> HubBody {
    Full::new(b.into())
        .map_err(|e: Infallible| match e {})
        .boxed_unsync()
}

pub(crate) fn respond(code: u16, ct: &str, body: impl Into<Bytes>) -> Response<HubBody> {
    let mut r = Response::new(full(body));
    *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_str(ct).unwrap_or(HeaderValue::from_static("application/json")),
    );
    r
}

pub(crate) fn json_response(code: u16, v: &Value) -> Response<HubBody> {
    respond(code, "application/json", v.to_string())
}

pub(crate) fn error_response(e: &ApiError) -> Response<HubBody> {
    json_response(e.code, &e.to_status())
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

pub(crate) fn version_priority(v: &str) -> (u8, u32, u32) {
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

pub(crate) fn sorted_versions(rt: &ResourceType) -> Vec<String> {
    let mut v: Vec<String> = rt.versions.iter().map(|x| x.name.clone()).collect();
    v.sort_by_key(|b| std::cmp::Reverse(version_priority(b)));
    v
}

/// The `meta.k8s.io/v1 PartialObjectMetadata` form of an object.
pub(crate) fn to_partial(json: &Bytes) -> Bytes {
    let v: Value = serde_json::from_slice(json).unwrap_or_default();
    let p = json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
        "metadata": v.get("metadata").cloned().unwrap_or(json!({}))});
    Bytes::from(p.to_string())
}
