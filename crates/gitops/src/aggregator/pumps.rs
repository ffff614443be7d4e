//! The aggregator's watch pumps: the ManifestWorks, the reports and the ApplicationSets are each
//! watched in a task of their own and forwarded as [`Ev`]s to the one task that owns the index.

use argocd_pull_ops::api_health::{ApiHealth, rewatching};
use argocd_pull_ops::watch::WatchEvents;

use argocd_pull_api::argocd::ApplicationSet;
use argocd_pull_api::names;
use argocd_pull_api::report::MulticlusterApplicationSetReport;
use futures::{Stream, StreamExt};
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
    // A list's events pass as they come (`lists_as_they_come`): the aggregator keeps no
    // reflector store and indexes a list's works as they arrive (dropping, at its `InitDone`,
    // those a re-list missed), so that listing, decoding and indexing overlap.
    pumps.spawn(forward(
        rewatching(
            Api::<WorkView>::all(client.clone()),
            watcher::Config::default()
                .labels(names::LABEL_APPLICATION_SET)
                .page_size(WORK_PAGE_SIZE),
            health.clone(),
        )
        .lists_as_they_come("manifestworks")
        .controller(CONTROLLER),
        Ev::Work,
        tx.clone(),
    ));
    pumps.spawn(forward(
        rewatching(
            Api::<MulticlusterApplicationSetReport>::all(client.clone()),
            watcher::Config::default(),
            health.clone(),
        )
        .lists_as_they_come("multiclusterapplicationsetreports")
        .controller(CONTROLLER),
        Ev::Report,
        tx.clone(),
    ));
    pumps.spawn(forward(
        rewatching(
            Api::<kube::core::PartialObjectMeta<ApplicationSet>>::all(client.clone()),
            watcher::Config::default(),
            health.clone(),
        )
        .lists_as_they_come("applicationsets")
        .controller(CONTROLLER),
        Ev::AppSet,
        tx,
    ));
    (pumps, events)
}

/// Sends each event to the aggregator until it stops listening (or the watch ends).
async fn forward<E>(events: impl Stream<Item = E>, wrap: fn(E) -> Ev, tx: mpsc::Sender<Ev>) {
    let mut events = std::pin::pin!(events);
    while let Some(e) = events.next().await {
        if tx.send(wrap(e)).await.is_err() {
            break;
        }
    }
}
