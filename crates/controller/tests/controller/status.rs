use std::sync::{Arc, Mutex};

use argocd_pull_api::argocd::Application;
use argocd_pull_hub::Fault;
use futures::StreamExt;
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;

use crate::support::*;

/// Records every health status the hub Application goes through.
fn record_health(env: &Env) -> (Arc<Mutex<Vec<String>>>, tokio::task::JoinHandle<()>) {
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let apps = env.apps();
    let s2 = seen.clone();
    let task = tokio::spawn(async move {
        let mut s = std::pin::pin!(watcher(apps, Default::default()).applied_objects());
        while let Some(Ok(a)) = s.next().await {
            let a: Application = a;
            if let Some(h) = a.health_status() {
                let mut seen = s2.lock().unwrap();
                if seen.last().map(String::as_str) != Some(h) {
                    seen.push(h.to_string());
                }
            }
        }
    });
    (seen, task)
}

async fn health_history(seen: &Arc<Mutex<Vec<String>>>, want: &[&str]) {
    eventually(&format!("health history {want:?}"), || async {
        (seen.lock().unwrap().as_slice() == want).then_some(())
    })
    .await;
}

#[tokio::test]
async fn feedback_becomes_hub_status_with_real_transitions_only() {
    let env = Env::new().await;
    env.cluster("cluster1", true).await;
    let (seen, recorder) = record_health(&env);
    let running = env.start().await;
    let app = env.create_app("app1", "cluster1", json!({})).await;
    let work = eventually("work created", || env.work_of(&app, "cluster1")).await;

    env.feedback(
        &work,
        string_feedback(&[
            ("healthStatus", "Healthy"),
            ("syncStatus", "Synced"),
            ("syncRevision", "abc123"),
            ("operationStatePhase", "Succeeded"),
            ("operationStateStartedAt", "2024-05-01T10:00:00Z"),
        ]),
    )
    .await;
    let hub = eventually("Healthy/Synced on the hub", || async {
        let a = env.get_app("app1").await?;
        (a.health_status() == Some("Healthy")).then_some(a)
    })
    .await;
    health_history(&seen, &["Progressing", "Healthy"]).await;
    let status = hub.status.as_ref().unwrap();
    assert_eq!(hub.sync_status(), Some("Synced"));
    assert_eq!(
        status.sync.as_ref().unwrap().revision.as_deref(),
        Some("abc123")
    );
    let op = status.operation_state.as_ref().unwrap();
    assert_eq!(op.phase.as_deref(), Some("Succeeded"));
    assert_eq!(op.started_at.as_deref(), Some("2024-05-01T10:00:00Z"));
    assert_eq!(op.operation, Some(json!({})));
    // spec untouched by status writes
    assert_eq!(hub.spec, app.spec);

    // Healthy → Degraded is direct
    env.feedback(
        &work,
        string_feedback(&[("healthStatus", "Degraded"), ("syncStatus", "Synced")]),
    )
    .await;
    health_history(&seen, &["Progressing", "Healthy", "Degraded"]).await;
    // Degraded → Healthy goes through Progressing again
    env.feedback(
        &work,
        string_feedback(&[("healthStatus", "Healthy"), ("syncStatus", "Synced")]),
    )
    .await;
    health_history(
        &seen,
        &[
            "Progressing",
            "Healthy",
            "Degraded",
            "Progressing",
            "Healthy",
        ],
    )
    .await;

    // steady: a full pass writes nothing
    running.resync().await.unwrap();
    let before = env.hub.counters();
    running.resync().await.unwrap();
    assert_eq!(env.hub.counters().since(&before).writes(), 0);
    recorder.abort();
    running.shutdown().await;
}

#[tokio::test]
async fn missing_started_at_stays_stable() {
    let env = Env::new().await;
    env.cluster("cluster1", true).await;
    let running = env.start().await;
    let app = env.create_app("app1", "cluster1", json!({})).await;
    let work = eventually("work created", || env.work_of(&app, "cluster1")).await;
    env.feedback(
        &work,
        string_feedback(&[
            ("healthStatus", "Progressing"),
            ("syncStatus", "OutOfSync"),
            ("operationStatePhase", "Running"),
        ]),
    )
    .await;
    let first = eventually("operationState written", || async {
        let a = env.get_app("app1").await?;
        a.status?.operation_state?.started_at
    })
    .await;
    env.feedback(
        &work,
        string_feedback(&[
            ("healthStatus", "Progressing"),
            ("syncStatus", "Synced"),
            ("operationStatePhase", "Succeeded"),
        ]),
    )
    .await;
    let a = eventually("phase updated", || async {
        let a = env.get_app("app1").await?;
        (a.status
            .as_ref()?
            .operation_state
            .as_ref()?
            .phase
            .as_deref()
            == Some("Succeeded"))
        .then_some(a)
    })
    .await;
    assert_eq!(
        a.status
            .unwrap()
            .operation_state
            .unwrap()
            .started_at
            .unwrap(),
        first
    );
    running.shutdown().await;
}

