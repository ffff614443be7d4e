//! [`LoggedStore`]: a [`Store`] whose writes log as `actions` and whose watches log as
//! `informers` (see the parent module). Installed by the commands only when debug lines are
//! written, so it costs nothing otherwise.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use async_trait::async_trait;
use futures::{StreamExt, stream::BoxStream};
use serde_json::Value;

use super::{log_action, log_action_error, log_informer};
use crate::store::{Kind, Store, StoreEvent, StoreResult, WatchEvent};

/// Logs the writes and watch events of `inner`.
pub struct LoggedStore {
    inner: Arc<dyn Store>,
}

impl LoggedStore {
    pub fn new(inner: Arc<dyn Store>) -> Self {
        Self { inner }
    }
}

fn meta(obj: &Value) -> (&str, &str) {
    (
        obj["metadata"]["namespace"].as_str().unwrap_or_default(),
        obj["metadata"]["name"].as_str().unwrap_or_default(),
    )
}

/// `namespace/name` of an object.
fn key(obj: &Value) -> String {
    let (ns, n) = meta(obj);
    format!("{ns}/{n}")
}

/// Tells a watch's adds from its updates (the names it has seen) and logs each change.
struct Seen {
    kind: Kind,
    names: HashSet<String>,
}

impl Seen {
    fn new(kind: Kind) -> Self {
        Seen {
            kind,
            names: HashSet::new(),
        }
    }
    fn applied(&mut self, obj: &Value) {
        let action = if self.names.insert(key(obj)) {
            "create"
        } else {
            "update"
        };
        log_informer(action, self.kind, obj);
    }
    fn deleted(&mut self, obj: &Value) {
        self.names.remove(&key(obj));
        log_informer("delete", self.kind, obj);
    }
    fn restarted(&mut self) {
        self.names.clear();
    }
}

#[async_trait]
impl Store for LoggedStore {
    async fn list(&self, kind: Kind, ns: Option<&str>) -> StoreResult<Vec<Value>> {
        self.inner.list(kind, ns).await
    }
    async fn get(&self, kind: Kind, ns: &str, name: &str) -> StoreResult<Option<Value>> {
        self.inner.get(kind, ns, name).await
    }
    async fn create(&self, kind: Kind, obj: Value) -> StoreResult<Value> {
        let (ns, n) = meta(&obj);
        let (ns, n) = (ns.to_string(), n.to_string());
        match self.inner.create(kind, obj.clone()).await {
            Ok(o) => {
                log_action("create", kind, &ns, &n, Some(&o));
                Ok(o)
            }
            Err(e) => {
                log_action_error("create", kind, &ns, &n, Some(&obj), &e);
                Err(e)
            }
        }
    }
    async fn replace(&self, kind: Kind, obj: Value) -> StoreResult<Value> {
        let (ns, n) = meta(&obj);
        let (ns, n) = (ns.to_string(), n.to_string());
        match self.inner.replace(kind, obj.clone()).await {
            Ok(o) => {
                log_action("update", kind, &ns, &n, Some(&o));
                Ok(o)
            }
            Err(e) => {
                log_action_error("update", kind, &ns, &n, Some(&obj), &e);
                Err(e)
            }
        }
    }
    async fn merge_patch(
        &self,
        kind: Kind,
        ns: &str,
        name: &str,
        patch: Value,
    ) -> StoreResult<Value> {
        match self.inner.merge_patch(kind, ns, name, patch.clone()).await {
            Ok(o) => {
                log_action("patch", kind, ns, name, Some(&o));
                Ok(o)
            }
            Err(e) => {
                log_action_error("patch", kind, ns, name, Some(&patch), &e);
                Err(e)
            }
        }
    }
    async fn delete(&self, kind: Kind, ns: &str, name: &str) -> StoreResult<()> {
        match self.inner.delete(kind, ns, name).await {
            Ok(()) => {
                log_action("delete", kind, ns, name, None);
                Ok(())
            }
            Err(e) => {
                log_action_error("delete", kind, ns, name, None, &e);
                Err(e)
            }
        }
    }
    async fn ensure_namespace(&self, ns: &str) -> StoreResult<()> {
        self.inner.ensure_namespace(ns).await
    }
    async fn ensure_namespace_labelled(
        &self,
        ns: &str,
        labels: &BTreeMap<String, String>,
    ) -> StoreResult<()> {
        self.inner.ensure_namespace_labelled(ns, labels).await
    }
    fn watch(&self, kind: Kind, ns: Option<&str>) -> BoxStream<'static, StoreResult<StoreEvent>> {
        let mut seen = Seen::new(kind);
        self.inner
            .watch(kind, ns)
            .inspect(move |ev| match ev {
                Ok(StoreEvent::Restarted(list)) => {
                    seen.restarted();
                    list.iter().for_each(|o| seen.applied(o));
                }
                Ok(StoreEvent::Applied(o)) => seen.applied(o),
                Ok(StoreEvent::Deleted(o)) => seen.deleted(o),
                Err(_) => {}
            })
            .boxed()
    }
    fn watch_streaming(
        &self,
        kind: Kind,
        ns: Option<&str>,
    ) -> BoxStream<'static, StoreResult<WatchEvent>> {
        let mut seen = Seen::new(kind);
        self.inner
            .watch_streaming(kind, ns)
            .inspect(move |ev| match ev {
                Ok(WatchEvent::Init) => seen.restarted(),
                Ok(WatchEvent::InitApply(o) | WatchEvent::Applied(o)) => seen.applied(o),
                Ok(WatchEvent::Deleted(o)) => seen.deleted(o),
                Ok(WatchEvent::InitDone) | Err(_) => {}
            })
            .boxed()
    }
}
