//! JSON bytes as Go's `encoding/json` writes them (what the peer's `SetData(ApplicationJSON, obj)`
//! puts on the wire): compact, keys in the order given, and `<`, `>`, `&`, U+2028, U+2029 escaped
//! as `\u003c`, `\u003e`, `\u0026`, `\u2028`, `\u2029`. Other escapes (`\"`, `\\`, `\b`, `\f`, `\n`,
//! `\r`, `\t`, `\u00xx`) are the same in serde_json and Go.

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
        let mut start = 0;
        for (i, c) in fragment.char_indices() {
            let esc = match c {
                '<' => "\\u003c",
                '>' => "\\u003e",
                '&' => "\\u0026",
                '\u{2028}' => "\\u2028",
                '\u{2029}' => "\\u2029",
                _ => continue,
            };
            w.write_all(&fragment.as_bytes()[start..i])?;
            w.write_all(esc.as_bytes())?;
            start = i + c.len_utf8();
        }
        w.write_all(&fragment.as_bytes()[start..])
    }
}

/// Encodes `v` as Go's `json.Marshal` would.
pub fn to_vec(v: &Value) -> Vec<u8> {
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
    }
}
