//! The spans of `--otlp-address` (the pipeline is `argocd_pull_ops::otel`), named and attributed
//! as argocd-agent's (`internal/tracing/attributes.go` and its call sites):
//!
//! | span | where | peer |
//! |---|---|---|
//! | `<Kind>.<create\|update\|delete>` (`Application.update`, `AppProject.create`, …), a root | a watch sees a change (principal: hub; agent: local) | `startSpan` in `principal/callbacks.go`, `agent/outbound.go` |
//! | `<target>.<type>` (`application.io.argoproj.argocd-agent.event.spec-update`), child of the sender's span | an event from the other side is processed | `processRecvQueue` (`principal/event.go`), `processIncomingEvent` (`agent/inbound.go`) |
//! | `handleResyncOnConnect` | the principal resyncs a (re)connected agent | `principal/server.go` |
//! | `k8s.<get\|list\|create\|update\|patch\|delete>` | one Kubernetes API call of the principal or the agent | — (ours: the peer lists Kubernetes operations in its docs but has no span for them) |
//! | `<package>.<Service>/<Method>` (`eventstreamapi.EventStream/Subscribe`), kinds client and server | every gRPC call between agent and principal ([`grpc`]) | `otelgrpc` stats handlers |
//!
//! The trace context of a span that produces an event travels in the event's `traceparent` /
//! `tracestate` extensions (CloudEvents distributed tracing, as the peer's `InjectTraceContext`),
//! and in gRPC metadata for calls: one trace follows a hub change from the principal's watch to
//! the agent's write. With tracing off nothing here allocates: every function returns at once.

pub mod grpc;

use std::future::Future;

use argocd_pull_ops::otel::{self as ops, TARGET};
use serde_json::Value;
use tracing::Instrument;
use tracing::field::Empty;

use crate::Mode;
use crate::event::{AttrValue, Event, attr};

pub use argocd_pull_ops::otel::enabled;

/// Which side a span belongs to (`argocd.component.type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Component {
    Principal,
    Agent,
}

impl Component {
    pub fn as_str(self) -> &'static str {
        match self {
            Component::Principal => "principal",
            Component::Agent => "agent",
        }
    }
}

/// What a side's event spans say about the stream (`argocd.agent.name`, `argocd.agent.mode`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamAttrs {
    pub component: Component,
    pub agent: String,
    pub mode: Mode,
}

/// An informer-callback span: `<kind>.<op>`, a new trace (the peer starts it from the server's
/// context). Events pushed while it is entered carry its context ([`inject`]).
pub fn watch_span(
    component: Component,
    op: &'static str,
    kind: &str,
    obj: &Value,
    agent: &str,
    mode: Mode,
) -> tracing::Span {
    if !ops::enabled() {
        return tracing::Span::none();
    }
    let m = &obj["metadata"];
    let s = |k: &str| m[k].as_str().unwrap_or_default();
    tracing::info_span!(
        target: TARGET,
        parent: None,
        "watch",
        otel.name = %format!("{kind}.{op}"),
        "argocd.component.type" = component.as_str(),
        "argocd.operation.type" = op,
        "argocd.agent.name" = agent,
        "argocd.agent.mode" = mode.as_str(),
        "k8s.resource.kind" = kind,
        "k8s.resource.name" = s("name"),
        "k8s.resource.namespace" = s("namespace"),
        "k8s.resource.uid" = s("uid"),
    )
}

/// `create` or `update`: whether the watch knew the object before.
pub fn op_of(known_before: bool) -> &'static str {
    if known_before { "update" } else { "create" }
}

/// Stamps the current span's trace context on an event about to be queued (a no-op with tracing
/// off or outside an exported span).
pub fn inject(ev: &mut Event) {
    if !ops::enabled() {
        return;
    }
    if let Some(tc) = ops::context_of(&tracing::Span::current()) {
        ev.extra_attrs
            .insert(attr::TRACEPARENT.into(), AttrValue::String(tc.traceparent));
        match tc.tracestate {
            Some(ts) => {
                ev.extra_attrs
                    .insert(attr::TRACESTATE.into(), AttrValue::String(ts));
            }
            None => {
                ev.extra_attrs.remove(attr::TRACESTATE);
            }
        }
    }
}

