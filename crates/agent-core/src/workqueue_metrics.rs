//! `<prefix>_workqueue_*{queue}`: the client-go workqueue metrics the peer registers for its
//! send and receive queues (argocd-agent internal/metrics/queue.go `RegisterQueueMetrics`, prefix
//! `argocd_principal` or `argocd_agent`; queues named `<agent>-send` / `<agent>-recv` on the
//! principal, `default-send` / `default-recv` on the agent), with the same names, help and
//! buckets (`prometheus.DefBuckets`):
//! * `_depth`: events waiting in the queue;
//! * `_adds_total`: events put into it;
//! * `_queue_duration_seconds`: from put to taken;
//! * `_work_duration_seconds`: from taken to done;
//! * `_unfinished_work_seconds`, `_longest_running_processor_seconds`: the summed and the longest
//!   age of the events taken and not done yet (client-go refreshes them each 500 ms, here they
//!   are computed when scraped);
//! * `_retries_total`: events put back to be tried again.
//!
//! What each series counts on our queues: docs/compatibility.md §6. Every series of a queue
//! exists at zero once the queue does, as client-go creates them with the queue.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use argocd_pull_ops::metrics::Registry;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::Histogram;

use crate::rest_metrics::ExactHelp;

/// `prometheus.DefBuckets`.
const DEF_BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

fn histogram() -> Histogram {
    Histogram::new(DEF_BUCKETS)
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueLabel {
    queue: String,
}

type Histograms = Family<QueueLabel, Histogram, fn() -> Histogram>;

#[derive(Default)]
struct Processing {
    next: AtomicU64,
    started: Mutex<HashMap<u64, Instant>>,
}

impl Processing {
    /// (sum, max) of the ages of what is being worked on, in seconds.
    fn ages(&self) -> (f64, f64) {
        let started = self.started.lock().unwrap_or_else(|e| e.into_inner());
        started.values().fold((0.0, 0.0), |(sum, max), t| {
            let age = t.elapsed().as_secs_f64();
            (sum + age, f64::max(max, age))
        })
    }
}

struct Families {
    depth: Family<QueueLabel, Gauge>,
    adds: Family<QueueLabel, Counter>,
    queue_duration: Histograms,
    work_duration: Histograms,
    retries: Family<QueueLabel, Counter>,
    processing: Mutex<BTreeMap<String, Arc<Processing>>>,
}

impl Default for Families {
    fn default() -> Self {
        Self {
            depth: Family::default(),
            adds: Family::default(),
            queue_duration: Family::new_with_constructor(histogram),
            work_duration: Family::new_with_constructor(histogram),
            retries: Family::default(),
            processing: Mutex::default(),
        }
    }
}

/// The workqueue families of one side.
#[derive(Clone, Default)]
pub struct Workqueues(Arc<Families>);

impl Workqueues {
    /// The families, registered in `reg` under `<prefix>_workqueue_*`.
    pub fn register(reg: &mut Registry, prefix: &str) -> Self {
        let w = Self::default();
        let f = &w.0;
        let n = |s: &str| format!("{prefix}_workqueue_{s}");
        reg.register_collector(Box::new(ExactHelp(vec![
            (
                n("depth"),
                "Current depth of workqueue",
                Box::new(f.depth.clone()),
            ),
            // counters without `_total` (the encoder appends it to the samples)
            (
                n("adds"),
                "Total number of adds to the workqueue",
                Box::new(f.adds.clone()),
            ),
            (
                n("queue_duration_seconds"),
                "How long items stay in queue before being processed",
                Box::new(f.queue_duration.clone()),
            ),
            (
                n("work_duration_seconds"),
                "How long processing an item takes",
                Box::new(f.work_duration.clone()),
            ),
            (
                n("retries"),
                "Total number of retries",
                Box::new(f.retries.clone()),
            ),
        ])));
        reg.register_collector(Box::new(InProgress {
            families: w.clone(),
            unfinished: n("unfinished_work_seconds"),
            longest: n("longest_running_processor_seconds"),
        }));
        w
    }

    /// The metrics of queue `name`, every series created (at zero) if it is new.
    pub fn queue(&self, name: &str) -> Workqueue {
        let f = &self.0;
        let l = QueueLabel {
            queue: name.to_string(),
        };
        let processing = f
            .processing
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(name.to_string())
            .or_default()
            .clone();
        Workqueue {
            depth: f.depth.get_or_create(&l).clone(),
            adds: f.adds.get_or_create(&l).clone(),
            queue_duration: f.queue_duration.get_or_create(&l).clone(),
            work_duration: f.work_duration.get_or_create(&l).clone(),
            retries: f.retries.get_or_create(&l).clone(),
            processing,
        }
    }
}

/// `_unfinished_work_seconds` and `_longest_running_processor_seconds`, computed when scraped.
struct InProgress {
    families: Workqueues,
    unfinished: String,
    longest: String,
}

impl std::fmt::Debug for InProgress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.unfinished)
    }
}

