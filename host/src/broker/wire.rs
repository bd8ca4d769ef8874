//! A consume connection the host drives itself, under the batch consumer
//! (docs/performance.md, "The batch consumer in the host"): one thread owns
//! the socket and blocks on it with poll(2), beside an event file descriptor other threads
//! write to wake it. It logs in as the broker URL says, sends and checks heartbeats from the
//! same loop, and hands up whole frames. lapin's I/O thread instead waits on a channel that
//! tokio's reactor feeds from another thread: a cross-thread wake-up per read, which this
//! path does not pay. Every consumer of an `amqp://` URL takes its deliveries here.

use std::collections::VecDeque;
use std::io::{self, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use amq_protocol::frame::{AMQPFrame, WriteContext, gen_frame, parse_frame};
use amq_protocol::protocol::{AMQPClass, connection};
use amq_protocol::uri::{AMQPScheme, AMQPUri, SASLMechanism};
use rustix::event::{EventfdFlags, PollFd, PollFlags, Timespec, eventfd, poll};
use rustix::io::Errno;
use rustix::net::RecvFlags;

pub mod consume;
pub mod feed;
mod login;

/// What a frame's header and end take besides its payload.
const FRAME_OVERHEAD: usize = 8;
/// The largest frame read when the broker sets no limit (RabbitMQ always sets one).
const NO_LIMIT_CAP: usize = 128 * 1024 * 1024;
/// How long the broker gets to answer a connection.close.
const CLOSE_WAIT: Duration = Duration::from_secs(5);
/// A write that cannot go on for this long (the broker reads nothing) fails the connection.
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a connection cannot go on. Its texts never hold the URL or its password.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error("invalid broker URL: {0}")]
    Url(String),
    #[error("not supported by the host's consume connection yet: {0}")]
    Unsupported(String),
    #[error("IO error: {0}")]
    Io(#[from] io::Error),
    #[error("the broker closed the socket")]
    Eof,
    /// connection.close from the broker (answered with close-ok).
    #[error("the broker closed the connection: {code} {text}")]
    Closed { code: u16, text: String },
    #[error("nothing from the broker for {0:?}: two heartbeats missed")]
    Silent(Duration),
    /// channel.close from the broker (answered with close-ok): a queue missing, access
    /// refused, a precondition failed.
    #[error("the broker closed the channel: {code} {text}")]
    ChannelClosed { code: u16, text: String },
    /// basic.cancel from the broker: the queue was deleted.
    #[error("the broker cancelled the consumer (the queue was deleted?)")]
    Cancelled,
    #[error("bad frame from the broker: {0}")]
    Frame(String),
    #[error("expected {expected} from the broker, got {got}")]
    Unexpected { expected: &'static str, got: String },
    /// A queue name or virtual host longer than an AMQP short string holds.
    #[error("the {0} is longer than AMQP's 255 bytes")]
    TooLong(&'static str),
    #[error("timed out waiting for {0}")]
    TimedOut(&'static str),
}

/// What the broker and the host agreed on at login (0: no limit, no heartbeat).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tuned {
    pub channel_max: u16,
    pub frame_max: u32,
    pub heartbeat: u16,
}

/// Why [`Wire::wait`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Woke {
    /// Frames are ready ([`Wire::frames`]).
    Frames,
    /// Another thread called [`Waker::wake`].
    Waker,
    /// The time given passed with nothing to hand up.
    Idle,
}

/// Wakes the thread blocked in [`Wire::wait`] from any thread.
#[derive(Debug, Clone)]
pub struct Waker(Arc<OwnedFd>);

impl Waker {
    pub fn wake(&self) {
        // Fails only when the counter would overflow, and then a wake-up is pending anyway.
        let _ = rustix::io::write(&*self.0, &1u64.to_ne_bytes());
    }
}

/// One logged-in AMQP connection: the socket, what was read and not parsed yet, and the frames
/// parsed and not handed up yet.
pub struct Wire {
    stream: TcpStream,
    wake: Arc<OwnedFd>,
    buf: Vec<u8>,
    /// Bytes of `buf` holding data.
    len: usize,
    frames: VecDeque<AMQPFrame>,
    out: Vec<u8>,
    tuned: Tuned,
    last_read: Instant,
    last_write: Instant,
}

impl Wire {
    /// Connects to `url` and logs in, all within `timeout`. `name` is how the broker's
    /// management UI lists the connection.
    pub fn open(url: &str, name: &str, timeout: Duration) -> Result<Wire, WireError> {
        // The parser quotes the whole URL in some errors: never its password.
        let uri: AMQPUri = url
            .parse()
            .map_err(|e: String| WireError::Url(e.replace(url, "<the URL>")))?;
        if uri.scheme == AMQPScheme::AMQPS {
            return Err(WireError::Unsupported("TLS (amqps://)".into()));
        }
        let mechanism = uri.query.auth_mechanism.unwrap_or_default();
        if !matches!(mechanism, SASLMechanism::Plain | SASLMechanism::AMQPlain) {
            let name = mechanism.name();
            return Err(WireError::Unsupported(format!("auth_mechanism {name}")));
        }
        if uri.vhost.len() > 255 {
            return Err(WireError::TooLong("virtual host"));
        }
        let deadline = Instant::now() + timeout;
        let stream = connect(&uri.authority.host, uri.authority.port, deadline)?;
        let mut wire = Wire::over(stream)?;
        login::log_in(&mut wire, &uri, mechanism, name, deadline)?;
        Ok(wire)
    }

    /// A wire over a connected socket, before the handshake.
    fn over(stream: TcpStream) -> Result<Wire, WireError> {
        stream.set_nodelay(true)?;
        stream.set_write_timeout(Some(WRITE_TIMEOUT))?;
        let wake =
            eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK).map_err(io::Error::from)?;
        let now = Instant::now();
        Ok(Wire {
            stream,
            wake: Arc::new(wake),
            buf: vec![0; 64 * 1024],
            len: 0,
            frames: VecDeque::new(),
            out: Vec::with_capacity(1024),
            // Until connection.tune: frames of any size the cap allows, no heartbeats.
            tuned: Tuned {
                channel_max: 0,
                frame_max: 0,
                heartbeat: 0,
            },
            last_read: now,
            last_write: now,
        })
    }

    pub fn tuned(&self) -> Tuned {
        self.tuned
    }

    pub fn waker(&self) -> Waker {
        Waker(self.wake.clone())
    }

    /// Writes `frames` in one write.
    pub fn send(&mut self, frames: &[AMQPFrame]) -> Result<(), WireError> {
        let mut out = std::mem::take(&mut self.out);
        out.clear();
        for frame in frames {
            out = gen_frame(frame)(WriteContext::from(out))
                // Not the frame: start-ok's holds the password.
                .map_err(|e| WireError::Frame(format!("cannot write a frame: {e:?}")))?
                .into_inner()
                .0;
        }
        let written = self.stream.write_all(&out);
        self.out = out;
        written?;
        self.last_write = Instant::now();
        Ok(())
    }

    pub fn send_method(&mut self, channel: u16, class: AMQPClass) -> Result<(), WireError> {
        self.send(&[AMQPFrame::Method(channel, class)])
    }

    /// The frames parsed and not handed up yet, oldest first. Heartbeats and the connection's
    /// own methods never appear: the wire answers them.
    pub fn frames(&mut self) -> std::collections::vec_deque::Drain<'_, AMQPFrame> {
        self.frames.drain(..)
    }

    /// Blocks until frames are ready, a [`Waker`] wakes it, or `until` passes (never, given
    /// none), sending and checking heartbeats meanwhile.
    pub fn wait(&mut self, until: Option<Instant>) -> Result<Woke, WireError> {
        loop {
            if !self.frames.is_empty() {
                return Ok(Woke::Frames);
            }
            let now = Instant::now();
            if until.is_some_and(|u| u <= now) {
                return Ok(Woke::Idle);
            }
            let due = self.beat(now)?;
            let timeout = due.into_iter().chain(until.map(|u| u - now)).min();
            let (socket, woken) = self.poll(timeout)?;
            // The socket first, so a busy waker cannot starve reads.
            if socket {
                self.read()?;
            }
            if woken {
                let mut count = [0u8; 8];
                // Resets the counter; the descriptor is non-blocking, and a concurrent wake
                // only makes the next wait return at once.
                let _ = rustix::io::read(&*self.wake, &mut count);
                return Ok(Woke::Waker);
            }
            // Only after a poll that could read what was waiting: a caller that spent long
            // between waits finds the broker's heartbeats in the socket, not silence.
            if let Some(silent) = self.silent() {
                return Err(WireError::Silent(silent));
            }
        }
    }

    /// Sends a heartbeat when half an interval passed without a write. How long until the
    /// next one is due or the broker's silence is to be checked; `None` without heartbeats.
    fn beat(&mut self, now: Instant) -> Result<Option<Duration>, WireError> {
        if self.tuned.heartbeat == 0 {
            return Ok(None);
        }
        let beat = Duration::from_secs(self.tuned.heartbeat.into());
        if now.duration_since(self.last_write) >= beat / 2 {
            self.send(&[AMQPFrame::Heartbeat])?;
        }
        let next_beat = (self.last_write + beat / 2).saturating_duration_since(now);
        let dead = (self.last_read + beat * 2).saturating_duration_since(now);
        Ok(Some(next_beat.min(dead)))
    }

    /// How long the broker has said nothing, once that is two heartbeat intervals.
    fn silent(&self) -> Option<Duration> {
        let beat = Duration::from_secs(self.tuned.heartbeat.into());
        let silent = self.last_read.elapsed();
        (self.tuned.heartbeat > 0 && silent >= beat * 2).then_some(silent)
    }

    /// Polls the socket and the waker; which of them is ready.
    fn poll(&self, timeout: Option<Duration>) -> Result<(bool, bool), WireError> {
        let timespec = timeout.map(|t| {
            Timespec::try_from(t).unwrap_or(Timespec {
                tv_sec: i64::MAX,
                tv_nsec: 0,
            })
        });
        let mut fds = [
            PollFd::new(&self.stream, PollFlags::IN),
            PollFd::new(&*self.wake, PollFlags::IN),
        ];
        match poll(&mut fds, timespec.as_ref()) {
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => return Ok((false, false)),
            Err(e) => return Err(WireError::Io(e.into())),
        }
        // An error or hang-up on the socket shows in the read that follows.
        let socket = !fds[0].revents().is_empty();
        let woken = fds[1].revents().contains(PollFlags::IN);
        Ok((socket, woken))
    }

    /// One read (the socket is readable), then every complete frame it finishes.
    fn read(&mut self) -> Result<(), WireError> {
        let limit = self.frame_limit();
        if self.buf.len() - self.len < 16 * 1024 && self.buf.len() < limit {
            let grown = (self.buf.len() * 2).min(limit);
            self.buf.resize(grown, 0);
        }
        // Non-blocking: poll(2) may call a socket readable that has nothing to read (a
        // segment dropped for its checksum), and a blocking read would then stop the loop.
        let flags = RecvFlags::DONTWAIT;
        let got = match rustix::net::recv(&self.stream, &mut self.buf[self.len..], flags) {
            Ok((0, _)) => return Err(WireError::Eof),
            Ok((got, _)) => got,
            Err(Errno::AGAIN | Errno::INTR) => return Ok(()),
            Err(e) => return Err(WireError::Io(e.into())),
        };
        self.len += got;
        self.last_read = Instant::now();
        self.parse()
    }

    /// The largest frame, header and end byte included, as `frame_max` counts it.
    fn frame_limit(&self) -> usize {
        match self.tuned.frame_max {
            0 => NO_LIMIT_CAP,
            max => (max as usize).max(FRAME_OVERHEAD),
        }
    }

    /// Moves every complete frame of the buffer onto `frames`, answering the connection's own.
    /// A frame whose header declares more than the agreed size is refused, whether or not it
    /// came whole, so the buffer never grows past `frame_max`.
    fn parse(&mut self) -> Result<(), WireError> {
        let mut at = 0;
        while at < self.len {
            self.check_size(&self.buf[at..self.len])?;
            match parse_frame(&self.buf[at..self.len]) {
                Ok((rest, frame)) => {
                    at = self.len - rest.len();
                    self.take(frame)?;
                }
                Err(e) if e.is_incomplete() => break,
                Err(e) => return Err(WireError::Frame(format!("{e}"))),
            }
        }
        self.buf.copy_within(at..self.len, 0);
        self.len -= at;
        Ok(())
    }

    /// Refuses a frame that does not fit, from its first 7 bytes: type (1 byte), channel (2), payload size
    /// (4), payload, end byte. A protocol header (the broker refusing the version) starts with
    /// `A` and is short.
    fn check_size(&self, partial: &[u8]) -> Result<(), WireError> {
        let Some(size) = partial.get(3..7).filter(|_| partial[0] != b'A') else {
            return Ok(());
        };
        // `get(3..7)` gave exactly 4 bytes.
        let size = u32::from_be_bytes([size[0], size[1], size[2], size[3]]) as usize;
        let limit = self.frame_limit();
        if size.saturating_add(FRAME_OVERHEAD) > limit {
            return Err(WireError::Frame(format!(
                "a frame of {} bytes where at most {limit} were agreed",
                size.saturating_add(FRAME_OVERHEAD)
            )));
        }
        Ok(())
    }

    fn take(&mut self, frame: AMQPFrame) -> Result<(), WireError> {
        match frame {
            AMQPFrame::Heartbeat => Ok(()),
            AMQPFrame::InvalidHeartbeat(channel) => Err(WireError::Frame(format!(
                "a heartbeat on channel {channel}"
            ))),
            AMQPFrame::Method(0, AMQPClass::Connection(connection::AMQPMethod::Close(c))) => {
                // The broker closes the socket after close-ok; a failed write changes nothing.
                let _ = self.send_method(
                    0,
                    AMQPClass::Connection(connection::AMQPMethod::CloseOk(connection::CloseOk {})),
                );
                Err(WireError::Closed {
                    code: c.reply_code,
                    text: c.reply_text.to_string(),
                })
            }
            // Flow control for publishers: nothing this connection does.
            AMQPFrame::Method(
                0,
                AMQPClass::Connection(
                    connection::AMQPMethod::Blocked(_) | connection::AMQPMethod::Unblocked(_),
                ),
            ) => Ok(()),
            frame => {
                self.frames.push_back(frame);
                Ok(())
            }
        }
    }

    /// The next method on `channel` (setup only: nothing else is expected before it; later
    /// frames stay for [`Wire::frames`]).
    pub fn method(
        &mut self,
        channel: u16,
        expected: &'static str,
        deadline: Instant,
    ) -> Result<AMQPClass, WireError> {
        loop {
            if let Some(frame) = self.frames.pop_front() {
                return match frame {
                    AMQPFrame::Method(c, class) if c == channel => Ok(class),
                    other => Err(WireError::Unexpected {
                        expected,
                        got: other.to_string(),
                    }),
                };
            }
            match self.wait(Some(deadline))? {
                Woke::Idle => return Err(WireError::TimedOut(expected)),
                Woke::Frames | Woke::Waker => {}
            }
        }
    }

    /// Closes the connection: connection.close, then close-ok or the socket's end awaited for
    /// a while. Deliveries not acked go back to their queues.
    pub fn close(mut self, text: &str) -> Result<(), WireError> {
        self.send_method(
            0,
            AMQPClass::Connection(connection::AMQPMethod::Close(connection::Close {
                reply_code: 200,
                reply_text: text.into(),
                class_id: 0,
                method_id: 0,
            })),
        )?;
        let deadline = Instant::now() + CLOSE_WAIT;
        loop {
            self.frames.clear();
            match self.wait(Some(deadline)) {
                Ok(Woke::Idle) => return Err(WireError::TimedOut("connection.close-ok")),
                Ok(_) => {}
                // The socket's end, or the broker closing at the same time: closed either way.
                Err(WireError::Eof | WireError::Closed { .. }) => return Ok(()),
                Err(e) => return Err(e),
            }
            if self.closed_ok() {
                return Ok(());
            }
        }
    }

    fn closed_ok(&self) -> bool {
        self.frames.iter().any(|f| {
            matches!(
                f,
                AMQPFrame::Method(0, AMQPClass::Connection(connection::AMQPMethod::CloseOk(_)))
            )
        })
    }
}

/// Connects to the first address of `host` that answers before `deadline`.
fn connect(host: &str, port: u16, deadline: Instant) -> Result<TcpStream, WireError> {
    let mut last = None;
    for addr in (host, port).to_socket_addrs()? {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        match TcpStream::connect_timeout(&addr, left) {
            Ok(stream) => return Ok(stream),
            Err(e) => last = Some(e),
        }
    }
    Err(last.map_or(WireError::TimedOut("a connection"), WireError::Io))
}

fn unexpected(expected: &'static str, got: AMQPClass) -> WireError {
    WireError::Unexpected {
        expected,
        got: format!("{got:?}"),
    }
}

#[cfg(test)]
mod tests;
