//! End-to-end on the embedded hub and the simulated work agent (`argocd-pull-sim`): the plugin
//! binary generates works for two clusters from the corpus → they are server-side applied to the
//! hub as Argo CD would → the simulated work agent applies the manifests on each simulated
//! cluster → Applied/Available and the status feedback show up on the hub's ManifestWorks.
//!
//! Nothing on a simulated cluster plays the Deployment controller, so the test does: it writes
//! the Deployment's `status` on each cluster, and the feedback must follow on the hub. The
//! health check from `cmp install` turns from Progressing to Healthy on the hub's works.
//!
//! With a Placement target, the ManifestWorkReplicaSet goes to the hub, the simulated replica-set
//! controller fans it out to the placement's clusters, and its health check follows the summary.

use std::time::Duration;

use argocd_pull_sim::{Fleet, FleetConfig};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Service};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::wait::await_condition;
use serde_json::json;

use argocd_pull_api::ocm::cluster::Placement;
use argocd_pull_api::ocm::work::ManifestWorkReplicaSet;
use argocd_pull_cmp::install::{MANIFESTWORK_HEALTH_LUA, MANIFESTWORKREPLICASET_HEALTH_LUA};
use argocd_pull_sim::wait::wait_for;
use kube::api::PostParams;

use crate::support::{argocd_health, condition_true, corpus, documents, feedback, ok, run_cmp};

const T: Duration = Duration::from_secs(30);
const CLUSTERS: [&str; 2] = ["cluster1", "cluster2"];

fn works_api(client: kube::Client, cluster: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("work.open-cluster-management.io", "v1", "ManifestWork");
    let ar = ApiResource::from_gvk_with_plural(&gvk, "manifestworks");
    Api::namespaced_with(client, cluster, &ar)
}

/// Waits (a watch, under a timeout) until the work satisfies `pred`; panics with the last state.
async fn wait_work(
    api: &Api<DynamicObject>,
    what: &str,
    pred: impl Fn(&DynamicObject) -> bool,
) -> DynamicObject {
    let cond = await_condition(
        api.clone(),
        "guestbook",
        move |w: Option<&DynamicObject>| w.is_some_and(&pred),
    );
    match tokio::time::timeout(T, cond).await {
        Ok(Ok(Some(work))) => work,
        other => {
            let last = api.get("guestbook").await;
            panic!("{what}: not reached in {T:?} ({other:?}); last seen: {last:#?}")
        }
    }
}

fn manifest_applied(work: &DynamicObject, kind: &str, name: &str) -> bool {
    work.data
        .pointer("/status/resourceStatus/manifests")
        .and_then(|m| m.as_array())
        .is_some_and(|ms| {
            ms.iter().any(|m| {
                m["resourceMeta"]["kind"] == kind
                    && m["resourceMeta"]["name"] == name
                    && m["conditions"].as_array().is_some_and(|c| {
                        c.iter()
                            .any(|c| c["type"] == "Applied" && c["status"] == "True")
                    })
            })
        })
}

