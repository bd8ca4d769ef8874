//! (x) A prototype of the consumer design proposed for target 1, measured against (a+): one
//! thread owns the AMQP socket, parses every frame a read returns, runs each complete delivery's
//! plugin call right there, and settles all that read brought with one `multiple=true` ack. No
//! I/O thread, no channel between parser and consumer, no task per delivery, no ack task.
//! (x0) is the same loop without the call: what the socket loop alone costs.
//!
//! It is a bench, not a client: one channel, PLAIN guest/guest, no heartbeats, no recovery. The
//! frames are read and written with `amq_protocol`, the codec lapin uses.

use std::io::{Read, Write};
use std::net::TcpStream;

use amq_protocol::frame::{AMQPFrame, ProtocolVersion, WriteContext, gen_frame, parse_frame};
use amq_protocol::protocol::{AMQPClass, basic, channel, connection};
use worker_host::plugin::{Answer, Input, Instances, Meta, Plugin, PublishPolicy, Runtime};

use super::*;

const CHANNEL: u16 = 1;

/// The plugin each delivery is handed to, or none for (x0).
pub(super) type Call = Option<Arc<Plugin>>;

/// The ok WAT plugin of (b), loaded in this process as the service loads it. The plugin keeps
/// the engine (and its epoch ticker) alive; the runtime itself is not needed after the load.
pub(super) fn ok_plugin(cache: &Path) -> Arc<Plugin> {
    let runtime = Runtime::new(&setup::runtime_config(cache)).expect("plugin runtime");
    let wasm = wat::parse_str(OK_WAT).expect("ok WAT parses");
    runtime.load_bytes("ok.wasm", &wasm).expect("ok WAT loads")
}

/// (x) / (x0): msgs/s from first delivery to last ack of a pre-filled queue, and the CPU per
/// message of this process and the broker in that window.
pub(super) async fn batch(n: u64, body: &[u8], call: Call) -> (f64, CpuUse) {
    let queue = unique("bench-batch");
    let conn = connect().await;
    let ch = conn.create_channel().await.expect("channel");
    declare(&ch, &queue).await;
    fill(&ch, &queue, n, body).await;
    let q = queue.clone();
    let out = tokio::task::spawn_blocking(move || consume(&q, n, call))
        .await
        .expect("batch consumer thread");
    let _ = ch
        .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
        .await;
    let _ = conn.close(200, "bye".into()).await;
    out
}

/// The socket and the bytes read but not parsed yet.
struct Wire {
    stream: TcpStream,
    buf: Vec<u8>,
    /// Bytes of `buf` holding data.
    len: usize,
    /// Frames parsed and not yet handled.
    early: Vec<AMQPFrame>,
}

impl Wire {
    fn send(&mut self, frames: &[AMQPFrame]) {
        let mut out = Vec::with_capacity(256);
        for f in frames {
            out = gen_frame(f)(WriteContext::from(out))
                .expect("frame serializes")
                .into_inner()
                .0;
        }
        self.stream.write_all(&out).expect("write to broker");
    }

    fn method(&mut self, class: AMQPClass) {
        self.send(&[AMQPFrame::Method(CHANNEL, class)])
    }

    /// Reads once (blocking), appending to the buffer.
    fn fill(&mut self) {
        if self.buf.len() - self.len < 64 * 1024 {
            self.buf.resize(self.buf.len() * 2, 0);
        }
        let got = self.stream.read(&mut self.buf[self.len..]).expect("read");
        assert!(got > 0, "the broker closed the connection");
        self.len += got;
    }

    /// Every complete frame in the buffer, onto `early`; the buffer keeps the incomplete rest.
    fn frames(&mut self) {
        let mut at = 0;
        while at < self.len {
            match parse_frame(&self.buf[at..self.len]) {
                Ok((rest, frame)) => {
                    at = self.len - rest.len();
                    self.early.push(frame);
                }
                Err(e) if e.is_incomplete() => break,
                Err(e) => panic!("bad frame from the broker: {e:?}"),
            }
        }
        self.buf.copy_within(at..self.len, 0);
        self.len -= at;
    }

    /// Reads until a method frame arrives, and returns it (setup only: nothing else is expected
    /// before it). Frames after it, the first deliveries, stay in `early`.
    fn expect(&mut self) -> AMQPClass {
        loop {
            self.frames();
            if !self.early.is_empty() {
                match self.early.remove(0) {
                    AMQPFrame::Method(_, class) => return class,
                    other => panic!("expected a method, got {other}"),
                }
            }
            self.fill();
        }
    }
}

