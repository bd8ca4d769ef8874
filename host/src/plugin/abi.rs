//! ABI v1: the check a module must pass to load, and the `worker_v1` imports
//! with every guest pointer and length checked.

use std::borrow::Cow;
use std::ops::Range;
use std::time::Duration;

use wasmtime::{Caller, Extern, ExternType, FuncType, Linker, Module, ModuleExport};

use super::error::{GuestFault, LoadError};
use super::state::{MAX_REASON, State, bounded_text};
use super::{LogLevel, LogSource, Meta, Publish};

pub(crate) const ABI_MODULE: &str = "worker_v1";
pub(crate) const WASI_MODULE: &str = "wasi_snapshot_preview1";

/// `publish` return codes.
pub mod publish_code {
    pub const ACCEPTED: i32 = 0;
    pub const EXCHANGE_NOT_ALLOWED: i32 = -1;
    pub const DELAY_REFUSED: i32 = -2;
    pub const TOO_MANY_MESSAGES: i32 = -3;
    pub const TOO_MANY_BYTES: i32 = -4;
    pub const INVALID: i32 = -5;
}

#[derive(Clone, Copy)]
enum V {
    I32,
    I64,
}

use V::{I32, I64};

/// Every import of `worker_v1`: name, params, results.
const IMPORTS: &[(&str, &[V], &[V])] = &[
    ("body_len", &[], &[I32]),
    ("body_read", &[I32, I32], &[I32]),
    ("meta_get", &[I32, I32, I32, I32], &[I32]),
    ("config_get", &[I32, I32], &[I32]),
    ("log", &[I32, I32, I32], &[]),
    ("set_reason", &[I32, I32], &[]),
    ("publish", &[I32, I32, I32, I32, I32, I32, I64], &[I32]),
];

fn expected_sig(params: &[V], results: &[V]) -> String {
    let name = |v: &V| match v {
        I32 => "i32",
        I64 => "i64",
    };
    let p: Vec<&str> = params.iter().map(name).collect();
    let r: Vec<&str> = results.iter().map(name).collect();
    format!("({}) -> ({})", p.join(", "), r.join(", "))
}

fn actual_sig(ty: &FuncType) -> String {
    let p: Vec<String> = ty.params().map(|v| v.to_string()).collect();
    let r: Vec<String> = ty.results().map(|v| v.to_string()).collect();
    format!("({}) -> ({})", p.join(", "), r.join(", "))
}

fn describe(ty: &ExternType) -> String {
    match ty {
        ExternType::Func(f) => format!("a function {}", actual_sig(f)),
        ExternType::Memory(_) => "a memory".into(),
        ExternType::Table(_) => "a table".into(),
        ExternType::Global(_) => "a global".into(),
        ExternType::Tag(_) => "a tag".into(),
    }
}

/// What `check_module` learned about a module that passed.
pub(crate) struct Checked {
    pub handle: ModuleExport,
    pub memory: ModuleExport,
    pub uses_wasi: bool,
}

/// Checks a compiled module against ABI v1.
pub(crate) fn check_module(file: &str, module: &Module) -> Result<Checked, LoadError> {
    let mut uses_wasi = false;
    for import in module.imports() {
        let bad = |reason: String| LoadError::BadImport {
            file: file.to_string(),
            module: import.module().to_string(),
            name: import.name().to_string(),
            reason,
        };
        match import.module() {
            ABI_MODULE => {
                let Some((_, params, results)) =
                    IMPORTS.iter().find(|(n, _, _)| *n == import.name())
                else {
                    let known: Vec<&str> = IMPORTS.iter().map(|(n, _, _)| *n).collect();
                    return Err(bad(format!(
                        "worker_v1 has no such function (it has {})",
                        known.join(", ")
                    )));
                };
                let want = expected_sig(params, results);
                match import.ty() {
                    ExternType::Func(f) if actual_sig(&f) == want => {}
                    other => {
                        return Err(bad(format!(
                            "it is {}, expected a function {want}",
                            describe(&other)
                        )));
                    }
                }
            }
            WASI_MODULE => {
                if !matches!(import.ty(), ExternType::Func(_)) {
                    return Err(bad(format!(
                        "it is {}, expected a function",
                        describe(&import.ty())
                    )));
                }
                uses_wasi = true;
            }
            _ => {
                return Err(bad(format!(
                    "only `{ABI_MODULE}` and `{WASI_MODULE}` can be imported"
                )));
            }
        }
    }

    let export = |name: &'static str, expected: &'static str| {
        let ty = module
            .get_export(name)
            .ok_or_else(|| LoadError::MissingExport {
                file: file.to_string(),
                export: name,
                expected,
            })?;
        let index = module
            .get_export_index(name)
            .ok_or_else(|| LoadError::MissingExport {
                file: file.to_string(),
                export: name,
                expected,
            })?;
        let bad = move |found: String| LoadError::BadExport {
            file: file.to_string(),
            export: name,
            found,
            expected,
        };
        Ok::<_, LoadError>((ty, index, bad))
    };

    let (ty, _, bad) = export("worker_abi_v1", "a function () -> ()")?;
    match &ty {
        ExternType::Func(f) if actual_sig(f) == "() -> ()" => {}
        other => return Err(bad(describe(other))),
    }
    let (ty, handle, bad) = export("worker_handle", "a function () -> (i32)")?;
    match &ty {
        ExternType::Func(f) if actual_sig(f) == "() -> (i32)" => {}
        other => return Err(bad(describe(other))),
    }
    let (ty, memory, bad) = export("memory", "a 32-bit memory")?;
    match &ty {
        ExternType::Memory(m) if !m.is_64() && !m.is_shared() => {}
        ExternType::Memory(_) => return Err(bad("a 64-bit or shared memory".into())),
        other => return Err(bad(describe(other))),
    }
    Ok(Checked {
        handle,
        memory,
        uses_wasi,
    })
}

