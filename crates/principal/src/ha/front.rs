//! The front every replica puts on the principal's public ports: a TCP splice to wherever the
//! active replica serves. On the active replica that is its own principal (bound on loopback);
//! on a standby it is the active replica's front, reached at the holder's advertised host and the
//! same port. TLS stays end to end (the principal terminates it), so agent identities, Argo CD's
//! client certificates and the wire bytes are unchanged.
//!
//! A connection a standby forwards starts with a PROXY protocol v2 header (the HAProxy
//! specification); a front that receives one never forwards it again (no loops while two replicas
//! disagree about the holder for a moment), it serves it itself or holds it until it can. A
//! connection that arrives while no replica is active (the old holder crashed, its Lease has not
//! expired yet) is held, not refused, and spliced as soon as a replica takes over: agents are back
//! at the takeover instead of after their backoff.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use argocd_pull_ops::CancellationToken;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use super::{Listener, View};

/// How long a connection is held while no replica can take it.
pub(crate) const HOLD: Duration = Duration::from_secs(10);
/// How long a standby tries to reach the active replica before it looks again.
const CONNECT: Duration = Duration::from_secs(1);
/// Re-check interval while holding (Lease expiry is a time, not an event).
const RECHECK: Duration = Duration::from_millis(100);

/// The PROXY protocol v2 signature.
const SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";

/// Where a connection goes now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Route {
    /// This replica is active: its own principal.
    Local(SocketAddr),
    /// The active replica's front.
    Remote(SocketAddr),
    /// Nobody can take it yet.
    Hold,
}

/// Pure routing rule. `forwarded`: the connection came from another replica's front.
pub(crate) fn route(
    view: &View,
    me: &str,
    listener: Listener,
    public_port: u16,
    forwarded: bool,
    now: SystemTime,
) -> Route {
    if let Some(addr) = view.local.as_ref().and_then(|l| l.get(&listener)) {
        return Route::Local(*addr);
    }
    if forwarded {
        return Route::Hold;
    }
    match &view.holder {
        Some(h) if h.identity != me && h.expires > now => match h.host() {
            Some(host) => resolve(host, public_port).map_or(Route::Hold, Route::Remote),
            None => Route::Hold,
        },
        _ => Route::Hold,
    }
}

fn resolve(host: &str, port: u16) -> Option<SocketAddr> {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Some(SocketAddr::new(ip, port));
    }
    std::net::ToSocketAddrs::to_socket_addrs(&(host, port))
        .ok()?
        .next()
}

/// A PROXY v2 `PROXY` header for a TCP connection from `src` to `dst`.
pub(crate) fn proxy_header(src: SocketAddr, dst: SocketAddr) -> Vec<u8> {
    let mut h = SIGNATURE.to_vec();
    h.push(0x21); // version 2, PROXY
    match (src, dst) {
        (SocketAddr::V4(s), SocketAddr::V4(d)) => {
            h.push(0x11); // TCP over IPv4
            h.extend_from_slice(&12u16.to_be_bytes());
            h.extend_from_slice(&s.ip().octets());
            h.extend_from_slice(&d.ip().octets());
            h.extend_from_slice(&s.port().to_be_bytes());
            h.extend_from_slice(&d.port().to_be_bytes());
        }
        (s, d) => {
            let v6 = |a: SocketAddr| match a.ip() {
                IpAddr::V4(ip) => ip.to_ipv6_mapped(),
                IpAddr::V6(ip) => ip,
            };
            h.push(0x21); // TCP over IPv6
            h.extend_from_slice(&36u16.to_be_bytes());
            h.extend_from_slice(&v6(s).octets());
            h.extend_from_slice(&v6(d).octets());
            h.extend_from_slice(&s.port().to_be_bytes());
            h.extend_from_slice(&d.port().to_be_bytes());
        }
    }
    h
}

/// Reads a PROXY v2 header if the connection starts with one (anything else — a TLS ClientHello,
/// an HTTP/2 preface, a RESP command — never starts with `\r`). Returns whether there was one.
pub(crate) async fn read_proxy_header(s: &mut TcpStream) -> std::io::Result<bool> {
    let mut first = [0u8; 1];
    if s.peek(&mut first).await? == 0 || first[0] != SIGNATURE[0] {
        return Ok(false);
    }
    let mut fixed = [0u8; 16];
    s.read_exact(&mut fixed).await?;
    if fixed[..12] != SIGNATURE || fixed[12] >> 4 != 2 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "not a PROXY protocol v2 header",
        ));
    }
    let len = u16::from_be_bytes([fixed[14], fixed[15]]) as usize;
    let mut rest = vec![0u8; len];
    s.read_exact(&mut rest).await?;
    Ok(true)
}

/// Accepts on `listener` until `shutdown`, splicing each connection per [`route`].
pub(crate) async fn serve(
    listener: TcpListener,
    kind: Listener,
    me: Arc<str>,
    view: watch::Receiver<View>,
    shutdown: CancellationToken,
) {
    let public_port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
    loop {
        let (conn, peer) = tokio::select! {
            c = argocd_pull_ops::net::accept(&listener, kind.name()) => c,
            _ = shutdown.cancelled() => return,
        };
        let (me, view, shutdown) = (me.clone(), view.clone(), shutdown.clone());
        tokio::spawn(async move {
            tokio::select! {
                r = splice(conn, peer, kind, public_port, &me, view) => if let Err(e) = r {
                    tracing::debug!(error = %e, %peer, listener = ?kind, "front connection ended");
                },
                _ = shutdown.cancelled() => {}
            }
        });
    }
}

