//! The retry policy of every watch (controller caches, GitOpsCluster, report aggregator), and
//! the one way their events are consumed ([`WatchEvents`]: errors logged, re-lists logged and,
//! for a watch read through a reflector store, delivered whole).
//!
//! kube-runtime's `default_backoff()` (client-go's reflector numbers: 0.8 s doubling to 30 s,
//! jittered up to twice that, reset after 120 s without error) keeps growing through an API
//! server outage, and a `410 Gone` relist right after it counts as one more error: on the real
//! env a controller cut off for ~15 s then hit by an expired watch waited 38–50 s before it
//! relisted (`docs/reliability.md`). One controller retrying a list every few seconds costs the
//! API server nothing, so ours is capped at 5 s (jittered to at most 10 s) and reset after 60 s.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt};
use kube::runtime::utils::{Backoff, ResetTimerBackoff};
use kube::runtime::watcher::{self, Event, ExponentialBackoff};

/// The backoff to give `WatchStreamExt::backoff` for a watch.
pub fn backoff() -> impl Backoff + 'static {
    ResetTimerBackoff::new(
        ExponentialBackoff::from(
            backon::ExponentialBuilder::default()
                .with_min_delay(Duration::from_millis(500))
                .with_max_delay(Duration::from_secs(5))
                .with_factor(2.0)
                .without_max_times()
                .with_jitter(),
        ),
        Duration::from_secs(60),
    )
}

/// The events of a watch as its consumers want them: its errors logged and skipped (the watch
/// retries on its own: [`crate::api_health::rewatching`]), its re-lists logged, and — with
/// [`WatchEvents::relists_whole`] — the objects of a (re-)list held back until its `InitDone`.
///
/// Every watch of the controllers goes through it: the controller crate's caches and triggers,
/// the GitOpsCluster and add-on controllers, the report aggregator.
pub trait WatchEvents<K>: Stream<Item = watcher::Result<Event<K>>> + Sized {
    /// The events with each (re-)list delivered whole: its `InitApply`s are held back and come
    /// just before its `InitDone`. For a watch that feeds a reflector store which is read by
    /// what its events trigger: the reflector swaps its store only at `InitDone`, so a
    /// reconcile triggered by an `InitApply` would read the object as it was before the re-list
    /// (after a `410 Gone` or an outage: the old Application without its deletionTimestamp) and
    /// find nothing to do, and a fingerprint would hide the change for good. Seen on the real
    /// env as Applications stuck in deletion.
    ///
    /// `resource` names the watch in the logs (`resource` field).
    fn relists_whole(self, resource: &'static str) -> Events<Self, K> {
        Events::new(self, resource, true)
    }

    /// The events as they come (a list's objects as soon as they are read): for a consumer that
    /// keeps no reflector store, or handles a list itself (`Init` … `InitDone`).
    fn lists_as_they_come(self, resource: &'static str) -> Events<Self, K> {
        Events::new(self, resource, false)
    }
}

impl<K, S: Stream<Item = watcher::Result<Event<K>>>> WatchEvents<K> for S {}

/// See [`WatchEvents`]. Ends with the watch.
#[must_use = "streams do nothing unless polled"]
pub struct Events<S, K> {
    stream: Pin<Box<S>>,
    resource: &'static str,
    /// Added as the `controller` field of the logs.
    controller: Option<&'static str>,
    /// Whether a (re-)list's objects are held back until its `InitDone`.
    whole: bool,
    /// The (re-)list under way.
    listing: Option<Listing<K>>,
    /// Whether a list completed before.
    listed_before: bool,
    /// A completed list's held-back objects, then its `InitDone`, to deliver before reading on.
    ready: VecDeque<Event<K>>,
}

struct Listing<K> {
    started: Instant,
    objects: usize,
    held: Vec<Event<K>>,
}

// The stream is boxed and the rest is never pinned: moving an `Events` moves no pinned data.
impl<S, K> Unpin for Events<S, K> {}

