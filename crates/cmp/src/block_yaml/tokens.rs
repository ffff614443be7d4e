//! One line's scalars: plain and quoted values, keys, and what a line starts with.

use serde_json::{Map, Value};

use crate::fast_yaml::special_word;

/// YAML limits implicit keys to 1024 characters; longer ones are left to the next tier.
pub(super) const MAX_KEY: usize = 1000;

/// False when the text holds a character YAML forbids or treats specially (control characters
/// other than tab and line feed, DEL, C1 controls including NEL, the byte-order mark, U+FFFE,
/// U+FFFF, and the Unicode line and paragraph separators).
pub(super) fn printable(text: &str) -> bool {
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if (0x20..0x7f).contains(&b) || b == b'\n' || b == b'\t' {
            i += 1;
            continue;
        }
        match b {
            0xc2 if (0x80..0xa0).contains(&bytes[i + 1]) => return false,
            0xef if bytes[i + 1] == 0xbb && bytes[i + 2] == 0xbf => return false,
            0xef if bytes[i + 1] == 0xbf && bytes[i + 2] >= 0xbe => return false,
            0xe2 if bytes[i + 1] == 0x80 && matches!(bytes[i + 2], 0xa8 | 0xa9) => return false,
            0x80.. => {}
            _ => return false,
        }
        i += 1;
    }
    true
}

/// `-` alone or followed by a space: a block sequence entry.
pub(super) fn is_entry(text: &str) -> bool {
    text == "-" || text.starts_with("- ")
}

/// Ends a plain scalar at a comment and trims it; `None` when the text is not a plain scalar
/// in block context that fits on this line.
pub(super) fn plain(text: &str) -> Option<&str> {
    let end = text.find(" #").unwrap_or(text.len());
    let value = text[..end].trim_end_matches(' ');
    if value.contains(": ") || value.ends_with(':') {
        return None;
    }
    Some(value)
}

/// What may follow a quoted scalar or an empty flow collection on its line: nothing, or a
/// comment after a space.
pub(super) fn rest_is_empty(rest: &str) -> bool {
    let trimmed = rest.trim_start_matches(' ');
    trimmed.is_empty() || (trimmed.len() < rest.len() && trimmed.starts_with('#'))
}

/// How the scanned line of a quoted scalar ends.
pub(super) enum QuotedLine<'t> {
    /// At the closing quote: what follows it.
    Closed(&'t str),
    /// The scalar goes on; `escaped_break` when the line ends with `\` (double quotes).
    Open { escaped_break: bool },
}

/// Scans one line of a quoted scalar (`text` starts after the opening quote or the line's
/// indentation), appending its content to `out`. For an open line, trailing spaces are
/// dropped (flow folding) unless the line break is escaped. `None` for an escape outside the
/// common set.
pub(super) fn quoted_line<'t>(
    text: &'t str,
    double: bool,
    out: &mut String,
) -> Option<QuotedLine<'t>> {
    let bytes = text.as_bytes();
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\'' if !double => {
                out.push_str(&text[start..i]);
                if bytes.get(i + 1) != Some(&b'\'') {
                    return Some(QuotedLine::Closed(&text[i + 1..]));
                }
                out.push('\'');
                i += 2;
                start = i;
            }
            b'"' if double => {
                out.push_str(&text[start..i]);
                return Some(QuotedLine::Closed(&text[i + 1..]));
            }
            b'\\' if double => {
                out.push_str(&text[start..i]);
                let Some(&escaped) = bytes.get(i + 1) else {
                    return Some(QuotedLine::Open {
                        escaped_break: true,
                    });
                };
                i += 2;
                match escaped {
                    b'"' => out.push('"'),
                    b'\\' => out.push('\\'),
                    b'/' => out.push('/'),
                    b'n' => out.push('\n'),
                    b't' => out.push('\t'),
                    b'r' => out.push('\r'),
                    b'u' => {
                        let hex = text.get(i..i + 4)?;
                        if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                            return None;
                        }
                        out.push(char::from_u32(u32::from_str_radix(hex, 16).ok()?)?);
                        i += 4;
                    }
                    _ => return None,
                }
                start = i;
            }
            _ => i += 1,
        }
    }
    out.push_str(text[start..].trim_end_matches(' '));
    Some(QuotedLine::Open {
        escaped_break: false,
    })
}

/// A quoted scalar that ends on this line (`text` starts with the quote): its value and what
/// follows the closing quote.
pub(super) fn quoted_single_line(text: &str) -> Option<(String, &str)> {
    let mut out = String::new();
    match quoted_line(&text[1..], text.starts_with('"'), &mut out)? {
        QuotedLine::Closed(after) => Some((out, after)),
        QuotedLine::Open { .. } => None,
    }
}

/// A simple mapping key at the start of a line — a plain word that YAML can only read as a
/// string, or a quoted string without escapes — followed by `:` and a space or the end of the
/// line. Returns the key and the text after the `:`.
pub(super) fn key(text: &str) -> Option<(String, &str)> {
    let bytes = text.as_bytes();
    let (key, after) = match bytes.first()? {
        b'"' | b'\'' => {
            let quote = bytes[0];
            let close = memchr(quote, &bytes[1..])? + 1;
            let key = &text[1..close];
            if key.contains(['\\', '"', '\'']) {
                return None;
            }
            (key, &text[close + 1..])
        }
        b if b.is_ascii_alphabetic() => {
            let end = bytes
                .iter()
                .position(|&b| {
                    !(b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'/'))
                })
                .unwrap_or(bytes.len());
            let key = &text[..end];
            if special_word(key) {
                return None;
            }
            (key, &text[end..])
        }
        _ => return None,
    };
    if key.len() > MAX_KEY {
        return None;
    }
    let after = after.strip_prefix(':')?;
    (after.is_empty() || after.starts_with(' ')).then(|| (key.to_string(), after))
}

/// Inserts a key that is not in the map yet; `None` for a duplicate (serde-saphyr reports it).
pub(super) fn insert_new(map: &mut Map<String, Value>, key: String, value: Value) -> Option<()> {
    match map.entry(key) {
        serde_json::map::Entry::Vacant(slot) => {
            slot.insert(value);
            Some(())
        }
        serde_json::map::Entry::Occupied(_) => None,
    }
}

pub(super) fn memchr(needle: u8, haystack: &[u8]) -> Option<usize> {
    haystack.iter().position(|&b| b == needle)
}
