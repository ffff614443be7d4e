//! A real `redis-server` (Debian's) on a free loopback port, stopped on drop. Shared by the
//! Redis-proxy tests and its benchmark.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};

pub struct RedisServer {
    pub addr: String,
    _child: tokio::process::Child,
    _dir: tempfile::TempDir,
}

/// Whether `redis-server` can be run (when not, callers print `SKIP:` and pass).
pub fn available() -> bool {
    std::process::Command::new("redis-server")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

impl RedisServer {
    /// Starts a server and returns once it logs that it accepts connections.
    pub async fn start() -> RedisServer {
        Self::start_with(None).await
    }

    /// A TLS-only server with this certificate, key (PEM) and client CA (clients not verified).
    #[allow(dead_code)]
    pub async fn start_tls(cert: &[u8], key: &[u8], ca: &[u8]) -> RedisServer {
        Self::start_with(Some((cert, key, ca))).await
    }

    async fn start_with(tls: Option<(&[u8], &[u8], &[u8])>) -> RedisServer {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = tokio::process::Command::new("redis-server");
        match tls {
            None => {
                cmd.args(["--port", &port.to_string()]);
            }
            Some((cert, key, ca)) => {
                let f = |n: &str, b: &[u8]| {
                    let p = dir.path().join(n);
                    std::fs::write(&p, b).unwrap();
                    p
                };
                cmd.args(["--port", "0", "--tls-port", &port.to_string()])
                    .arg("--tls-cert-file")
                    .arg(f("tls.crt", cert))
                    .arg("--tls-key-file")
                    .arg(f("tls.key", key))
                    .arg("--tls-ca-cert-file")
                    .arg(f("ca.crt", ca))
                    .args(["--tls-auth-clients", "no"]);
            }
        }
        let mut child = cmd
            .args(["--bind", "127.0.0.1"])
            .args(["--save", ""])
            .args(["--appendonly", "no"])
            .args(["--protected-mode", "no"])
            .arg("--dir")
            .arg(dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("redis-server starts");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        tokio::time::timeout(Duration::from_secs(20), async {
            while let Some(l) = lines.next_line().await.unwrap() {
                if l.contains("Ready to accept connections") {
                    return;
                }
            }
            panic!("redis-server exited before accepting connections");
        })
        .await
        .expect("redis-server ready within 20s");
        // keep draining its log so it never blocks on a full pipe
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        RedisServer {
            addr: format!("127.0.0.1:{port}"),
            _child: child,
            _dir: dir,
        }
    }

    pub fn url(&self) -> String {
        format!("redis://{}/", self.addr)
    }

    /// A direct connection (to seed values and publish).
    pub async fn conn(&self) -> redis::aio::MultiplexedConnection {
        let cfg =
            redis::AsyncConnectionConfig::new().set_response_timeout(Some(Duration::from_secs(60)));
        redis::Client::open(self.url())
            .unwrap()
            .get_multiplexed_async_connection_with_config(&cfg)
            .await
            .unwrap()
    }
}
