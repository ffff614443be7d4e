//! Embedded hub benchmark (not a timed test): `cargo bench -p argocd-pull-hub`.
//!
//! Prints: creates/s through `Hub::client()`, list latency, watch fan-out to 100 watchers
//! (events/s delivered and time for one write to reach all watchers), RSS for 100,000 small
//! ManifestWorks, and the cost of 1,000 idle Hubs with CRDs installed.
//! `HUB_BENCH_QUICK=1` runs reduced sizes.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use argocd_pull_hub::Hub;
use futures::StreamExt;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, PostParams, WatchEvent,
    WatchParams,
};
use serde_json::json;

const APP_CRD: &str = include_str!("../../api/crds/argocd/application-crd.yaml");
const WORK_CRD: &str =
    include_str!("../../api/crds/ocm/work.open-cluster-management.io_manifestworks.crd.yaml");

fn status_kb(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

fn work_ar() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("work.open-cluster-management.io", "v1", "ManifestWork"),
        "manifestworks",
    )
}

fn app_ar() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("argoproj.io", "v1alpha1", "Application"),
        "applications",
    )
}

fn work(i: usize) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
        "metadata": {"name": format!("work-{i:06}"), "labels": {"apps.open-cluster-management.io/hub-application-name": format!("app-{i}")}},
        "spec": {"workload": {"manifests": [{"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
            "metadata": {"name": format!("app-{i}"), "namespace": "argocd"},
            "spec": {"project": "default", "source": {"repoURL": "https://example.com/r.git", "path": "p", "targetRevision": "HEAD"},
                     "destination": {"server": "https://kubernetes.default.svc", "namespace": "guestbook"}}}]}}
    }))
    .unwrap()
}

fn app(i: usize) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": format!("app-{i:06}"), "labels": {"app.kubernetes.io/part-of": "bench"}},
        "spec": {"project": "default", "source": {"repoURL": "https://example.com/r.git", "path": "guestbook", "targetRevision": "HEAD"},
                 "destination": {"server": "https://kubernetes.default.svc", "namespace": "guestbook"}}
    }))
    .unwrap()
}