/// Handshake, channel, qos and consume: lapin's sequence, with the same prefetch.
fn open(queue: &str) -> Wire {
    let stream = TcpStream::connect("127.0.0.1:5672")
        .expect("RabbitMQ not reachable; start it with: rabbitmq-server -detached");
    stream.set_nodelay(true).expect("nodelay");
    let mut w = Wire {
        stream,
        buf: vec![0; 256 * 1024],
        len: 0,
        early: Vec::new(),
    };
    w.send(&[AMQPFrame::ProtocolHeader(ProtocolVersion::amqp_0_9_1())]);
    let AMQPClass::Connection(connection::AMQPMethod::Start(_)) = w.expect() else {
        panic!("expected connection.start")
    };
    let start_ok = connection::StartOk {
        client_properties: Default::default(),
        mechanism: "PLAIN".into(),
        response: "\0guest\0guest".into(),
        locale: "en_US".into(),
    };
    w.send(&[AMQPFrame::Method(
        0,
        AMQPClass::Connection(connection::AMQPMethod::StartOk(start_ok)),
    )]);
    let AMQPClass::Connection(connection::AMQPMethod::Tune(tune)) = w.expect() else {
        panic!("expected connection.tune")
    };
    let tune_ok = connection::TuneOk {
        channel_max: tune.channel_max,
        frame_max: tune.frame_max,
        heartbeat: 0,
    };
    let open = connection::Open {
        virtual_host: "/".into(),
    };
    w.send(&[
        AMQPFrame::Method(
            0,
            AMQPClass::Connection(connection::AMQPMethod::TuneOk(tune_ok)),
        ),
        AMQPFrame::Method(0, AMQPClass::Connection(connection::AMQPMethod::Open(open))),
    ]);
    w.expect(); // connection.open-ok
    w.method(AMQPClass::Channel(channel::AMQPMethod::Open(
        channel::Open {},
    )));
    w.expect(); // channel.open-ok
    w.method(AMQPClass::Basic(basic::AMQPMethod::Qos(basic::Qos {
        prefetch_count: PREFETCH,
        global: false,
    })));
    w.expect(); // basic.qos-ok
    w.method(AMQPClass::Basic(basic::AMQPMethod::Consume(
        basic::Consume {
            queue: queue.into(),
            consumer_tag: "".into(),
            no_local: false,
            no_ack: false,
            exclusive: false,
            nowait: false,
            arguments: Default::default(),
        },
    )));
    w.expect(); // basic.consume-ok
    w
}

/// A delivery being assembled from its method, header and body frames.
struct Partial {
    tag: u64,
    routing_key: String,
    redelivered: bool,
    message_id: Option<String>,
    size: u64,
    body: Vec<u8>,
}

/// Adds one frame to the delivery being assembled; a complete delivery moves to `ready`.
fn assemble(frame: AMQPFrame, partial: &mut Option<Partial>, ready: &mut Vec<Partial>) {
    match frame {
        AMQPFrame::Method(_, AMQPClass::Basic(basic::AMQPMethod::Deliver(d))) => {
            *partial = Some(Partial {
                tag: d.delivery_tag,
                routing_key: d.routing_key.to_string(),
                redelivered: d.redelivered,
                message_id: None,
                size: 0,
                body: Vec::new(),
            })
        }
        AMQPFrame::Header(_, h) => {
            let p = partial.as_mut().expect("header after deliver");
            p.size = h.body_size;
            p.message_id = h.properties.message_id().as_ref().map(|m| m.to_string());
            p.body.reserve_exact(h.body_size as usize);
        }
        AMQPFrame::Body(_, data) => partial
            .as_mut()
            .expect("body after header")
            .body
            .extend(data),
        other => panic!("unexpected frame while consuming: {other}"),
    }
    if partial
        .as_ref()
        .is_some_and(|p| p.body.len() as u64 == p.size && p.size > 0)
    {
        ready.extend(partial.take());
    }
}

/// The consumer loop: read, parse, call, ack; until `n` deliveries are settled.
fn consume(queue: &str, n: u64, call: Call) -> (f64, CpuUse) {
    let mut w = open(queue);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let limits = setup::limits(Instances::Fresh);
    let (config_json, publish) = (Arc::<str>::from("{}"), Arc::new(PublishPolicy::default()));
    let (mut started, mut mark) = (None, None);
    let (mut taken, mut frames, mut ready) = (0u64, Vec::new(), Vec::new());
    let mut partial: Option<Partial> = None;
    while taken < n {
        if w.early.is_empty() {
            w.fill();
            w.frames();
        }
        std::mem::swap(&mut frames, &mut w.early);
        for f in frames.drain(..) {
            assemble(f, &mut partial, &mut ready);
        }
        let Some(last) = ready.last().map(|p: &Partial| p.tag) else {
            continue;
        };
        started.get_or_insert_with(Instant::now);
        mark.get_or_insert_with(|| CpuMark::now(std::process::id()));
        if let Some(plugin) = &call {
            rt.block_on(async {
                for p in ready.drain(..) {
                    let input = Arc::new(Input {
                        body: p.body.into(),
                        meta: Meta {
                            routing_key: p.routing_key,
                            queue: queue.to_string(),
                            attempt: 1,
                            redelivered: p.redelivered,
                            message_id: p.message_id,
                            ..Meta::default()
                        },
                        config_json: config_json.clone(),
                        publish: publish.clone(),
                        granted: Arc::default(),
                    });
                    let inv = plugin.handle(input, &limits).await;
                    assert!(matches!(inv.answer, Ok(Answer::Ok)), "{:?}", inv.answer);
                    taken += 1;
                }
            });
        } else {
            taken += ready.len() as u64;
            ready.clear();
        }
        w.method(AMQPClass::Basic(basic::AMQPMethod::Ack(basic::Ack {
            delivery_tag: last,
            multiple: true,
        })));
    }
    let secs = started.map_or(f64::NAN, |s| s.elapsed().as_secs_f64());
    let used = mark.expect("at least one delivery").per_message(n);
    close(&mut w);
    (n as f64 / secs, used)
}

/// connection.close, then waits for close-ok (deliveries still in flight are dropped: the
/// broker requeues them, and the queue is deleted next).
fn close(w: &mut Wire) {
    let close = connection::Close {
        reply_code: 200,
        reply_text: "bye".into(),
        class_id: 0,
        method_id: 0,
    };
    w.send(&[AMQPFrame::Method(
        0,
        AMQPClass::Connection(connection::AMQPMethod::Close(close)),
    )]);
    loop {
        w.frames();
        for f in w.early.drain(..) {
            if let AMQPFrame::Method(0, AMQPClass::Connection(connection::AMQPMethod::CloseOk(_))) =
                f
            {
                return;
            }
        }
        w.fill();
    }
}
