use argocd_pull_agent::local::LocalPki;
use argocd_pull_agent_core::Mode;
use argocd_pull_agent_core::metrics::Metrics;
use argocd_pull_agent_core::store::Store;
use argocd_pull_agent_core::store::{Kind, MemStore};
use serde_json::json;

use crate::harness::*;

#[tokio::test]
async fn managed_create_update_status_delete() {
    let pki = LocalPki::new().unwrap();
    let hub = MemStore::new();
    let spoke = MemStore::new();
    let p = principal(&pki, &hub, "127.0.0.1:0").await;
    let a = agent(&pki, &p, "cluster-a", Mode::Managed, &spoke).await;
    assert_eq!(p.connected_agents(), vec!["cluster-a"]);

    let h = put(&hub, app("cluster-a", "guestbook", "v1")).await;
    let l = wait_for(&spoke, "argocd", "guestbook", "created", |o| o.is_some())
        .await
        .unwrap();
    assert_eq!(l["spec"]["source"]["path"], "v1");
    assert_eq!(
        l["spec"]["destination"],
        json!({"name": "in-cluster", "namespace": "guestbook"})
    );
    assert_eq!(
        l["metadata"]["annotations"]["argocd.argoproj.io/source-uid"],
        h["metadata"]["uid"]
    );
    assert_eq!(l["metadata"]["annotations"]["keep"], "me");

    patch(
        &hub,
        "cluster-a",
        "guestbook",
        json!({"spec": {"source": {"path": "v2"}}}),
    )
    .await;
    wait_for(&spoke, "argocd", "guestbook", "spec updated", |o| {
        o.is_some_and(|o| o["spec"]["source"]["path"] == "v2")
    })
    .await;

    // status flows back; unknown fields of the hub object survive
    patch(
        &spoke,
        "argocd",
        "guestbook",
        json!({"status": {"sync": {"status": "Synced"}, "health": {"status": "Healthy"}}}),
    )
    .await;
    let h = wait_for(&hub, "cluster-a", "guestbook", "status copied", |o| {
        o.is_some_and(|o| o["status"]["health"]["status"] == "Healthy")
    })
    .await
    .unwrap();
    assert_eq!(h["unknownTopLevel"], json!({"kept": true}));
    assert_eq!(
        h["spec"]["source"]["path"], "v2",
        "status write does not touch the spec"
    );

    del(&hub, "cluster-a", "guestbook").await;
    wait_for(&spoke, "argocd", "guestbook", "deleted", |o| o.is_none()).await;
    wait_idle(|| p.agent_idle("cluster-a") && a.idle()).await;
    let m = p.metrics();
    assert!(Metrics::total(&m.events_sent, "create") >= 1);
    assert!(
        m.events_acked.get() >= 3,
        "create, spec-update, delete were ACKed"
    );
    assert_eq!(Metrics::total(&m.events_failed, ""), 0);
    a.shutdown().await;
    p.shutdown().await;
}

#[tokio::test]
async fn managed_sync_and_terminate_operations_flow_down() {
    let pki = LocalPki::new().unwrap();
    let (hub, spoke) = (MemStore::new(), MemStore::new());
    let p = principal(&pki, &hub, "127.0.0.1:0").await;
    let _a = agent(&pki, &p, "c1", Mode::Managed, &spoke).await;
    put(&hub, app("c1", "app", "v1")).await;
    wait_for(&spoke, "argocd", "app", "created", |o| o.is_some()).await;
    patch(
        &hub,
        "c1",
        "app",
        json!({"operation": {"sync": {"revision": "abc"}, "initiatedBy": {"username": "admin"}}}),
    )
    .await;
    let l = wait_for(&spoke, "argocd", "app", "operation", |o| {
        o.is_some_and(|o| o["operation"]["sync"]["revision"] == "abc")
    })
    .await
    .unwrap();
    assert_eq!(l["spec"]["source"]["path"], "v1");
    // the app controller reports Running; the user terminates on the hub
    patch(
        &spoke,
        "argocd",
        "app",
        json!({"status": {"operationState": {"phase": "Running"}}}),
    )
    .await;
    wait_for(&hub, "c1", "app", "running", |o| {
        o.is_some_and(|o| o["status"]["operationState"]["phase"] == "Running")
    })
    .await;
    patch(
        &hub,
        "c1",
        "app",
        json!({"status": {"operationState": {"phase": "Terminating"}}}),
    )
    .await;
    wait_for(&spoke, "argocd", "app", "terminating", |o| {
        o.is_some_and(|o| o["status"]["operationState"]["phase"] == "Terminating")
    })
    .await;
    // the operation completes on the agent: the hub's operation is cleared
    patch(&spoke, "argocd", "app", json!({"operation": null, "status": {"operationState": {"phase": "Succeeded", "operation": {"sync": {"revision": "abc"}, "initiatedBy": {"username": "admin"}}}}})).await;
    wait_for(&hub, "c1", "app", "operation cleared", |o| {
        o.is_some_and(|o| {
            o.get("operation").is_none() && o["status"]["operationState"]["phase"] == "Succeeded"
        })
    })
    .await;
}

