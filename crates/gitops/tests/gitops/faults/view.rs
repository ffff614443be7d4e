//! What the fault tests see: the objects they watch, as reflectors deliver them.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::Value;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::harness::*;

/// What to watch: a name for it, the resource, a namespace (`None`: all), a label selector.
pub struct Watched {
    pub name: &'static str,
    pub ar: ApiResource,
    pub ns: Option<String>,
    pub labels: String,
}

/// Objects as the watches last delivered them.
pub struct View {
    pub stores: BTreeMap<&'static str, Store<DynamicObject>>,
    /// Bumped on every watch event.
    pub changed: watch::Receiver<u64>,
    pub tasks: Vec<JoinHandle<()>>,
}

impl Drop for View {
    fn drop(&mut self) {
        self.tasks.iter().for_each(JoinHandle::abort);
    }
}

impl View {
    /// Starts the watches; returns once each has listed.
    pub async fn start(client: &Client, watched: Vec<Watched>) -> View {
        let (bump, changed) = watch::channel(0u64);
        let mut stores = BTreeMap::new();
        let mut tasks = Vec::new();
        for w in watched {
            let writer = reflector::store::Writer::new(w.ar.clone());
            let store = writer.as_reader();
            let api = dapi(client, &w.ar, w.ns.as_deref());
            // read from etcd when (re-)listing: a restarted API server's watch cache is not
            // filled yet
            let mut config =
                watcher::Config::default().list_semantic(watcher::ListSemantic::MostRecent);
            if !w.labels.is_empty() {
                config = config.labels(&w.labels);
            }
            let stream = watcher(api, config).backoff(Every(RETRY)).reflect(writer);
            let bump = bump.clone();
            tasks.push(tokio::spawn(async move {
                let mut stream = std::pin::pin!(stream);
                while let Some(ev) = stream.next().await {
                    if ev.is_ok() {
                        bump.send_modify(|n| *n += 1);
                    }
                }
            }));
            stores.insert(w.name, store);
        }
        let view = View {
            stores,
            changed,
            tasks,
        };
        let ready = futures::future::join_all(view.stores.values().map(|s| s.wait_until_ready()));
        tokio::time::timeout(CONVERGE, ready)
            .await
            .expect("the view's watches never listed");
        view
    }

    pub fn objects(&self, name: &str) -> Vec<Arc<DynamicObject>> {
        self.stores[name].state()
    }

    /// Waits until `check` holds (checked after every change, at most every 10 ms); returns
    /// when it first did. Panics with `what` and the last check after [`CONVERGE`].
    pub async fn until<T: std::fmt::Display>(
        &self,
        what: &str,
        mut check: impl FnMut(&Self) -> (bool, T),
    ) -> Instant {
        let mut changed = self.changed.clone();
        let deadline = tokio::time::Instant::now() + CONVERGE;
        loop {
            changed.borrow_and_update();
            let (done, last) = check(self);
            if done {
                eprintln!("gitops-faults: {} {what}: {last}", utc());
                return Instant::now();
            }
            let next = tokio::time::timeout_at(deadline, changed.changed()).await;
            assert!(
                matches!(next, Ok(Ok(()))),
                "{what}: not within {CONVERGE:?}: {last}"
            );
            // let a burst of events land before checking again
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The clusters the Placement's decisions list.
    pub fn decided(&self) -> BTreeSet<String> {
        self.objects("decisions")
            .iter()
            .flat_map(|d| {
                d.data["status"]["decisions"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            })
            .filter_map(|d| d["clusterName"].as_str().map(str::to_string))
            .collect()
    }

    /// The fleet's ManagedClusters (being deleted or not).
    pub fn clusters(&self) -> BTreeSet<String> {
        self.objects("clusters")
            .iter()
            .map(|c| c.name_any())
            .collect()
    }

    /// `kind/namespace/name` → UID of every object of `names` (view names).
    pub fn uids(&self, names: &[&str]) -> BTreeMap<String, String> {
        names
            .iter()
            .flat_map(|n| {
                self.objects(n).into_iter().map(move |o| {
                    (
                        format!("{n}/{}/{}", o.namespace().unwrap_or_default(), o.name_any()),
                        o.uid().unwrap_or_default(),
                    )
                })
            })
            .collect()
    }

    pub fn gitopscluster(&self) -> Option<Value> {
        self.objects("gc").first().map(|g| g.data.clone())
    }
}
