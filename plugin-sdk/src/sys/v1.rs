//! The ABI v1 backend: the `worker_v1` imports. The SDK's only hand-written `unsafe` lives here;
//! each call hands the host a pointer and length into a live Rust buffer, which is all the ABI asks
//! of the guest.

use crate::{Level, Outgoing, PublishError};

#[link(wasm_import_module = "worker_v1")]
unsafe extern "C" {
    fn body_len() -> i32;
    fn body_read(ptr: *mut u8, len: usize) -> i32;
    fn meta_get(key_ptr: *const u8, key_len: usize, buf_ptr: *mut u8, buf_cap: usize) -> i32;
    fn config_get(buf_ptr: *mut u8, buf_cap: usize) -> i32;
    #[link_name = "log"]
    fn log_raw(level: i32, ptr: *const u8, len: usize);
    #[link_name = "set_reason"]
    fn set_reason_raw(ptr: *const u8, len: usize);
    #[link_name = "publish"]
    fn publish_raw(
        ex_ptr: *const u8,
        ex_len: usize,
        key_ptr: *const u8,
        key_len: usize,
        body_ptr: *const u8,
        body_len: usize,
        delay_ms: i64,
    ) -> i32;
}

/// The whole message body.
pub(crate) fn body() -> Vec<u8> {
    // SAFETY: no arguments.
    let len = usize::try_from(unsafe { body_len() }).unwrap_or(0);
    let mut buf = vec![0u8; len];
    // One call: the ABI has no offset, so the host copies `min(len, body length)` from the start.
    // SAFETY: `buf` has room for `len` bytes.
    let n = unsafe { body_read(buf.as_mut_ptr(), len) };
    buf.truncate(usize::try_from(n).unwrap_or(0).min(len));
    buf
}

/// Calls a "length, or -1 if absent; writes only if it fits" import until the buffer is big enough.
fn read_sized(mut call: impl FnMut(*mut u8, usize) -> i32) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; 256];
    // Two rounds suffice (the second has exactly the announced size); a third guards against a
    // host whose answer changes between calls.
    for _ in 0..3 {
        let n = usize::try_from(call(buf.as_mut_ptr(), buf.len())).ok()?;
        if n <= buf.len() {
            buf.truncate(n);
            return Some(buf);
        }
        buf.resize(n, 0);
    }
    None
}

/// A `meta_get` value as text.
pub(crate) fn meta(key: &str) -> Option<String> {
    // SAFETY: `key` and the buffer handed in by `read_sized` are live for the call.
    let bytes = read_sized(|ptr, cap| unsafe { meta_get(key.as_ptr(), key.len(), ptr, cap) })?;
    Some(
        String::from_utf8(bytes)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()),
    )
}

/// The subscription's config as JSON bytes, if the host has any.
pub(crate) fn config() -> Option<Vec<u8>> {
    // SAFETY: the buffer handed in by `read_sized` is live for the call.
    read_sized(|ptr, cap| unsafe { config_get(ptr, cap) })
}

pub(crate) fn log(level: Level, message: &str) {
    // SAFETY: `message` is live for the call.
    unsafe { log_raw(level.code(), message.as_ptr(), message.len()) }
}

pub(crate) fn set_reason(reason: &str) {
    // SAFETY: `reason` is live for the call.
    unsafe { set_reason_raw(reason.as_ptr(), reason.len()) }
}

/// ABI v1 carries no content type or headers: only exchange, key, body and delay reach the host.
pub(crate) fn publish(out: &Outgoing) -> Result<(), PublishError> {
    let delay_ms = i64::try_from(out.delay_ms()).unwrap_or(i64::MAX);
    let (exchange, routing_key, body) = (&out.exchange, &out.routing_key, &out.body);
    // SAFETY: all three slices are live for the call.
    let code = unsafe {
        publish_raw(
            exchange.as_ptr(),
            exchange.len(),
            routing_key.as_ptr(),
            routing_key.len(),
            body.as_ptr(),
            body.len(),
            delay_ms,
        )
    };
    PublishError::from_code(code, exchange).map_or(Ok(()), Err)
}
