//! The OCM work-agent simulator: one hub-wide ManifestWork controller that serves every
//! registered cluster (the work's namespace names the cluster).
//!
//! Per work: adds the agent finalizer, applies each manifest in order to the cluster's Hub
//! (honouring `manifestConfigs[].updateStrategy`), deletes manifests removed from the work,
//! evaluates feedback rules, and writes `status` (work and per-manifest conditions, feedback)
//! only when it changed. Objects it applied are watched on the cluster (one watcher per cluster and
//! resource type, started on first use) so feedback follows their changes. On deletion it
//! removes what it applied per `deleteOption`, waits until those objects are gone, then removes
//! its finalizer.
//!
//! This file starts the agent; `config`: its tunables and the names it writes; `state`: the
//! clusters it serves and what it applied there; `reconcile`: one work; `apply`: one manifest;
//! `identity`: a manifest's identity and the options that match it.

use std::sync::Arc;

use argocd_pull_api::ocm::work::ManifestWork;
use futures::StreamExt;
use kube::Client;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::{reflector, watcher};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::debug;

mod apply;
mod config;
mod error;
mod identity;
mod reconcile;
mod state;
mod stats;

pub use config::{OBJECT_HASH_ANNOTATION, WORK_FINALIZER, WorkAgentConfig};
pub use error::AgentError;
use reconcile::reconcile;
use state::Agent;
pub use stats::{AgentCounts, AgentStats};

/// Handle on the running agent.
pub(crate) struct AgentHandle {
    pub(crate) agent: Arc<Agent>,
    pub(crate) task: JoinHandle<()>,
}

impl Drop for AgentHandle {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub(crate) fn start(hub: Client, config: WorkAgentConfig) -> AgentHandle {
    let (tx, rx) = mpsc::unbounded_channel();
    let (reader, writer) = reflector::store::<ManifestWork>();
    let agent = Arc::new(Agent::new(hub.clone(), config.clone(), tx, reader.clone()));
    // Status-only changes (our own writes) do not trigger a reconcile.
    let works = reflector::reflector(
        writer,
        watcher::watcher(Api::<ManifestWork>::all(hub), watcher::Config::default()),
    )
    .default_backoff()
    .applied_objects()
    .predicate_filter(work_predicate, Default::default());
    let ctrl = Controller::for_stream(works, reader)
        .reconcile_on(tokio_stream::wrappers::UnboundedReceiverStream::new(rx))
        .with_config(kube::runtime::controller::Config::default().concurrency(config.concurrency));
    let ctx = agent.clone();
    let task = tokio::spawn(async move {
        ctrl.run(reconcile, error_policy, ctx)
            .for_each(|r| {
                if let Err(e) = r {
                    debug!(error = %e, "work agent reconcile");
                }
                std::future::ready(())
            })
            .await;
    });
    AgentHandle { agent, task }
}

fn work_predicate(w: &ManifestWork) -> Option<u64> {
    use std::hash::{DefaultHasher, Hash, Hasher};
    let mut h = DefaultHasher::new();
    w.metadata.generation.hash(&mut h);
    w.metadata.deletion_timestamp.is_some().hash(&mut h);
    w.metadata.finalizers.hash(&mut h);
    w.metadata.uid.hash(&mut h);
    Some(h.finish())
}

fn error_policy(_w: Arc<ManifestWork>, e: &AgentError, ctx: Arc<Agent>) -> Action {
    debug!(error = %e, "work reconcile failed; retrying");
    Action::requeue(ctx.config.retry_interval)
}
