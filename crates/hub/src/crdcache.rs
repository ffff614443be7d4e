//! Process-wide cache of prepared CRDs: installing the same CRD YAML into many Hubs parses it
//! and derives its served type once; each Hub stores the object bytes and shares the type.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, OnceLock};

use bytes::Bytes;
use serde_json::Value;

use crate::registry::{self, ResourceType};

pub(crate) struct PreparedCrd {
    pub name: String,
    pub rt: Arc<ResourceType>,
    /// `metadata` of the document (without server-set fields).
    pub meta: Value,
    pub spec: Bytes,
    pub status: Bytes,
}

impl PreparedCrd {
    /// The full document, for the generic (replace) path.
    pub fn document(&self) -> Value {
        serde_json::json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": self.meta,
            "spec": serde_json::from_slice::<Value>(&self.spec).unwrap_or_default(),
        })
    }
}

type Cache = Mutex<HashMap<(u64, usize), Arc<Vec<PreparedCrd>>>>;

pub(crate) fn prepare(yaml: &str) -> anyhow::Result<Arc<Vec<PreparedCrd>>> {
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let mut h = std::collections::hash_map::DefaultHasher::new();
    yaml.hash(&mut h);
    let key = (h.finish(), yaml.len());
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    if let Some(hit) = cache
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&key)
        .cloned()
    {
        return Ok(hit);
    }
    let docs = crate::util::parse_yaml_stream(yaml)?;
    let now = crate::util::now_rfc3339();
    let mut out = Vec::new();
    for (i, d) in docs.into_iter().enumerate() {
        let kind = d.get("kind").and_then(|k| k.as_str()).unwrap_or("");
        let api = d.get("apiVersion").and_then(|k| k.as_str()).unwrap_or("");
        if kind != "CustomResourceDefinition" || api != "apiextensions.k8s.io/v1" {
            anyhow::bail!(
                "document {i} is not an apiextensions.k8s.io/v1 CustomResourceDefinition (apiVersion {api:?}, kind {kind:?})"
            );
        }
        let name = d
            .pointer("/metadata/name")
            .and_then(|n| n.as_str())
            .ok_or_else(|| anyhow::anyhow!("document {i}: CRD without metadata.name"))?
            .to_string();
        crate::util::validate_subdomain(&name)
            .map_err(|e| anyhow::anyhow!("CRD {name}: metadata.name: {e}"))?;
        let rt = registry::crd_to_type(&d).map_err(|e| anyhow::anyhow!("CRD {name}: {e}"))?;
        let mut meta = d.get("metadata").cloned().unwrap_or_default();
        if let Some(m) = meta.as_object_mut() {
            for f in [
                "uid",
                "resourceVersion",
                "generation",
                "creationTimestamp",
                "deletionTimestamp",
                "managedFields",
                "namespace",
            ] {
                m.remove(f);
            }
        }
        let spec = Bytes::from(serde_json::to_vec(&d["spec"])?);
        let status = Bytes::from(serde_json::to_vec(&registry::crd_status(&d, &now))?);
        out.push(PreparedCrd {
            name,
            rt: Arc::new(rt),
            meta,
            spec,
            status,
        });
    }
    let out = Arc::new(out);
    let mut c = cache.lock().unwrap_or_else(|e| e.into_inner());
    if c.len() < 256 {
        c.insert(key, out.clone());
    }
    Ok(out)
}
