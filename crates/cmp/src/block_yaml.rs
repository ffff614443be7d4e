//! The first and fastest parsing tier: a line-oriented reader for block-style YAML as
//! `kubectl`, `helm template` and `kustomize build` write it — block mappings and sequences,
//! compact `- key: value` entries, plain and quoted scalars (also over several lines), literal
//! and folded block scalars, comments, and flow collections that end on their line.
//!
//! It is a recognizer of a strict subset, not a YAML parser: anything outside the subset, or
//! anything it is not sure about, returns `None` and the document goes to the next tier
//! ([`crate::fast_yaml`], then serde-saphyr), so the result is always serde-saphyr's value and
//! every error keeps serde-saphyr's message. Falling back includes: tabs outside block scalar
//! content, control and non-printable characters, anchors, aliases, tags, directives,
//! flow collections over several lines or with complex keys, escapes other than the common
//! ones, block scalars with an indentation indicator or without content, keys that are
//! not simple words or quoted strings, duplicate keys, and nesting deeper than 64 levels.
//!
//! Why hand-written: no maintained YAML crate parses fast enough for the CMP's 10 MiB budget
//! (docs/perf/cmp.md); this subset is about 5× faster than the event parser under
//! serde-saphyr. Differential tests (including a mutation fuzzer) check that whenever this
//! tier answers, serde-saphyr gives the same value.

use std::borrow::Cow;

use granit_parser::ScalarStyle;
use serde_json::{Map, Value};

use crate::fast_yaml::{scalar, special_word};

/// Deeper documents are left to the next tier (which enforces serde-saphyr's limits).
const MAX_DEPTH: usize = 64;
/// YAML limits implicit keys to 1024 characters; longer ones are left to the next tier.
const MAX_KEY: usize = 1000;

#[derive(Clone, Copy)]
struct Line<'a> {
    /// Leading spaces.
    indent: usize,
    /// The line after its indentation, without the line break.
    text: &'a str,
    /// The whole line without the line break.
    raw: &'a str,
    /// False for a last line without a line break.
    broken: bool,
}

impl Line<'_> {
    /// Blank or comment-only (only outside block scalars).
    fn is_blank(&self) -> bool {
        self.text.is_empty() || self.text.starts_with('#')
    }
}

struct Reader<'a, 'o> {
    lines: Vec<Line<'a>>,
    pos: usize,
    depth: usize,
    options: &'o serde_saphyr::Options,
}

/// Parses one document (a chunk between `---` lines), or `None` when it is not in the subset.
/// `Some(Value::Null)` for a document without content.
pub fn parse_document(text: &str, options: &serde_saphyr::Options) -> Option<Value> {
    if !printable(text) {
        return None;
    }
    let mut lines = Vec::with_capacity(text.len() / 24 + 1);
    for piece in text.split_inclusive('\n') {
        let (raw, broken) = match piece.strip_suffix('\n') {
            Some(raw) => (raw, true),
            None => (piece, false),
        };
        // directives and document-end markers belong to the stream grammar
        if raw.starts_with('%') || raw.starts_with("...") {
            return None;
        }
        let indent = raw.len() - raw.trim_start_matches(' ').len();
        lines.push(Line {
            indent,
            text: &raw[indent..],
            raw,
            broken,
        });
    }
    let mut reader = Reader {
        lines,
        pos: 0,
        depth: 0,
        options,
    };
    reader.skip_blank();
    let Some(first) = reader.peek() else {
        return Some(Value::Null);
    };
    let root = reader.node(first.indent)?;
    reader.skip_blank();
    reader.peek().is_none().then_some(root)
}

