/// Traits required for parsing
pub use crate::types::parsing::traits;
use crate::{
    frame::*,
    protocol::{basic::parse_properties, *},
    types::{AMQPValue, FieldTable, parsing::*},
};
use nom::{
    Parser,
    bytes::streaming::{tag, take},
    combinator::{all_consuming, flat_map, map, map_opt, map_res},
    error::context,
};
use traits::ParsableInput;

/// Parse a channel id
pub fn parse_channel<I: ParsableInput>(i: I) -> ParserResult<I, AMQPChannel> {
    context("parse_channel", map(parse_id, From::from)).parse(i)
}

/// Parse the protocol header
pub fn parse_protocol_header<I: ParsableInput>(i: I) -> ParserResult<I, ProtocolVersion> {
    context(
        "parse_protocol_header",
        map(
            (
                tag(&metadata::NAME.as_bytes()[1..]),
                tag(&[0][..]),
                parse_short_short_uint,
                parse_short_short_uint,
                parse_short_short_uint,
            ),
            |(_, _, major, minor, revision)| ProtocolVersion {
                major,
                minor,
                revision,
            },
        ),
    )
    .parse(i)
}

/// Parse the frame type
pub fn parse_frame_type<I: ParsableInput>(i: I) -> ParserResult<I, AMQPFrameType> {
    context(
        "parse_frame_type",
        map_opt(parse_short_short_uint, |method| match method {
            c if c == metadata::NAME.as_bytes()[0] => Some(AMQPFrameType::ProtocolHeader),
            constants::FRAME_METHOD => Some(AMQPFrameType::Method),
            constants::FRAME_HEADER => Some(AMQPFrameType::Header),
            constants::FRAME_BODY => Some(AMQPFrameType::Body),
            constants::FRAME_HEARTBEAT => Some(AMQPFrameType::Heartbeat),
            _ => None,
        }),
    )
    .parse(i)
}

/// Parse a full AMQP Frame (with contents)
pub fn parse_frame<I: ParsableInput>(i: I) -> ParserResult<I, AMQPFrame> {
    context(
        "parse_frame",
        flat_map(parse_frame_type, move |frame_type| {
            move |i: I| match frame_type {
                AMQPFrameType::ProtocolHeader => {
                    map(parse_protocol_header, AMQPFrame::ProtocolHeader).parse(i)
                }
                frame_type => map_res(
                    parse_raw_frame(frame_type),
                    |AMQPRawFrame {
                         channel_id,
                         frame_type,
                         payload,
                     }: AMQPRawFrame<I>| match frame_type {
                        // This should be unreachable be better have a sensitive value anyways
                        AMQPFrameType::ProtocolHeader => {
                            Ok(AMQPFrame::ProtocolHeader(ProtocolVersion::amqp_0_9_1()))
                        }
                        AMQPFrameType::Method => all_consuming(parse_class)
                            .parse(payload)
                            .map(|(_, m)| AMQPFrame::Method(channel_id, m)),
                        AMQPFrameType::Header => all_consuming(parse_content_header)
                            .parse(payload)
                            .map(|(_, h)| AMQPFrame::Header(channel_id, h)),
                        AMQPFrameType::Body => Ok(AMQPFrame::Body(
                            channel_id,
                            payload.iter_elements().collect(),
                        )),
                        AMQPFrameType::Heartbeat => Ok(if channel_id == 0 {
                            AMQPFrame::Heartbeat
                        } else {
                            AMQPFrame::InvalidHeartbeat(channel_id)
                        }),
                    },
                )
                .parse(i),
            }
        }),
    )
    .parse(i)
}

/// Parse a raw AMQP frame
pub fn parse_raw_frame<I: ParsableInput>(
    frame_type: AMQPFrameType,
) -> impl FnMut(I) -> ParserResult<I, AMQPRawFrame<I>> {
    move |i: I| {
        context(
            "parse_raw_frame",
            flat_map((parse_id, parse_long_uint), move |(channel_id, size)| {
                map(
                    (take(size), tag(&[constants::FRAME_END][..])),
                    move |(payload, _)| AMQPRawFrame {
                        frame_type,
                        channel_id,
                        payload,
                    },
                )
            }),
        )
        .parse(i)
    }
}

/// Parse the payload of a content header frame (all of it).
///
/// Once its fixed part (class id, weight, body size) is read this parser cannot fail: properties
/// that cannot be decoded (invalid UTF-8, an unknown field type, tables nested too deep, a
/// truncated value, bytes left over) are replaced by default properties with one header,
/// [`UNDECODABLE_PROPERTIES_HEADER`], naming the problem. The frame is well formed and its body
/// can be read, so one bad message need not break the connection that carries it.
pub fn parse_content_header<I: ParsableInput>(i: I) -> ParserResult<I, AMQPContentHeader> {
    let (i, (class_id, _weight, body_size)) = context(
        "parse_content_header",
        // weight is always 0 per the spec and unused; accept any value for compatibility
        (parse_id, parse_short_uint, parse_long_long_uint),
    )
    .parse(i)?;
    let properties = match context("parse_properties", parse_properties).parse(i.clone()) {
        Ok((rest, properties)) if rest.input_len() == 0 => properties,
        Ok((rest, _)) => undecodable(format!(
            "{} unexpected bytes after the properties",
            rest.input_len()
        )),
        Err(nom::Err::Incomplete(_)) => undecodable(ParseCause::Truncated.to_string()),
        Err(nom::Err::Error(err) | nom::Err::Failure(err)) => undecodable(
            err.cause()
                .map_or_else(|| "malformed properties".to_string(), |c| c.to_string()),
        ),
    };
    let end = i.input_len();
    Ok((
        i.take_from(end),
        AMQPContentHeader {
            class_id,
            body_size,
            properties,
        },
    ))
}

