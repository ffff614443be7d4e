//! Redis-proxy wire types and key rules, shared by the principal (RESP front for Argo CD) and the
//! agent (which answers from its local Redis): the peer's `RedisRequest` / `RedisResponse`
//! payloads (internal/event/event.go), the `redis-request` / `redis-response` events carrying
//! them (`NewRedisRequestEvent` / `NewRedisResponseEvent`), the principal's key → agent rule
//! (principal/redisproxy `extractAgentNameFromRedisCommandKey`) and the agent's key rewrite
//! (agent/inbound_redis.go `stripNamespaceFromRedisKey`).

use base64::Engine;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::event::{Event, EventType, Target};

/// How long the principal waits for an agent's answer (the peer's 60 s in
/// `sendSynchronousRedisMessageToAgent`).
pub const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);
/// How often the principal pings an agent for each Argo CD connection that uses it (the peer's
/// `beginPingGoRoutineIfNeeded` ticker).
pub const PING_INTERVAL: std::time::Duration = std::time::Duration::from_secs(60);
/// The agent closes a subscription whose principal connection sent no ping for this long (the
/// peer's `principalRedisConnectionTimeout`).
pub const CONNECTION_IDLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(600);

/// Go's `[]byte` in JSON: base64 (standard alphabet, padded), `null` for nil.
mod go_bytes {
    use super::*;

    pub fn serialize<S: Serializer>(v: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            None => s.serialize_none(),
            Some(b) => s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(b)),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
        let s: Option<String> = Option::deserialize(d)?;
        match s {
            None => Ok(None),
            Some(s) => base64::engine::general_purpose::STANDARD
                .decode(s.as_bytes())
                .map(Some)
                .map_err(|e| serde::de::Error::custom(format!("\"bytes\" is not base64: {e}"))),
        }
    }
}

/// The peer's `event.RedisRequest`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RedisRequest {
    #[serde(default)]
    pub uuid: String,
    /// One Argo CD connection to the principal's proxy.
    #[serde(rename = "connectionUuid", default)]
    pub connection_uuid: String,
    #[serde(default)]
    pub body: RedisCommandBody,
}

/// The peer's `RedisCommandBody`: exactly one of the three is set.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RedisCommandBody {
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub get: Option<RedisCommandBodyGet>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub subscribe: Option<RedisCommandBodySubscribe>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub ping: Option<Empty>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RedisCommandBodyGet {
    #[serde(default)]
    pub key: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RedisCommandBodySubscribe {
    /// The peer's `ChannelName`, tagged `channel`.
    #[serde(rename = "channel", default)]
    pub channel_name: String,
}

/// The peer's empty structs (`RedisCommandBodyPing`, `RedisResponseBodyPong`): `{}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Empty {}

/// The peer's `event.RedisResponse`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RedisResponse {
    /// The request's UUID (also the response event's `eventid`).
    #[serde(default)]
    pub uuid: String,
    #[serde(rename = "connectionUuid", default)]
    pub connection_uuid: String,
    #[serde(default)]
    pub body: RedisResponseBody,
}

