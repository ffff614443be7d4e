use argocd_pull_api::argocd::Application;
use argocd_pull_api::ocm::work::ManifestWork;
use argocd_pull_sim::WORK_FINALIZER;
use argocd_pull_sim::wait::{poll_until, wait_deleted, wait_for};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::common::*;

#[tokio::test]
async fn application_work_reaches_cluster_and_feedback_returns() {
    let fleet = fleet(2).await;
    let hub = fleet.hub_client();
    let works: Api<ManifestWork> = Api::namespaced(hub.clone(), "cluster1");
    works
        .create(
            &PostParams::default(),
            &work(
                "cluster1",
                "guestbook-abcde",
                vec![app_payload("guestbook")],
                vec![pull_config("guestbook")],
            ),
        )
        .await
        .unwrap();

    let spoke = fleet.cluster("cluster1").unwrap();
    let app = wait_for(
        &spoke.applications("argocd"),
        "guestbook",
        T,
        |a: &Application| a.health_status() == Some("Healthy") && a.sync_status() == Some("Synced"),
    )
    .await
    .unwrap();
    let revision = app
        .status
        .as_ref()
        .unwrap()
        .sync
        .as_ref()
        .unwrap()
        .revision
        .clone()
        .unwrap();
    assert_eq!(revision.len(), 40, "a git-like revision: {revision}");

    let w = wait_for(&works, "guestbook-abcde", T, |w: &ManifestWork| {
        feedback(w, 0, "healthStatus").as_deref() == Some("Healthy")
    })
    .await
    .unwrap();
    assert_eq!(feedback(&w, 0, "syncStatus").as_deref(), Some("Synced"));
    assert_eq!(feedback(&w, 0, "syncRevision"), Some(revision));
    assert_eq!(
        feedback(&w, 0, "operationStatePhase").as_deref(),
        Some("Succeeded")
    );
    let started = app
        .status
        .as_ref()
        .unwrap()
        .operation_state
        .as_ref()
        .unwrap()
        .started_at
        .clone();
    assert_eq!(feedback(&w, 0, "operationStateStartedAt"), started);
    assert!(
        w.condition_true("Applied") && w.condition_true("Available"),
        "{:?}",
        w.status
    );
    assert!(
        w.metadata
            .finalizers
            .unwrap()
            .contains(&WORK_FINALIZER.to_string())
    );
    let meta = &w
        .status
        .as_ref()
        .unwrap()
        .resource_status
        .as_ref()
        .unwrap()
        .manifests[0]
        .resource_meta;
    assert_eq!(
        (
            meta.group.as_str(),
            meta.version.as_str(),
            meta.kind.as_str(),
            meta.resource.as_str(),
            meta.namespace.as_str(),
            meta.name.as_str()
        ),
        (
            "argoproj.io",
            "v1alpha1",
            "Application",
            "applications",
            "argocd",
            "guestbook"
        )
    );
    // What the simulated Argo CD deployed.
    let cm = Api::<ConfigMap>::namespaced(spoke.client(), "guestbook")
        .get("guestbook")
        .await
        .unwrap();
    assert_eq!(cm.data.unwrap()["revision"].len(), 40);
    // The other cluster got nothing.
    let other = fleet.cluster("cluster2").unwrap();
    assert!(
        other
            .applications("argocd")
            .get_opt("guestbook")
            .await
            .unwrap()
            .is_none()
    );
    fleet.shutdown().await;
}

#[tokio::test]
async fn manifest_update_and_removal() {
    let fleet = fleet(1).await;
    let works: Api<ManifestWork> = Api::namespaced(fleet.hub_client(), "cluster1");
    let spoke = fleet.cluster("cluster1").unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(spoke.client(), "default");
    let w = work(
        "cluster1",
        "two",
        vec![
            configmap("default", "a", json!({"k": "1"})),
            configmap("default", "b", json!({"k": "1"})),
        ],
        vec![],
    );
    works.create(&PostParams::default(), &w).await.unwrap();
    wait_for(&cms, "b", T, |_| true).await.unwrap();

    // Update: the first manifest's data changes.
    let mut w2 = works.get("two").await.unwrap();
    w2.spec.workload.manifests[0] = configmap("default", "a", json!({"k": "2"}));
    works
        .replace("two", &PostParams::default(), &w2)
        .await
        .unwrap();
    wait_for(&cms, "a", T, |c: &ConfigMap| {
        c.data.as_ref().unwrap()["k"] == "2"
    })
    .await
    .unwrap();

    // Drift on the cluster is reverted (default strategy Update).
    cms.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "drift"}})),
    )
    .await
    .unwrap();
    wait_for(&cms, "a", T, |c: &ConfigMap| {
        c.data.as_ref().unwrap()["k"] == "2"
    })
    .await
    .unwrap();

    // Removal: manifest "b" leaves the work and the cluster.
    let mut w3 = works.get("two").await.unwrap();
    w3.spec.workload.manifests.truncate(1);
    works
        .replace("two", &PostParams::default(), &w3)
        .await
        .unwrap();
    wait_deleted(&cms, "b", T).await.unwrap();
    let w = wait_for(&works, "two", T, |w: &ManifestWork| {
        w.status
            .as_ref()
            .and_then(|s| s.resource_status.as_ref())
            .is_some_and(|r| r.manifests.len() == 1)
    })
    .await
    .unwrap();
    assert!(w.condition_true("Applied"));
    assert!(cms.get_opt("a").await.unwrap().is_some());
    fleet.shutdown().await;
}

