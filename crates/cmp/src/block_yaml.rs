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

use crate::fast_yaml::scalar;

mod tokens;

use tokens::*;

/// Deeper documents are left to the next tier (which enforces serde-saphyr's limits).
const MAX_DEPTH: usize = 64;

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
mod tests;
