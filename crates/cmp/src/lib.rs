//! `argocd-pull cmp`: an Argo CD Config Management Plugin that wraps an application's manifests
//! in OCM `ManifestWork`s (one per target cluster) or a `ManifestWorkReplicaSet` (a Placement).
//!
//! The library is a pipeline of pure steps — [`source`] (discover and parse input) →
//! [`manifest::check`] and `finish` (validate, default namespaces, serialize) →
//! [`manifest::order`] → [`plan`] (name and split works under a byte budget) → [`render`]
//! (deterministic JSON documents) — plus [`install`] (what to apply to enable the plugin) and a
//! thin [`cli`] layer. See the crate README for the design.

pub mod block_yaml;
pub mod cli;
pub mod error;
pub mod fast_yaml;
pub mod feedback;
pub mod install;
pub mod manifest;
pub mod source;

use std::path::PathBuf;

use serde_json::{Map, Value, json};

pub use error::{CmpError, Origin};
use manifest::{Checked, Manifest};
use source::{Chunk, DirectoryOptions, Document};

/// Default per-work byte budget: 500 KiB of compact JSON, a third of etcd's default 1.5 MiB
/// request limit (room for status, managed fields and server-side metadata).
pub const DEFAULT_MAX_WORK_BYTES: usize = 500 * 1024;

/// `apiVersion` of ManifestWork / ManifestWorkReplicaSet.
pub const WORK_API_VERSION: &str = "work.open-cluster-management.io/v1";
pub const REPLICASET_API_VERSION: &str = "work.open-cluster-management.io/v1alpha1";

/// Hub Application identity (same keys the basic pull model uses).
pub const ANNOTATION_HUB_APPLICATION_NAME: &str =
    "apps.open-cluster-management.io/hub-application-name";
pub const ANNOTATION_HUB_APPLICATION_NAMESPACE: &str =
    "apps.open-cluster-management.io/hub-application-namespace";
/// Marks generated works (`app.kubernetes.io/managed-by`).
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY: &str = "argocd-pull-cmp";
/// Per-resource Argo CD sync option: works are applied server-side (a client-side apply stores
/// the whole object in an annotation, limited to 256 KiB — a large work could not be applied).
pub const ANNOTATION_SYNC_OPTIONS: &str = "argocd.argoproj.io/sync-options";

/// Where the manifests come from.
#[derive(Debug, Clone)]
pub enum Input {
    /// A source directory (Argo CD runs the plugin in the application's source directory).
    Directory {
        path: PathBuf,
        options: DirectoryOptions,
    },
    /// A rendered stream (e.g. `helm template` or `kustomize build` output), named in messages.
    Stream { name: String, text: String },
}

/// Where the works go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// One ManifestWork per managed cluster, in the cluster's namespace.
    Clusters(Vec<String>),
    /// One ManifestWorkReplicaSet in the Placement's namespace.
    Placement { namespace: String, name: String },
}

/// Everything `generate` needs besides the input.
#[derive(Debug, Clone)]
pub struct GenerateOptions {
    /// Base name of the works (the Argo CD application name unless overridden).
    pub work_name: String,
    /// Hub Application name and namespace, recorded in annotations on every work.
    pub app_name: String,
    pub app_namespace: String,
    pub target: Target,
    /// Per-work budget in bytes of compact JSON.
    pub max_work_bytes: usize,
    /// Namespace given to namespaced manifests that have none.
    pub default_namespace: Option<String>,
    /// Print nothing (instead of failing) when the input holds no manifest.
    pub allow_empty: bool,
    /// Prefix for file names in messages (the app's source path in the repository).
    pub display_prefix: Option<String>,
}

/// A planned set of works: the same parts go to every target namespace.
#[derive(Debug)]
pub struct Plan {
    pub manifests: Vec<Manifest>,
    /// Each part is a range into `manifests`.
    pub parts: Vec<std::ops::Range<usize>>,
}

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

/// The whole pipeline: returns the output text (empty only with `allow_empty`).
pub fn generate(input: &Input, options: &GenerateOptions) -> Result<String, CmpError> {
    Ok(match build(input, options)? {
        Some(plan) => render(&plan, options),
        None => String::new(),
    })
}

/// Everything but the rendering: reads, validates and plans the works. `None` when the input
/// holds no manifest and `allow_empty` is set. Every input error is found here, so a caller
/// that renders only after this returns writes nothing for bad input.
pub fn build(input: &Input, options: &GenerateOptions) -> Result<Option<Plan>, CmpError> {
    validate_options(options)?;
    let manifests = load_manifests(input, options)?;
    if manifests.is_empty() {
        if options.allow_empty {
            return Ok(None);
        }
        let where_ = match input {
            Input::Directory { path, options: d } => {
                let mut s = format!(" in {}", path.display());
                if !d.include.is_empty() {
                    s.push_str(&format!(" (include: {})", d.include.join(",")));
                }
                if !d.exclude.is_empty() {
                    s.push_str(&format!(" (exclude: {})", d.exclude.join(",")));
                }
                s
            }
            Input::Stream { name, .. } => format!(" in {name}"),
        };
        return Err(CmpError::NoManifests(format!(
            "{where_}; set ARGOCD_ENV_ALLOW_EMPTY=true (--allow-empty) to print no work"
        )));
    }
    plan(manifests, options).map(Some)
}

