//! OTLP tracing, as argocd-agent's `--otlp-address` / `--otlp-insecure` (peer:
//! `internal/tracing/tracing.go`, `docs/operations/tracing.md`).
//!
//! * Off unless `--otlp-address` is set: then no span is ever built (the spans of
//!   [`TARGET`] are disabled at their call sites, and [`enabled`] is false for the code that
//!   would carry a trace context).
//! * On: `tracing` spans of [`TARGET`] become OpenTelemetry spans (`tracing-opentelemetry`),
//!   batched by the SDK's `BatchSpanProcessor` (a bounded queue: 2,048 spans by default, more are
//!   dropped; `OTEL_BSP_*` tune it) and sent by `opentelemetry-otlp`'s gRPC (tonic) exporter to
//!   `host:port`, over TLS with the system's roots (`SSL_CERT_FILE` honoured) unless
//!   `--otlp-insecure`, as the peer's `otlptracegrpc` does. Every span is sampled (the peer's
//!   `AlwaysSample`); service name `principal`, `agent-managed` or `agent-autonomous`.
//! * A collector that is down or unreachable never blocks anything: exports fail in the
//!   processor's own thread, a warning names the address and the flags to check (at most once a
//!   minute while it keeps failing, and once more when it works again), spans of that time are
//!   dropped.
//! * [`Telemetry::shutdown`] flushes what is queued, bounded by [`SHUTDOWN_FLUSH`].
//! * Trace context crosses process boundaries as W3C `traceparent` / `tracestate`
//!   ([`context_of`], [`set_parent`]): in gRPC metadata and in the CloudEvents distributed tracing
//!   extension of every event, as the peer.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_otlp::{WithExportConfig, WithTonicConfig};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{
    BatchSpanProcessor, Sampler, SdkTracerProvider, SpanData, SpanExporter,
};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::Layer;
use tracing_subscriber::registry::Registry;

/// The `tracing` target of every span exported over OTLP. The log output never shows these spans
/// (the log filter turns this target off), and nothing else is exported.
pub const TARGET: &str = "argocd_pull_otel";

/// Instrumentation scope of the spans: the peer's `TracerName`, so that a query by scope keeps
/// finding them.
pub const TRACER_NAME: &str = "github.com/argoproj-labs/argocd-agent";

/// At most this long to flush queued spans at shutdown.
pub const SHUTDOWN_FLUSH: Duration = Duration::from_secs(3);

/// One export attempt (with the exporter's retries) gives up after this long.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// While exports keep failing, at most one warning per this period.
const REPORT_EVERY: Duration = Duration::from_secs(60);

static ENABLED: AtomicBool = AtomicBool::new(false);

/// Whether OTLP tracing runs in this process (a relaxed load: callers check it before doing any
/// tracing work).
#[inline]
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// `argocd-pull principal`'s OTLP flags (the peer's names and variables, default off).
#[derive(clap::Args, Clone, Debug, Default, PartialEq, Eq)]
pub struct PrincipalOtlpArgs {
    /// Experimental: OpenTelemetry collector address for sending traces (host:port, e.g.
    /// localhost:4317). Empty: no tracing.
    #[arg(
        long = "otlp-address",
        env = "ARGOCD_PRINCIPAL_OTLP_ADDRESS",
        default_value = ""
    )]
    pub otlp_address: String,
    /// Experimental: Use insecure connection to OpenTelemetry collector endpoint (plaintext gRPC;
    /// default TLS with the system's roots).
    #[arg(long = "otlp-insecure", env = "ARGOCD_PRINCIPAL_OTLP_INSECURE", default_value_t = false, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub otlp_insecure: bool,
}