/// The peer's `RedisResponseBody`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RedisResponseBody {
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub get: Option<RedisResponseBodyGet>,
    #[serde(
        rename = "subscribeResponse",
        skip_serializing_if = "Option::is_none",
        default
    )]
    pub subscribe_response: Option<RedisResponseBodySubscribeResponse>,
    #[serde(
        rename = "pushFromSubscribe",
        skip_serializing_if = "Option::is_none",
        default
    )]
    pub push_from_subscribe: Option<RedisResponseBodyPushFromSubscribe>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub pong: Option<Empty>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RedisResponseBodyGet {
    /// The value (`null` on a miss or an error).
    #[serde(with = "go_bytes", default)]
    pub bytes: Option<Vec<u8>>,
    #[serde(rename = "cacheHit", default)]
    pub cache_hit: bool,
    #[serde(default)]
    pub error: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RedisResponseBodySubscribeResponse {
    #[serde(default)]
    pub error: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RedisResponseBodyPushFromSubscribe {
    #[serde(rename = "channelName", default)]
    pub channel_name: String,
}

fn to_data<T: Serialize>(v: &T) -> Value {
    serde_json::to_value(v).expect("redis payloads serialize")
}

impl RedisRequest {
    /// A new request of connection `connection_uuid` (fresh UUID).
    pub fn new(connection_uuid: &str, body: RedisCommandBody) -> Self {
        Self {
            uuid: uuid::Uuid::new_v4().to_string(),
            connection_uuid: connection_uuid.to_string(),
            body,
        }
    }

    /// The `redis-request` event (dataschema `redis`, `resourceid` = `eventid` = the UUID), as
    /// the peer's `NewRedisRequestEvent`.
    pub fn to_event(&self, source: &str) -> Event {
        let mut e = Event::request(
            source,
            EventType::RedisRequest,
            Target::Redis,
            to_data(self),
        );
        e.resource_id = self.uuid.clone();
        e.event_id = self.uuid.clone();
        e
    }

    pub fn from_json(v: &Value) -> Result<Self, String> {
        serde_json::from_value(v.clone()).map_err(|e| format!("malformed redis request: {e}"))
    }

    /// The command for logs and metrics (`get`, `subscribe`, `ping`).
    pub fn command(&self) -> &'static str {
        let b = &self.body;
        match (&b.get, &b.subscribe, &b.ping) {
            (Some(_), _, _) => "get",
            (_, Some(_), _) => "subscribe",
            (_, _, Some(_)) => "ping",
            _ => "unknown",
        }
    }
}

impl RedisResponse {
    /// The `redis-response` event: a fresh `resourceid`, `eventid` = the request's UUID (as the
    /// peer's `NewRedisResponseEvent`; pushes carry the SUBSCRIBE request's UUID).
    pub fn to_event(&self, source: &str) -> Event {
        let mut e = Event::request(
            source,
            EventType::RedisResponse,
            Target::Redis,
            to_data(self),
        );
        e.event_id = self.uuid.clone();
        e
    }

    /// Reads the payload, taking the event's data (a 25 MB value is not copied twice).
    pub fn from_data(v: Value) -> Result<Self, String> {
        serde_json::from_value(v).map_err(|e| format!("malformed redis response: {e}"))
    }
}

/// Bytes a GET value of `n` bytes takes in a `redis-response` event (base64 plus envelope); the
/// agent refuses values whose event would exceed the message size limit.
pub fn encoded_get_size(n: usize, key_len: usize) -> usize {
    n.div_ceil(3) * 4 + key_len + 1024
}

/// Which agent a GET / SUBSCRIBE key belongs to, as the peer's
/// `extractAgentNameFromRedisCommandKey` with namespace-based mapping: `Ok(None)` for keys the
/// hub Redis keeps (everything but `app|managed-resources…` / `app|resources-tree…`, and those of
/// Applications in the principal's own namespace, which have no `<namespace>_`), `Ok(Some(agent))`
/// for `app|{managed-resources,resources-tree}|<agent>_<app>|<version>`, `Err` for such a key
/// without exactly four `|`-separated fields.
pub fn agent_of_key(key: &str) -> Result<Option<&str>, String> {
    // an empty namespace names no agent (the peer forwards it when the name is "")
    Ok(app_field_of_key(key)?.and_then(|app| {
        app.split_once('_')
            .map(|(ns, _)| ns)
            .filter(|ns| !ns.is_empty())
    }))
}

/// The `[<ns>_]<app>` field of `app|{managed-resources,resources-tree}|[<ns>_]<app>|<version>`;
/// `Ok(None)` for every other key, `Err` for such a key without exactly four `|`-separated
/// fields (peer: redisproxy.go `extractAgentNameFromRedisCommandKey`).
pub fn app_field_of_key(key: &str) -> Result<Option<&str>, String> {
    if !key.starts_with("app|managed-resources") && !key.starts_with("app|resources-tree") {
        return Ok(None);
    }
    let fields: Vec<&str> = key.split('|').collect();
    if fields.len() != 4 {
        return Err(format!(
            "unexpected number of fields in expected key: '{key}'"
        ));
    }
    Ok(Some(fields[2]))
}

/// The key the agent's Argo CD uses: `<namespace>_` removed from the Application field, as the
/// peer's `stripNamespaceFromRedisKey` (git caches pass unchanged; other keys are refused, so
/// the principal can never read arbitrary keys of the agent's Redis).
pub fn strip_namespace(key: &str) -> Result<String, String> {
    if key.starts_with("git-refs|") || key.starts_with("gitdirs|") || key.starts_with("gitfiles|") {
        return Ok(key.to_string());
    }
    if !key.starts_with("app|resources-tree|") && !key.starts_with("app|managed-resources|") {
        return Err(format!("unexpected redis key request: '{key}'"));
    }
    let mut fields: Vec<&str> = key.split('|').collect();
    if fields.len() != 4 {
        return Err(format!("unexpected key format: '{key}'"));
    }
    let Some((_, app)) = fields[2].split_once('_') else {
        return Err(format!("unexpected key format, missing '_': '{key}'"));
    };
    fields[2] = app;
    Ok(fields.join("|"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keys_route_as_the_peer() {
        for (k, want) in [
            (
                "app|managed-resources|agent-a_my-app|1.8.3",
                Ok(Some("agent-a")),
            ),
            (
                "app|resources-tree|agent-a_my_app|1.8.3.gz",
                Ok(Some("agent-a")),
            ),
            // the principal's own namespace: no '_' → hub
            ("app|resources-tree|my-app|1.8.3.gz", Ok(None)),
            (
                "mfst|annotation:x|agent-a_my-app|r|guestbook|1|1.8.3.gz",
                Ok(None),
            ),
            ("cluster|info|https://x?agentName=a|1.8.3.gz", Ok(None)),
            ("new-revoked-token", Ok(None)),
            ("git-refs|https://github.com/x|1.8.3", Ok(None)),
            ("app|resources-tree|_x|1.8.3", Ok(None)),
        ] {
            let want: Result<Option<&str>, String> = want;
            assert_eq!(agent_of_key(k), want, "{k}");
        }
        assert!(agent_of_key("app|resources-tree|a_b|c|d").is_err());
        assert!(agent_of_key("app|resources-tree|a_b").is_err());
    }

    #[test]
    fn the_agent_rewrites_only_app_and_git_keys() {
        assert_eq!(
            strip_namespace("app|resources-tree|agent-a_my-app|1.8.3.gz").unwrap(),
            "app|resources-tree|my-app|1.8.3.gz"
        );
        assert_eq!(
            strip_namespace("app|managed-resources|agent-a_my_app|1.8.3").unwrap(),
            "app|managed-resources|my_app|1.8.3"
        );
        assert_eq!(strip_namespace("gitdirs|x|y").unwrap(), "gitdirs|x|y");
        for k in [
            "cluster|info|https://kubernetes.default.svc|1.8.3.gz",
            "app|resources-tree|no-namespace|1.8.3",
            "app|resources-tree|a_b|1|2",
            "anything",
        ] {
            assert!(strip_namespace(k).is_err(), "{k}");
        }
    }

    /// Payloads exactly as the peer's Go structs marshal (`encoding/json`, field tags).
    #[test]
    fn payloads_match_the_peers_json() {
        // NewRedisRequestEvent(connUUID, RedisCommandBody{Get: &RedisCommandBodyGet{Key: k}})
        let go_get = json!({"uuid":"u1","connectionUuid":"c1","body":{"get":{"key":"app|resources-tree|a_x|1.8.3.gz"}}});
        let r = RedisRequest::from_json(&go_get).unwrap();
        assert_eq!(r.command(), "get");
        assert_eq!(to_data(&r), go_get);
        let go_sub = json!({"uuid":"u2","connectionUuid":"c1","body":{"subscribe":{"channel":"app|managed-resources|a_x|1.8.3"}}});
        let r = RedisRequest::from_json(&go_sub).unwrap();
        assert_eq!(
            r.body.subscribe.as_ref().unwrap().channel_name,
            "app|managed-resources|a_x|1.8.3"
        );
        assert_eq!(to_data(&r), go_sub);
        let go_ping = json!({"uuid":"u3","connectionUuid":"c1","body":{"ping":{}}});
        assert_eq!(
            to_data(&RedisRequest::from_json(&go_ping).unwrap()),
            go_ping
        );

        // RedisResponseBodyGet{Bytes: []byte("hello"), CacheHit: true}
        let hit = json!({"uuid":"u1","connectionUuid":"c1","body":{"get":{"bytes":"aGVsbG8=","cacheHit":true,"error":""}}});
        let r = RedisResponse::from_data(hit.clone()).unwrap();
        assert_eq!(
            r.body.get.as_ref().unwrap().bytes.as_deref(),
            Some(&b"hello"[..])
        );
        assert_eq!(to_data(&r), hit);
        // a miss: Bytes nil → null
        let miss = json!({"uuid":"u1","connectionUuid":"c1","body":{"get":{"bytes":null,"cacheHit":false,"error":""}}});
        let r = RedisResponse::from_data(miss.clone()).unwrap();
        assert!(!r.body.get.as_ref().unwrap().cache_hit);
        assert_eq!(to_data(&r), miss);
        for v in [
            json!({"uuid":"u2","connectionUuid":"c1","body":{"subscribeResponse":{"error":""}}}),
            json!({"uuid":"u2","connectionUuid":"c1","body":{"pushFromSubscribe":{"channelName":"app|managed-resources|a_x|1.8.3"}}}),
            json!({"uuid":"u3","connectionUuid":"c1","body":{"pong":{}}}),
        ] {
            assert_eq!(to_data(&RedisResponse::from_data(v.clone()).unwrap()), v);
        }
        assert!(RedisResponse::from_data(json!({"body":{"get":{"bytes":"%%%"}}})).is_err());
    }

    #[test]
    fn events_carry_the_ids_as_the_peer() {
        let req = RedisRequest::new("c1", RedisCommandBody::default());
        let e = req.to_event("s");
        assert_eq!(e.ty, EventType::RedisRequest);
        assert_eq!(e.target, Target::Redis);
        assert_eq!(
            (e.resource_id.as_str(), e.event_id.as_str()),
            (req.uuid.as_str(), req.uuid.as_str())
        );
        let resp = RedisResponse {
            uuid: req.uuid.clone(),
            connection_uuid: "c1".into(),
            body: Default::default(),
        };
        let e = resp.to_event("s");
        assert_eq!(e.ty, EventType::RedisResponse);
        assert_eq!(e.event_id, req.uuid);
        assert_ne!(e.resource_id, req.uuid);
    }
}
