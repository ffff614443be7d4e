//! Checksums used by resync (I/O free).
//!
//! * set checksum: SHA-256 over the sorted `Kind/Name/UID` strings (concatenated, no separator);
//! * spec checksum: SHA-256 of the canonical JSON of `.spec` with `destination` removed.
//!
//! Canonical JSON = object keys sorted recursively, no whitespace, so both sides agree whatever
//! key order their JSON libraries keep.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// SHA-256 (hex) over the sorted `Kind/Name/UID` strings.
pub fn set_checksum<I, S>(items: I) -> String
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    let mut v: Vec<String> = items.into_iter().map(|s| s.as_ref().to_string()).collect();
    v.sort();
    let mut h = Sha256::new();
    for s in &v {
        h.update(s.as_bytes());
    }
    hex::encode(h.finalize())
}

/// `Kind/Name/UID`.
pub fn set_item(kind: &str, name: &str, uid: &str) -> String {
    format!("{kind}/{name}/{uid}")
}

/// SHA-256 (hex) of `.spec` without `destination`.
pub fn spec_checksum(obj: &Value) -> String {
    let mut spec = obj.get("spec").cloned().unwrap_or(Value::Null);
    if let Some(m) = spec.as_object_mut() {
        m.remove("destination");
    }
    hash_value(&spec)
}

/// SHA-256 (hex) of the canonical JSON of any value.
pub fn hash_value(v: &Value) -> String {
    let mut out = Vec::new();
    write_canonical(v, &mut out);
    hex::encode(Sha256::digest(&out))
}

fn write_canonical(v: &Value, out: &mut Vec<u8>) {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            out.push(b'{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                out.extend(serde_json::to_vec(k).expect("string"));
                out.push(b':');
                write_canonical(&m[k.as_str()], out);
            }
            out.push(b'}');
        }
        Value::Array(a) => {
            out.push(b'[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(x, out);
            }
            out.push(b']');
        }
        other => out.extend(serde_json::to_vec(other).expect("scalar")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn spec_checksum_ignores_destination_and_key_order() {
        let a = json!({"spec": {"project": "p", "source": {"a": 1, "b": 2}, "destination": {"server": "x"}}});
        let b = json!({"spec": {"source": {"b": 2, "a": 1}, "project": "p", "destination": {"name": "in-cluster"}}});
        assert_eq!(spec_checksum(&a), spec_checksum(&b));
        let c = json!({"spec": {"source": {"b": 3, "a": 1}, "project": "p"}});
        assert_ne!(spec_checksum(&a), spec_checksum(&c));
    }

    #[test]
    fn set_checksum_is_order_independent() {
        let x = set_checksum(["Application/a/1", "Application/b/2"]);
        let y = set_checksum(["Application/b/2", "Application/a/1"]);
        assert_eq!(x, y);
        assert_ne!(x, set_checksum(["Application/a/1"]));
        assert_eq!(x.len(), 64);
    }
}
