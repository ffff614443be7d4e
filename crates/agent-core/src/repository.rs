//! Repository Secrets (target `repository`) and the GPG keys ConfigMap (target `gpgkey`): hub
//! objects a managed agent gets as they are, I/O free.
//!
//! As the peer (principal/callbacks.go `newRepositoryCallback`, agent/inbound.go
//! `processIncomingRepository`, internal/backend/kubernetes/repository `DefaultFilterChain`): a
//! Secret in the principal's namespace labelled `argocd.argoproj.io/secret-type` `repository` or
//! `repo-creds` whose `data.project` names an AppProject goes to every managed agent that project
//! is sent to (see [`crate::project_match`]); secrets without `data.project` stay on the hub. The
//! agent keeps it in its own namespace with the hub UID as `source-uid` and reverts local edits.
//! Resync compares the SHA-256 of `.data` (kind `Repository`).
//!
//! The ConfigMap `argocd-gpg-keys-cm` of the principal's namespace goes to every managed agent
//! (peer: principal/callbacks.go `syncGPGKeyToManagedAgents`, agent/inbound.go
//! `processIncomingGPGKey`), the same way; resync kind `GPGKey`.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::{Map, Value, json};

use crate::event::Target;
use crate::objects::{self as o, SOURCE_UID};
use crate::store::Kind;

/// The hub objects that travel to managed agents as they are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DataKind {
    /// repository / repo-creds Secrets
    Repository,
    /// the `argocd-gpg-keys-cm` ConfigMap
    GpgKey,
}

impl DataKind {
    pub const ALL: [DataKind; 2] = [DataKind::Repository, DataKind::GpgKey];
    pub fn kind(self) -> Kind {
        match self {
            DataKind::Repository => Kind::Secret,
            DataKind::GpgKey => Kind::ConfigMap,
        }
    }
    pub fn target(self) -> Target {
        match self {
            DataKind::Repository => Target::Repository,
            DataKind::GpgKey => Target::GpgKey,
        }
    }
    /// The `kind` of its resync events.
    pub fn resync_kind(self) -> &'static str {
        match self {
            DataKind::Repository => KIND,
            DataKind::GpgKey => GPG_KIND,
        }
    }
    pub fn from_target(t: Target) -> Option<DataKind> {
        Self::ALL.into_iter().find(|d| d.target() == t)
    }
    pub fn from_resync_kind(k: &str) -> Option<DataKind> {
        Self::ALL.into_iter().find(|d| d.resync_kind() == k)
    }
    /// Whether a hub object of [`DataKind::kind`] is one of these.
    pub fn selects(self, v: &Value) -> bool {
        match self {
            DataKind::Repository => is_repo_secret(v),
            DataKind::GpgKey => o::name(v) == GPG_CONFIGMAP,
        }
    }
}

/// The resync kind of the GPG keys ConfigMap.
pub const GPG_KIND: &str = "GPGKey";
/// Argo CD's GPG keys ConfigMap (`common.ArgoCDGPGKeysConfigMapName`).
pub const GPG_CONFIGMAP: &str = "argocd-gpg-keys-cm";

pub const SECRET_TYPE_LABEL: &str = "argocd.argoproj.io/secret-type";
/// The two Secret types the peer synchronises.
pub const SECRET_TYPES: [&str; 2] = ["repository", "repo-creds"];
/// The resync kind of a repository Secret.
pub const KIND: &str = "Repository";

/// Whether a Secret is a repository / repo-creds Secret with data (the peer's filter chain; the
/// project scope is checked by [`project_of`]).
pub fn is_repo_secret(v: &Value) -> bool {
    v["metadata"]["labels"][SECRET_TYPE_LABEL]
        .as_str()
        .is_some_and(|t| SECRET_TYPES.contains(&t))
        && v["data"].is_object()
}

/// The label naming the agent a cluster secret belongs to (peer:
/// internal/argocd/cluster `LabelKeyClusterAgentMapping`).
pub const AGENT_NAME_LABEL: &str = "argocd-agent.argoproj-labs.io/agent-name";

