//! A bounded, seeded fuzz of the frame decoder lapin runs on its I/O thread (the open-ended one
//! is `fuzz/`, run with `cargo fuzz`). Garbage, mutated, truncated and deeply nested frames must
//! give an error value or a frame, never a panic or a stack overflow; and a content header whose
//! fixed part is intact must always decode. Runs on a 256 KiB stack, so that recursion without
//! bound would overflow here (and abort the test binary) rather than pass.

use amq_protocol::frame::parsing::{parse_content_header, parse_frame};
use amq_protocol::frame::{AMQPContentHeader, AMQPFrame, WriteContext, gen_frame};
use amq_protocol::protocol::{AMQPClass, BasicProperties, basic};
use lapin::types::{AMQPValue, FieldArray, FieldTable};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Cases per run: about 5 s in a debug build.
const CASES: u32 = 50_000;
const SEED: u64 = 0x5eed_f0a3;
const FRAME_END: u8 = 0xce;

#[test]
fn the_frame_decoder_survives_garbage() {
    let checked = std::thread::Builder::new()
        .name("fuzz".into())
        .stack_size(256 * 1024)
        .spawn(run)
        .expect("spawn the fuzz thread")
        .join()
        .expect("the decoder panicked (see the case above)");
    assert_eq!(checked, CASES);
}

fn run() -> u32 {
    let mut rng = StdRng::seed_from_u64(SEED);
    let seeds = seed_frames();
    for case in 0..CASES {
        let (bytes, header_payload) = match case % 5 {
            0 => (random_bytes(&mut rng, 200), None),
            1 => wrapped(random_properties(&mut rng)),
            2 => mutated(&mut rng, &seeds),
            3 => wrapped(nested_properties(&mut rng)),
            _ => truncated(&mut rng, &seeds),
        };
        // Any result is fine; a panic or an overflow is not.
        let _ = parse_frame(&bytes[..]);
        if let Some(payload) = header_payload {
            match parse_content_header(&payload[..]) {
                Ok((rest, _)) => assert!(rest.is_empty(), "case {case}: bytes left"),
                Err(err) => panic!("case {case}: a content header did not decode: {err:?}"),
            }
        }
    }
    CASES
}

/// A content header frame on channel 1 around `payload` (class 60, body size 5 first), and
/// the payload itself.
fn wrapped(properties: Vec<u8>) -> (Vec<u8>, Option<Vec<u8>>) {
    let mut payload = vec![0, 60, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5];
    payload.extend_from_slice(&properties);
    (frame(2, &payload), Some(payload))
}

fn frame(kind: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![kind, 0, 1];
    f.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    f.extend_from_slice(payload);
    f.push(FRAME_END);
    f
}

fn random_bytes(rng: &mut StdRng, max: usize) -> Vec<u8> {
    let len = rng.random_range(0..=max);
    (0..len).map(|_| rng.random()).collect()
}

/// Random property flags followed by random bytes, biased towards plausible field tables.
fn random_properties(rng: &mut StdRng) -> Vec<u8> {
    let mut p = rng.random::<u16>().to_be_bytes().to_vec();
    if rng.random_bool(0.5) {
        p = vec![0x20, 0x00]; // headers only
        let body = random_table_body(rng, 3);
        p.extend_from_slice(&(body.len() as u32).to_be_bytes());
        p.extend_from_slice(&body);
    }
    p.extend(random_bytes(rng, 60));
    p
}

/// Entries of a field table with random keys (not always UTF-8) and random typed values.
fn random_table_body(rng: &mut StdRng, depth: u32) -> Vec<u8> {
    let mut body = Vec::new();
    for _ in 0..rng.random_range(0..4) {
        let key = random_bytes(rng, 8);
        body.push(key.len() as u8);
        body.extend_from_slice(&key);
        random_value(rng, depth, &mut body);
    }
    body
}

fn random_value(rng: &mut StdRng, depth: u32, out: &mut Vec<u8>) {
    const TYPES: &[u8] = b"tbBUuIiLlfdDsSxTFAVZ";
    let t = TYPES[rng.random_range(0..TYPES.len())];
    out.push(t);
    match t {
        b'F' | b'A' if depth > 0 => {
            let inner = if t == b'F' {
                random_table_body(rng, depth - 1)
            } else {
                let mut a = Vec::new();
                for _ in 0..rng.random_range(0..3) {
                    random_value(rng, depth - 1, &mut a);
                }
                a
            };
            out.extend_from_slice(&(inner.len() as u32).to_be_bytes());
            out.extend_from_slice(&inner);
        }
        b'S' | b'x' => {
            let s = random_bytes(rng, 8);
            out.extend_from_slice(&(s.len() as u32).to_be_bytes());
            out.extend_from_slice(&s);
        }
        _ => out.extend(random_bytes(rng, 8)),
    }
}

