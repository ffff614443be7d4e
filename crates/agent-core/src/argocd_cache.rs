//! Argo CD's cluster-info cache in Redis. The principal writes each agent's `ClusterInfo` where
//! Argo CD reads it; the agent reads its local Argo CD's (for `clusterCacheInfoUpdate`). Redis
//! key
//! `cluster|info|<server>|1.8.3` (`.gz` with gzip compression), JSON as Go's `json.Encoder`
//! writes it, 10 minutes expiry (Argo CD's util/cache/appstate `SetClusterInfo`, as the peer's
//! cluster manager calls it). `<server>` is the cluster secret's server URL, as `argocd-agentctl
//! agent create` writes it: `https://<resource-proxy-address>?agentName=<agent>`.

use std::io::Write;
use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// Argo CD's `common.CacheVersion`, suffixed to every cache key.
pub const CACHE_VERSION: &str = "1.8.3";
/// Argo CD's `clusterInfoCacheExpiration`.
pub const CLUSTER_INFO_EXPIRY: Duration = Duration::from_secs(600);
/// How often every agent's info is written again (the peer refreshes every 3 minutes), well
/// before it expires.
pub const REFRESH: Duration = Duration::from_secs(180);

/// Where and how to write.
#[derive(Clone, Debug)]
pub struct ArgoCacheConfig {
    /// `host:port` of the hub Redis (the peer's `--redis-server-address`).
    pub address: String,
    pub password: Option<String>,
    /// gzip values and `.gz` keys (the peer's `--redis-compression-type gzip`, its default).
    pub gzip: bool,
    /// The resource proxy address the cluster secrets point at (`--resource-proxy-address`).
    pub resource_proxy_address: String,
}

impl ArgoCacheConfig {
    /// The cluster secret's server URL of `agent`.
    pub fn server_url(&self, agent: &str) -> String {
        format!("https://{}?agentName={agent}", self.resource_proxy_address)
    }

    /// The Redis key Argo CD reads the cluster info of `server` from.
    pub fn key(&self, server: &str) -> String {
        cluster_info_key(server, self.gzip)
    }

    /// The value: `json.Encoder.Encode` (compact, newline-terminated, Go escaping), gzipped
    /// when configured.
    pub fn value(&self, info: &Value) -> Vec<u8> {
        let mut json = crate::event::gojson::to_vec(info);
        json.push(b'\n');
        if !self.gzip {
            return json;
        }
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(&json).expect("writing to memory");
        gz.finish().expect("writing to memory")
    }
}

/// Argo CD's key of `server`'s cluster info.
pub fn cluster_info_key(server: &str, gzip: bool) -> String {
    let k = format!("cluster|info|{server}|{CACHE_VERSION}");
    if gzip { format!("{k}.gz") } else { k }
}

/// Decodes a cached value (gunzip when `gzip`, then JSON).
pub fn decode_value(raw: &[u8], gzip: bool) -> anyhow::Result<Value> {
    let json = if gzip {
        let mut s = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(raw), &mut s)
            .context("cached value is not gzip")?;
        s
    } else {
        raw.to_vec()
    };
    serde_json::from_slice(&json).context("cached value is not JSON")
}

/// One RESP connection to a Redis (reconnected on error).
pub struct RedisClient {
    address: String,
    password: Option<String>,
    conn: tokio::sync::Mutex<Option<BufReader<TcpStream>>>,
}

fn bulk(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(format!("${}\r\n", b.len()).as_bytes());
    out.extend_from_slice(b);
    out.extend_from_slice(b"\r\n");
}

fn command(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        bulk(&mut out, a);
    }
    out
}

/// One reply: simple strings and integers as text, bulk strings as bytes (`None`: nil).
async fn reply(c: &mut BufReader<TcpStream>) -> anyhow::Result<Option<Vec<u8>>> {
    let mut line = String::new();
    let n = tokio::time::timeout(Duration::from_secs(5), c.read_line(&mut line))
        .await
        .context("Redis did not answer within 5s")??;
    if n == 0 {
        bail!("Redis closed the connection");
    }
    let line = line.trim_end().to_string();
    match line.chars().next() {
        Some('+') | Some(':') => Ok(Some(line.as_bytes()[1..].to_vec())),
        Some('-') => bail!("Redis error: {}", &line[1..]),
        Some('$') => {
            let n: i64 = line[1..].parse().context("bad Redis bulk length")?;
            if n < 0 {
                return Ok(None);
            }
            let mut buf = vec![0u8; n as usize + 2];
            tokio::time::timeout(Duration::from_secs(5), c.read_exact(&mut buf))
                .await
                .context("Redis did not answer within 5s")??;
            buf.truncate(n as usize);
            Ok(Some(buf))
        }
        _ => bail!("unexpected Redis reply {line:?}"),
    }
}

