//! A cached object of the source: its JSON and the hashes that tell a spec change from a status
//! change, and its form in a snapshot.

use std::sync::Arc;

use serde_json::Value;

use super::kind::{Key, RKind};
use argocd_pull_agent_core::objects as o;
use argocd_pull_agent_core::proto::replicationapi as api;

/// A cached object.
pub(super) struct Entry {
    pub(super) json: Arc<[u8]>,
    pub(super) uid: String,
    /// the agent it belongs to ("" for principal-scoped objects)
    pub(super) agent: String,
    /// an autonomous agent's hub copy (it carries the agent's UID as source-uid)
    pub(super) autonomous: bool,
    /// hash of what a `spec-update` carries (spec, labels, annotations, finalizers, deletion)
    pub(super) spec: u64,
    /// hash of what a `status-update` carries (status, operation)
    pub(super) status: u64,
}

fn hash(v: &[&Value]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for x in v {
        serde_json::to_string(x).unwrap_or_default().hash(&mut h);
    }
    h.finish()
}

pub(super) fn entry(kind: RKind, obj: &Value) -> Entry {
    let m = &obj["metadata"];
    let spec = match kind {
        RKind::Application | RKind::AppProject | RKind::ApplicationSet => hash(&[
            &obj["spec"],
            &m["labels"],
            &m["annotations"],
            &m["finalizers"],
            &m["deletionTimestamp"],
        ]),
        RKind::Repository | RKind::ClusterSecret => {
            hash(&[&obj["data"], &obj["type"], &m["labels"], &m["annotations"]])
        }
    };
    let status = match kind {
        RKind::Application => hash(&[&obj["status"], &obj["operation"]]),
        _ => 0,
    };
    let agent = match kind {
        RKind::Application => o::namespace(obj).to_string(),
        RKind::ClusterSecret => m["labels"]
            [argocd_pull_agent_core::cluster_secret::LABEL_AGENT_NAME]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        _ => String::new(),
    };
    Entry {
        json: serde_json::to_vec(obj).unwrap_or_default().into(),
        uid: o::uid(obj).to_string(),
        agent,
        autonomous: kind == RKind::Application && !o::source_uid(obj).is_empty(),
        spec,
        status,
    }
}

/// A resource of a snapshot or a `ConfirmMissingResources` answer.
pub(super) fn resource(k: &Key, e: &Entry) -> api::Resource {
    api::Resource {
        name: k.name.clone(),
        namespace: k.namespace.clone(),
        kind: k.kind.as_str().into(),
        uid: e.uid.clone(),
        spec_checksum: Vec::new(),
        data: e.json.to_vec(),
    }
}
