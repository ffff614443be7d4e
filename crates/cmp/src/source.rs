//! Input discovery and parsing: the source directory (recursive, `.yaml`/`.yml`/`.json`,
//! include/exclude globs) or a rendered stream, split into documents and parsed.

use std::path::{Path, PathBuf};

use globset::{Glob, GlobSet, GlobSetBuilder};
use serde_json::Value;

use crate::error::{CmpError, Origin};

/// Which files of a source directory are read.
#[derive(Debug, Clone)]
pub struct DirectoryOptions {
    /// Descend into subdirectories (default true).
    pub recurse: bool,
    /// Glob patterns (Argo CD directory-source syntax: `*.yaml`, `{a.yaml,b/*.yml}`), matched
    /// against the path relative to the source directory; `*` also matches `/`. Empty: all.
    pub include: Vec<String>,
    /// Glob patterns of files to skip; applied after `include`.
    pub exclude: Vec<String>,
}

impl Default for DirectoryOptions {
    fn default() -> Self {
        Self {
            recurse: true,
            include: Vec::new(),
            exclude: Vec::new(),
        }
    }
}

/// One parsed document: the object and where it came from.
#[derive(Debug)]
pub struct Document {
    pub origin: Origin,
    pub value: Value,
}

const EXTENSIONS: [&str; 3] = ["yaml", "yml", "json"];

fn glob_set(patterns: &[String], what: &str) -> Result<Option<GlobSet>, CmpError> {
    if patterns.is_empty() {
        return Ok(None);
    }
    let mut builder = GlobSetBuilder::new();
    for pattern in patterns {
        let glob = Glob::new(pattern)
            .map_err(|e| CmpError::Config(format!("invalid {what} glob {pattern:?}: {e}")))?;
        builder.add(glob);
    }
    builder
        .build()
        .map(Some)
        .map_err(|e| CmpError::Config(format!("invalid {what} globs: {e}")))
}

/// Splits a comma-separated glob list, keeping commas inside `{...}` alternatives.
pub fn split_globs(list: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut current = String::new();
    for c in list.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                let t = current.trim();
                if !t.is_empty() {
                    out.push(t.to_string());
                }
                current.clear();
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    let t = current.trim();
    if !t.is_empty() {
        out.push(t.to_string());
    }
    out
}

/// Lists the manifest files under `root`, sorted by relative path (`/`-separated), skipping
/// hidden files and directories (names starting with `.`, e.g. `.git`, `.github`).
pub fn discover(
    root: &Path,
    options: &DirectoryOptions,
) -> Result<Vec<(String, PathBuf)>, CmpError> {
    let include = glob_set(&options.include, "include")?;
    let exclude = glob_set(&options.exclude, "exclude")?;
    let max_depth = if options.recurse { usize::MAX } else { 1 };
    let mut files = Vec::new();
    let walker = walkdir::WalkDir::new(root)
        .max_depth(max_depth)
        .sort_by_file_name()
        .into_iter()
        .filter_entry(|e| e.depth() == 0 || !e.file_name().to_string_lossy().starts_with('.'));
    for entry in walker {
        let entry = entry.map_err(|e| CmpError::Io {
            path: e
                .path()
                .map_or_else(|| root.display().to_string(), |p| p.display().to_string()),
            source: e
                .into_io_error()
                .unwrap_or_else(|| std::io::Error::other("filesystem loop")),
        })?;
        if entry.file_type().is_dir() {
            continue;
        }
        let path = entry.path();
        let Some(ext) = path.extension().and_then(|e| e.to_str()) else {
            continue;
        };
        if !EXTENSIONS.contains(&ext) {
            continue;
        }
        if entry.path_is_symlink() && std::fs::metadata(path).map(|m| m.is_dir()).unwrap_or(false) {
            continue;
        }
        let rel = path.strip_prefix(root).unwrap_or(path);
        let rel_str = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy())
            .collect::<Vec<_>>()
            .join("/");
        if include.as_ref().is_some_and(|g| !g.is_match(&rel_str))
            || exclude.as_ref().is_some_and(|g| g.is_match(&rel_str))
        {
            continue;
        }
        files.push((rel_str, path.to_path_buf()));
    }
    files.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(files)
}

