//! What the fault tests see of a fleet while they wait for it to converge: the fleet's
//! Applications and works as watches deliver them (kube-runtime reflectors), audited locally
//! whenever they change.
//!
//! Polling the audit (a LIST of every Application and of every cluster's works, read from etcd,
//! every 100 ms) competed with the controller for a restarted API server's first seconds: its
//! reads of 400 objects took 2 s then. A watch costs the API server one list after the outage
//! and the events themselves, and it tells when the fleet converged to within the events'
//! delivery, not to within one poll.

use std::time::{Duration, Instant};

use argocd_pull_api::argocd::Application;
use argocd_pull_api::names::{ANNOTATION_HUB_APPLICATION_NAMESPACE, LABEL_PULL_TO_OCM};
use argocd_pull_api::ocm::work::ManifestWork;
use argocd_pull_realenv_faults::Every;
use futures::StreamExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::harness::{Audit, CONVERGE, Fleet};

/// How often a view's watch retries while the API server is away: it must not add a backoff of
/// its own to the time it measures.
const RETRY: Duration = Duration::from_millis(100);

/// The fleet's Applications and works as the watches last delivered them.
pub struct FleetView {
    apps: Store<Application>,
    works: Store<ManifestWork>,
    /// Bumped on every watch event.
    changed: watch::Receiver<u64>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for FleetView {
    fn drop(&mut self) {
        self.tasks.iter().for_each(JoinHandle::abort);
    }
}

fn reflect<K>(
    api: Api<K>,
    config: watcher::Config,
    bump: watch::Sender<u64>,
) -> (Store<K>, JoinHandle<()>)
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync,
    K: 'static,
{
    let (store, writer) = reflector::store();
    // read from etcd when (re-)listing: a restarted API server's watch cache is not filled yet
    let config = config.list_semantic(watcher::ListSemantic::MostRecent);
    let stream = watcher(api, config).backoff(Every(RETRY)).reflect(writer);
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(ev) = stream.next().await {
            if ev.is_ok() {
                bump.send_modify(|n| *n += 1);
            }
        }
    });
    (store, task)
}

impl FleetView {
    /// Starts watching the fleet's Applications and the works of every cluster; returns once
    /// both have been listed.
    pub async fn start(fleet: &Fleet) -> FleetView {
        let (bump, changed) = watch::channel(0);
        let (apps, a) = reflect(fleet.apps(), watcher::Config::default(), bump.clone());
        let (works, w) = reflect(
            Api::<ManifestWork>::all(fleet.hub.clone()),
            watcher::Config::default().labels(LABEL_PULL_TO_OCM),
            bump,
        );
        let view = FleetView {
            apps,
            works,
            changed,
            tasks: vec![a, w],
        };
        let ready = async {
            let _ = tokio::join!(view.apps.wait_until_ready(), view.works.wait_until_ready());
        };
        tokio::time::timeout(CONVERGE, ready)
            .await
            .expect("the fleet's watches never listed");
        view
    }

    fn audit(&self, fleet: &Fleet) -> Audit {
        let apps: Vec<Application> = self.apps.state().iter().map(|a| (**a).clone()).collect();
        let works: Vec<ManifestWork> = self
            .works
            .state()
            .iter()
            .filter(|w| {
                w.metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(ANNOTATION_HUB_APPLICATION_NAMESPACE))
                    == Some(&fleet.ns)
            })
            .map(|w| (**w).clone())
            .collect();
        Audit::of_with(&apps, &works, &fleet.options)
    }

    /// Waits until `done` holds of the view (checked after every change, at most every 10 ms);
    /// returns when it first did. Panics with `what` and the last check after [`CONVERGE`].
    async fn until<T: std::fmt::Display>(
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
                return Instant::now();
            }
            let next = tokio::time::timeout_at(deadline, changed.changed()).await;
            assert!(
                matches!(next, Ok(Ok(()))),
                "{what}: not within {CONVERGE:?}: {last}"
            );
            // let a burst of events land before auditing again
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// When the fleet first had `live` Applications and nothing lost or stuck (see [`Audit`]),
    /// as the watches saw it. The caller confirms with a fresh [`Fleet::audit`].
    pub async fn converged_at(&self, fleet: &Fleet, live: usize) -> Instant {
        let at = self
            .until(&format!("{}: converged to {live}", fleet.ns), |v| {
                let a = v.audit(fleet);
                (a.apps == live && a.is_clean(), a)
            })
            .await;
        eprintln!("faults: {}: converged (as watched)", fleet.ns);
        at
    }

    /// When every Application of `range` first reported Healthy and Synced.
    pub async fn healthy_at(&self, fleet: &Fleet, range: std::ops::Range<usize>) -> Instant {
        let n = range.len();
        self.until(&format!("{}: statuses", fleet.ns), |v| {
            let got = fleet.count_healthy(range.clone(), v.apps.state().iter().map(|a| a.as_ref()));
            (got == n, format!("{got} of {n} Healthy"))
        })
        .await
    }
}
