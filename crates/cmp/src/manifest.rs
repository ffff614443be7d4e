//! Validation of parsed documents, resource identity, namespace defaulting and the stable
//! order in which manifests are placed into works.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

use crate::error::{CmpError, Origin};
use crate::source::Document;

/// A validated manifest, already serialized (the parsed tree is dropped to keep memory low).
#[derive(Debug, Clone)]
pub struct Manifest {
    pub origin: Origin,
    pub api_version: String,
    /// API group (`""` for the core group).
    pub group: String,
    pub kind: String,
    pub name: String,
    /// `metadata.namespace` after defaulting, if any.
    pub namespace: Option<String>,
    /// `argocd.argoproj.io/sync-wave` (0 when absent).
    pub wave: i64,
    /// Pretty JSON as `serde_json` writes it (2-space indent, no trailing newline), placed
    /// where it goes in the rendered work: every line after the first is indented by the
    /// `indent` given to [`Checked::finish`].
    pub pretty: String,
    /// Length of the compact JSON serialization (what the API server stores).
    pub compact_len: usize,
}

impl Manifest {
    /// `group/kind namespace/name`, for messages.
    pub fn identity(&self) -> String {
        let gk = if self.group.is_empty() {
            self.kind.clone()
        } else {
            format!("{}.{}", self.kind, self.group)
        };
        match &self.namespace {
            Some(ns) => format!("{gk} {ns}/{}", self.name),
            None => format!("{gk} {}", self.name),
        }
    }
}

/// Apply order of well-known kinds: Argo CD's (gitops-engine) kind order, which is Helm's
/// install order. Unknown kinds (custom resources, webhooks) come after all of these.
const KIND_ORDER: &[&str] = &[
    "Namespace",
    "NetworkPolicy",
    "ResourceQuota",
    "LimitRange",
    "PodSecurityPolicy",
    "PodDisruptionBudget",
    "ServiceAccount",
    "Secret",
    "SecretList",
    "ConfigMap",
    "StorageClass",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "CustomResourceDefinition",
    "ClusterRole",
    "ClusterRoleList",
    "ClusterRoleBinding",
    "ClusterRoleBindingList",
    "Role",
    "RoleList",
    "RoleBinding",
    "RoleBindingList",
    "Service",
    "DaemonSet",
    "Pod",
    "ReplicationController",
    "ReplicaSet",
    "Deployment",
    "HorizontalPodAutoscaler",
    "StatefulSet",
    "Job",
    "CronJob",
    "IngressClass",
    "Ingress",
    "APIService",
];

fn kind_rank(kind: &str) -> usize {
    KIND_ORDER
        .iter()
        .position(|k| *k == kind)
        .unwrap_or(KIND_ORDER.len())
}

/// Built-in cluster-scoped kinds (group, kind); never given a default namespace.
const CLUSTER_SCOPED: &[(&str, &str)] = &[
    ("", "Namespace"),
    ("", "Node"),
    ("", "PersistentVolume"),
    ("", "ComponentStatus"),
    ("apiextensions.k8s.io", "CustomResourceDefinition"),
    ("apiregistration.k8s.io", "APIService"),
    ("rbac.authorization.k8s.io", "ClusterRole"),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
    ("storage.k8s.io", "StorageClass"),
    ("storage.k8s.io", "CSIDriver"),
    ("storage.k8s.io", "CSINode"),
    ("storage.k8s.io", "VolumeAttachment"),
    ("storage.k8s.io", "VolumeAttributesClass"),
    ("scheduling.k8s.io", "PriorityClass"),
    ("networking.k8s.io", "IngressClass"),
    ("networking.k8s.io", "IPAddress"),
    ("networking.k8s.io", "ServiceCIDR"),
    ("node.k8s.io", "RuntimeClass"),
    (
        "admissionregistration.k8s.io",
        "MutatingWebhookConfiguration",
    ),
    (
        "admissionregistration.k8s.io",
        "ValidatingWebhookConfiguration",
    ),
    ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy"),
    (
        "admissionregistration.k8s.io",
        "ValidatingAdmissionPolicyBinding",
    ),
    ("admissionregistration.k8s.io", "MutatingAdmissionPolicy"),
    (
        "admissionregistration.k8s.io",
        "MutatingAdmissionPolicyBinding",
    ),
    ("certificates.k8s.io", "CertificateSigningRequest"),
    ("certificates.k8s.io", "ClusterTrustBundle"),
    ("flowcontrol.apiserver.k8s.io", "FlowSchema"),
    ("flowcontrol.apiserver.k8s.io", "PriorityLevelConfiguration"),
    ("resource.k8s.io", "DeviceClass"),
];

