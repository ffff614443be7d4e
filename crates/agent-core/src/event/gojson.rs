//! JSON bytes as Go's `encoding/json` writes them (what the peer's `SetData(ApplicationJSON, obj)`
//! puts on the wire, and what its resync checksums hash): compact, keys in the order given (or
//! sorted, as Go writes a map: [`to_vec_sorted`]), and `<`, `>`, `&`, U+2028, U+2029 escaped as
//! `\u003c`, `\u003e`, `\u0026`, `\u2028`, `\u2029`. Other escapes (`\"`, `\\`, `\b`, `\f`,
//! `\n`, `\r`, `\t`, `\u00xx`) are the same in serde_json and Go. Numbers as Kubernetes'
//! unstructured decoding leaves them for Go: integers that fit an int64 as written, every other
//! number a float64 in Go's format (`strconv.FormatFloat(f, 'f', -1, 64)`, exponent form below
//! 1e-6 or from 1e21).

use std::io;

use serde::Serialize;
use serde_json::Value;

struct GoFormatter;

impl serde_json::ser::Formatter for GoFormatter {
    fn write_string_fragment<W: ?Sized + io::Write>(
        &mut self,
        w: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        // bytes, not chars: the five runes Go escapes start with an ASCII byte or 0xE2 (U+2028
        // and U+2029 are E2 80 A8 / E2 80 A9), and a fragment without them is written at once
        let b = fragment.as_bytes();
        let (mut start, mut i) = (0, 0);
        while i < b.len() {
            let (esc, len): (&[u8], usize) = match b[i] {
                b'<' => (b"\\u003c", 1),
                b'>' => (b"\\u003e", 1),
                b'&' => (b"\\u0026", 1),
                0xE2 if b.get(i + 1) == Some(&0x80) && b.get(i + 2) == Some(&0xA8) => {
                    (b"\\u2028", 3)
                }
                0xE2 if b.get(i + 1) == Some(&0x80) && b.get(i + 2) == Some(&0xA9) => {
                    (b"\\u2029", 3)
                }
                _ => {
                    i += 1;
                    continue;
                }
            };
            w.write_all(&b[start..i])?;
            w.write_all(esc)?;
            i += len;
            start = i;
        }
        w.write_all(&b[start..])
    }

    /// Beyond int64 a Go unstructured number is a float64.
    fn write_u64<W: ?Sized + io::Write>(&mut self, w: &mut W, value: u64) -> io::Result<()> {
        match i64::try_from(value) {
            Ok(i) => self.write_i64(w, i),
            Err(_) => self.write_f64(w, value as f64),
        }
    }

    fn write_f64<W: ?Sized + io::Write>(&mut self, w: &mut W, f: f64) -> io::Result<()> {
        let a = f.abs();
        if a != 0.0 && !(1e-6..1e21).contains(&a) {
            // Go: 'e' format with a signed exponent ("1e+21", "1e-07" → "1e-7" as Rust writes it)
            let s = format!("{f:e}");
            match s.split_once('e') {
                Some((m, e)) if !e.starts_with('-') => write!(w, "{m}e+{e}"),
                _ => w.write_all(s.as_bytes()),
            }
        } else {
            // shortest round-trip digits, no exponent, no trailing ".0" — as Go's 'f', -1
            write!(w, "{f}")
        }
    }
}

/// A value serialised with every object's keys sorted (Go's order for a map).
struct Sorted<'a>(&'a Value);

/// [`Sorted`] of an object without one of its top-level keys (a checksum that leaves a field out,
/// without a copy of the object).
struct SortedWithout<'a>(&'a Value, &'a str);

/// An object's entries sorted by key, `skip` left out.
fn sorted_entries<'a>(
    m: &'a serde_json::Map<String, Value>,
    skip: Option<&str>,
) -> Vec<(&'a String, &'a Value)> {
    let mut e: Vec<(&String, &Value)> =
        m.iter().filter(|(k, _)| Some(k.as_str()) != skip).collect();
    e.sort_unstable_by(|a, b| a.0.cmp(b.0));
    e
}

fn serialize_entries<S: serde::Serializer>(
    s: S,
    entries: Vec<(&String, &Value)>,
) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let mut map = s.serialize_map(Some(entries.len()))?;
    for (k, v) in entries {
        map.serialize_entry(k, &Sorted(v))?;
    }
    map.end()
}

impl Serialize for SortedWithout<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Value::Object(m) => serialize_entries(s, sorted_entries(m, Some(self.1))),
            other => Sorted(other).serialize(s),
        }
    }
}

impl Serialize for Sorted<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        match self.0 {
            Value::Object(m) => serialize_entries(s, sorted_entries(m, None)),
            Value::Array(a) => {
                let mut seq = s.serialize_seq(Some(a.len()))?;
                for x in a {
                    seq.serialize_element(&Sorted(x))?;
                }
                seq.end()
            }
            other => other.serialize(s),
        }
    }
}

/// Encodes `v` as Go's `json.Marshal` of a struct would (keys in the order given).
pub fn to_vec(v: &Value) -> Vec<u8> {
    write(v)
}

/// Encodes `v` as Go's `json.Marshal` of a `map[string]any` would (keys sorted).
pub fn to_vec_sorted(v: &Value) -> Vec<u8> {
    write(&Sorted(v))
}

/// Writes [`to_vec_sorted`]'s bytes of `v` to `w` (a hasher, without a buffer in between).
pub fn write_sorted<W: std::io::Write>(w: W, v: &Value) -> std::io::Result<()> {
    let mut ser = serde_json::Serializer::with_formatter(w, GoFormatter);
    Sorted(v).serialize(&mut ser).map_err(std::io::Error::other)
}

/// [`write_sorted`] of `v` with its top-level key `skip` left out (when `v` is an object).
pub fn write_sorted_without<W: std::io::Write>(w: W, v: &Value, skip: &str) -> std::io::Result<()> {
    let mut ser = serde_json::Serializer::with_formatter(w, GoFormatter);
    SortedWithout(v, skip)
        .serialize(&mut ser)
        .map_err(std::io::Error::other)
}

fn write(v: &impl Serialize) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    let mut ser = serde_json::Serializer::with_formatter(&mut out, GoFormatter);
    v.serialize(&mut ser)
        .expect("serialising a JSON value into memory cannot fail");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn html_characters_are_escaped_like_go() {
        let v = json!({"b": "a<b>&c\u{2028}", "a": "\"\n\u{1}"});
        assert_eq!(
            String::from_utf8(to_vec(&v)).unwrap(),
            r#"{"b":"a\u003cb\u003e\u0026c\u2028","a":"\"\n\u0001"}"#
        );
        // other runes that start with 0xE2 (… € ‰) stay as they are; escapes at either end
        let v = json!([
            "&…€\u{2029}‰>",
            "\u{2029}",
            "<",
            "plain",
            18446744073709551615u64,
            -7
        ]);
        assert_eq!(
            String::from_utf8(to_vec(&v)).unwrap(),
            r#"["\u0026…€\u2029‰\u003e","\u2029","\u003c","plain",18446744073709552000,-7]"#
        );
    }
}
