//! `--label-selector`: Kubernetes label-selector syntax (as `labels.Parse` in apimachinery) into
//! kube's [`Selector`], and a [`Store`] that shows only the objects it selects — what the peer's
//! label-selected informers see: an object that stops matching looks deleted, one that starts
//! matching looks created.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use async_trait::async_trait;
use futures::{StreamExt, stream::BoxStream};
use kube::core::{Expression, Selector, SelectorExt};
use serde_json::Value;

use crate::store::{Kind, Store, StoreEvent, StoreResult};

/// Parses `a=b,c!=d,e in (x,y),f notin (z),g,!h` (also `==`). Set-based operators need
/// parentheses; `<`/`>` (numeric comparisons) are not supported by kube's selector and are
/// refused with an error naming them.
pub fn parse(s: &str) -> Result<Selector, String> {
    let mut exprs = Vec::new();
    for req in split_top(s) {
        let req = req.trim();
        if req.is_empty() {
            continue;
        }
        exprs.push(parse_requirement(req).map_err(|e| {
            format!("invalid label selector {s:?}: {e} in {req:?}; use the kubectl -l syntax (a=b, a!=b, a in (x,y), a notin (x), a, !a)")
        })?);
    }
    Ok(Selector::from_iter(exprs))
}

/// Splits at commas outside parentheses.
fn split_top(s: &str) -> Vec<&str> {
    let (mut out, mut depth, mut start) = (Vec::new(), 0usize, 0usize);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

fn parse_requirement(r: &str) -> Result<Expression, String> {
    if let Some(k) = r.strip_prefix('!') {
        return Ok(Expression::DoesNotExist(key(k)?));
    }
    for (op, ctor) in [("!=", 0), ("==", 1), ("=", 1)] {
        if let Some((k, v)) = r.split_once(op) {
            let (k, v) = (key(k)?, value(v)?);
            return Ok(if ctor == 0 {
                Expression::NotEqual(k, v)
            } else {
                Expression::Equal(k, v)
            });
        }
    }
    if r.contains(['<', '>']) {
        return Err("the numeric operators < and > are not supported".into());
    }
    let words: Vec<&str> = r.splitn(2, char::is_whitespace).collect();
    if let [k, rest] = words[..] {
        let rest = rest.trim();
        let (neg, set) = if let Some(x) = rest.strip_prefix("notin") {
            (true, x)
        } else if let Some(x) = rest.strip_prefix("in") {
            (false, x)
        } else {
            return Err(format!("unknown operator {rest:?}"));
        };
        let set = set
            .trim()
            .strip_prefix('(')
            .and_then(|x| x.strip_suffix(')'))
            .ok_or("a set must be in parentheses")?;
        let values: BTreeSet<String> = set.split(',').map(value).collect::<Result<_, _>>()?;
        let k = key(k)?;
        return Ok(if neg {
            Expression::NotIn(k, values)
        } else {
            Expression::In(k, values)
        });
    }
    Ok(Expression::Exists(key(r)?))
}

fn key(k: &str) -> Result<String, String> {
    let k = k.trim();
    let ok = !k.is_empty()
        && k.len() <= 317
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'));
    if ok {
        Ok(k.to_string())
    } else {
        Err(format!("{k:?} is not a label key"))
    }
}

fn value(v: &str) -> Result<String, String> {
    let v = v.trim();
    let ok = v.len() <= 63
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(v.to_string())
    } else {
        Err(format!("{v:?} is not a label value"))
    }
}

/// Whether `sel` selects the object's labels.
pub fn selects(sel: &Selector, obj: &Value) -> bool {
    let labels: BTreeMap<String, String> = obj["metadata"]["labels"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
                .collect()
        })
        .unwrap_or_default();
    sel.matches(&labels)
}

/// A [`Store`] that shows only the objects `selector` selects, for the kinds in `kinds`.
pub struct SelectedStore {
    inner: Arc<dyn Store>,
    selector: Arc<Selector>,
    kinds: Vec<Kind>,
}

impl SelectedStore {
    pub fn new(inner: Arc<dyn Store>, selector: Selector, kinds: Vec<Kind>) -> Self {
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
        for bad in ["a>1", "a in b", "a in (x", "a=b c", "a sometimes (x)", "=b"] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains("kubectl -l syntax"), "{bad}: {e}");
        }
    }
}
