//! Faults on the real env (`/work/shared/realenv`: a real kube-apiserver 1.24 with its own etcd,
//! OCM's CRDs), each ending with 0 lost and 0 stuck objects ([`harness::Audit`]): every live
//! Application has its ManifestWork, equal to the desired one; no work without a live
//! Application; no Application left in deletion (the resources finalizer is removed) or with an
//! operation not handed over.
//!
//! The controller runs as a **child process** (this test binary re-run as
//! [`controller_process`], default configuration), so it can be killed with `-9`; its log goes to
//! a file under the temp dir (the path is printed). Run only when `ARGOCD_PULL_E2E_HUB_KUBECONFIG`
//! names the hub's admin kubeconfig; the two that stop the hub API server also need
//! `ARGOCD_PULL_E2E_DISRUPTIVE=1` (the env is shared; they bring it back with `$REALK8S/up.sh`,
//! also when they fail). Each prints a visible `SKIP:` otherwise. The tests of this module run
//! one at a time (each owns the hub's pull-labelled objects while its controller runs):
//!
//! ```sh
//! source /work/notes/realenv.env   # the kubeconfigs, REALK8S
//! ARGOCD_PULL_E2E_DISRUPTIVE=1 cargo test -p argocd-pull-controller --test controller -- faults --nocapture
//! ```
//!
//! Nothing sleeps to synchronise: each step polls the API (or the controller's log) for the
//! state it needs, under a bounded deadline.

mod appset;
mod harness;
mod view;

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use argocd_pull_api::ocm::work::ManifestWork;
use argocd_pull_controller::{ControllerConfig, start};
use argocd_pull_domain::{WorkOptions, desired_work};
use futures::StreamExt;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use harness::{Fleet, Real, app_name, ok_or_exists, real};
use view::FleetView;

/// One fault test at a time, and never beside the e2e test (each owns the hub's pull-labelled
/// Applications while its controller runs).
use crate::support::REAL_ENV as SERIAL;

const STARTED: &str = "caches filled; controllers starting";
const START_WITHIN: Duration = Duration::from_secs(60);

/// The controller child process (see the module docs): the library's controllers with the
/// default configuration, against the kubeconfig in `ARGOCD_PULL_FAULTS_CHILD_KUBECONFIG`,
/// until it is killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the controller process the fault tests spawn and kill"]
async fn controller_process() {
    let Some(path) = std::env::var_os(harness::CHILD_ENV) else {
        harness::skip("controller_process", "started by the fault tests only");
        return;
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();
    argocd_pull_controller::install_crypto_provider();
    let client = harness::client(Path::new(&path)).await;
    let running = start(client, ControllerConfig::default())
        .await
        .expect("the controller starts");
    running.wait_ready().await;
    std::future::pending::<()>().await;
}

/// `kill -9` of the controller while 1,000 Applications are being created; while it is dead,
/// 100 Applications with works are deleted (their finalizer waits for the controller) and 100
/// new ones created; a new controller process converges.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_mid_load_and_restart() {
    let Some(real) = real("kill_9_mid_load_and_restart", false).await else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let fleet = Fleet::new(&real.hub, "kill9").await;
    let mut ctl = real.spawn_controller(&real.kubeconfig, "kill9-first");
    ctl.wait_logged(STARTED, START_WITHIN).await;

    let mut at_kill = 0;
    // the loader pauses after 400 until the kill, so that the kill always comes mid-load (the
    // controller keeps pace with the creates on this machine)
    let killed = tokio::sync::Notify::new();
    tokio::join!(
        async {
            fleet.create(0..400, json!({})).await;
            killed.notified().await;
            fleet.create(400..1000, json!({})).await;
        },
        async {
            fleet.until_works(300).await;
            ctl.kill9();
            at_kill = fleet.works().await.unwrap().len();
            killed.notify_one();
        }
    );
    let after_load = fleet.works().await.unwrap().len();
    eprintln!("faults: {at_kill} works at the kill, {after_load} once the 1,000 were created");
    assert!(
        after_load < 1000,
        "the kill came after the controller had finished ({after_load} works)"
    );

    // while no controller runs: deletes (of Applications that have works) and creates
    fleet.delete(0..100).await;
    fleet.create(1000..1100, json!({})).await;
    let a = fleet.audit().await.unwrap();
    assert!(
        !a.is_clean(),
        "nothing left for the restarted controller: {a}"
    );

    let _ctl = real.spawn_controller(&real.kubeconfig, "kill9-second");
    fleet.converged(1000).await;
    drop(_ctl);
    fleet.finish().await;
}

