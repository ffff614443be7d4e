//! Whether the API server answers: what the retries of the watches and controllers wait for.
//!
//! During an outage of the API server every watch and every failed reconcile backs off on its
//! own, and exponential backoff grows with the outage: once the API server is back, a watch still
//! sleeps up to its cap before it re-lists, and an object whose write failed four times sleeps
//! 8 s before its next try (on the real env: 13.9 s from the API server's return to the last
//! deletion handled, after a 10 s outage). An [`ApiHealth`] learns of an outage from the errors
//! of requests ([`ApiHealth::report`]: connection refused or reset, 502/503/504), then probes
//! every [`PROBE_INTERVAL`] with a cheap request of the component's own (e.g. a LIST of one
//! object of the resource it needs) until the API server answers it again, and announces the
//! recovery: a waiting watch ([`retrying`]) re-lists at once, and the controllers retry the
//! objects that failed meanwhile, their backoff reset ([`ApiHealth::recoveries`]). A probe that
//! succeeds at once (one connection reset, not an outage) announces nothing.
//!
//! Why not `/readyz`: a restarted kube-apiserver serves lists and writes several seconds before
//! its readiness passes (on the real env `poststarthook/rbac/bootstrap-roles` held `/readyz` at
//! 500 for ~6 s after the first successful LIST). A probe answered 401/403 counts as an answer
//! (the API server is there; the identity's permissions are not this module's business).

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt};
use kube::runtime::utils::Backoff;
use kube::runtime::watcher;
use tokio::sync::watch;

/// How often `/readyz` is probed while the API server does not answer.
pub const PROBE_INTERVAL: Duration = Duration::from_millis(250);
/// How long one probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Shared knowledge of the API server's availability (see the module docs). Cheap to clone.
#[derive(Clone)]
pub struct ApiHealth {
    inner: Arc<Inner>,
}

struct Inner {
    client: kube::Client,
    /// The path of the probe's GET.
    probe: String,
    probing: AtomicBool,
    down: AtomicBool,
    /// The number of outages that ended.
    recoveries: watch::Sender<u64>,
}

impl std::fmt::Debug for ApiHealth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiHealth")
            .field("down", &self.is_down())
            .field("recoveries", &self.mark())
            .finish()
    }
}

/// Whether `err` says the API server is not there (as opposed to an answer about the request).
pub fn is_unavailable(err: &kube::Error) -> bool {
    match err {
        kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_) => true,
        kube::Error::Api(s) => matches!(s.code, 502..=504),
        _ => false,
    }
}

/// The same for a watch's error.
pub fn is_watch_unavailable(err: &watcher::Error) -> bool {
    match err {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => is_unavailable(e),
        watcher::Error::WatchError(s) => matches!(s.code, 502..=504),
        _ => false,
    }
}

impl ApiHealth {
    /// `probe` is the path of a cheap GET the component's identity may make, answered once the
    /// API server serves what the component needs, e.g.
    /// `/apis/argoproj.io/v1alpha1/applications?limit=1` (one object, from etcd).
    pub fn new(client: kube::Client, probe: impl Into<String>) -> Self {
        ApiHealth {
            inner: Arc::new(Inner {
                client,
                probe: probe.into(),
                probing: AtomicBool::new(false),
                down: AtomicBool::new(false),
                recoveries: watch::channel(0).0,
            }),
        }
    }

    /// Tells of a failed request: when `err` says the API server is not there, probing starts
    /// (unless it runs already). Needs a Tokio runtime.
    pub fn report(&self, err: &kube::Error) {
        if is_unavailable(err) {
            self.suspect();
        }
    }

    /// [`ApiHealth::report`] for a watch's error.
    pub fn report_watch(&self, err: &watcher::Error) {
        if is_watch_unavailable(err) {
            self.suspect();
        }
    }

    /// Whether an outage is under way (a probe failed and none succeeded since).
    pub fn is_down(&self) -> bool {
        self.inner.down.load(Ordering::SeqCst)
    }

    /// The number of outages that ended so far: [`ApiHealth::recovered_since`] of it resolves
    /// at the end of the next one.
    pub fn mark(&self) -> u64 {
        *self.inner.recoveries.borrow()
    }