async fn splice(
    mut conn: TcpStream,
    peer: SocketAddr,
    kind: Listener,
    public_port: u16,
    me: &str,
    mut view: watch::Receiver<View>,
) -> anyhow::Result<()> {
    let _ = conn.set_nodelay(true);
    let forwarded = tokio::time::timeout(HOLD, read_proxy_header(&mut conn))
        .await
        .map_err(|_| anyhow::anyhow!("no data from {peer}"))??;
    let deadline = tokio::time::Instant::now() + HOLD;
    loop {
        let r = route(
            &view.borrow_and_update(),
            me,
            kind,
            public_port,
            forwarded,
            SystemTime::now(),
        );
        let upstream = match &r {
            Route::Local(a) => TcpStream::connect(a).await.ok(),
            Route::Remote(a) => match tokio::time::timeout(CONNECT, TcpStream::connect(a)).await {
                Ok(Ok(mut s)) => {
                    let local = conn.local_addr().unwrap_or(*a);
                    s.write_all(&proxy_header(peer, local)).await?;
                    Some(s)
                }
                _ => None,
            },
            Route::Hold => None,
        };
        if let Some(mut up) = upstream {
            let _ = up.set_nodelay(true);
            tracing::debug!(%peer, route = ?r, listener = ?kind, "spliced");
            let _ = tokio::io::copy_bidirectional(&mut conn, &mut up).await;
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            anyhow::bail!(
                "no active principal replica took the connection within {HOLD:?} (route {r:?})"
            );
        }
        // a Lease change wakes at once; expiry and an unreachable holder are re-checked
        let _ = tokio::time::timeout(RECHECK, view.changed()).await;
    }
}

#[cfg(test)]
mod tests {
    use super::super::Holder;
    use super::*;
    use std::collections::HashMap;

    fn view(local: bool, holder: Option<(&str, i64)>) -> View {
        let now = SystemTime::now();
        View {
            local: local
                .then(|| HashMap::from([(Listener::Grpc, "127.0.0.1:40000".parse().unwrap())])),
            holder: holder.map(|(id, secs)| Holder {
                identity: id.into(),
                expires: if secs >= 0 {
                    now + Duration::from_secs(secs as u64)
                } else {
                    now - Duration::from_secs(secs.unsigned_abs())
                },
            }),
        }
    }

    #[test]
    fn the_active_replica_serves_standbys_forward_to_the_live_holder_and_nobody_loops() {
        let now = SystemTime::now();
        let r = |v: &View, fwd| route(v, "b@127.0.0.3", Listener::Grpc, 8443, fwd, now);
        // active: its own principal, forwarded or not
        let local = Route::Local("127.0.0.1:40000".parse().unwrap());
        assert_eq!(r(&view(true, Some(("b@127.0.0.3", 3))), false), local);
        assert_eq!(r(&view(true, None), true), local);
        // standby: the holder's host on the same public port
        assert_eq!(
            r(&view(false, Some(("a@127.0.0.2", 3))), false),
            Route::Remote("127.0.0.2:8443".parse().unwrap())
        );
        // ... but never a connection another front already forwarded
        assert_eq!(r(&view(false, Some(("a@127.0.0.2", 3))), true), Route::Hold);
        // expired holder (crashed), no holder, our own stale identity, no host: hold
        assert_eq!(
            r(&view(false, Some(("a@127.0.0.2", -1))), false),
            Route::Hold
        );
        assert_eq!(r(&view(false, None), false), Route::Hold);
        assert_eq!(
            r(&view(false, Some(("b@127.0.0.3", 3))), false),
            Route::Hold
        );
        assert_eq!(r(&view(false, Some(("a", 3))), false), Route::Hold);
        // IPv6 hosts
        assert_eq!(
            r(&view(false, Some(("a@[::1]", 3))), false),
            Route::Remote("[::1]:8443".parse().unwrap())
        );
    }

    #[tokio::test]
    async fn a_forwarded_connection_carries_a_proxy_v2_header_that_is_stripped() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let src: SocketAddr = "10.1.2.3:5555".parse().unwrap();
        let h = proxy_header(src, addr);
        // the HAProxy specification's layout: signature, 0x21, 0x11, length 12, addresses, ports
        assert_eq!(&h[..12], b"\r\n\r\n\0\r\nQUIT\n");
        assert_eq!(&h[12..16], &[0x21, 0x11, 0, 12]);
        assert_eq!(&h[16..20], &[10, 1, 2, 3]);
        assert_eq!(&h[24..26], &5555u16.to_be_bytes());
        let client = tokio::spawn(async move {
            let mut c = TcpStream::connect(addr).await.unwrap();
            c.write_all(&h).await.unwrap();
            c.write_all(b"\x16\x03\x01hello").await.unwrap();
            let mut plain = TcpStream::connect(addr).await.unwrap();
            plain.write_all(b"\x16\x03\x01hello").await.unwrap();
            (c, plain)
        });
        for want in [true, false] {
            let (mut s, _) = l.accept().await.unwrap();
            assert_eq!(read_proxy_header(&mut s).await.unwrap(), want);
            let mut rest = [0u8; 8];
            s.read_exact(&mut rest).await.unwrap();
            assert_eq!(
                &rest, b"\x16\x03\x01hello",
                "the payload after the header is intact"
            );
        }
        drop(client.await.unwrap());
    }
}
