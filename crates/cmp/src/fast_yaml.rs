//! Fast path for the common shape of Kubernetes YAML: builds a `serde_json::Value` straight from
//! the events of `granit-parser` — the same scanner and parser serde-saphyr runs, so scalar text,
//! structure and line handling are identical — skipping serde-saphyr's deserializer layers,
//! which cost more than the parse itself (see docs/perf/cmp.md).
//!
//! Typing stays serde-saphyr's, configured as in [`crate::source`] (YAML 1.1 like kubectl):
//! quoted and block scalars are strings; plain `~`/`null`/`Null`/`NULL`/empty are null; the
//! YAML 1.1 boolean words (`y`, `yes`, `true`, `on`, `n`, `no`, `false`, `off`, any case) are
//! booleans; other plain scalars starting with a letter are strings; a plain decimal integer
//! without a leading zero is a number; every other plain scalar (`0644`, `1.10`, `0x1F`, `-3`,
//! `.inf`, paths, …) is typed by serde-saphyr itself, parsing that scalar alone.
//!
//! Anything else returns `None` and the caller parses the document with serde-saphyr, so errors
//! (with their messages) and rare features keep its exact behaviour: tags, anchors and aliases,
//! merge keys, non-scalar or not obviously string-typed plain keys, duplicate keys, several
//! documents in one chunk, parse errors.

use std::borrow::Cow;

use granit_parser::{Event, Parser, ScalarStyle};
use serde_json::{Map, Number, Value};

/// YAML 1.1 boolean spellings (serde-saphyr's `parse_yaml11_bool`), compared ignoring case.
const BOOL_WORDS: [(&str, bool); 8] = [
    ("true", true),
    ("yes", true),
    ("y", true),
    ("on", true),
    ("false", false),
    ("no", false),
    ("n", false),
    ("off", false),
];

/// Letter-initial words that are not plain strings (or that need a closer look).
pub(crate) fn special_word(s: &str) -> bool {
    s.len() <= 8
        && (BOOL_WORDS.iter().any(|(w, _)| s.eq_ignore_ascii_case(w))
            || ["null", "inf", "infinity", "nan"]
                .iter()
                .any(|w| s.eq_ignore_ascii_case(w)))
}

enum Frame {
    Seq(Vec<Value>),
    Map(Map<String, Value>, Option<String>),
}

/// Parses one document (a chunk between `---` lines) into a value, or `None` when the fast
/// path does not apply (the caller then uses serde-saphyr). `Some(Value::Null)` for a document
/// without content.
pub fn parse_document(text: &str, legacy_octal: &serde_saphyr::Options) -> Option<Value> {
    let mut stack: Vec<Frame> = Vec::with_capacity(16);
    let mut root: Option<Value> = None;
    let mut documents = 0;
    let options = granit_parser::options! { emit_comments: false };
    for item in Parser::new_from_str_with_options(text, options) {
        let (event, _span) = item.ok()?;
        let value = match event {
            Event::StreamStart | Event::StreamEnd | Event::DocumentEnd | Event::Comment(..) => {
                continue;
            }
            Event::DocumentStart(..) => {
                documents += 1;
                if documents > 1 {
                    return None;
                }
                continue;
            }
            Event::Scalar(text, style, anchor, tag) => {
                if anchor != 0 || tag.is_some() {
                    return None;
                }
                // A plain key is taken as written only when it cannot be typed otherwise.
                if let Some(Frame::Map(_, key @ None)) = stack.last_mut() {
                    let plain_word = text.as_bytes().first().is_some_and(u8::is_ascii_alphabetic)
                        && !special_word(&text);
                    if style == ScalarStyle::Plain && !plain_word {
                        return None;
                    }
                    *key = Some(text.into_owned());
                    continue;
                }
                scalar(text, style, legacy_octal)?
            }
            Event::SequenceStart(_, anchor, tag) | Event::MappingStart(_, anchor, tag)
                if anchor != 0 || tag.is_some() =>
            {
                return None;
            }
            Event::SequenceStart(..) => {
                if matches!(stack.last(), Some(Frame::Map(_, None))) {
                    return None; // a sequence as a mapping key
                }
                stack.push(Frame::Seq(Vec::new()));
                continue;
            }
            Event::MappingStart(..) => {
                if matches!(stack.last(), Some(Frame::Map(_, None))) {
                    return None; // a mapping as a mapping key
                }
                stack.push(Frame::Map(Map::new(), None));
                continue;
            }
            Event::SequenceEnd => match stack.pop()? {
                Frame::Seq(items) => Value::Array(items),
                Frame::Map(..) => return None,
            },
            Event::MappingEnd => match stack.pop()? {
                Frame::Map(map, None) => Value::Object(map),
                Frame::Map(_, Some(_)) | Frame::Seq(_) => return None,
            },
            _ => return None, // aliases, anchors, comments: leave them to serde-saphyr
        };
        match stack.last_mut() {
            None => {
                if root.is_some() {
                    return None;
                }
                root = Some(value);
            }
            Some(Frame::Seq(items)) => items.push(value),
            Some(Frame::Map(map, key)) => {
                match map.entry(key.take()?) {
                    serde_json::map::Entry::Vacant(slot) => {
                        slot.insert(value);
                    }
                    // a duplicate key: serde-saphyr reports it
                    serde_json::map::Entry::Occupied(_) => return None,
                }
            }
        }
    }
    if !stack.is_empty() {
        return None;
    }
    Some(root.unwrap_or(Value::Null))
}

