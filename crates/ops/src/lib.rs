//! Shared operability for argocd-pull's long-running commands (controller, principal, agent).
//!
//! * [`logging::LogArgs`] — `--log-level` / `--log-format` (global flags of the `argocd-pull`
//!   command: subcommands must not define them again), `tracing` to stderr, text (colour only on
//!   a terminal) or JSON;
//! * [`otel`] — OTLP tracing (`--otlp-address`, `--otlp-insecure` of the principal and the
//!   agent): spans of [`otel::TARGET`] exported by the OpenTelemetry SDK, trace context
//!   propagation;
//! * [`metrics::Registry`] — a `prometheus-client` registry to register metrics into;
//! * [`reconcile_metrics::ReconcileMetrics`] — every controller's reconcile series (count,
//!   errors by [`reconcile_metrics::Reason`], duration) under names it chooses;
//! * [`admin::serve`] — an axum server with `/metrics`, `/healthz` and `/readyz`;
//!   [`admin::Readiness`] is flipped by the component once it is ready (e.g. after its first
//!   full list);
//! * [`shutdown::on_signal`] — a `CancellationToken` cancelled on SIGTERM or Ctrl-C;
//!   [`shutdown::join_within`] — a bounded wait for tasks (the rest are aborted), so that shutdown
//!   completes whatever state the watches are in;
//! * [`apis::ApiGate`] — which CRDs each feature needs: reported once (ERROR, `/readyz`, metric)
//!   when missing, features started when they appear;
//! * [`client::infer`] — kube's client over a connector that offers HTTP/2 (one multiplexed
//!   connection to the API server, as client-go; opt-in);
//! * [`watch::backoff`] — the retry policy of every watch (capped at 5 s);
//!   [`watch::WatchEvents`] — how every watch's events are consumed (errors and re-lists
//!   logged; a re-list delivered whole at its `InitDone` for a watch read through a store);
//! * [`api_health::ApiHealth`] — notices an API-server outage from failed requests, probes
//!   `/readyz` until it ends and wakes the waiting watches and retries then;
//! * [`conflict::read_modify_write`] — a read-modify-write retried from a fresh read while the
//!   write conflicts, a bounded number of times;
//! * [`leader`] — leader election on a `coordination.k8s.io/v1` Lease (kube-lease-manager).
//! * [`shards`] — shard ownership for active/active replicas: agent → shard
//!   ([`shards::shard_of`]), each replica's fair share of the shard Leases
//!   ([`shards::ShardOwner`], the owned shards on a watch channel).
//!
//! A typical `main`:
//!
//! ```no_run
//! # async fn run() -> anyhow::Result<()> {
//! use argocd_pull_ops::{admin, logging, shutdown};
//! logging::init(logging::LogFormat::Text)?;
//! let token = shutdown::on_signal();
//! let mut registry = argocd_pull_ops::metrics::Registry::default();
//! let ready = admin::Readiness::default();
//! let server = admin::serve("0.0.0.0:8080".parse()?, registry.into(), ready.clone(), token.clone());
//! // … start the component, call ready.set(true) once it has listed everything …
//! server.await?;
//! # Ok(()) }
//! ```

pub mod admin;
pub mod api_error;
pub mod api_health;
pub mod apis;
pub mod client;
pub mod conflict;
pub mod dns;
pub mod labels;
pub mod leader;
pub mod logging;
pub mod metrics;
pub mod net;
pub mod otel;
pub mod reconcile_metrics;
pub mod retry;
pub mod shards;
pub mod shutdown;
pub mod watch;

pub use tokio_util::sync::CancellationToken;
