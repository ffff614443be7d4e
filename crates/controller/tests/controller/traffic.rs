//! The API traffic of one reconcile, pinned: which requests, in what order, how many. An extra
//! write, GET or list shows up here as a diff of the request log.

use argocd_pull_api::ocm::work::ManifestWork;
use kube::ResourceExt;
use serde_json::json;

use crate::support::*;

/// A new Application with a sync `operation`: the propagation controller creates its
/// ManifestWork, strips the operation from the hub Application (one merge patch), then brings
/// the work in line with the operation-less Application (one patch). Everything else — existence of the cluster and its namespace, the
/// current work — comes from the watch caches: no GET, no list. The echoes of its own writes and
/// a forced full pass over the converged state make no request at all.
#[tokio::test]
async fn one_propagation_reconcile_makes_exactly_these_requests() {
    let env = Env::new().await;
    env.cluster("cluster1", true).await;
    let running = env.start().await;

    env.hub.record_requests(true);
    let app = env
        .create_app(
            "guestbook",
            "cluster1",
            json!({"operation": {"sync": {"revision": "HEAD"}}}),
        )
        .await;
    let work: ManifestWork = eventually("the work is created", || async {
        env.work_of(&app, "cluster1").await
    })
    .await;
    eventually("the operation is stripped", || async {
        let a = env.get_app("guestbook").await?;
        a.operation.is_none().then_some(())
    })
    .await;
    // The controller's own reconcile rewrites the work without the operation after stripping
    // it; the forced pass must not race that write (it would rewrite the work a second time).
    eventually("the work is rewritten without the operation", || async {
        let w = env.work_of(&app, "cluster1").await?;
        let payload = w.spec.workload.manifests.first()?;
        payload.get("operation").is_none().then_some(())
    })
    .await;
    // A converged forced pass: every reconcile answers from the caches.
    let report = running.resync().await.unwrap();
    assert_eq!(report.errors, 0);

    let test_requests = [
        "create applications argocd/".to_string(),
        format!("get manifestworks cluster1/{}", work.name_any()),
        "get applications argocd/guestbook".to_string(),
    ];
    let log: Vec<String> = env
        .hub
        .requests()
        .iter()
        .map(ToString::to_string)
        // the test's own requests (`eventually` polls with GETs)
        .filter(|r| !test_requests.contains(r))
        .collect();
    assert_eq!(
        log,
        [
            "create manifestworks cluster1/".to_string(),
            "patch applications argocd/guestbook".to_string(),
            // the hub Application no longer has the operation, so neither does the payload: the
            // work is rewritten once (the spoke keeps its operation: `.operation` is an
            // OnSpokeChange ignoreField of the work's server-side apply)
            format!("patch manifestworks cluster1/{}", work.name_any()),
        ],
        "the API requests of one propagation reconcile"
    );
    running.shutdown().await;
}
