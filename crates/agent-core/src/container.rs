//! Container logs and the web terminal, wire types shared by the principal and the agent: the
//! peer's `ContainerLogRequest` / `ContainerTerminalRequest` payloads and their events
//! (internal/event/event.go `NewLogRequestEvent`, `NewTerminalRequestEvent`). The bytes travel
//! over the peer's `LogStreamService` / `TerminalStreamService` (crate::proto).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::event::{Event, EventType, HttpMethod, Target};

/// The peer's `event.ContainerLogRequest` (JSON field names, order and `omitempty` as Go's).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerLogRequest {
    pub uuid: String,
    pub namespace: String,
    pub pod_name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub container: String,
    #[serde(default, skip_serializing_if = "is_false")]
    pub follow: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tail_lines: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since_seconds: Option<i64>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub since_time: String,
    #[serde(default, skip_serializing_if = "is_false")]
    pub timestamps: bool,
    #[serde(default, skip_serializing_if = "is_false")]
    pub previous: bool,
    #[serde(
        default,
        rename = "insecureSkipTLSVerifyBackend",
        skip_serializing_if = "is_false"
    )]
    pub insecure_skip_tls_verify_backend: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_bytes: Option<i64>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_true(v: Option<&String>) -> bool {
    v.is_some_and(|v| v.eq_ignore_ascii_case("true"))
}

impl ContainerLogRequest {
    /// As the peer's `NewLogRequestEvent`: the query parameters of a `pods/<p>/log` request
    /// (first values); booleans are `true` case-insensitively, unparsable numbers are ignored.
    pub fn from_params(
        uuid: &str,
        namespace: &str,
        pod: &str,
        params: &BTreeMap<String, String>,
    ) -> Self {
        let int = |k: &str| params.get(k).and_then(|v| v.parse::<i64>().ok());
        ContainerLogRequest {
            uuid: uuid.into(),
            namespace: namespace.into(),
            pod_name: pod.into(),
            container: params.get("container").cloned().unwrap_or_default(),
            follow: is_true(params.get("follow")),
            tail_lines: int("tailLines"),
            since_seconds: int("sinceSeconds"),
            since_time: params.get("sinceTime").cloned().unwrap_or_default(),
            timestamps: is_true(params.get("timestamps")),
            previous: is_true(params.get("previous")),
            insecure_skip_tls_verify_backend: is_true(params.get("insecureSkipTLSVerifyBackend")),
            limit_bytes: int("limitBytes"),
        }
    }

    /// The event (the peer's `NewLogRequestEvent`): type = the raw HTTP method, dataschema
    /// `containerlog`, `resourceid` = `eventid` = the request UUID.
    pub fn to_event(&self, source: &str, method: HttpMethod) -> Event {
        let data = serde_json::to_value(self).unwrap_or(Value::Null);
        let mut e = Event::request(
            source,
            EventType::Method(method),
            Target::ContainerLog,
            data,
        );
        e.id = String::new();
        e.resource_id = self.uuid.clone();
        e.event_id = self.uuid.clone();
        e
    }

    /// Reads the payload; `Err` names what is wrong.
    pub fn from_json(v: &Value) -> Result<Self, String> {
        let r: Self = serde_json::from_value(v.clone())
            .map_err(|e| format!("container log request payload is malformed: {e}"))?;
        check_names("container log", &r.uuid, &r.namespace, &r.pod_name)?;
        Ok(r)
    }
}

/// The peer's `event.ContainerTerminalRequest`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerTerminalRequest {
    pub uuid: String,
    pub namespace: String,
    pub pod_name: String,
    #[serde(default)]
    pub container_name: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    #[serde(default)]
    pub tty: bool,
    #[serde(default)]
    pub stdin: bool,
    #[serde(default)]
    pub stdout: bool,
    #[serde(default)]
    pub stderr: bool,
}

impl ContainerTerminalRequest {
    /// The event (the peer's `NewTerminalRequestEvent`): type `terminal-request`, dataschema
    /// `terminal`, `resourceid` = `eventid` = the session UUID.
    pub fn to_event(&self, source: &str) -> Event {
        let data = serde_json::to_value(self).unwrap_or(Value::Null);
        let mut e = Event::request(source, EventType::TerminalRequest, Target::Terminal, data);
        e.id = String::new();
        e.resource_id = self.uuid.clone();
        e.event_id = self.uuid.clone();
        e
    }

    pub fn from_json(v: &Value) -> Result<Self, String> {
        let r: Self = serde_json::from_value(v.clone())
            .map_err(|e| format!("terminal request payload is malformed: {e}"))?;
        check_names("terminal", &r.uuid, &r.namespace, &r.pod_name)?;
        Ok(r)
    }
}

fn check_names(what: &str, uuid: &str, namespace: &str, pod: &str) -> Result<(), String> {
    if uuid.is_empty() {
        return Err(format!("{what} request has no uuid"));
    }
    for (k, v) in [("namespace", namespace), ("podName", pod)] {
        if v.is_empty() || v.contains('/') || v == ".." || v.contains('?') || v.contains('#') {
            return Err(format!(
                "{what} request {k} {v:?} is not a single non-empty path segment"
            ));
        }
    }
    Ok(())
}

/// A Kubernetes `Status` failure body (what an API server answers with).
pub fn failure_status(code: u16, reason: &str, message: &str) -> Value {
    serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "message": message, "reason": reason, "code": code,
    })
}

