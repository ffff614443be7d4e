//! `--label-selector`: the workspace's label-selector parser (`argocd_pull_ops::labels`, the
//! apimachinery syntax) and a [`Store`] that shows only the objects it selects — what the peer's
//! label-selected informers see: an object that stops matching looks deleted, one that starts
//! matching looks created.

use std::collections::BTreeMap;
use std::sync::Arc;

use argocd_pull_ops::labels::LabelSelector;
use async_trait::async_trait;
use futures::{StreamExt, stream::BoxStream};
use serde_json::Value;

use crate::store::{Kind, Store, StoreEvent, StoreResult};

/// Parses a selector; the error names it and the syntax.
pub fn parse(s: &str) -> Result<LabelSelector, String> {
    LabelSelector::parse(s).map_err(|e| {
        format!(
            "invalid label selector {s:?}: {e}; use the kubectl -l syntax (a=b, a!=b, a in (x,y), a notin (x), a, !a; the numeric operators < and > are not supported)"
        )
    })
}

/// Whether `sel` selects the object's labels.
pub fn selects(sel: &LabelSelector, obj: &Value) -> bool {
    let labels = &obj["metadata"]["labels"];
    sel.matches_with(|k| labels[k].as_str())
}

/// A [`Store`] that shows only the objects `selector` selects, for the kinds in `kinds`.
pub struct SelectedStore {
    inner: Arc<dyn Store>,
    selector: Arc<LabelSelector>,
    kinds: Vec<Kind>,
}

impl SelectedStore {
    pub fn new(inner: Arc<dyn Store>, selector: LabelSelector, kinds: Vec<Kind>) -> Self {
        Self {
            inner,
            selector: Arc::new(selector),
            kinds,
        }
    }

    fn shown(&self, kind: Kind, obj: &Value) -> bool {
        !self.kinds.contains(&kind) || selects(&self.selector, obj)
    }
}

#[async_trait]
impl Store for SelectedStore {
    async fn list(&self, kind: Kind, ns: Option<&str>) -> StoreResult<Vec<Value>> {
        let l = self.inner.list(kind, ns).await?;
        Ok(l.into_iter().filter(|o| self.shown(kind, o)).collect())
    }
    async fn get(&self, kind: Kind, ns: &str, name: &str) -> StoreResult<Option<Value>> {
        Ok(self
            .inner
            .get(kind, ns, name)
            .await?
            .filter(|o| self.shown(kind, o)))
    }
    async fn create(&self, kind: Kind, obj: Value) -> StoreResult<Value> {
        self.inner.create(kind, obj).await
    }
    async fn replace(&self, kind: Kind, obj: Value) -> StoreResult<Value> {
        self.inner.replace(kind, obj).await
    }
    async fn create_only(&self, kind: Kind, obj: Value) -> StoreResult<()> {
        self.inner.create_only(kind, obj).await
    }
    async fn replace_only(&self, kind: Kind, obj: Value) -> StoreResult<()> {
        self.inner.replace_only(kind, obj).await
    }
    async fn merge_patch(
        &self,
        kind: Kind,
        ns: &str,
        name: &str,
        patch: Value,
    ) -> StoreResult<Value> {
        self.inner.merge_patch(kind, ns, name, patch).await
    }
    async fn delete(&self, kind: Kind, ns: &str, name: &str) -> StoreResult<()> {
        self.inner.delete(kind, ns, name).await
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
        let s = self.inner.watch(kind, ns);
        if !self.kinds.contains(&kind) {
            return s;
        }
        let sel = self.selector.clone();
        s.map(move |ev| {
            ev.map(|ev| match ev {
                StoreEvent::Restarted(l) => {
                    StoreEvent::Restarted(l.into_iter().filter(|o| selects(&sel, o)).collect())
                }
                // no longer selected: gone for the watcher (as a label-selected watch reports)
                StoreEvent::Applied(o) if !selects(&sel, &o) => StoreEvent::Deleted(o),
                other => other,
            })
        })
        .boxed()
    }
    fn watch_streaming(
        &self,
        kind: Kind,
        ns: Option<&str>,
    ) -> BoxStream<'static, StoreResult<crate::store::WatchEvent>> {
        use crate::store::WatchEvent as W;
        let s = self.inner.watch_streaming(kind, ns);
        if !self.kinds.contains(&kind) {
            return s;
        }
        let sel = self.selector.clone();
        s.filter_map(move |ev| {
            futures::future::ready(match ev {
                Ok(W::InitApply(o)) if !selects(&sel, &o) => None,
                Ok(W::Applied(o)) if !selects(&sel, &o) => Some(Ok(W::Deleted(o))),
                other => Some(other),
            })
        })
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn with(labels: Value) -> Value {
        json!({"metadata": {"labels": labels}})
    }

    #[test]
    fn parses_the_kubectl_syntax() {
        let s = parse("team=a, tier in (web, api),env!=prod,!legacy,owner").unwrap();
        assert!(selects(
            &s,
            &with(json!({"team": "a", "tier": "web", "owner": "x"}))
        ));
        assert!(!selects(
            &s,
            &with(json!({"team": "a", "tier": "db", "owner": "x"}))
        ));
        assert!(!selects(
            &s,
            &with(json!({"team": "a", "tier": "web", "owner": "x", "env": "prod"}))
        ));
        assert!(!selects(
            &s,
            &with(json!({"team": "a", "tier": "web", "owner": "x", "legacy": "1"}))
        ));
        assert!(!selects(&s, &with(json!({"team": "a", "tier": "web"}))));
        let n = parse("tier notin (db),team==a").unwrap();
        assert!(selects(&n, &with(json!({"team": "a"}))));
        assert!(selects(&parse("").unwrap(), &with(json!({}))));
    }

    #[test]
    fn bad_selectors_name_the_requirement_and_the_syntax() {
        for bad in [
            "a>1",
            "a in b",
            "a in (x",
            "a=b c",
            "a sometimes (x)",
            "=b",
            "a,,b",
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains("kubectl -l syntax"), "{bad}: {e}");
        }
    }
}