#[tokio::test]
async fn delete_options_foreground_orphan_selective() {
    let fleet = fleet(1).await;
    let works: Api<ManifestWork> = Api::namespaced(fleet.hub_client(), "cluster1");
    let spoke = fleet.cluster("cluster1").unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(spoke.client(), "default");
    let mut fg = work(
        "cluster1",
        "fg",
        vec![app_payload("fg"), configmap("default", "fg", json!({}))],
        vec![pull_config("fg")],
    );
    let mut orphan = work(
        "cluster1",
        "orphan",
        vec![configmap("default", "orphan", json!({}))],
        vec![],
    );
    orphan.spec.delete_option =
        Some(serde_json::from_value(json!({"propagationPolicy": "Orphan"})).unwrap());
    let mut sel = work(
        "cluster1",
        "sel",
        vec![
            configmap("default", "keep", json!({})),
            configmap("default", "drop", json!({})),
        ],
        vec![],
    );
    sel.spec.delete_option = Some(
        serde_json::from_value(json!({"propagationPolicy": "SelectivelyOrphan", "selectivelyOrphans": {"orphaningRules": [
            {"group": "", "resource": "configmaps", "namespace": "default", "name": "keep"}
        ]}}))
        .unwrap(),
    );
    fg.metadata.labels = Some([("t".to_string(), "x".to_string())].into());
    for w in [&fg, &orphan, &sel] {
        works.create(&PostParams::default(), w).await.unwrap();
    }
    let apps = spoke.applications("argocd");
    wait_for(&apps, "fg", T, |a: &Application| {
        a.health_status() == Some("Healthy")
    })
    .await
    .unwrap();
    for n in ["orphan", "keep", "drop"] {
        wait_for(&cms, n, T, |_| true).await.unwrap();
    }
    let deployed: Api<ConfigMap> = Api::namespaced(spoke.client(), "guestbook");
    wait_for(&deployed, "fg", T, |_| true).await.unwrap();

    for n in ["fg", "orphan", "sel"] {
        works.delete(n, &DeleteParams::default()).await.unwrap();
    }
    for n in ["fg", "orphan", "sel"] {
        wait_deleted(&works, n, T).await.unwrap();
    }
    // Foreground: the Application went through Argo CD's finalizer, which removed what it deployed.
    assert!(apps.get_opt("fg").await.unwrap().is_none());
    assert!(deployed.get_opt("fg").await.unwrap().is_none());
    assert!(cms.get_opt("fg").await.unwrap().is_none());
    // Orphan and SelectivelyOrphan.
    assert!(cms.get_opt("orphan").await.unwrap().is_some());
    assert!(cms.get_opt("keep").await.unwrap().is_some());
    assert!(cms.get_opt("drop").await.unwrap().is_none());
    fleet.shutdown().await;
}

