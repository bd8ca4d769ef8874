//! Plain HTTP/1.1 GETs to a host's admin endpoint (and the test's own servers), over a TCP
//! stream of their own, and waiting for an answer.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::eventually;

/// GET `path` on a new connection: (status, body), or None when nothing answers within 5 s.
pub async fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    http_get_within(addr, path, Duration::from_secs(5)).await
}

/// GET `path` on a new connection: (status, body), or None when there is no whole answer
/// within `timeout`.
pub async fn http_get_within(
    addr: SocketAddr,
    path: &str,
    timeout: Duration,
) -> Option<(u16, String)> {
    let request = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
        let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.ok()?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.ok()?;
        let text = String::from_utf8_lossy(&buf).into_owned();
        let status = text.split_whitespace().nth(1)?.parse().ok()?;
        let (_, body) = text.split_once("\r\n\r\n")?;
        Some((status, body.to_string()))
    };
    tokio::time::timeout(timeout, request).await.ok().flatten()
}

/// Waits until GET `path` answers `status`.
pub async fn wait_status(addr: SocketAddr, path: &str, status: u16, timeout: Duration) {
    eventually(
        timeout,
        &format!("GET {path} answering {status}"),
        || async { (http_get(addr, path).await?.0 == status).then_some(()) },
    )
    .await
}

/// Polls GET `path` every 10 ms from now on, in a task of its own; it ends with the moment
/// `path` first answered `status`. For a state that may last only a moment (not ready while a
/// host reconnects) and may come before the test's next step ends.
pub fn watch_status(
    addr: SocketAddr,
    path: &'static str,
    status: u16,
) -> tokio::task::JoinHandle<std::time::Instant> {
    tokio::spawn(async move {
        loop {
            if http_get(addr, path).await.is_some_and(|(s, _)| s == status) {
                return std::time::Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
}