/// Headers nesting tables and arrays to a depth around the limit or far beyond it, with a
/// good, unknown or truncated innermost value.
fn nested_properties(rng: &mut StdRng) -> Vec<u8> {
    let depth: usize = match rng.random_range(0..4) {
        0 | 1 => rng.random_range(1..=70),
        2 => 1_500,
        _ => 5_000,
    };
    let innermost: &[u8] = match rng.random_range(0..3) {
        0 => b"V",
        1 => b"Z",
        _ => &[b'S', 0, 0, 1, 0],
    };
    // Outermost first, tables and arrays mixed by a random pattern: a table level holds the
    // key "k", an array level nothing.
    let pattern: u64 = rng.random();
    let levels: Vec<(u8, &[u8])> = (0..depth)
        .map(|j| match (pattern >> (j % 64)) & 1 {
            0 => (b'F', &[1, b'k'][..]),
            _ => (b'A', &[][..]),
        })
        .collect();
    // sizes[j]: the encoded size of the value at level j (sizes[depth]: the innermost).
    let mut sizes = vec![innermost.len(); depth + 1];
    for j in (0..depth).rev() {
        sizes[j] = 5 + levels[j].1.len() + sizes[j + 1];
    }
    // The headers table: { "h": value }
    let mut p = vec![0x20, 0x00];
    p.extend_from_slice(&((2 + sizes[0]) as u32).to_be_bytes());
    p.extend_from_slice(&[1, b'h']);
    for (j, (kind, key)) in levels.iter().enumerate() {
        p.push(*kind);
        p.extend_from_slice(&((key.len() + sizes[j + 1]) as u32).to_be_bytes());
        p.extend_from_slice(key);
    }
    p.extend_from_slice(innermost);
    p
}

/// A valid frame with a few bytes flipped, inserted or removed; half the time re-wrapped with a
/// correct length so the damage reaches the payload's decoder.
fn mutated(rng: &mut StdRng, seeds: &[Vec<u8>]) -> (Vec<u8>, Option<Vec<u8>>) {
    let seed = &seeds[rng.random_range(0..seeds.len())];
    let (kind, mut payload) = (seed[0], seed[7..seed.len() - 1].to_vec());
    for _ in 0..rng.random_range(1..=4) {
        let at = rng.random_range(0..=payload.len());
        match rng.random_range(0..4) {
            0 if at < payload.len() => payload[at] ^= 1 << rng.random_range(0..8),
            1 if at < payload.len() => payload[at] = rng.random(),
            2 => payload.insert(at, rng.random()),
            _ => {
                let end = (at + rng.random_range(0..4)).min(payload.len());
                payload.drain(at..end);
            }
        }
    }
    if rng.random_bool(0.5) {
        let mut raw = seed.clone();
        let at = rng.random_range(0..raw.len());
        raw[at] = rng.random();
        return (raw, None);
    }
    let checked = (kind == 2 && payload.len() >= 12).then(|| payload.clone());
    (frame(kind, &payload), checked)
}

/// A valid frame cut short, or with its payload cut short and the length fixed up.
fn truncated(rng: &mut StdRng, seeds: &[Vec<u8>]) -> (Vec<u8>, Option<Vec<u8>>) {
    let seed = &seeds[rng.random_range(0..seeds.len())];
    if rng.random_bool(0.5) {
        return (seed[..rng.random_range(0..seed.len())].to_vec(), None);
    }
    let payload = &seed[7..seed.len() - 1];
    let cut = payload[..rng.random_range(0..=payload.len())].to_vec();
    let checked = (seed[0] == 2 && cut.len() >= 12).then(|| cut.clone());
    (frame(seed[0], &cut), checked)
}

/// Well-formed frames to mutate: content headers with every property and nested headers, a
/// basic.deliver, a body and a heartbeat.
fn seed_frames() -> Vec<Vec<u8>> {
    let mut inner = FieldTable::default();
    inner.insert("count".into(), AMQPValue::LongLongInt(3));
    inner.insert("queue".into(), AMQPValue::LongString("q@retry.1s".into()));
    let mut headers = FieldTable::default();
    headers.insert(
        "x-death".into(),
        AMQPValue::FieldArray(FieldArray::from(vec![AMQPValue::FieldTable(inner)])),
    );
    headers.insert("flag".into(), AMQPValue::Boolean(true));
    headers.insert("n".into(), AMQPValue::ShortInt(-7));
    let full = BasicProperties::default()
        .with_content_type("text/plain".into())
        .with_content_encoding("gzip".into())
        .with_headers(headers)
        .with_delivery_mode(2)
        .with_priority(4)
        .with_correlation_id("c-1".into())
        .with_reply_to("r".into())
        .with_expiration("60000".into())
        .with_message_id("m-1".into())
        .with_timestamp(1_700_000_000)
        .with_type("t".into())
        .with_user_id("guest".into())
        .with_app_id("a".into())
        .with_cluster_id("".into());
    let header = |properties| {
        AMQPFrame::Header(
            1,
            AMQPContentHeader {
                class_id: 60,
                body_size: 11,
                properties,
            },
        )
    };
    let deliver = AMQPFrame::Method(
        1,
        AMQPClass::Basic(basic::AMQPMethod::Deliver(basic::Deliver {
            consumer_tag: "ctag".into(),
            delivery_tag: 42,
            redelivered: true,
            exchange: "master".into(),
            routing_key: "user.created".into(),
        })),
    );
    let frames = [
        header(full),
        header(BasicProperties::default()),
        deliver,
        AMQPFrame::Body(1, b"hello world".to_vec()),
        AMQPFrame::Heartbeat,
    ];
    frames
        .iter()
        .map(|f| {
            let encoded = encode(f);
            assert_eq!(
                parse_frame(&encoded[..]).map(|(_, parsed)| parsed).as_ref(),
                Ok(f),
                "seed frames round-trip"
            );
            encoded
        })
        .collect()
}

fn encode(frame: &AMQPFrame) -> Vec<u8> {
    let mut buf = vec![0u8; 4096];
    let written = gen_frame(frame)(WriteContext::from(&mut buf[..]))
        .expect("encode a seed frame")
        .position;
    buf.truncate(written as usize);
    buf
}