#[tokio::test]
async fn ssa_ignore_fields_keep_spoke_changes_until_the_work_changes() {
    let fleet = fleet(1).await;
    let works: Api<ManifestWork> = Api::namespaced(fleet.hub_client(), "cluster1");
    let apps = fleet.cluster("cluster1").unwrap().applications("argocd");
    let mut payload = app_payload("op");
    payload["operation"] = json!({"sync": {"revision": "v1"}});
    payload["metadata"]["annotations"] = json!({"argocd.argoproj.io/refresh": "normal"});
    works
        .create(
            &PostParams::default(),
            &work(
                "cluster1",
                "op",
                vec![payload.clone()],
                vec![pull_config("op")],
            ),
        )
        .await
        .unwrap();
    // Argo CD took the operation and the refresh request off the Application.
    let app = wait_for(&apps, "op", T, |a: &Application| {
        a.operation.is_none()
            && !a.annotations().contains_key("argocd.argoproj.io/refresh")
            && a.health_status() == Some("Healthy")
    })
    .await
    .unwrap();
    let op = &app
        .status
        .as_ref()
        .unwrap()
        .operation_state
        .as_ref()
        .unwrap()
        .operation;
    assert_eq!(op.as_ref().unwrap()["sync"]["revision"], "v1");

    // Drift in a field the work owns is reverted; the ignored fields stay as the spoke left them.
    apps.patch(
        "op",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"project": "drifted"}})),
    )
    .await
    .unwrap();
    let app = wait_for(&apps, "op", T, |a: &Application| {
        a.spec.project == "default"
    })
    .await
    .unwrap();
    assert!(
        app.operation.is_none(),
        "operation re-applied: {:?}",
        app.operation
    );
    assert!(!app.annotations().contains_key("argocd.argoproj.io/refresh"));

    // A new operation in the work reaches the cluster.
    let mut w = works.get("op").await.unwrap();
    w.spec.workload.manifests[0]["operation"] = json!({"sync": {"revision": "v2"}});
    works
        .replace("op", &PostParams::default(), &w)
        .await
        .unwrap();
    wait_for(&apps, "op", T, |a: &Application| {
        a.operation.is_none()
            && a.status
                .as_ref()
                .and_then(|s| s.operation_state.as_ref())
                .and_then(|o| o.operation.as_ref())
                .is_some_and(|o| o["sync"]["revision"] == "v2")
    })
    .await
    .unwrap();
    fleet.shutdown().await;
}

use kube::ResourceExt;

#[tokio::test]
async fn feedback_integer_jsonraw_and_well_known_status_follow_the_cluster() {
    let fleet = fleet(1).await;
    let works: Api<ManifestWork> = Api::namespaced(fleet.hub_client(), "cluster1");
    let spoke = fleet.cluster("cluster1").unwrap();
    let deploy = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}
    });
    let configs = vec![
        json!({"resourceIdentifier": {"group": "argoproj.io", "resource": "applications", "namespace": "argocd", "name": "fb"},
        "feedbackRules": [{"type": "JSONPaths", "jsonPaths": [
            {"name": "generation", "path": ".metadata.generation"},
            {"name": "resources", "path": ".status.resources"},
            {"name": "health", "path": ".status.health"},
        ]}]}),
        json!({"resourceIdentifier": {"group": "apps", "resource": "deployments", "namespace": "default", "name": "web"},
               "feedbackRules": [{"type": "WellKnownStatus"}]}),
    ];
    works
        .create(
            &PostParams::default(),
            &work("cluster1", "fb", vec![app_payload("fb"), deploy], configs),
        )
        .await
        .unwrap();
    let w = wait_for(&works, "fb", T, |w: &ManifestWork| {
        feedback(w, 0, "health").is_some_and(|h| h.contains("Healthy"))
    })
    .await
    .unwrap();
    let values = &w
        .status
        .as_ref()
        .unwrap()
        .resource_status
        .as_ref()
        .unwrap()
        .manifests[0]
        .status_feedback
        .as_ref()
        .unwrap()
        .values;
    let by = |n: &str| {
        values
            .iter()
            .find(|v| v.name == n)
            .unwrap()
            .field_value
            .clone()
    };
    assert_eq!(by("generation").type_, "Integer");
    assert!(by("generation").integer.unwrap() >= 1);
    assert_eq!(by("resources").type_, "JsonRaw");
    let res: serde_json::Value =
        serde_json::from_str(by("resources").json_raw.as_deref().unwrap()).unwrap();
    assert_eq!(res[0]["kind"], "ConfigMap");
    assert_eq!(
        manifest_condition(&w, 0, "StatusFeedbackSynced").unwrap().0,
        "True"
    );

    // The Deployment's status changes on the cluster: the feedback follows.
    let deployments: Api<Deployment> = Api::namespaced(spoke.client(), "default");
    deployments
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"status": {"replicas": 3, "readyReplicas": 2, "availableReplicas": 2}}),
            ),
        )
        .await
        .unwrap();
    let w = wait_for(&works, "fb", T, |w: &ManifestWork| {
        feedback(w, 1, "ReadyReplicas").as_deref() == Some("2")
    })
    .await
    .unwrap();
    assert_eq!(feedback(&w, 1, "Replicas").as_deref(), Some("3"));
    assert_eq!(feedback(&w, 1, "AvailableReplicas").as_deref(), Some("2"));
    fleet.shutdown().await;
}