impl RedisClient {
    pub fn new(address: &str, password: Option<String>) -> Self {
        Self {
            address: address.to_string(),
            password: password.filter(|p| !p.is_empty()),
            conn: tokio::sync::Mutex::new(None),
        }
    }

    async fn connect(&self) -> anyhow::Result<BufReader<TcpStream>> {
        let tcp = tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(&self.address))
            .await
            .with_context(|| format!("connecting to Redis at {} timed out", self.address))?
            .with_context(|| format!("connecting to Redis at {}", self.address))?;
        let _ = tcp.set_nodelay(true);
        let mut c = BufReader::new(tcp);
        if let Some(p) = self.password.as_deref() {
            c.get_mut()
                .write_all(&command(&[b"AUTH", p.as_bytes()]))
                .await?;
            reply(&mut c).await.context("Redis AUTH")?;
        }
        Ok(c)
    }

    /// Runs one command (reconnecting once on a broken connection).
    pub async fn call(&self, args: &[&[u8]]) -> anyhow::Result<Option<Vec<u8>>> {
        let cmd = command(args);
        let mut g = self.conn.lock().await;
        for attempt in 0..2 {
            if g.is_none() {
                *g = Some(self.connect().await?);
            }
            let c = g.as_mut().expect("connected above");
            let r = async {
                c.get_mut().write_all(&cmd).await?;
                reply(c).await
            }
            .await;
            match r {
                Ok(v) => return Ok(v),
                Err(e) if attempt == 0 && !e.to_string().starts_with("Redis error") => {
                    *g = None;
                }
                Err(e) => {
                    *g = None;
                    return Err(e);
                }
            }
        }
        unreachable!("the loop returns")
    }
}

/// Writes agents' cluster info to the hub Redis.
pub struct ClusterInfoWriter {
    cfg: ArgoCacheConfig,
    redis: RedisClient,
}

impl ClusterInfoWriter {
    pub fn new(cfg: ArgoCacheConfig) -> Self {
        let redis = RedisClient::new(&cfg.address, cfg.password.clone());
        Self { cfg, redis }
    }

    pub fn config(&self) -> &ArgoCacheConfig {
        &self.cfg
    }

    /// `SET <key of server> <value> PX 600000`.
    pub async fn write_cluster_info(&self, server: &str, info: &Value) -> anyhow::Result<()> {
        let key = self.cfg.key(server);
        let value = self.cfg.value(info);
        let ms = CLUSTER_INFO_EXPIRY.as_millis().to_string();
        self.redis
            .call(&[b"SET", key.as_bytes(), &value, b"PX", ms.as_bytes()])
            .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::io::Read;

    #[test]
    fn keys_and_values_as_argocd_reads_them() {
        let mut c = ArgoCacheConfig {
            address: "x:6379".into(),
            password: None,
            gzip: true,
            resource_proxy_address: "argocd-agent-resource-proxy:9090".into(),
        };
        let server = c.server_url("agent-1");
        assert_eq!(
            server,
            "https://argocd-agent-resource-proxy:9090?agentName=agent-1"
        );
        assert_eq!(
            c.key(&server),
            "cluster|info|https://argocd-agent-resource-proxy:9090?agentName=agent-1|1.8.3.gz"
        );
        let info = json!({"applicationsCount": 2, "cacheInfo": {}});
        let mut out = String::new();
        flate2::read::GzDecoder::new(&c.value(&info)[..])
            .read_to_string(&mut out)
            .unwrap();
        assert_eq!(out, "{\"applicationsCount\":2,\"cacheInfo\":{}}\n");
        c.gzip = false;
        assert!(!c.key(&server).ends_with(".gz"));
        assert_eq!(
            c.value(&info),
            b"{\"applicationsCount\":2,\"cacheInfo\":{}}\n"
        );
        assert_eq!(
            command(&[b"SET", b"k", b"v"]),
            b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n"
        );
    }
}