#[tokio::test]
async fn managed_local_edit_and_local_delete_are_reverted() {
    let pki = LocalPki::new().unwrap();
    let (hub, spoke) = (MemStore::new(), MemStore::new());
    let p = principal(&pki, &hub, "127.0.0.1:0").await;
    let a = agent(&pki, &p, "c1", Mode::Managed, &spoke).await;
    put(&hub, app("c1", "app", "v1")).await;
    wait_for(&spoke, "argocd", "app", "created", |o| o.is_some()).await;
    patch(
        &spoke,
        "argocd",
        "app",
        json!({"spec": {"source": {"path": "hacked"}}}),
    )
    .await;
    wait_for(&spoke, "argocd", "app", "reverted", |o| {
        o.is_some_and(|o| o["spec"]["source"]["path"] == "v1")
    })
    .await;
    del(&spoke, "argocd", "app").await;
    wait_for(&spoke, "argocd", "app", "recreated", |o| {
        o.is_some_and(|o| o["spec"]["source"]["path"] == "v1")
    })
    .await;
    assert!(a.metrics().local_edits_reverted.get() >= 2);
    let h = hub
        .get(
            argocd_pull_agent_core::store::Kind::Application,
            "c1",
            "app",
        )
        .await;
    assert_eq!(
        h.unwrap().unwrap()["spec"]["source"]["path"],
        "v1",
        "the hub copy is untouched"
    );
}

#[tokio::test]
async fn managed_delete_race_hub_delete_during_local_edit() {
    let pki = LocalPki::new().unwrap();
    let (hub, spoke) = (MemStore::new(), MemStore::new());
    let p = principal(&pki, &hub, "127.0.0.1:0").await;
    let a = agent(&pki, &p, "c1", Mode::Managed, &spoke).await;
    for i in 0..20 {
        put(&hub, app("c1", &format!("app{i}"), "v1")).await;
    }
    for i in 0..20 {
        wait_for(&spoke, "argocd", &format!("app{i}"), "created", |o| {
            o.is_some()
        })
        .await;
    }
    for i in 0..20 {
        let n = format!("app{i}");
        tokio::join!(
            try_patch(
                &spoke,
                "argocd",
                &n,
                json!({"spec": {"source": {"path": "local"}}, "status": {"health": {"status": "Degraded"}}})
            ),
            del(&hub, "c1", &n)
        );
    }
    for i in 0..20 {
        wait_for(
            &spoke,
            "argocd",
            &format!("app{i}"),
            "deleted on the agent too",
            |o| o.is_none(),
        )
        .await;
    }
    wait_idle(|| p.agent_idle("c1") && a.idle()).await;
    for i in 0..20 {
        assert!(
            hub.get(
                argocd_pull_agent_core::store::Kind::Application,
                "c1",
                &format!("app{i}")
            )
            .await
            .unwrap()
            .is_none(),
            "status of a deleted app does not resurrect it"
        );
    }
}

