//! Agents' state on the hub and `ctl agent list`, through the binary.

use std::time::Instant;

use argocd_pull_agent_core::agent_status as st;
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

/// Waits until the Application `ns/name` on `hub` exists and satisfies `pred`.
async fn wait_app(
    hub: &argocd_pull_hub::Hub,
    ns: &str,
    name: &str,
    what: &str,
    pred: impl Fn(&serde_json::Value) -> bool,
) {
    use futures::StreamExt;
    let cfg = kube::runtime::watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut w = kube::runtime::watcher(apps(hub, ns), cfg).boxed();
    tokio::time::timeout(T, async {
        while let Some(e) = w.next().await {
            if let Ok(
                kube::runtime::watcher::Event::Apply(o)
                | kube::runtime::watcher::Event::InitApply(o),
            ) = e
                && pred(&serde_json::to_value(&o).unwrap())
            {
                return;
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("timed out waiting for Application {ns}/{name}: {what}"));
}

/// Sets the status an agent's Argo CD would write on its copy.
async fn set_status(hub: &argocd_pull_hub::Hub, ns: &str, name: &str, sync: &str, health: &str) {
    let p = json!({"status": {"sync": {"status": sync}, "health": {"status": health}}});
    // Argo CD's Application CRD has no status subresource: the object itself is patched
    apps(hub, ns)
        .patch(name, &PatchParams::default(), &Patch::Merge(&p))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_state_is_read_from_the_hub_in_every_format_and_follows_the_stream() {
    let env = Env::new(&["m1", "a1"]).await;
    for a in ["m1", "a1"] {
        env.cluster_secret(a).await;
    }
    // the managed agent's Applications on the hub; the autonomous agent's on its cluster
    env.namespace(&env.principal_hub, "m1").await;
    for n in ["ok", "drifted", "gone"] {
        env.create(&env.principal_hub, app("m1", n)).await;
    }
    env.namespace(&env.principal_hub, "a1").await;
    env.namespace(&env.agent_hub_2, "a1-local").await;
    env.create(&env.agent_hub_2, app("a1-local", "auto")).await;
    // a1's API server does not tell its version
    env.agent_hub_2
        .inject_fault(Fault::new(&[Verb::Get], "version", 503, 1_000_000));

    let grpc = free_port();
    let principal = env.principal("principal", grpc, &[]);
    let m1 = env.agent("m1", "managed", grpc, &[]).await;
    let a1 = env
        .agent("a1", "autonomous", grpc, &["--kubecontext=agent-2"])
        .await;

    // the agents' Argo CD (none here) would write these statuses; they reach the hub
    for n in ["ok", "drifted", "gone"] {
        wait_app(&env.agent_hub, "m1-local", n, "delivered", |_| true).await;
    }
    set_status(&env.agent_hub, "m1-local", "ok", "Synced", "Healthy").await;
    set_status(
        &env.agent_hub,
        "m1-local",
        "drifted",
        "OutOfSync",
        "Degraded",
    )
    .await;
    set_status(&env.agent_hub, "m1-local", "gone", "OutOfSync", "Missing").await;
    set_status(&env.agent_hub_2, "a1-local", "auto", "Synced", "Healthy").await;
    wait_app(&env.principal_hub, "m1", "gone", "status on the hub", |a| {
        a["status"]["health"]["status"] == "Missing"
    })
    .await;
    wait_app(&env.principal_hub, "a1", "auto", "status on the hub", |a| {
        a["status"]["health"]["status"] == "Healthy"
    })
    .await;
    let secrets = env.secrets();
    let m = wait_shown(&secrets, "m1", "connected with versions", |s| {
        s.connection == st::Connection::Successful && s.kubernetes_version.known().is_some()
    })
    .await;
    assert_eq!(
        m.kubernetes_version.known(),
        Some("v1.37.0"),
        "the agent's API server's gitVersion in Argo CD's form"
    );
    wait_shown(&secrets, "a1", "connected, version unknown", |s| {
        s.connection == st::Connection::Successful
            && matches!(&s.kubernetes_version, st::Reported::Unknown(w) if w.contains("503"))
    })
    .await;

    // the peer's default output: names only
    let o = env.ctl(&["agent", "list"]);
    assert_eq!((o.code, o.stdout.as_str()), (0, "a1\nm1\n"));
    // json: every field
    let rows = env.agent_list_json();
    let r = &rows["m1"];
    assert_eq!(r["connected"], true);
    assert_eq!(r["connectionState"], "Successful");
    assert_eq!(r["since"], st::rfc3339(m.since).as_str());
    assert_eq!(r["mode"], "managed");
    assert_eq!(r["agentVersion"], argocd_pull_agent_core::VERSION);
    assert_eq!(r["kubernetesVersion"], "v1.37.0");
    assert_eq!(r["eventsQueued"], "0");
    assert_eq!(
        r["applications"],
        json!({"total": 3, "synced": 1, "outOfSync": 2, "healthy": 1, "degraded": 1, "missing": 1})
    );
    let r = &rows["a1"];
    assert_eq!(r["mode"], "autonomous");
    assert_eq!(r["kubernetesVersion"], "unknown", "never a made-up version");
    assert!(
        r["versionMessage"].as_str().unwrap().contains("503"),
        "the reason: {r}"
    );
    assert_eq!(r["applications"]["total"], 1);
    assert_eq!(r["applications"]["healthy"], 1);
    // yaml: the same data
    let o = env.ctl(&["agent", "list", "-o", "yaml"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let y: Vec<serde_json::Value> = serde_saphyr::from_str(&o.stdout).unwrap();
    assert_eq!(y.len(), 2);
    assert_eq!(y[1]["applications"]["outOfSync"], 2);
    // wide: a table
    let o = env.ctl(&["agent", "list", "-o", "wide"]);
    let lines: Vec<Vec<&str>> = o
        .stdout
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(lines[0][..4], ["NAME", "MODE", "CONNECTED", "SINCE"]);
    assert_eq!(lines[2][..3], ["m1", "managed", "yes"]);
    assert_eq!(
        lines[2][4..13],
        [
            argocd_pull_agent_core::VERSION,
            "v1.37.0",
            "3",
            "1",
            "2",
            "1",
            "1",
            "1",
            "0"
        ]
    );
    // a bad format is refused, naming the good ones
    let o = env.ctl(&["agent", "list", "-o", "xml"]);
    assert_eq!(o.code, 1);
    assert!(
        o.stderr.contains("name, wide, json or yaml"),
        "{}",
        o.stderr
    );

    // a steady state writes nothing on the hub's Secrets (3 heartbeat intervals)
    let w0 = env.principal_hub.counters().writes_to("secrets");
    tokio::time::sleep(HEARTBEAT * 3).await;
    assert_eq!(env.principal_hub.counters().writes_to("secrets"), w0);

    // m1 killed: Failed with the reason within 2 × the heartbeat interval, and back
    let killed = Instant::now();
    m1.stop("KILL");
    let f = wait_shown(&secrets, "m1", "Failed", |s| {
        s.connection == st::Connection::Failed
    })
    .await;
    assert!(
        killed.elapsed() <= HEARTBEAT * 2,
        "Failed {:?} after the drop",
        killed.elapsed()
    );
    let r = &env.agent_list_json()["m1"];
    assert_eq!(r["connected"], false);
    assert!(
        r["message"]
            .as_str()
            .unwrap()
            .starts_with("Agent: 'm1' is disconnected with principal: "),
        "{r}"
    );
    assert_eq!(r["since"], st::rfc3339(f.since).as_str(), "last seen");
    let m1 = env.agent("m1", "managed", grpc, &[]).await;
    wait_shown(&secrets, "m1", "Successful again", |s| {
        s.connection == st::Connection::Successful
    })
    .await;

    // the principal restarts: the agents reconnect, never shown Failed, same since
    let since = published(&secrets.get("cluster-a1").await.unwrap()).unwrap();
    let seen = record(&secrets, "a1");
    principal.stop("TERM");
    let principal = env.principal("principal-2", grpc, &[]);
    principal.wait_for_line(&["agent subscribed", "a1"]);
    tokio::time::sleep(HEARTBEAT * 2).await;
    never_failed(&seen, &since, "a1 across a principal restart");

    drop((m1, a1, principal));
}