/// False when the text holds a character YAML forbids or treats specially (control characters
/// other than tab and line feed, DEL, C1 controls including NEL, the byte-order mark, U+FFFE,
/// U+FFFF, and the Unicode line and paragraph separators).
fn printable(text: &str) -> bool {
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
fn is_entry(text: &str) -> bool {
    text == "-" || text.starts_with("- ")
}

/// Ends a plain scalar at a comment and trims it; `None` when the text is not a plain scalar
/// in block context that fits on this line.
fn plain(text: &str) -> Option<&str> {
    let end = text.find(" #").unwrap_or(text.len());
    let value = text[..end].trim_end_matches(' ');
    if value.contains(": ") || value.ends_with(':') {
        return None;
    }
    Some(value)
}

/// What may follow a quoted scalar or an empty flow collection on its line: nothing, or a
/// comment after a space.
fn rest_is_empty(rest: &str) -> bool {
    let trimmed = rest.trim_start_matches(' ');
    trimmed.is_empty() || (trimmed.len() < rest.len() && trimmed.starts_with('#'))
}

/// How the scanned line of a quoted scalar ends.
enum QuotedLine<'t> {
    /// At the closing quote: what follows it.
    Closed(&'t str),
    /// The scalar goes on; `escaped_break` when the line ends with `\` (double quotes).
    Open { escaped_break: bool },
}

/// Scans one line of a quoted scalar (`text` starts after the opening quote or the line's
/// indentation), appending its content to `out`. For an open line, trailing spaces are
/// dropped (flow folding) unless the line break is escaped. `None` for an escape outside the
/// common set.
fn quoted_line<'t>(text: &'t str, double: bool, out: &mut String) -> Option<QuotedLine<'t>> {
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
fn quoted_single_line(text: &str) -> Option<(String, &str)> {
    let mut out = String::new();
    match quoted_line(&text[1..], text.starts_with('"'), &mut out)? {
        QuotedLine::Closed(after) => Some((out, after)),
        QuotedLine::Open { .. } => None,
    }
}