/// The UI's Refresh button sets `argocd.argoproj.io/refresh` on the hub Application; the managed
/// cluster's copy gets it, and once that cluster's Argo CD has refreshed (annotation removed
/// there) the hub's goes too — in both modes.
#[tokio::test]
async fn refresh_requested_on_the_hub_reaches_the_agent_and_clears_on_both_sides() {
    const REFRESH: &str = "argocd.argoproj.io/refresh";
    let has = |o: Option<&serde_json::Value>, v: Option<&str>| {
        o.is_some_and(|o| o["metadata"]["annotations"][REFRESH].as_str() == v)
    };
    let pki = LocalPki::new().unwrap();
    let hub = MemStore::new();
    let (spoke_m, spoke_a) = (MemStore::new(), MemStore::new());
    let p = principal(&pki, &hub, "127.0.0.1:0").await;
    let m = agent(&pki, &p, "rm", Mode::Managed, &spoke_m).await;
    let a = agent(&pki, &p, "ra", Mode::Autonomous, &spoke_a).await;
    put(&hub, app("rm", "web", "v1")).await;
    put(&spoke_a, app("argocd", "web", "v1")).await;
    wait_for(&spoke_m, "argocd", "web", "created", |o| o.is_some()).await;
    wait_for(&hub, "ra", "web", "copied up", |o| o.is_some()).await;

    for (hub_ns, spoke) in [("rm", &spoke_m), ("ra", &spoke_a)] {
        patch(
            &hub,
            hub_ns,
            "web",
            json!({"metadata": {"annotations": {REFRESH: "hard"}}}),
        )
        .await;
        wait_for(spoke, "argocd", "web", "refresh reaches the agent", |o| {
            has(o, Some("hard"))
        })
        .await;
        // the managed cluster's application controller refreshes and drops the annotation
        patch(
            spoke,
            "argocd",
            "web",
            json!({"metadata": {"annotations": {REFRESH: null}},
                   "status": {"reconciledAt": "2026-11-25T10:00:00Z"}}),
        )
        .await;
        wait_for(&hub, hub_ns, "web", "refresh cleared on the hub", |o| {
            has(o, None) && o.is_some_and(|o| o["status"]["reconciledAt"].is_string())
        })
        .await;
        assert!(
            has(
                spoke
                    .get(Kind::Application, "argocd", "web")
                    .await
                    .unwrap()
                    .as_ref(),
                None
            ),
            "{hub_ns}: the agent's copy keeps the refresh cleared"
        );
    }
    m.shutdown().await;
    a.shutdown().await;
    p.shutdown().await;
}

/// `argocd-agent.argoproj-labs.io/ignore-sync: "true"` added later takes an Application away from
/// the other side (managed: hub → agent; autonomous: agent → hub); removing it brings it back.
#[tokio::test]
async fn ignore_sync_label_added_later_removes_the_other_sides_copy() {
    const IGNORE: &str = "argocd-agent.argoproj-labs.io/ignore-sync";
    let pki = LocalPki::new().unwrap();
    let hub = MemStore::new();
    let (spoke_m, spoke_a) = (MemStore::new(), MemStore::new());
    let p = principal(&pki, &hub, "127.0.0.1:0").await;
    let m = agent(&pki, &p, "im", Mode::Managed, &spoke_m).await;
    let a = agent(&pki, &p, "ia", Mode::Autonomous, &spoke_a).await;
    put(&hub, app("im", "web", "v1")).await;
    put(&spoke_a, app("argocd", "web", "v1")).await;
    wait_for(&spoke_m, "argocd", "web", "created", |o| o.is_some()).await;
    wait_for(&hub, "ia", "web", "copied up", |o| o.is_some()).await;

    // managed: labelled on the hub -> deleted on the agent, the hub keeps it
    patch(
        &hub,
        "im",
        "web",
        json!({"metadata": {"labels": {IGNORE: "true"}}}),
    )
    .await;
    wait_for(&spoke_m, "argocd", "web", "removed from the agent", |o| {
        o.is_none()
    })
    .await;
    // autonomous: labelled on the agent -> its hub copy goes, the agent keeps it
    patch(
        &spoke_a,
        "argocd",
        "web",
        json!({"metadata": {"labels": {IGNORE: "true"}}}),
    )
    .await;
    wait_for(&hub, "ia", "web", "hub copy removed", |o| o.is_none()).await;
    wait_idle(|| p.agent_idle("im") && p.agent_idle("ia") && m.idle() && a.idle()).await;
    assert!(
        hub.get(Kind::Application, "im", "web")
            .await
            .unwrap()
            .is_some()
    );
    assert!(
        spoke_a
            .get(Kind::Application, "argocd", "web")
            .await
            .unwrap()
            .is_some()
    );

    // label removed: synchronised again
    patch(
        &hub,
        "im",
        "web",
        json!({"metadata": {"labels": {IGNORE: null}}}),
    )
    .await;
    wait_for(&spoke_m, "argocd", "web", "back on the agent", |o| {
        o.is_some()
    })
    .await;
    patch(
        &spoke_a,
        "argocd",
        "web",
        json!({"metadata": {"labels": {IGNORE: null}}}),
    )
    .await;
    wait_for(&hub, "ia", "web", "back on the hub", |o| o.is_some()).await;
    m.shutdown().await;
    a.shutdown().await;
    p.shutdown().await;
}

