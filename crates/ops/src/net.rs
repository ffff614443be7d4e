//! TCP listeners with the backlog Go's `net.Listen` uses.

use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpSocket, TcpStream};

/// The accept queue when the kernel's limit cannot be read.
const DEFAULT_BACKLOG: u32 = 4096;

/// The kernel's accept-queue limit (`net.core.somaxconn`), which Go's `net.Listen` passes to
/// `listen(2)`.
fn backlog() -> u32 {
    std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .filter(|&n: &u32| n > 0)
        .unwrap_or(DEFAULT_BACKLOG)
}

/// Binds `addr` (with `SO_REUSEADDR`, as tokio's `TcpListener::bind`) and listens with the
/// kernel's accept-queue limit instead of the standard library's 128: when a fleet of thousands
/// of agents reconnects within seconds (a principal restart, a replica lost), a 128-connection
/// queue overflows and the kernel drops their SYNs, which the clients retransmit only after 1, 3
/// and 7 s.
pub fn listen(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = match addr {
        SocketAddr::V4(_) => TcpSocket::new_v4()?,
        SocketAddr::V6(_) => TcpSocket::new_v6()?,
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(backlog())
}

/// How long an accept loop pauses after a failed accept.
const ACCEPT_PAUSE: std::time::Duration = std::time::Duration::from_millis(50);

/// The next connection on `l`. A failed accept (the process out of file descriptors, `EMFILE`,
/// while thousands of agents reconnect) is logged, naming `what` listens, and retried after a
/// short pause: the listener keeps serving once descriptors are free again, and the loop neither
/// ends nor spins.
pub async fn accept(l: &TcpListener, what: &str) -> (TcpStream, SocketAddr) {
    loop {
        match l.accept().await {
            Ok((c, peer)) => {
                let _ = c.set_nodelay(true);
                return (c, peer);
            }
            Err(e) => {
                tracing::warn!(error = %e, listener = what, "accept failed (out of file descriptors? raise the process's limit); retrying");
                tokio::time::sleep(ACCEPT_PAUSE).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_listener_takes_a_burst_beyond_the_standard_librarys_queue() {
        let l = listen("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = l.local_addr().unwrap();
        // 300 connections before a single accept (or the kernel's limit, if lower): std's queue
        // of 128 would drop SYNs here
        let n = 300.min(backlog() as usize);
        let mut conns = Vec::new();
        for _ in 0..n {
            conns.push(
                tokio::time::timeout(
                    std::time::Duration::from_millis(500),
                    tokio::net::TcpStream::connect(addr),
                )
                .await
                .expect("connected at once (queued, not dropped)")
                .unwrap(),
            );
        }
        for _ in 0..n {
            l.accept().await.unwrap();
        }
    }
}
