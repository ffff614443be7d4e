//! Served resource types: the built-ins and those defined by CustomResourceDefinitions.

use std::sync::Arc;

use serde_json::{Value, json};

#[derive(Clone, Debug)]
pub(crate) struct PrinterColumn {
    pub name: String,
    pub type_: String,
    pub json_path: String,
    pub priority: i64,
    pub description: String,
    pub format: String,
}

#[derive(Clone, Debug)]
pub(crate) struct VersionInfo {
    pub name: String,
    pub status: bool,
    pub columns: Vec<PrinterColumn>,
    pub schema: Option<Arc<Value>>,
}

#[derive(Clone, Debug)]
pub(crate) struct ResourceType {
    pub group: String,
    pub versions: Vec<VersionInfo>,
    pub storage_version: String,
    pub kind: String,
    pub list_kind: String,
    pub plural: String,
    pub singular: String,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    pub namespaced: bool,
    /// Built-in (not from a CRD): strategic merge patch is accepted.
    pub builtin: bool,
}

impl ResourceType {
    /// The store key: `plural` (core) or `plural.group`.
    pub fn key(&self) -> String {
        crate::error::qualified(&self.plural, &self.group)
    }

    pub fn version(&self, v: &str) -> Option<&VersionInfo> {
        self.versions.iter().find(|x| x.name == v)
    }

    pub fn has_status(&self) -> bool {
        self.versions.iter().any(|v| v.status)
    }

    pub fn api_version(&self, v: &str) -> String {
        if self.group.is_empty() {
            v.to_string()
        } else {
            format!("{}/{v}", self.group)
        }
    }

    pub fn storage_api_version(&self) -> String {
        self.api_version(&self.storage_version)
    }

