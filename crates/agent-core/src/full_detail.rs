//! `--full-detail`: which debug log lines carry the whole object (argocd-agent's full-detail
//! logging, peer: cmd/cmdutil/log.go `ParseFullDetail`, internal/logging/logging.go).
//!
//! Three categories, each logged at debug level with the peer's structured fields
//! (`log_category`, `action` / `direction`, `resource_type` / `event_target`, `name`,
//! `namespace`) and, when the category is on, `detail`:
//! - `actions`: what the principal or agent writes to its cluster (create, update, patch,
//!   delete, and failed writes); `detail` is the object written.
//! - `events`: events sent to and received from the other side; `detail` is the payload. As
//!   the peer: small payloads are always shown, the large ones (Applications, ApplicationSets,
//!   AppProjects) only with `events` on, sensitive ones (repositories, resource writes, Redis
//!   responses; here also terminal and container-log data) never.
//! - `informers`: what the watches see (add, update, delete); `detail` is the object.
//!
//! Secrets are never shown (`<redacted: Secret>`); `metadata.managedFields` is dropped.

use std::sync::atomic::{AtomicU8, Ordering};

use serde_json::Value;

use crate::event::{Event, EventType, Target};
use crate::store::Kind;

mod store;
pub use store::LoggedStore;

/// The peer's list (`cmdutil.AvailableFullDetailCategories`).
pub const AVAILABLE_CATEGORIES: &str = "all, actions, events, informers";

/// Which categories log full objects.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FullDetail {
    pub actions: bool,
    pub events: bool,
    pub informers: bool,
}

impl FullDetail {
    /// Parses the flag's values as `cmdutil.ParseFullDetail`: case-insensitive, blanks ignored,
    /// `all` turns every category on; an unknown category is warned about and skipped.
    pub fn parse<S: AsRef<str>>(input: &[S]) -> FullDetail {
        let mut cfg = FullDetail::default();
        for e in input {
            let category = e.as_ref().trim().to_lowercase();
            match category.as_str() {
                "" => {}
                "all" => {
                    cfg = FullDetail {
                        actions: true,
                        events: true,
                        informers: true,
                    }
                }
                "actions" => cfg.actions = true,
                "events" => cfg.events = true,
                "informers" => cfg.informers = true,
                _ => tracing::warn!(
                    "an invalid full-detail category {category:?} was specified. Available categories are: {AVAILABLE_CATEGORIES}, skipping"
                ),
            }
        }
        cfg
    }

    fn bits(self) -> u8 {
        u8::from(self.actions) | u8::from(self.events) << 1 | u8::from(self.informers) << 2
    }

    fn from_bits(b: u8) -> FullDetail {
        FullDetail {
            actions: b & 1 != 0,
            events: b & 2 != 0,
            informers: b & 4 != 0,
        }
    }
}

/// The process-wide setting (the peer's `logging.SetFullDetailConfig`).
static CONFIG: AtomicU8 = AtomicU8::new(0);

/// Sets the process-wide setting.
pub fn set(cfg: FullDetail) {
    CONFIG.store(cfg.bits(), Ordering::Relaxed);
}

/// The process-wide setting.
pub fn get() -> FullDetail {
    FullDetail::from_bits(CONFIG.load(Ordering::Relaxed))
}

/// Whether these debug lines are written at all (nothing is computed for them otherwise).
pub fn enabled() -> bool {
    tracing::enabled!(tracing::Level::DEBUG)
}

/// `obj` as the `detail` field: JSON without `metadata.managedFields`; Secrets redacted.
pub fn object_detail(kind: Kind, obj: &Value) -> String {
    if kind == Kind::Secret || obj["kind"] == "Secret" {
        return "<redacted: Secret>".into();
    }
    if obj["metadata"].get("managedFields").is_some() {
        let mut o = obj.clone();
        if let Some(m) = o["metadata"].as_object_mut() {
            m.remove("managedFields");
        }
        return o.to_string();
    }
    obj.to_string()
}

/// The peer's `resourceType`: the lowercase kind (`application`, `appproject`, `secret`).
pub fn resource_type(kind: Kind) -> String {
    kind.as_str().to_ascii_lowercase()
}

