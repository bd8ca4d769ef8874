//! A TCP forwarder for tests: listens on 127.0.0.1 (a free port), passes every connection on to
//! the broker, counts the connections it accepted, and can cut all current ones (a network
//! failure as the client sees it). Point a service at `url()` to watch its connections.
//! Optionally it rewrites the frames the broker sends, to deliver what the broker itself would
//! refuse to carry.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use crate::raw_amqp::Target;

/// Changes a frame from the broker in place: called with the frame type and the payload.
pub type Rewrite = Arc<dyn Fn(u8, &mut [u8]) + Send + Sync>;

/// Runs until dropped.
pub struct Forwarder {
    addr: SocketAddr,
    target: Target,
    accepted: Arc<AtomicUsize>,
    /// Cancelled to cut the connections accepted so far; replaced by a fresh token then.
    cut: Arc<Mutex<CancellationToken>>,
    stop: CancellationToken,
}

impl Forwarder {
    /// A forwarder to the test broker.
    pub async fn to_broker() -> Forwarder {
        Forwarder::start(Target::broker()).await
    }

    /// A forwarder to the test broker that passes every frame the broker sends through
    /// `rewrite` (same length: the payload is changed in place).
    pub async fn rewriting(rewrite: Rewrite) -> Forwarder {
        Forwarder::start_with(Target::broker(), Some(rewrite)).await
    }

    /// A forwarder to `target`'s address.
    pub async fn start(target: Target) -> Forwarder {
        Forwarder::start_with(target, None).await
    }

    /// A forwarder to the test broker that, once the broker has opened a connection
    /// (`connection.open-ok`, its third method frame), passes nothing more to the client: the
    /// client's next request never gets an answer (a host hanging while it declares).
    pub async fn stalling_after_open() -> Forwarder {
        Forwarder::start_down(Target::broker(), Down::StallAfterOpen).await
    }

    async fn start_with(target: Target, rewrite: Option<Rewrite>) -> Forwarder {
        let down = match rewrite {
            Some(rewrite) => Down::Rewrite(rewrite),
            None => Down::Copy,
        };
        Forwarder::start_down(target, down).await
    }

    async fn start_down(target: Target, down: Down) -> Forwarder {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let accepted = Arc::new(AtomicUsize::new(0));
        let cut = Arc::new(Mutex::new(CancellationToken::new()));
        let stop = CancellationToken::new();
        tokio::spawn(accept_loop(
            listener,
            target.addr.clone(),
            down,
            accepted.clone(),
            cut.clone(),
            stop.clone(),
        ));
        Forwarder {
            addr,
            target,
            accepted,
            cut,
            stop,
        }
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The broker URL through this forwarder (same login and vhost).
    pub fn url(&self) -> String {
        self.target.url_at(self.addr)
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    /// Closes every connection accepted so far, both ways; new ones are forwarded as before.
    pub fn cut_all(&self) {
        let mut cut = self.cut.lock().expect("not poisoned");
        cut.cancel();
        *cut = CancellationToken::new();
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn accept_loop(
    listener: TcpListener,
    upstream: String,
    down: Down,
    accepted: Arc<AtomicUsize>,
    cut: Arc<Mutex<CancellationToken>>,
    stop: CancellationToken,
) {
    loop {
        let (client, _) = tokio::select! {
            _ = stop.cancelled() => return,
            conn = listener.accept() => match conn {
                Ok(conn) => conn,
                Err(_) => continue,
            },
        };
        accepted.fetch_add(1, Ordering::SeqCst);
        let cut = cut.lock().expect("not poisoned").clone();
        let (stop, upstream, down) = (stop.clone(), upstream.clone(), down.clone());
        tokio::spawn(async move {
            let Ok(server) = TcpStream::connect(&upstream).await else {
                return; // The client sees the connection close.
            };
            let (mut client_rx, mut client_tx) = client.into_split();
            let (mut server_rx, mut server_tx) = server.into_split();
            let down = async {
                match down {
                    Down::Copy => tokio::io::copy(&mut server_rx, &mut client_tx)
                        .await
                        .map(drop),
                    Down::Rewrite(rewrite) => {
                        copy_frames(&mut server_rx, &mut client_tx, &*rewrite, None).await
                    }
                    Down::StallAfterOpen => {
                        let none = |_: u8, _: &mut [u8]| {};
                        copy_frames(&mut server_rx, &mut client_tx, &none, Some(3)).await?;
                        std::future::pending().await
                    }
                }
            };
            // When either way ends (or the connection is cut), both are closed.
            tokio::select! {
                _ = stop.cancelled() => {}
                _ = cut.cancelled() => {}
                _ = tokio::io::copy(&mut client_rx, &mut server_tx) => {}
                _ = down => {}
            }
        });
    }
}

/// What goes from the broker to the client.
#[derive(Clone)]
enum Down {
    Copy,
    Rewrite(Rewrite),
    StallAfterOpen,
}

/// Copies AMQP frames (the broker sends nothing else) one whole frame at a time, rewritten;
/// with `methods`, returns after that many method frames.
async fn copy_frames(
    from: &mut (impl AsyncRead + Unpin),
    to: &mut (impl AsyncWrite + Unpin),
    rewrite: &(dyn Fn(u8, &mut [u8]) + Send + Sync),
    methods: Option<usize>,
) -> std::io::Result<()> {
    let mut seen = 0;
    loop {
        if methods.is_some_and(|n| seen >= n) {
            return Ok(());
        }
        let mut head = [0u8; 7];
        from.read_exact(&mut head).await?;
        let size = u32::from_be_bytes([head[3], head[4], head[5], head[6]]) as usize;
        let mut rest = vec![0u8; size + 1]; // the payload and the frame-end byte
        from.read_exact(&mut rest).await?;
        rewrite(head[0], &mut rest[..size]);
        if head[0] == 1 {
            seen += 1;
        }
        to.write_all(&head).await?;
        to.write_all(&rest).await?;
    }
}