/// API group of an `apiVersion` (`apps/v1` → `apps`, `v1` → ``).
pub fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(g, _)| g)
}

fn required_str<'a>(value: &'a Value, field: &str, origin: &Origin) -> Result<&'a str, CmpError> {
    match value.get(field) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s),
        Some(Value::String(_)) | None | Some(Value::Null) => Err(CmpError::InvalidManifest {
            origin: origin.clone(),
            message: format!("missing {field}"),
        }),
        Some(other) => Err(CmpError::InvalidManifest {
            origin: origin.clone(),
            message: format!("{field} must be a string, found {}", type_name(other)),
        }),
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

/// A document that passed validation, not yet serialized (its namespace may still need the
/// default, which depends on the CRDs found anywhere in the input).
#[derive(Debug)]
pub struct Checked {
    pub origin: Origin,
    pub value: Value,
    pub api_version: String,
    pub group: String,
    pub kind: String,
    pub name: String,
    pub namespace: Option<String>,
    pub wave: i64,
}

impl Checked {
    /// `(group, kind)` this document declares cluster-scoped, when it is such a CRD.
    pub fn declares_cluster_scoped(&self) -> Option<(String, String)> {
        let v = &self.value;
        match (
            v.get("kind").and_then(Value::as_str),
            v.pointer("/spec/scope").and_then(Value::as_str),
            v.pointer("/spec/group").and_then(Value::as_str),
            v.pointer("/spec/names/kind").and_then(Value::as_str),
        ) {
            (Some("CustomResourceDefinition"), Some("Cluster"), Some(g), Some(k)) => {
                Some((g.to_string(), k.to_string()))
            }
            _ => None,
        }
    }

    /// True when the default namespace does not concern this object, whatever CRDs the input
    /// holds: it has a namespace, there is no default, or it is a built-in cluster-scoped kind.
    pub fn namespace_settled(&self, default_namespace: Option<&str>) -> bool {
        self.namespace.is_some()
            || default_namespace.is_none()
            || builtin_cluster_scoped(&self.group, &self.kind)
    }

    /// Applies the default namespace (unless the kind is cluster-scoped) and serializes, with
    /// the lines after the first indented by `indent` spaces.
    pub fn finish(
        self,
        default_namespace: Option<&str>,
        crd_cluster_scoped: &HashSet<(String, String)>,
        indent: usize,
    ) -> Manifest {
        let Checked {
            origin,
            mut value,
            api_version,
            group,
            kind,
            name,
            mut namespace,
            wave,
        } = self;
        if let (None, Some(ns)) = (&namespace, default_namespace)
            && !builtin_cluster_scoped(&group, &kind)
            && !crd_cluster_scoped.contains(&(group.clone(), kind.clone()))
        {
            if let Some(Value::Object(m)) = value.get_mut("metadata") {
                m.insert("namespace".into(), Value::String(ns.to_string()));
            }
            namespace = Some(ns.to_string());
        }
        let (pretty, compact_len) = pretty_placed(&value, indent);
        drop(value);
        Manifest {
            origin,
            api_version,
            group,
            kind,
            name,
            namespace,
            wave,
            pretty,
            compact_len,
        }
    }
}

fn builtin_cluster_scoped(group: &str, kind: &str) -> bool {
    CLUSTER_SCOPED
        .iter()
        .any(|(g, k)| *g == group && *k == kind)
}