/// Meta events (ACKs, heartbeats, cluster cache info): logged at trace level, without payload.
pub fn is_meta_event(target: Target) -> bool {
    matches!(
        target,
        Target::EventProcessed | Target::Heartbeat | Target::ClusterCacheInfoUpdate
    )
}

/// Events whose payload may hold secrets: never shown (peer: `isSensitiveEvent`, plus terminal
/// keystrokes and container logs).
pub fn is_sensitive_event(target: Target, ty: EventType) -> bool {
    match target {
        Target::Repository | Target::Terminal | Target::ContainerLog => true,
        Target::Resource => ty != EventType::Method(crate::event::HttpMethod::Get),
        Target::Redis => ty != EventType::RedisRequest,
        _ => false,
    }
}

/// Events with whole objects: shown only with `events` on (peer: `isLargeEvent`).
pub fn is_large_event(target: Target) -> bool {
    matches!(
        target,
        Target::Application | Target::ApplicationSet | Target::AppProject
    )
}

/// Whether an event's payload is shown.
pub fn shows_event_data(cfg: FullDetail, target: Target, ty: EventType, data: &[u8]) -> bool {
    let s = String::from_utf8_lossy(data);
    let s = s.trim();
    let has_data = !s.is_empty() && s != "{}" && s != "null";
    has_data && !is_sensitive_event(target, ty) && (!is_large_event(target) || cfg.events)
}

/// Direction of an event on the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Send,
    Recv,
}

/// Logs an event sent or received (peer: `LogEventSent` / `LogEventReceived`).
pub fn log_event(direction: Direction, ev: &Event) {
    if !enabled() {
        return;
    }
    let (dir, verb) = match direction {
        Direction::Send => ("send", "sent"),
        Direction::Recv => ("recv", "received"),
    };
    let (namespace, name) = match ev.subject.split_once('/') {
        Some((ns, n)) if !n.is_empty() => (ns, n),
        _ => ("", ev.subject.as_str()),
    };
    let target = ev.target.as_str();
    let ty = ev.ty.full();
    if is_meta_event(ev.target) {
        tracing::trace!(log_category = "events", direction = dir, event_target = target, event_type = %ty, name, namespace, "Event {verb}: {target} {}", ev.ty.short());
        return;
    }
    let data: std::borrow::Cow<'_, [u8]> = match &ev.encoded_data {
        Some(b) => std::borrow::Cow::Borrowed(b),
        None if ev.data.is_null() => std::borrow::Cow::Borrowed(&[]),
        None => std::borrow::Cow::Owned(crate::event::gojson::to_vec(&ev.data)),
    };
    if shows_event_data(get(), ev.target, ev.ty, &data) {
        let detail = String::from_utf8_lossy(&data);
        tracing::debug!(log_category = "events", direction = dir, event_target = target, event_type = %ty, name, namespace, detail = %detail, "Event {verb}: {target} {}", ev.ty.short());
    } else {
        tracing::debug!(log_category = "events", direction = dir, event_target = target, event_type = %ty, name, namespace, "Event {verb}: {target} {}", ev.ty.short());
    }
}

/// A write to the cluster (peer: `LogActionCreate` / `LogActionUpdate` / `LogActionDelete`).
pub fn log_action(action: &str, kind: Kind, namespace: &str, name: &str, obj: Option<&Value>) {
    if !enabled() {
        return;
    }
    let rt = resource_type(kind);
    let verb = match action {
        "create" => "Created",
        "update" => "Updated",
        "patch" => "Patched",
        _ => "Deleted",
    };
    match obj.filter(|_| get().actions) {
        Some(o) => {
            tracing::debug!(log_category = "actions", action, resource_type = %rt, name, namespace, detail = %object_detail(kind, o), "{verb} {rt} {namespace}/{name}")
        }
        None => {
            tracing::debug!(log_category = "actions", action, resource_type = %rt, name, namespace, "{verb} {rt} {namespace}/{name}")
        }
    }
}

