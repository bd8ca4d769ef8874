//! The consume connection against a fake broker on a local socket (a silent broker, a closing
//! one, an oversized frame: what a real RabbitMQ cannot be made to do on demand) and, with the
//! `server-tests` feature, against the RabbitMQ of this machine.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use amq_protocol::frame::{AMQPFrame, WriteContext, gen_frame, parse_frame};
use amq_protocol::protocol::{AMQPClass, connection};

use super::login::agree;
use super::{Wire, WireError, Woke};

pub(super) const TIMEOUT: Duration = Duration::from_secs(10);

/// The broker's side of a fake connection.
pub(super) struct Fake {
    pub stream: TcpStream,
    buf: Vec<u8>,
}

impl Fake {
    pub(super) fn send(&mut self, frame: AMQPFrame) {
        let out = gen_frame(&frame)(WriteContext::from(Vec::new()))
            .expect("frame serializes")
            .into_inner()
            .0;
        self.stream.write_all(&out).expect("fake broker writes");
    }

    pub(super) fn method(&mut self, class: AMQPClass) {
        self.send(AMQPFrame::Method(0, class));
    }

    /// The next frame from the client, or `None` once it closed the socket.
    pub(super) fn next(&mut self) -> Option<AMQPFrame> {
        loop {
            if let Ok((rest, frame)) = parse_frame(&self.buf[..]) {
                let used = self.buf.len() - rest.len();
                self.buf.drain(..used);
                return Some(frame);
            }
            let mut chunk = [0u8; 4096];
            match self.stream.read(&mut chunk) {
                Ok(0) | Err(_) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }

    /// Reads and answers the client's side of the login, agreeing on `heartbeat` seconds.
    pub(super) fn login(&mut self, heartbeat: u16) {
        // The protocol header is 8 bytes, not a frame.
        let mut header = [0u8; 8];
        self.stream
            .read_exact(&mut header)
            .expect("protocol header");
        assert_eq!(&header[..4], b"AMQP");
        self.method(AMQPClass::Connection(connection::AMQPMethod::Start(
            connection::Start {
                version_major: 0,
                version_minor: 9,
                server_properties: Default::default(),
                mechanisms: "PLAIN AMQPLAIN".into(),
                locales: "en_US".into(),
            },
        )));
        let Some(AMQPFrame::Method(0, AMQPClass::Connection(connection::AMQPMethod::StartOk(ok)))) =
            self.next()
        else {
            panic!("expected start-ok");
        };
        assert_eq!(ok.mechanism.as_str(), "PLAIN");
        self.method(AMQPClass::Connection(connection::AMQPMethod::Tune(
            connection::Tune {
                channel_max: 2047,
                frame_max: 4096,
                heartbeat,
            },
        )));
        let tune_ok = self.next();
        assert!(
            matches!(
                tune_ok,
                Some(AMQPFrame::Method(
                    0,
                    AMQPClass::Connection(connection::AMQPMethod::TuneOk(_))
                ))
            ),
            "{tune_ok:?}"
        );
        let open = self.next();
        assert!(
            matches!(
                open,
                Some(AMQPFrame::Method(
                    0,
                    AMQPClass::Connection(connection::AMQPMethod::Open(_))
                ))
            ),
            "{open:?}"
        );
        self.method(AMQPClass::Connection(connection::AMQPMethod::OpenOk(
            connection::OpenOk {},
        )));
    }
}

/// A fake broker on a free local port running `script` on its one connection; its URL.
pub(super) fn fake(script: impl FnOnce(Fake) + Send + 'static) -> (String, thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a local port");
    let port = listener.local_addr().expect("local address").port();
    let handle = thread::spawn(move || {
        let (stream, _) = listener.accept().expect("the client connects");
        script(Fake {
            stream,
            buf: Vec::new(),
        });
    });
    (format!("amqp://guest:s3cret@127.0.0.1:{port}/%2f"), handle)
}

#[test]
fn agrees_on_the_lower_limit_and_zero_is_none() {
    assert_eq!(agree(None, 60u16), 60);
    assert_eq!(agree(Some(0u16), 60), 60);
    assert_eq!(agree(Some(10u16), 0), 10);
    assert_eq!(agree(Some(10u16), 60), 10);
    assert_eq!(agree(Some(90u16), 60), 60);
}

#[test]
fn urls_it_cannot_serve_yet_are_refused_by_name() {
    let open = |url: &str| Wire::open(url, "t", TIMEOUT).err().expect("refused");
    let tls = open("amqps://guest:guest@127.0.0.1:5671/%2f");
    assert!(matches!(tls, WireError::Unsupported(_)), "{tls}");
    assert!(tls.to_string().contains("TLS"), "{tls}");
    let external = open("amqp://127.0.0.1:1/%2f?auth_mechanism=external");
    assert!(external.to_string().contains("EXTERNAL"), "{external}");
    for url in [
        "http://guest:hidden@127.0.0.1/",
        "amqp:guest:hidden@127.0.0.1/%2f",
    ] {
        let bad = open(url);
        assert!(matches!(bad, WireError::Url(_)), "{bad}");
        assert!(!bad.to_string().contains("hidden"), "{bad}");
    }
    let long = open(&format!("amqp://127.0.0.1:1/{}", "v".repeat(256)));
    assert!(matches!(long, WireError::TooLong(_)), "{long}");
}

#[test]
fn logs_in_and_agrees_on_the_broker_s_limits() {
    let (url, broker) = fake(|mut f| {
        f.login(0);
        // Waits for the client's close, and answers it.
        while let Some(frame) = f.next() {
            if let AMQPFrame::Method(0, AMQPClass::Connection(connection::AMQPMethod::Close(_))) =
                frame
            {
                f.method(AMQPClass::Connection(connection::AMQPMethod::CloseOk(
                    connection::CloseOk {},
                )));
                return;
            }
        }
        panic!("the client never closed");
    });
    let wire = Wire::open(&format!("{url}?frame_max=8192"), "t", TIMEOUT).expect("login");
    let tuned = wire.tuned();
    assert_eq!(
        (tuned.channel_max, tuned.frame_max, tuned.heartbeat),
        (2047, 4096, 0)
    );
    wire.close("done").expect("close-ok");
    broker.join().expect("fake broker");
}

#[test]
fn a_silent_broker_is_given_up_after_two_heartbeats() {
    let (url, broker) = fake(|mut f| {
        f.login(1);
        // Reads (the client's heartbeats) and never writes.
        while f.next().is_some() {}
    });
    let mut wire = Wire::open(&url, "t", TIMEOUT).expect("login");
    let started = Instant::now();
    let err = wire.wait(Some(started + TIMEOUT)).expect_err("silence");
    assert!(matches!(err, WireError::Silent(_)), "{err}");
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(1500), "{took:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    drop(wire);
    broker.join().expect("fake broker");
}

#[test]
fn heartbeats_keep_a_quiet_connection_open() {
    let (url, broker) = fake(|mut f| {
        f.login(1);
        let mut beats = 0;
        let started = Instant::now();
        while started.elapsed() < Duration::from_millis(2600) {
            f.send(AMQPFrame::Heartbeat);
            f.stream
                .set_read_timeout(Some(Duration::from_millis(400)))
                .expect("read timeout");
            if let Some(AMQPFrame::Heartbeat) = f.next() {
                beats += 1;
            }
        }
        // One every half interval, give or take the reads' timing.
        assert!(beats >= 3, "{beats} heartbeats from the client in 2.6 s");
    });
    let mut wire = Wire::open(&url, "t", TIMEOUT).expect("login");
    let until = Instant::now() + Duration::from_millis(2500);
    assert_eq!(wire.wait(Some(until)).expect("alive"), Woke::Idle);
    broker.join().expect("fake broker");
}

/// A caller busy for longer than two intervals between waits (a long batch) finds the
/// broker's heartbeats waiting in the socket: not silence.
#[test]
fn heartbeats_that_came_while_the_caller_was_busy_count() {
    let (url, broker) = fake(|mut f| {
        f.login(1);
        // A heartbeat frame every 250 ms until the client hangs up.
        let heartbeat = [8u8, 0, 0, 0, 0, 0, 0, 0xCE];
        while f.stream.write_all(&heartbeat).is_ok() {
            thread::sleep(Duration::from_millis(250));
        }
    });
    let mut wire = Wire::open(&url, "t", TIMEOUT).expect("login");
    // The busy caller: nothing read for 2.5 s, two intervals and a half.
    thread::sleep(Duration::from_millis(2500));
    let until = Instant::now() + Duration::from_millis(300);
    assert_eq!(wire.wait(Some(until)).expect("not silent"), Woke::Idle);
    drop(wire);
    broker.join().expect("fake broker");
}

#[test]
fn a_waker_on_another_thread_ends_the_wait() {
    let (url, broker) = fake(|mut f| {
        f.login(0);
        while f.next().is_some() {}
    });
    let mut wire = Wire::open(&url, "t", TIMEOUT).expect("login");
    let waker = wire.waker();
    let started = Instant::now();
    let other = thread::spawn(move || {
        thread::sleep(Duration::from_millis(100));
        waker.wake();
    });
    assert_eq!(
        wire.wait(Some(started + TIMEOUT)).expect("woken"),
        Woke::Waker
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    other.join().expect("waking thread");
    // The wake-up was taken: the next wait sleeps until its time.
    let until = Instant::now() + Duration::from_millis(100);
    assert_eq!(wire.wait(Some(until)).expect("idle"), Woke::Idle);
    drop(wire);
    broker.join().expect("fake broker");
}

#[test]
fn the_broker_closing_the_connection_is_answered_and_reported() {
    let (url, broker) = fake(|mut f| {
        f.login(0);
        f.method(AMQPClass::Connection(connection::AMQPMethod::Close(
            connection::Close {
                reply_code: 320,
                reply_text: "CONNECTION_FORCED - broker forced connection closure".into(),
                class_id: 0,
                method_id: 0,
            },
        )));
        let answer = f.next();
        assert!(
            matches!(
                answer,
                Some(AMQPFrame::Method(
                    0,
                    AMQPClass::Connection(connection::AMQPMethod::CloseOk(_))
                ))
            ),
            "{answer:?}"
        );
    });
    let mut wire = Wire::open(&url, "t", TIMEOUT).expect("login");
    let err = wire
        .wait(Some(Instant::now() + TIMEOUT))
        .expect_err("closed");
    let WireError::Closed { code, text } = &err else {
        panic!("{err}")
    };
    assert_eq!(*code, 320);
    assert!(text.contains("CONNECTION_FORCED"), "{text}");
    broker.join().expect("fake broker");
}

#[test]
fn channel_frames_are_handed_up_and_heartbeats_are_not() {
    use amq_protocol::protocol::channel;
    let (url, broker) = fake(|mut f| {
        f.login(0);
        f.send(AMQPFrame::Heartbeat);
        f.send(AMQPFrame::Method(
            1,
            AMQPClass::Channel(channel::AMQPMethod::Close(channel::Close {
                reply_code: 404,
                reply_text: "NOT_FOUND - no queue 'q'".into(),
                class_id: 60,
                method_id: 20,
            })),
        ));
        while f.next().is_some() {}
    });
    let mut wire = Wire::open(&url, "t", TIMEOUT).expect("login");
    assert_eq!(
        wire.wait(Some(Instant::now() + TIMEOUT)).expect("frames"),
        Woke::Frames
    );
    let frames: Vec<AMQPFrame> = wire.frames().collect();
    assert!(
        matches!(
            &frames[..],
            [AMQPFrame::Method(1, AMQPClass::Channel(channel::AMQPMethod::Close(c)))]
                if c.reply_code == 404
        ),
        "{frames:?}"
    );
    drop(wire);
    broker.join().expect("fake broker");
}

#[test]
fn a_socket_closed_during_login_and_an_oversized_frame_are_errors() {
    let (url, broker) = fake(drop);
    let err = Wire::open(&url, "t", TIMEOUT).err().expect("no broker");
    assert!(matches!(err, WireError::Eof | WireError::Io(_)), "{err}");
    broker.join().expect("fake broker");

    let (url, broker) = fake(|mut f| {
        f.login(0);
        // A frame of exactly the 4 KiB agreed (8 bytes of header and end), then, once the
        // client answered it, one of 1 MiB.
        f.send(AMQPFrame::Body(1, vec![7; 4096 - 8]));
        assert!(matches!(f.next(), Some(AMQPFrame::Heartbeat)));
        // Only its header and a few bytes: the size it declares is enough to refuse it.
        let mut frame = vec![3u8, 0, 1];
        frame.extend((1024u32 * 1024).to_be_bytes());
        frame.extend([0u8; 16]);
        f.stream.write_all(&frame).expect("oversized frame's start");
        while f.next().is_some() {}
    });
    let mut wire = Wire::open(&url, "t", TIMEOUT).expect("login");
    let until = Instant::now() + TIMEOUT;
    assert_eq!(wire.wait(Some(until)).expect("frames"), Woke::Frames);
    let frames: Vec<AMQPFrame> = wire.frames().collect();
    assert!(
        matches!(&frames[..], [AMQPFrame::Body(1, body)] if body.len() == 4088),
        "{} frames",
        frames.len()
    );
    wire.send(&[AMQPFrame::Heartbeat]).expect("answer");
    let err = wire.wait(Some(until)).expect_err("too big");
    assert!(matches!(err, WireError::Frame(_)), "{err}");
    assert!(err.to_string().contains("at most 4096"), "{err}");
    drop(wire);
    broker.join().expect("fake broker");
}

#[cfg(feature = "server-tests")]
mod rabbitmq {
    //! The RabbitMQ of this machine (start it with `rabbitmq-server -detached`).

    use amq_protocol::protocol::channel;

    use super::*;

    const URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";

    fn open(url: &str) -> Wire {
        Wire::open(url, "wire-test", TIMEOUT).unwrap_or_else(|e| {
            panic!("cannot log in to RabbitMQ ({e}); start it with: rabbitmq-server -detached")
        })
    }

    fn open_channel(wire: &mut Wire, id: u16) {
        wire.send_method(
            id,
            AMQPClass::Channel(channel::AMQPMethod::Open(channel::Open {})),
        )
        .expect("channel.open");
        let got = wire
            .method(id, "channel.open-ok", Instant::now() + TIMEOUT)
            .expect("channel.open-ok");
        assert!(
            matches!(got, AMQPClass::Channel(channel::AMQPMethod::OpenOk(_))),
            "{got:?}"
        );
    }

    /// Logs in, stays quiet past what a 1 s heartbeat allows without heartbeats, and is still
    /// open.
    #[test]
    fn logs_in_and_heartbeats_keep_it_open() {
        let mut wire = open(&format!("{URL}?heartbeat=1"));
        assert_eq!(wire.tuned().heartbeat, 1);
        assert!(wire.tuned().frame_max > 0);
        open_channel(&mut wire, 1);
        let until = Instant::now() + Duration::from_millis(3500);
        assert_eq!(wire.wait(Some(until)).expect("still open"), Woke::Idle);
        open_channel(&mut wire, 2);
        wire.close("done").expect("close-ok");
    }

    #[test]
    fn a_wrong_password_is_refused_without_showing_it() {
        let err = Wire::open(
            "amqp://guest:not-the-password@127.0.0.1:5672/%2f",
            "wire-test",
            TIMEOUT,
        )
        .err()
        .expect("refused");
        let WireError::Closed { code, .. } = &err else {
            panic!("{err}")
        };
        assert_eq!(*code, 403, "{err}");
        assert!(err.to_string().contains("ACCESS_REFUSED"), "{err}");
        assert!(!err.to_string().contains("not-the-password"), "{err}");
    }

    #[test]
    fn a_vhost_that_does_not_exist_is_refused() {
        let err = Wire::open(
            &format!(
                "{}no-such-vhost-{}",
                &URL[..URL.len() - 3],
                std::process::id()
            ),
            "wire-test",
            TIMEOUT,
        )
        .err()
        .expect("refused");
        assert!(err.to_string().contains("NOT_ALLOWED"), "{err}");
    }
}
