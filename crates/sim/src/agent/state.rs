//! The work agent's shared state: the clusters it serves (each with its watchers of applied
//! object types), the index from applied objects to the works that carry them, and its counters.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use argocd_pull_api::ocm::work::ManifestWork;
use futures::StreamExt;
use kube::api::{Api, DynamicObject};
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use kube::{Client, ResourceExt};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::debug;

use super::config::WorkAgentConfig;
use super::stats::AgentStats;
use crate::resources::{Resolver, TypeInfo};

/// (cluster, group, plural, namespace, name) of an applied object.
type ObjKey = (String, String, String, String, String);

pub(super) struct TypeWatch {
    pub(super) store: Store<DynamicObject>,
    task: JoinHandle<()>,
}

pub(super) struct Spoke {
    pub(super) name: String,
    pub(super) client: Client,
    pub(super) resolver: Resolver,
    watches: Mutex<HashMap<(String, String), Arc<TypeWatch>>>,
}

impl Drop for Spoke {
    fn drop(&mut self) {
        for w in self
            .watches
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .values()
        {
            w.task.abort();
        }
    }
}

pub(crate) struct Agent {
    pub(crate) stats: AgentStats,
    pub(super) hub: Client,
    pub(super) config: WorkAgentConfig,
    spokes: RwLock<HashMap<String, Arc<Spoke>>>,
    trigger: mpsc::UnboundedSender<ObjectRef<ManifestWork>>,
    works_store: OnceLock<Store<ManifestWork>>,
    /// applied object → works (names) in its cluster that carry it.
    index: Mutex<HashMap<ObjKey, BTreeSet<String>>>,
    /// (cluster, work) → the objects it carries.
    carried: Mutex<HashMap<(String, String), Vec<ObjKey>>>,
}

impl Agent {
    pub(super) fn new(
        hub: Client,
        config: WorkAgentConfig,
        trigger: mpsc::UnboundedSender<ObjectRef<ManifestWork>>,
        works: Store<ManifestWork>,
    ) -> Self {
        Agent {
            stats: AgentStats::default(),
            hub,
            config,
            spokes: RwLock::new(HashMap::new()),
            trigger,
            works_store: OnceLock::from(works),
            index: Mutex::new(HashMap::new()),
            carried: Mutex::new(HashMap::new()),
        }
    }

    pub(crate) fn register_cluster(self: &Arc<Self>, name: &str, client: Client) {
        let spoke = Arc::new(Spoke {
            name: name.to_string(),
            client,
            resolver: Resolver::default(),
            watches: Mutex::new(HashMap::new()),
        });
        self.spokes
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name.to_string(), spoke);
        self.trigger_namespace(name);
    }

    pub(crate) fn unregister_cluster(&self, name: &str) {
        self.spokes
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(name);
    }

    pub(super) fn spoke(&self, name: &str) -> Option<Arc<Spoke>> {
        self.spokes
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
    }

    /// Reconciles every known work in namespace `ns` (a cluster just registered).
    fn trigger_namespace(&self, ns: &str) {
        if let Some(store) = self.works_store.get() {
            for w in store.state() {
                if w.namespace().as_deref() == Some(ns) {
                    let _ = self.trigger.send(ObjectRef::from(&*w));
                }
            }
        }
    }

    fn on_spoke_object(&self, cluster: &str, ti: &(String, String), obj: &DynamicObject) {
        let key = (
            cluster.to_string(),
            ti.0.clone(),
            ti.1.clone(),
            obj.namespace().unwrap_or_default(),
            obj.name_any(),
        );
        let works: Vec<String> = self
            .index
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default();
        for w in works {
            let _ = self.trigger.send(ObjectRef::new(&w).within(cluster));
        }
    }

    pub(super) fn set_carried(&self, cluster: &str, work: &str, keys: Vec<ObjKey>) {
        let mut carried = self.carried.lock().unwrap_or_else(|e| e.into_inner());
        let mut index = self.index.lock().unwrap_or_else(|e| e.into_inner());
        let wk = (cluster.to_string(), work.to_string());
        if let Some(old) = carried.remove(&wk) {
            for k in old {
                if let Some(set) = index.get_mut(&k) {
                    set.remove(work);
                    if set.is_empty() {
                        index.remove(&k);
                    }
                }
            }
        }
        if keys.is_empty() {
            return;
        }
        for k in &keys {
            index.entry(k.clone()).or_default().insert(work.to_string());
        }
        carried.insert(wk, keys);
    }

    /// The watcher (and cache) of one resource type on one cluster, started on first use.
    pub(super) fn type_watch(
        self: &Arc<Self>,
        spoke: &Arc<Spoke>,
        ti: &TypeInfo,
    ) -> Arc<TypeWatch> {
        let key = (ti.group.clone(), ti.plural.clone());
        let mut watches = spoke.watches.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(w) = watches.get(&key) {
            return w.clone();
        }
        let ar = ti.api_resource();
        let writer = reflector::store::Writer::<DynamicObject>::new(ar.clone());
        let reader = writer.as_reader();
        let api = Api::<DynamicObject>::all_with(spoke.client.clone(), &ar);
        let agent = Arc::downgrade(self);
        let cluster = spoke.name.clone();
        let tkey = key.clone();
        let stream =
            reflector::reflector(writer, watcher::watcher(api, watcher::Config::default()))
                .default_backoff();
        let task = tokio::spawn(async move {
            futures::pin_mut!(stream);
            while let Some(ev) = stream.next().await {
                let Some(agent) = agent.upgrade() else { return };
                match ev {
                    Ok(Event::Apply(o)) | Ok(Event::Delete(o)) | Ok(Event::InitApply(o)) => {
                        agent.on_spoke_object(&cluster, &tkey, &o)
                    }
                    Ok(_) => {}
                    Err(e) => debug!(cluster = %cluster, error = %e, "spoke watch"),
                }
            }
        });
        let w = Arc::new(TypeWatch {
            store: reader,
            task,
        });
        watches.insert(key, w.clone());
        w
    }
}