/// A failed write (peer: `LogActionError`, at debug level here: the caller reports the error).
pub fn log_action_error(
    action: &str,
    kind: Kind,
    namespace: &str,
    name: &str,
    obj: Option<&Value>,
    error: &dyn std::fmt::Display,
) {
    if !enabled() {
        return;
    }
    let rt = resource_type(kind);
    match obj.filter(|_| get().actions) {
        Some(o) => {
            tracing::debug!(log_category = "actions", action, resource_type = %rt, name, namespace, %error, detail = %object_detail(kind, o), "Error performing action {action} on {rt} {namespace}/{name}")
        }
        None => {
            tracing::debug!(log_category = "actions", action, resource_type = %rt, name, namespace, %error, "Error performing action {action} on {rt} {namespace}/{name}")
        }
    }
}

/// A change a watch saw (peer: `LogInformerAdd` / `LogInformerUpdate` / `LogInformerDelete`).
pub fn log_informer(action: &str, kind: Kind, obj: &Value) {
    if !enabled() {
        return;
    }
    let rt = resource_type(kind);
    let name = obj["metadata"]["name"].as_str().unwrap_or_default();
    let namespace = obj["metadata"]["namespace"].as_str().unwrap_or_default();
    let what = match action {
        "create" => "add",
        other => other,
    };
    if get().informers && action != "delete" {
        tracing::debug!(log_category = "informers", action, resource_type = %rt, name, namespace, detail = %object_detail(kind, obj), "Informer {what}: {rt} {namespace}/{name}");
    } else {
        tracing::debug!(log_category = "informers", action, resource_type = %rt, name, namespace, "Informer {what}: {rt} {namespace}/{name}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn categories_as_the_peer_parses_them() {
        assert_eq!(FullDetail::parse::<&str>(&[]), FullDetail::default());
        assert_eq!(
            FullDetail::parse(&["ACTIONS", " events ", ""]),
            FullDetail {
                actions: true,
                events: true,
                informers: false
            }
        );
        assert_eq!(
            FullDetail::parse(&["all"]),
            FullDetail {
                actions: true,
                events: true,
                informers: true
            }
        );
        // an unknown one is skipped, the others kept
        assert_eq!(
            FullDetail::parse(&["bogus", "informers"]),
            FullDetail {
                informers: true,
                ..Default::default()
            }
        );
        for b in 0..8 {
            assert_eq!(FullDetail::from_bits(b).bits(), b);
        }
    }

    #[test]
    fn secrets_are_redacted_and_managed_fields_dropped() {
        let s = json!({"kind": "Secret", "data": {"password": "aHVudGVyMg=="}});
        assert_eq!(object_detail(Kind::Secret, &s), "<redacted: Secret>");
        let a = json!({"metadata": {"name": "a", "managedFields": [{"manager": "x"}]}, "spec": {"project": "p"}});
        let d = object_detail(Kind::Application, &a);
        assert!(!d.contains("managedFields"), "{d}");
        assert!(d.contains("\"project\":\"p\""), "{d}");
    }

    #[test]
    fn which_event_payloads_are_shown() {
        let off = FullDetail::default();
        let on = FullDetail {
            events: true,
            ..off
        };
        let app = br#"{"spec":{}}"#;
        assert!(!shows_event_data(
            off,
            Target::Application,
            EventType::Create,
            app
        ));
        assert!(shows_event_data(
            on,
            Target::Application,
            EventType::Create,
            app
        ));
        // small payloads always, empty ones never
        let get = EventType::Method(crate::event::HttpMethod::Get);
        assert!(shows_event_data(off, Target::Resource, get, b"{\"x\":1}"));
        assert!(!shows_event_data(on, Target::Resource, get, b" {} "));
        // sensitive payloads never
        let post = EventType::Method(crate::event::HttpMethod::Post);
        assert!(!shows_event_data(on, Target::Resource, post, b"{\"x\":1}"));
        assert!(!shows_event_data(
            on,
            Target::Repository,
            EventType::Create,
            app
        ));
        assert!(!shows_event_data(
            on,
            Target::Redis,
            EventType::RedisResponse,
            app
        ));
        assert!(shows_event_data(
            on,
            Target::Redis,
            EventType::RedisRequest,
            app
        ));
        assert!(!shows_event_data(
            on,
            Target::Terminal,
            EventType::TerminalRequest,
            app
        ));
    }
}
