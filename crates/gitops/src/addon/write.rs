//! Writing one plan, with the key material guarded: the JWT key, the CA and every certificate are
//! created only if absent and changed only from the version that was read
//! ([`apply::ensure_guarded`]); every copy of the CA (bundle ConfigMap, CA ManifestWork, cluster
//! secrets) is written only while the CA it was planned from is the live one. A write that loses
//! to another writer (a second controller instance, a Lease hand-over, the peer) ends the pass's
//! writes for what depends on it; the reconciler reads what won ([`refresh`]) and plans again.

use std::collections::BTreeMap;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Client;
use serde_json::Value;

use super::apply::{self, Key, WriteError};
use super::*;

/// What writing a plan did.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Objects written.
    pub writes: u64,
    /// Per-cluster write failures, by the condition they are reported in.
    pub failed: BTreeMap<&'static str, Vec<String>>,
    /// The first failure of a hub-wide object: its condition and the error.
    pub global_error: Option<(&'static str, String)>,
    /// Objects another writer created or changed since they were read: read them again and plan
    /// again. A lost hub-wide object stops the pass's writes; a lost per-cluster one stops that
    /// cluster's.
    pub lost: Vec<Key>,
}

fn rv(v: Option<&Value>) -> Option<&str> {
    v?.pointer("/metadata/resourceVersion")?.as_str()
}

/// Clusters whose objects are written at once.
const CLUSTERS_AT_ONCE: usize = 16;

/// Writes `objects` (they come in dependency order: the CA before its copies and the
/// certificates it signs), updating `owned` with what was written: the hub-wide ones in order,
/// then the per-cluster ones, [`CLUSTERS_AT_ONCE`] clusters at a time and each cluster's in
/// order (one write after the other took 13 s for 40 new clusters on a restarted API server,
/// docs/reliability.md). The [`crate::metrics`] writes are counted through `counted(kind, verb)`.
pub async fn write_plan(
    client: &Client,
    ns: &str,
    objects: &[Value],
    owned: &mut BTreeMap<Key, Value>,
    mut counted: impl FnMut(&str, &str),
) -> Outcome {
    let mut out = Outcome::default();
    let ca_key: Key = ("Secret".into(), ns.into(), SECRET_CA.into());
    // The CA version the plan was made from; checked against the live one before the first copy
    // of it is written (unless this pass wrote the CA itself).
    let planned_ca = rv(owned.get(&ca_key)).map(String::from);
    let mut ca_live = false;
    let mut hub = Vec::new();
    let mut clusters: Vec<(String, Vec<&Value>)> = Vec::new();
    let mut index: BTreeMap<String, usize> = BTreeMap::new();
    for o in objects {
        match apply::cluster_of(&apply::key(o)) {
            None => hub.push(o),
            Some(c) => match index.get(&c) {
                Some(&i) => clusters[i].1.push(o),
                None => {
                    index.insert(c.clone(), clusters.len());
                    clusters.push((c, vec![o]));
                }
            },
        }
    }
    let differs = |o: &Value, owned: &BTreeMap<Key, Value>| {
        owned
            .get(&apply::key(o))
            .is_none_or(|l| !apply::contains(l, o))
    };
    for o in hub {
        let k = apply::key(o);
        if !differs(o, owned) {
            continue;
        }
        if apply::carries_ca(&k)
            && !ca_live
            && !ca_is_live(client, &ca_key, planned_ca.as_deref(), &mut out).await
        {
            return out;
        }
        let live = owned.get(&k);
        let r = if k.0 == "ClusterManagementAddOn" {
            apply::ensure_shared(client, o)
                .await
                .map_err(WriteError::Failed)
        } else if apply::guarded(&k) {
            apply::ensure_guarded(client, live, o).await
        } else {
            apply::ensure(client, live, o)
                .await
                .map_err(WriteError::Failed)
        };
        let created = live.is_none();
        match r {
            Ok(Some(w)) => {
                counted(&k.0, if created { "create" } else { "apply" });
                out.writes += 1;
                if k == ca_key {
                    ca_live = true;
                }
                owned.insert(k, w);
            }
            Ok(None) => {}
            Err(WriteError::Lost) => {
                tracing::info!(kind = %k.0, namespace = %k.1, name = %k.2, "written by another writer since it was read; reading it again");
                out.lost.push(k);
                return out;
            }
            Err(WriteError::Failed(e)) => {
                out.global_error.get_or_insert((apply::condition_of(&k), e));
            }
        }
    }
    let copies_ca = clusters
        .iter()
        .flat_map(|(_, l)| l)
        .any(|o| apply::carries_ca(&apply::key(o)) && differs(o, owned));
    if copies_ca && !ca_live && !ca_is_live(client, &ca_key, planned_ca.as_deref(), &mut out).await
    {
        return out;
    }
    // Each cluster's objects in order, up to its first write lost to another writer.
    let written: Vec<Vec<Written>> = {
        let owned = &*owned;
        let writes: Vec<_> = clusters
            .iter()
            .map(|(_, l)| write_cluster(client, l, owned))
            .collect();
        futures::stream::iter(writes)
            .buffered(CLUSTERS_AT_ONCE)
            .collect()
            .await
    };
    for ((c, _), results) in clusters.iter().zip(written) {
        for (k, created, r) in results {
            match r {
                Ok(Some(w)) => {
                    counted(&k.0, if created { "create" } else { "apply" });
                    out.writes += 1;
                    owned.insert(k, w);
                }
                Ok(None) => {}
                Err(WriteError::Lost) => {
                    tracing::info!(kind = %k.0, namespace = %k.1, name = %k.2, "written by another writer since it was read; reading it again");
                    out.lost.push(k);
                }
                Err(WriteError::Failed(_)) => {
                    out.failed
                        .entry(apply::condition_of(&k))
                        .or_default()
                        .push(c.clone());
                }
            }
        }
    }
    out
}

