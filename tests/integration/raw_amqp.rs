//! A raw AMQP 0-9-1 publisher, written by hand for tests: it sends property lists made of raw
//! bytes, which no client library would encode (invalid UTF-8, headers nested 1,500 deep,
//! unknown field types). One channel, publisher confirms on, PLAIN login.

#![allow(dead_code)]

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::harness;

const FRAME_METHOD: u8 = 1;
const FRAME_HEADER: u8 = 2;
const FRAME_BODY: u8 = 3;
const FRAME_HEARTBEAT: u8 = 8;
const FRAME_END: u8 = 0xce;
/// The channel every publish goes on.
const CHANNEL: u16 = 1;

/// Where and as whom to connect, from an `amqp://user:pass@host:port/vhost` URL.
#[derive(Debug, Clone)]
pub struct Target {
    /// `host:port`
    pub addr: String,
    pub user: String,
    pub pass: String,
    /// The vhost as written in the URL (`%2f` for `/`).
    pub vhost_in_url: String,
}

impl Target {
    /// The test broker.
    pub fn broker() -> Target {
        Target::from_url(&harness::broker_url())
    }

    /// Parses the URL forms the tests use (no query, no percent escapes but `%2f`).
    pub fn from_url(url: &str) -> Target {
        let rest = url.strip_prefix("amqp://").expect("an amqp:// URL");
        let (creds, rest) = rest.rsplit_once('@').unwrap_or(("guest:guest", rest));
        let (user, pass) = creds.split_once(':').unwrap_or((creds, ""));
        let (host_port, vhost) = rest.split_once('/').unwrap_or((rest, ""));
        let addr = if host_port.contains(':') {
            host_port.to_string()
        } else {
            format!("{host_port}:5672")
        };
        Target {
            addr,
            user: user.to_string(),
            pass: pass.to_string(),
            vhost_in_url: vhost.to_string(),
        }
    }

    /// The same login and vhost at another address.
    pub fn url_at(&self, addr: impl std::fmt::Display) -> String {
        format!(
            "amqp://{}:{}@{addr}/{}",
            self.user, self.pass, self.vhost_in_url
        )
    }

    fn vhost(&self) -> String {
        match self.vhost_in_url.as_str() {
            "" => "/".to_string(),
            v => v.replace("%2f", "/").replace("%2F", "/"),
        }
    }
}

/// The property list of a content header, field by field as raw bytes (only the fields the
/// tests need; AMQP orders them by flag bit).
#[derive(Debug, Default, Clone)]
pub struct RawProps {
    /// Short string bytes (flag bit 15).
    pub content_type: Option<Vec<u8>>,
    /// A whole field table: its length, then its entries (flag bit 13); see [`table`].
    pub headers: Option<Vec<u8>>,
    /// Flag bit 12.
    pub delivery_mode: Option<u8>,
    /// Short string bytes (flag bit 7).
    pub message_id: Option<Vec<u8>>,
}

impl RawProps {
    /// Flags, then the fields present.
    pub fn encode(&self) -> Vec<u8> {
        let mut flags: u16 = 0;
        let mut fields = Vec::new();
        if let Some(ct) = &self.content_type {
            flags |= 1 << 15;
            fields.extend(short_str(ct));
        }
        if let Some(h) = &self.headers {
            flags |= 1 << 13;
            fields.extend_from_slice(h);
        }
        if let Some(mode) = self.delivery_mode {
            flags |= 1 << 12;
            fields.push(mode);
        }
        if let Some(id) = &self.message_id {
            flags |= 1 << 7;
            fields.extend(short_str(id));
        }
        let mut out = flags.to_be_bytes().to_vec();
        out.extend(fields);
        out
    }
}

/// A field table from raw keys and typed values (type byte first, see [`long_str`]).
pub fn table(entries: &[(&[u8], Vec<u8>)]) -> Vec<u8> {
    let mut body = Vec::new();
    for (key, value) in entries {
        body.extend(short_str(key));
        body.extend_from_slice(value);
    }
    let mut out = (body.len() as u32).to_be_bytes().to_vec();
    out.extend(body);
    out
}

/// A long-string field value.
pub fn long_str(s: &[u8]) -> Vec<u8> {
    let mut out = vec![b'S'];
    out.extend((s.len() as u32).to_be_bytes());
    out.extend_from_slice(s);
    out
}

/// A field value of `depth` field arrays nested in each other (the innermost empty).
pub fn nested_arrays(depth: u32) -> Vec<u8> {
    (1..=depth)
        .rev()
        .flat_map(|level| std::iter::once(b'A').chain((5 * (level - 1)).to_be_bytes()))
        .collect()
}

fn short_str(s: &[u8]) -> Vec<u8> {
    let len = u8::try_from(s.len()).expect("a short string");
    let mut out = vec![len];
    out.extend_from_slice(s);
    out
}

/// One open connection with channel 1 in confirm mode.
pub struct RawPublisher {
    stream: TcpStream,
    frame_max: u32,
}

