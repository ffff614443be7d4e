//! What container logs and the web terminal share on the agent: the live gRPC connection to the
//! principal (their streams are separate RPCs beside the event stream, as the peer's), a fresh
//! access token for each, and the requests in flight (a duplicate request is ignored, as the
//! peer's `inflightLogs` / `inflightTerminal`).

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

use base64::Engine;
use tonic::transport::Channel as Transport;

/// The principal's connection, its calls counted in `grpc_client_*` as the event stream's.
pub(super) type Channel = argocd_pull_agent_core::grpc_metrics::MeteredClient<Transport>;

use argocd_pull_agent_core::proto::authapi::{self, authentication_client::AuthenticationClient};

/// Renew the access token when it has less than this left.
const RENEW_BEFORE_SECS: i64 = 60;

#[derive(Clone)]
struct Conn {
    channel: Channel,
    access: String,
    refresh: String,
}

type Tasks = Arc<Mutex<HashMap<String, Option<tokio::task::AbortHandle>>>>;

#[derive(Default)]
pub(super) struct PodStreams {
    conn: Mutex<Option<Conn>>,
    /// log and terminal tasks by request UUID (stopped with the agent)
    inflight: Tasks,
}

/// Seconds until a JWT's `exp` (unverified: the principal judges it; this only decides when to
/// renew), `None` when unreadable.
fn seconds_left(token: &str) -> Option<i64> {
    let payload = token.split('.').nth(1)?;
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    let v: serde_json::Value = serde_json::from_slice(&raw).ok()?;
    Some(v["exp"].as_i64()? - jiff::Timestamp::now().as_second())
}

impl PodStreams {
    /// The connection of the stream just established (called by the connect loop).
    pub(super) fn connected(&self, channel: Channel, access: String, refresh: String) {
        *self.conn.lock().unwrap_or_else(|e| e.into_inner()) = Some(Conn {
            channel,
            access,
            refresh,
        });
    }

    /// Runs `task` for request `uuid` unless that request is already in flight (`false`).
    pub(super) fn spawn(
        &self,
        uuid: &str,
        task: impl Future<Output = ()> + Send + 'static,
    ) -> bool {
        let mut g = self.inflight.lock().unwrap_or_else(|e| e.into_inner());
        if g.contains_key(uuid) {
            return false;
        }
        let map = self.inflight.clone();
        let key = uuid.to_string();
        let h = tokio::spawn(async move {
            task.await;
            map.lock().unwrap_or_else(|e| e.into_inner()).remove(&key);
        });
        g.insert(uuid.to_string(), Some(h.abort_handle()));
        true
    }

    /// Stops every log stream and terminal (the agent stops).
    pub(super) fn abort_all(&self) {
        for (_, h) in self
            .inflight
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain()
        {
            if let Some(h) = h {
                h.abort();
            }
        }
    }

    /// A request on the principal's connection carrying a valid access token.
    pub(super) async fn request<T>(&self, msg: T) -> Result<(Channel, tonic::Request<T>), String> {
        let c = self
            .conn
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .ok_or("not connected to the principal")?;
        let mut access = c.access.clone();
        if seconds_left(&access).is_some_and(|s| s < RENEW_BEFORE_SECS) {
            let r = AuthenticationClient::new(c.channel.clone())
                .refresh_token(authapi::RefreshTokenRequest {
                    refresh_token: c.refresh.clone(),
                })
                .await
                .map_err(|s| format!("renewing the access token: {}", s.message()))?
                .into_inner();
            access = r.access_token.clone();
            let mut g = self.conn.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(cur) = g.as_mut() {
                cur.access = r.access_token;
                if !r.refresh_token.is_empty() {
                    cur.refresh = r.refresh_token;
                }
            }
        }
        let mut req = tonic::Request::new(msg);
        req.metadata_mut().insert(
            "authorization",
            access
                .parse()
                .map_err(|_| "the access token is not a valid header value")?,
        );
        Ok((c.channel, req))
    }
}

/// The API server's error as this project's principal reads it: a `Status` JSON (so the caller
/// gets the real HTTP status); other errors as text.
pub(super) fn error_text(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => {
            let mut v = serde_json::to_value(&**s).unwrap_or_default();
            if let Some(o) = v.as_object_mut() {
                o.insert("kind".into(), "Status".into());
                o.insert("apiVersion".into(), "v1".into());
                o.entry("status").or_insert_with(|| "Failure".into());
            }
            v.to_string()
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(exp: i64) -> String {
        let b = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
        format!(
            "{}.{}.sig",
            b(r#"{"alg":"RS512"}"#),
            b(&format!(r#"{{"exp":{exp},"aud":"x"}}"#))
        )
    }

    #[test]
    fn the_access_token_is_renewed_only_near_its_expiry() {
        let now = jiff::Timestamp::now().as_second();
        let left = seconds_left(&token(now + 300)).unwrap();
        assert!((295..=300).contains(&left), "{left}");
        assert!(seconds_left(&token(now + 10)).unwrap() < RENEW_BEFORE_SECS);
        assert_eq!(seconds_left("not-a-jwt"), None);
    }

    #[tokio::test]
    async fn a_duplicate_request_is_not_started_twice_and_stop_aborts() {
        let p = PodStreams::default();
        let (mut tx, rx) = tokio::sync::oneshot::channel::<()>();
        assert!(p.spawn("u", async move {
            let _ = rx.await;
        }));
        assert!(!p.spawn("u", async {}), "already in flight");
        p.abort_all();
        // the task was aborted: its receiver is gone
        tokio::time::timeout(std::time::Duration::from_secs(5), tx.closed())
            .await
            .unwrap();
        assert!(p.spawn("u", async {}), "a stopped request may run again");
    }
}
