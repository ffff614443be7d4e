//! The aggregator's watch pumps: the ManifestWorks, the reports and the ApplicationSets are each
//! watched in a task of their own and forwarded as [`Ev`]s to the one task that owns the index.

use argocd_pull_ops::api_health::{ApiHealth, rewatching};

use argocd_pull_api::argocd::ApplicationSet;
use argocd_pull_api::names;
use argocd_pull_api::report::MulticlusterApplicationSetReport;
use futures::StreamExt;
use kube::Client;
use kube::api::Api;
use kube::runtime::watcher;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::name::CONTROLLER;
use super::work_view::WorkView;

/// One event of one of the aggregator's watches.
pub(super) enum Ev {
    Work(watcher::Event<WorkView>),
    Report(watcher::Event<MulticlusterApplicationSetReport>),
    AppSet(watcher::Event<kube::core::PartialObjectMeta<ApplicationSet>>),
}

/// Events buffered between a watch task and the aggregator.
const EVENT_BUFFER: usize = 512;
/// Page size of the initial work list. Measured at 100,000 works: 500 (kube's default) lets the
/// watch task decode one page while the server prepares the next; 5,000 was ≈ 0.5 s slower.
const WORK_PAGE_SIZE: u32 = 500;

/// Starts the three watches, each in a task of the returned set (dropping it stops them), and
/// returns the receiving end of their events.
pub(super) fn spawn(client: &Client, health: &ApiHealth) -> (JoinSet<()>, mpsc::Receiver<Ev>) {
    let (tx, events) = mpsc::channel::<Ev>(EVENT_BUFFER);
    let mut pumps = JoinSet::new();
    pumps.spawn(pump(
        rewatching(
            Api::<WorkView>::all(client.clone()),
            watcher::Config::default()
                .labels(names::LABEL_APPLICATION_SET)
                .page_size(WORK_PAGE_SIZE),
            health.clone(),
        ),
        Ev::Work,
        "manifestworks",
        tx.clone(),
    ));
    pumps.spawn(pump(
        rewatching(
            Api::<MulticlusterApplicationSetReport>::all(client.clone()),
            watcher::Config::default(),
            health.clone(),
        ),
        Ev::Report,
        "multiclusterapplicationsetreports",
        tx.clone(),
    ));
    pumps.spawn(pump(
        rewatching(
            Api::<kube::core::PartialObjectMeta<ApplicationSet>>::all(client.clone()),
            watcher::Config::default(),
            health.clone(),
        ),
        Ev::AppSet,
        "applicationsets",
        tx,
    ));
    (pumps, events)
}

/// Forwards one watch's events to the aggregator until it stops listening.
async fn pump<K, S>(
    stream: S,
    wrap: fn(watcher::Event<K>) -> Ev,
    resource: &'static str,
    tx: mpsc::Sender<Ev>,
) where
    S: futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
    K: Send + 'static,
{
    let mut stream = std::pin::pin!(stream);
    while let Some(e) = stream.next().await {
        if let Some(e) = log_err(e, resource)
            && tx.send(wrap(e)).await.is_err()
        {
            break;
        }
    }
}

fn log_err<T>(e: Result<T, watcher::Error>, resource: &str) -> Option<T> {
    match e {
        Ok(v) => Some(v),
        Err(e) => {
            tracing::warn!(controller = CONTROLLER, resource, error = %e, "watch error; retrying");
            None
        }
    }
}