fn pct(mut v: Vec<Duration>, p: f64) -> Duration {
    v.sort();
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

async fn bench_creates(n: usize) {
    let hub = Hub::new();
    hub.install_crds_yaml(APP_CRD).unwrap();
    let api: Api<DynamicObject> = Api::default_namespaced_with(hub.client(), &app_ar());
    let objs: Vec<DynamicObject> = (0..n).map(app).collect();
    let t = Instant::now();
    for o in &objs {
        api.create(&PostParams::default(), o).await.unwrap();
    }
    let el = t.elapsed();
    println!(
        "creates (sequential, Application via client()): {n} in {:.2?} = {:.0}/s",
        el,
        n as f64 / el.as_secs_f64()
    );
    // Concurrent creates (16 tasks).
    let hub2 = Hub::new();
    hub2.install_crds_yaml(APP_CRD).unwrap();
    let api2: Api<DynamicObject> = Api::default_namespaced_with(hub2.client(), &app_ar());
    let objs = Arc::new(objs);
    let t = Instant::now();
    let mut tasks = Vec::new();
    for k in 0..16 {
        let api2 = api2.clone();
        let objs = objs.clone();
        tasks.push(tokio::spawn(async move {
            for o in objs.iter().skip(k).step_by(16) {
                api2.create(&PostParams::default(), o).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let el = t.elapsed();
    println!(
        "creates (16 concurrent tasks): {n} in {:.2?} = {:.0}/s",
        el,
        n as f64 / el.as_secs_f64()
    );
    // List latency on n objects.
    let mut times = Vec::new();
    for _ in 0..10 {
        let t = Instant::now();
        let l = api.list(&ListParams::default()).await.unwrap();
        assert_eq!(l.items.len(), n);
        times.push(t.elapsed());
    }
    println!(
        "list of {n} Applications (deserialized by kube-rs): median {:.2?}",
        pct(times.clone(), 0.5)
    );
    let mut times = Vec::new();
    for _ in 0..10 {
        let t = Instant::now();
        let l = api
            .list(
                &ListParams::default()
                    .labels("app.kubernetes.io/part-of=bench")
                    .limit(500),
            )
            .await
            .unwrap();
        assert_eq!(l.items.len(), 500);
        times.push(t.elapsed());
    }
    println!(
        "list page of 500 with a label selector over {n}: median {:.2?}",
        pct(times, 0.5)
    );
}

async fn bench_fanout(watchers: usize, writes: usize) {
    let hub = Hub::new();
    hub.install_crds_yaml(WORK_CRD).unwrap();
    let api: Api<DynamicObject> = Api::default_namespaced_with(hub.client(), &work_ar());
    let delivered = Arc::new(AtomicU64::new(0));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(usize, String)>();
    let rv = hub.resource_version().to_string();
    let mut handles = Vec::new();
    for w in 0..watchers {
        let client = hub.client();
        let delivered = delivered.clone();
        let tx = tx.clone();
        let mut s = Api::<DynamicObject>::default_namespaced_with(client, &work_ar())
            .watch(
                &WatchParams::default().disable_bookmarks().timeout(3600),
                &rv,
            )
            .await
            .unwrap()
            .boxed();
        handles.push(tokio::spawn(async move {
            while let Some(Ok(ev)) = s.next().await {
                if let WatchEvent::Added(o) | WatchEvent::Modified(o) = ev {
                    delivered.fetch_add(1, Ordering::Relaxed);
                    let _ = tx.send((w, o.metadata.name.unwrap_or_default()));
                }
            }
        }));
    }
    drop(tx);
    // Throughput: `writes` creates, all delivered to every watcher.
    let objs: Vec<DynamicObject> = (0..writes).map(work).collect();
    let t = Instant::now();
    for o in &objs {
        api.create(&PostParams::default(), o).await.unwrap();
    }
    let want = (watchers * writes) as u64;
    let mut got = 0u64;
    while got < want {
        rx.recv().await.unwrap();
        got += 1;
    }
    let el = t.elapsed();
    println!(
        "watch fan-out: {writes} writes x {watchers} watchers = {want} events in {:.2?} = {:.0} events/s delivered (decoded by kube-rs)",
        el,
        want as f64 / el.as_secs_f64()
    );
    // Latency: one write until all watchers have it.
    let mut lat = Vec::new();
    for i in 0..50 {
        let o = work(writes + i);
        let name = o.metadata.name.clone().unwrap();
        let t = Instant::now();
        api.create(&PostParams::default(), &o).await.unwrap();
        let mut n = 0;
        while n < watchers {
            let (_, got) = rx.recv().await.unwrap();
            if got == name {
                n += 1;
            }
        }
        lat.push(t.elapsed());
    }
    println!(
        "one write reaches all {watchers} watchers: median {:.2?}, p99 {:.2?}",
        pct(lat.clone(), 0.5),
        pct(lat, 0.99)
    );
    assert_eq!(
        delivered.load(Ordering::Relaxed),
        (watchers * (writes + 50)) as u64
    );
    for h in handles {
        h.abort();
    }
}

async fn bench_memory(n: usize) {
    let before = status_kb("VmRSS:");
    let hub = Hub::new();
    hub.install_crds_yaml(WORK_CRD).unwrap();
    let api: Api<DynamicObject> = Api::default_namespaced_with(hub.client(), &work_ar());
    let t = Instant::now();
    for i in 0..n {
        api.create(&PostParams::default(), &work(i)).await.unwrap();
    }
    let el = t.elapsed();
    let one = serde_json::to_vec(&api.get("work-000001").await.unwrap())
        .unwrap()
        .len();
    let after = status_kb("VmRSS:");
    println!(
        "memory: {n} ManifestWorks ({one} B of JSON each) created in {:.2?}; RSS {} MiB -> {} MiB = {:.0} B/object (incl. the bounded watch history); VmHWM {} MiB",
        el,
        before / 1024,
        after / 1024,
        (after.saturating_sub(before) as f64 * 1024.0) / n as f64,
        status_kb("VmHWM:") / 1024
    );
    drop(hub);
}

async fn bench_idle_hubs(n: usize) {
    let before = status_kb("VmRSS:");
    let t = Instant::now();
    let mut hubs = Vec::new();
    for _ in 0..n {
        let h = Hub::new();
        h.install_crds_yaml(APP_CRD).unwrap();
        h.install_crds_yaml(WORK_CRD).unwrap();
        hubs.push(h);
    }
    let el = t.elapsed();
    let after = status_kb("VmRSS:");
    println!(
        "{n} idle Hubs with the Application + ManifestWork CRDs: built in {:.2?}, RSS +{} MiB = {:.0} KiB/Hub (no task or thread per Hub)",
        el,
        after.saturating_sub(before) / 1024,
        after.saturating_sub(before) as f64 / n as f64
    );
    let plain_before = status_kb("VmRSS:");
    let plain: Vec<Hub> = (0..n).map(|_| Hub::new()).collect();
    let plain_after = status_kb("VmRSS:");
    println!(
        "{n} idle Hubs without CRDs: RSS +{:.0} KiB/Hub",
        plain_after.saturating_sub(plain_before) as f64 / n as f64
    );
    drop(plain);
    drop(hubs);
}

/// Each section runs in its own process so RSS readings are not blurred by earlier sections.
fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--list") {
        return;
    }
    let quick = std::env::var("HUB_BENCH_QUICK").is_ok();
    let scale = |n: usize| if quick { n / 10 } else { n };
    let section = args
        .iter()
        .find_map(|a| a.strip_prefix("--section=").map(String::from));
    let Some(section) = section else {
        println!(
            "argocd-pull-hub benchmark ({} build)",
            if cfg!(debug_assertions) {
                "debug"
            } else {
                "release"
            }
        );
        let exe = std::env::current_exe().unwrap();
        for s in ["memory", "idle", "creates", "fanout"] {
            let st = std::process::Command::new(&exe)
                .arg(format!("--section={s}"))
                .status()
                .unwrap();
            assert!(st.success(), "section {s} failed");
        }
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        match section.as_str() {
            "memory" => bench_memory(scale(100_000)).await,
            "idle" => bench_idle_hubs(scale(1_000)).await,
            "creates" => bench_creates(scale(10_000)).await,
            "fanout" => bench_fanout(100, scale(1_000)).await,
            other => panic!("unknown section {other}"),
        }
    });
}