/// How long the recovery tests keep the hub API server down.
pub(crate) const OUTAGE: Duration = Duration::from_secs(10);

/// SIGKILLs the hub kube-apiserver, keeps it down for [`OUTAGE`] (the length of the fault, not a
/// synchronisation), starts it again with `$REALK8S/up.sh` and returns when it first answered
/// a list of `fleet`'s Applications again, with `up.sh` (still waiting for the rest of the env).
async fn outage(real: &Real, fleet: &Fleet) -> (Instant, tokio::task::JoinHandle<()>) {
    let down = tokio::task::block_in_place(|| real.kill_hub_apiserver());
    tokio::time::sleep(OUTAGE).await;
    let up = tokio::task::spawn_blocking(move || down.restart());
    let back = fleet.until_answers().await;
    eprintln!("faults: the hub API server answers again");
    (back, up)
}

/// Works that existed before a fault and still exist have kept their UID (none was deleted and
/// written again).
fn assert_not_recreated(before: &HashMap<String, String>, after: &HashMap<String, String>) {
    let recreated: Vec<&String> = before
        .iter()
        .filter(|(k, uid)| after.get(*k).is_some_and(|u| u != *uid))
        .map(|(k, _)| k)
        .collect();
    assert!(recreated.is_empty(), "works written again: {recreated:?}");
}

/// The hub kube-apiserver is SIGKILLed for [`OUTAGE`] while 1,000 Applications are being
/// created and 100 works have just got Healthy feedback (the loader retries its failed
/// creates); the controller resumes its watches, retries its failed writes and converges:
/// every Application has exactly its work (none written twice), every reported status is on
/// its Application.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hub_apiserver_killed_mid_creates() {
    let Some(real) = real("hub_apiserver_killed_mid_creates", true).await else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let fleet = Fleet::new(&real.hub, "killcreate").await;
    let mut ctl = real.spawn_controller(&real.kubeconfig, "killcreate");
    ctl.wait_logged(STARTED, START_WITHIN).await;

    fleet.create(0..100, json!({})).await;
    fleet.converged(100).await;
    let view = FleetView::start(&fleet).await;
    let mut before = HashMap::new();
    let mut back = None;
    // the loader pauses after 400 until the works are counted, so that the outage always
    // comes mid-load (the controller keeps pace with the creates on this machine); the rest is
    // created while the API server goes down (the loader retries its failed creates)
    let counted = tokio::sync::Notify::new();
    let mut loaded = None;
    tokio::join!(
        async {
            fleet.create(100..400, json!({})).await;
            counted.notified().await;
            fleet.create(400..1000, json!({})).await;
            loaded = Some(std::time::Instant::now());
        },
        // status writes under way too: the work agent reports 100 works Healthy
        fleet.report_healthy(0..100),
        async {
            fleet.until_works(300).await;
            before = fleet.work_uids().await;
            counted.notify_one();
            back = Some(outage(&real, &fleet).await);
        }
    );
    let (back, up) = back.unwrap();
    ctl.assert_running();
    assert!(
        ctl.logged("watch error; retrying"),
        "the controller never saw the API server go away; see {}",
        ctl.log.display()
    );
    assert!(
        before.len() < 1000,
        "the kill came after the controller had finished"
    );
    let works_at = view.converged_at(&fleet, 1000).await;
    let status_at = view.healthy_at(&fleet, 0..100).await;
    fleet.converged(1000).await;
    assert_eq!(fleet.healthy(0..100).await.unwrap(), 100);
    up.await.unwrap();
    assert_not_recreated(&before, &fleet.work_uids().await);
    // the loader's own retries end after the API server is back: the controller's part is
    // measured from the later of the two
    let loaded = loaded.expect("the loader finished");
    let from = back.max(loaded);
    eprintln!(
        "faults: RECOVERY creates: {} works before the kill; the loader's last create {:.2} s after \
         the API server answered again; from the later of the two: works converged in {:.2} s, \
         statuses in {:.2} s",
        before.len(),
        loaded.saturating_duration_since(back).as_secs_f64(),
        works_at.saturating_duration_since(from).as_secs_f64(),
        status_at.saturating_duration_since(from).as_secs_f64(),
    );
    drop(ctl);
    fleet.finish().await;
}