/// Validates one document: a mapping with `apiVersion`, `kind`, `metadata.name` (and a valid
/// namespace and sync wave, when present).
pub fn check(doc: Document) -> Result<Checked, CmpError> {
    let Document { origin, value } = doc;
    if !value.is_object() {
        return Err(CmpError::InvalidManifest {
            origin,
            message: format!("a manifest must be a mapping, found {}", type_name(&value)),
        });
    }
    let api_version = required_str(&value, "apiVersion", &origin)?.to_string();
    let kind = required_str(&value, "kind", &origin)?.to_string();
    let metadata = match value.get("metadata") {
        Some(m @ Value::Object(_)) => m,
        None | Some(Value::Null) => {
            return Err(CmpError::InvalidManifest {
                origin,
                message: "missing metadata.name".into(),
            });
        }
        Some(other) => {
            return Err(CmpError::InvalidManifest {
                origin,
                message: format!("metadata must be a mapping, found {}", type_name(other)),
            });
        }
    };
    let name = match metadata.get("name") {
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        Some(Value::String(_)) | None | Some(Value::Null) => {
            return Err(CmpError::InvalidManifest {
                origin,
                message: "missing metadata.name".into(),
            });
        }
        Some(other) => {
            return Err(CmpError::InvalidManifest {
                origin,
                message: format!("metadata.name must be a string, found {}", type_name(other)),
            });
        }
    };
    let namespace = match metadata.get("namespace") {
        Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
        Some(Value::String(_)) | None | Some(Value::Null) => None,
        Some(other) => {
            return Err(CmpError::InvalidManifest {
                origin,
                message: format!(
                    "metadata.namespace must be a string, found {}",
                    type_name(other)
                ),
            });
        }
    };
    let wave =
        match metadata.pointer("/annotations/argocd.argoproj.io~1sync-wave") {
            None | Some(Value::Null) => 0,
            Some(Value::String(s)) => s.trim().parse::<i64>().map_err(|_| {
                CmpError::InvalidManifest {
                    origin: origin.clone(),
                    message: format!(
                        "annotation argocd.argoproj.io/sync-wave must be an integer, found {s:?}"
                    ),
                }
            })?,
            Some(other) => {
                return Err(CmpError::InvalidManifest {
                    origin,
                    message: format!(
                        "annotation argocd.argoproj.io/sync-wave must be a string, found {}",
                        type_name(other)
                    ),
                });
            }
        };
    let group = group_of(&api_version).to_string();
    Ok(Checked {
        origin,
        value,
        api_version,
        group,
        kind,
        name,
        namespace,
        wave,
    })
}

/// Sorts manifests into the canonical order and rejects duplicates (naming both places).
pub fn order(mut out: Vec<Manifest>) -> Result<Vec<Manifest>, CmpError> {
    out.sort_by(|a, b| {
        (
            a.wave,
            kind_rank(&a.kind),
            &a.kind,
            &a.group,
            &a.namespace,
            &a.name,
        )
            .cmp(&(
                b.wave,
                kind_rank(&b.kind),
                &b.kind,
                &b.group,
                &b.namespace,
                &b.name,
            ))
    });
    let mut seen: HashMap<(&str, &str, Option<&str>, &str), usize> =
        HashMap::with_capacity(out.len());
    for (i, m) in out.iter().enumerate() {
        let key = (
            m.group.as_str(),
            m.kind.as_str(),
            m.namespace.as_deref(),
            m.name.as_str(),
        );
        if let Some(&j) = seen.get(&key) {
            let (first, second) = if out[j].origin_key() <= m.origin_key() {
                (j, i)
            } else {
                (i, j)
            };
            return Err(CmpError::Duplicate {
                identity: m.identity(),
                first: out[first].origin.clone(),
                second: out[second].origin.clone(),
            });
        }
        seen.insert(key, i);
    }
    Ok(out)
}