#[tokio::test]
async fn missing_namespace_fails_until_the_work_carries_it() {
    let fleet = fleet(1).await;
    let works: Api<ManifestWork> = Api::namespaced(fleet.hub_client(), "cluster1");
    let spoke = fleet.cluster("cluster1").unwrap();
    works
        .create(
            &PostParams::default(),
            &work(
                "cluster1",
                "ns",
                vec![configmap("team-a", "cfg", json!({}))],
                vec![],
            ),
        )
        .await
        .unwrap();
    let w = wait_for(&works, "ns", T, |w: &ManifestWork| {
        w.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == "Applied" && c.status == "False")
        })
    })
    .await
    .unwrap();
    let (status, message) = manifest_condition(&w, 0, "Applied").unwrap();
    assert_eq!(status, "False");
    assert!(message.contains("team-a"), "{message}");
    assert!(
        Api::<Namespace>::all(spoke.client())
            .get_opt("team-a")
            .await
            .unwrap()
            .is_none(),
        "the agent does not create namespaces on its own"
    );

    let mut w = works.get("ns").await.unwrap();
    w.spec.workload.manifests.insert(
        0,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}),
    );
    works
        .replace("ns", &PostParams::default(), &w)
        .await
        .unwrap();
    wait_for(&works, "ns", T, |w: &ManifestWork| {
        w.condition_true("Applied") && w.condition_true("Available")
    })
    .await
    .unwrap();
    assert!(
        Api::<ConfigMap>::namespaced(spoke.client(), "team-a")
            .get_opt("cfg")
            .await
            .unwrap()
            .is_some()
    );
    fleet.shutdown().await;
}

#[tokio::test]
async fn work_outside_cluster_namespaces_is_ignored_until_the_cluster_joins() {
    let fleet = fleet(1).await;
    let hub = fleet.hub_client();
    let nss: Api<Namespace> = Api::all(hub.clone());
    nss.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "late"}})).unwrap(),
    )
    .await
    .unwrap();
    let stray: Api<ManifestWork> = Api::namespaced(hub.clone(), "late");
    stray
        .create(
            &PostParams::default(),
            &work(
                "late",
                "w",
                vec![configmap("default", "x", json!({}))],
                vec![],
            ),
        )
        .await
        .unwrap();
    // A work of a real cluster, created after the stray one, gets processed...
    let works: Api<ManifestWork> = Api::namespaced(hub.clone(), "cluster1");
    works
        .create(
            &PostParams::default(),
            &work(
                "cluster1",
                "w",
                vec![configmap("default", "x", json!({}))],
                vec![],
            ),
        )
        .await
        .unwrap();
    wait_for(&works, "w", T, |w: &ManifestWork| {
        w.condition_true("Applied")
    })
    .await
    .unwrap();
    // ...the stray one was left alone.
    let s = stray.get("w").await.unwrap();
    assert!(
        s.status.is_none() && s.metadata.finalizers.is_none(),
        "{s:?}"
    );

    // When cluster "late" joins, its work is applied.
    let late = fleet.add_cluster("late", Default::default()).await.unwrap();
    wait_for(&stray, "w", T, |w: &ManifestWork| {
        w.condition_true("Applied")
    })
    .await
    .unwrap();
    assert!(
        Api::<ConfigMap>::namespaced(late.client(), "default")
            .get_opt("x")
            .await
            .unwrap()
            .is_some()
    );
    fleet.shutdown().await;
}

#[tokio::test]
async fn no_write_when_nothing_changed() {
    let fleet = fleet(1).await;
    let works: Api<ManifestWork> = Api::namespaced(fleet.hub_client(), "cluster1");
    let spoke = fleet.cluster("cluster1").unwrap();
    works
        .create(
            &PostParams::default(),
            &work(
                "cluster1",
                "quiet",
                vec![app_payload("quiet")],
                vec![pull_config("quiet")],
            ),
        )
        .await
        .unwrap();
    wait_for(&works, "quiet", T, |w: &ManifestWork| {
        feedback(w, 0, "healthStatus").as_deref() == Some("Healthy")
    })
    .await
    .unwrap();
    let before = fleet.agent_counts();
    let hub_before = fleet.hub().counters();
    // A change on the cluster the work does not care about makes the agent look again...
    spoke
        .applications("argocd")
        .patch(
            "quiet",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"unrelated": "x"}}})),
        )
        .await
        .unwrap();
    poll_until(T, "the agent to reconcile the work", || async {
        (fleet.agent_counts().reconciles > before.reconciles).then_some(())
    })
    .await
    .unwrap();
    // ...and writes nothing.
    let after = fleet.agent_counts();
    assert_eq!(after.spoke_writes, before.spoke_writes);
    assert_eq!(after.status_writes, before.status_writes);
    assert_eq!(
        fleet
            .hub()
            .counters()
            .since(&hub_before)
            .writes_to("manifestworks"),
        0
    );
    fleet.shutdown().await;
}