/// Whether the CA is still the version the plan was made from (else the outcome says why not).
async fn ca_is_live(
    client: &Client,
    ca_key: &Key,
    planned: Option<&str>,
    out: &mut Outcome,
) -> bool {
    match apply::read(client, ca_key).await {
        Ok(now) if rv(now.as_ref()) == planned => true,
        Ok(_) => {
            out.lost.push(ca_key.clone());
            false
        }
        Err(e) => {
            out.global_error = Some((COND_CA_CERTIFICATE_READY, e.to_string()));
            false
        }
    }
}

/// One written object of a cluster: its key, whether it was created, what became of it.
type Written = (Key, bool, Result<Option<Value>, WriteError>);

/// Writes one cluster's objects in order, up to the first one lost to another writer.
async fn write_cluster(
    client: &Client,
    objects: &[&Value],
    owned: &BTreeMap<Key, Value>,
) -> Vec<Written> {
    let mut done = Vec::new();
    for o in objects {
        let k = apply::key(o);
        let live = owned.get(&k);
        if live.is_some_and(|l| apply::contains(l, o)) {
            continue;
        }
        let r = if apply::guarded(&k) {
            apply::ensure_guarded(client, live, o).await
        } else {
            apply::ensure(client, live, o)
                .await
                .map_err(WriteError::Failed)
        };
        let lost = matches!(r, Err(WriteError::Lost));
        done.push((k, live.is_none(), r));
        if lost {
            break;
        }
    }
    done
}

/// Reads `keys` again into `owned` (removing the ones that no longer exist).
pub async fn refresh(
    client: &Client,
    keys: &[Key],
    owned: &mut BTreeMap<Key, Value>,
) -> Result<(), kube::Error> {
    for k in keys {
        match apply::read(client, k).await? {
            Some(v) => {
                owned.insert(k.clone(), v);
            }
            None => {
                owned.remove(k);
            }
        }
    }
    Ok(())
}

/// The Secrets of `ns` in `owned`, by name (the plan's input).
pub fn secrets(owned: &BTreeMap<Key, Value>, ns: &str) -> BTreeMap<String, Secret> {
    owned
        .iter()
        .filter(|(k, _)| k.0 == "Secret" && k.1 == ns)
        .filter_map(|(k, v)| Some((k.2.clone(), serde_json::from_value(v.clone()).ok()?)))
        .collect()
}

/// `ca-bundle.crt` of the bundle ConfigMap in `owned`.
pub fn bundle(owned: &BTreeMap<Key, Value>, ns: &str) -> Option<String> {
    owned
        .get(&(
            "ConfigMap".to_string(),
            ns.to_string(),
            CONFIGMAP_CA_BUNDLE.to_string(),
        ))
        .and_then(|v| serde_json::from_value::<ConfigMap>(v.clone()).ok())
        .and_then(|c| c.data?.get("ca-bundle.crt").cloned())
}

/// The GitOpsCluster (`name`) that owns an object, by its owner label.
pub fn owner(v: &Value) -> Option<&str> {
    v.pointer(&format!(
        "/metadata/labels/{}",
        LABEL_GC_NAME.replace('/', "~1")
    ))?
    .as_str()
}