/// A simple mapping key at the start of a line — a plain word that YAML can only read as a
/// string, or a quoted string without escapes — followed by `:` and a space or the end of the
/// line. Returns the key and the text after the `:`.
fn key(text: &str) -> Option<(String, &str)> {
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
fn insert_new(map: &mut Map<String, Value>, key: String, value: Value) -> Option<()> {
    match map.entry(key) {
        serde_json::map::Entry::Vacant(slot) => {
            slot.insert(value);
            Some(())
        }
        serde_json::map::Entry::Occupied(_) => None,
    }
}

fn memchr(needle: u8, haystack: &[u8]) -> Option<usize> {
    haystack.iter().position(|&b| b == needle)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Chomp {
    Clip,
    Strip,
    Keep,
}

impl<'a> Reader<'a, '_> {
    fn peek(&self) -> Option<Line<'a>> {
        self.lines.get(self.pos).copied()
    }

    fn skip_blank(&mut self) {
        while self.lines.get(self.pos).is_some_and(Line::is_blank) {
            self.pos += 1;
        }
    }

    /// A block collection whose first line is the current one, at `indent`.
    fn node(&mut self, indent: usize) -> Option<Value> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return None;
        }
        let line = self.peek()?;
        let value = if is_entry(line.text) {
            self.sequence(indent)
        } else {
            self.mapping(indent)
        };
        self.depth -= 1;
        value
    }

    /// The value of a key or entry whose line ends after the indicator: a block collection on
    /// the following lines (more indented than `parent`; for a mapping value also a sequence at
    /// the same indentation), or null.
    fn block_value(&mut self, parent: usize, in_mapping: bool) -> Option<Value> {
        self.skip_blank();
        match self.peek() {
            Some(line) if line.indent > parent => self.node(line.indent),
            Some(line) if in_mapping && line.indent == parent && is_entry(line.text) => {
                self.node(line.indent)
            }
            _ => Some(Value::Null),
        }
    }

    /// The next content line of a collection at `indent`: `Some(None)` where the collection
    /// ends (end of input or a less indented line), `None` for a more indented line or a tab.
    fn next_line_at(&mut self, indent: usize) -> Option<Option<Line<'a>>> {
        self.skip_blank();
        match self.peek() {
            Some(line) if line.indent > indent || line.text.contains('\t') => None,
            Some(line) if line.indent == indent => Some(Some(line)),
            _ => Some(None),
        }
    }

    fn mapping(&mut self, indent: usize) -> Option<Value> {
        let mut map = Map::new();
        while let Some(line) = self.next_line_at(indent)? {
            let (key, rest) = key(line.text)?;
            self.pos += 1;
            let value = self.inline_value(rest, indent, true)?;
            insert_new(&mut map, key, value)?;
        }
        Some(Value::Object(map))
    }

    fn sequence(&mut self, indent: usize) -> Option<Value> {
        let mut items = Vec::new();
        while let Some(line) = self.next_line_at(indent)? {
            if !is_entry(line.text) {
                break;
            }
            let after = line.text[1..].trim_start_matches(' ');
            let column = indent + line.text.len() - after.len();
            let value = if after.is_empty() || after.starts_with('#') {
                self.pos += 1;
                self.block_value(indent, false)?
            } else if is_entry(after) || key(after).is_some() {
                // a compact nested collection: read it as if it started on its own line
                self.lines[self.pos] = Line {
                    indent: column,
                    text: after,
                    ..line
                };
                self.node(column)?
            } else {
                self.pos += 1;
                self.inline_value(after, indent, false)?
            };
            items.push(value);
        }
        Some(Value::Array(items))
    }

    /// The value after `key:` or `- ` on the same line (`rest`), for a node whose parent
    /// collection is at `parent`.
    fn inline_value(&mut self, rest: &'a str, parent: usize, in_mapping: bool) -> Option<Value> {
        let rest = rest.trim_start_matches(' ');
        let value = match rest.as_bytes().first() {
            None | Some(b'#') => return self.block_value(parent, in_mapping),
            Some(b'|' | b'>') => return self.block_scalar(rest, parent),
            Some(b'"' | b'\'') => {
                let (s, after) = self.quoted(rest, parent)?;
                rest_is_empty(after).then_some(Value::String(s))?
            }
            Some(b'[' | b'{') => {
                let (value, after) = self.flow(rest)?;
                rest_is_empty(after).then_some(value)?
            }
            Some(b']' | b'}' | b',' | b'&' | b'*' | b'!' | b'%' | b'@' | b'`' | b'?' | b':') => {
                return None;
            }
            Some(b'-') if is_entry(rest) => return None,
            Some(_) => {
                let first = plain(rest)?;
                match self.plain_continuation(first, rest.len() > first.len(), parent)? {
                    Some(folded) => Value::String(folded),
                    None => scalar(Cow::Borrowed(first), ScalarStyle::Plain, self.options)?,
                }
            }
        };
        // a scalar that continues on a more indented line is a multi-line scalar (or an error)
        let mut next = self.pos;
        while self.lines.get(next).is_some_and(Line::is_blank) {
            next += 1;
        }
        match self.lines.get(next) {
            Some(line) if line.indent > parent => None,
            _ => Some(value),
        }
    }

    /// Lines that continue a plain scalar (more indented than `parent`), folded into its first
    /// line `first`: `Some(None)` when there are none, `None` when they are not simple text.
    /// A multi-line plain scalar contains a space, so it is always a string.
    fn plain_continuation(
        &mut self,
        first: &str,
        commented: bool,
        parent: usize,
    ) -> Option<Option<String>> {
        let mut folded: Option<String> = None;
        loop {
            let mut next = self.pos;
            while self
                .lines
                .get(next)
                .is_some_and(|l| l.raw.bytes().all(|b| b == b' '))
            {
                next += 1;
            }
            let Some(line) = self.lines.get(next).filter(|l| l.indent > parent) else {
                return Some(folded);
            };
            let text = line.text;
            // indicators do not matter at the start of a continuation line, except these
            if commented
                || text.starts_with([':', '#'])
                || text.contains('\t')
                || text.contains(" #")
                || text.contains(": ")
                || text.ends_with(':')
            {
                return None;
            }
            let out = folded.get_or_insert_with(|| first.to_string());
            let breaks = next - self.pos;
            if breaks == 0 {
                out.push(' ');
            } else {
                (0..breaks).for_each(|_| out.push('\n'));
            }
            out.push_str(text.trim_end_matches(' '));
            self.pos = next + 1;
        }
    }

    /// A quoted scalar in block context (`first` starts with the quote), possibly continued
    /// on more indented lines: its value and what follows the closing quote on its last line.
    fn quoted(&mut self, first: &'a str, parent: usize) -> Option<(String, &'a str)> {
        let double = first.starts_with('"');
        let mut out = String::new();
        let mut text = &first[1..];
        loop {
            let escaped_break = match quoted_line(text, double, &mut out)? {
                QuotedLine::Closed(after) => return Some((out, after)),
                QuotedLine::Open { escaped_break } => escaped_break,
            };
            let mut breaks = 0;
            while self
                .lines
                .get(self.pos)
                .is_some_and(|l| l.raw.bytes().all(|b| b == b' '))
            {
                breaks += 1;
                self.pos += 1;
            }
            let line = self.lines.get(self.pos)?;
            if line.indent <= parent || line.text.contains('\t') || !line.broken {
                return None;
            }
            if escaped_break {
                if breaks > 0 {
                    return None;
                }
            } else if breaks == 0 {
                out.push(' ');
            } else {
                (0..breaks).for_each(|_| out.push('\n'));
            }
            text = line.text;
            self.pos += 1;
        }
    }

    /// A flow node that ends on this line: `[...]`, `{...}` (nested, with simple keys and
    /// without trailing commas), a quoted or a plain scalar. Returns it and the text after it.
    fn flow<'t>(&mut self, text: &'t str) -> Option<(Value, &'t str)> {
        match text.as_bytes().first()? {
            b'[' | b'{' => {
                self.depth += 1;
                if self.depth > MAX_DEPTH {
                    return None;
                }
                let value = self.flow_collection(text);
                self.depth -= 1;
                value
            }
            b'"' | b'\'' => quoted_single_line(text).map(|(s, rest)| (Value::String(s), rest)),
            b',' | b']' | b'}' | b'#' | b'&' | b'*' | b'!' | b'|' | b'>' | b'%' | b'@' | b'`'
            | b'?' | b':' | b' ' => None,
            _ => {
                let bytes = text.as_bytes();
                let mut end = 0;
                while end < bytes.len() {
                    match bytes[end] {
                        b',' | b'[' | b']' | b'{' | b'}' => break,
                        b':' if matches!(
                            bytes.get(end + 1),
                            None | Some(b' ' | b',' | b'[' | b']' | b'{' | b'}')
                        ) =>
                        {
                            break;
                        }
                        b'#' if bytes[end - 1] == b' ' => break,
                        _ => end += 1,
                    }
                }
                let word = text[..end].trim_end_matches(' ');
                if word == "-" || word.starts_with("- ") {
                    return None;
                }
                let value = scalar(Cow::Borrowed(word), ScalarStyle::Plain, self.options)?;
                Some((value, &text[end..]))
            }
        }
    }

    fn flow_collection<'t>(&mut self, text: &'t str) -> Option<(Value, &'t str)> {
        let mapping = text.starts_with('{');
        let close = if mapping { '}' } else { ']' };
        let mut rest = text[1..].trim_start_matches(' ');
        let mut map = Map::new();
        let mut items = Vec::new();
        if let Some(after) = rest.strip_prefix(close) {
            rest = after;
        } else {
            loop {
                if mapping {
                    let (k, after) = key(rest)?;
                    let (value, after) = self.flow(after.trim_start_matches(' '))?;
                    insert_new(&mut map, k, value)?;
                    rest = after.trim_start_matches(' ');
                } else {
                    let (value, after) = self.flow(rest)?;
                    items.push(value);
                    rest = after.trim_start_matches(' ');
                }
                if let Some(after) = rest.strip_prefix(close) {
                    rest = after;
                    break;
                }
                rest = rest.strip_prefix(',')?.trim_start_matches(' ');
                if rest.starts_with(close) {
                    return None; // a trailing comma
                }
            }
        }
        let value = if mapping {
            Value::Object(map)
        } else {
            Value::Array(items)
        };
        Some((value, rest))
    }

    /// A literal (`|`) or folded (`>`) block scalar; `header` is the rest of the key's line.
    fn block_scalar(&mut self, header: &str, parent: usize) -> Option<Value> {
        let folded = header.starts_with('>');
        let mut chomp = Chomp::Clip;
        let mut end = 1;
        match header.as_bytes().get(1) {
            Some(b'-') => (chomp, end) = (Chomp::Strip, 2),
            Some(b'+') => (chomp, end) = (Chomp::Keep, 2),
            _ => {}
        }
        if !rest_is_empty(&header[end..]) {
            return None; // an indentation indicator, or text after the header
        }
        // the content's indentation is that of its first non-empty line
        let first = self.lines[self.pos..]
            .iter()
            .position(|l| !l.raw.bytes().all(|b| b == b' '))?;
        let content = self.lines[self.pos + first];
        let m = content.indent;
        if m <= parent || content.text.starts_with('\t') {
            return None; // empty block scalar, or a tab where indentation is measured
        }
        let mut out = String::new();
        let mut empties = 0usize;
        let mut seen_content = false;
        while let Some(line) = self.peek() {
            if line.raw.bytes().all(|b| b == b' ') {
                if line.raw.len() > m {
                    return None; // spaces beyond the indentation: content, left to serde-saphyr
                }
                empties += 1;
                self.pos += 1;
                continue;
            }
            if line.indent < m {
                break;
            }
            let text = &line.raw[m..];
            if folded && text.starts_with([' ', '\t']) {
                return None; // a more-indented line of a folded scalar
            }
            if !seen_content {
                (0..empties).for_each(|_| out.push('\n'));
            } else if folded && empties == 0 {
                out.push(' ');
            } else {
                let breaks = if folded { empties } else { empties + 1 };
                (0..breaks).for_each(|_| out.push('\n'));
            }
            out.push_str(text);
            seen_content = true;
            empties = 0;
            self.pos += 1;
        }
        if self.pos == self.lines.len() && self.lines.last().is_some_and(|l| !l.broken) {
            return None; // the scalar ends at the end of the input without a line break
        }
        match chomp {
            Chomp::Strip => {}
            Chomp::Clip => out.push('\n'),
            Chomp::Keep => (0..=empties).for_each(|_| out.push('\n')),
        }
        Some(Value::String(out))
    }
}

