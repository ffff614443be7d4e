//! Read-your-writes over a watch cache: after a write, the cache may still hold the older object
//! for a moment; reconciles in that window use the object the API server returned instead, so
//! they neither write the same change twice nor try to create what already exists.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use kube::Resource;
use kube::runtime::reflector::ObjectRef;

fn rv<K: Resource>(obj: &K) -> Option<u64> {
    obj.meta().resource_version.as_deref()?.parse().ok()
}

pub(crate) struct Recent<K: Resource<DynamicType = ()>>
where
    ObjectRef<K>: Hash + Eq,
{
    written: Mutex<HashMap<ObjectRef<K>, Arc<K>>>,
}

impl<K: Resource<DynamicType = ()>> Default for Recent<K>
where
    ObjectRef<K>: Hash + Eq,
{
    fn default() -> Self {
        Recent {
            written: Mutex::new(HashMap::new()),
        }
    }
}

impl<K: Resource<DynamicType = ()> + Clone> Recent<K>
where
    ObjectRef<K>: Hash + Eq,
{
    /// Remembers what the API server returned for a write (only when resourceVersions are
    /// numeric, as on every real API server: otherwise freshness cannot be compared).
    /// `cached` is what the watch cache holds for the object now: when the watch already
    /// delivered this version (or a newer one), there is nothing to remember — an entry made then
    /// would stay until the object's next reconcile.
    pub fn record(&self, written: K, cached: Option<Arc<K>>) {
        let Some(written_rv) = rv(&written) else {
            return;
        };
        if cached.is_some_and(|c| rv(c.as_ref()) >= Some(written_rv)) {
            return;
        }
        let key = ObjectRef::from_obj(&written);
        self.lock().insert(key, Arc::new(written));
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().len()
    }

    /// The freshest of the cached object and our last write.
    pub fn resolve(&self, key: &ObjectRef<K>, cached: Option<Arc<K>>) -> Option<Arc<K>> {
        let mut map = self.lock();
        let Some(written) = map.get(key) else {
            return cached;
        };
        match &cached {
            Some(c) if rv(c.as_ref()) >= rv(written.as_ref()) => {
                map.remove(key);
                cached
            }
            _ => Some(written.clone()),
        }
    }

    /// Our last write of `key`, while remembered (the watch has not delivered it yet).
    pub fn written(&self, key: &ObjectRef<K>) -> Option<Arc<K>> {
        self.lock().get(key).cloned()
    }

    /// The watch saw `key` deleted at `deleted_rv`: forget an older write.
    pub fn observe_delete(&self, obj: &K) {
        let key = ObjectRef::from_obj(obj);
        let mut map = self.lock();
        if map.get(&key).is_some_and(|w| rv(obj) >= rv(w.as_ref())) {
            map.remove(&key);
        }
    }

    /// The watch saw `obj`: drop our write when the cache has caught up.
    pub fn observe(&self, obj: &K) {
        let key = ObjectRef::from_obj(obj);
        let mut map = self.lock();
        if map.get(&key).is_some_and(|w| rv(obj) >= rv(w.as_ref())) {
            map.remove(&key);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ObjectRef<K>, Arc<K>>> {
        self.written.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn cm(rv: &str) -> ConfigMap {
        let mut c = ConfigMap::default();
        c.metadata.name = Some("c".into());
        c.metadata.namespace = Some("ns".into());
        c.metadata.resource_version = Some(rv.into());
        c
    }

    #[test]
    fn a_write_the_cache_already_holds_is_not_remembered() {
        let recent = Recent::<ConfigMap>::default();
        recent.record(cm("5"), Some(Arc::new(cm("5"))));
        recent.record(cm("5"), Some(Arc::new(cm("6"))));
        assert_eq!(recent.len(), 0);
        // the cache is behind: our write wins until it catches up
        recent.record(cm("5"), Some(Arc::new(cm("4"))));
        let key = ObjectRef::from_obj(&cm("5"));
        let got = recent.resolve(&key, Some(Arc::new(cm("4")))).unwrap();
        assert_eq!(got.metadata.resource_version.as_deref(), Some("5"));
        recent.observe(&cm("5"));
        assert_eq!(recent.len(), 0);
    }
}
