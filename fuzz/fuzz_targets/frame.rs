//! Any bytes as a frame, and as a content header's payload: an error value or a decoded frame,
//! never a panic or a stack overflow; a content header whose fixed part (class id, weight, body
//! size: 12 bytes) is there always decodes, consuming the whole payload.

#![no_main]

use amq_protocol::frame::parsing::{parse_content_header, parse_frame};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = parse_frame(data);
    if data.len() >= 12 {
        match parse_content_header(data) {
            Ok((rest, _)) => assert!(rest.is_empty(), "bytes left after a content header"),
            Err(err) => panic!("a content header did not decode: {err:?}"),
        }
    }
});
