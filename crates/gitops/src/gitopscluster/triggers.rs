//! What reconciles the GitOpsClusters: the relevant changes of the watched resources (a change
//! of what a fingerprint covers, a deletion, the end of an initial list).

use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use argocd_pull_api::ocm::cluster::{ManagedCluster, PlacementDecision};
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Secret;
use kube::Resource;
use kube::runtime::watcher;

/// A stream of `()` for every relevant change of a watched resource: deletions, and applies
/// whose fingerprint changed; one `()` when a (re-)list is complete.
pub(super) fn relevant_changes<K, S>(
    events: S,
    fingerprint: fn(&K) -> u64,
) -> impl Stream<Item = ()> + Send + 'static
where
    K: Resource + Send + 'static,
    S: Stream<Item = watcher::Event<K>> + Send + 'static,
{
    let mut seen: HashMap<(Option<String>, String), u64> = HashMap::new();
    let key = |o: &K| {
        (
            o.meta().namespace.clone(),
            o.meta().name.clone().unwrap_or_default(),
        )
    };
    events.filter_map(move |ev| {
        let change = match ev {
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
        };
        futures::future::ready(change)
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