/// The hub kube-apiserver is SIGKILLed for [`OUTAGE`] while 300 Applications are being
/// deleted: 100 without their resources finalizer (gone at once: the cleanup controller removes
/// their works) and 200 with it (the propagation controller deletes the work, then removes the
/// finalizer). Converges to no Application and no work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hub_apiserver_killed_mid_deletes() {
    let Some(real) = real("hub_apiserver_killed_mid_deletes", true).await else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let fleet = Fleet::new(&real.hub, "killdelete").await;
    let mut ctl = real.spawn_controller(&real.kubeconfig, "killdelete");
    ctl.wait_logged(STARTED, START_WITHIN).await;
    fleet.create(0..300, json!({})).await;
    fleet.converged(300).await;
    let view = FleetView::start(&fleet).await;

    let mut at_kill = 0;
    let mut back = None;
    tokio::join!(
        async {
            fleet.delete_unfinalized(0..100).await;
            fleet.delete(100..300).await;
        },
        async {
            at_kill = fleet.until_works_at_most(295).await;
            back = Some(outage(&real, &fleet).await);
        }
    );
    let (back, up) = back.unwrap();
    ctl.assert_running();
    assert!(
        at_kill > 0,
        "the kill came after the controller had finished"
    );
    let at = view.converged_at(&fleet, 0).await;
    fleet.converged(0).await;
    up.await.unwrap();
    eprintln!(
        "faults: RECOVERY deletes: {at_kill} works left just before the kill; converged {:.2} s after \
         the API server answered again",
        at.saturating_duration_since(back).as_secs_f64(),
    );
    drop(ctl);
    fleet.clean().await;
}

/// The controller is cut off the API server (a TCP proxy drops its connections); meanwhile 50
/// Applications are deleted, 100 created and 50 changed, etcd is compacted to its current
/// revision and the hub API server restarted, so the controller's watches come back with
/// resource versions older than anything the API server can replay: `410 Gone` (too old resource
/// version). The controller must re-list, and recover every change it missed, deletes included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_expired_410_after_etcd_compaction() {
    let Some(real) = real("watch_expired_410_after_etcd_compaction", true).await else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let fleet = Fleet::new(&real.hub, "expired").await;
    let proxy = harness::Proxy::start(real.hub_addr()).await;
    let kubeconfig = real.kubeconfig_via(proxy.addr, "expired");
    let mut ctl = real.spawn_controller(&kubeconfig, "expired");
    ctl.wait_logged(STARTED, START_WITHIN).await;
    fleet.create(0..300, json!({})).await;
    fleet.converged(300).await;

    proxy.cut();
    fleet.delete(0..50).await;
    fleet.create(300..400, json!({})).await;
    change_revision(&fleet, 50..100, "v2").await;
    real.compact_etcd();
    {
        let _down = tokio::task::block_in_place(|| real.stop_hub_apiserver());
        // dropped in place: up.sh brings the hub back with an empty watch cache
        tokio::task::block_in_place(|| drop(_down));
    }
    let a = fleet.audit().await.unwrap();
    assert!(!a.is_clean(), "the cut-off controller kept up: {a}");
    proxy.restore();

    // Either the watch resumes from its old resource version and gets 410 Gone (then it
    // re-lists), or the controller noticed the outage through the cut proxy and starts its
    // watches afresh from a list read from etcd (ops::api_health): both end in a full list.
    let how = ctl
        .wait_logged_any(
            &["too old resource version", "the API server answers again"],
            Duration::from_secs(120),
        )
        .await;
    eprintln!("faults: expired: the controller recovered through {how:?}");
    let a = fleet.converged(350).await;
    assert_eq!(a.works, 350);
    drop(ctl);
    fleet.finish().await;
}

