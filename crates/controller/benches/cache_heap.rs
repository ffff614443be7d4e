//! What the watch caches' projections of 1,000 Applications and their 1,000 ManifestWorks hold on
//! the heap, counted by a global allocator: the bytes requested and the allocations still live
//! (each allocation costs the allocator some bytes more: 8–16 in glibc's malloc and mimalloc).
//!
//! `cargo bench -p argocd-pull-controller --bench cache_heap` (env: `HEAP_OBJECTS`, default 1000;
//! the figures are the same unoptimised: `cargo test -p argocd-pull-controller --bench cache_heap`).
//! The objects are as the API server sends them on a watch: server fields, managedFields, the
//! labels and annotations of the tests' and benchmark's Applications (plus an ApplicationSet
//! owner on every other one), and the works [`desired_work`] builds for them with feedback.

use argocd_pull_api::argocd::Application;
use argocd_pull_api::names::{ANNOTATION_OCM_MANAGED_CLUSTER, LABEL_PULL_TO_OCM};
use argocd_pull_controller::cache_probe::{cached_application, cached_work};
use argocd_pull_domain::{WorkOptions, desired_work};
use serde_json::{Value, json};
use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<std::alloc::System> = &INSTRUMENTED_SYSTEM;

/// What is allocated now: bytes requested, allocations.
#[derive(Clone, Copy)]
struct Live {
    bytes: isize,
    allocs: isize,
}

fn live() -> Live {
    let s = GLOBAL.stats();
    Live {
        bytes: s.bytes_allocated as isize - s.bytes_deallocated as isize,
        allocs: s.allocations as isize - s.deallocations as isize,
    }
}

fn managed_fields() -> Value {
    json!([{"manager": "kubectl-client-side-apply", "operation": "Update",
        "apiVersion": "argoproj.io/v1alpha1", "time": "2026-01-01T00:00:00Z", "fieldsType": "FieldsV1",
        "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:team": {}}}, "f:spec": {".": {}}}}])
}

fn application(i: usize) -> Value {
    let mut app = json!({
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": format!("app{i}"), "namespace": "argocd",
            "uid": format!("{i:08x}-1c2d-4e5f-8a9b-0c1d2e3f4a5b"),
            "resourceVersion": format!("{}", 100_000 + i), "generation": 3,
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {LABEL_PULL_TO_OCM: "true", "team": "bench"},
            "annotations": {ANNOTATION_OCM_MANAGED_CLUSTER: format!("cluster{}", i % 100),
                "argocd.argoproj.io/skip-reconcile": "true"},
            "finalizers": ["resources-finalizer.argocd.argoproj.io"],
            "managedFields": managed_fields()},
        "spec": {"project": "default",
            "destination": {"server": "https://kubernetes.default.svc", "namespace": "guestbook"},
            "source": {"repoURL": "https://github.com/argoproj/argocd-example-apps", "path": "guestbook", "targetRevision": "HEAD"},
            "syncPolicy": {"automated": {"prune": true, "selfHeal": true}}},
        "status": {"health": {"status": "Healthy"},
            "sync": {"status": "Synced", "revision": "53e28ff20cc530b9ada2173fbbd64d48338583ba"}}
    });
    if i % 2 == 1 {
        // an ApplicationSet's: its owner, and the label ApplicationSets put on their Applications
        app["metadata"]["ownerReferences"] = json!([{"apiVersion": "argoproj.io/v1alpha1",
            "kind": "ApplicationSet", "name": "guestbook", "uid": "5f6e7d8c-0000-4000-8000-000000000001",
            "controller": true, "blockOwnerDeletion": true}]);
        app["metadata"]["labels"]["app.kubernetes.io/part-of"] = json!("guestbook");
    }
    app
}