/// Checks a DNS-1123 subdomain (`max` ≤ 253) or, with `label`, a DNS-1123 label (≤ 63).
pub fn check_dns1123(what: &str, value: &str, label: bool) -> Result<(), CmpError> {
    let max = if label { 63 } else { 253 };
    let part_ok = |p: &str| {
        !p.is_empty()
            && p.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !p.starts_with('-')
            && !p.ends_with('-')
    };
    let ok = value.len() <= max
        && if label {
            part_ok(value)
        } else {
            value.split('.').all(part_ok)
        };
    if ok {
        Ok(())
    } else {
        let kind = if label {
            "DNS-1123 label"
        } else {
            "DNS-1123 subdomain"
        };
        Err(CmpError::Config(format!(
            "{what} {value:?} is not a valid {kind} (lowercase letters, digits and '-'{}, at most {max} characters)",
            if label { "" } else { " in '.'-separated parts" }
        )))
    }
}

fn validate_options(o: &GenerateOptions) -> Result<(), CmpError> {
    check_dns1123("work name", &o.work_name, false)?;
    match &o.target {
        Target::Clusters(clusters) => {
            if clusters.is_empty() {
                return Err(CmpError::Config(
                    "no target: set ARGOCD_ENV_TARGET_CLUSTER (comma-separated cluster names) or ARGOCD_ENV_PLACEMENT".into(),
                ));
            }
            for c in clusters {
                check_dns1123("target cluster", c, true)?;
            }
        }
        Target::Placement { namespace, name } => {
            check_dns1123("placement namespace", namespace, true)?;
            check_dns1123("placement name", name, false)?;
        }
    }
    if let Some(ns) = &o.default_namespace {
        check_dns1123("default namespace", ns, true)?;
    }
    Ok(())
}

fn part_name(base: &str, index: usize) -> String {
    if index == 0 {
        base.to_string()
    } else {
        format!("{base}-part-{}", index + 1)
    }
}

/// The work (or replica set) around the manifests, with an empty manifest list.
fn envelope(options: &GenerateOptions, name: &str, namespace: &str, configs: Vec<Value>) -> Value {
    let mut workload = Map::new();
    workload.insert("manifests".into(), Value::Array(Vec::new()));
    let mut work_spec = Map::new();
    work_spec.insert("workload".into(), Value::Object(workload));
    if !configs.is_empty() {
        work_spec.insert("manifestConfigs".into(), Value::Array(configs));
    }
    let metadata = json!({
        "name": name,
        "namespace": namespace,
        "labels": { LABEL_MANAGED_BY: MANAGED_BY },
        "annotations": {
            ANNOTATION_HUB_APPLICATION_NAME: options.app_name,
            ANNOTATION_HUB_APPLICATION_NAMESPACE: options.app_namespace,
            ANNOTATION_SYNC_OPTIONS: "ServerSideApply=true",
        },
    });
    match &options.target {
        Target::Clusters(_) => json!({
            "apiVersion": WORK_API_VERSION,
            "kind": "ManifestWork",
            "metadata": metadata,
            "spec": Value::Object(work_spec),
        }),
        Target::Placement {
            name: placement, ..
        } => json!({
            "apiVersion": REPLICASET_API_VERSION,
            "kind": "ManifestWorkReplicaSet",
            "metadata": metadata,
            "spec": {
                "placementRefs": [{ "name": placement, "rolloutStrategy": { "type": "All" } }],
                // Required by the CRD (the API server defaults it; client-side validation
                // does not): the CRD's default.
                "cascadeDeletionPolicy": "Background",
                "manifestWorkTemplate": Value::Object(work_spec),
            },
        }),
    }
}

fn target_namespaces(options: &GenerateOptions) -> Vec<String> {
    match &options.target {
        Target::Clusters(c) => {
            let mut c = c.clone();
            c.sort();
            c.dedup();
            c
        }
        Target::Placement { namespace, .. } => vec![namespace.clone()],
    }
}

