//! The ApplicationSet report under a hub API-server outage: the whole `argocd-pull controller`
//! (needs [`harness::BIN_ENV`]: the propagation, status, cleanup and report controllers in one
//! process, as users run it) while the Applications of one ApplicationSet are created or
//! deleted and the hub API server is SIGKILLed for [`super::OUTAGE`].

use std::time::{Duration, Instant};

use argocd_pull_api::report::MulticlusterApplicationSetReport;
use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, PostParams};
use serde_json::{Value, json};

use super::harness::{self, Fleet, Real, real};
use super::view::FleetView;
use super::{SERIAL, START_WITHIN, STARTED, outage};

/// An ApplicationSet `set` in a fleet of its own, the controller binary running, and what its
/// Applications carry to be owned by the set.
struct Scene {
    fleet: Fleet,
    appsets: Api<DynamicObject>,
    reports: Api<MulticlusterApplicationSetReport>,
    /// The ownerReference to the ApplicationSet, as a patch of an Application.
    owned: Value,
    ctl: harness::ControllerProcess,
}

impl Scene {
    /// `None` (with a `SKIP:` line) when the binary under test is not given.
    async fn start(real: &Real, test: &str, name: &str) -> Option<Scene> {
        if std::env::var_os(harness::BIN_ENV).is_none() {
            harness::skip(
                test,
                "it runs the argocd-pull binary: set ARGOCD_PULL_FAULTS_BIN",
            );
            return None;
        }
        real.apply_own_crds().await;
        let mut fleet = Fleet::new(&real.hub, name).await;
        fleet.options.appset_feedback = argocd_pull_gitops::report::extra_feedback_rules();
        let appsets: Api<DynamicObject> = Api::namespaced_with(
            real.hub.clone(),
            &fleet.ns,
            &ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("argoproj.io", "v1alpha1", "ApplicationSet"),
                "applicationsets",
            ),
        );
        let reports: Api<MulticlusterApplicationSetReport> =
            Api::namespaced(real.hub.clone(), &fleet.ns);
        let _ = appsets.delete("set", &Default::default()).await;
        let _ = reports.delete("set", &Default::default()).await;
        let set: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "argoproj.io/v1alpha1", "kind": "ApplicationSet",
            "metadata": {"name": "set", "namespace": fleet.ns},
            "spec": {"generators": [{"list": {"elements": []}}],
                     "template": {"metadata": {"name": "x"}, "spec": {"project": "default",
                         "destination": {"server": "https://kubernetes.default.svc"}}}}
        }))
        .unwrap();
        let set = appsets.create(&PostParams::default(), &set).await.unwrap();
        let owned = json!({"metadata": {"ownerReferences": [{
            "apiVersion": "argoproj.io/v1alpha1", "kind": "ApplicationSet", "name": "set",
            "uid": set.metadata.uid, "controller": true, "blockOwnerDeletion": true}]}});
        let mut ctl = real.spawn_controller(&real.kubeconfig, name);
        ctl.wait_logged(STARTED, START_WITHIN).await;
        Some(Scene {
            fleet,
            appsets,
            reports,
            owned,
            ctl,
        })
    }

    /// Polls (every 100 ms) until the report lists exactly `n` works; returns when it first did.
    async fn report_lists(&self, n: usize) -> Instant {
        let t0 = Instant::now();
        loop {
            let listed = self
                .reports
                .get_opt("set")
                .await
                .ok()
                .flatten()
                .and_then(|r| r.statuses)
                .map_or(0, |s| s.cluster_conditions.len());
            if listed == n {
                return Instant::now();
            }
            assert!(
                t0.elapsed() < harness::CONVERGE,
                "the report lists {listed} of {n} works; see {}",
                self.ctl.log.display()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The controller still running, `live` Applications each with its work and nothing else
    /// (from the view's watches), the report listing `live` works, confirmed by fresh reads;
    /// returns when the works and when the report first were so.
    async fn converged(&mut self, view: &FleetView, live: usize) -> (Instant, Instant) {
        self.ctl.assert_running();
        let works_at = view.converged_at(&self.fleet, live).await;
        let report_at = self.report_lists(live).await;
        self.fleet.converged(live).await;
        (works_at, report_at)
    }

    async fn finish(self) {
        drop(self.ctl);
        self.fleet.clean().await;
        let _ = self.appsets.delete("set", &Default::default()).await;
        let _ = self.reports.delete("set", &Default::default()).await;
    }
}

/// While 200 Applications of one ApplicationSet are being created, the hub API server is
/// SIGKILLed for [`super::OUTAGE`]. After it answers again, every Application has its work (with the
/// report's feedback rules) and the ApplicationSet's report lists every work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hub_apiserver_killed_mid_appset_creates() {
    const TEST: &str = "hub_apiserver_killed_mid_appset_creates";
    let Some(real) = real(TEST, true).await else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let Some(mut scene) = Scene::start(&real, TEST, "killappset").await else {
        return;
    };
    let (fleet, owned) = (&scene.fleet, &scene.owned);
    fleet.create(0..30, owned.clone()).await;
    fleet.converged(30).await;
    let view = FleetView::start(fleet).await;

    let mut back = None;
    let mut at_kill = 0;
    // as in `hub_apiserver_killed_mid_creates`: the loader pauses at 100 until the works are
    // counted, so that the kill always comes mid-load; the rest is created through the outage
    let counted = tokio::sync::Notify::new();
    let mut loaded = None;
    tokio::join!(
        async {
            fleet.create(30..100, owned.clone()).await;
            counted.notified().await;
            fleet.create(100..200, owned.clone()).await;
            loaded = Some(Instant::now());
        },
        async {
            fleet.until_works(80).await;
            at_kill = fleet.works().await.unwrap().len();
            counted.notify_one();
            back = Some(outage(&real, fleet).await);
        }
    );
    let (back, up) = back.unwrap();
    assert!(
        at_kill < 200,
        "the kill came after the controller had finished"
    );
    // the loader's own retries end after the API server is back: the controller's part is
    // measured from the later of the two
    let loaded = loaded.expect("the loader finished");
    let from = back.max(loaded);
    let (works_at, report_at) = scene.converged(&view, 200).await;
    up.await.unwrap();
    eprintln!(
        "faults: RECOVERY appset: {at_kill} works at the kill; the loader's last create {:.2} s \
         after the API server answered again; from the later of the two: works converged in \
         {:.2} s, the report in {:.2} s",
        loaded.saturating_duration_since(back).as_secs_f64(),
        works_at.saturating_duration_since(from).as_secs_f64(),
        report_at.saturating_duration_since(from).as_secs_f64(),
    );
    scene.finish().await;
}

/// 200 Applications of one ApplicationSet, each with its work and listed in the report; while
/// 150 of them are being deleted (with the resources finalizer: the controller deletes the work,
/// then removes the finalizer), the hub API server is SIGKILLed for [`super::OUTAGE`]. After it answers
/// again, the 150 Applications and their works are gone and the report lists the 50 left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hub_apiserver_killed_mid_appset_deletes() {
    const TEST: &str = "hub_apiserver_killed_mid_appset_deletes";
    let Some(real) = real(TEST, true).await else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let Some(mut scene) = Scene::start(&real, TEST, "killappsetdel").await else {
        return;
    };
    let fleet = &scene.fleet;
    fleet.create(0..200, scene.owned.clone()).await;
    fleet.converged(200).await;
    scene.report_lists(200).await;
    let view = FleetView::start(fleet).await;

    let mut back = None;
    let mut at_kill = 0;
    let counted = tokio::sync::Notify::new();
    let mut unloaded = None;
    tokio::join!(
        async {
            fleet.delete(50..120).await;
            counted.notified().await;
            fleet.delete(120..200).await;
            unloaded = Some(Instant::now());
        },
        async {
            at_kill = fleet.until_works_at_most(190).await;
            counted.notify_one();
            back = Some(outage(&real, fleet).await);
        }
    );
    let (back, up) = back.unwrap();
    assert!(
        at_kill > 50,
        "the kill came after the controller had finished"
    );
    let unloaded = unloaded.expect("the loader finished");
    let from = back.max(unloaded);
    let (works_at, report_at) = scene.converged(&view, 50).await;
    up.await.unwrap();
    eprintln!(
        "faults: RECOVERY appset deletes: {at_kill} works at the kill; the loader's last delete \
         {:.2} s after the API server answered again; from the later of the two: works converged \
         in {:.2} s, the report in {:.2} s",
        unloaded.saturating_duration_since(back).as_secs_f64(),
        works_at.saturating_duration_since(from).as_secs_f64(),
        report_at.saturating_duration_since(from).as_secs_f64(),
    );
    scene.finish().await;
}
