//! Resync checksums and payloads, byte-compatible with the peer (I/O free).
//!
//! * spec checksum (peer: internal/resync/resync.go `generateSpecChecksum`): SHA-256 of Go's
//!   `json.Marshal` of `.spec` without `destination` (`.data` for a Secret or ConfigMap, `{}` for a
//!   ConfigMap without data);
//! * set checksum (peer: internal/resources/resources.go `Checksum`): SHA-256 over the sorted
//!   `Kind/Name/UID` strings joined with no separator; no resources → no checksum (`null`).
//!
//! Both travel as Go `[]byte`, i.e. standard base64 with padding in JSON, `null` when empty; this
//! module hands them around as that base64 string (`""` for none) so they compare as strings.
//!
//! Go's `json.Marshal` of the `map[string]any` the peer hashes: keys sorted, compact, `<` `>` `&`
//! U+2028 U+2029 escaped as `\u003c` `\u003e` `\u0026` `\u2028` `\u2029`, integers as written,
//! other numbers as `strconv.FormatFloat(f, 'f', -1, 64)` (exponent form below 1e-6 or from 1e21).

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::event::{Event, EventType, Target};

/// Base64 SHA-256 over the sorted `Kind/Name/UID` strings; `""` for an empty set.
pub fn set_checksum<I, S>(items: I) -> String
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    let mut v: Vec<String> = items.into_iter().map(|s| s.as_ref().to_string()).collect();
    if v.is_empty() {
        return String::new();
    }
    v.sort();
    B64.encode(Sha256::digest(v.concat().as_bytes()))
}

/// `Kind/Name/UID`.
pub fn set_item(kind: &str, name: &str, uid: &str) -> String {
    format!("{kind}/{name}/{uid}")
}

/// Base64 SHA-256 of Go's JSON of `.spec` without `destination` (`.data` for Secret/ConfigMap).
pub fn spec_checksum(obj: &Value) -> String {
    let kind = obj["kind"].as_str().unwrap_or_default();
    let empty = json!({});
    let spec = if kind == "Secret" || kind == "ConfigMap" {
        obj.get("data").unwrap_or(&empty)
    } else {
        obj.get("spec").unwrap_or(&Value::Null)
    };
    // the spec without its destination, encoded straight into the hash (no copy of the spec)
    let mut h = Sha256::new();
    crate::event::gojson::write_sorted_without(HashWriter(&mut h), spec, "destination")
        .expect("hashing a JSON value cannot fail");
    B64.encode(h.finalize())
}

/// `io::Write` into a SHA-256.
struct HashWriter<'a>(&'a mut Sha256);

impl std::io::Write for HashWriter<'_> {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.update(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// SHA-256 (hex) of Go's JSON of any value (internal change detection).
pub fn hash_value(v: &Value) -> String {
    hash_parts(&[v])
}

/// [`hash_value`] of the JSON array of `parts` (`hash_value(&json!([a, b]))`), without building
/// the array: each part is encoded straight into the hash. One part is hashed as itself
/// (`hash_parts(&[a])` is `hash_value(a)`, not the hash of `[a]`).
pub fn hash_parts(parts: &[&Value]) -> String {
    use std::io::Write as _;
    let mut h = Sha256::new();
    let single = parts.len() == 1;
    let mut w = HashWriter(&mut h);
    let ok = (|| -> std::io::Result<()> {
        if !single {
            w.write_all(b"[")?;
        }
        for (i, p) in parts.iter().enumerate() {
            if i > 0 {
                w.write_all(b",")?;
            }
            crate::event::gojson::write_sorted(&mut w, p)?;
        }
        if !single {
            w.write_all(b"]")?;
        }
        Ok(())
    })();
    ok.expect("hashing a JSON value cannot fail");
    hex::encode(h.finalize())
}

/// A checksum as it goes on the wire: `null` for none, else the base64 string.
pub fn checksum_value(sum: &str) -> Value {
    if sum.is_empty() {
        Value::Null
    } else {
        Value::String(sum.to_string())
    }
}

/// Reads a received `checksum` (Go `[]byte`): `null`, missing or `""` → `""`, else the canonical
/// base64 of its bytes. An error names what is wrong.
pub fn read_checksum(data: &Value) -> Result<String, String> {
    match data.get("checksum") {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) if s.is_empty() => Ok(String::new()),
        Some(Value::String(s)) => B64.decode(s).map(|b| B64.encode(b)).map_err(|e| {
            format!("checksum {s:?} is not standard base64 (a Go []byte): {e}; send the SHA-256 bytes base64-encoded")
        }),
        Some(other) => Err(format!(
            "checksum must be a base64 string or null (a Go []byte), got {other}"
        )),
    }
}