impl<S, K> Events<S, K> {
    fn new(stream: S, resource: &'static str, whole: bool) -> Self {
        Events {
            stream: Box::pin(stream),
            resource,
            controller: None,
            whole,
            listing: None,
            listed_before: false,
            ready: VecDeque::new(),
        }
    }

    /// Logs with a `controller` field too (the gitops controllers': `appset-report`, …).
    pub fn controller(mut self, controller: &'static str) -> Self {
        self.controller = Some(controller);
        self
    }

    /// The objects added or changed (a list's and the watch's): what kube-runtime's
    /// `Controller::for_stream` reconciles.
    pub fn applied_objects(self) -> impl Stream<Item = K>
    where
        S: Stream<Item = watcher::Result<Event<K>>>,
    {
        self.filter_map(|ev| {
            futures::future::ready(match ev {
                Event::Apply(o) | Event::InitApply(o) => Some(o),
                Event::Init | Event::InitDone | Event::Delete(_) => None,
            })
        })
    }

    /// The objects added, changed or deleted: what triggers kube-runtime's
    /// `Controller::owns_stream` and `Controller::watches_stream`.
    pub fn touched_objects(self) -> impl Stream<Item = K>
    where
        S: Stream<Item = watcher::Result<Event<K>>>,
    {
        self.filter_map(|ev| {
            futures::future::ready(match ev {
                Event::Apply(o) | Event::InitApply(o) | Event::Delete(o) => Some(o),
                Event::Init | Event::InitDone => None,
            })
        })
    }

    fn log_error(&self, e: &watcher::Error) {
        let resource = self.resource;
        match self.controller {
            Some(controller) => {
                tracing::warn!(controller, resource, error = %e, "watch error; retrying")
            }
            None => tracing::warn!(error = %e, resource, "watch error; retrying"),
        }
    }

    fn log_relist(&self, listing: &Listing<K>) {
        let (resource, objects) = (self.resource, listing.objects);
        let took_ms = listing.started.elapsed().as_millis() as u64;
        match self.controller {
            Some(controller) => {
                tracing::info!(controller, resource, objects, took_ms, "re-listed")
            }
            None => tracing::info!(resource, objects, took_ms, "re-listed"),
        }
    }
}