impl Manifest {
    fn origin_key(&self) -> (&str, usize) {
        (&self.origin.file, self.origin.document)
    }
}

struct Counter(usize);

impl std::io::Write for Counter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len();
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// `serde_json::to_string_pretty`, with every line after the first indented by `base` more
/// spaces, and the length of the compact serialization counted on the way (the pretty form
/// only adds a line break plus indentation before elements and closing brackets, and a space
/// after each `:`).
pub fn pretty_placed(value: &Value, base: usize) -> (String, usize) {
    let mut out = Vec::with_capacity(256);
    let mut formatter = Placed {
        base,
        level: 0,
        has_value: false,
        layout: 0,
    };
    let mut serializer = serde_json::Serializer::with_formatter(&mut out, &mut formatter);
    serde::Serialize::serialize(value, &mut serializer).expect("a JSON value always serializes");
    let compact = out.len() - formatter.layout;
    let text = String::from_utf8(out).expect("serde_json writes UTF-8");
    (text, compact)
}

/// `serde_json`'s `PrettyFormatter` (two spaces per level) plus a base indentation, counting
/// the bytes it adds to the compact form.
struct Placed {
    base: usize,
    level: usize,
    has_value: bool,
    layout: usize,
}

const SPACES: [u8; 128] = [b' '; 128];

impl Placed {
    fn newline<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        w.write_all(b"\n")?;
        let mut n = self.base + 2 * self.level;
        self.layout += 1 + n;
        while n > 0 {
            let k = n.min(SPACES.len());
            w.write_all(&SPACES[..k])?;
            n -= k;
        }
        Ok(())
    }

    fn open<W: ?Sized + std::io::Write>(&mut self, w: &mut W, b: &[u8]) -> std::io::Result<()> {
        self.level += 1;
        self.has_value = false;
        w.write_all(b)
    }

    fn close<W: ?Sized + std::io::Write>(&mut self, w: &mut W, b: &[u8]) -> std::io::Result<()> {
        self.level -= 1;
        if self.has_value {
            self.newline(w)?;
        }
        w.write_all(b)
    }

    fn element<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        if !first {
            w.write_all(b",")?;
        }
        self.newline(w)
    }
}

impl serde_json::ser::Formatter for &mut Placed {
    fn begin_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.open(w, b"[")
    }
    fn end_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.close(w, b"]")
    }
    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.element(w, first)
    }
    fn end_array_value<W: ?Sized + std::io::Write>(&mut self, _: &mut W) -> std::io::Result<()> {
        self.has_value = true;
        Ok(())
    }
    fn begin_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.open(w, b"{")
    }
    fn end_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.close(w, b"}")
    }
    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.element(w, first)
    }
    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.layout += 1;
        w.write_all(b": ")
    }
    fn end_object_value<W: ?Sized + std::io::Write>(&mut self, _: &mut W) -> std::io::Result<()> {
        self.has_value = true;
        Ok(())
    }
}

/// Bytes of the compact JSON serialization of `value`.
pub fn compact_len(value: &Value) -> usize {
    let mut counter = Counter(0);
    serde_json::to_writer(&mut counter, value).expect("a JSON value always serializes");
    counter.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placed_pretty_form_is_serde_jsons_and_counts_the_compact_length() {
        let v = serde_json::json!({
            "a": "x: \"y\" \\\" [1, 2]\n\t",
            "b": [1, {}, [], {"c": null, "d": [true, 2.5]}],
            "e:f": {"g": "h\\"},
            "deep": (0..70).fold(serde_json::json!(1), |v, _| serde_json::json!([v])),
        });
        let (pretty, compact) = pretty_placed(&v, 0);
        assert_eq!(pretty, serde_json::to_string_pretty(&v).unwrap());
        assert_eq!(compact, compact_len(&v));
        let (placed, compact) = pretty_placed(&v, 6);
        assert_eq!(placed, pretty.replace('\n', "\n      "));
        assert_eq!(compact, compact_len(&v));
    }
}
