//! The host functions of module [`ABI_MODULE`](crate::ABI_MODULE). A plugin may import any subset;
//! a name or signature not listed here makes the host refuse the module.

use crate::signature::{Signature, ValType::I32, ValType::I64};

/// `() -> i32`: the length of the message body.
pub const BODY_LEN: &str = "body_len";
/// `(ptr, len) -> i32`: copies body bytes from the read position; returns how many.
pub const BODY_READ: &str = "body_read";
/// `(key_ptr, key_len, buf_ptr, buf_cap) -> i32`: a [`meta`](crate::meta) value's length, or
/// [`meta::ABSENT`](crate::meta::ABSENT); writes it only if it fits.
pub const META_GET: &str = "meta_get";
/// `(buf_ptr, buf_cap) -> i32`: the subscription's config as JSON; its length.
pub const CONFIG_GET: &str = "config_get";
/// `(level, ptr, len)`: one log line at a [`LogLevel`](crate::LogLevel) code.
pub const LOG: &str = "log";
/// `(ptr, len)`: the cause recorded with a retry or fail answer.
pub const SET_REASON: &str = "set_reason";
/// `(ex_ptr, ex_len, key_ptr, key_len, body_ptr, body_len, delay_ms: i64) -> i32`: buffers a
/// message; [`PUBLISH_ACCEPTED`](crate::PUBLISH_ACCEPTED) or a
/// [`PublishRefusal`](crate::PublishRefusal) code.
pub const PUBLISH: &str = "publish";

/// One host function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Import {
    /// Its name in module [`ABI_MODULE`](crate::ABI_MODULE).
    pub name: &'static str,
    /// Its type.
    pub signature: Signature,
}

const fn import(
    name: &'static str,
    params: &'static [crate::ValType],
    results: &'static [crate::ValType],
) -> Import {
    Import {
        name,
        signature: Signature { params, results },
    }
}

/// Every host function of ABI v1.
pub const ALL: &[Import] = &[
    import(BODY_LEN, &[], &[I32]),
    import(BODY_READ, &[I32, I32], &[I32]),
    import(META_GET, &[I32, I32, I32, I32], &[I32]),
    import(CONFIG_GET, &[I32, I32], &[I32]),
    import(LOG, &[I32, I32, I32], &[]),
    import(SET_REASON, &[I32, I32], &[]),
    import(PUBLISH, &[I32, I32, I32, I32, I32, I32, I64], &[I32]),
];

/// The host function called `name`.
pub fn find(name: &str) -> Option<&'static Import> {
    ALL.iter().find(|i| i.name == name)
}