pub(crate) fn scalar(
    text: Cow<'_, str>,
    style: ScalarStyle,
    options: &serde_saphyr::Options,
) -> Option<Value> {
    if style != ScalarStyle::Plain {
        return Some(Value::String(text.into_owned()));
    }
    let bytes = text.as_bytes();
    match bytes.first() {
        None => return Some(Value::Null),
        Some(b) if b.is_ascii_alphabetic() => {
            if !special_word(&text) {
                return Some(Value::String(text.into_owned()));
            }
            if let Some((_, b)) = BOOL_WORDS
                .iter()
                .find(|(w, _)| text.eq_ignore_ascii_case(w))
            {
                return Some(Value::Bool(*b));
            }
            if matches!(&*text, "null" | "Null" | "NULL") {
                return Some(Value::Null);
            }
        }
        Some(b'~') if bytes.len() == 1 => return Some(Value::Null),
        // no null, boolean or number starts with `/` or `--` (paths, command-line flags)
        Some(b'/') => return Some(Value::String(text.into_owned())),
        Some(b'-') if bytes.get(1) == Some(&b'-') => return Some(Value::String(text.into_owned())),
        Some(b'1'..=b'9') if bytes.len() <= 18 && bytes.iter().all(u8::is_ascii_digit) => {
            return text
                .parse::<u64>()
                .ok()
                .map(|n| Value::Number(Number::from(n)));
        }
        Some(_) => {}
    }
    // serde-saphyr reads a plain scalar as a boolean, null, integer or float only when it is
    // made of ASCII letters, digits and `+-._~` (its YAML 1.1 booleans, `~`/`null`, signed
    // decimal/0x/0o/0b/legacy-octal integers with `_`, and Rust float syntax); any other
    // character makes it a string.
    if bytes
        .iter()
        .any(|&b| !(b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.' | b'_' | b'~')))
    {
        return Some(Value::String(text.into_owned()));
    }
    // Let serde-saphyr type the scalar on its own, unless re-parsing it alone could read it
    // differently (line breaks, comment or mapping indicators, surrounding space, a document
    // marker).
    if text.len() > 64
        || text.contains(['\n', '\r', '\t', '#', '\'', '"'])
        || text.contains(": ")
        || text.ends_with(':')
        || text.trim() != text
        || text.starts_with("...")
    {
        return None;
    }
    serde_saphyr::from_str_with_options::<Value>(&text, options.clone()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slow(text: &str) -> Value {
        serde_saphyr::from_str_with_options(text, crate::source::yaml_options()).expect("valid")
    }

    /// The fast path gives serde-saphyr's value, or leaves the document to it.
    fn same_as_serde_saphyr(text: &str) -> bool {
        match parse_document(text, &crate::source::yaml_options()) {
            Some(v) => {
                assert_eq!(v, slow(text), "document:\n{text}");
                assert_eq!(
                    serde_json::to_string(&v).unwrap(),
                    serde_json::to_string(&slow(text)).unwrap()
                );
                true
            }
            None => false,
        }
    }

    #[test]
    fn typing_matches_serde_saphyr() {
        let doc = "a: 0644\nb: \"0644\"\nc: yes\nd: 'on'\ne: 1.10\nf: ~\ng:\nh: -3\ni: 0x1F\n\
                   k: 1e3\nl: /usr/bin\nm: 10m\nnn: 32Mi\no: 007\np: +5\nq: 12345678901234567890\n\
                   r: Null\ns: NO\nt: [1, two, '3', Off]\nu: {x: y}\nv: |\n  lit\nw: >\n  fold\n  ed\n\
                   x: multi\n  line plain\nyy: 1_000\nz: 0o17\naa: 3.0\nab: -0\nac: 1.5e-3\nad: inf\n";
        assert!(same_as_serde_saphyr(doc), "handled by the fast path");
        let v = parse_document(doc, &crate::source::yaml_options()).unwrap();
        assert_eq!(v["a"], 420, "plain 0644 is octal (YAML 1.1)");
        assert_eq!(v["b"], "0644");
        assert_eq!(v["c"], true);
        assert_eq!(v["d"], "on");
        assert_eq!(v["t"][3], false);
    }

    #[test]
    fn rare_features_are_left_to_serde_saphyr() {
        for doc in [
            "a: &x 1\nb: *x\n",
            "base: &b {x: 1}\nc:\n  <<: *b\n",
            "a: !!str 12\n",
            "a: 1\na: 2\n",
            "? [a]\n: 1\n",
            "80: http\n",
            "yes: 1\n",
            "n: 1\n",
            "a: [unclosed\n",
            "a: 1\n...\n---\nb: 2\n",
        ] {
            assert!(!same_as_serde_saphyr(doc), "{doc}");
        }
    }

    #[test]
    fn corpus_documents_match_serde_saphyr() {
        let fast = crate::source::tests::corpus_yaml_documents()
            .iter()
            .filter(|d| same_as_serde_saphyr(d))
            .count();
        assert!(
            fast >= 15,
            "most corpus documents take the fast path ({fast})"
        );
    }
}