fn work(app: &Value, i: usize) -> Value {
    let typed: Application = serde_json::from_value(app.clone()).expect("an Application");
    let w = desired_work(&typed, &WorkOptions::default()).expect("a selected Application");
    let mut v = serde_json::to_value(&w).expect("a work serializes");
    let meta = &mut v["metadata"];
    meta["uid"] = json!(format!("{i:08x}-9a8b-4c7d-8e6f-5a4b3c2d1e0f"));
    meta["resourceVersion"] = json!(format!("{}", 200_000 + i));
    meta["generation"] = json!(1);
    meta["creationTimestamp"] = json!("2026-01-01T00:00:01Z");
    meta["managedFields"] = managed_fields();
    let name = typed.metadata.name.clone().unwrap_or_default();
    v["status"] = json!({
        "conditions": [{"type": "Applied", "status": "True", "reason": "AppliedManifestWorkComplete",
            "message": "Apply manifest work complete", "lastTransitionTime": "2026-01-01T00:00:02Z"}],
        "resourceStatus": {"manifests": [{
            "resourceMeta": {"ordinal": 0, "group": "argoproj.io", "version": "v1alpha1",
                "kind": "Application", "resource": "applications", "name": name, "namespace": "argocd"},
            "statusFeedback": {"values": [
                {"name": "healthStatus", "fieldValue": {"type": "String", "string": "Healthy"}},
                {"name": "syncStatus", "fieldValue": {"type": "String", "string": "Synced"}},
                {"name": "syncRevision", "fieldValue": {"type": "String",
                    "string": "53e28ff20cc530b9ada2173fbbd64d48338583ba"}}]},
            "conditions": [{"type": "Available", "status": "True", "reason": "ResourceAvailable",
                "message": "Resource is available", "lastTransitionTime": "2026-01-01T00:00:02Z"}]
        }]}
    });
    v
}

fn report(what: &str, n: usize, before: Live, after: Live) {
    let per = |a: isize, b: isize| (b - a) as f64 / n as f64;
    println!(
        "{what:<13} {:>8.1} B in {:>5.1} allocations per object",
        per(before.bytes, after.bytes),
        per(before.allocs, after.allocs),
    );
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo bench -- --list`
    }
    let n: usize = std::env::var("HEAP_OBJECTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let apps: Vec<Value> = (0..n).map(application).collect();
    let app_bytes: Vec<Vec<u8>> = apps
        .iter()
        .map(|a| serde_json::to_vec(a).unwrap())
        .collect();
    let work_bytes: Vec<Vec<u8>> = apps
        .iter()
        .enumerate()
        .map(|(i, a)| serde_json::to_vec(&work(a, i)).unwrap())
        .collect();
    drop(apps);

    let start = live();
    let cached_apps: Vec<_> = app_bytes
        .iter()
        .map(|b| Box::new(cached_application(b).expect("an Application decodes")))
        .collect();
    let apps_done = live();
    let cached_works: Vec<_> = work_bytes
        .iter()
        .map(|b| Box::new(cached_work(b).expect("a work decodes")))
        .collect();
    let works_done = live();
    // the two Vecs of boxes are the measurement's, not the caches': taken off
    let vecs = |v: usize| (v * std::mem::size_of::<usize>()) as isize;
    let less = |l: Live, v: isize| Live {
        bytes: l.bytes - v,
        allocs: l.allocs - 1,
    };
    let apps_done = less(apps_done, vecs(cached_apps.capacity()));
    let works_done = less(
        less(works_done, vecs(cached_apps.capacity())),
        vecs(cached_works.capacity()),
    );
    println!(
        "{n} Applications and {n} ManifestWorks, as the watch caches keep them (each boxed, as the store's Arc would):"
    );
    report("Application", n, start, apps_done);
    report("ManifestWork", n, apps_done, works_done);
    report("pair", n, start, works_done);
    println!(
        "of which inline (the struct itself): Application {} B, ManifestWork {} B",
        cached_apps
            .first()
            .map_or(0, |a| std::mem::size_of_val(&**a)),
        cached_works
            .first()
            .map_or(0, |w| std::mem::size_of_val(&**w)),
    );
    drop((cached_apps, cached_works));
}