impl<S, K> Stream for Events<S, K>
where
    S: Stream<Item = watcher::Result<Event<K>>>,
{
    type Item = Event<K>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Event<K>>> {
        let this = self.get_mut();
        loop {
            if let Some(ev) = this.ready.pop_front() {
                return Poll::Ready(Some(ev));
            }
            let ev = match std::task::ready!(this.stream.as_mut().poll_next(cx)) {
                None => return Poll::Ready(None),
                Some(Err(e)) => {
                    this.log_error(&e);
                    continue;
                }
                Some(Ok(ev)) => ev,
            };
            match ev {
                // a list started afresh drops what an unfinished one held, as the reflector
                // drops its unfinished buffer
                Event::Init => {
                    this.listing = Some(Listing {
                        started: Instant::now(),
                        objects: 0,
                        held: Vec::new(),
                    });
                }
                Event::InitApply(obj) => {
                    if let Some(listing) = this.listing.as_mut() {
                        listing.objects += 1;
                        if this.whole {
                            listing.held.push(Event::InitApply(obj));
                            continue;
                        }
                    }
                    return Poll::Ready(Some(Event::InitApply(obj)));
                }
                Event::InitDone => {
                    if let Some(listing) = this.listing.take() {
                        if std::mem::replace(&mut this.listed_before, true) {
                            this.log_relist(&listing);
                        }
                        this.ready.extend(listing.held);
                    } else {
                        this.listed_before = true;
                    }
                    this.ready.push_back(Event::InitDone);
                    continue;
                }
                Event::Apply(_) | Event::Delete(_) => {}
            }
            return Poll::Ready(Some(ev));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::WatchStreamExt;
    use kube::runtime::reflector::{self, ObjectRef};

    fn cm(name: &str, rv: &str) -> ConfigMap {
        let mut c = ConfigMap::default();
        c.metadata.name = Some(name.into());
        c.metadata.namespace = Some("ns".into());
        c.metadata.resource_version = Some(rv.into());
        c
    }

    fn gone() -> watcher::Error {
        watcher::Error::WatchError(Box::new(
            kube::core::Status::failure("too old", "Expired").with_code(410),
        ))
    }

    /// An event as `"Apply a@9"`.
    fn show(ev: &Event<ConfigMap>) -> String {
        let o = |c: &ConfigMap| {
            let m = &c.metadata;
            format!(
                "{}@{}",
                m.name.as_deref().unwrap_or_default(),
                m.resource_version.as_deref().unwrap_or_default()
            )
        };
        match ev {
            Event::Init => "Init".into(),
            Event::InitApply(c) => format!("InitApply {}", o(c)),
            Event::InitDone => "InitDone".into(),
            Event::Apply(c) => format!("Apply {}", o(c)),
            Event::Delete(c) => format!("Delete {}", o(c)),
        }
    }

    /// A first list, changes, an error, a re-list after a `410 Gone` (`a` changed meanwhile, `b`
    /// is new, `c` went), a change.
    fn script() -> Vec<watcher::Result<Event<ConfigMap>>> {
        vec![
            Ok(Event::Init),
            Ok(Event::InitApply(cm("a", "1"))),
            Ok(Event::InitApply(cm("c", "2"))),
            Ok(Event::InitDone),
            Ok(Event::Apply(cm("a", "3"))),
            Ok(Event::Delete(cm("a", "3"))),
            Ok(Event::Apply(cm("a", "4"))),
            Err(gone()),
            Ok(Event::Init),
            Ok(Event::InitApply(cm("a", "7"))),
            Err(gone()),
            Ok(Event::InitApply(cm("b", "8"))),
            Ok(Event::InitDone),
            Ok(Event::Apply(cm("a", "9"))),
        ]
    }

    /// Each list's objects come just before its `InitDone`, after it was read from the watch;
    /// other events pass as they come; errors are skipped; the end of the watch ends the stream.
    #[tokio::test]
    async fn relists_come_whole_and_the_rest_as_it_comes() {
        let read = Arc::new(AtomicUsize::new(0));
        let counted = read.clone();
        let watch = futures::stream::iter(script()).inspect(move |_| {
            counted.fetch_add(1, Ordering::SeqCst);
        });
        // each event with how many items of the script had been read when it came
        let events: Vec<(String, usize)> = watch
            .relists_whole("configmaps")
            .map(|ev| (show(&ev), read.load(Ordering::SeqCst)))
            .collect()
            .await;
        let at = |e: &str, n: usize| (e.to_string(), n);
        assert_eq!(
            events,
            [
                at("Init", 1),
                // both held back until the InitDone, the 4th item
                at("InitApply a@1", 4),
                at("InitApply c@2", 4),
                at("InitDone", 4),
                at("Apply a@3", 5),
                at("Delete a@3", 6),
                at("Apply a@4", 7),
                // the error (8th) skipped
                at("Init", 9),
                at("InitApply a@7", 13),
                at("InitApply b@8", 13),
                at("InitDone", 13),
                at("Apply a@9", 14),
            ]
        );
    }

    /// `lists_as_they_come` passes every event on as it comes, errors skipped.
    #[tokio::test]
    async fn lists_as_they_come_passes_lists_through() {
        let events: Vec<String> = futures::stream::iter(script())
            .lists_as_they_come("configmaps")
            .controller("test")
            .map(|ev| show(&ev))
            .collect()
            .await;
        let expected: Vec<String> = script().iter().flatten().map(show).collect();
        assert_eq!(events, expected);
    }

    /// A list that starts afresh before it completed (a watch restarted after an outage) drops
    /// what the unfinished one held, as the reflector does.
    #[tokio::test]
    async fn an_unfinished_list_is_dropped_when_a_new_one_starts() {
        let script = vec![
            Ok(Event::Init),
            Ok(Event::InitApply(cm("x", "1"))),
            Err(gone()),
            Ok(Event::Init),
            Ok(Event::InitApply(cm("y", "2"))),
            Ok(Event::InitDone),
        ];
        let events: Vec<String> = futures::stream::iter(script)
            .relists_whole("configmaps")
            .map(|ev| show(&ev))
            .collect()
            .await;
        assert_eq!(events, ["Init", "Init", "InitApply y@2", "InitDone"]);
    }

    /// Every object event of a re-list is delivered only once the reflector's store holds the
    /// re-listed object (what a reconcile it triggers reads).
    #[tokio::test]
    async fn relisted_objects_come_after_the_store_has_them() {
        let (store, writer) = reflector::store::<ConfigMap>();
        let mut events = std::pin::pin!(
            futures::stream::iter(script())
                .reflect(writer)
                .relists_whole("configmaps")
        );
        let mut handled = Vec::new();
        while let Some(ev) = events.next().await {
            if let Event::InitApply(o) | Event::Apply(o) = ev {
                let in_store = store
                    .get(&ObjectRef::from_obj(&o))
                    .and_then(|c| c.metadata.resource_version.clone());
                handled.push((show(&Event::Apply(o)), in_store));
            }
        }
        let s = |x: &str| x.to_string();
        assert_eq!(
            handled,
            [
                (s("Apply a@1"), Some(s("1"))),
                (s("Apply c@2"), Some(s("2"))),
                (s("Apply a@3"), Some(s("3"))),
                (s("Apply a@4"), Some(s("4"))),
                (s("Apply a@7"), Some(s("7"))),
                (s("Apply b@8"), Some(s("8"))),
                (s("Apply a@9"), Some(s("9"))),
            ]
        );
    }

    /// Logs with the fields operators grep for: one `re-listed` per re-list after the first
    /// (not for the first list), one `watch error; retrying` per error.
    #[tokio::test(flavor = "current_thread")]
    async fn logs_re_lists_and_errors() {
        let logged = Logged::default();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .without_time()
            .with_target(false)
            .with_writer(logged.clone())
            .finish();
        let _guard = tracing::subscriber::set_default(subscriber);
        let _: Vec<_> = futures::stream::iter(script())
            .relists_whole("configmaps")
            .collect()
            .await;
        let _: Vec<_> = futures::stream::iter(script())
            .lists_as_they_come("configmaps")
            .controller("appset-report")
            .collect()
            .await;
        // took_ms varies: cut off
        let text = logged.text();
        let lines: Vec<&str> = text
            .lines()
            .map(|l| l.split(" took_ms=").next().unwrap_or_default())
            .collect();
        let error = "error returned by apiserver during watch: too old: Expired";
        let plain = format!(" WARN watch error; retrying error={error} resource=\"configmaps\"");
        let with_controller = format!(
            " WARN watch error; retrying controller=\"appset-report\" resource=\"configmaps\" error={error}"
        );
        assert_eq!(
            lines,
            [
                plain.as_str(),
                &plain,
                " INFO re-listed resource=\"configmaps\" objects=2",
                &with_controller,
                &with_controller,
                " INFO re-listed controller=\"appset-report\" resource=\"configmaps\" objects=2",
            ],
            "{text}"
        );
        assert!(text.contains(" took_ms="), "{text}");
    }

    /// What a test subscriber wrote.
    #[derive(Clone, Default)]
    struct Logged(Arc<std::sync::Mutex<Vec<u8>>>);

    impl Logged {
        fn text(&self) -> String {
            String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
        }
    }

    impl std::io::Write for Logged {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Logged {
        type Writer = Logged;
        fn make_writer(&'a self) -> Logged {
            self.clone()
        }
    }

    #[test]
    fn retries_within_ten_seconds_however_long_the_outage() {
        let mut b = backoff();
        let delays: Vec<Duration> = (0..20).map(|_| b.next().expect("never gives up")).collect();
        assert!(delays[0] < Duration::from_secs(1), "{delays:?}");
        assert!(
            delays.iter().all(|d| *d <= Duration::from_secs(10)),
            "{delays:?}"
        );
        b.reset();
        assert!(b.next().unwrap() < Duration::from_secs(1));
    }
}
