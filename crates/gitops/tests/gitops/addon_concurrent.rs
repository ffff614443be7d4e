//! Two `argoCDAgentAddon` controller instances against one hub at once (a Lease hand-over
//! overlaps for a moment; two processes pointed at one hub): the key material is created once,
//! and one CA is everywhere — the hub's `argocd-agent-ca`, its bundle, every certificate, and
//! what the work agent delivers to each spoke.

use argocd_pull_api::crds;
use argocd_pull_gitops::addon::apply::{self, WriteError};
use argocd_pull_gitops::addon::pki;
use argocd_pull_gitops::{GitOpsConfig, Running};
use argocd_pull_sim::{Fleet, FleetConfig};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};

use crate::util::{b64, eventually_within, secret_value, unb64};

const ALPHA: &str = "apps.open-cluster-management.io/v1alpha1";
/// Two instances generate RSA-4096 JWT keys at once in a debug build, on a shared machine.
const SETUP: std::time::Duration = std::time::Duration::from_secs(180);

fn addon_only() -> GitOpsConfig {
    GitOpsConfig {
        gitopscluster: false,
        report: false,
        addon_agent_image: "example.invalid/argocd-pull:test".into(),
        ..GitOpsConfig::default()
    }
}

fn dynamic(
    client: &kube::Client,
    api_version: &str,
    kind: &str,
    plural: &str,
    ns: Option<&str>,
) -> Api<DynamicObject> {
    let (g, v) = api_version.split_once('/').unwrap_or(("", api_version));
    let ar = kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk(g, v, kind),
        plural,
    );
    match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    }
}

async fn get(
    client: &kube::Client,
    av: &str,
    kind: &str,
    plural: &str,
    ns: &str,
    name: &str,
) -> Option<Value> {
    dynamic(client, av, kind, plural, Some(ns))
        .get_opt(name)
        .await
        .unwrap()
        .map(|o| serde_json::to_value(o).unwrap())
}

async fn secret(client: &kube::Client, ns: &str, name: &str) -> Option<Value> {
    get(client, "v1", "Secret", "secrets", ns, name).await
}

fn reconciles(r: &Running) -> u64 {
    r.metrics.reconcile.reconciles("argocd-agent-addon")
}

/// Every distinct value `read` ever finds in the object `name` (a watch from now on).
fn record(
    api: Api<DynamicObject>,
    name: &str,
    read: fn(&Value) -> Option<String>,
) -> (Arc<Mutex<Vec<String>>>, tokio::task::JoinHandle<()>) {
    let seen: Arc<Mutex<Vec<String>>> = Default::default();
    let s = seen.clone();
    let cfg = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let task = tokio::spawn(async move {
        let mut events = std::pin::pin!(watcher(api, cfg).applied_objects());
        while let Some(Ok(o)) = events.next().await {
            if let Some(v) = read(&serde_json::to_value(o).unwrap()) {
                let mut s = s.lock().unwrap();
                if !s.contains(&v) {
                    s.push(v);
                }
            }
        }
    });
    (seen, task)
}

fn tls_crt(s: &Value) -> Option<String> {
    secret_value(s, "tls.crt")
}

fn ca_crt(s: &Value) -> Option<String> {
    secret_value(s, "ca.crt")
}

fn jwt_key(s: &Value) -> Option<String> {
    secret_value(s, "jwt.key")
}

fn bundle_crt(c: &Value) -> Option<String> {
    c["data"]["ca-bundle.crt"].as_str().map(String::from)
}

