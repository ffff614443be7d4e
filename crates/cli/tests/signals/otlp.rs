//! `argocd-pull principal|agent --otlp-address/--otlp-insecure` (and their environment
//! variables) against a real OTLP gRPC receiver: a tonic server built from the official
//! opentelemetry-proto service definitions (`TraceService/Export`), over TLS and in plaintext.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{KeyValue, any_value::Value as AnyValue};
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use serde_json::json;

use crate::{Proc, demo_hub, free_port, run, temp_dir};

/// A span as the receiver got it.
#[derive(Clone, Debug)]
struct Got {
    service: String,
    scope: String,
    name: String,
    trace: Vec<u8>,
    id: Vec<u8>,
    parent: Vec<u8>,
    kind: i32,
    status: i32,
    attrs: HashMap<String, String>,
}

impl Got {
    fn attr(&self, k: &str) -> &str {
        self.attrs.get(k).map(String::as_str).unwrap_or_default()
    }
}

fn text(kv: &[KeyValue]) -> HashMap<String, String> {
    kv.iter()
        .map(|kv| {
            let v = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(AnyValue::StringValue(s)) => s.clone(),
                Some(AnyValue::IntValue(i)) => i.to_string(),
                Some(AnyValue::BoolValue(b)) => b.to_string(),
                other => format!("{other:?}"),
            };
            (kv.key.clone(), v)
        })
        .collect()
}

/// The receiver: every exported span, and a condition variable to wait on.
#[derive(Clone, Default)]
struct Collector {
    got: Arc<(Mutex<Vec<Got>>, Condvar)>,
}

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        req: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut spans = Vec::new();
        for rs in req.into_inner().resource_spans {
            let res = text(&rs.resource.map(|r| r.attributes).unwrap_or_default());
            let service = res.get("service.name").cloned().unwrap_or_default();
            for ss in rs.scope_spans {
                let scope = ss.scope.map(|s| s.name).unwrap_or_default();
                for s in ss.spans {
                    spans.push(Got {
                        service: service.clone(),
                        scope: scope.clone(),
                        name: s.name,
                        trace: s.trace_id,
                        id: s.span_id,
                        parent: s.parent_span_id,
                        kind: s.kind,
                        status: s.status.map_or(0, |st| st.code),
                        attrs: text(&s.attributes),
                    });
                }
            }
        }
        let (m, cv) = &*self.got;
        m.lock().unwrap().extend(spans);
        cv.notify_all();
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

impl Collector {
    fn spans(&self) -> Vec<Got> {
        self.got.0.lock().unwrap().clone()
    }

    /// Waits (at most a minute) until `done` holds for the spans received.
    fn wait_until(&self, what: &str, done: impl Fn(&[Got]) -> bool) -> Vec<Got> {
        let (m, cv) = &*self.got;
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut g = m.lock().unwrap();
        while !done(&g) {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "receiver never got {what}; got {:#?}", *g);
            g = cv.wait_timeout(g, left).unwrap().0;
        }
        g.clone()
    }

    /// Serves OTLP gRPC on 127.0.0.1 (TLS with the PEM identity, else plaintext) on its own
    /// thread, for the rest of the test process.
    fn serve(&self, tls: Option<(Vec<u8>, Vec<u8>)>) -> SocketAddr {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.set_nonblocking(true).unwrap();
        let addr = l.local_addr().unwrap();
        let me = self.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let l = tokio::net::TcpListener::from_std(l).unwrap();
                let mut b = tonic::transport::Server::builder();
                if let Some((cert, key)) = tls {
                    b = b
                        .tls_config(
                            tonic::transport::ServerTlsConfig::new()
                                .identity(tonic::transport::Identity::from_pem(cert, key)),
                        )
                        .unwrap();
                }
                b.add_service(TraceServiceServer::new(me))
                    .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(l))
                    .await
                    .unwrap();
            });
        });
        addr
    }
}

