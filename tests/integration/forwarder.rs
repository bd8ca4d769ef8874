//! A TCP forwarder between a host and the test broker that counts the connections it accepted,
//! so a test can assert that a fault stayed channel-sized (no reconnect).

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
        let target = broker_addr();
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind forwarder");
        let addr = listener.local_addr().expect("forwarder address");
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                let target = target.clone();
                tokio::spawn(async move {
                    if let Ok(mut broker) = TcpStream::connect(&target).await {
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
