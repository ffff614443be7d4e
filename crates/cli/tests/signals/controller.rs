//! `argocd-pull controller` (every hub controller): a required CRD missing, the API server gone.

use std::net::SocketAddr;

use crate::{Proc, demo_hub, free_port, temp_dir};

const REPORT_CRD: &str = "multiclusterapplicationsetreports.apps.open-cluster-management.io";

/// The MulticlusterApplicationSetReport CRD is not installed: one ERROR names it, the feature and
/// the fix, the other controllers run, and SIGTERM ends the process (exit 0) within 10 s — the
/// watch of the missing resource does not hold it (it used to retry on 404 forever).
#[test]
fn controller_with_a_missing_crd_reports_it_once_and_exits_0_on_sigterm() {
    let dir = temp_dir("controller-crd");
    let kubeconfig = dir.join("hub.kubeconfig");
    let hub = demo_hub(&kubeconfig);
    crate::kubectl_delete_crd(&kubeconfig, REPORT_CRD);

    let ctl = Proc::spawn(
        "controller",
        &[
            "controller".into(),
            "--admin-addr=127.0.0.1:0".into(),
            "--leader-elect=false".into(),
        ],
        Some(&kubeconfig),
    );
    let error = ctl.wait_for_line(REPORT_CRD);
    assert!(error.contains("ERROR"), "{error}");
    assert!(
        error.contains("argocd-pull crds | kubectl apply -f -")
            && error.contains("--appset-report=false"),
        "the fix is named: {error}"
    );
    // the basic pull model runs meanwhile
    ctl.wait_for_line("caches filled; controllers starting");
    let (st, took) = ctl.stop("TERM");
    assert_eq!(st.code(), Some(0), "controller with a missing CRD: {st:?}");
    eprintln!("controller with a missing CRD stopped in {took:?}");
    // `demo --keep-running` (the embedded hub) is long-running too
    let (st, took) = hub.stop("TERM");
    assert_eq!(st.code(), Some(0), "demo --keep-running: {st:?}");
    eprintln!("demo --keep-running stopped in {took:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Nothing listens where the kubeconfig points: the leader election retries (as client-go's; it
/// used to exit 1 at once); SIGINT ends the process with exit 0 within 10 s.
#[test]
fn controller_without_an_api_server_exits_0_on_sigint() {
    let dir = temp_dir("controller-noapi");
    let kubeconfig = nowhere_kubeconfig(&dir);
    let ctl = Proc::spawn(
        "controller",
        &[
            "controller".into(),
            "--admin-addr=127.0.0.1:0".into(),
            "--leader-elect=true".into(),
            "--lease-namespace=argocd-pull".into(),
        ],
        Some(&kubeconfig),
    );
    // it keeps trying to get the Lease (it does not exit on its own)
    ctl.wait_for_line("cannot use the leader Lease yet");
    ctl.wait_for_line("cannot use the leader Lease yet");
    let (st, took) = ctl.stop("INT");
    assert_eq!(
        st.code(),
        Some(0),
        "controller without an API server: {st:?}"
    );
    eprintln!("controller without an API server stopped in {took:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A kubeconfig in `dir` pointing at a port nothing listens on.
fn nowhere_kubeconfig(dir: &std::path::Path) -> std::path::PathBuf {
    let nowhere: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let kubeconfig = dir.join("nowhere.kubeconfig");
    crate::write_kubeconfig(&kubeconfig, &format!("http://{nowhere}"));
    kubeconfig
}

/// [`tokio_threads`] of `pid` once there are `at_least` of them (at most 10 s), or as many as
/// there are then.
fn named_tokio_threads(pid: u32, at_least: usize) -> usize {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let n = tokio_threads(pid);
        if n >= at_least || std::time::Instant::now() >= deadline {
            return n;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The threads of process `pid` that tokio named (`tokio-rt-worker`: its workers and its
/// blocking threads).
fn tokio_threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|tasks| {
            tasks
                .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
                .filter(|comm| comm.starts_with("tokio-r"))
                .count()
        })
        .unwrap_or(0)
}

/// The controller's async runtime has one worker thread (the hub controllers wait on the API
/// server, not on the CPU); tokio's `TOKIO_WORKER_THREADS` still sets another number. The
/// principal keeps one per CPU.
#[test]
fn controller_runs_one_worker_thread_unless_tokio_worker_threads_says_otherwise() {
    let dir = temp_dir("controller-workers");
    let kubeconfig = nowhere_kubeconfig(&dir);
    let args = [
        "controller".to_string(),
        "--admin-addr=127.0.0.1:0".into(),
        "--leader-elect=true".into(),
        "--lease-namespace=argocd-pull".into(),
    ];
    let mut seen = Vec::new();
    for (env, want) in [(None, 1), (Some("3"), 3)] {
        let env: Vec<(&str, &str)> = env
            .map(|n| ("TOKIO_WORKER_THREADS", n))
            .into_iter()
            .collect();
        let ctl = Proc::spawn_env("controller", &args, Some(&kubeconfig), &env);
        let line = ctl.wait_for_line("async runtime started");
        assert!(
            line.contains(&format!("worker_threads={want}")),
            "{env:?}: {line}"
        );
        // the threads themselves, not only the log line: the workers exist once it logged, but a
        // thread names itself when it first runs (until then it has the process' name)
        seen.push(named_tokio_threads(ctl.pid(), want));
        eprintln!("{env:?}: {} tokio threads", seen[seen.len() - 1]);
        // running (its signal handler is in place): it keeps trying to get the Lease
        ctl.wait_for_line("cannot use the leader Lease yet");
        let (st, _) = ctl.stop("TERM");
        assert_eq!(st.code(), Some(0), "{env:?}: {st:?}");
    }
    assert!(
        seen[0] >= 1 && seen[1] >= seen[0] + 2,
        "tokio threads with the default and with TOKIO_WORKER_THREADS=3: {seen:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