/// The benchmark's input generator, for the test that its documents take this tier.
#[cfg(test)]
#[path = "../benches/input.rs"]
mod bench_input;

#[cfg(test)]
mod tests {
    use super::*;

    fn slow(text: &str) -> Result<Value, serde_saphyr::Error> {
        serde_saphyr::from_str_with_options(text, crate::source::yaml_options())
    }

    /// When this tier answers, serde-saphyr reads the same value (also in key order).
    fn agrees(text: &str) -> bool {
        match parse_document(text, &crate::source::yaml_options()) {
            Some(v) => {
                let expected = slow(text).unwrap_or_else(|e| {
                    panic!("fast tier accepted what serde-saphyr refuses ({e}):\n{text:?}")
                });
                assert_eq!(
                    serde_json::to_string(&v).unwrap(),
                    serde_json::to_string(&expected).unwrap(),
                    "document:\n{text:?}"
                );
                true
            }
            None => false,
        }
    }

    const HANDLED: &[&str] = &[
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  labels:\n    app.kubernetes.io/name: x\ndata:\n  k: v\n",
        "a:\n- 1\n- two\n-\n- - x\n  - y\n- k: v\n  l: w\nb: c\n",
        "a:\n  - name: x\n    image: nginx:1.25 # comment\n    args: []\n",
        "a: |\n  line1\n\n  line2\n\nb: 1\n",
        "a: |-\n  x\n  y\n\n\nb: 1\n",
        "a: |+\n  x\n\n\nb: 1\n",
        "a: >\n  folded\n  text\n\n  para\nb: >-\n  x\n  y\n",
        "a: >+\n  x\n\n",
        "a: | # comment\n    indented\n      more\n    back\n",
        "a: \"q \\\" \\\\ \\n \\t \\u00e9 # not a comment\" # comment\nb: 'it''s'\n",
        "\"quoted key\": 1\n'single': 2\n",
        "a: []\nb: {}\nc: ~\nd: null\ne:\nf: yes\ng: 0644\nh: 1.10\ni: -3\nj: /usr/bin\nk: --flag=x\nl: 3Mi\n",
        "a: x#y\nb: a:b\nc: http://h:80/p?q=1#f\n",
        "# only a comment\n",
        "\n",
        "  a: 1\n  b:\n    c: 2\n",
        "- a\n- b\n",
        "- a\n - b\n",
        "a:\n  - |\n    lit\n  - >-\n    f\n",
        "key: |\n  text\n  #not a comment\n# a comment\nnext: 1\n",
        "a: [1, two, \"3\", 'f''our', [], {}, [x y, -1], {k: v, l: [m]}, /p, 1.5] # c\nb: {cpu: 10m, memory: 32Mi}\nc: [ a ,b ]\n",
        "a: multi\n  line\n\n   plain\nb:\n- x\n  y\n- k: v\n    w\nc: Default is\n  \"quoted\" - [x] {y} &z *w !v |u >t %s @r `q' p#o\n",
        "a: 'it''s\n  a   \n\n  long one'\nb: \"esc\\\"aped \\\n  broken\\u00e9 \n  text\"\n",
        "description: 'APIVersion defines the versioned schema of this representation\n    of an object.'\n",
        "a: ü\nb: \"日本\"\n",
    ];

