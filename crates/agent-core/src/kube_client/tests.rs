use std::sync::atomic::AtomicUsize;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::WatchParams;

use super::*;
use crate::rest_metrics::{LatencyLabels, ResultLabels};

/// A fake API server: a ConfigMap `cm` that answers 503 to the first `fail` GETs, a ConfigMap
/// `gone` that does not exist, and an empty watch. Returns its `host:port`.
async fn api_server(fail: usize) -> String {
    use axum::routing::get;
    let left = Arc::new(AtomicUsize::new(fail));
    let cm = move || {
        let left = left.clone();
        async move {
            if left
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
            {
                return (http::StatusCode::SERVICE_UNAVAILABLE, String::new());
            }
            (
                http::StatusCode::OK,
                serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "cm", "namespace": "ns"}})
                .to_string(),
            )
        }
    };
    let list = |q: axum::extract::Query<std::collections::HashMap<String, String>>| async move {
        if q.get("watch").map(String::as_str) == Some("true") {
            // a watch that ends at once (no events)
            return (http::StatusCode::OK, String::new());
        }
        (
            http::StatusCode::OK,
            serde_json::json!({"apiVersion": "v1", "kind": "ConfigMapList",
                "metadata": {"resourceVersion": "1"}, "items": []})
            .to_string(),
        )
    };
    let app = axum::Router::new()
        .route("/api/v1/namespaces/ns/configmaps/cm", get(cm))
        .route(
            "/api/v1/namespaces/ns/configmaps/gone",
            get(|| async {
                (
                    http::StatusCode::NOT_FOUND,
                    serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                        "reason": "NotFound", "code": 404, "message": "not found"})
                    .to_string(),
                )
            }),
        )
        .route("/api/v1/namespaces/ns/configmaps", get(list));
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(l, app).await });
    addr.to_string()
}

fn client(host: &str, limits: Option<KubeLimits>) -> kube::Client {
    let config = kube::Config::new(format!("http://{host}").parse().unwrap());
    with_limits(config, limits).unwrap()
}

fn requests(host: &str, code: &str, method: &str) -> u64 {
    global()
        .requests
        .get_or_create(&ResultLabels {
            code: code.into(),
            host: host.into(),
            method: method.into(),
        })
        .get()
}

fn retries(host: &str, code: &str) -> u64 {
    global()
        .retries
        .get_or_create(&ResultLabels {
            code: code.into(),
            host: host.into(),
            method: "GET".into(),
        })
        .get()
}

/// (count, sum) of a histogram of the families.
fn histogram(h: &crate::rest_metrics::RestClientMetrics, which: &str, host: &str) -> (u64, f64) {
    let fam = match which {
        "duration" => &h.request_duration,
        _ => &h.rate_limiter_duration,
    };
    let labels = LatencyLabels {
        host: host.into(),
        verb: "GET".into(),
    };
    let mut reg = argocd_pull_ops::metrics::Registry::default();
    reg.register("h", "h", fam.clone());
    let body = argocd_pull_ops::metrics::render(&reg);
    let pick = |suffix: &str| {
        body.lines()
            .find(|l| {
                l.starts_with(&format!("h_{suffix}{{"))
                    && l.contains(&format!("host=\"{}\"", labels.host))
            })
            .and_then(|l| l.rsplit(' ').next())
            .map_or(0.0, |v| v.parse::<f64>().unwrap())
    };
    (pick("count") as u64, pick("sum"))
}

#[tokio::test]
async fn every_attempt_is_counted_and_a_call_timed_once() {
    let host = api_server(2).await;
    let api: Api<ConfigMap> = Api::namespaced(client(&host, None), "ns");
    // two 503s, kube's retry, then the answer
    api.get("cm").await.unwrap();
    assert_eq!(requests(&host, "503", "GET"), 2);
    assert_eq!(requests(&host, "200", "GET"), 1);
    // the retries: the second 503 and the 200
    assert_eq!(retries(&host, "503"), 1);
    assert_eq!(retries(&host, "200"), 1);
    assert_eq!(histogram(global(), "duration", &host).0, 1, "one call");
    // a 404 is an answer like any other
    assert!(api.get_opt("gone").await.unwrap().is_none());
    assert_eq!(requests(&host, "404", "GET"), 1);
    assert_eq!(histogram(global(), "duration", &host).0, 2);
    // no limit: the rate limiter is never asked
    assert_eq!(histogram(global(), "limiter", &host).0, 0);
}

#[tokio::test]
async fn an_answerless_request_is_an_error_code() {
    // nothing listens there
    let host = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let api: Api<ConfigMap> = Api::namespaced(client(&host, None), "ns");
    assert!(api.get("cm").await.is_err());
    assert_eq!(requests(&host, "<error>", "GET"), 1);
    assert_eq!(histogram(global(), "duration", &host).0, 1);
}