    /// Resolves when an outage ends after `mark` was taken.
    pub async fn recovered_since(&self, mark: u64) {
        let mut rx = self.inner.recoveries.subscribe();
        // the sender lives as long as `self`
        let _ = rx.wait_for(|n| *n > mark).await;
    }

    /// Changes once per ended outage.
    pub fn recoveries(&self) -> watch::Receiver<u64> {
        self.inner.recoveries.subscribe()
    }

    /// One `()` per ended outage: for kube-runtime's `Controller::reconcile_all_on`, so that a
    /// controller reconciles everything at once instead of waiting for its retries' backoff.
    pub fn recovered(&self) -> impl Stream<Item = ()> + Send + 'static {
        futures::stream::unfold(self.recoveries(), |mut rx| async move {
            rx.changed().await.ok()?;
            Some(((), rx))
        })
    }

    /// Starts probing unless it runs already (a request failed in a way that does not tell
    /// whether the API server is there).
    pub fn suspect(&self) {
        if self.inner.probing.swap(true, Ordering::SeqCst) {
            return;
        }
        let weak = Arc::downgrade(&self.inner);
        tokio::spawn(probe(weak));
    }
}

/// Probes until the API server answers; announces a recovery when a probe failed first. Stops
/// when every [`ApiHealth`] is gone.
async fn probe(weak: Weak<Inner>) {
    let mut down_since: Option<Instant> = None;
    loop {
        let Some(inner) = weak.upgrade() else { return };
        if answers(&inner.client, &inner.probe).await {
            if let Some(since) = down_since {
                inner.down.store(false, Ordering::SeqCst);
                inner.recoveries.send_modify(|n| *n += 1);
                tracing::info!(
                    down_for = ?since.elapsed(),
                    "the API server answers again; retrying what failed meanwhile"
                );
            }
            inner.probing.store(false, Ordering::SeqCst);
            return;
        }
        if down_since.is_none() {
            down_since = Some(Instant::now());
            inner.down.store(true, Ordering::SeqCst);
            tracing::warn!(
                every = ?PROBE_INTERVAL,
                probe = %inner.probe,
                "the API server does not answer; probing until it does"
            );
        }
        drop(inner);
        tokio::time::sleep(PROBE_INTERVAL).await;
    }
}

/// The probe answered 2xx, or 401/403 (it answers, but not this identity's question).
async fn answers(client: &kube::Client, probe: &str) -> bool {
    let req = match http::Request::get(probe).body(Vec::new()) {
        Ok(r) => r,
        Err(_) => return true,
    };
    match tokio::time::timeout(PROBE_TIMEOUT, client.request_text(req)).await {
        Ok(Ok(_)) => true,
        Ok(Err(kube::Error::Api(s))) => matches!(s.code, 401 | 403),
        _ => false,
    }
}

/// A watch stream that, after an error, waits before polling `stream` again: for the next
/// delay of [`crate::watch::backoff`], or until `health` announces the end of an outage,
/// whichever comes first (the error is reported to `health` and passed on); a `410 Gone` is
/// retried at once (a re-list, as client-go's reflector does). What `WatchStreamExt::backoff`
/// does, plus the wake-up. [`rewatching`] also starts the watch afresh after an outage.
pub fn retrying<S, K>(stream: S, health: ApiHealth) -> impl Stream<Item = watcher::Result<K>> + Send
where
    S: Stream<Item = watcher::Result<K>> + Send + 'static,
    K: Send + 'static,
{
    retry_stream(Box::pin(stream), None, health)
}