/// The agent an Argo CD cluster secret is mapped to (`secret-type: cluster` and a non-empty
/// agent-name label), if any.
pub fn cluster_agent(v: &Value) -> Option<&str> {
    let labels = &v["metadata"]["labels"];
    (labels[SECRET_TYPE_LABEL].as_str() == Some("cluster"))
        .then(|| labels[AGENT_NAME_LABEL].as_str())
        .flatten()
        .filter(|a| !a.is_empty())
}

/// The cluster name of a cluster secret (`data.name`, base64).
pub fn cluster_name(v: &Value) -> Option<String> {
    let b = B64.decode(v["data"]["name"].as_str()?).ok()?;
    String::from_utf8(b).ok().filter(|n| !n.is_empty())
}

/// The Secrets of the principal's namespace the principal keeps: repository / repo-creds
/// Secrets and agent cluster secrets.
pub fn is_watched(v: &Value) -> bool {
    is_repo_secret(v) || cluster_agent(v).is_some()
}

/// The AppProject a repository Secret is scoped to (`data.project`, base64), if any.
pub fn project_of(v: &Value) -> Option<String> {
    let b = B64.decode(v["data"]["project"].as_str()?).ok()?;
    String::from_utf8(b).ok().filter(|p| !p.is_empty())
}

/// What goes on the wire: the Secret as Go marshals a `corev1.Secret` of the informer's cache,
/// reduced to what the agent uses (identity, labels, annotations, type, data).
pub fn wire_form(v: &Value, dk: DataKind) -> Value {
    let m = &v["metadata"];
    let mut meta = Map::new();
    for k in ["name", "namespace", "uid", "resourceVersion"] {
        if let Some(x) = m.get(k).filter(|x| !x.is_null()) {
            meta.insert(k.into(), x.clone());
        }
    }
    for k in ["labels", "annotations"] {
        if m[k].is_object() {
            meta.insert(k.into(), m[k].clone());
        }
    }
    let mut out = json!({"apiVersion": "v1", "kind": dk.kind().as_str(), "metadata": meta});
    for k in ["type", "data"] {
        if let Some(x) = v.get(k).filter(|x| !x.is_null()) {
            out[k] = x.clone();
        }
    }
    out
}