/// `argocd-pull agent`'s OTLP flags (the peer's names and variables, default off).
#[derive(clap::Args, Clone, Debug, Default, PartialEq, Eq)]
pub struct AgentOtlpArgs {
    /// Experimental: OpenTelemetry collector address for sending traces (host:port, e.g.
    /// localhost:4317). Empty: no tracing.
    #[arg(
        long = "otlp-address",
        env = "ARGOCD_AGENT_OTLP_ADDRESS",
        default_value = ""
    )]
    pub otlp_address: String,
    /// Experimental: Use insecure connection to OpenTelemetry collector endpoint (plaintext gRPC;
    /// default TLS with the system's roots).
    #[arg(long = "otlp-insecure", env = "ARGOCD_AGENT_OTLP_INSECURE", default_value_t = false, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub otlp_insecure: bool,
}

impl PrincipalOtlpArgs {
    /// The settings, `None` when tracing is off (no address).
    pub fn settings(&self) -> Option<OtlpSettings> {
        OtlpSettings::new(
            &self.otlp_address,
            self.otlp_insecure,
            "principal".into(),
            "ARGOCD_PRINCIPAL",
        )
    }
}

impl AgentOtlpArgs {
    /// The settings, `None` when tracing is off (no address); `mode` is the agent's mode
    /// (service name `agent-<mode>`, as the peer).
    pub fn settings(&self, mode: &str) -> Option<OtlpSettings> {
        OtlpSettings::new(
            &self.otlp_address,
            self.otlp_insecure,
            format!("agent-{mode}"),
            "ARGOCD_AGENT",
        )
    }
}

/// Where and how to send spans.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OtlpSettings {
    /// `host:port` of the collector's OTLP gRPC receiver.
    pub address: String,
    /// Plaintext gRPC instead of TLS.
    pub insecure: bool,
    /// `service.name` of the resource.
    pub service_name: String,
    /// The command's environment prefix (`ARGOCD_PRINCIPAL`), for messages naming the variables.
    pub env_prefix: &'static str,
}

impl OtlpSettings {
    fn new(
        address: &str,
        insecure: bool,
        service_name: String,
        env_prefix: &'static str,
    ) -> Option<Self> {
        let address = address.trim();
        (!address.is_empty()).then(|| OtlpSettings {
            address: address.to_string(),
            insecure,
            service_name,
            env_prefix,
        })
    }

    /// The gRPC endpoint URL: `https://host:port`, or `http://` with `--otlp-insecure`. An address
    /// that is not `host:port` is an error naming the flag and the form it takes.
    pub fn endpoint(&self) -> anyhow::Result<String> {
        let a = &self.address;
        let fix = format!(
            "--otlp-address ({}_OTLP_ADDRESS) takes the collector's host:port, e.g. localhost:4317 \
             (TLS unless --otlp-insecure)",
            self.env_prefix
        );
        if a.contains("://") {
            bail!("invalid OTLP address {a:?}: no scheme; {fix}");
        }
        let auth: http::uri::Authority = a
            .parse()
            .map_err(|e| anyhow::anyhow!("invalid OTLP address {a:?}: {e}; {fix}"))?;
        if auth.port_u16().is_none() || auth.host().is_empty() || a.contains('@') {
            bail!("invalid OTLP address {a:?}: want host:port; {fix}");
        }
        let scheme = if self.insecure { "http" } else { "https" };
        Ok(format!("{scheme}://{a}"))
    }
}

/// A running OTLP pipeline (see the module docs).
pub struct Telemetry {
    provider: SdkTracerProvider,
    settings: OtlpSettings,
}

impl Telemetry {
    /// Builds the exporter and the batch processor; must run inside a tokio runtime (the
    /// exporter's channel lives on it). Nothing is sent yet, so a collector that is down is no
    /// error here; an address that is not `host:port` is.
    pub fn start(settings: OtlpSettings) -> anyhow::Result<Telemetry> {
        let endpoint = settings.endpoint()?;
        let mut builder = opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_endpoint(endpoint)
            .with_timeout(EXPORT_TIMEOUT);
        if !settings.insecure {
            builder = builder
                .with_tls_config(tonic::transport::ClientTlsConfig::new().with_native_roots());
        }
        let exporter = builder.build().with_context(|| {
            format!(
                "setting up the OTLP exporter for {} (--otlp-address)",
                settings.address
            )
        })?;
        let exporter = ReportingExporter {
            inner: exporter,
            settings: settings.clone(),
            state: Mutex::new(ReportState::default()),
        };
        let resource = opentelemetry_sdk::Resource::builder()
            .with_service_name(settings.service_name.clone())
            .build();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(BatchSpanProcessor::builder(exporter).build())
            .with_sampler(Sampler::AlwaysOn)
            .with_resource(resource)
            .build();
        ENABLED.store(true, Ordering::Relaxed);
        Ok(Telemetry { provider, settings })
    }