/// `watcher(api, config)` under [`retrying`]; when an outage ended while it waited, the watch
/// is started afresh with its list read from etcd (`resourceVersion` unset) instead of from the
/// API server's watch cache. A restarted API server answers such a list seconds before its
/// watch cache is filled, and until then both a list with `resourceVersion=0` and a watch from
/// the old resourceVersion wait (the latter only to end in `410 Gone`): on the real env, 6 s
/// with the machine loaded.
pub fn rewatching<K>(
    api: kube::Api<K>,
    config: watcher::Config,
    health: ApiHealth,
) -> impl Stream<Item = watcher::Result<watcher::Event<K>>> + Send
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let fresh_config = watcher::Config {
        list_semantic: watcher::ListSemantic::MostRecent,
        ..config.clone()
    };
    let first = Box::pin(watcher::watcher(api.clone(), config));
    let fresh = move || -> BoxedWatch<watcher::Event<K>> {
        Box::pin(watcher::watcher(api.clone(), fresh_config.clone()))
    };
    retry_stream(first, Some(Box::new(fresh)), health)
}

type BoxedWatch<K> = Pin<Box<dyn Stream<Item = watcher::Result<K>> + Send>>;

fn retry_stream<K: Send + 'static>(
    stream: BoxedWatch<K>,
    fresh: Option<Box<dyn FnMut() -> BoxedWatch<K> + Send>>,
    health: ApiHealth,
) -> impl Stream<Item = watcher::Result<K>> + Send {
    struct State<K> {
        stream: BoxedWatch<K>,
        fresh: Option<Box<dyn FnMut() -> BoxedWatch<K> + Send>>,
        backoff: Box<dyn Backoff + Send>,
        health: ApiHealth,
        /// After an error: the recovery mark taken then (cleared by the next success).
        failing: Option<u64>,
        /// Whether to wait before polling the stream again.
        wait: bool,
    }
    impl<K> State<K> {
        /// The outage ended: start afresh (when the watch can be) with the backoff reset.
        fn recovered(&mut self) {
            self.backoff.reset();
            if let Some(fresh) = self.fresh.as_mut() {
                self.stream = fresh();
            }
            self.failing = Some(self.health.mark());
        }
    }
    let state = State {
        stream,
        fresh,
        backoff: Box::new(crate::watch::backoff()),
        health,
        failing: None,
        wait: false,
    };
    futures::stream::unfold(state, |mut st| async move {
        if std::mem::take(&mut st.wait)
            && let Some(mark) = st.failing
        {
            let delay = st.backoff.next().unwrap_or(Duration::from_secs(5));
            let recovered = tokio::select! {
                _ = tokio::time::sleep(delay) => st.health.mark() > mark,
                _ = st.health.recovered_since(mark) => true,
            };
            if recovered {
                st.recovered();
            }
        }
        let item = loop {
            match st.failing {
                // A request of a failing watch may hang on an API server that is starting (it
                // accepts connections before it can serve): the end of the outage replaces it.
                Some(mark) if st.fresh.is_some() => tokio::select! {
                    item = st.stream.next() => break item?,
                    _ = st.health.recovered_since(mark) => st.recovered(),
                },
                _ => break st.stream.next().await?,
            }
        };
        match &item {
            Ok(_) => {
                st.backoff.reset();
                st.failing = None;
            }
            // the resource version is gone (compacted, or an API server restarted with an
            // empty watch cache): re-list at once, as client-go's reflector does
            Err(watcher::Error::WatchError(s)) if s.code == 410 => {}
            Err(e) => {
                st.failing = Some(st.health.mark());
                st.wait = true;
                st.health.report_watch(e);
            }
        }
        Some((item, st))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::watcher::Event;
    use std::sync::atomic::AtomicBool;

    /// A client whose every request is refused until `up` is set, then answered 200.
    fn client(up: Arc<AtomicBool>) -> kube::Client {
        let svc = tower::service_fn(move |_req: http::Request<kube::client::Body>| {
            let up = up.load(Ordering::SeqCst);
            async move {
                if up {
                    Ok(http::Response::new(kube::client::Body::from(
                        b"{}".to_vec(),
                    )))
                } else {
                    Err(std::io::Error::from(std::io::ErrorKind::ConnectionRefused))
                }
            }
        });
        kube::Client::new(svc, "default")
    }

    fn refused() -> watcher::Error {
        watcher::Error::InitialListFailed(kube::Error::Service("connection refused".into()))
    }

    /// A watch that failed four times in a row would wait 7.5–15 s before its fifth try; the end
    /// of the outage wakes it instead, and the end is announced once.
    #[tokio::test(start_paused = true)]
    async fn the_end_of_an_outage_wakes_a_waiting_watch() {
        let up = Arc::new(AtomicBool::new(false));
        let health = ApiHealth::new(client(up.clone()), "/probe");
        let recoveries = health.recoveries();
        let items: Vec<watcher::Result<Event<ConfigMap>>> = vec![
            Err(refused()),
            Err(refused()),
            Err(refused()),
            Err(refused()),
            Ok(Event::Init),
        ];
        let stream = retrying(futures::stream::iter(items), health.clone());
        let mut stream = std::pin::pin!(stream);
        let t0 = tokio::time::Instant::now();
        {
            let up = up.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(1200)).await;
                up.store(true, Ordering::SeqCst);
            });
        }
        let mut errors = 0;
        while let Some(item) = stream.next().await {
            match item {
                Err(_) => {
                    errors += 1;
                    if errors == 1 {
                        tokio::task::yield_now().await;
                    }
                }
                Ok(_) => break,
            }
        }
        assert_eq!(errors, 4);
        let took = t0.elapsed();
        assert!(
            took < Duration::from_millis(7500),
            "the watch waited out its backoff: {took:?}"
        );
        assert!(recoveries.has_changed().unwrap(), "no recovery announced");
        assert_eq!(health.mark(), 1);
        assert!(!health.is_down());
    }

    /// A request that hangs on a starting API server (it accepts connections before it can
    /// serve) is replaced by a fresh watch when the outage ends.
    #[tokio::test(start_paused = true)]
    async fn the_end_of_an_outage_replaces_a_hanging_request() {
        let up = Arc::new(AtomicBool::new(false));
        let health = ApiHealth::new(client(up.clone()), "/probe");
        let hanging: BoxedWatch<Event<ConfigMap>> =
            Box::pin(futures::stream::iter(vec![Err(refused())]).chain(futures::stream::pending()));
        let fresh = || -> BoxedWatch<Event<ConfigMap>> {
            Box::pin(futures::stream::iter(vec![Ok(Event::Init)]))
        };
        let stream = retry_stream(hanging, Some(Box::new(fresh)), health.clone());
        let mut stream = std::pin::pin!(stream);
        assert!(stream.next().await.unwrap().is_err());
        {
            let up = up.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs(30)).await;
                up.store(true, Ordering::SeqCst);
            });
        }
        let t0 = tokio::time::Instant::now();
        let next = tokio::time::timeout(Duration::from_secs(60), stream.next()).await;
        assert!(
            matches!(next, Ok(Some(Ok(Event::Init)))),
            "still hanging: {next:?}"
        );
        assert!(t0.elapsed() >= Duration::from_secs(30));
    }

    /// One failed request while the API server answers (a reset connection) is no outage.
    #[tokio::test(start_paused = true)]
    async fn a_blip_announces_nothing() {
        let health = ApiHealth::new(client(Arc::new(AtomicBool::new(true))), "/probe");
        health.report(&kube::Error::Service("connection reset".into()));
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(health.mark(), 0);
        assert!(!health.is_down());
        // an answer about the request itself does not even probe
        health.report(&status(409));
        assert!(!health.inner.probing.load(Ordering::SeqCst));
    }

    fn status(code: u16) -> kube::Error {
        kube::Error::Api(Box::new(
            kube::core::Status::failure("x", "y").with_code(code),
        ))
    }

    #[test]
    fn what_counts_as_unavailable() {
        assert!(is_unavailable(&status(503)));
        assert!(is_unavailable(&status(504)));
        assert!(!is_unavailable(&status(500)));
        assert!(!is_unavailable(&status(403)));
        assert!(!is_unavailable(&status(409)));
        assert!(is_unavailable(&kube::Error::Service(
            "connection refused".into()
        )));
        assert!(is_watch_unavailable(&watcher::Error::InitialListFailed(
            kube::Error::Service("connection refused".into())
        )));
        assert!(!is_watch_unavailable(&watcher::Error::InitialListFailed(
            status(403)
        )));
    }
}