/// `--label-selector` on the principal: only selected hub Applications reach the agent, one that
/// stops matching is deleted there (as the peer's label-selected informer sees it).
#[tokio::test]
async fn principal_label_selector_limits_what_reaches_the_agents() {
    use argocd_pull_agent_core::auth::throwaway_jwt_key;
    use argocd_pull_agent_core::metrics::Metrics;
    use argocd_pull_agent_core::selector::{SelectedStore, parse};
    use argocd_pull_principal::{Principal, PrincipalConfig};
    use std::sync::Arc;
    init();
    let pki = LocalPki::new().unwrap();
    let (hub, spoke) = (MemStore::new(), MemStore::new());
    let selected = SelectedStore::new(
        Arc::new(hub.clone()),
        parse("tier in (web,api)").unwrap(),
        vec![Kind::Application, Kind::AppProject, Kind::Secret],
    );
    let p = Principal::start(
        PrincipalConfig::new(
            "127.0.0.1:0".parse().unwrap(),
            pki.principal.clone(),
            throwaway_jwt_key(),
        ),
        Arc::new(selected),
        Metrics::new("argocd_principal"),
    )
    .await
    .unwrap();
    let a = agent(&pki, &p, "ls", Mode::Managed, &spoke).await;
    let mut web = app("ls", "web", "v1");
    web["metadata"]["labels"]["tier"] = json!("web");
    put(&hub, web).await;
    put(&hub, app("ls", "other", "v1")).await;
    wait_for(&spoke, "argocd", "web", "selected: sent", |o| o.is_some()).await;
    wait_idle(|| p.agent_idle("ls") && a.idle()).await;
    assert!(
        spoke
            .get(Kind::Application, "argocd", "other")
            .await
            .unwrap()
            .is_none(),
        "not selected: never sent"
    );
    patch(
        &hub,
        "ls",
        "web",
        json!({"metadata": {"labels": {"tier": "db"}}}),
    )
    .await;
    wait_for(
        &spoke,
        "argocd",
        "web",
        "no longer selected: deleted",
        |o| o.is_none(),
    )
    .await;
    a.shutdown().await;
    p.shutdown().await;
}

/// `--allowed-namespaces`: hub Applications outside the listed namespaces (globs) never reach
/// their agent.
#[tokio::test]
async fn principal_allowed_namespaces_limit_which_agents_get_hub_applications() {
    let pki = LocalPki::new().unwrap();
    let hub = MemStore::new();
    let (spoke_in, spoke_out) = (MemStore::new(), MemStore::new());
    let p = principal_with(&pki, &hub, "127.0.0.1:0", |c| {
        c.allowed_namespaces = vec!["prod-*".into()]
    })
    .await;
    let a = agent(&pki, &p, "prod-eu", Mode::Managed, &spoke_in).await;
    let b = agent(&pki, &p, "lab", Mode::Managed, &spoke_out).await;
    put(&hub, app("prod-eu", "web", "v1")).await;
    put(&hub, app("lab", "web", "v1")).await;
    wait_for(&spoke_in, "argocd", "web", "allowed: sent", |o| o.is_some()).await;
    wait_idle(|| p.agent_idle("prod-eu") && p.agent_idle("lab") && a.idle() && b.idle()).await;
    assert!(
        spoke_out
            .get(Kind::Application, "argocd", "web")
            .await
            .unwrap()
            .is_none(),
        "namespace lab is not allowed"
    );
    a.shutdown().await;
    b.shutdown().await;
    p.shutdown().await;
}