impl Collector for InProgress {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let ages: Vec<(String, (f64, f64))> = self
            .families
            .0
            .processing
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(q, p)| (q.clone(), p.ages()))
            .collect();
        for (name, help, max) in [
            (&self.unfinished, "Total time of unfinished work", false),
            (&self.longest, "Longest running processor duration", true),
        ] {
            let mut family = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for (queue, (sum, longest)) in &ages {
                let v = if max { *longest } else { *sum };
                ConstGauge::new(v).encode(family.encode_family(&QueueLabel {
                    queue: queue.clone(),
                })?)?;
            }
        }
        Ok(())
    }
}

/// The metrics of one queue (clones share them). [`Workqueue::default`] is counted nowhere.
#[derive(Clone)]
pub struct Workqueue {
    depth: Gauge,
    adds: Counter,
    queue_duration: Histogram,
    work_duration: Histogram,
    retries: Counter,
    processing: Arc<Processing>,
}

impl Default for Workqueue {
    fn default() -> Self {
        Self {
            depth: Gauge::default(),
            adds: Counter::default(),
            queue_duration: histogram(),
            work_duration: histogram(),
            retries: Counter::default(),
            processing: Arc::default(),
        }
    }
}

impl std::fmt::Debug for Workqueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workqueue")
            .field("depth", &self.depth.get())
            .field("adds", &self.adds.get())
            .finish()
    }
}

impl Workqueue {
    /// An event was put into the queue.
    pub fn add(&self) {
        self.adds.inc();
    }

    /// Events waiting in the queue now.
    pub fn set_depth(&self, n: usize) {
        self.depth.set(n as i64);
    }

    /// One more event waiting.
    pub fn inc_depth(&self) {
        self.depth.inc();
    }

    /// One event fewer waiting.
    pub fn dec_depth(&self) {
        self.depth.dec();
    }

    /// An event was taken after waiting `seconds`.
    pub fn taken(&self, seconds: f64) {
        self.queue_duration.observe(seconds);
    }

    /// An event was put back to be tried again.
    pub fn retry(&self) {
        self.retries.inc();
    }

    /// Work on a taken event begins; it is done when the guard is dropped.
    pub fn start(&self) -> Work {
        let id = self.processing.next.fetch_add(1, Ordering::Relaxed);
        let at = Instant::now();
        self.processing
            .started
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, at);
        Work {
            queue: self.clone(),
            id,
            at,
        }
    }

    pub fn depth(&self) -> i64 {
        self.depth.get()
    }

    pub fn adds(&self) -> u64 {
        self.adds.get()
    }

    pub fn retries(&self) -> u64 {
        self.retries.get()
    }
}

/// Work on one event (see [`Workqueue::start`]).
pub struct Work {
    queue: Workqueue,
    id: u64,
    at: Instant,
}