#[tokio::test]
async fn generated_works_are_applied_by_the_simulated_agent_and_report_feedback() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    // generate: the plugin binary, in the app's source directory, as Argo CD's repo-server runs it
    let out = ok(&run_cmp(
        &corpus("plain"),
        &[
            "generate",
            "--include",
            "{namespace.yaml,app/config.yaml,app/deployment.yaml,app/service.yml}",
        ],
        &[
            ("ARGOCD_APP_NAME", "guestbook"),
            ("ARGOCD_ENV_TARGET_CLUSTER", "cluster2,cluster1"),
        ],
        None,
    ));
    let works = documents(&out);
    assert_eq!(works.len(), 2, "one work per cluster");

    let mut config = FleetConfig::with_clusters(2);
    config.argo_sim = false; // no Argo CD Applications in this test
    config.agent.retry_interval = Duration::from_millis(100);
    let fleet = Fleet::start(config).await.expect("fleet starts");
    assert_eq!(fleet.cluster_names(), CLUSTERS);

    // apply to the hub: server-side, as Argo CD does with the ServerSideApply=true sync option
    for work in &works {
        let work: DynamicObject = serde_json::from_value(work.clone()).expect("a work object");
        let cluster = work.metadata.namespace.clone().expect("work namespace");
        let name = work.metadata.name.clone().expect("work name");
        works_api(fleet.hub_client(), &cluster)
            .patch(
                &name,
                &PatchParams::apply("argocd-controller").force(),
                &Patch::Apply(&work),
            )
            .await
            .expect("apply the ManifestWork to the hub");
    }

    for cluster in CLUSTERS {
        let sim = fleet.cluster(cluster).expect("simulated cluster");
        let works = works_api(fleet.hub_client(), cluster);

        // the agent applies every manifest and reports the work Applied and Available
        let work = wait_work(&works, cluster, |w| {
            condition_true(w, "Applied")
                && condition_true(w, "Available")
                && ["Namespace", "ConfigMap", "Service", "Deployment"]
                    .iter()
                    .all(|k| {
                        let name = match *k {
                            "Namespace" => "guestbook",
                            "ConfigMap" => "guestbook-config",
                            _ => "guestbook-ui",
                        };
                        manifest_applied(w, k, name)
                    })
        })
        .await;
        // desired replicas come from the spec, before any controller has run
        assert_eq!(
            feedback(&work, "Deployment", "guestbook-ui", "DesiredReplicas"),
            Some(2),
            "{cluster}"
        );
        // what the hub's Argo CD shows with the health check from `cmp install`
        let (status, message) = argocd_health(MANIFESTWORK_HEALTH_LUA, &json!(work));
        assert_eq!(status, "Progressing", "{cluster}: {message}");
        assert!(message.contains("Deployment guestbook/guestbook-ui: 0/2 replicas available"));

        // the objects exist on the simulated cluster, with the manifests' types intact
        let client = sim.client();
        Api::<Namespace>::all(client.clone())
            .get("guestbook")
            .await
            .expect("namespace on the cluster");
        let cm = Api::<ConfigMap>::namespaced(client.clone(), "guestbook")
            .get("guestbook-config")
            .await
            .expect("configmap on the cluster");
        let data = cm.data.expect("configmap data");
        assert_eq!(data["mode"], "0755");
        assert_eq!(data["version"], "1.10");
        let svc = Api::<Service>::namespaced(client.clone(), "guestbook")
            .get("guestbook-ui")
            .await
            .expect("service on the cluster");
        assert_eq!(svc.spec.and_then(|s| s.ports).expect("ports")[0].port, 80);
        let deployments = Api::<Deployment>::namespaced(client.clone(), "guestbook");
        let deploy = deployments
            .get("guestbook-ui")
            .await
            .expect("deployment on the cluster");
        let deploy = serde_json::to_value(&deploy).expect("deployment as JSON");
        let pod = &deploy["spec"]["template"]["spec"];
        assert_eq!(
            pod["volumes"][0]["configMap"]["defaultMode"], 420,
            "plain 0644 reached the cluster as octal"
        );
        let env = &pod["containers"][0]["env"];
        assert_eq!(env[0]["value"], "0755", "quoted scalars stay strings");
        assert_eq!(env[1]["value"], "yes");

        // play the cluster's Deployment controller: the rollout finishes
        deployments
            .patch_status(
                "guestbook-ui",
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {
                    "observedGeneration": 1, "replicas": 2, "updatedReplicas": 2,
                    "readyReplicas": 2, "availableReplicas": 2,
                }})),
            )
            .await
            .expect("write the deployment status on the cluster");

        // the feedback the health check reads is visible on the hub
        let work = wait_work(&works, cluster, |w| {
            feedback(w, "Deployment", "guestbook-ui", "AvailableReplicas") == Some(2)
                && feedback(w, "Deployment", "guestbook-ui", "UpdatedReplicas") == Some(2)
        })
        .await;
        for (field, value) in [
            ("ReadyReplicas", 2),
            ("Replicas", 2),
            ("DesiredReplicas", 2),
        ] {
            assert_eq!(
                feedback(&work, "Deployment", "guestbook-ui", field),
                Some(value),
                "{cluster}: {field}"
            );
        }
        let (status, message) = argocd_health(MANIFESTWORK_HEALTH_LUA, &json!(work));
        assert_eq!(status, "Healthy", "{cluster}: {message}");
    }
    fleet.shutdown().await;
}

#[tokio::test]
async fn a_placement_target_is_fanned_out_to_the_placement_clusters() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let out = ok(&run_cmp(
        &corpus("plain"),
        &[
            "generate",
            "--include",
            "{namespace.yaml,app/config.yaml,app/service.yml}",
        ],
        &[
            ("ARGOCD_APP_NAME", "guestbook"),
            ("ARGOCD_APP_NAMESPACE", "argocd"),
            ("ARGOCD_ENV_PLACEMENT", "argocd/guestbook-clusters"),
        ],
        None,
    ));
    let sets = documents(&out);
    assert_eq!(sets.len(), 1, "one ManifestWorkReplicaSet");
    let set: ManifestWorkReplicaSet =
        serde_json::from_value(sets[0].clone()).expect("a ManifestWorkReplicaSet");

    let mut config = FleetConfig::with_clusters(3);
    config.argo_sim = false;
    config.agent.retry_interval = Duration::from_millis(100);
    let fleet = Fleet::start(config).await.expect("fleet starts");
    let hub = fleet.hub_client();
    let placement: Placement = serde_json::from_value(json!({
        "apiVersion": "cluster.open-cluster-management.io/v1beta1", "kind": "Placement",
        "metadata": {"name": "guestbook-clusters", "namespace": "argocd"},
        "spec": {"numberOfClusters": 2},
    }))
    .expect("a placement");
    Api::<Placement>::namespaced(hub.clone(), "argocd")
        .create(&PostParams::default(), &placement)
        .await
        .expect("create the placement");
    let api: Api<ManifestWorkReplicaSet> = Api::namespaced(hub.clone(), "argocd");
    api.patch(
        &set.metadata.name.clone().expect("name"),
        &PatchParams::apply("argocd-controller").force(),
        &Patch::Apply(&set),
    )
    .await
    .expect("apply the ManifestWorkReplicaSet to the hub");

    // the first two clusters (by name) get the work; the health check turns Healthy
    let set = wait_for(&api, "guestbook", T, |s: &ManifestWorkReplicaSet| {
        argocd_health(MANIFESTWORKREPLICASET_HEALTH_LUA, &json!(s)).0 == "Healthy"
    })
    .await
    .expect("the replica set becomes Healthy");
    let (_, message) = argocd_health(MANIFESTWORKREPLICASET_HEALTH_LUA, &json!(set));
    assert_eq!(message, "Available on 2 cluster(s)");
    for (cluster, expected) in [("cluster1", true), ("cluster2", true), ("cluster3", false)] {
        let cm = Api::<ConfigMap>::namespaced(
            fleet.cluster(cluster).expect("cluster").client(),
            "guestbook",
        )
        .get_opt("guestbook-config")
        .await
        .expect("get the configmap");
        assert_eq!(cm.is_some(), expected, "{cluster}");
    }
    fleet.shutdown().await;
}