/// Every certificate of a PEM bundle, as DER.
fn ders(pem: &str) -> Vec<Vec<u8>> {
    pki::parse_all(pem).into_iter().map(|c| c.der).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_at_once_make_one_ca_everywhere() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let fleet = Fleet::start(FleetConfig {
        argo_sim: false,
        replicasets: false,
        ..FleetConfig::with_clusters(3)
    })
    .await
    .unwrap();
    for crd in crds::OWN {
        fleet.hub().install_crds_yaml(crd).unwrap();
    }
    let hub = fleet.hub_client();
    let ssa = PatchParams::apply("test").force();
    dynamic(
        &hub,
        "cluster.open-cluster-management.io/v1beta1",
        "Placement",
        "placements",
        Some("argocd"),
    )
    .patch(
        "fleet",
        &ssa,
        &Patch::Apply(json!({
            "apiVersion": "cluster.open-cluster-management.io/v1beta1", "kind": "Placement",
            "metadata": {"name": "fleet", "namespace": "argocd"}, "spec": {}})),
    )
    .await
    .unwrap();
    // The GitOpsCluster exists before either instance starts: both find it in their first list
    // and reconcile it at the same moment, each finding no key material.
    dynamic(
        &hub,
        ALPHA,
        "GitOpsCluster",
        "gitopsclusters",
        Some("argocd"),
    )
    .patch(
        "gc",
        &ssa,
        &Patch::Apply(json!({
            "apiVersion": ALPHA, "kind": "GitOpsCluster",
            "metadata": {"name": "gc", "namespace": "argocd"},
            "spec": {"placementRef": {"kind": "Placement", "name": "fleet"},
                     "argoCDAgentAddon": {"principalServerAddress": "principal.example.com",
                                          "principalServerPort": "443"}}})),
    )
    .await
    .unwrap();
    // Everything each copy of the key material ever holds, from before either instance starts.
    let core =
        |kind: &str, plural: &str, c: &kube::Client| dynamic(c, "v1", kind, plural, Some("argocd"));
    let clusters = fleet.cluster_names();
    let mut records = vec![
        (
            "hub Secret argocd-agent-ca tls.crt".to_string(),
            record(core("Secret", "secrets", &hub), "argocd-agent-ca", tls_crt),
        ),
        (
            "hub Secret argocd-agent-jwt".into(),
            record(core("Secret", "secrets", &hub), "argocd-agent-jwt", jwt_key),
        ),
        (
            "hub ConfigMap argocd-agent-ca-bundle".into(),
            record(
                core("ConfigMap", "configmaps", &hub),
                "argocd-agent-ca-bundle",
                bundle_crt,
            ),
        ),
    ];
    for c in &clusters {
        let spoke = fleet.cluster(c).unwrap().client();
        records.push((
            format!("spoke {c} Secret argocd-agent-ca"),
            record(core("Secret", "secrets", &spoke), "argocd-agent-ca", ca_crt),
        ));
    }
    let (a, b) = tokio::join!(
        argocd_pull_gitops::start(hub.clone(), addon_only()),
        argocd_pull_gitops::start(hub.clone(), addon_only())
    );
    let (a, b) = (a.unwrap(), b.unwrap());

    // Converged: every spoke holds the CA bundle its work delivers, and that bundle is the hub's.
    let ca = eventually_within(SETUP, "the hub's CA bundle on every spoke", || async {
        let ca = secret(&hub, "argocd", "argocd-agent-ca").await?;
        let bundle = secret_value(&ca, "ca.crt")?;
        for c in &clusters {
            let spoke = fleet.cluster(c)?.client();
            let s = secret(&spoke, "argocd", "argocd-agent-ca").await?;
            if secret_value(&s, "ca.crt")? != bundle {
                return None;
            }
        }
        Some(ca)
    })
    .await;

    // One CA: the bundle is exactly the CA of `argocd-agent-ca`.
    let ca_pem = secret_value(&ca, "tls.crt").unwrap();
    let the_ca = pki::parse(&ca_pem).unwrap();
    let bundle = secret_value(&ca, "ca.crt").unwrap();
    assert_eq!(
        ders(&bundle),
        vec![the_ca.der.clone()],
        "the bundle holds one CA, the one in argocd-agent-ca (two instances each made one?)"
    );
    let cm = get(
        &hub,
        "v1",
        "ConfigMap",
        "configmaps",
        "argocd",
        "argocd-agent-ca-bundle",
    )
    .await
    .unwrap();
    assert_eq!(
        ders(cm["data"]["ca-bundle.crt"].as_str().unwrap()),
        vec![the_ca.der.clone()]
    );
    for c in &clusters {
        let work = get(
            &hub,
            "work.open-cluster-management.io/v1",
            "ManifestWork",
            "manifestworks",
            c,
            "argocd-agent-ca-mw",
        )
        .await
        .unwrap();
        let shipped = unb64(&work["spec"]["workload"]["manifests"][1]["data"]["ca.crt"]);
        assert_eq!(
            ders(&shipped),
            vec![the_ca.der.clone()],
            "the CA work of {c}"
        );
        let spoke = fleet.cluster(c).unwrap().client();
        let s = secret(&spoke, "argocd", "argocd-agent-ca").await.unwrap();
        assert_eq!(
            ders(&secret_value(&s, "ca.crt").unwrap()),
            vec![the_ca.der.clone()],
            "the spoke {c}"
        );
        // The cluster secret: a client certificate of this CA, and this CA as caData.
        let cs = secret(&hub, "argocd", &format!("cluster-{c}"))
            .await
            .unwrap();
        let config: Value = serde_json::from_str(&secret_value(&cs, "config").unwrap()).unwrap();
        let tls = &config["tlsClientConfig"];
        let client = pki::parse(&unb64(&tls["certData"])).unwrap();
        assert!(
            pki::signed_by(&client, &the_ca),
            "cluster-{c}'s client certificate"
        );
        assert_eq!(
            ders(&unb64(&tls["caData"])),
            vec![the_ca.der.clone()],
            "cluster-{c}'s caData"
        );
    }
    for leaf in [
        "argocd-agent-principal-tls",
        "argocd-agent-resource-proxy-tls",
    ] {
        let s = secret(&hub, "argocd", leaf).await.unwrap();
        let chain = pki::parse_all(&secret_value(&s, "tls.crt").unwrap());
        assert!(
            pki::signed_by(&chain[0], &the_ca),
            "{leaf} is signed by the CA"
        );
        assert_eq!(chain[1].der, the_ca.der, "{leaf} carries the CA");
    }

    // Another pass of both instances replaces nothing.
    let key_material = || async {
        let mut rvs = Vec::new();
        for n in [
            "argocd-agent-jwt",
            "argocd-agent-ca",
            "argocd-agent-principal-tls",
            "argocd-agent-resource-proxy-tls",
        ] {
            let s = secret(&hub, "argocd", n).await.unwrap();
            rvs.push((n, s["metadata"]["resourceVersion"].clone()));
        }
        rvs
    };
    let before = key_material().await;
    let (ra, rb) = (reconciles(&a), reconciles(&b));
    dynamic(
        &hub,
        ALPHA,
        "GitOpsCluster",
        "gitopsclusters",
        Some("argocd"),
    )
    .patch(
        "gc",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {"touch": "1"}}})),
    )
    .await
    .unwrap();
    eventually_within(SETUP, "a pass of each instance", || async {
        (reconciles(&a) > ra && reconciles(&b) > rb).then_some(())
    })
    .await;
    // Over the whole run, each copy only ever held the one CA (and the one JWT key).
    for (what, (seen, task)) in records {
        task.abort();
        let seen = seen.lock().unwrap().clone();
        assert_eq!(
            seen.len(),
            1,
            "{what} held {} different values over the run",
            seen.len()
        );
        if what.contains("argocd-agent-ca") || what.contains("bundle") {
            assert_eq!(ders(&seen[0]), vec![the_ca.der.clone()], "{what}");
        }
    }
    assert_eq!(key_material().await, before, "no key material replaced");
    for r in [a, b] {
        tokio::time::timeout(crate::util::TIMEOUT, r.shutdown())
            .await
            .unwrap();
    }
    fleet.shutdown().await;
}

