//! Reading the input: its files (or the stream), split into documents, parsed, validated and
//! serialized on all cores, in canonical order.

use crate::envelope::manifests_indent;
use crate::error::{CmpError, Origin};
use crate::manifest::{self, Checked, Manifest};
use crate::options::{GenerateOptions, Input};
use crate::source::{self, Chunk, Document};

/// Reads and parses the input into documents.
pub fn read_input(input: &Input, display_prefix: Option<&str>) -> Result<Vec<Document>, CmpError> {
    let mut docs = match input {
        Input::Directory { path, options } => source::read_directory(path, options)?,
        Input::Stream { name, text } => {
            let mut docs = Vec::new();
            source::parse_yaml_stream(name, text, &mut docs)?;
            docs
        }
    };
    if let (Some(prefix), Input::Directory { .. }) = (display_prefix, input) {
        let prefix = prefix.trim_end_matches('/');
        if !prefix.is_empty() && prefix != "." {
            for d in &mut docs {
                d.origin.file = format!("{prefix}/{}", d.origin.file);
            }
        }
    }
    Ok(docs)
}

/// One input text: a file of the source directory, or the stream.
struct SourceText<'a> {
    /// Name in messages (with the display prefix).
    name: String,
    /// The stream is borrowed, files are read.
    text: Result<std::borrow::Cow<'a, str>, CmpError>,
    json: bool,
}

fn load_sources<'a>(
    input: &'a Input,
    display_prefix: Option<&str>,
) -> Result<Vec<SourceText<'a>>, CmpError> {
    match input {
        Input::Stream { name, text } => Ok(vec![SourceText {
            name: name.clone(),
            text: Ok(std::borrow::Cow::Borrowed(text)),
            json: false,
        }]),
        Input::Directory { path, options } => {
            let prefix = display_prefix
                .map(|p| p.trim_end_matches('/'))
                .filter(|p| !p.is_empty() && *p != ".");
            let files = source::discover(path, options)?;
            Ok(files
                .into_iter()
                .map(|(rel, file)| {
                    let name = match prefix {
                        Some(p) => format!("{p}/{rel}"),
                        None => rel.clone(),
                    };
                    let text = std::fs::read(&file)
                        .map_err(|source| CmpError::Io {
                            path: rel.clone(),
                            source,
                        })
                        .and_then(|bytes| {
                            String::from_utf8(bytes)
                                .map(std::borrow::Cow::Owned)
                                .map_err(|e| CmpError::InvalidManifest {
                                    origin: Origin {
                                        file: name.clone(),
                                        document: 1,
                                        line: 1,
                                    },
                                    message: format!("file is not UTF-8 ({e})"),
                                })
                        });
                    SourceText {
                        json: rel.ends_with(".json"),
                        name,
                        text,
                    }
                })
                .collect())
        }
    }
}

/// A unit of parsing work: one YAML document, one JSON file, or a file that could not be read.
enum Unit<'a> {
    Yaml(&'a str, Chunk<'a>),
    Json(&'a str, &'a str),
    Unreadable(&'a CmpError),
}

/// A validated manifest, serialized unless its namespace waits for the input's CRDs.
enum Slot {
    Done(Manifest),
    Pending(Checked),
}

/// Per document: the slot and the kind it declares cluster-scoped (a CRD), or why it is invalid.
type Item = Result<(Slot, Option<(String, String)>), CmpError>;