    /// The discovery `APIResource` entries (main resource and status subresource).
    pub fn discovery(&self, version: &str) -> Vec<Value> {
        let verbs = json!([
            "create",
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "update",
            "watch"
        ]);
        let mut r = json!({
            "name": self.plural,
            "singularName": self.singular,
            "namespaced": self.namespaced,
            "kind": self.kind,
            "verbs": verbs,
        });
        if !self.short_names.is_empty() {
            r["shortNames"] = json!(self.short_names);
        }
        if !self.categories.is_empty() {
            r["categories"] = json!(self.categories);
        }
        let mut out = vec![r];
        if self.version(version).is_some_and(|v| v.status) {
            out.push(json!({
                "name": format!("{}/status", self.plural),
                "singularName": "",
                "namespaced": self.namespaced,
                "kind": self.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
        out
    }
}

fn builtin(
    group: &str,
    kind: &str,
    plural: &str,
    short: &[&str],
    namespaced: bool,
    status: bool,
) -> ResourceType {
    ResourceType {
        group: group.to_string(),
        versions: vec![VersionInfo {
            name: "v1".into(),
            status,
            columns: Vec::new(),
            schema: None,
        }],
        storage_version: "v1".into(),
        kind: kind.to_string(),
        list_kind: format!("{kind}List"),
        plural: plural.to_string(),
        singular: kind.to_lowercase(),
        short_names: short.iter().map(|s| s.to_string()).collect(),
        categories: Vec::new(),
        namespaced,
        builtin: true,
    }
}

pub(crate) fn builtins() -> Vec<ResourceType> {
    let rbac = "rbac.authorization.k8s.io";
    let mut v = vec![
        builtin("", "Namespace", "namespaces", &["ns"], false, true),
        builtin("", "Secret", "secrets", &[], true, false),
        builtin("", "ConfigMap", "configmaps", &["cm"], true, false),
        builtin("", "Event", "events", &["ev"], true, false),
        builtin(
            "",
            "ServiceAccount",
            "serviceaccounts",
            &["sa"],
            true,
            false,
        ),
        builtin("", "Service", "services", &["svc"], true, true),
        builtin("events.k8s.io", "Event", "events", &["ev"], true, false),
        builtin("coordination.k8s.io", "Lease", "leases", &[], true, false),
        builtin(rbac, "Role", "roles", &[], true, false),
        builtin(rbac, "RoleBinding", "rolebindings", &[], true, false),
        builtin(rbac, "ClusterRole", "clusterroles", &[], false, false),
        builtin(
            rbac,
            "ClusterRoleBinding",
            "clusterrolebindings",
            &[],
            false,
            false,
        ),
        builtin("apps", "Deployment", "deployments", &["deploy"], true, true),
        builtin("apps", "StatefulSet", "statefulsets", &["sts"], true, true),
        builtin(
            "networking.k8s.io",
            "NetworkPolicy",
            "networkpolicies",
            &["netpol"],
            true,
            false,
        ),
        builtin(
            "apiextensions.k8s.io",
            "CustomResourceDefinition",
            "customresourcedefinitions",
            &["crd", "crds"],
            false,
            true,
        ),
    ];
    for t in &mut v {
        if t.plural == "deployments" || t.plural == "services" {
            t.categories = vec!["all".into()];
        }
    }
    v
}

fn strs(v: Option<&Value>) -> Vec<String> {
    v.and_then(|x| x.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// Derives the served type of a CRD object; errors name the offending field.
pub(crate) fn crd_to_type(crd: &Value) -> Result<ResourceType, String> {
    let spec = crd.get("spec").ok_or("spec: Required value")?;
    let group = spec
        .get("group")
        .and_then(|g| g.as_str())
        .filter(|g| !g.is_empty())
        .ok_or("spec.group: Required value")?;
    let names = spec.get("names").ok_or("spec.names: Required value")?;
    let plural = names
        .get("plural")
        .and_then(|g| g.as_str())
        .filter(|g| !g.is_empty())
        .ok_or("spec.names.plural: Required value")?;
    let kind = names
        .get("kind")
        .and_then(|g| g.as_str())
        .filter(|g| !g.is_empty())
        .ok_or("spec.names.kind: Required value")?;
    let expected = format!("{plural}.{group}");
    let name = crd
        .pointer("/metadata/name")
        .and_then(|n| n.as_str())
        .unwrap_or("");
    if name != expected {
        return Err(format!(
            "metadata.name: Invalid value: \"{name}\": must be spec.names.plural+\".\"+spec.group"
        ));
    }
    let scope = spec
        .get("scope")
        .and_then(|g| g.as_str())
        .ok_or("spec.scope: Required value")?;
    let namespaced = match scope {
        "Namespaced" => true,
        "Cluster" => false,
        other => {
            return Err(format!(
                "spec.scope: Unsupported value: \"{other}\": supported values: \"Cluster\", \"Namespaced\""
            ));
        }
    };
    let vers = spec
        .get("versions")
        .and_then(|v| v.as_array())
        .filter(|v| !v.is_empty())
        .ok_or("spec.versions: Required value")?;
    let mut versions = Vec::new();
    let mut storage = None;
    for (i, v) in vers.iter().enumerate() {
        let vname = v
            .get("name")
            .and_then(|n| n.as_str())
            .ok_or(format!("spec.versions[{i}].name: Required value"))?;
        if v.get("storage").and_then(|s| s.as_bool()) == Some(true) {
            storage = Some(vname.to_string());
        }
        if v.get("served").and_then(|s| s.as_bool()) != Some(true) {
            continue;
        }
        let status = v.pointer("/subresources/status").is_some();
        let columns = v
            .get("additionalPrinterColumns")
            .and_then(|c| c.as_array())
            .map(|cols| {
                cols.iter()
                    .map(|c| PrinterColumn {
                        name: c["name"].as_str().unwrap_or("").to_string(),
                        type_: c["type"].as_str().unwrap_or("string").to_string(),
                        json_path: c["jsonPath"].as_str().unwrap_or("").to_string(),
                        priority: c["priority"].as_i64().unwrap_or(0),
                        description: c["description"].as_str().unwrap_or("").to_string(),
                        format: c["format"].as_str().unwrap_or("").to_string(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        let schema = v
            .pointer("/schema/openAPIV3Schema")
            .and_then(prune_schema)
            .map(Arc::new);
        versions.push(VersionInfo {
            name: vname.to_string(),
            status,
            columns,
            schema,
        });
    }
    let storage = storage.ok_or(
        "spec.versions: Invalid value: must have exactly one version marked as storage version",
    )?;
    Ok(ResourceType {
        group: group.to_string(),
        versions,
        storage_version: storage,
        kind: kind.to_string(),
        list_kind: names
            .get("listKind")
            .and_then(|s| s.as_str())
            .map(String::from)
            .unwrap_or_else(|| format!("{kind}List")),
        plural: plural.to_string(),
        singular: names
            .get("singular")
            .and_then(|s| s.as_str())
            .map(String::from)
            .unwrap_or_else(|| kind.to_lowercase()),
        short_names: strs(names.get("shortNames")),
        categories: strs(names.get("categories")),
        namespaced,
        builtin: false,
    })
}

/// Keeps only the parts of an OpenAPI schema that server-side apply needs (paths leading to
/// `x-kubernetes-list-type` annotations), so a Hub does not hold whole CRD schemas in memory.
pub(crate) fn prune_schema(s: &Value) -> Option<Value> {
    let o = s.as_object()?;
    let mut out = serde_json::Map::new();
    for k in ["x-kubernetes-list-type", "x-kubernetes-list-map-keys"] {
        if let Some(v) = o.get(k) {
            out.insert(k.to_string(), v.clone());
        }
    }
    if let Some(props) = o.get("properties").and_then(|p| p.as_object()) {
        let kept: serde_json::Map<String, Value> = props
            .iter()
            .filter_map(|(k, v)| prune_schema(v).map(|p| (k.clone(), p)))
            .collect();
        if !kept.is_empty() {
            out.insert("properties".into(), Value::Object(kept));
        }
    }
    for k in ["items", "additionalProperties"] {
        if let Some(p) = o.get(k).and_then(prune_schema) {
            out.insert(k.to_string(), p);
        }
    }
    (!out.is_empty()).then_some(Value::Object(out))
}

/// The status a real apiextensions controller writes on an accepted CRD.
pub(crate) fn crd_status(crd: &Value, now: &str) -> Value {
    let names = crd.pointer("/spec/names").cloned().unwrap_or(json!({}));
    let mut accepted = names.clone();
    if accepted.get("singular").is_none()
        && let Some(k) = names.get("kind").and_then(|k| k.as_str())
    {
        accepted["singular"] = json!(k.to_lowercase());
    }
    if accepted.get("listKind").is_none()
        && let Some(k) = names.get("kind").and_then(|k| k.as_str())
    {
        accepted["listKind"] = json!(format!("{k}List"));
    }
    let stored: Vec<Value> = crd
        .pointer("/spec/versions")
        .and_then(|v| v.as_array())
        .map(|a| {
            a.iter()
                .filter(|v| v.get("storage").and_then(|s| s.as_bool()) == Some(true))
                .filter_map(|v| v.get("name").cloned())
                .collect()
        })
        .unwrap_or_default();
    json!({
        "acceptedNames": accepted,
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "lastTransitionTime": now,
             "reason": "NoConflicts", "message": "no conflicts found"},
            {"type": "Established", "status": "True", "lastTransitionTime": now,
             "reason": "InitialNamesAccepted", "message": "the initial names have been accepted"}
        ],
        "storedVersions": stored,
    })
}