/// Default properties marked with `problem`.
fn undecodable(problem: String) -> BasicProperties {
    let mut headers = FieldTable::default();
    headers.insert(
        UNDECODABLE_PROPERTIES_HEADER.into(),
        AMQPValue::LongString(problem.into()),
    );
    BasicProperties::default().with_headers(headers)
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn test_protocol_header() {
        assert_eq!(
            parse_frame(&[b'A', b'M', b'Q', b'P', 0, 0, 9, 1][..]),
            Ok((
                &[][..],
                AMQPFrame::ProtocolHeader(ProtocolVersion::amqp_0_9_1())
            ))
        );
    }

    #[test]
    fn test_heartbeat() {
        assert_eq!(
            parse_frame(&[8, 0, 0, 0, 0, 0, 0, 206][..]),
            Ok((&[][..], AMQPFrame::Heartbeat))
        );
        assert_eq!(
            parse_frame(&[8, 0, 1, 0, 0, 0, 0, 206][..]),
            Ok((&[][..], AMQPFrame::InvalidHeartbeat(1)))
        );
    }

    /// A content header frame payload: class 60, weight 0, body size 5, then `properties`.
    fn content_header(properties: &[u8]) -> Vec<u8> {
        let mut payload = vec![0, 60, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5];
        payload.extend_from_slice(properties);
        payload
    }

    fn problem(properties: &[u8]) -> String {
        let payload = content_header(properties);
        let (rest, header) = parse_content_header(&payload[..]).expect("decodes");
        assert!(rest.is_empty());
        assert_eq!((header.class_id, header.body_size), (60, 5));
        let headers = header.properties.headers().clone().expect("marked");
        assert_eq!(headers.inner().len(), 1);
        match headers.inner().get(UNDECODABLE_PROPERTIES_HEADER) {
            Some(AMQPValue::LongString(s)) => String::from_utf8_lossy(s.as_bytes()).into(),
            other => panic!("no marker: {other:?}"),
        }
    }

    #[test]
    fn test_content_header_with_undecodable_properties() {
        // message-id (flag bit 7) that is not UTF-8
        assert_eq!(
            problem(&[0x00, 0x80, 2, 0xc3, 0x28]),
            "invalid UTF-8 in a short string"
        );
        // headers (flag bit 13) with a key that is not UTF-8
        assert_eq!(
            problem(&[0x20, 0x00, 0, 0, 0, 3, 1, 0xff, b'V']),
            "invalid UTF-8 in a short string"
        );
        // headers with an unknown field type
        assert_eq!(
            problem(&[0x20, 0x00, 0, 0, 0, 3, 1, b'k', b'Z']),
            "unknown field type 'Z'"
        );
        // headers with arrays nested 1,500 deep
        let mut deep = vec![0x20, 0x00];
        let depth = 1500u32;
        deep.extend_from_slice(&(2 + 5 * depth).to_be_bytes());
        deep.extend_from_slice(&[1, b'k']);
        for level in (1..=depth).rev() {
            deep.push(b'A');
            deep.extend_from_slice(&(5 * (level - 1)).to_be_bytes());
        }
        assert_eq!(problem(&deep), "field tables nested deeper than 64 levels");
        // content-type (flag bit 15) running past the end
        assert_eq!(
            problem(&[0x80, 0x00, 9, b'a']),
            "a value runs past the end of its table or frame"
        );
        // bytes after the last property
        assert_eq!(
            problem(&[0x00, 0x00, 1, 2]),
            "2 unexpected bytes after the properties"
        );
    }

    #[test]
    fn test_undecodable_header_frame_still_frames() {
        let payload = content_header(&[0x00, 0x80, 1, 0xff]);
        let mut frame = vec![constants::FRAME_HEADER, 0, 1];
        frame.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        frame.extend_from_slice(&payload);
        frame.push(constants::FRAME_END);
        frame.extend_from_slice(&[8, 0, 0, 0, 0, 0, 0, 206]);
        let (rest, parsed) = parse_frame(&frame[..]).expect("decodes");
        assert!(matches!(parsed, AMQPFrame::Header(1, _)));
        assert_eq!(parse_frame(rest), Ok((&[][..], AMQPFrame::Heartbeat)));
        // A well-formed header is untouched.
        let good = content_header(&[0x00, 0x80, 2, b'i', b'd']);
        let (_, header) = parse_content_header(&good[..]).expect("decodes");
        assert_eq!(
            header.properties.message_id().as_ref().map(|s| s.as_str()),
            Some("id")
        );
        assert_eq!(header.properties.headers(), &None);
    }

    #[test]
    fn test_parse_declare_queue_frame() {
        let frame = AMQPFrame::Method(
            1,
            AMQPClass::Queue(queue::AMQPMethod::Declare(queue::Declare {
                queue: "some_queue".into(),
                passive: true,
                durable: true,
                exclusive: true,
                auto_delete: true,
                nowait: true,
                arguments: Default::default(),
            })),
        );

        let mut buffer = vec![0u8; 30];

        assert!(gen_frame(&frame)(buffer.as_mut_slice().into()).is_ok());
        assert_eq!(parse_frame(buffer.as_slice()), Ok((&[][..], frame)));
    }
}