/// Assigns manifests to parts: greedy in the canonical order, a new part whenever the next
/// manifest would push the work's compact JSON size over the budget.
pub fn plan(manifests: Vec<Manifest>, options: &GenerateOptions) -> Result<Plan, CmpError> {
    let budget = options.max_work_bytes;
    let longest_ns = target_namespaces(options)
        .into_iter()
        .max_by_key(String::len)
        .unwrap_or_default();
    // Upper bound of the envelope size: longest namespace, a part suffix, an empty config list.
    let widest_name = format!("{}-part-{}", options.work_name, manifests.len().max(1));
    check_dns1123("work name", &widest_name, false).map_err(|_| {
        CmpError::Config(format!(
            "work name {:?} is too long to add a part suffix (\"-part-N\"); set ARGOCD_ENV_WORK_NAME to a shorter name",
            options.work_name
        ))
    })?;
    let base = manifest::compact_len(&envelope(
        options,
        &widest_name,
        &longest_ns,
        vec![json!({})],
    ));
    if base >= budget {
        return Err(CmpError::Config(format!(
            "max work bytes {budget} is smaller than an empty work ({base} bytes)"
        )));
    }
    let mut parts = Vec::new();
    let mut start = 0;
    let mut used = base;
    for (i, m) in manifests.iter().enumerate() {
        // the manifest and, for kinds with status feedback, its `manifestConfigs` entry
        let config_len = feedback::manifest_config(m).map(|c| manifest::compact_len(&c));
        let cost = m.compact_len + 1 + config_len.map_or(0, |len| len + 1);
        if base + cost > budget {
            return Err(CmpError::ObjectTooLarge {
                origin: m.origin.clone(),
                kind: m.kind.clone(),
                name: m.name.clone(),
                size: m.compact_len,
                budget,
            });
        }
        if used + cost > budget && i > start {
            parts.push(start..i);
            start = i;
            used = base;
        }
        used += cost;
    }
    parts.push(start..manifests.len());
    Ok(Plan { manifests, parts })
}

const MARKER: &str = "\u{1}argocd-pull-manifests\u{1}";

/// The envelope rendered pretty with a marker string in place of the manifest list, and the
/// byte offset of the `"manifests"` key.
fn envelope_with_marker(options: &GenerateOptions, mut env: Value) -> (String, usize) {
    let manifests_slot = match &options.target {
        Target::Clusters(_) => env.pointer_mut("/spec/workload/manifests"),
        Target::Placement { .. } => {
            env.pointer_mut("/spec/manifestWorkTemplate/workload/manifests")
        }
    };
    *manifests_slot.expect("envelope has a manifest list") = Value::String(MARKER.into());
    let text = serde_json::to_string_pretty(&env).expect("JSON value serializes");
    let marker_json = serde_json::to_string(MARKER).expect("string serializes");
    let at = text
        .find(&format!("\"manifests\": {marker_json}"))
        .expect("marker is rendered");
    (text, at)
}

/// Spaces before each manifest's lines in the rendered work (so that workers can serialize
/// manifests in place).
fn manifests_indent(options: &GenerateOptions) -> usize {
    let env = envelope(options, "x", "x", Vec::new());
    let (text, at) = envelope_with_marker(options, env);
    let line_start = text[..at].rfind('\n').map_or(0, |p| p + 1);
    at - line_start + 2
}

/// Renders the plan: pretty JSON documents separated by `---` lines, per target namespace
/// (sorted) then per part. Byte-identical for identical input.
pub fn render(plan: &Plan, options: &GenerateOptions) -> String {
    let total: usize = plan.manifests.iter().map(|m| m.pretty.len() + 64).sum();
    let mut out = Vec::with_capacity(total * target_namespaces(options).len() + 4096);
    render_to(plan, options, &mut out).expect("writing to memory cannot fail");
    String::from_utf8(out).expect("rendered JSON is UTF-8")
}

/// [`render`] into a writer (e.g. a buffered stdout), without holding the whole output.
pub fn render_to(
    plan: &Plan,
    options: &GenerateOptions,
    out: &mut dyn std::io::Write,
) -> std::io::Result<()> {
    let namespaces = target_namespaces(options);
    let marker_json = serde_json::to_string(MARKER).expect("string serializes");
    let mut first = true;
    for ns in &namespaces {
        for (index, range) in plan.parts.iter().enumerate() {
            let configs: Vec<Value> = plan.manifests[range.clone()]
                .iter()
                .filter_map(feedback::manifest_config)
                .collect();
            let env = envelope(options, &part_name(&options.work_name, index), ns, configs);
            let (text, at) = envelope_with_marker(options, env);
            let needle = format!("\"manifests\": {marker_json}");
            let line_start = text[..at].rfind('\n').map_or(0, |p| p + 1);
            let indent = &text[line_start..at];
            let item_indent = format!("{indent}  ");
            debug_assert_eq!(item_indent.len(), manifests_indent(options));
            if !first {
                out.write_all(b"---\n")?;
            }
            first = false;
            out.write_all(&text.as_bytes()[..at])?;
            out.write_all(b"\"manifests\": [\n")?;
            for (k, m) in plan.manifests[range.clone()].iter().enumerate() {
                if k > 0 {
                    out.write_all(b",\n")?;
                }
                out.write_all(item_indent.as_bytes())?;
                out.write_all(m.pretty.as_bytes())?; // already indented for this place
            }
            out.write_all(b"\n")?;
            out.write_all(indent.as_bytes())?;
            out.write_all(b"]")?;
            out.write_all(&text.as_bytes()[at + needle.len()..])?;
            out.write_all(b"\n")?;
        }
    }
    Ok(())
}