fn fault(import: &'static str, cause: impl Into<String>) -> wasmtime::Error {
    wasmtime::Error::new(GuestFault {
        import,
        cause: cause.into(),
    })
}

/// The guest's memory and the store data, borrowed together.
fn guest<'a>(
    caller: &'a mut Caller<'_, State>,
    import: &'static str,
) -> wasmtime::Result<(&'a mut [u8], &'a mut State)> {
    let memory = match caller.data().memory {
        Some(m) => m,
        None => {
            // Only reached from a start function, before `handle` stored it.
            let m = caller
                .get_export("memory")
                .and_then(Extern::into_memory)
                .ok_or_else(|| fault(import, "the module exports no memory"))?;
            caller.data_mut().memory = Some(m);
            m
        }
    };
    Ok(memory.data_and_store_mut(caller))
}

/// The byte range `ptr .. ptr + len` if it lies inside guest memory.
fn span(
    mem_len: usize,
    import: &'static str,
    what: &str,
    ptr: i32,
    len: i32,
) -> wasmtime::Result<Range<usize>> {
    if len < 0 {
        return Err(fault(import, format!("negative {what} length {len}")));
    }
    // Guest pointers are unsigned 32-bit offsets.
    let start = ptr as u32 as usize;
    match start.checked_add(len as usize) {
        Some(end) if end <= mem_len => Ok(start..end),
        _ => Err(fault(
            import,
            format!(
                "{what} at {:#x} with length {len} is outside guest memory ({mem_len} bytes)",
                ptr as u32
            ),
        )),
    }
}

fn len_i32(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// Writes `value` into `buf` if it fits; returns its length (the ABI's rule
/// for `meta_get` and `config_get`).
fn write_if_fits(mem: &mut [u8], buf: Range<usize>, value: &[u8]) -> i32 {
    if value.len() <= buf.len() {
        mem[buf.start..buf.start + value.len()].copy_from_slice(value);
    }
    len_i32(value.len())
}

fn meta_value<'m>(meta: &'m Meta, key: &[u8]) -> Option<Cow<'m, str>> {
    let key = std::str::from_utf8(key).ok()?;
    if let Some(name) = key.strip_prefix("header:") {
        return meta
            .headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| Cow::Borrowed(v.as_str()));
    }
    let borrowed = |s: &'m String| Some(Cow::Borrowed(s.as_str()));
    match key {
        "routing-key" => borrowed(&meta.routing_key),
        "original-routing-key" => borrowed(&meta.original_routing_key),
        "exchange" => borrowed(&meta.exchange),
        "queue" => borrowed(&meta.queue),
        "message-id" => meta.message_id.as_ref().and_then(borrowed),
        "correlation-id" => meta.correlation_id.as_ref().and_then(borrowed),
        "content-type" => meta.content_type.as_ref().and_then(borrowed),
        "timestamp" => meta.timestamp.map(|t| Cow::Owned(t.to_string())),
        "attempt" => Some(Cow::Owned(meta.attempt.to_string())),
        "redelivered" => Some(Cow::Borrowed(if meta.redelivered {
            "true"
        } else {
            "false"
        })),
        _ => None,
    }
}

