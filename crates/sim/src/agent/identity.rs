//! A manifest's identity (resolved type, name, namespace) and the work's per-resource options
//! that match it: manifest configs and orphaning rules.

use argocd_pull_api::ocm::work::{
    DeleteOption, ManifestConfigOption, ManifestResourceMeta, ResourceIdentifier,
};
use kube::Client;
use kube::api::{Api, DynamicObject};

use crate::resources::TypeInfo;

/// A manifest's identity, once parsed and resolved.
pub(super) struct Resolved {
    pub(super) ti: TypeInfo,
    pub(super) name: String,
    pub(super) namespace: String,
}

impl Resolved {
    pub(super) fn meta(&self, ordinal: i32) -> ManifestResourceMeta {
        ManifestResourceMeta {
            ordinal,
            group: self.ti.group.clone(),
            version: self.ti.version.clone(),
            kind: self.ti.kind.clone(),
            resource: self.ti.plural.clone(),
            name: self.name.clone(),
            namespace: self.namespace.clone(),
        }
    }
    pub(super) fn id(&self) -> ResourceIdentifier {
        ResourceIdentifier {
            group: self.ti.group.clone(),
            resource: self.ti.plural.clone(),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        }
    }
    pub(super) fn api(&self, client: &Client) -> Api<DynamicObject> {
        let ar = self.ti.api_resource();
        if self.ti.namespaced {
            Api::namespaced_with(client.clone(), &self.namespace, &ar)
        } else {
            Api::all_with(client.clone(), &ar)
        }
    }
}

fn id_matches(pattern: &ResourceIdentifier, id: &ResourceIdentifier) -> bool {
    let m = |p: &str, v: &str| p == "*" || p == v;
    pattern.group == id.group
        && pattern.resource == id.resource
        && m(&pattern.name, &id.name)
        && m(&pattern.namespace, &id.namespace)
}

pub(super) fn find_config<'a>(
    configs: &'a [ManifestConfigOption],
    id: &ResourceIdentifier,
) -> Option<&'a ManifestConfigOption> {
    configs
        .iter()
        .find(|c| id_matches(&c.resource_identifier, id))
}

pub(super) fn is_orphaned(opt: Option<&DeleteOption>, id: &ResourceIdentifier) -> bool {
    match opt.and_then(|o| o.propagation_policy.as_deref()) {
        Some("Orphan") => true,
        Some("SelectivelyOrphan") => opt
            .and_then(|o| o.selectively_orphans.as_ref())
            .is_some_and(|s| {
                s.orphaning_rules.iter().any(|r| {
                    r.group == id.group
                        && r.resource == id.resource
                        && r.name == id.name
                        && r.namespace == id.namespace
                })
            }),
        _ => false,
    }
}

pub(super) fn meta_id(m: &ManifestResourceMeta) -> ResourceIdentifier {
    ResourceIdentifier {
        group: m.group.clone(),
        resource: m.resource.clone(),
        namespace: m.namespace.clone(),
        name: m.name.clone(),
    }
}

pub(super) fn meta_type(m: &ManifestResourceMeta) -> TypeInfo {
    TypeInfo {
        group: m.group.clone(),
        version: m.version.clone(),
        kind: m.kind.clone(),
        plural: m.resource.clone(),
        namespaced: !m.namespace.is_empty(),
    }
}
