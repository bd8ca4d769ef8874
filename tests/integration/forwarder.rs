//! A TCP forwarder for tests: listens on 127.0.0.1 (a free port), passes every connection on to
//! the broker, counts the connections clients opened (not a host's consume connections), and
//! can cut all current ones (a network failure as the client sees it). Point a service at
//! `url()` to watch its connections.
//! Optionally it rewrites the frames the broker sends, to deliver what the broker itself would
//! refuse to carry, or plays the broker blocking publishing (a resource alarm) for its clients
//! alone, so a test needs no alarm on the whole broker.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::raw_amqp::Target;

/// Changes a frame from the broker in place: called with the frame type and the payload.
pub type Rewrite = Arc<dyn Fn(u8, &mut [u8]) + Send + Sync>;

/// Runs until dropped.
pub struct Forwarder {
    addr: SocketAddr,
    target: Target,
    opened: Arc<AtomicUsize>,
    /// Cancelled to cut the connections accepted so far; replaced by a fresh token then.
    cut: Arc<Mutex<CancellationToken>>,
    stop: CancellationToken,
    /// Set by [`Forwarder::blocking`].
    gate: Option<Arc<Gate>>,
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

    /// A forwarder to the test broker that can play the broker blocking publishing: see
    /// [`Forwarder::block`] and [`Forwarder::unblock`].
    pub async fn blocking() -> Forwarder {
        let gate = Arc::new(Gate::default());
        let mut fwd = Forwarder::start_down(Target::broker(), Down::Gate(gate.clone())).await;
        fwd.gate = Some(gate);
        fwd
    }

    /// As RabbitMQ does under a resource alarm: sends `connection.blocked` with `reason` to every
    /// client connected now, and from a client's next `basic.publish` on passes nothing more of
    /// what it sends (held, not lost) until [`Forwarder::unblock`]. (Only for a forwarder made by
    /// [`Forwarder::blocking`].)
    pub fn block(&self, reason: &str) {
        let gate = self.gate.as_ref().expect("a blocking forwarder");
        *gate.reason.lock().expect("not poisoned") = reason.to_string();
        gate.blocked.send_replace(true);
    }

    /// Sends `connection.unblocked` and passes on what was held, even for a client that has
    /// gone meanwhile, as the broker processes what it had received once the alarm clears.
    pub fn unblock(&self) {
        let gate = self.gate.as_ref().expect("a blocking forwarder");
        gate.blocked.send_replace(false);
    }