impl Drop for Work {
    fn drop(&mut self) {
        self.queue
            .processing
            .started
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.id);
        self.queue
            .work_duration
            .observe(self.at.elapsed().as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(body: &str, sample: &str) -> Option<f64> {
        body.lines()
            .find_map(|l| l.strip_prefix(sample)?.strip_prefix(' '))
            .map(|v| v.parse().unwrap())
    }

    #[test]
    fn a_queues_series_exist_from_its_creation_with_the_peers_names_and_help() {
        let mut reg = Registry::default();
        let w = Workqueues::register(&mut reg, "argocd_principal");
        let _q = w.queue("edge-send");
        let body = argocd_pull_ops::metrics::render(&reg);
        let l = "{queue=\"edge-send\"}";
        for s in [
            "argocd_principal_workqueue_depth",
            "argocd_principal_workqueue_adds_total",
            "argocd_principal_workqueue_retries_total",
            "argocd_principal_workqueue_queue_duration_seconds_count",
            "argocd_principal_workqueue_work_duration_seconds_count",
            "argocd_principal_workqueue_unfinished_work_seconds",
            "argocd_principal_workqueue_longest_running_processor_seconds",
        ] {
            assert_eq!(value(&body, &format!("{s}{l}")), Some(0.0), "{s}\n{body}");
        }
        for help in [
            "# HELP argocd_principal_workqueue_depth Current depth of workqueue\n",
            "# HELP argocd_principal_workqueue_adds Total number of adds to the workqueue\n",
            "# HELP argocd_principal_workqueue_queue_duration_seconds How long items stay in queue before being processed\n",
            "# HELP argocd_principal_workqueue_work_duration_seconds How long processing an item takes\n",
            "# HELP argocd_principal_workqueue_unfinished_work_seconds Total time of unfinished work\n",
            "# HELP argocd_principal_workqueue_longest_running_processor_seconds Longest running processor duration\n",
            "# HELP argocd_principal_workqueue_retries Total number of retries\n",
        ] {
            assert!(body.contains(help), "{help}\n{body}");
        }
        assert!(body.contains("argocd_principal_workqueue_queue_duration_seconds_bucket{le=\"10.0\",queue=\"edge-send\"} 0\n"), "{body}");
    }

    #[test]
    fn work_in_progress_is_aged_when_scraped_and_timed_when_done() {
        let mut reg = Registry::default();
        let w = Workqueues::register(&mut reg, "argocd_agent");
        let q = w.queue("default-recv");
        q.add();
        q.add();
        q.set_depth(2);
        q.taken(0.2);
        let a = q.start();
        let b = q.start();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let body = argocd_pull_ops::metrics::render(&reg);
        let l = "{queue=\"default-recv\"}";
        let unfinished = value(
            &body,
            &format!("argocd_agent_workqueue_unfinished_work_seconds{l}"),
        )
        .unwrap();
        let longest = value(
            &body,
            &format!("argocd_agent_workqueue_longest_running_processor_seconds{l}"),
        )
        .unwrap();
        assert!(longest >= 0.02, "{longest}");
        assert!(
            unfinished >= 2.0 * 0.02 && unfinished >= longest,
            "{unfinished}"
        );
        assert_eq!(
            value(&body, &format!("argocd_agent_workqueue_adds_total{l}")),
            Some(2.0)
        );
        assert_eq!(
            value(&body, &format!("argocd_agent_workqueue_depth{l}")),
            Some(2.0)
        );
        drop((a, b));
        let body = argocd_pull_ops::metrics::render(&reg);
        assert_eq!(
            value(
                &body,
                &format!("argocd_agent_workqueue_unfinished_work_seconds{l}")
            ),
            Some(0.0)
        );
        assert_eq!(
            value(
                &body,
                &format!("argocd_agent_workqueue_work_duration_seconds_count{l}")
            ),
            Some(2.0)
        );
        // the same name gives the same series
        w.queue("default-recv").retry();
        assert_eq!(q.retries(), 1);
    }
}
