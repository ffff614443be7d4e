//! Awaiting state in tests and demos: watches under a timeout, never fixed sleeps.

use std::fmt::Debug;
use std::future::Future;
use std::time::Duration;

use futures::StreamExt;
use kube::Resource;
use kube::api::Api;
use kube::runtime::watcher::{self, Event};
use serde::de::DeserializeOwned;

/// Waits until object `name` exists and satisfies `pred`; returns it. On timeout the error
/// shows the last state seen.
pub async fn wait_for<K>(
    api: &Api<K>,
    name: &str,
    timeout: Duration,
    pred: impl Fn(&K) -> bool,
) -> anyhow::Result<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    K::DynamicType: Default,
{
    let mut last: Option<K> = None;
    let stream = watcher::watch_object(api.clone(), name);
    futures::pin_mut!(stream);
    let res = tokio::time::timeout(timeout, async {
        while let Some(ev) = stream.next().await {
            if let Ok(Some(obj)) = ev {
                if pred(&obj) {
                    return Some(obj);
                }
                last = Some(obj);
            }
        }
        None
    })
    .await;
    match res {
        Ok(Some(obj)) => Ok(obj),
        _ => anyhow::bail!(
            "timed out after {timeout:?} waiting for {} {name:?}; last seen: {}",
            K::kind(&Default::default()),
            last.map(|l| format!("{l:#?}"))
                .unwrap_or_else(|| "nothing".into())
        ),
    }
}

/// Waits until object `name` does not exist.
pub async fn wait_deleted<K>(api: &Api<K>, name: &str, timeout: Duration) -> anyhow::Result<()>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    K::DynamicType: Default,
{
    let stream = watcher::watch_object(api.clone(), name);
    futures::pin_mut!(stream);
    let res = tokio::time::timeout(timeout, async {
        while let Some(ev) = stream.next().await {
            if let Ok(None) = ev {
                return true;
            }
        }
        false
    })
    .await;
    match res {
        Ok(true) => Ok(()),
        _ => anyhow::bail!(
            "timed out after {timeout:?} waiting for {} {name:?} to be deleted",
            K::kind(&Default::default())
        ),
    }
}

/// Waits until every object of `api` (all of them, as listed and watched) satisfies `pred` as a
/// set; returns that set.
pub async fn wait_for_list<K>(
    api: &Api<K>,
    timeout: Duration,
    pred: impl Fn(&[K]) -> bool,
) -> anyhow::Result<Vec<K>>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let (reader, writer) = kube::runtime::reflector::store::<K>();
    let stream = kube::runtime::reflector::reflector(
        writer,
        watcher::watcher(api.clone(), watcher::Config::default()),
    );
    futures::pin_mut!(stream);
    let mut ready = false;
    let res = tokio::time::timeout(timeout, async {
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(Event::InitDone) => ready = true,
                Ok(Event::Init) | Ok(Event::InitApply(_)) => continue,
                _ => {}
            }
            if ready {
                let items: Vec<K> = reader.state().iter().map(|o| (**o).clone()).collect();
                if pred(&items) {
                    return Some(items);
                }
            }
        }
        None
    })
    .await;
    match res {
        Ok(Some(items)) => Ok(items),
        _ => anyhow::bail!(
            "timed out after {timeout:?} waiting for the {} list; last seen {} objects",
            K::kind(&Default::default()),
            reader.state().len()
        ),
    }
}

/// Polls `check` every 20 ms until it returns `Some`, under `timeout` (for conditions no single
/// watch can express).
pub async fn poll_until<T, F, Fut>(timeout: Duration, what: &str, mut check: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let res = tokio::time::timeout(timeout, async {
        loop {
            if let Some(v) = check().await {
                return v;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    res.map_err(|_| anyhow::anyhow!("timed out after {timeout:?} waiting for {what}"))
}