/// Reads and parses every discovered file.
pub fn read_directory(root: &Path, options: &DirectoryOptions) -> Result<Vec<Document>, CmpError> {
    let files = discover(root, options)?;
    let mut docs = Vec::new();
    for (rel, path) in files {
        let bytes = std::fs::read(&path).map_err(|source| CmpError::Io {
            path: rel.clone(),
            source,
        })?;
        let text = String::from_utf8(bytes).map_err(|e| CmpError::InvalidManifest {
            origin: Origin {
                file: rel.clone(),
                document: 1,
                line: 1,
            },
            message: format!("file is not UTF-8 ({e})"),
        })?;
        if rel.ends_with(".json") {
            parse_json_stream(&rel, &text, &mut docs)?;
        } else {
            parse_yaml_stream(&rel, &text, &mut docs)?;
        }
    }
    Ok(docs)
}

/// A YAML document's text and where it starts.
#[derive(Debug, PartialEq, Eq)]
pub struct Chunk<'a> {
    pub index: usize,
    /// 1-based line of the chunk's first line.
    pub line: usize,
    pub text: &'a str,
}

fn is_marker(line: &str, marker: &str) -> bool {
    let line = line.strip_suffix('\r').unwrap_or(line);
    match line.strip_prefix(marker) {
        Some(rest) => rest.is_empty() || rest.starts_with([' ', '\t']),
        None => false,
    }
}

/// True when a chunk holds nothing but blank lines, comments and directive/end markers.
fn is_blank(text: &str) -> bool {
    text.lines().all(|l| {
        let t = l.trim();
        t.is_empty() || t.starts_with('#') || t == "..."
    })
}

/// Splits a YAML stream into documents at `---` lines (a document marker at column 0 always
/// starts a new document in YAML, whatever precedes it). Text after `---` on the marker line
/// belongs to the new document. A content-free preamble before the first `---` is not counted.
pub fn split_documents(text: &str) -> Vec<Chunk<'_>> {
    let mut chunks = Vec::new();
    let mut start = 0usize; // byte offset of current chunk
    let mut start_line = 1usize;
    let mut offset = 0usize;
    let mut first = true;
    for (line_no, line) in (1usize..).zip(text.split_inclusive('\n')) {
        let bare = line.strip_suffix('\n').unwrap_or(line);
        if is_marker(bare, "---") {
            let prev = &text[start..offset];
            if !(first && is_blank(prev)) {
                chunks.push(Chunk {
                    index: chunks.len() + 1,
                    line: start_line,
                    text: prev,
                });
            }
            first = false;
            // the rest of the marker line (e.g. `--- !tag` or `--- {a: 1}`) starts the document
            start = offset + 3;
            start_line = line_no;
        }
        offset += line.len();
    }
    chunks.push(Chunk {
        index: chunks.len() + 1,
        line: start_line,
        text: &text[start..],
    });
    chunks
}

pub(crate) fn yaml_options() -> serde_saphyr::Options {
    serde_saphyr::options! {
        // Kubernetes reads YAML 1.1 (go-yaml v2 via sigs.k8s.io/yaml): `mode: 0644` is octal 420.
        legacy_octal_numbers: true,
        duplicate_keys: serde_saphyr::DuplicateKeyPolicy::Error,
    }
}

fn yaml_error(e: &serde_saphyr::Error, line_offset: usize) -> String {
    let options = serde_saphyr::render_options! {
        snippets: serde_saphyr::SnippetMode::Off,
        line_offset: line_offset as u64,
    };
    e.render_with_options(options)
        .replace(", set DuplicateKeyPolicy in Options if acceptable", "")
        .trim()
        .to_string()
}

/// Parses one YAML document (a chunk of a stream) in tiers: the block-style reader
/// ([`crate::block_yaml`]), the event-based fast path ([`crate::fast_yaml`]), then serde-saphyr
/// for everything they leave. `None` for a document without content.
pub fn parse_yaml_chunk(
    file: &str,
    chunk: &Chunk<'_>,
    options: &serde_saphyr::Options,
) -> Result<Option<Document>, CmpError> {
    let origin = Origin {
        file: file.to_string(),
        document: chunk.index,
        line: chunk.line,
    };
    let fast = crate::block_yaml::parse_document(chunk.text, options)
        .or_else(|| crate::fast_yaml::parse_document(chunk.text, options));
    let value = match fast {
        Some(value) => value,
        None => serde_saphyr::from_str_with_options(chunk.text, options.clone()).map_err(|e| {
            CmpError::InvalidYaml {
                origin: origin.clone(),
                message: yaml_error(&e, chunk.line - 1),
            }
        })?,
    };
    Ok((!value.is_null()).then_some(Document { origin, value }))
}

