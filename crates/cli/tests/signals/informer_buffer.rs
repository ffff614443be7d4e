//! `--buffer-informer-event-interval` (argocd-agent's `ARGOCD_AGENT_BUFFER_INFORMER_EVENT_INTERVAL`):
//! the agent sends one update of a local Application per interval, the latest one, through the
//! real binaries.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::{Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;

use crate::flags::{agent_args, principal_args};
use crate::otlp::Hub;
use crate::{Proc, demo_hub, free_port, run, temp_dir};

/// Long enough that v1's round trip and the burst fit in one window on a loaded CI machine.
const INTERVAL: Duration = Duration::from_secs(10);

#[test]
fn buffered_updates_of_an_application_collapse_into_the_latest_one_an_interval_later() {
    let dir = temp_dir("informer-buffer");
    let kubeconfig = dir.join("hub.kubeconfig");
    let pki = dir.join("pki");
    run(&["pki", "--dir", pki.to_str().unwrap(), "--agent", "edge"]);
    let _hub_proc = demo_hub(&kubeconfig);
    let hub = Hub::connect(&kubeconfig);
    hub.create_namespace("edge-local");
    hub.create_namespace("edge");

    let grpc: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let principal = Proc::spawn(
        "principal",
        &principal_args(&pki, grpc, &["--log-level=debug"]),
        Some(&kubeconfig),
    );
    principal.wait_for_line("principal listening");
    let agent = Proc::spawn(
        "agent",
        &agent_args(
            &pki,
            grpc,
            &[
                "--agent-mode=autonomous",
                &format!("--buffer-informer-event-interval={}s", INTERVAL.as_secs()),
            ],
        ),
        Some(&kubeconfig),
    );
    agent.wait_for_line(&format!(
        "Buffering of Application events is enabled at {}s",
        INTERVAL.as_secs()
    ));
    principal.wait_for_line("agent subscribed");
    // the agent's resync request of its first stream is answered with a request-update per hub
    // copy, which the agent answers unbuffered (as the peer's does): settle it before the burst
    principal.wait_for_line("answering the agent's resync request");

    // an autonomous agent's Application reaches the hub (an add: never delayed)
    hub.create_app("edge-local", "guestbook");
    hub.wait_revision("edge", "guestbook", "HEAD");

    let local = hub.apps("edge-local");
    let set = |rev: &str| {
        let local = local.clone();
        let patch = json!({"spec": {"source": {"targetRevision": rev}}});
        async move {
            local
                .patch("guestbook", &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .unwrap();
        }
    };
    let (seen, first, last) = hub.rt.block_on(async {
        let mut revisions = watcher(hub.apps("edge"), watcher::Config::default())
            .applied_objects()
            .filter_map(|o| async move {
                let o = o.ok()?;
                (o.metadata.name.as_deref() == Some("guestbook")).then(|| {
                    o.data["spec"]["source"]["targetRevision"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string()
                })
            })
            .boxed();
        let mut seen = Vec::new();
        // the first update after a quiet period goes out at once and closes the window
        let t0 = Instant::now();
        set("v1").await;
        wait_for(&mut revisions, "v1", &mut seen).await;
        let first = t0.elapsed();
        // a burst inside the window: held, only the latest sent when the window opens
        for rev in ["v2", "v3", "v4"] {
            set(rev).await;
        }
        wait_for(&mut revisions, "v4", &mut seen).await;
        (seen, first, t0.elapsed())
    });
    eprintln!("hub saw {seen:?}; v1 after {first:?}, v4 after {last:?}");
    assert!(
        first < INTERVAL / 2,
        "v1 took {first:?} to reach the hub: too slow a machine for a burst inside one {INTERVAL:?} window"
    );
    assert!(
        !seen.iter().any(|r| r == "v2" || r == "v3"),
        "the burst was collapsed: {seen:?}"
    );
    assert!(
        last >= INTERVAL,
        "the latest update waited for the window: v4 after {last:?}"
    );
    drop(agent);
}

async fn wait_for(
    revisions: &mut futures::stream::BoxStream<'_, String>,
    want: &str,
    seen: &mut Vec<String>,
) {
    tokio::time::timeout(Duration::from_secs(120), async {
        while let Some(r) = revisions.next().await {
            seen.push(r.clone());
            if r == want {
                return;
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the hub never got targetRevision {want}: {seen:?}"))
}