fn principal_args(pki: &Path, grpc_port: u16) -> Vec<String> {
    let f = |n: &str| pki.join(n).display().to_string();
    vec![
        "principal".into(),
        "--listen-host=127.0.0.1".into(),
        format!("--listen-port={grpc_port}"),
        format!("--tls-cert={}", f("principal.crt")),
        format!("--tls-key={}", f("principal.key")),
        format!("--root-ca-path={}", f("ca.crt")),
        format!("--jwt-key={}", f("jwt.key")),
        "--namespace=argocd".into(),
        "--metrics-port=0".into(),
        format!("--healthz-port={}", free_port()),
        format!("--redis-proxy-listen-address=127.0.0.1:{}", free_port()),
    ]
}

fn agent_args(pki: &Path, grpc_port: u16) -> Vec<String> {
    let f = |n: &str| pki.join(n).display().to_string();
    vec![
        "agent".into(),
        "--server-address=127.0.0.1".into(),
        format!("--server-port={grpc_port}"),
        "--server-name=localhost".into(),
        "--agent-mode=managed".into(),
        "--namespace=edge-local".into(),
        format!("--root-ca-path={}", f("ca.crt")),
        format!("--tls-client-cert={}", f("edge.crt")),
        format!("--tls-client-key={}", f("edge.key")),
        "--metrics-port=0".into(),
        format!("--healthz-port={}", free_port()),
    ]
}

/// The hub's Kubernetes API (the demo hub's kubeconfig), driven from a runtime of the test.
pub(crate) struct Hub {
    pub(crate) rt: tokio::runtime::Runtime,
    pub(crate) client: kube::Client,
}

impl Hub {
    pub(crate) fn connect(kubeconfig: &Path) -> Hub {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let client = rt.block_on(async {
            let _ = rustls::crypto::ring::default_provider().install_default();
            let kc = kube::config::Kubeconfig::read_from(kubeconfig).unwrap();
            let config = kube::Config::from_custom_kubeconfig(
                kc,
                &kube::config::KubeConfigOptions::default(),
            )
            .await
            .unwrap();
            kube::Client::try_from(config).unwrap()
        });
        Hub { rt, client }
    }

    pub(crate) fn apps(&self, ns: &str) -> Api<DynamicObject> {
        let gvk = GroupVersionKind::gvk("argoproj.io", "v1alpha1", "Application");
        let ar = ApiResource::from_gvk_with_plural(&gvk, "applications");
        Api::namespaced_with(self.client.clone(), ns, &ar)
    }

    pub(crate) fn create_namespace(&self, ns: &str) {
        use k8s_openapi::api::core::v1::Namespace;
        let api: Api<Namespace> = Api::all(self.client.clone());
        let n: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap();
        let _ = self.rt.block_on(api.create(&PostParams::default(), &n));
    }

    /// Creates the Application (`targetRevision: HEAD`) and returns its UID.
    pub(crate) fn create_app(&self, ns: &str, name: &str) -> String {
        let app: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"project": "default",
                     "source": {"repoURL": "https://github.com/argoproj/argocd-example-apps",
                                "path": "guestbook", "targetRevision": "HEAD"},
                     "destination": {"server": "https://kubernetes.default.svc",
                                     "namespace": name}}}))
        .unwrap();
        let created = self
            .rt
            .block_on(self.apps(ns).create(&PostParams::default(), &app))
            .unwrap_or_else(|e| panic!("creating Application {ns}/{name}: {e}"));
        created.metadata.uid.expect("uid")
    }

    pub(crate) fn set_revision(&self, ns: &str, name: &str, rev: &str) {
        let patch = json!({"spec": {"source": {"targetRevision": rev}}});
        self.rt
            .block_on(
                self.apps(ns)
                    .patch(name, &PatchParams::default(), &Patch::Merge(&patch)),
            )
            .unwrap_or_else(|e| panic!("patching Application {ns}/{name}: {e}"));
    }

    /// Waits (watch, at most two minutes) until the Application's `targetRevision` is `rev`.
    pub(crate) fn wait_revision(&self, ns: &str, name: &str, rev: &str) {
        let api = self.apps(ns);
        let want = rev.to_string();
        let cond = move |o: Option<&DynamicObject>| {
            o.is_some_and(|o| o.data["spec"]["source"]["targetRevision"] == want.as_str())
        };
        self.rt
            .block_on(async {
                tokio::time::timeout(
                    Duration::from_secs(120),
                    kube::runtime::wait::await_condition(api, name, cond),
                )
                .await
            })
            .unwrap_or_else(|_| panic!("{ns}/{name} never got targetRevision {rev}"))
            .unwrap();
    }
}