/// The write rule itself: of two writers that both found an object missing, one creates it and
/// the other is told it lost; a writer that read an older version cannot replace a newer one.
#[tokio::test]
async fn a_guarded_write_never_replaces_what_another_writer_made() {
    let env = crate::util::Env::start(GitOpsConfig {
        gitopscluster: false,
        report: false,
        addon: false,
        ..GitOpsConfig::default()
    })
    .await;
    env.namespace("argocd", &[]).await;
    let secret = |v: &str| {
        json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": "argocd-agent-jwt", "namespace": "argocd"},
        "data": {"jwt.key": b64(v)}})
    };
    let first = apply::ensure_guarded(&env.client, None, &secret("one"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        apply::ensure_guarded(&env.client, None, &secret("two")).await,
        Err(WriteError::Lost),
        "the second create loses"
    );
    // The winner's object stands; a writer that read it may change it once.
    let live = env
        .get("v1", "Secret", Some("argocd"), "argocd-agent-jwt")
        .await
        .unwrap();
    assert_eq!(secret_value(&live, "jwt.key").unwrap(), "one");
    let newer = apply::ensure_guarded(&env.client, Some(&first), &secret("three"))
        .await
        .unwrap()
        .unwrap();
    // `first` is now an older read: writing from it loses, and the newer version stands.
    assert_eq!(
        apply::ensure_guarded(&env.client, Some(&first), &secret("four")).await,
        Err(WriteError::Lost),
        "a write from an older read loses"
    );
    let live = env
        .get("v1", "Secret", Some("argocd"), "argocd-agent-jwt")
        .await
        .unwrap();
    assert_eq!(secret_value(&live, "jwt.key").unwrap(), "three");
    assert_eq!(
        live["metadata"]["resourceVersion"],
        newer["metadata"]["resourceVersion"]
    );
    // Nothing to write when the live object already holds it.
    assert_eq!(
        apply::ensure_guarded(&env.client, Some(&newer), &secret("three")).await,
        Ok(None)
    );
    env.stop().await;
}
