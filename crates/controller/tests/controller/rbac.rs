//! The ClusterRole in deploy/controller/rbac.yaml against the requests the controllers make.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use argocd_pull_api::names::FINALIZER_ARGOCD_RESOURCES;
use argocd_pull_controller::start;
use kube::Client;
use kube::api::DeleteParams;
use serde_json::{Value, json};

use crate::support::*;

type Grant = (String, String, String); // (group, resource, verb)

/// (group, resource, verb) of an API request.
fn grant_of(method: &http::Method, uri: &http::Uri) -> Option<Grant> {
    let parts: Vec<&str> = uri.path().trim_matches('/').split('/').collect();
    let (group, rest) = match parts.as_slice() {
        ["api", _v, rest @ ..] => (String::new(), rest),
        ["apis", g, _v, rest @ ..] => (g.to_string(), rest),
        _ => return None,
    };
    let rest = match rest {
        ["namespaces", _ns, tail @ ..] if !tail.is_empty() => tail,
        other => other,
    };
    let (resource, named) = match rest {
        [r] => (r.to_string(), false),
        [r, _name] => (r.to_string(), true),
        [r, _name, sub] => (format!("{r}/{sub}"), true),
        _ => return None,
    };
    let watch = uri.query().is_some_and(|q| q.contains("watch=true"));
    let verb = match (method.as_str(), named, watch) {
        ("GET", _, true) => "watch",
        ("GET", true, _) => "get",
        ("GET", false, _) => "list",
        ("POST", _, _) => "create",
        ("PUT", _, _) => "update",
        ("PATCH", _, _) => "patch",
        ("DELETE", true, _) => "delete",
        ("DELETE", false, _) => "deletecollection",
        _ => return None,
    };
    Some((group, resource, verb.to_string()))
}

/// A client to the hub that records every request's grant.
fn recording_client(inner: Client) -> (Client, Arc<Mutex<BTreeSet<Grant>>>) {
    let seen = Arc::new(Mutex::new(BTreeSet::new()));
    let s2 = seen.clone();
    let svc = tower::service_fn(move |req: http::Request<kube::client::Body>| {
        if let Some(g) = grant_of(req.method(), req.uri()) {
            s2.lock().unwrap().insert(g);
        }
        let inner = inner.clone();
        async move { inner.send(req).await }
    });
    (Client::new(svc, "default"), seen)
}

fn cluster_role() -> BTreeSet<Grant> {
    let yaml = include_str!("../../../../deploy/controller/rbac.yaml");
    let docs: Vec<Value> = serde_saphyr::from_multiple(yaml).unwrap();
    let role = docs
        .iter()
        .find(|d| d["kind"] == "ClusterRole")
        .expect("rbac.yaml has a ClusterRole");
    let mut grants = BTreeSet::new();
    for rule in role["rules"].as_array().unwrap() {
        for g in rule["apiGroups"].as_array().unwrap() {
            for r in rule["resources"].as_array().unwrap() {
                for v in rule["verbs"].as_array().unwrap() {
                    grants.insert((
                        g.as_str().unwrap().to_string(),
                        r.as_str().unwrap().to_string(),
                        v.as_str().unwrap().to_string(),
                    ));
                }
            }
        }
    }
    grants
}

fn g(group: &str, resource: &str, verb: &str) -> Grant {
    (group.into(), resource.into(), verb.into())
}

#[tokio::test]
async fn cluster_role_covers_exactly_what_the_controllers_call() {
    let env = Env::new().await;
    let (client, seen) = recording_client(env.client.clone());
    let mut config = Env::config();
    config.binding_gate = true;
    let running = start(client, config).await.unwrap();
    tokio::time::timeout(TIMEOUT, running.wait_ready())
        .await
        .unwrap();

    // every path: missing cluster (Event), propagation with operation, update, status,
    // binding gate, delete with finalizer, sweep of a deleted Application
    let pd: argocd_pull_api::ocm::cluster::PlacementDecision = serde_json::from_value(json!({
        "metadata": {"name": "p1", "namespace": "argocd"}
    }))
    .unwrap();
    let pds: kube::Api<argocd_pull_api::ocm::cluster::PlacementDecision> =
        kube::Api::namespaced(env.client.clone(), "argocd");
    pds.create(&Default::default(), &pd).await.unwrap();
    pds.patch_status(
        "p1",
        &Default::default(),
        &kube::api::Patch::Merge(
            json!({"status": {"decisions": [{"clusterName": "cluster1", "reason": ""}]}}),
        ),
    )
    .await
    .unwrap();
    let app = env
        .create_app(
            "app1",
            "cluster1",
            json!({"metadata": {"finalizers": [FINALIZER_ARGOCD_RESOURCES]}, "operation": {"sync": {}}}),
        )
        .await;
    let other = env.create_app("app2", "cluster1", json!({})).await;
    eventually("a Warning Event", || async {
        seen.lock()
            .unwrap()
            .contains(&g("events.k8s.io", "events", "create"))
            .then_some(())
    })
    .await;
    env.cluster("cluster1", true).await;
    let work = eventually("work", || env.work_of(&app, "cluster1")).await;
    eventually("work2", || env.work_of(&other, "cluster1")).await;
    env.patch_app("app1", json!({"spec": {"source": {"path": "x"}}}))
        .await;
    env.feedback(
        &work,
        string_feedback(&[("healthStatus", "Healthy"), ("syncStatus", "Synced")]),
    )
    .await;
    eventually("status", || async {
        (env.get_app("app1").await?.health_status() == Some("Healthy")).then_some(())
    })
    .await;
    env.apps()
        .delete("app1", &DeleteParams::default())
        .await
        .unwrap();
    env.apps()
        .delete("app2", &DeleteParams::default())
        .await
        .unwrap();
    eventually("cleaned up", || async {
        env.works_in("cluster1").await.is_empty().then_some(())
    })
    .await;
    eventually("Application gone", || async {
        env.get_app("app1").await.is_none().then_some(())
    })
    .await;
    running.sweep_now().await.unwrap();
    running.shutdown().await;

    let used = seen.lock().unwrap().clone();
    let granted = cluster_role();
    let missing: Vec<_> = used.difference(&granted).collect();
    assert!(
        missing.is_empty(),
        "requests not granted by the ClusterRole: {missing:?}"
    );
    // granted, but not reached by this scenario (each on a rare path)
    let rare: BTreeSet<Grant> = [
        g("work.open-cluster-management.io", "manifestworks", "get"), // create found an uncached work
        g("events.k8s.io", "events", "patch"),                        // a repeated Event
    ]
    .into();
    let unused: Vec<_> = granted
        .difference(&used)
        .filter(|x| !rare.contains(x))
        .collect();
    assert!(
        unused.is_empty(),
        "granted but never used (least privilege): {unused:?}"
    );
}