/// Exactly one span matching `f` (named `what` in the failure).
fn one<'a>(spans: &'a [Got], what: &str, f: impl Fn(&Got) -> bool) -> &'a Got {
    let m: Vec<&Got> = spans.iter().filter(|s| f(s)).collect();
    assert!(!m.is_empty(), "no span {what}; got {spans:#?}");
    m[0]
}

/// The agent's span processing `event` (full type) that continues the principal's watch span
/// `p`, and the agent's Kubernetes write under it.
fn continued<'a>(spans: &'a [Got], p: &Got, event: &str) -> (&'a Got, &'a Got) {
    let name = format!("application.{event}");
    let a = one(spans, &format!("{name} under {}", p.name), |s| {
        s.service == "agent-managed" && s.name == name && s.parent == p.id
    });
    assert_eq!(
        a.trace, p.trace,
        "one trace from the hub watch to the agent"
    );
    let k = one(spans, &format!("a Kubernetes write under {name}"), |s| {
        s.service == "agent-managed"
            && matches!(s.name.as_str(), "k8s.create" | "k8s.update" | "k8s.patch")
            && s.parent == a.id
    });
    assert_eq!(k.trace, p.trace);
    (a, k)
}

#[test]
fn one_trace_follows_a_hub_change_from_the_principal_watch_to_the_agent_write() {
    let dir = temp_dir("otlp");
    let kubeconfig = dir.join("hub.kubeconfig");
    let pki = dir.join("pki");
    run(&["pki", "--dir", pki.to_str().unwrap(), "--agent", "edge"]);
    let hub_proc = demo_hub(&kubeconfig);
    let hub = Hub::connect(&kubeconfig);
    // the agent's namespace (on the same API server as the hub's)
    hub.create_namespace("edge-local");

    // two receivers feeding one collector: TLS (the principal's certificate, signed by the
    // PKI's CA, SAN localhost) and plaintext
    let collector = Collector::default();
    let read = |n: &str| std::fs::read(pki.join(n)).unwrap();
    let tls = collector.serve(Some((read("principal.crt"), read("principal.key"))));
    let plain = collector.serve(None);

    // the principal by flag, over TLS: the system roots are the PKI's CA (SSL_CERT_FILE)
    let grpc = free_port();
    let mut args = principal_args(&pki, grpc);
    args.push(format!("--otlp-address=localhost:{}", tls.port()));
    let ca = pki.join("ca.crt").display().to_string();
    let principal = Proc::spawn_env(
        "principal",
        &args,
        Some(&kubeconfig),
        &[("SSL_CERT_FILE", ca.as_str())],
    );
    principal.wait_for_line("OpenTelemetry tracing initialized");
    principal.wait_for_line("principal listening");
    // the agent by the peer's environment variables, plaintext
    let plain_addr = plain.to_string();
    let agent = Proc::spawn_env(
        "agent",
        &agent_args(&pki, grpc),
        Some(&kubeconfig),
        &[
            ("ARGOCD_AGENT_OTLP_ADDRESS", plain_addr.as_str()),
            ("ARGOCD_AGENT_OTLP_INSECURE", "true"),
        ],
    );
    agent.wait_for_line("OpenTelemetry tracing initialized");
    principal.wait_for_line("agent subscribed");
    // the resync of the connect is over before the hub changes: otherwise a change can reach the
    // agent as the resync's answer (continuing its spans) instead of from the watch
    principal.wait_for_line("resync: resource sets");

    // create, then change, an Application of agent `edge` on the hub
    hub.create_namespace("edge");
    let uid = hub.create_app("edge", "guestbook");
    hub.wait_revision("edge-local", "guestbook", "HEAD");
    hub.set_revision("edge", "guestbook", "v2");
    hub.wait_revision("edge-local", "guestbook", "v2");

    // spans are flushed at shutdown
    let (st, took) = principal.stop("TERM");
    assert_eq!(st.code(), Some(0), "principal: {st:?}");
    eprintln!("principal with tracing stopped in {took:?}");
    let (st, took) = agent.stop("TERM");
    assert_eq!(st.code(), Some(0), "agent: {st:?}");
    eprintln!("agent with tracing stopped in {took:?}");

    let spans = collector.wait_until("the agent's spec-update", |s| {
        s.iter().any(|s| {
            s.service == "agent-managed"
                && s.name == "application.io.argoproj.argocd-agent.event.spec-update"
        })
    });

    let mut names: Vec<String> = spans
        .iter()
        .map(|s| format!("{}: {}", s.service, s.name))
        .collect();
    names.sort();
    names.dedup();
    eprintln!(
        "{} spans received, kinds:\n  {}",
        spans.len(),
        names.join("\n  ")
    );

    // the principal's watch span of the change: the peer's name and attributes
    let is_app = |s: &Got, name: &str| {
        s.service == "principal" && s.name == name && s.attr("k8s.resource.name") == "guestbook"
    };
    // the update whose event reached the agent (other updates, e.g. the status the agent reports
    // back, make spans of the same name)
    let update = one(&spans, "Application.update continued by the agent", |s| {
        is_app(s, "Application.update")
            && spans.iter().any(|a| {
                a.parent == s.id
                    && a.name == "application.io.argoproj.argocd-agent.event.spec-update"
            })
    });
    assert_eq!(update.scope, "github.com/argoproj-labs/argocd-agent");
    assert!(update.parent.is_empty(), "a watch span starts a trace");
    for (k, v) in [
        ("argocd.component.type", "principal"),
        ("argocd.operation.type", "update"),
        ("argocd.agent.name", "edge"),
        ("argocd.agent.mode", "managed"),
        ("k8s.resource.kind", "Application"),
        ("k8s.resource.namespace", "edge"),
        ("k8s.resource.uid", uid.as_str()),
    ] {
        assert_eq!(update.attr(k), v, "{k} of {update:#?}");
    }
    let (ev, write) = continued(&spans, update, "io.argoproj.argocd-agent.event.spec-update");
    for (k, v) in [
        (
            "argocd.event.type",
            "io.argoproj.argocd-agent.event.spec-update",
        ),
        ("argocd.event.target", "application"),
        ("argocd.component.type", "agent"),
        ("argocd.agent.mode", "managed"),
        ("k8s.resource.uid", format!("guestbook_{uid}").as_str()),
    ] {
        assert_eq!(ev.attr(k), v, "{k} of {ev:#?}");
    }
    assert!(
        ev.attr("argocd.event.id").starts_with("guestbook_"),
        "{ev:#?}"
    );
    assert_eq!(ev.status, StatusCode::Ok as i32, "{ev:#?}");
    assert_eq!(write.kind, SpanKind::Client as i32);
    assert_eq!(write.attr("k8s.resource.kind"), "Application");
    assert_eq!(write.attr("k8s.resource.name"), "guestbook");
    assert_eq!(write.attr("k8s.resource.namespace"), "edge-local");

    // the creation: the same chain
    let create = one(&spans, "Application.create continued by the agent", |s| {
        is_app(s, "Application.create")
            && spans
                .iter()
                .any(|a| a.parent == s.id && a.name.ends_with("event.create"))
    });
    let (_, write) = continued(&spans, create, "io.argoproj.argocd-agent.event.create");
    assert_eq!(write.name, "k8s.create");

    // gRPC calls: the agent's client span is the parent of the principal's server span
    for method in [
        "authapi.Authentication/Authenticate",
        "versionapi.Version/Version",
    ] {
        let client = one(&spans, &format!("client {method}"), |s| {
            s.service == "agent-managed" && s.name == method && s.kind == SpanKind::Client as i32
        });
        let server = one(&spans, &format!("server {method}"), |s| {
            s.service == "principal"
                && s.name == method
                && s.kind == SpanKind::Server as i32
                && s.parent == client.id
        });
        assert_eq!(server.trace, client.trace);
        for s in [client, server] {
            assert_eq!(s.attr("rpc.system.name"), "grpc", "{s:#?}");
            assert_eq!(s.attr("rpc.method"), method, "{s:#?}");
            assert_eq!(s.attr("rpc.response.status_code"), "OK", "{s:#?}");
        }
        assert_eq!(client.attr("server.address"), "localhost");
        assert_eq!(client.attr("server.port"), grpc.to_string());
    }

    drop(hub_proc);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_collector_down_or_wrongly_configured_is_logged_and_blocks_nothing() {
    // an address that is not host:port: refused at start, naming the flag and the form
    let out = std::process::Command::new(crate::BIN)
        .args(["principal", "--otlp-address", "http://collector:4317"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("ARGOCD_PRINCIPAL_OTLP_ADDRESS") && err.contains("host:port"),
        "{err}"
    );

    let dir = temp_dir("otlp-down");
    let kubeconfig = dir.join("hub.kubeconfig");
    let pki = dir.join("pki");
    run(&["pki", "--dir", pki.to_str().unwrap(), "--agent", "edge"]);
    let hub_proc = demo_hub(&kubeconfig);
    let hub = Hub::connect(&kubeconfig);
    // the agent's namespace (on the same API server as the hub's)
    hub.create_namespace("edge-local");
    // a plaintext receiver the principal talks TLS to (wrong), nothing at all for the agent
    // (down); exports every 200 ms so the failures show at once
    let collector = Collector::default();
    let plain = collector.serve(None);
    let nowhere = format!("127.0.0.1:{}", free_port());
    let fast = [("OTEL_BSP_SCHEDULE_DELAY", "200")];

    let grpc = free_port();
    let mut args = principal_args(&pki, grpc);
    args.push(format!("--otlp-address=localhost:{}", plain.port()));
    let principal = Proc::spawn_env("principal", &args, Some(&kubeconfig), &fast);
    let line = principal.wait_for_line("cannot send spans to the OpenTelemetry collector");
    assert!(
        line.contains(&format!("localhost:{}", plain.port())) && line.contains("--otlp-insecure"),
        "{line}"
    );
    let mut args = agent_args(&pki, grpc);
    args.extend([
        format!("--otlp-address={nowhere}"),
        "--otlp-insecure".into(),
    ]);
    let agent = Proc::spawn_env("agent", &args, Some(&kubeconfig), &fast);
    let line = agent.wait_for_line("cannot send spans to the OpenTelemetry collector");
    assert!(
        line.contains(&nowhere) && line.contains("ARGOCD_AGENT_OTLP_ADDRESS"),
        "{line}"
    );

    // both keep serving: an Application still reaches the agent
    principal.wait_for_line("agent subscribed");
    hub.create_namespace("edge");
    hub.create_app("edge", "guestbook");
    hub.wait_revision("edge-local", "guestbook", "HEAD");

    // and stop in time (Proc::stop: within 10 s), the last flush bounded
    let (st, _) = principal.stop("TERM");
    assert_eq!(st.code(), Some(0));
    let (st, _) = agent.stop("TERM");
    assert_eq!(st.code(), Some(0));
    assert!(
        collector.spans().is_empty(),
        "a TLS exporter cannot talk to a plaintext receiver"
    );

    drop(hub_proc);
    let _ = std::fs::remove_dir_all(&dir);
}