    #[test]
    fn the_subset_gives_serde_saphyrs_values() {
        for doc in HANDLED {
            assert!(agrees(doc), "expected the fast tier to read:\n{doc}");
        }
    }

    #[test]
    fn everything_else_is_left_to_the_next_tier() {
        for doc in [
            "a: &x 1\nb: *x\n",
            "a: !!str 1\n",
            "a: 1\na: 2\n",
            "? a\n: 1\n",
            "80: http\n",
            "yes: 1\n",
            "a: [1, 2,]\n",
            "a: [1, [2]\n",
            "a: {b: c, b: d}\n",
            "a: [b: c]\n",
            "a: {b}\n",
            "a: [a, , b]\n",
            "a: {b:c}\n",
            "a: multi\n  line # comment\n",
            "a: multi # comment\n  line\n",
            "a: \"two\n  lines\" x\n",
            "a: \"\\\n\n  x\"\n",
            "a: |2\n   x\n",
            "a:\tb\n",
            "a: b: c\n",
            "a: \"x\" y\n",
            "a: |\n",
            "a: |\n  x",
            "%YAML 1.2\n---\na: 1\n",
            "a: 1\n...\n",
            "a: \"\\x41\"\n",
            "a: b\r\n",
            "just a scalar\n",
            "a: 1\n b: 2\n",
            "a: >\n  x\n    more\n  y\n",
            "a: |\n  x\n   \n  y\n",
            "a: >+\n  x\n\n ",
        ] {
            assert!(!agrees(doc), "expected a fallback for:\n{doc}");
        }
    }