/// The HTTP status and body an error string from an agent maps to: this project's agent sends
/// the API server's `Status` JSON; a peer agent sends client-go's error text (500).
pub fn error_to_status(error: &str) -> (u16, Value) {
    if let Ok(v) = serde_json::from_str::<Value>(error)
        && v["kind"] == "Status"
    {
        let code = v["code"]
            .as_u64()
            .filter(|c| (400..=599).contains(c))
            .unwrap_or(500) as u16;
        return (code, v);
    }
    (500, failure_status(500, "InternalError", error))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_params_parse_as_the_peer() {
        let p: BTreeMap<String, String> = [
            ("container", "web"),
            ("follow", "TRUE"),
            ("tailLines", "10"),
            ("sinceSeconds", "x"),
            ("timestamps", "true"),
            ("limitBytes", "2048"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let r = ContainerLogRequest::from_params("u", "ns", "p", &p);
        assert!(r.follow && r.timestamps && !r.previous);
        assert_eq!(r.tail_lines, Some(10));
        assert_eq!(r.since_seconds, None, "unparsable numbers are dropped");
        assert_eq!(r.limit_bytes, Some(2048));
        assert_eq!(
            ContainerLogRequest::from_json(&serde_json::to_value(&r).unwrap()).unwrap(),
            r
        );
    }

    #[test]
    fn payloads_reject_missing_or_path_like_names() {
        let bad = serde_json::json!({"uuid": "u", "namespace": "../x", "podName": "p"});
        assert!(
            ContainerLogRequest::from_json(&bad)
                .unwrap_err()
                .contains("namespace")
        );
        let bad = serde_json::json!({"uuid": "", "namespace": "n", "podName": "p"});
        assert!(
            ContainerTerminalRequest::from_json(&bad)
                .unwrap_err()
                .contains("uuid")
        );
    }

    #[test]
    fn agent_errors_map_to_http_statuses() {
        let s = failure_status(404, "NotFound", "pods \"x\" not found");
        let (code, body) = error_to_status(&s.to_string());
        assert_eq!((code, body["reason"].as_str()), (404, Some("NotFound")));
        let (code, body) = error_to_status("pods \"x\" is forbidden");
        assert_eq!(code, 500);
        assert_eq!(body["message"], "pods \"x\" is forbidden");
    }

    /// The golden bytes of the real Go SDK for the peer's `NewLogRequestEvent` /
    /// `NewTerminalRequestEvent` (tests/fixtures/wire, see its README): ours are identical and
    /// theirs parse into the same requests.
    fn golden(pb: &[u8], ours: Event) -> Event {
        use prost::Message;
        let mut ours = ours;
        ours.source = String::new();
        ours.sent_at = Some("2026-08-21T10:15:30.123456789Z".into());
        let bytes = ours.to_wire().event.unwrap().encode_to_vec();
        assert_eq!(bytes, pb, "byte-identical to the Go peer's encoding");
        let ce = crate::proto::io::cloudevents::v1::CloudEvent::decode(pb).unwrap();
        let env = crate::proto::eventstreamapi::Event { event: Some(ce) };
        Event::from_wire(&env).unwrap()
    }

    #[test]
    fn container_log_request_is_the_peers_wire() {
        let params: BTreeMap<String, String> = [
            ("container", "guestbook-ui"),
            ("follow", "true"),
            ("tailLines", "100"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let uuid = "e3b0c442-98fc-4c14-9afb-f4c8996fb924";
        let req = ContainerLogRequest::from_params(
            uuid,
            "guestbook",
            "guestbook-ui-6b7f6b9c8d-x2x9q",
            &params,
        );
        let ev = golden(
            include_bytes!("../tests/fixtures/wire/containerlog-request.pb"),
            req.to_event("", HttpMethod::Get),
        );
        assert_eq!(ev.ty, EventType::Method(HttpMethod::Get));
        assert_eq!(ev.target, Target::ContainerLog);
        assert_eq!(
            (ev.event_id.as_str(), ev.resource_id.as_str()),
            (uuid, uuid)
        );
        assert_eq!(ContainerLogRequest::from_json(&ev.data).unwrap(), req);
    }

    #[test]
    fn terminal_request_is_the_peers_wire() {
        let uuid = "7d865e95-9e4b-4bd0-a2f3-ad36a7c5f1b2";
        let req = ContainerTerminalRequest {
            uuid: uuid.into(),
            namespace: "guestbook".into(),
            pod_name: "guestbook-ui-6b7f6b9c8d-x2x9q".into(),
            container_name: "guestbook-ui".into(),
            command: vec!["/bin/sh".into()],
            tty: true,
            stdin: true,
            stdout: true,
            stderr: true,
        };
        let ev = golden(
            include_bytes!("../tests/fixtures/wire/terminal-request.pb"),
            req.to_event(""),
        );
        assert_eq!(ev.ty, EventType::TerminalRequest);
        assert_eq!(ev.target, Target::Terminal);
        assert_eq!(ContainerTerminalRequest::from_json(&ev.data).unwrap(), req);
    }

    #[test]
    fn stream_frames_use_the_peers_field_numbers() {
        use crate::proto::logstreamapi::LogStreamData;
        use crate::proto::terminalstreamapi::TerminalStreamData;
        use prost::Message;
        // logstream.proto: request_uuid=1, data=2, eof=3, error=4
        let f = LogStreamData {
            request_uuid: "u".into(),
            data: b"x".to_vec(),
            eof: true,
            error: "e".into(),
        };
        assert_eq!(f.encode_to_vec(), b"\x0a\x01u\x12\x01x\x18\x01\x22\x01e");
        // terminalstream.proto: stream_type=3, resize=4, rows=5, cols=6, eof=7, error=8
        let t = TerminalStreamData {
            request_uuid: "u".into(),
            stream_type: "stdin".into(),
            resize: true,
            rows: 24,
            cols: 80,
            ..Default::default()
        };
        assert_eq!(
            t.encode_to_vec(),
            b"\x0a\x01u\x1a\x05stdin\x20\x01\x28\x18\x30\x50"
        );
    }
}