/// `request-update` (peer: `RequestUpdate{name, namespace,omitempty, uid, kind, checksum}`).
pub fn request_update(
    source: &str,
    kind: &str,
    name: &str,
    ns: &str,
    uid: &str,
    sum: &str,
) -> Event {
    let mut d = serde_json::Map::new();
    d.insert("name".into(), json!(name));
    if !ns.is_empty() {
        d.insert("namespace".into(), json!(ns));
    }
    d.insert("uid".into(), json!(uid));
    d.insert("kind".into(), json!(kind));
    d.insert("checksum".into(), checksum_value(sum));
    Event::request(
        source,
        EventType::RequestUpdate,
        Target::ResourceResync,
        Value::Object(d),
    )
}

/// `request-synced-resource-list` (peer: `RequestSyncedResourceList{checksum}`).
pub fn request_synced_list(source: &str, sum: &str) -> Event {
    Event::request(
        source,
        EventType::RequestSyncedResourceList,
        Target::ResourceResync,
        json!({"checksum": checksum_value(sum)}),
    )
}

/// `response-synced-resource` (peer: `SyncedResource{name, namespace,omitempty, uid, kind}`).
pub fn response_synced(source: &str, kind: &str, name: &str, ns: &str, uid: &str) -> Event {
    let mut d = serde_json::Map::new();
    d.insert("name".into(), json!(name));
    if !ns.is_empty() {
        d.insert("namespace".into(), json!(ns));
    }
    d.insert("uid".into(), json!(uid));
    d.insert("kind".into(), json!(kind));
    Event::request(
        source,
        EventType::ResponseSyncedResource,
        Target::ResourceResync,
        Value::Object(d),
    )
}

/// `request-resource-resync` (peer: `RequestResourceResync{}`).
pub fn request_resource_resync(source: &str) -> Event {
    Event::request(
        source,
        EventType::RequestResourceResync,
        Target::ResourceResync,
        json!({}),
    )
}

/// Our extension of `request-resource-resync`: the principal also sends its set checksum
/// (`request-synced-resource-list`) after the `request-update`s, so a resource it lacks is found
/// too. Our agent's periodic rounds ask for it; the peer's `RequestResourceResync{}` (and its
/// principal) ignore the field.
pub const WITH_SYNCED_LIST: &str = "includeSyncedResourceList";

/// `request-resource-resync` asking for the set checksum too ([`WITH_SYNCED_LIST`]).
pub fn request_resource_resync_with_list(source: &str) -> Event {
    Event::request(
        source,
        EventType::RequestResourceResync,
        Target::ResourceResync,
        json!({ WITH_SYNCED_LIST: true }),
    )
}

/// What to do with a received resync event, by the `kind` it names.
#[derive(Debug, PartialEq, Eq)]
pub enum ResyncKind {
    /// Not a per-resource resync event, or one of a kind both sides sync (Application,
    /// AppProject, Repository, GPGKey): handle it.
    Handled,
    /// Refused with this message (an `error` reply, which the peer takes as the end of the
    /// event): any other kind (the peer fails with "unknown kind"), never mistaken for a
    /// same-named Application.
    Refused(String),
}

/// Sorts a received resync event by the kind in its payload (`request-update`,
/// `response-synced-resource` carry one; the peer's `getGroupVersionResource` knows Application,
/// AppProject, Repository and GPGKey).
pub fn resync_kind(ev: &Event) -> ResyncKind {
    if ev.target != Target::ResourceResync
        || !matches!(
            ev.ty,
            EventType::RequestUpdate | EventType::ResponseSyncedResource
        )
    {
        return ResyncKind::Handled;
    }
    match ev.data["kind"].as_str().unwrap_or_default() {
        "Application" | "AppProject" | "Repository" | "GPGKey" => ResyncKind::Handled,
        k => ResyncKind::Refused(format!(
            "{} names unknown resource kind {k:?} (want Application, AppProject, Repository or GPGKey); nothing was changed",
            ev.ty.short()
        )),
    }
}

/// Go `json.Marshal` bytes of a decoded-JSON value (what the peer hashes: a Go map, so keys
/// sorted).
pub fn go_json(v: &Value) -> Vec<u8> {
    crate::event::gojson::to_vec_sorted(v)
}

#[cfg(test)]
mod tests;