/// The controller runs as a ServiceAccount with the ClusterRole of deploy/controller/rbac.yaml;
/// its ManifestWork rule is removed while Applications are created and deleted, then given back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rbac_revoked_for_manifestworks_and_restored() {
    let Some(real) = real("rbac_revoked_for_manifestworks_and_restored", false).await else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let fleet = Fleet::new(&real.hub, "rbac").await;
    let (kubeconfig, roles, full) = least_privilege(&real, &fleet.ns).await;
    let mut ctl = real.spawn_controller(&kubeconfig, "rbac");
    ctl.wait_logged(STARTED, START_WITHIN).await;
    fleet.create(0..100, json!({})).await;
    fleet.converged(100).await;

    let revoked: Vec<PolicyRule> = full
        .iter()
        .filter(|r| !r.resources.iter().flatten().any(|s| s == "manifestworks"))
        .cloned()
        .collect();
    assert!(revoked.len() < full.len());
    set_rules(&roles, &fleet.ns, revoked).await;
    fleet.create(100..200, json!({})).await;
    fleet.delete(0..20).await;
    ctl.wait_logged("forbidden", Duration::from_secs(60)).await;
    let a = fleet.audit().await.unwrap();
    assert!(
        a.lost.len() >= 100,
        "works were written without the permission: {a}"
    );

    set_rules(&roles, &fleet.ns, full).await;
    fleet.converged(180).await;
    drop(ctl);
    fleet.finish().await;
    let _ = roles.delete(&fleet.ns, &Default::default()).await;
    let _ = Api::<ClusterRoleBinding>::all(real.hub.clone())
        .delete(&fleet.ns, &Default::default())
        .await;
}

/// Another writer fights the controller: it re-creates works with a spec of its own before the
/// controller can (the controller's create gets 409), rewrites existing works, and bumps every
/// Application while the controller strips its operation (its resourceVersion-guarded patch gets
/// 409). When the writer stops, every work is the desired one and every operation handed over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflict_storm_on_works_and_applications() {
    let Some(real) = real("conflict_storm_on_works_and_applications", false).await else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let fleet = Fleet::new(&real.hub, "storm").await;
    let mut ctl = real.spawn_controller(&real.kubeconfig, "storm");
    ctl.wait_logged(STARTED, START_WITHIN).await;
    let operation = json!({"operation": {"sync": {"revision": "HEAD"}}});
    fleet.create(0..200, operation.clone()).await;
    fleet.converged(200).await;

    let t0 = Instant::now();
    let (creates, storm_writes) = tokio::join!(
        async {
            // new Applications whose works another writer makes first, with its own spec
            let mut won = 0;
            for i in 200..300 {
                fleet.create(i..i + 1, operation.clone()).await;
                won += usize::from(foreign_work(&fleet, i).await);
            }
            won
        },
        async {
            let mut writes = 0;
            for round in 0..5 {
                writes += storm_round(&fleet, round).await;
            }
            writes
        }
    );
    eprintln!(
        "faults: storm: {storm_writes} foreign writes, {creates} works created before the controller, {:?}",
        t0.elapsed()
    );
    assert!(
        storm_writes >= 500,
        "the storm barely wrote ({storm_writes})"
    );
    ctl.assert_running();
    fleet.converged(300).await;
    drop(ctl);
    fleet.finish().await;
}

