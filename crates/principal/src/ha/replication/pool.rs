//! The replica's write pool for one stream: workers that write replicated changes into the
//! replica's hub, all changes of one object through the same worker (in order), different objects
//! in parallel; a worker that falls behind collapses the queued changes of one object into the
//! newest. A watermark tracks the highest sequence below which everything is written (what the
//! replica acknowledges).

use std::collections::BTreeSet;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::{mpsc, watch};

use super::Shared;
use super::apply::{Write, Writer};
use super::source::RKind;

/// Workers writing replicated events (per-object order is kept).
const WORKERS: usize = 32;
/// Events waiting per worker: when writing falls behind, reading the stream pauses (and the
/// primary buffers, then drops and the replica repairs from a snapshot) instead of this process
/// growing without bound.
const WORKER_BACKLOG: usize = 4096;
/// Retries of a write that failed with a retryable error before the event is given up (and a
/// snapshot fetched to repair it).
const WRITE_RETRIES: u32 = 6;

pub(super) fn now_unix() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or_default()
}

/// One written-sequence tracker: the highest sequence below which every event is written.
#[derive(Default)]
pub(super) struct Watermark {
    pending: Mutex<(BTreeSet<u64>, u64)>,
}

impl Watermark {
    pub(super) fn dispatched(&self, seq: u64) {
        let mut p = self.pending.lock().expect("poisoned");
        p.0.insert(seq);
        p.1 = p.1.max(seq);
    }
    pub(super) fn done(&self, seq: u64) {
        self.pending.lock().expect("poisoned").0.remove(&seq);
    }
    /// Everything up to the returned sequence is written.
    pub(super) fn written(&self, floor: u64) -> u64 {
        let p = self.pending.lock().expect("poisoned");
        match p.0.first() {
            Some(first) => first - 1,
            None => p.1.max(floor),
        }
        .max(floor)
    }
    pub(super) fn idle(&self) -> bool {
        self.pending.lock().expect("poisoned").0.is_empty()
    }
}

struct Job {
    seq: u64,
    write: Write,
    processed_at: i64,
}

/// The write pool of one stream.
pub(super) struct Pool {
    senders: Vec<mpsc::Sender<Job>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    pub(super) mark: Arc<Watermark>,
    pub(super) progress: watch::Sender<u64>,
    pub(super) failed: Arc<AtomicBool>,
}

impl Pool {
    pub(super) fn new(writer: &Writer, shared: &Arc<Shared>) -> Self {
        let mark = Arc::new(Watermark::default());
        let (progress, _) = watch::channel(0u64);
        let failed = Arc::new(AtomicBool::new(false));
        let mut senders = Vec::new();
        let mut tasks = Vec::new();
        for _ in 0..WORKERS {
            let (tx, mut rx) = mpsc::channel::<Job>(WORKER_BACKLOG);
            senders.push(tx);
            let (w, mark, progress, failed, shared) = (
                writer.clone(),
                mark.clone(),
                progress.clone(),
                failed.clone(),
                shared.clone(),
            );
            tasks.push(tokio::spawn(async move {
                while let Some(first) = rx.recv().await {
                    // what queued up behind it while the last write ran: changes of one object
                    // that follow each other collapse into the newest
                    let mut batch = vec![first];
                    while batch.len() < COALESCE_BATCH
                        && let Ok(j) = rx.try_recv()
                    {
                        batch.push(j);
                    }
                    for (job, superseded) in coalesce(batch) {
                    let m = &shared.metrics.ha;
                    let mut attempt = 0;
                    loop {
                        match w.apply(&job.write).await {
                            Ok(()) => {
                                let n = 1 + superseded.len() as u64;
                                m.client.events_processed.inc_by(n);
                                m.replication_events.inc_by(n);
                                break;
                            }
                            Err(e) if attempt < WRITE_RETRIES && e.is_retryable() => {
                                attempt += 1;
                                tokio::time::sleep(Duration::from_millis(50 << attempt)).await;
                            }
                            Err(e) => {
                                m.client.events_errors.inc();
                                m.client.events_dropped.inc();
                                m.replication_errors.inc();
                                failed.store(true, Ordering::SeqCst);
                                tracing::warn!(sequence = job.seq, error = %e, "failed to process replicated event; a snapshot will repair it");
                                break;
                            }
                        }
                    }
                    if job.processed_at > 0 {
                        let lag = (now_unix() - job.processed_at).max(0) as f64;
                        m.client.lag_seconds.set(lag);
                        m.replication_lag.set(lag);
                    }
                    for seq in superseded {
                        mark.done(seq);
                    }
                    mark.done(job.seq);
                    progress.send_modify(|n| *n += 1);
                    }
                }
            }));
        }
        Pool {
            senders,
            tasks,
            mark,
            progress,
            failed,
        }
    }

