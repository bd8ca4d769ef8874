//! The patched decoder as the consumer sees it, and a bounded fuzz of the frame decoder.

use super::*;
use amq_protocol::frame::parsing::parse_content_header;
use lapin::types::AMQPValue;

mod fuzz;

/// Decodes a content header payload (class 60, body size 3) with `properties` (flags first).
fn decode(properties: &[u8]) -> BasicProperties {
    let mut payload = vec![0, 60, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3];
    payload.extend_from_slice(properties);
    let (rest, header) = parse_content_header(&payload[..]).expect("a content header decodes");
    assert!(rest.is_empty());
    assert_eq!(header.body_size, 3);
    header.properties
}

#[test]
fn a_bad_message_id_is_undecodable() {
    let props = decode(&[0x00, 0x80, 2, 0xc3, 0x28]);
    assert_eq!(
        undecodable(&props).as_deref(),
        Some("invalid UTF-8 in a short string")
    );
    assert_eq!(
        cause("invalid UTF-8 in a short string"),
        "undecodable delivery: invalid UTF-8 in a short string"
    );
}

#[test]
fn deep_headers_are_undecodable() {
    let depth = 1500u32;
    let mut props = vec![0x20, 0x00];
    props.extend_from_slice(&(2 + 5 * depth).to_be_bytes());
    props.extend_from_slice(&[1, b'k']);
    for level in (1..=depth).rev() {
        props.push(b'A');
        props.extend_from_slice(&(5 * (level - 1)).to_be_bytes());
    }
    assert_eq!(
        undecodable(&decode(&props)).as_deref(),
        Some("field tables nested deeper than 64 levels")
    );
}

#[test]
fn a_normal_delivery_is_not_poison() {
    // content-type "text/plain" and headers {k: "v"}
    let mut props = vec![0xa0, 0x00, 10];
    props.extend_from_slice(b"text/plain");
    props.extend_from_slice(&[0, 0, 0, 8, 1, b'k', b'S', 0, 0, 0, 1, b'v']);
    let props = decode(&props);
    assert_eq!(undecodable(&props), None);
    assert_eq!(undecodable(&BasicProperties::default()), None);
    assert_eq!(
        props.content_type().as_ref().map(|s| s.as_str()),
        Some("text/plain")
    );
}

#[test]
fn the_marker_is_dropped_and_the_rest_kept() {
    let mut headers = FieldTable::default();
    headers.insert(
        UNDECODABLE_PROPERTIES_HEADER.into(),
        headers::text("unknown field type 'Z'"),
    );
    headers.insert("mine".into(), AMQPValue::Boolean(true));
    let props = BasicProperties::default()
        .with_message_id("m".into())
        .with_headers(headers);
    assert_eq!(
        undecodable(&props).as_deref(),
        Some("unknown field type 'Z'")
    );
    let clean = without_marker(&props);
    assert_eq!(undecodable(&clean), None);
    let names: Vec<_> = clean
        .headers()
        .as_ref()
        .map(|h| h.inner().keys().map(|k| k.to_string()).collect())
        .unwrap_or_default();
    assert_eq!(names, ["mine"]);
    assert_eq!(clean.message_id().as_ref().map(|s| s.as_str()), Some("m"));
}
