//! A TCP forwarder between a host and the test broker that counts the connections it accepted,
//! so a test can assert that a fault stayed channel-sized (no reconnect). It can also stall a
//! connection once it is open, so the host hangs in its first request (declaring).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// Forwards 127.0.0.1:<port> to the broker until dropped.
pub struct Forwarder {
    addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl Forwarder {
    /// Listens on a free local port, forwarding to the broker of `common::broker_url()`.
    pub async fn start() -> Forwarder {
        Forwarder::spawn(false).await
    }

    /// Like `start`, but once the broker has opened the connection (`connection.open-ok`)
    /// nothing more reaches the client: its next request never gets an answer.
    pub async fn stalling_after_open() -> Forwarder {
        Forwarder::spawn(true).await
    }

    async fn spawn(stall: bool) -> Forwarder {
        let target = broker_addr();
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind forwarder");
        let addr = listener.local_addr().expect("forwarder address");
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                let target = target.clone();
                tokio::spawn(async move {
                    let Ok(mut broker) = TcpStream::connect(&target).await else {
                        return;
                    };
                    if stall {
                        let _ = stall_after_open(client, broker).await;
                    } else {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut broker).await;
                    }
                });
            }
        });
        Forwarder {
            addr,
            accepted,
            task,
        }
    }

    /// The broker URL through this forwarder.
    pub fn url(&self) -> String {
        format!("amqp://guest:guest@{}/%2f", self.addr)
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// host:port of the test broker.
fn broker_addr() -> String {
    let url = crate::common::broker_url();
    let rest = url.split_once("://").map_or(url.as_str(), |(_, r)| r);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    let host_port = rest.split('/').next().unwrap_or("127.0.0.1:5672");
    if host_port.contains(':') {
        host_port.to_string()
    } else {
        format!("{host_port}:5672")
    }
}

/// Forwards the handshake, then stops forwarding (keeping both sockets open) after the
/// broker's third method frame on channel 0 (start, tune, open-ok).
async fn stall_after_open(client: TcpStream, broker: TcpStream) -> std::io::Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (mut client_rd, mut client_wr) = client.into_split();
    let (mut broker_rd, mut broker_wr) = broker.into_split();
    let upstream =
        tokio::spawn(async move { tokio::io::copy(&mut client_rd, &mut broker_wr).await });
    let mut frames = 0;
    while frames < 3 {
        let mut head = [0u8; 7];
        broker_rd.read_exact(&mut head).await?;
        let size = u32::from_be_bytes([head[3], head[4], head[5], head[6]]) as usize;
        let mut rest = vec![0u8; size + 1];
        broker_rd.read_exact(&mut rest).await?;
        client_wr.write_all(&head).await?;
        client_wr.write_all(&rest).await?;
        if head[0] == 1 {
            frames += 1;
        }
    }
    // Hold both sides open, answering nothing, until the client goes away.
    let _ = upstream.await;
    drop(broker_rd);
    Ok(())
}