    fn key_slot(&self, w: &Write) -> usize {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        object_of(w).hash(&mut h);
        (h.finish() as usize) % self.senders.len()
    }

    pub(super) async fn submit(&self, seq: u64, write: Write, processed_at: i64) {
        self.mark.dispatched(seq);
        let slot = self.key_slot(&write);
        let _ = self.senders[slot]
            .send(Job {
                seq,
                write,
                processed_at,
            })
            .await;
    }

    /// Waits until everything submitted is written.
    pub(super) async fn drain(&self) {
        let mut rx = self.progress.subscribe();
        while !self.mark.idle() {
            if rx.changed().await.is_err() {
                return;
            }
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Jobs a worker takes at once from its queue (only what is already waiting).
const COALESCE_BATCH: usize = 256;

/// The object a write is about (`None`: a skip, about nothing).
fn object_of(w: &Write) -> Option<(argocd_pull_agent_core::store::Kind, &str, &str)> {
    match w {
        Write::Upsert { kind, obj, .. } => Some((
            kind.store_kind(),
            argocd_pull_agent_core::objects::namespace(obj),
            argocd_pull_agent_core::objects::name(obj),
        )),
        Write::Status {
            namespace, name, ..
        } => Some((RKind::Application.store_kind(), namespace, name)),
        Write::Delete {
            kind,
            namespace,
            name,
        } => Some((kind.store_kind(), namespace, name)),
        Write::Skip(_) => None,
    }
}

/// The writes of `batch` (in order) with each run of same-kind writes of one object — upserts,
/// status updates or deletes, with nothing else for that object in between — reduced to its
/// newest (each carries the object's whole state of that kind); the sequences it supersedes come
/// with it, written when it is. Writes of other objects may sit between the two: only the order
/// per object matters.
fn coalesce(batch: Vec<Job>) -> Vec<(Job, Vec<u64>)> {
    let mut out: Vec<(Job, Vec<u64>)> = Vec::with_capacity(batch.len());
    let mut last: std::collections::HashMap<
        (argocd_pull_agent_core::store::Kind, String, String),
        usize,
    > = std::collections::HashMap::new();
    for job in batch {
        let key = object_of(&job.write).map(|(k, ns, n)| (k, ns.to_string(), n.to_string()));
        if let Some(key) = &key
            && let Some(&i) = last.get(key)
            && std::mem::discriminant(&out[i].0.write) == std::mem::discriminant(&job.write)
        {
            let old = std::mem::replace(&mut out[i].0, job);
            out[i].1.push(old.seq);
            continue;
        }
        if let Some(key) = key {
            last.insert(key, out.len());
        }
        out.push((job, Vec::new()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ha::replication::apply;

    #[test]
    fn the_written_mark_waits_for_the_slowest_event() {
        let w = Watermark::default();
        for s in 11..=15 {
            w.dispatched(s);
        }
        w.done(12);
        w.done(13);
        assert_eq!(w.written(10), 10, "11 is not written yet");
        w.done(11);
        assert_eq!(w.written(10), 13);
        w.done(15);
        w.done(14);
        assert_eq!(w.written(10), 15);
        assert!(w.idle());
    }

    fn job(seq: u64, write: Write) -> Job {
        Job {
            seq,
            write,
            processed_at: 0,
        }
    }

    fn up(name: &str, v: u64) -> Write {
        apply::for_resource(
            RKind::Application,
            &serde_json::json!({"metadata": {"name": name, "namespace": "edge"}, "spec": {"v": v}}),
        )
    }

    #[test]
    fn changes_queued_for_one_object_collapse_into_the_newest_in_order() {
        let del = |name: &str| Write::Delete {
            kind: RKind::Application,
            namespace: "edge".into(),
            name: name.into(),
        };
        let batch = vec![
            job(1, up("a", 1)),
            job(2, up("b", 1)),
            job(3, up("a", 2)),
            job(4, up("a", 3)),
            job(5, del("a")),
            job(6, up("a", 4)),
            job(7, up("b", 2)),
            job(8, Write::Skip("x")),
            job(9, Write::Skip("y")),
        ];
        let out: Vec<(u64, Vec<u64>)> = coalesce(batch)
            .into_iter()
            .map(|(j, s)| (j.seq, s))
            .collect();
        // a's three upserts become the newest; the delete and the upsert after it keep their
        // order; b's two upserts collapse; skips are about nothing and stay
        assert_eq!(
            out,
            vec![
                (4, vec![1, 3]),
                (7, vec![2]),
                (5, vec![]),
                (6, vec![]),
                (8, vec![]),
                (9, vec![])
            ]
        );
    }
}
