//! `--resync-interval` (agent) and `--resync-min-interval` (principal) through the binary: the
//! hub refuses one write of an autonomous agent's update (422: the principal answers `error`,
//! the agent gives the event up — it is lost); the next periodic round brings it, on the same
//! stream. A managed agent resyncing more often than the principal's minimum is refused.

use argocd_pull_hub::{Fault, Verb};
use kube::Api;
use kube::api::{DynamicObject, Patch, PatchParams};
use serde_json::json;

use crate::*;

fn apps(hub: &argocd_pull_hub::Hub, ns: &str) -> Api<DynamicObject> {
    let ar = kube::api::ApiResource {
        group: "argoproj.io".into(),
        version: "v1alpha1".into(),
        api_version: "argoproj.io/v1alpha1".into(),
        kind: "Application".into(),
        plural: "applications".into(),
    };
    Api::namespaced_with(hub.client(), ns, &ar)
}

async fn wait_path(hub: &argocd_pull_hub::Hub, ns: &str, name: &str, want: &str) {
    use futures::StreamExt;
    let cfg = kube::runtime::watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut w = kube::runtime::watcher(apps(hub, ns), cfg).boxed();
    tokio::time::timeout(T, async {
        while let Some(e) = w.next().await {
            if let Ok(
                kube::runtime::watcher::Event::Apply(o)
                | kube::runtime::watcher::Event::InitApply(o),
            ) = e
                && o.data["spec"]["source"]["path"] == want
            {
                return;
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("timed out waiting for {ns}/{name} with path {want}"));
}

/// Polls a process's `/metrics` until `pred` holds for the text (a counter of another process
/// has no event to await).
async fn until_metrics(port: u16, what: &str, pred: impl Fn(&str) -> bool) -> String {
    tokio::time::timeout(T, async {
        loop {
            if let Some(t) = http_get(port, "/metrics")
                && pred(&t)
            {
                return t;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("timed out waiting for /metrics: {what}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn periodic_resync_recovers_a_lost_update_and_the_minimum_is_enforced() {
    let env = Env::new(&["u1", "m2"]).await;
    for ns in ["u1", "m2"] {
        env.namespace(&env.principal_hub, ns).await;
    }
    env.namespace(&env.agent_hub, "u1-local").await;
    env.create(&env.agent_hub, app("u1-local", "web")).await;
    let grpc = free_port();
    let (pm, um) = (free_port(), free_port());
    let pm_flag = format!("--metrics-port={pm}");
    let principal = env.principal("principal", grpc, &["--resync-min-interval=1s", &pm_flag]);
    let um_flag = format!("--metrics-port={um}");
    let u1 = env
        .agent(
            "u1",
            "autonomous",
            grpc,
            &["--resync-interval=2s", &um_flag],
        )
        .await;
    wait_path(&env.principal_hub, "u1", "web", "p").await;
    // the resync at start is over: the request-update of the principal's round and the one
    // answering the agent's request were received
    until_metrics(um, "the start's resync rounds received", |t| {
        metric(
            t,
            "argocd_agent_events_received_total{type=\"request-update\"}",
            "",
        ) >= 2.0
    })
    .await;
    let connections = metric(
        &until_metrics(um, "connected", |_| true).await,
        "argocd_agent_connections_total",
        "",
    );

    // the hub refuses the next update of an Application once: the update is lost
    env.principal_hub.inject_fault(Fault::new(
        &[Verb::Update, Verb::Patch],
        "applications",
        422,
        1,
    ));
    let p = json!({"spec": {"source": {"path": "v2"}}});
    apps(&env.agent_hub, "u1-local")
        .patch("web", &PatchParams::default(), &Patch::Merge(&p))
        .await
        .unwrap();
    principal.wait_for_line(&["event rejected", "injected fault: 422"]);
    // ... and the periodic resync brings it
    wait_path(&env.principal_hub, "u1", "web", "v2").await;
    let t = until_metrics(um, "a round sent", |t| {
        metric(t, "argocd_agent_resync_requests_total", "result=\"sent\"") >= 1.0
    })
    .await;
    assert_eq!(
        metric(&t, "argocd_agent_connections_total", ""),
        connections,
        "recovered without a reconnect"
    );

    // a managed agent asking every 300ms: refused by the principal's 1s minimum
    let m2 = env
        .agent("m2", "managed", grpc, &["--resync-interval=300ms"])
        .await;
    principal.wait_for_line(&["resync round refused", "m2"]);
    until_metrics(pm, "refusals counted", |t| {
        metric(
            t,
            "argocd_principal_resync_requests_total",
            "result=\"refused\"",
        ) >= 1.0
    })
    .await;
    drop((u1, m2, principal));
}