/// Changes `spec.source.targetRevision` of Applications `range`.
async fn change_revision(fleet: &Fleet, range: std::ops::Range<usize>, rev: &str) {
    let api = fleet.apps();
    let patch = json!({"spec": {"source": {"targetRevision": rev}}});
    futures::stream::iter(range)
        .map(|i| {
            let (api, patch) = (api.clone(), patch.clone());
            async move {
                api.patch(&app_name(i), &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .unwrap();
            }
        })
        .buffer_unordered(50)
        .collect::<Vec<()>>()
        .await;
}

/// Creates the work of Application `i` with a foreign spec; whether it came first.
async fn foreign_work(fleet: &Fleet, i: usize) -> bool {
    let app = fleet.apps().get(&app_name(i)).await.unwrap();
    let mut work = desired_work(&app, &WorkOptions::default()).unwrap();
    work.spec.workload.manifests[0]["spec"]["source"]["targetRevision"] = json!("foreign");
    let api: Api<ManifestWork> = Api::namespaced(fleet.hub.clone(), Fleet::cluster_of(i));
    api.create(&PostParams::default(), &work).await.is_ok()
}

/// One round of the storm: every work of the fleet rewritten (a PUT of a foreign spec from a
/// fresh read) and every Application bumped (an annotation; a new operation every other round).
/// Returns the writes that succeeded.
async fn storm_round(fleet: &Fleet, round: usize) -> usize {
    let works = fleet.works().await.unwrap_or_default();
    let hub = fleet.hub.clone();
    let work_writes = futures::stream::iter(works)
        .map(|mut w| {
            let hub = hub.clone();
            async move {
                let api: Api<ManifestWork> =
                    Api::namespaced(hub, w.metadata.namespace.as_deref().unwrap());
                w.spec.workload.manifests[0]["spec"]["source"]["targetRevision"] =
                    json!(format!("storm-{round}"));
                let name = w.metadata.name.clone().unwrap();
                usize::from(api.replace(&name, &PostParams::default(), &w).await.is_ok())
            }
        })
        .buffer_unordered(50)
        .fold(0, |n, ok| async move { n + ok })
        .await;
    let api = fleet.apps();
    let mut patch = json!({"metadata": {"annotations": {"faults/storm": round.to_string()}}});
    if round % 2 == 1 {
        patch["operation"] = json!({"sync": {"revision": format!("storm-{round}")}});
    }
    let app_writes = futures::stream::iter(0..300)
        .map(|i| {
            let (api, patch) = (api.clone(), patch.clone());
            async move {
                let r = api
                    .patch(&app_name(i), &PatchParams::default(), &Patch::Merge(&patch))
                    .await;
                usize::from(r.is_ok())
            }
        })
        .buffer_unordered(50)
        .fold(0, |n, ok| async move { n + ok })
        .await;
    work_writes + app_writes
}

/// A ServiceAccount in `ns` bound to a ClusterRole (named after `ns`) with the rules of
/// deploy/controller/rbac.yaml, and a kubeconfig with a token of it. Returns the kubeconfig, the
/// ClusterRole API and the full rules.
async fn least_privilege(
    real: &Real,
    ns: &str,
) -> (std::path::PathBuf, Api<ClusterRole>, Vec<PolicyRule>) {
    let yaml = include_str!("../../../../deploy/controller/rbac.yaml");
    let docs: Vec<Value> = serde_saphyr::from_multiple(yaml).unwrap();
    let role = docs
        .iter()
        .find(|d| d["kind"] == "ClusterRole")
        .expect("rbac.yaml has a ClusterRole");
    let rules: Vec<PolicyRule> = serde_json::from_value(role["rules"].clone()).unwrap();
    let pp = PostParams::default();
    let sas: Api<ServiceAccount> = Api::namespaced(real.hub.clone(), ns);
    let sa = serde_json::from_value(json!({"metadata": {"name": "controller"}})).unwrap();
    ok_or_exists(sas.create(&pp, &sa).await);
    let roles: Api<ClusterRole> = Api::all(real.hub.clone());
    let _ = roles.delete(ns, &Default::default()).await;
    let cr = serde_json::from_value(json!({"metadata": {"name": ns}, "rules": rules})).unwrap();
    roles.create(&pp, &cr).await.unwrap();
    let bindings: Api<ClusterRoleBinding> = Api::all(real.hub.clone());
    let b = serde_json::from_value(json!({
        "metadata": {"name": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": ns},
        "subjects": [{"kind": "ServiceAccount", "name": "controller", "namespace": ns}],
    }))
    .unwrap();
    ok_or_exists(bindings.create(&pp, &b).await);
    let tr = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(3600),
            ..Default::default()
        }),
        ..Default::default()
    };
    let token = sas
        .create_token_request("controller", &pp, &tr)
        .await
        .unwrap()
        .status
        .and_then(|s| s.token)
        .expect("a token");
    (real.kubeconfig_with_token(&token, ns), roles, rules)
}

async fn set_rules(roles: &Api<ClusterRole>, name: &str, rules: Vec<PolicyRule>) {
    let patch = json!({"rules": rules});
    roles
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}