fn process(
    unit: &Unit<'_>,
    default_namespace: Option<&str>,
    indent: usize,
    yaml: &serde_saphyr::Options,
) -> Result<Vec<Item>, CmpError> {
    let mut docs = Vec::new();
    match unit {
        Unit::Yaml(file, chunk) => {
            if let Some(doc) = source::parse_yaml_chunk(file, chunk, yaml)? {
                source::push_expanding_lists(doc.origin, doc.value, &mut docs)?;
            }
        }
        Unit::Json(file, text) => source::parse_json_stream(file, text, &mut docs)?,
        Unit::Unreadable(e) => return Err(clone_error(e)),
    }
    let no_crds = std::collections::HashSet::new();
    Ok(docs
        .into_iter()
        .map(|doc| {
            let checked = manifest::check(doc)?;
            let crd = checked.declares_cluster_scoped();
            let slot = if checked.namespace_settled(default_namespace) {
                Slot::Done(checked.finish(default_namespace, &no_crds, indent))
            } else {
                Slot::Pending(checked)
            };
            Ok((slot, crd))
        })
        .collect())
}

fn clone_error(e: &CmpError) -> CmpError {
    match e {
        CmpError::Io { path, source } => CmpError::Io {
            path: path.clone(),
            source: std::io::Error::new(source.kind(), source.to_string()),
        },
        CmpError::InvalidManifest { origin, message } => CmpError::InvalidManifest {
            origin: origin.clone(),
            message: message.clone(),
        },
        other => CmpError::Config(other.to_string()),
    }
}

/// Reads, parses, validates and serializes every manifest of the input, in canonical order.
///
/// Documents are independent once split, so they are processed on all cores (up to 8), each
/// turned into its serialized [`Manifest`] right away so that at most a few parsed trees are
/// alive at a time. Errors are those of a sequential pass: the first parse error by position,
/// else the first invalid manifest by position, else duplicates.
pub fn load_manifests(input: &Input, options: &GenerateOptions) -> Result<Vec<Manifest>, CmpError> {
    let sources = load_sources(input, options.display_prefix.as_deref())?;
    let mut units = Vec::new();
    for s in &sources {
        match &s.text {
            Err(e) => units.push(Unit::Unreadable(e)),
            Ok(text) if s.json => units.push(Unit::Json(&s.name, text)),
            Ok(text) => units.extend(
                source::yaml_chunks(text)
                    .into_iter()
                    .map(|c| Unit::Yaml(&s.name, c)),
            ),
        }
    }
    let default_namespace = options.default_namespace.as_deref();
    let indent = manifests_indent(options);
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(8);
    let results: Vec<Result<Vec<Item>, CmpError>> = if threads > 1 && units.len() >= 64 {
        // Work is handed out in small batches so that uneven documents balance across threads.
        const BATCH: usize = 16;
        let next = std::sync::atomic::AtomicUsize::new(0);
        let mut indexed: Vec<(usize, Result<Vec<Item>, CmpError>)> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|_| {
                    s.spawn(|| {
                        let yaml = source::yaml_options();
                        let mut done = Vec::new();
                        loop {
                            let start = next.fetch_add(BATCH, std::sync::atomic::Ordering::Relaxed);
                            if start >= units.len() {
                                break done;
                            }
                            for (i, unit) in units.iter().enumerate().skip(start).take(BATCH) {
                                done.push((i, process(unit, default_namespace, indent, &yaml)));
                            }
                        }
                    })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().expect("parser thread panicked"))
                .collect()
        });
        indexed.sort_unstable_by_key(|(i, _)| *i);
        indexed.into_iter().map(|(_, r)| r).collect()
    } else {
        let yaml = source::yaml_options();
        units
            .iter()
            .map(|u| process(u, default_namespace, indent, &yaml))
            .collect()
    };
    drop(units);
    drop(sources);
    let mut items = Vec::with_capacity(results.len());
    for r in results {
        items.extend(r?);
    }
    let mut slots = Vec::with_capacity(items.len());
    let mut crds = std::collections::HashSet::new();
    for item in items {
        let (slot, crd) = item?;
        crds.extend(crd);
        slots.push(slot);
    }
    let manifests = slots
        .into_iter()
        .map(|slot| match slot {
            Slot::Done(m) => m,
            Slot::Pending(c) => c.finish(default_namespace, &crds, indent),
        })
        .collect();
    manifest::order(manifests)
}