/// The agent's form of a received repository Secret: in the agent's namespace, with the hub UID
/// as source-uid and without kubectl's last-applied annotation (as the peer's `createRepository`).
pub fn local_form(incoming: &Value, ns: &str, dk: DataKind) -> Value {
    let mut l = json!({"apiVersion": "v1", "kind": dk.kind().as_str(),
        "metadata": o::portable_meta(incoming, ns)});
    for k in ["type", "data"] {
        if let Some(x) = incoming.get(k).filter(|x| !x.is_null()) {
            l[k] = x.clone();
        }
    }
    if let Some(a) = l["metadata"]["annotations"].as_object_mut() {
        a.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
    o::set_annotation(&mut l, SOURCE_UID, o::uid(incoming));
    l
}

/// A local Secret reduced to what the principal gave (compared with the copy to revert edits).
pub fn strip_local(v: &Value, dk: DataKind) -> Value {
    let mut l = json!({"apiVersion": "v1", "kind": dk.kind().as_str(), "metadata": o::portable_meta(v, o::namespace(v))});
    for k in ["type", "data"] {
        if let Some(x) = v.get(k).filter(|x| !x.is_null()) {
            l[k] = x.clone();
        }
    }
    l
}

/// Hash of what is synchronised of a repository Secret: data, labels, annotations (`type` is
/// immutable on the API server and defaulted there, so it is not compared).
pub fn hash(v: &Value) -> String {
    crate::checksum::hash_parts(&[
        &v["data"],
        &v["metadata"]["labels"],
        &v["metadata"]["annotations"],
    ])
}

/// `cur` with what the principal owns of a repository Secret replaced by `want`'s: data, labels
/// and annotations (as the peer's `UpdateManagedRepository`); anything else is kept.
pub fn overlay(cur: &Value, want: &Value) -> Value {
    let mut n = cur.clone();
    n["data"] = want["data"].clone();
    for k in ["labels", "annotations"] {
        match want["metadata"].get(k).filter(|v| v.is_object()) {
            Some(v) => n["metadata"][k] = v.clone(),
            None => {
                if let Some(m) = n["metadata"].as_object_mut() {
                    m.remove(k);
                }
            }
        }
    }
    n
}

/// A minimal Secret naming a repository (for `delete`).
pub fn stub(name: &str, ns: &str, uid: &str, dk: DataKind) -> Value {
    json!({"apiVersion": "v1", "kind": dk.kind().as_str(), "metadata": {"name": name, "namespace": ns, "uid": uid}})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(ty: &str, project: Option<&str>) -> Value {
        let mut data = json!({"url": B64.encode("https://git.example/repo.git"), "password": B64.encode("s3cr3t")});
        if let Some(p) = project {
            data["project"] = json!(B64.encode(p));
        }
        json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "repo-1", "namespace": "argocd", "uid": "u-1", "resourceVersion": "7",
                "labels": {SECRET_TYPE_LABEL: ty},
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}", "team": "a"},
                "managedFields": [{"manager": "kubectl"}]},
            "type": "Opaque", "data": data})
    }

    #[test]
    fn only_project_scoped_repository_and_repo_creds_secrets_travel() {
        assert!(is_repo_secret(&secret("repository", Some("team"))));
        assert!(is_repo_secret(&secret("repo-creds", Some("team"))));
        assert!(!is_repo_secret(&secret("cluster", Some("team"))));
        assert_eq!(
            project_of(&secret("repository", Some("team"))).as_deref(),
            Some("team")
        );
        assert_eq!(project_of(&secret("repository", None)), None);
    }

    #[test]
    fn cluster_secrets_map_agents_to_cluster_names() {
        let s = json!({"metadata": {"labels": {SECRET_TYPE_LABEL: "cluster", AGENT_NAME_LABEL: "agent-a"}},
            "data": {"name": B64.encode("prod-eu")}});
        assert_eq!(cluster_agent(&s), Some("agent-a"));
        assert_eq!(cluster_name(&s).as_deref(), Some("prod-eu"));
        assert!(is_watched(&s));
        let unmapped = json!({"metadata": {"labels": {SECRET_TYPE_LABEL: "cluster"}}});
        assert_eq!(cluster_agent(&unmapped), None);
        assert!(!is_watched(&unmapped));
    }

    #[test]
    fn the_wire_form_keeps_identity_and_data_and_drops_managed_fields() {
        let w = wire_form(&secret("repository", Some("team")), DataKind::Repository);
        assert_eq!(w["metadata"]["uid"], "u-1");
        assert_eq!(w["metadata"]["resourceVersion"], "7");
        assert!(w["metadata"].get("managedFields").is_none());
        assert_eq!(w["data"]["project"], B64.encode("team"));
        assert_eq!(w["type"], "Opaque");
    }

    #[test]
    fn the_local_form_lives_in_the_agent_namespace_with_the_hub_uid() {
        let d = DataKind::Repository;
        let l = local_form(
            &wire_form(&secret("repository", Some("team")), d),
            "agent-ns",
            d,
        );
        assert_eq!(l["metadata"]["namespace"], "agent-ns");
        assert_eq!(l["metadata"]["annotations"][SOURCE_UID], "u-1");
        assert_eq!(l["metadata"]["annotations"]["team"], "a");
        assert!(
            l["metadata"]["annotations"]
                .get("kubectl.kubernetes.io/last-applied-configuration")
                .is_none()
        );
        assert!(l["metadata"].get("uid").is_none());
        assert_eq!(hash(&strip_local(&l, d)), hash(&l));
    }
}
