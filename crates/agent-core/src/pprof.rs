//! `--pprof-port`: the profiling endpoint of the principal and the agent.
//!
//! The peer (cmd/argocd-agent/{principal,agent}.go) serves Go's `net/http/pprof` on
//! `127.0.0.1:<port>` when the port is not 0. Ours listens on the same address and serves what a
//! Rust process can: `/debug/pprof/profile?seconds=N`, a CPU profile sampled at 100 Hz (Go's rate)
//! in pprof's gzip-compressed protobuf format, as `go tool pprof` / `pprof` read it. The Go-runtime
//! profiles (heap, goroutine, block, mutex, trace…) answer 404 with a body that says so;
//! `/debug/pprof/` lists what is served.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use anyhow::Context;
use argocd_pull_ops::CancellationToken;
use axum::Router;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

/// Go's default profile length (`net/http/pprof.Profile`).
pub const DEFAULT_SECONDS: u64 = 30;
/// Go's CPU profiling rate.
pub const FREQUENCY_HZ: i32 = 100;

/// What `/debug/pprof/` and every unknown path say.
pub const INDEX: &str = "argocd-pull profiling endpoint (--pprof-port)\n\
\n\
Served:\n\
  /debug/pprof/profile?seconds=N  CPU profile for N seconds (default 30), pprof protobuf (gzip)\n\
      go tool pprof http://127.0.0.1:<port>/debug/pprof/profile?seconds=30\n\
\n\
Not served: heap, allocs, goroutine, threadcreate, block, mutex, trace, cmdline, symbol are\n\
profiles of the Go runtime; argocd-pull is written in Rust. Use the CPU profile, and /metrics\n\
for memory (process_resident_memory_bytes).\n";

/// The `seconds` of a profile request as Go reads it: a positive integer, else the default.
pub fn profile_seconds(raw: Option<&str>) -> u64 {
    match raw.map(str::trim).and_then(|s| s.parse::<i64>().ok()) {
        Some(n) if n > 0 => n as u64,
        _ => DEFAULT_SECONDS,
    }
}

/// Binds `127.0.0.1:<port>` and serves the profiling endpoint until `shutdown`. A port that
/// cannot be bound is an error naming `--pprof-port` (the peer exits with
/// "Error starting pprof server").
pub async fn serve(
    port: u16,
    shutdown: CancellationToken,
) -> anyhow::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| {
        format!("Error starting pprof server: --pprof-port {port}: cannot listen on {addr}")
    })?;
    let bound = listener.local_addr()?;
    // the peer's line (logged here once the port is bound: a client may connect right after it)
    tracing::info!("Starting pprof server on {bound}");
    let app = router(shutdown.clone());
    let task = tokio::spawn(async move {
        let stop = shutdown.clone();
        if let Err(e) = axum::serve(listener, app)
            .with_graceful_shutdown(async move { stop.cancelled().await })
            .await
        {
            tracing::warn!(error = %e, "pprof server failed");
        }
    });
    Ok((bound, task))
}

fn router(shutdown: CancellationToken) -> Router {
    Router::new()
        .route("/debug/pprof/profile", get(profile))
        .route("/debug/pprof/", get(|| async { INDEX }))
        .route("/debug/pprof", get(|| async { INDEX }))
        .fallback(|| async { (StatusCode::NOT_FOUND, INDEX) })
        .with_state(shutdown)
}

#[derive(serde::Deserialize)]
struct ProfileQuery {
    seconds: Option<String>,
}

async fn profile(
    State(shutdown): State<CancellationToken>,
    Query(q): Query<ProfileQuery>,
) -> Response {
    let seconds = profile_seconds(q.seconds.as_deref());
    match cpu_profile(Duration::from_secs(seconds), &shutdown).await {
        Ok(body) => (
            [
                (header::CONTENT_TYPE, "application/octet-stream"),
                (
                    header::CONTENT_DISPOSITION,
                    "attachment; filename=\"profile\"",
                ),
            ],
            body,
        )
            .into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            format!("Could not enable CPU profiling: {e:#}\n"),
        )
            .into_response(),
    }
}

/// Samples the whole process for `length` (cut short by `shutdown`) and returns the profile in
/// pprof's protobuf format, gzip-compressed as Go's `pprof.StartCPUProfile` writes it.
pub async fn cpu_profile(
    length: Duration,
    shutdown: &CancellationToken,
) -> anyhow::Result<Vec<u8>> {
    // one profiler per process (a second request while one runs is refused, as Go's)
    let guard = pprof::ProfilerGuardBuilder::default()
        .frequency(FREQUENCY_HZ)
        .blocklist(&["libc", "libgcc", "pthread", "vdso"])
        .build()
        .context("cpu profiling already in use or unavailable")?;
    tokio::select! {
        _ = tokio::time::sleep(length) => {}
        _ = shutdown.cancelled() => {}
    }
    tokio::task::spawn_blocking(move || encode(&guard)).await?
}

fn encode(guard: &pprof::ProfilerGuard<'_>) -> anyhow::Result<Vec<u8>> {
    use pprof::protos::Message;
    use std::io::Write;
    let report = guard.report().build().context("building the CPU profile")?;
    let profile = report.pprof().context("encoding the CPU profile")?;
    let raw = profile.encode_to_vec();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&raw)?;
    Ok(gz.finish()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_as_go_reads_them() {
        assert_eq!(profile_seconds(None), 30);
        assert_eq!(profile_seconds(Some("5")), 5);
        assert_eq!(profile_seconds(Some("0")), 30);
        assert_eq!(profile_seconds(Some("-3")), 30);
        assert_eq!(profile_seconds(Some("abc")), 30);
    }

    #[tokio::test]
    async fn a_taken_port_names_the_flag() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = taken.local_addr().unwrap().port();
        let e = serve(port, CancellationToken::new()).await.unwrap_err();
        let msg = format!("{e:#}");
        assert!(msg.contains("--pprof-port"), "{msg}");
        assert!(msg.contains(&format!("127.0.0.1:{port}")), "{msg}");
    }
}