    #[test]
    fn corpus_documents_agree_and_mostly_take_this_tier() {
        let documents = crate::source::tests::corpus_yaml_documents();
        let all = documents.len();
        let fast = documents.iter().filter(|d| agrees(d)).count();
        assert!(fast * 10 >= all * 8, "{fast} of {all} corpus documents");
    }

    /// The benchmark's documents (kubectl-style output) all take this tier — the CMP's speed
    /// depends on it.
    #[test]
    fn benchmark_documents_take_this_tier() {
        let text = super::bench_input::stream(30, 2097);
        let chunks = crate::source::yaml_chunks(&text);
        assert_eq!(chunks.len(), 30);
        for chunk in chunks {
            assert!(agrees(chunk.text), "{}", chunk.text);
        }
    }

    /// Random plain scalars made of the characters numbers, booleans and nulls are spelled
    /// with, plus a few others: the typing is serde-saphyr's (YAML 1.1, legacy octal).
    #[test]
    fn plain_scalar_typing_agrees() {
        const ALPHABET: &[u8] = b"0123456789+-._~eExXoObBaAfFinINyYsSlLu:/^$ ";
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..20_000 {
            let len = 1 + (next() % 8) as usize;
            let scalar: String = (0..len)
                .map(|_| ALPHABET[(next() % ALPHABET.len() as u64) as usize] as char)
                .collect();
            agrees(&format!("a: {scalar}\nb:\n- {scalar}\nc: [{scalar}]\n"));
        }
        for word in [
            "0644",
            "-0644",
            "0x1F",
            "0o17",
            "0b101",
            "1_000",
            "+1",
            "-0",
            ".5",
            "1.",
            "1e3",
            "1E+3",
            "-.inf",
            ".NaN",
            "inf",
            "nan",
            "~",
            "1:20",
            "0.1.2",
            "1e999",
            "-1e999",
            "18446744073709551616",
            "-9223372036854775809",
            "0x_1F",
            "08",
            "0_8",
            "+0x1F",
            "1__0",
        ] {
            agrees(&format!("a: {word}\n"));
        }
    }