#[tokio::test]
async fn the_rate_limit_spaces_requests_and_spares_a_watchs_first_attempt() {
    let host = api_server(0).await;
    let limits = KubeLimits {
        qps: 20.0,
        burst: 1,
    };
    let api: Api<ConfigMap> = Api::namespaced(client(&host, Some(limits)), "ns");
    let t0 = std::time::Instant::now();
    let gets = (0..5).map(|_| api.get("cm"));
    for r in futures::future::join_all(gets).await {
        r.unwrap();
    }
    // one token at once, then one each 50 ms: the fifth goes 200 ms after the first
    assert!(
        t0.elapsed() >= Duration::from_millis(190),
        "{:?}",
        t0.elapsed()
    );
    let (waits, waited) = histogram(global(), "limiter", &host);
    assert_eq!(waits, 5, "every request asked the limiter");
    // 0 + 50 + 100 + 150 + 200 ms when asked at once
    assert!(waited >= 0.2, "waited {waited} s");
    // a watch's first attempt does not ask it
    let mut w = std::pin::pin!(api.watch(&WatchParams::default(), "0").await.unwrap());
    use futures::StreamExt;
    while w.next().await.is_some() {}
    assert_eq!(histogram(global(), "limiter", &host).0, 5);
    assert_eq!(requests(&host, "200", "GET"), 6, "the watch is counted");
    assert_eq!(
        histogram(global(), "duration", &host).0,
        5,
        "a watch is not timed"
    );
}

#[tokio::test(start_paused = true)]
async fn the_bucket_serves_waiters_in_turn_and_refills_up_to_its_burst() {
    let b = TokenBucket::new(KubeLimits { qps: 2.0, burst: 3 });
    let now = Instant::now();
    // the burst at once
    for _ in 0..3 {
        assert_eq!(b.reserve(now), Duration::ZERO);
    }
    // then one each 500 ms, in the order asked
    assert_eq!(b.reserve(now), Duration::from_millis(500));
    assert_eq!(b.reserve(now), Duration::from_millis(1000));
    // long idle: back to the burst, not more
    let later = now + Duration::from_secs(60);
    for _ in 0..3 {
        assert_eq!(b.reserve(later), Duration::ZERO);
    }
    assert_eq!(b.reserve(later), Duration::from_millis(500));
}

#[tokio::test(start_paused = true)]
async fn a_waiter_that_goes_away_gives_its_token_back() {
    let b = TokenBucket::new(KubeLimits { qps: 1.0, burst: 1 });
    b.wait().await;
    // the next one waits 1 s; give up before
    let gave_up = tokio::time::timeout(Duration::from_millis(100), b.wait()).await;
    assert!(gave_up.is_err());
    // its reservation is returned: the next token is due 1 s after the first, not 2 s
    let t0 = Instant::now();
    b.wait().await;
    assert!(
        t0.elapsed() <= Duration::from_millis(950),
        "{:?}",
        t0.elapsed()
    );
}

#[test]
fn lease_requests_have_a_bucket_of_their_own() {
    let l = Limiter::new(KubeLimits { qps: 1.0, burst: 1 });
    let now = Instant::now();
    assert_eq!(
        l.bucket("/api/v1/namespaces/a/secrets").reserve(now),
        Duration::ZERO
    );
    assert_eq!(
        l.bucket("/apis/coordination.k8s.io/v1/namespaces/a/leases/x")
            .reserve(now),
        Duration::ZERO,
        "a burst of other requests does not delay a lease renewal"
    );
    assert!(
        !l.bucket("/apis/argoproj.io/v1alpha1/applications")
            .reserve(now)
            .is_zero()
    );
}

#[test]
fn what_client_go_does_with_each_request() {
    let r = |uri: &str| Request::get(uri).body(Body::empty()).unwrap();
    assert_eq!(kind(&r("/api/v1/namespaces/a/configmaps/x")), Kind::Call);
    assert_eq!(
        kind(&r(
            "/apis/argoproj.io/v1alpha1/applications?watch=true&resourceVersion=1"
        )),
        Kind::Watch
    );
    assert_eq!(
        kind(&r(
            "/api/v1/namespaces/a/pods/p/log?container=c&follow=true"
        )),
        Kind::Stream
    );
    let mut up = r("/api/v1/namespaces/a/pods/p/exec?command=sh");
    up.headers_mut()
        .insert(http::header::UPGRADE, "websocket".parse().unwrap());
    assert_eq!(kind(&up), Kind::Upgrade);
}