/// The span of processing one received event: `<target>.<type>`, the child of the span whose
/// context the event carries (a new trace without one).
pub fn event_span(s: &StreamAttrs, ev: &Event) -> tracing::Span {
    if !ops::enabled() {
        return tracing::Span::none();
    }
    let ty = ev.ty.full();
    let span = tracing::info_span!(
        target: TARGET,
        parent: None,
        "event",
        otel.name = %format!("{}.{}", ev.target.as_str(), ty),
        "argocd.event.type" = %ty,
        "argocd.event.target" = ev.target.as_str(),
        "argocd.event.id" = %ev.event_id,
        "k8s.resource.uid" = %ev.resource_id,
        "argocd.component.type" = s.component.as_str(),
        "argocd.agent.name" = %s.agent,
        "argocd.agent.mode" = s.mode.as_str(),
        otel.status_code = Empty,
        otel.status_description = Empty,
    );
    let text = |k: &str| ev.extra_attrs.get(k).and_then(AttrValue::as_text);
    if let Some(tp) = text(attr::TRACEPARENT) {
        ops::set_parent(&span, &tp, text(attr::TRACESTATE).as_deref());
    }
    span
}

/// `handleResyncOnConnect` (principal).
pub fn resync_span(agent: &str, mode: Mode) -> tracing::Span {
    if !ops::enabled() {
        return tracing::Span::none();
    }
    tracing::info_span!(
        target: TARGET,
        parent: None,
        "handleResyncOnConnect",
        "argocd.agent.name" = agent,
        "argocd.agent.mode" = mode.as_str(),
        "argocd.component.type" = Component::Principal.as_str(),
    )
}

/// Sets the span's status as the peer's `SetSpanOK` / `RecordError`.
pub fn record_result<E: std::fmt::Display>(span: &tracing::Span, r: &Result<(), E>) {
    if span.is_disabled() {
        return;
    }
    match r {
        Ok(()) => {
            span.record("otel.status_code", "ok");
        }
        Err(e) => {
            span.record("otel.status_code", "error");
            span.record("otel.status_description", tracing::field::display(e));
        }
    }
}

/// Runs one Kubernetes API call (`verb` on `kind` `ns/name`) in a `k8s.<verb>` span, a child of
/// the current span (the event or watch being handled).
pub async fn k8s<T, E: std::fmt::Display>(
    verb: &'static str,
    kind: &str,
    ns: &str,
    name: &str,
    call: impl Future<Output = Result<T, E>>,
) -> Result<T, E> {
    if !ops::enabled() {
        return call.await;
    }
    let span = tracing::info_span!(
        target: TARGET,
        "k8s",
        otel.name = %format!("k8s.{verb}"),
        otel.kind = "client",
        "argocd.operation.type" = verb,
        "k8s.resource.kind" = kind,
        "k8s.resource.namespace" = ns,
        "k8s.resource.name" = name,
        otel.status_code = Empty,
        otel.status_description = Empty,
    );
    let r = call.instrument(span.clone()).await;
    record_result(&span, &r.as_ref().map(|_| ()));
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{EventType, Target};
    use serde_json::json;

    #[test]
    fn with_tracing_off_no_span_and_no_context_on_events() {
        let obj = json!({"metadata": {"name": "a", "namespace": "n", "uid": "u"}});
        let span = watch_span(
            Component::Principal,
            "create",
            "Application",
            &obj,
            "n",
            Mode::Managed,
        );
        assert!(span.is_disabled());
        let _g = span.enter();
        let mut ev = Event::for_object("p", EventType::Create, Target::Application, &obj);
        inject(&mut ev);
        assert!(ev.extra_attrs.is_empty());
    }
}
