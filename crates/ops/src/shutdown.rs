//! Graceful shutdown.

use tokio_util::sync::CancellationToken;

/// A token cancelled on the first SIGTERM or Ctrl-C (SIGINT). Components select on
/// `token.cancelled()` and finish their in-flight work. Must be called inside a Tokio runtime.
pub fn on_signal() -> CancellationToken {
    let token = CancellationToken::new();
    let child = token.clone();
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("shutdown signal received");
        child.cancel();
    });
    token
}

/// Resolves on the first SIGTERM or Ctrl-C (SIGINT).
#[cfg(unix)]
pub async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for SIGTERM; only Ctrl-C stops the process");
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// Resolves on the first Ctrl-C.
#[cfg(not(unix))]
pub async fn wait_for_signal() {
    let _ = tokio::signal::ctrl_c().await;
}

/// How long a long-running command may take to stop after SIGTERM (Kubernetes' default grace
/// period is 30 s; 10 s leaves room for a slow node).
pub const GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// Awaits `tasks` for at most `within`; tasks still running then are aborted (and named in a
/// WARN). Returns whether every task finished by itself.
pub async fn join_within(
    tasks: Vec<(String, tokio::task::JoinHandle<()>)>,
    within: std::time::Duration,
) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    let mut clean = true;
    for (name, mut task) in tasks {
        match tokio::time::timeout_at(deadline, &mut task).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                if e.is_panic() {
                    tracing::error!(task = %name, error = %e, "task panicked");
                }
            }
            Err(_) => {
                tracing::warn!(task = %name, "did not stop in time; abandoning it");
                task.abort();
                clean = false;
            }
        }
    }
    clean
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn join_within_abandons_a_task_that_does_not_stop() {
        let token = CancellationToken::new();
        let t = token.clone();
        let stops = tokio::spawn(async move { t.cancelled().await });
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let stuck = tokio::spawn(async move {
            let _tx = tx; // dropped when the task is aborted
            std::future::pending::<()>().await
        });
        token.cancel();
        let clean = tokio::time::timeout(
            Duration::from_secs(5),
            join_within(
                vec![("stops".into(), stops), ("stuck".into(), stuck)],
                Duration::from_millis(100),
            ),
        )
        .await
        .expect("bounded");
        assert!(!clean);
        assert!(rx.await.is_err(), "the stuck task was aborted");
    }
}