    /// The `tracing` layer exporting the spans of [`TARGET`] (and nothing else).
    pub fn layer(&self) -> Box<dyn Layer<Registry> + Send + Sync> {
        let tracer = self.provider.tracer(TRACER_NAME);
        tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_location(false)
            .with_threads(false)
            .with_target(false)
            .with_tracked_inactivity(false)
            .with_context_activation(false)
            .with_filter(
                tracing_subscriber::filter::Targets::new()
                    .with_target(TARGET, tracing::Level::TRACE),
            )
            .boxed()
    }

    /// Logs that tracing runs (the peer's line), once the subscriber is installed.
    pub fn log_started(&self) {
        tracing::info!(
            address = %self.settings.address,
            insecure = self.settings.insecure,
            service = %self.settings.service_name,
            "OpenTelemetry tracing initialized (address={})",
            self.settings.address
        );
    }

    /// Sends what is queued and stops the exporter, within [`SHUTDOWN_FLUSH`].
    pub async fn shutdown(self) {
        let provider = self.provider.clone();
        let r = tokio::task::spawn_blocking(move || provider.shutdown_with_timeout(SHUTDOWN_FLUSH))
            .await;
        match r {
            Ok(Ok(())) => tracing::debug!("OpenTelemetry spans flushed"),
            Ok(Err(e)) => tracing::warn!(
                address = %self.settings.address,
                error = %e,
                "could not flush the last spans to the OpenTelemetry collector at shutdown"
            ),
            Err(e) => tracing::warn!(error = %e, "flushing OpenTelemetry spans failed"),
        }
    }
}

/// What the exporter last reported.
#[derive(Default)]
struct ReportState {
    failing_since: Option<Instant>,
    last_report: Option<Instant>,
    failed_batches: u64,
    dropped_spans: u64,
}

/// The OTLP exporter with log lines a user can act on (the SDK's own diagnostics are off).
struct ReportingExporter<E> {
    inner: E,
    settings: OtlpSettings,
    state: Mutex<ReportState>,
}

impl<E> std::fmt::Debug for ReportingExporter<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReportingExporter")
            .field("address", &self.settings.address)
            .finish()
    }
}

impl<E: SpanExporter> SpanExporter for ReportingExporter<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let n = batch.len() as u64;
        let r = self.inner.export(batch).await;
        let mut st = self.state.lock().expect("poisoned");
        let now = Instant::now();
        match &r {
            Ok(()) => {
                if let Some(since) = st.failing_since.take() {
                    tracing::info!(
                        address = %self.settings.address,
                        failed_for_secs = since.elapsed().as_secs(),
                        dropped_spans = st.dropped_spans,
                        "sending spans to the OpenTelemetry collector works again"
                    );
                    st.last_report = None;
                    st.failed_batches = 0;
                    st.dropped_spans = 0;
                }
            }
            Err(e) => {
                st.failing_since.get_or_insert(now);
                st.failed_batches += 1;
                st.dropped_spans += n;
                if st
                    .last_report
                    .is_none_or(|t| now.duration_since(t) >= REPORT_EVERY)
                {
                    st.last_report = Some(now);
                    let s = &self.settings;
                    let tls = if s.insecure {
                        "plaintext (--otlp-insecure); if the collector serves TLS, unset it"
                    } else {
                        "TLS; if the collector serves plaintext gRPC, set --otlp-insecure"
                    };
                    tracing::warn!(
                        address = %s.address,
                        error = %e,
                        dropped_spans = st.dropped_spans,
                        failed_batches = st.failed_batches,
                        "cannot send spans to the OpenTelemetry collector at {}: check that an \
                         OTLP gRPC receiver listens there (--otlp-address / {}_OTLP_ADDRESS) and \
                         that it speaks {}; spans are dropped meanwhile, nothing else is affected",
                        s.address,
                        s.env_prefix,
                        tls
                    );
                }
            }
        }
        r
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        self.inner.set_resource(resource);
    }
}