    /// Mutation fuzzing: small edits of valid documents, in YAML's significant characters.
    /// Whatever this tier accepts must be exactly what serde-saphyr reads.
    #[test]
    fn mutated_documents_never_disagree() {
        const ALPHABET: &[u8] = b" \n-:#|>+\"'\\{}[]a1.~&*!\t?,%yn0e_/u";
        let mut state = std::env::var("ARGOCD_PULL_FUZZ_SEED")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(0x9e37_79b9_7f4a_7c15_u64)
            | 1;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        // ARGOCD_PULL_FUZZ_ITERATIONS and ARGOCD_PULL_FUZZ_SEED make deeper runs
        let iterations = std::env::var("ARGOCD_PULL_FUZZ_ITERATIONS")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(20_000);
        let mut accepted = 0;
        for _ in 0..iterations {
            let seed = HANDLED[(next() % HANDLED.len() as u64) as usize];
            let mut bytes = seed.as_bytes().to_vec();
            for _ in 0..=(next() % 3) {
                let at = (next() % (bytes.len() as u64 + 1)) as usize;
                let c = ALPHABET[(next() % ALPHABET.len() as u64) as usize];
                match next() % 3 {
                    0 => bytes.insert(at, c),
                    1 if at < bytes.len() => bytes[at] = c,
                    _ if at < bytes.len() => {
                        bytes.remove(at);
                    }
                    _ => bytes.push(c),
                }
            }
            if let Ok(text) = String::from_utf8(bytes) {
                accepted += usize::from(agrees(&text));
            }
        }
        assert!(
            accepted > iterations / 4,
            "the fuzzer exercised the fast tier ({accepted})"
        );
    }
}
