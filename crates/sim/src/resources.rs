//! Resolution of a manifest's `apiVersion`/`kind` to its resource (plural) and scope: a static
//! table of the kinds the fleet serves, then API discovery on the managed cluster (cached).

use std::collections::HashMap;
use std::sync::Mutex;

use kube::api::{ApiResource, GroupVersionKind};
use kube::discovery::Scope;

/// A resolved type.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TypeInfo {
    pub group: String,
    pub version: String,
    pub kind: String,
    pub plural: String,
    pub namespaced: bool,
}

impl TypeInfo {
    pub fn api_resource(&self) -> ApiResource {
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(&self.group, &self.version, &self.kind),
            &self.plural,
        )
    }
}

const KNOWN: &[(&str, &str, &str, bool)] = &[
    // (group, kind, plural, namespaced)
    ("", "Namespace", "namespaces", false),
    ("", "ConfigMap", "configmaps", true),
    ("", "Secret", "secrets", true),
    ("", "Service", "services", true),
    ("", "ServiceAccount", "serviceaccounts", true),
    ("", "Pod", "pods", true),
    ("", "Event", "events", true),
    ("apps", "Deployment", "deployments", true),
    ("apps", "StatefulSet", "statefulsets", true),
    ("apps", "DaemonSet", "daemonsets", true),
    ("batch", "Job", "jobs", true),
    ("rbac.authorization.k8s.io", "Role", "roles", true),
    (
        "rbac.authorization.k8s.io",
        "RoleBinding",
        "rolebindings",
        true,
    ),
    (
        "rbac.authorization.k8s.io",
        "ClusterRole",
        "clusterroles",
        false,
    ),
    (
        "rbac.authorization.k8s.io",
        "ClusterRoleBinding",
        "clusterrolebindings",
        false,
    ),
    ("coordination.k8s.io", "Lease", "leases", true),
    ("argoproj.io", "Application", "applications", true),
    ("argoproj.io", "ApplicationSet", "applicationsets", true),
    ("argoproj.io", "AppProject", "appprojects", true),
];

/// Splits `group/version` (or `version` for the core group).
pub fn split_api_version(api_version: &str) -> (&str, &str) {
    match api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    }
}

/// The static table's answer, if the kind is known.
pub fn known(api_version: &str, kind: &str) -> Option<TypeInfo> {
    let (group, version) = split_api_version(api_version);
    KNOWN
        .iter()
        .find(|(g, k, _, _)| *g == group && *k == kind)
        .map(|(g, k, p, n)| TypeInfo {
            group: g.to_string(),
            version: version.to_string(),
            kind: k.to_string(),
            plural: p.to_string(),
            namespaced: *n,
        })
}

/// Resolves types: the static table first, then discovery on the cluster (answers cached).
#[derive(Default)]
pub struct Resolver {
    cache: Mutex<HashMap<(String, String), TypeInfo>>,
}

impl Resolver {
    pub async fn resolve(
        &self,
        client: &kube::Client,
        api_version: &str,
        kind: &str,
    ) -> Result<TypeInfo, String> {
        if let Some(t) = known(api_version, kind) {
            return Ok(t);
        }
        let key = (api_version.to_string(), kind.to_string());
        if let Some(t) = self
            .cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
        {
            return Ok(t.clone());
        }
        let (group, version) = split_api_version(api_version);
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let (ar, caps) = kube::discovery::pinned_kind(client, &gvk)
            .await
            .map_err(|e| format!("resource for {api_version}/{kind} not found: {e}"))?;
        let t = TypeInfo {
            group: group.to_string(),
            version: version.to_string(),
            kind: kind.to_string(),
            plural: ar.plural,
            namespaced: caps.scope == Scope::Namespaced,
        };
        self.cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, t.clone());
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_table() {
        let t = known("argoproj.io/v1alpha1", "Application").unwrap();
        assert_eq!(t.plural, "applications");
        assert!(t.namespaced);
        let ns = known("v1", "Namespace").unwrap();
        assert!(!ns.namespaced);
        assert_eq!(ns.group, "");
        assert!(known("example.com/v1", "Widget").is_none());
    }
}