impl RawPublisher {
    /// Logs in, opens the vhost and channel 1, and turns publisher confirms on.
    pub async fn connect(target: &Target) -> RawPublisher {
        let stream = TcpStream::connect(&target.addr)
            .await
            .unwrap_or_else(|e| panic!("RabbitMQ is not reachable at {}: {e}", target.addr));
        let mut p = RawPublisher {
            stream,
            frame_max: 4096,
        };
        p.write(b"AMQP\x00\x00\x09\x01").await;
        p.expect_method(0, (10, 10)).await; // connection.start
        let mut start_ok = table(&[]); // client properties
        start_ok.extend(short_str(b"PLAIN"));
        let response = format!("\0{}\0{}", target.user, target.pass);
        start_ok.extend((response.len() as u32).to_be_bytes());
        start_ok.extend_from_slice(response.as_bytes());
        start_ok.extend(short_str(b"en_US"));
        p.send_method(0, (10, 11), &start_ok).await;
        let tune = p.expect_method(0, (10, 30)).await;
        // Keep the broker's channel-max and frame-max (0: no limit); no heartbeats.
        p.frame_max = match u32::from_be_bytes([tune[2], tune[3], tune[4], tune[5]]) {
            0 => 131_072,
            max => max,
        };
        let mut tune_ok = tune[..2].to_vec();
        tune_ok.extend(p.frame_max.to_be_bytes());
        tune_ok.extend([0, 0]);
        p.send_method(0, (10, 31), &tune_ok).await;
        let mut open = short_str(target.vhost().as_bytes());
        open.extend([0, 0]); // reserved short string, reserved bit
        p.send_method(0, (10, 40), &open).await;
        p.expect_method(0, (10, 41)).await;
        p.send_method(CHANNEL, (20, 10), &[0]).await; // channel.open
        p.expect_method(CHANNEL, (20, 11)).await;
        p.send_method(CHANNEL, (85, 10), &[0]).await; // confirm.select
        p.expect_method(CHANNEL, (85, 11)).await;
        p
    }

    /// Publishes `body` with the raw property list `properties` (flags first, see
    /// [`RawProps`]) and waits for the broker's confirm.
    pub async fn publish(&mut self, exchange: &str, key: &str, properties: &[u8], body: &[u8]) {
        let mut publish = vec![0, 0]; // reserved
        publish.extend(short_str(exchange.as_bytes()));
        publish.extend(short_str(key.as_bytes()));
        publish.push(0); // not mandatory, not immediate
        self.send_method(CHANNEL, (60, 40), &publish).await;
        let mut header = vec![0, 60, 0, 0]; // class basic, weight 0
        header.extend((body.len() as u64).to_be_bytes());
        header.extend_from_slice(properties);
        self.send_frame(FRAME_HEADER, CHANNEL, &header).await;
        let chunk = self.frame_max.saturating_sub(8).max(1) as usize;
        for part in body.chunks(chunk) {
            self.send_frame(FRAME_BODY, CHANNEL, part).await;
        }
        self.expect_method(CHANNEL, (60, 80)).await; // basic.ack
    }

    /// Closes the connection cleanly.
    pub async fn close(mut self) {
        let mut close = vec![0, 200];
        close.extend(short_str(b"bye"));
        close.extend([0, 0, 0, 0]);
        self.send_method(0, (10, 50), &close).await;
        self.expect_method(0, (10, 51)).await;
    }

    async fn send_method(&mut self, channel: u16, (class, method): (u16, u16), args: &[u8]) {
        let mut payload = class.to_be_bytes().to_vec();
        payload.extend(method.to_be_bytes());
        payload.extend_from_slice(args);
        self.send_frame(FRAME_METHOD, channel, &payload).await;
    }

    async fn send_frame(&mut self, kind: u8, channel: u16, payload: &[u8]) {
        let mut frame = vec![kind];
        frame.extend(channel.to_be_bytes());
        frame.extend((payload.len() as u32).to_be_bytes());
        frame.extend_from_slice(payload);
        frame.push(FRAME_END);
        self.write(&frame).await;
    }

    async fn write(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.expect("send to broker");
    }

    /// Reads frames until the method `(class, method)` arrives on `channel`; returns its
    /// arguments. A close from the broker, or anything else, fails the test.
    async fn expect_method(&mut self, channel: u16, want: (u16, u16)) -> Vec<u8> {
        loop {
            let (kind, ch, payload) =
                tokio::time::timeout(Duration::from_secs(10), self.read_frame())
                    .await
                    .unwrap_or_else(|_| panic!("no answer {want:?} from the broker in 10 s"));
            if kind == FRAME_HEARTBEAT {
                continue;
            }
            assert_eq!(kind, FRAME_METHOD, "expected a method frame");
            let got = (
                u16::from_be_bytes([payload[0], payload[1]]),
                u16::from_be_bytes([payload[2], payload[3]]),
            );
            if got == (10, 50) || got == (20, 40) {
                let text_len = usize::from(payload[6]);
                let text = String::from_utf8_lossy(&payload[7..7 + text_len]);
                panic!("the broker closed the channel or connection: {text}");
            }
            assert_eq!(
                (ch, got),
                (channel, want),
                "unexpected method from the broker"
            );
            return payload[4..].to_vec();
        }
    }

    async fn read_frame(&mut self) -> (u8, u16, Vec<u8>) {
        let mut head = [0u8; 7];
        self.stream
            .read_exact(&mut head)
            .await
            .expect("read a frame");
        let size = u32::from_be_bytes([head[3], head[4], head[5], head[6]]) as usize;
        let mut payload = vec![0u8; size + 1];
        self.stream
            .read_exact(&mut payload)
            .await
            .expect("read a frame");
        assert_eq!(payload.pop(), Some(FRAME_END), "frame end");
        (head[0], u16::from_be_bytes([head[1], head[2]]), payload)
    }
}