/// Adds every `worker_v1` import to `linker`.
pub(crate) fn add_to_linker(linker: &mut Linker<State>) -> wasmtime::Result<()> {
    linker.func_wrap(ABI_MODULE, "body_len", |caller: Caller<'_, State>| -> i32 {
        len_i32(caller.data().input.body.len())
    })?;

    linker.func_wrap(
        ABI_MODULE,
        "body_read",
        |mut caller: Caller<'_, State>, ptr: i32, len: i32| -> wasmtime::Result<i32> {
            let (mem, st) = guest(&mut caller, "body_read")?;
            let buf = span(mem.len(), "body_read", "buffer", ptr, len)?;
            let body = &st.input.body;
            let rest = &body[st.body_pos.min(body.len())..];
            let n = rest.len().min(buf.len());
            mem[buf.start..buf.start + n].copy_from_slice(&rest[..n]);
            st.body_pos += n;
            Ok(len_i32(n))
        },
    )?;

    linker.func_wrap(
        ABI_MODULE,
        "meta_get",
        |mut caller: Caller<'_, State>,
         key_ptr: i32,
         key_len: i32,
         buf_ptr: i32,
         buf_cap: i32|
         -> wasmtime::Result<i32> {
            let (mem, st) = guest(&mut caller, "meta_get")?;
            let key = span(mem.len(), "meta_get", "key", key_ptr, key_len)?;
            let buf = span(mem.len(), "meta_get", "buffer", buf_ptr, buf_cap)?;
            match meta_value(&st.input.meta, &mem[key]) {
                Some(value) => Ok(write_if_fits(mem, buf, value.as_bytes())),
                None => Ok(-1),
            }
        },
    )?;

    linker.func_wrap(
        ABI_MODULE,
        "config_get",
        |mut caller: Caller<'_, State>, buf_ptr: i32, buf_cap: i32| -> wasmtime::Result<i32> {
            let (mem, st) = guest(&mut caller, "config_get")?;
            let buf = span(mem.len(), "config_get", "buffer", buf_ptr, buf_cap)?;
            Ok(write_if_fits(mem, buf, st.input.config_json.as_bytes()))
        },
    )?;

    linker.func_wrap(
        ABI_MODULE,
        "log",
        |mut caller: Caller<'_, State>, level: i32, ptr: i32, len: i32| -> wasmtime::Result<()> {
            let (mem, st) = guest(&mut caller, "log")?;
            let text = span(mem.len(), "log", "message", ptr, len)?;
            st.logs
                .push(LogLevel::from_abi(level), LogSource::Log, &mem[text]);
            Ok(())
        },
    )?;

    linker.func_wrap(
        ABI_MODULE,
        "set_reason",
        |mut caller: Caller<'_, State>, ptr: i32, len: i32| -> wasmtime::Result<()> {
            let (mem, st) = guest(&mut caller, "set_reason")?;
            let text = span(mem.len(), "set_reason", "reason", ptr, len)?;
            // One line: it goes into the `worker-error` header.
            let reason: String = bounded_text(&mem[text], MAX_REASON)
                .chars()
                .map(|c| if c.is_control() { ' ' } else { c })
                .collect();
            st.reason = Some(reason);
            Ok(())
        },
    )?;

    linker.func_wrap(
        ABI_MODULE,
        "publish",
        |mut caller: Caller<'_, State>,
         ex_ptr: i32,
         ex_len: i32,
         key_ptr: i32,
         key_len: i32,
         body_ptr: i32,
         body_len: i32,
         delay_ms: i64|
         -> wasmtime::Result<i32> {
            let (mem, st) = guest(&mut caller, "publish")?;
            let ex = span(mem.len(), "publish", "exchange", ex_ptr, ex_len)?;
            let key = span(mem.len(), "publish", "routing key", key_ptr, key_len)?;
            let body = span(mem.len(), "publish", "body", body_ptr, body_len)?;
            Ok(publish(st, &mem[ex], &mem[key], &mem[body], delay_ms))
        },
    )?;
    Ok(())
}

/// Buffers one publish if the policy allows it; returns the ABI code.
fn publish(st: &mut State, exchange: &[u8], key: &[u8], body: &[u8], delay_ms: i64) -> i32 {
    use publish_code::*;
    let policy = &st.input.publish;
    let (Ok(exchange), Ok(key)) = (std::str::from_utf8(exchange), std::str::from_utf8(key)) else {
        return refuse(st, "?", INVALID, "exchange or routing key is not UTF-8");
    };
    if exchange.len() > 255 || key.len() > 255 {
        return refuse(
            st,
            exchange,
            INVALID,
            "exchange or routing key longer than 255 bytes",
        );
    }
    if !policy.allowed_exchanges.iter().any(|e| e == exchange) {
        return refuse(
            st,
            exchange,
            EXCHANGE_NOT_ALLOWED,
            "exchange not in this subscription's `publish` list",
        );
    }
    let delay = match delay_ms {
        0 => None,
        d if d < 0 => return refuse(st, exchange, DELAY_REFUSED, "negative delay"),
        d => {
            let d = Duration::from_millis(d as u64);
            match policy.max_delay {
                None => {
                    return refuse(
                        st,
                        exchange,
                        DELAY_REFUSED,
                        "delayed delivery is not enabled",
                    );
                }
                Some(max) if d > max => {
                    return refuse(st, exchange, DELAY_REFUSED, "delay longer than the maximum");
                }
                Some(_) => Some(d),
            }
        }
    };
    if st.publishes.len() >= policy.max_messages {
        return refuse(
            st,
            exchange,
            TOO_MANY_MESSAGES,
            "too many messages for one call",
        );
    }
    let bytes = key.len() + body.len();
    if st.publish_bytes + bytes > policy.max_total_bytes {
        return refuse(st, exchange, TOO_MANY_BYTES, "too many bytes for one call");
    }
    st.publish_bytes += bytes;
    st.publishes.push(Publish {
        exchange: exchange.to_string(),
        routing_key: key.to_string(),
        body: body.to_vec(),
        delay,
    });
    ACCEPTED
}

fn refuse(st: &mut State, exchange: &str, code: i32, why: &str) -> i32 {
    let msg = format!("publish to `{exchange}` refused ({code}): {why}");
    st.logs
        .push(LogLevel::Warn, LogSource::Host, msg.as_bytes());
    code
}