    /// How many `basic.publish` frames clients sent while blocked.
    pub fn publishes_while_blocked(&self) -> usize {
        let gate = self.gate.as_ref().expect("a blocking forwarder");
        gate.publishes_while_blocked.load(Ordering::SeqCst)
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
        let opened = Arc::new(AtomicUsize::new(0));
        let cut = Arc::new(Mutex::new(CancellationToken::new()));
        let stop = CancellationToken::new();
        tokio::spawn(accept_loop(
            listener,
            target.addr.clone(),
            down,
            opened.clone(),
            cut.clone(),
            stop.clone(),
        ));
        Forwarder {
            addr,
            target,
            opened,
            cut,
            stop,
            gate: None,
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

    /// Connections opened so far (counted once the client's `connection.start-ok` has passed),
    /// not counting a host's consume connections: a test asking whether the host reconnected
    /// means the connection it publishes and declares on.
    pub fn connections(&self) -> usize {
        self.opened.load(Ordering::SeqCst)
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
    opened: Arc<AtomicUsize>,
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
        let cut = cut.lock().expect("not poisoned").clone();
        let (stop, upstream, down) = (stop.clone(), upstream.clone(), down.clone());
        let opened = opened.clone();
        tokio::spawn(async move {
            let Ok(server) = TcpStream::connect(&upstream).await else {
                return; // The client sees the connection close.
            };
            let (client_rx, mut client_tx) = client.into_split();
            let mut client_rx = Sniff::new(client_rx, opened);
            if let Down::Gate(gate) = &down {
                tokio::select! {
                    _ = stop.cancelled() => {}
                    _ = cut.cancelled() => {}
                    _ = gated(client_rx, client_tx, server, gate.clone()) => {}
                }
                return;
            }
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
                    Down::Gate(_) => unreachable!("handled above"),
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
    /// Both ways: see [`gated`].
    Gate(Arc<Gate>),
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

/// The name a host gives its consume connections (`WORKER_CONSUME=own`) ends so.
const CONSUMING: &[u8] = b"(consuming)";

/// A client's bytes on their way to the broker: once its `connection.start-ok` (the first frame
/// after the 8-byte protocol header) has passed, counts the connection unless its name says it
/// is a host's consume connection.
struct Sniff<R> {
    inner: R,
    /// The bytes so far, until the start-ok is whole.
    head: Vec<u8>,
    /// Taken once the start-ok was read.
    opened: Option<Arc<AtomicUsize>>,
}

impl<R> Sniff<R> {
    fn new(inner: R, opened: Arc<AtomicUsize>) -> Sniff<R> {
        Sniff {
            inner,
            head: Vec::new(),
            opened: Some(opened),
        }
    }

    fn saw(&mut self, bytes: &[u8]) {
        if self.opened.is_none() {
            return;
        }
        self.head.extend_from_slice(bytes);
        let Some(size) = self.head.get(11..15) else {
            return;
        };
        let size = u32::from_be_bytes([size[0], size[1], size[2], size[3]]) as usize;
        if self.head.len() < 8 + 7 + size + 1 {
            return;
        }
        let opened = self.opened.take().expect("checked above");
        if !self.head.windows(CONSUMING.len()).any(|w| w == CONSUMING) {
            opened.fetch_add(1, Ordering::SeqCst);
        }
        self.head = Vec::new();
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for Sniff<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) {
            this.saw(&buf.filled()[before..]);
        }
        polled
    }
}

/// Whether a blocking forwarder blocks publishing, and what its clients did meanwhile.
struct Gate {
    blocked: watch::Sender<bool>,
    reason: Mutex<String>,
    publishes_while_blocked: AtomicUsize,
}

impl Default for Gate {
    fn default() -> Gate {
        Gate {
            blocked: watch::channel(false).0,
            reason: Mutex::new(String::new()),
            publishes_while_blocked: AtomicUsize::new(0),
        }
    }
}

const FRAME_METHOD: u8 = 1;
const FRAME_END: u8 = 0xce;

/// One connection through a blocking forwarder: the broker's frames go to the client, with
/// `connection.blocked` / `connection.unblocked` put between them when the gate changes; the
/// client's frames go to the broker, but while blocked everything from a `basic.publish` on is
/// held until unblocked. Ends once the client has gone and nothing is held any more.
async fn gated(
    mut client_rx: Sniff<impl AsyncRead + Unpin + Send + 'static>,
    client_tx: impl AsyncWrite + Unpin,
    server: TcpStream,
    gate: Arc<Gate>,
) {
    let (server_rx, mut server_tx) = server.into_split();
    // The protocol header comes first, before any frame.
    let mut header = [0u8; 8];
    if client_rx.read_exact(&mut header).await.is_err()
        || server_tx.write_all(&header).await.is_err()
    {
        return;
    }
    // The client going away ends its frames, but what was held still goes to the broker; the
    // broker's side closes once `up` is done with it.
    tokio::join!(
        down_gated(frames(server_rx), client_tx, gate.clone()),
        up_gated(frames(client_rx), server_tx, &gate),
    );
}

/// The frames read from `from`, whole (header, payload and frame end), until it ends.
fn frames(mut from: impl AsyncRead + Unpin + Send + 'static) -> mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(async move {
        loop {
            let mut head = [0u8; 7];
            if from.read_exact(&mut head).await.is_err() {
                return;
            }
            let size = u32::from_be_bytes([head[3], head[4], head[5], head[6]]) as usize;
            let mut frame = head.to_vec();
            frame.resize(7 + size + 1, 0);
            if from.read_exact(&mut frame[7..]).await.is_err() || tx.send(frame).await.is_err() {
                return;
            }
        }
    });
    rx
}

/// The broker's frames to the client, and the gate's changes as `connection.blocked` /
/// `connection.unblocked`.
async fn down_gated(
    mut from_server: mpsc::Receiver<Vec<u8>>,
    mut to_client: impl AsyncWrite + Unpin,
    gate: Arc<Gate>,
) {
    let mut changes = gate.blocked.subscribe();
    loop {
        let frame = tokio::select! {
            frame = from_server.recv() => match frame {
                Some(frame) => frame,
                None => return,
            },
            changed = changes.changed() => {
                if changed.is_err() {
                    return;
                }
                let blocked = *changes.borrow_and_update();
                if blocked {
                    let reason = gate.reason.lock().expect("not poisoned").clone();
                    let mut args = vec![reason.len() as u8];
                    args.extend_from_slice(reason.as_bytes());
                    method_frame(10, 60, &args)
                } else {
                    method_frame(10, 61, &[])
                }
            }
        };
        if to_client.write_all(&frame).await.is_err() {
            return;
        }
    }
}

/// The client's frames to the broker; while blocked, from a `basic.publish` on, held until
/// unblocked (then sent, even if the client has gone).
async fn up_gated(
    mut from_client: mpsc::Receiver<Vec<u8>>,
    mut to_server: impl AsyncWrite + Unpin,
    gate: &Gate,
) {
    let mut blocked = gate.blocked.subscribe();
    let mut held: Vec<Vec<u8>> = Vec::new();
    let mut client_gone = false;
    loop {
        if client_gone && held.is_empty() {
            return;
        }
        tokio::select! {
            frame = from_client.recv(), if !client_gone => {
                let Some(frame) = frame else {
                    client_gone = true;
                    continue;
                };
                let is_blocked = *blocked.borrow();
                if is_blocked && is_publish(&frame) {
                    gate.publishes_while_blocked.fetch_add(1, Ordering::SeqCst);
                }
                if !held.is_empty() || (is_blocked && is_publish(&frame)) {
                    held.push(frame);
                } else if to_server.write_all(&frame).await.is_err() {
                    return;
                }
            }
            changed = blocked.changed(), if !held.is_empty() => {
                if changed.is_err() {
                    return;
                }
                if !*blocked.borrow_and_update() {
                    for frame in held.drain(..) {
                        if to_server.write_all(&frame).await.is_err() {
                            return;
                        }
                    }
                }
            }
        }
    }
}

/// A whole method frame on channel 0.
fn method_frame(class: u16, method: u16, args: &[u8]) -> Vec<u8> {
    let mut payload = class.to_be_bytes().to_vec();
    payload.extend_from_slice(&method.to_be_bytes());
    payload.extend_from_slice(args);
    let mut frame = vec![FRAME_METHOD, 0, 0];
    frame.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    frame.extend_from_slice(&payload);
    frame.push(FRAME_END);
    frame
}

/// `basic.publish` (class 60, method 40).
fn is_publish(frame: &[u8]) -> bool {
    frame.first() == Some(&FRAME_METHOD) && frame.get(7..11) == Some(&[0, 60, 0, 40][..])
}