/// The non-blank documents of a YAML stream (a leading byte-order mark is ignored).
pub fn yaml_chunks(text: &str) -> Vec<Chunk<'_>> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    split_documents(text)
        .into_iter()
        .filter(|c| !is_blank(c.text))
        .collect()
}

/// Parses a YAML (or JSON-as-YAML) stream; empty and comment-only documents are skipped.
pub fn parse_yaml_stream(file: &str, text: &str, out: &mut Vec<Document>) -> Result<(), CmpError> {
    let options = yaml_options();
    for chunk in yaml_chunks(text) {
        if let Some(doc) = parse_yaml_chunk(file, &chunk, &options)? {
            push_expanding_lists(doc.origin, doc.value, out)?;
        }
    }
    Ok(())
}

/// Parses a `.json` file: one or more concatenated JSON values.
pub fn parse_json_stream(file: &str, text: &str, out: &mut Vec<Document>) -> Result<(), CmpError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut stream = serde_json::Deserializer::from_str(text).into_iter::<Value>();
    let mut index = 0;
    loop {
        let rest = &text[stream.byte_offset()..];
        let offset = text.len() - rest.trim_start().len();
        let line = text[..offset].matches('\n').count() + 1;
        let origin = Origin {
            file: file.to_string(),
            document: index + 1,
            line,
        };
        match stream.next() {
            None => break,
            Some(Ok(value)) => {
                index += 1;
                push_expanding_lists(origin, value, out)?;
            }
            Some(Err(e)) => {
                return Err(CmpError::InvalidJson {
                    origin,
                    message: format!("{e}"),
                });
            }
        }
    }
    Ok(())
}

/// A `v1 List` (`kind: List` or `*List` with `items`) is expanded into its items, as kubectl does.
pub(crate) fn push_expanding_lists(
    origin: Origin,
    value: Value,
    out: &mut Vec<Document>,
) -> Result<(), CmpError> {
    let is_list = value
        .get("kind")
        .and_then(Value::as_str)
        .is_some_and(|k| k.ends_with("List"))
        && value.get("items").is_some_and(Value::is_array)
        && value.get("apiVersion").and_then(Value::as_str) == Some("v1");
    if is_list {
        let Value::Object(mut map) = value else {
            unreachable!("checked above")
        };
        if let Some(Value::Array(items)) = map.remove("items") {
            for item in items {
                out.push(Document {
                    origin: origin.clone(),
                    value: item,
                });
            }
        }
        return Ok(());
    }
    out.push(Document { origin, value });
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Every YAML document of the valid test corpus (`tests/corpus`, without `bad/`).
    pub(crate) fn corpus_yaml_documents() -> Vec<String> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus");
        let mut documents = Vec::new();
        for entry in walkdir::WalkDir::new(root) {
            let entry = entry.unwrap();
            let path = entry.path();
            let is_yaml = path.extension().is_some_and(|e| e == "yaml" || e == "yml");
            if !is_yaml || path.components().any(|c| c.as_os_str() == "bad") {
                continue;
            }
            let text = std::fs::read_to_string(path).unwrap();
            documents.extend(yaml_chunks(&text).into_iter().map(|c| c.text.to_string()));
        }
        documents
    }

    #[test]
    fn split_counts_documents_and_lines() {
        let text = "# preamble\n---\na: 1\n---\n# c\n---\nb: 2\n";
        let chunks = split_documents(text);
        assert_eq!(chunks.len(), 3);
        assert_eq!((chunks[0].index, chunks[0].line), (1, 2));
        assert_eq!((chunks[2].index, chunks[2].line), (3, 6));
        assert_eq!(chunks[2].text, "\nb: 2\n");
        let no_marker = split_documents("a: 1\n");
        assert_eq!(no_marker.len(), 1);
        assert_eq!(no_marker[0].line, 1);
    }

    #[test]
    fn markers_need_column_zero_and_a_separator() {
        let text = "a: |\n  ---\n---x: 1\n";
        assert_eq!(split_documents(text).len(), 1);
    }

    #[test]
    fn glob_lists_keep_brace_alternatives() {
        assert_eq!(split_globs("{a,b}.yaml, c/*"), vec!["{a,b}.yaml", "c/*"]);
    }
}
