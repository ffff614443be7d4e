//! What the replica last wrote into its hub, so that a replicated change costs one request (the
//! write) instead of three (namespace read, object read, write).
//!
//! While a principal is not ACTIVE nothing but replication writes the replicated objects, so the
//! object a write returned is, almost always, what the hub still holds: the next change of that
//! object is written against its `resourceVersion` directly. When something else did write it,
//! the write fails with a conflict, the entry is dropped and the writer reads the object as
//! before. A namespace seen to exist is not read again until a create in it fails with NotFound
//! (the namespace was deleted).
//!
//! Bounded: past [`MAX_OBJECTS`] entries the object cache starts over (the writer falls back to
//! reading), so a replica's memory does not grow with the primary's history.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use serde_json::Value;

use argocd_pull_agent_core::store::Kind;

/// Objects remembered at most (a few KiB each for Applications).
pub const MAX_OBJECTS: usize = 20_000;

type Key = (Kind, String, String);

#[derive(Default)]
pub struct Written {
    namespaces: Mutex<HashSet<String>>,
    objects: Mutex<HashMap<Key, Value>>,
}

impl Written {
    pub fn namespace_known(&self, ns: &str) -> bool {
        self.namespaces.lock().expect("poisoned").contains(ns)
    }

    pub fn namespace_exists(&self, ns: &str) {
        self.namespaces
            .lock()
            .expect("poisoned")
            .insert(ns.to_string());
    }

    pub fn namespace_gone(&self, ns: &str) {
        self.namespaces.lock().expect("poisoned").remove(ns);
    }

    /// The object as the last write of it returned.
    pub fn object(&self, kind: Kind, ns: &str, name: &str) -> Option<Value> {
        self.objects
            .lock()
            .expect("poisoned")
            .get(&(kind, ns.to_string(), name.to_string()))
            .cloned()
    }

    pub fn wrote(&self, kind: Kind, obj: Value) {
        let key = (
            kind,
            argocd_pull_agent_core::objects::namespace(&obj).to_string(),
            argocd_pull_agent_core::objects::name(&obj).to_string(),
        );
        let mut m = self.objects.lock().expect("poisoned");
        if m.len() >= MAX_OBJECTS && !m.contains_key(&key) {
            m.clear();
        }
        m.insert(key, obj);
    }

    pub fn forget(&self, kind: Kind, ns: &str, name: &str) {
        self.objects
            .lock()
            .expect("poisoned")
            .remove(&(kind, ns.to_string(), name.to_string()));
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.objects.lock().expect("poisoned").len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn remembers_the_last_write_and_starts_over_past_the_bound() {
        let w = Written::default();
        w.wrote(
            Kind::Application,
            json!({"metadata": {"name": "a", "namespace": "n", "resourceVersion": "1"}}),
        );
        w.wrote(
            Kind::Application,
            json!({"metadata": {"name": "a", "namespace": "n", "resourceVersion": "2"}}),
        );
        assert_eq!(
            w.object(Kind::Application, "n", "a").unwrap()["metadata"]["resourceVersion"],
            "2"
        );
        assert!(w.object(Kind::AppProject, "n", "a").is_none());
        w.forget(Kind::Application, "n", "a");
        assert!(w.object(Kind::Application, "n", "a").is_none());
        for i in 0..MAX_OBJECTS {
            w.wrote(
                Kind::Application,
                json!({"metadata": {"name": format!("a{i}"), "namespace": "n"}}),
            );
        }
        assert_eq!(w.len(), MAX_OBJECTS);
        w.wrote(
            Kind::Application,
            json!({"metadata": {"name": "one-more", "namespace": "n"}}),
        );
        assert_eq!(w.len(), 1, "past the bound the cache starts over");
    }
}
