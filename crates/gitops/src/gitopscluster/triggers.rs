//! What reconciles the GitOpsClusters: the relevant changes of the watched resources (a change
//! of what a fingerprint covers, a deletion, the end of an initial list).

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

use argocd_pull_api::ocm::cluster::{ManagedCluster, PlacementDecision};
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Secret;
use kube::Resource;
use kube::runtime::watcher;

use super::context::CONTROLLER;

/// A stream of `()` for every relevant change of a reflected resource: deletions, and applies
/// whose fingerprint changed; one `()` when the initial list is complete.
pub(super) fn relevant_changes<K, S>(
    events: S,
    fingerprint: fn(&K) -> u64,
    resource: &'static str,
) -> impl Stream<Item = ()> + Send + 'static
where
    K: Resource + Send + 'static,
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
{
    type Seen = HashMap<(Option<String>, String), u64>;
    let seen: Arc<Mutex<Seen>> = Default::default();
    events.filter_map(move |ev| {
        let seen = seen.clone();
        async move {
            let ev = match ev {
                Ok(ev) => ev,
                Err(e) => {
                    tracing::warn!(controller = CONTROLLER, resource, error = %e, "watch error; retrying");
                    return None;
                }
            };
            let key = |o: &K| {
                (
                    o.meta().namespace.clone(),
                    o.meta().name.clone().unwrap_or_default(),
                )
            };
            let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
            match ev {
                watcher::Event::Init => None,
                watcher::Event::InitApply(o) => {
                    seen.insert(key(&o), fingerprint(&o));
                    None
                }
                watcher::Event::InitDone => Some(()),
                watcher::Event::Apply(o) => {
                    let fp = fingerprint(&o);
                    (seen.insert(key(&o), fp) != Some(fp)).then_some(())
                }
                watcher::Event::Delete(o) => {
                    seen.remove(&key(&o));
                    Some(())
                }
            }
        }
    })
}

fn hash_of(v: impl Hash) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    v.hash(&mut h);
    h.finish()
}

pub(super) fn cluster_fingerprint(mc: &ManagedCluster) -> u64 {
    let configs: Vec<(String, Option<String>)> = mc
        .spec
        .managed_cluster_client_configs
        .iter()
        .flatten()
        .map(|c| (c.url.clone(), c.ca_bundle.clone()))
        .collect();
    hash_of((&mc.metadata.labels, configs))
}

pub(super) fn decision_fingerprint(d: &PlacementDecision) -> u64 {
    let names: Vec<&str> = d.cluster_names().collect();
    hash_of((&d.metadata.labels, names))
}

pub(super) fn meta_fingerprint<K: Resource>(o: &K) -> u64 {
    hash_of(&o.meta().labels)
}

pub(super) fn secret_fingerprint(s: &Secret) -> u64 {
    let data: Vec<(&String, &Vec<u8>)> = s.data.iter().flatten().map(|(k, v)| (k, &v.0)).collect();
    hash_of((&s.metadata.labels, &s.metadata.annotations, data, &s.type_))
}
