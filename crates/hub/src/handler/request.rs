//! What a request says, read from its path, query, headers and body: the resource path, the
//! query parameters, what it accepts and sends, and its write and delete options.

use std::collections::HashMap;

use bytes::Bytes;
use http::header;
use serde_json::Value;

use crate::error::{ApiError, ApiResult};
use crate::store::ops::{DeleteOpts, WriteOpts};

pub(super) fn query_map(q: Option<&str>) -> HashMap<String, String> {
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

/// A resource request's path: `/api/v1/...` or `/apis/<group>/<version>/...`, optionally
/// `watch/`, then `namespaces/<ns>/`, the plural, the name and the subresource.
pub(super) struct ResPath {
    pub(super) group: String,
    pub(super) version: String,
    pub(super) ns: Option<String>,
    pub(super) plural: String,
    pub(super) name: Option<String>,
    pub(super) sub: Option<String>,
    pub(super) watch_prefix: bool,
}

pub(super) fn parse_res_path(segs: &[&str]) -> Option<ResPath> {
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
pub(super) fn accepts_partial(parts: &http::request::Parts) -> bool {
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

pub(super) fn accepts_table(parts: &http::request::Parts) -> bool {
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

pub(super) fn content_type(parts: &http::request::Parts) -> String {
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

pub(super) fn parse_json_body(body: &Bytes, ct: &str) -> ApiResult<Value> {
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

pub(super) fn write_opts(
    q: &HashMap<String, String>,
    parts: &http::request::Parts,
) -> ApiResult<WriteOpts> {
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

pub(super) fn delete_opts(q: &HashMap<String, String>, body: &Bytes) -> ApiResult<DeleteOpts> {
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