/// W3C trace context of a span, as carried in `traceparent` / `tracestate`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceContext {
    pub traceparent: String,
    pub tracestate: Option<String>,
}

/// The trace context of `span` to hand to the other side; `None` when tracing is off or the span
/// is not exported.
pub fn context_of(span: &tracing::Span) -> Option<TraceContext> {
    if !enabled() || span.is_disabled() {
        return None;
    }
    let cx = span.context();
    if !cx.span().span_context().is_valid() {
        return None;
    }
    let mut carrier = HashMap::new();
    TraceContextPropagator::new().inject_context(&cx, &mut carrier);
    Some(TraceContext {
        traceparent: carrier.remove("traceparent")?,
        tracestate: carrier.remove("tracestate").filter(|s| !s.is_empty()),
    })
}

/// Makes `span` (not entered yet) a child of the remote span `traceparent` names; an invalid
/// value is ignored (the span stays a root), as the peer's propagator does.
pub fn set_parent(span: &tracing::Span, traceparent: &str, tracestate: Option<&str>) {
    if !enabled() || span.is_disabled() {
        return;
    }
    let mut carrier = HashMap::new();
    carrier.insert("traceparent".to_string(), traceparent.to_string());
    if let Some(ts) = tracestate {
        carrier.insert("tracestate".to_string(), ts.to_string());
    }
    let cx = TraceContextPropagator::new().extract(&carrier);
    if cx.span().span_context().is_valid() {
        let _ = span.set_parent(cx);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct P {
        #[command(flatten)]
        otlp: PrincipalOtlpArgs,
    }

    #[test]
    fn off_by_default_and_on_with_an_address() {
        let p = P::try_parse_from(["x"]).unwrap();
        assert_eq!(p.otlp.settings(), None);
        let p = P::try_parse_from(["x", "--otlp-address", "collector:4317", "--otlp-insecure"])
            .unwrap();
        let s = p.otlp.settings().unwrap();
        assert_eq!(s.address, "collector:4317");
        assert!(s.insecure);
        assert_eq!(s.service_name, "principal");
        assert_eq!(s.endpoint().unwrap(), "http://collector:4317");
        let p =
            P::try_parse_from(["x", "--otlp-address=[::1]:4317", "--otlp-insecure=false"]).unwrap();
        assert_eq!(
            p.otlp.settings().unwrap().endpoint().unwrap(),
            "https://[::1]:4317"
        );
        let a = AgentOtlpArgs {
            otlp_address: "c:4317".into(),
            otlp_insecure: false,
        };
        assert_eq!(a.settings("managed").unwrap().service_name, "agent-managed");
    }

    #[test]
    fn an_address_that_is_not_host_port_names_the_form() {
        for bad in [
            "collector",
            "http://collector:4317",
            "collector:port",
            "a b:1",
        ] {
            let s = OtlpSettings::new(bad, false, "principal".into(), "ARGOCD_PRINCIPAL").unwrap();
            let e = s.endpoint().unwrap_err().to_string();
            assert!(
                e.contains(bad)
                    && e.contains("ARGOCD_PRINCIPAL_OTLP_ADDRESS")
                    && e.contains("host:port"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn nothing_is_carried_while_tracing_is_off() {
        let span = tracing::info_span!(target: TARGET, "x");
        assert_eq!(context_of(&span), None);
    }
}