#[tokio::test]
async fn non_string_feedback_is_tolerated() {
    let env = Env::new().await;
    env.cluster("cluster1", true).await;
    let running = env.start().await;
    let app = env.create_app("app1", "cluster1", json!({})).await;
    let work = eventually("work created", || env.work_of(&app, "cluster1")).await;
    env.feedback(
        &work,
        json!([
            {"name": "healthStatus", "fieldValue": {"type": "String", "string": "Progressing"}},
            {"name": "syncStatus", "fieldValue": {"type": "String", "string": "Synced"}},
            {"name": "syncRevision", "fieldValue": {"type": "Integer", "integer": 42}},
            {"name": "operationStatePhase", "fieldValue": {"type": "Boolean", "boolean": true}}
        ]),
    )
    .await;
    let a = eventually("status written", || async {
        let a = env.get_app("app1").await?;
        (a.sync_status() == Some("Synced")).then_some(a)
    })
    .await;
    assert_eq!(
        a.status.unwrap().sync.unwrap().revision.as_deref(),
        Some("42")
    );
    assert!(!running.any_stopped());
    running.shutdown().await;
}

#[tokio::test]
async fn status_conflicts_are_retried() {
    let env = Env::new().await;
    env.cluster("cluster1", true).await;
    let running = env.start().await;
    let app = env.create_app("app1", "cluster1", json!({})).await;
    let work = eventually("work created", || env.work_of(&app, "cluster1")).await;
    running.resync().await.unwrap();
    env.hub.inject_fault(Fault::conflict("applications", 8));
    env.feedback(
        &work,
        string_feedback(&[("healthStatus", "Progressing"), ("syncStatus", "Synced")]),
    )
    .await;
    eventually("status written despite conflicts", || async {
        let a = env.get_app("app1").await?;
        (a.sync_status() == Some("Synced")).then_some(())
    })
    .await;
    running.shutdown().await;
}

#[tokio::test]
async fn no_writes_in_a_steady_state() {
    let env = Env::new().await;
    for c in ["c1", "c2", "c3"] {
        env.cluster(c, true).await;
    }
    let running = env.start().await;
    let mut apps = Vec::new();
    for i in 0..12 {
        let cluster = ["c1", "c2", "c3"][i % 3];
        let ops = if i % 4 == 0 {
            json!({"operation": {"sync": {}}})
        } else {
            json!({})
        };
        apps.push((
            env.create_app(&format!("app{i}"), cluster, ops).await,
            cluster,
        ));
    }
    for (app, cluster) in &apps {
        let work = eventually("work created", || env.work_of(app, cluster)).await;
        env.feedback(
            &work,
            string_feedback(&[
                ("healthStatus", "Healthy"),
                ("syncStatus", "Synced"),
                ("operationStatePhase", "Succeeded"),
            ]),
        )
        .await;
    }
    for (app, _) in &apps {
        let name = app.metadata.name.clone().unwrap();
        eventually("Healthy", || async {
            let a = env.get_app(&name).await?;
            (a.health_status() == Some("Healthy") && a.operation.is_none()).then_some(())
        })
        .await;
    }
    // let every in-flight reconcile settle: a full pass, then measure further passes
    running.resync().await.unwrap();
    let before = env.hub.counters();
    for _ in 0..3 {
        let report = running.resync().await.unwrap();
        assert_eq!(report.applications, 12);
        assert_eq!(report.errors, 0);
        assert_eq!(report.sweep.deleted, 0);
    }
    let delta = env.hub.counters().since(&before);
    assert_eq!(
        delta.writes(),
        0,
        "writes in a steady state: {:?}",
        delta.entries()
    );
    assert_eq!(
        delta.total(),
        0,
        "requests in a steady state: {:?}",
        delta.entries()
    );
    running.shutdown().await;
}
