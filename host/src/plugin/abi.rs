//! ABI v1: the check a module must pass to load, and the `worker_v1` imports
//! with every guest pointer and length checked.

use std::borrow::Cow;
use std::ops::Range;

use wasmtime::{Caller, Extern, ExternType, FuncType, Linker, Module, ModuleExport};
use worker_abi::export::{self, ExportKind};
use worker_abi::{
    ABI_MODULE, PUBLISH_ACCEPTED, PublishRefusal, Signature, ValType, WASI_MODULE, import, limits,
    meta,
};

use super::error::{GuestFault, LoadError};
use super::pending::{Refused, delay_of};
use super::state::{State, bounded_text};
use super::{LogLevel, LogSource, Meta, Publish};

/// Whether a function type is exactly `sig`.
fn has_signature(ty: &FuncType, sig: &Signature) -> bool {
    fn same(all: impl ExactSizeIterator<Item = wasmtime::ValType>, want: &[ValType]) -> bool {
        all.len() == want.len()
            && all.zip(want).all(|(have, want)| match want {
                ValType::I32 => matches!(have, wasmtime::ValType::I32),
                ValType::I64 => matches!(have, wasmtime::ValType::I64),
            })
    }
    same(ty.params(), sig.params) && same(ty.results(), sig.results)
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
    for imported in module.imports() {
        let bad = |reason: String| LoadError::BadImport {
            file: file.to_string(),
            module: imported.module().to_string(),
            name: imported.name().to_string(),
            reason,
        };
        match imported.module() {
            ABI_MODULE => {
                let Some(known) = import::find(imported.name()) else {
                    let names: Vec<&str> = import::ALL.iter().map(|i| i.name).collect();
                    return Err(bad(format!(
                        "{ABI_MODULE} has no such function (it has {})",
                        names.join(", ")
                    )));
                };
                match imported.ty() {
                    ExternType::Func(f) if has_signature(&f, &known.signature) => {}
                    other => {
                        return Err(bad(format!(
                            "it is {}, expected a function {}",
                            describe(&other),
                            known.signature
                        )));
                    }
                }
            }
            WASI_MODULE => {
                if !matches!(imported.ty(), ExternType::Func(_)) {
                    return Err(bad(format!(
                        "it is {}, expected a function",
                        describe(&imported.ty())
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

    let (handle, memory) = check_exports(file, module)?;
    Ok(Checked {
        handle,
        memory,
        uses_wasi,
    })
}

/// Checks every required export; returns those of the handler and the memory.
fn check_exports(file: &str, module: &Module) -> Result<(ModuleExport, ModuleExport), LoadError> {
    let missing = |name: &'static str| LoadError::MissingExport {
        file: file.to_string(),
        export: name,
        expected: export::find(name)
            .map(|e| e.kind.to_string())
            .unwrap_or_default(),
    };
    for want in export::ALL {
        let ty = module
            .get_export(want.name)
            .ok_or_else(|| missing(want.name))?;
        let found = match (&want.kind, &ty) {
            (ExportKind::Func(sig), ExternType::Func(f)) if has_signature(f, sig) => continue,
            (ExportKind::Memory, ExternType::Memory(m)) if !m.is_64() && !m.is_shared() => continue,
            (ExportKind::Memory, ExternType::Memory(_)) => "a 64-bit or shared memory".into(),
            (_, other) => describe(other),
        };
        return Err(LoadError::BadExport {
            file: file.to_string(),
            export: want.name,
            found,
            expected: want.kind.to_string(),
        });
    }
    let index = |name| module.get_export_index(name).ok_or_else(|| missing(name));
    Ok((index(export::HANDLE)?, index(export::MEMORY)?))
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
                .get_export(export::MEMORY)
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

fn meta_value<'m>(delivery: &'m Meta, key: &[u8]) -> Option<Cow<'m, str>> {
    let key = std::str::from_utf8(key).ok()?;
    if let Some(name) = key.strip_prefix(meta::HEADER_PREFIX) {
        return delivery
            .headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| Cow::Borrowed(v.as_str()));
    }
    let borrowed = |s: &'m String| Some(Cow::Borrowed(s.as_str()));
    match key {
        meta::ROUTING_KEY => borrowed(&delivery.routing_key),
        meta::ORIGINAL_ROUTING_KEY => borrowed(&delivery.original_routing_key),
        meta::EXCHANGE => borrowed(&delivery.exchange),
        meta::QUEUE => borrowed(&delivery.queue),
        meta::MESSAGE_ID => delivery.message_id.as_ref().and_then(borrowed),
        meta::CORRELATION_ID => delivery.correlation_id.as_ref().and_then(borrowed),
        meta::CONTENT_TYPE => delivery.content_type.as_ref().and_then(borrowed),
        meta::TIMESTAMP => delivery.timestamp.map(|t| Cow::Owned(t.to_string())),
        meta::ATTEMPT => Some(Cow::Owned(delivery.attempt.to_string())),
        meta::REDELIVERED => Some(Cow::Borrowed(if delivery.redelivered {
            meta::TRUE
        } else {
            meta::FALSE
        })),
        _ => None,
    }
}

/// Adds every import of `worker_v1` to `linker`.
pub(crate) fn add_to_linker(linker: &mut Linker<State>) -> wasmtime::Result<()> {
    add_reading(linker)?;
    add_reporting(linker)?;
    add_publishing(linker)
}

/// `body_len`, `body_read`, `meta_get`, `config_get`: the plugin reads its input, copied into
/// buffers it owns, so the host never hands out a pointer into its own memory.
fn add_reading(linker: &mut Linker<State>) -> wasmtime::Result<()> {
    linker.func_wrap(
        ABI_MODULE,
        import::BODY_LEN,
        |caller: Caller<'_, State>| -> i32 { len_i32(caller.data().input.body.len()) },
    )?;

    linker.func_wrap(
        ABI_MODULE,
        import::BODY_READ,
        |mut caller: Caller<'_, State>, ptr: i32, len: i32| -> wasmtime::Result<i32> {
            let (mem, st) = guest(&mut caller, import::BODY_READ)?;
            let buf = span(mem.len(), import::BODY_READ, "buffer", ptr, len)?;
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
        import::META_GET,
        |mut caller: Caller<'_, State>,
         key_ptr: i32,
         key_len: i32,
         buf_ptr: i32,
         buf_cap: i32|
         -> wasmtime::Result<i32> {
            let (mem, st) = guest(&mut caller, import::META_GET)?;
            let key = span(mem.len(), import::META_GET, "key", key_ptr, key_len)?;
            let buf = span(mem.len(), import::META_GET, "buffer", buf_ptr, buf_cap)?;
            match meta_value(&st.input.meta, &mem[key]) {
                Some(value) => Ok(write_if_fits(mem, buf, value.as_bytes())),
                None => Ok(meta::ABSENT),
            }
        },
    )?;

    linker.func_wrap(
        ABI_MODULE,
        import::CONFIG_GET,
        |mut caller: Caller<'_, State>, buf_ptr: i32, buf_cap: i32| -> wasmtime::Result<i32> {
            let (mem, st) = guest(&mut caller, import::CONFIG_GET)?;
            let buf = span(mem.len(), import::CONFIG_GET, "buffer", buf_ptr, buf_cap)?;
            Ok(write_if_fits(mem, buf, st.input.config_json.as_bytes()))
        },
    )?;
    Ok(())
}

/// `log` and `set_reason`: what the plugin says about a message, cut to the host's bounds, as a
/// plugin may say as much as it likes.
fn add_reporting(linker: &mut Linker<State>) -> wasmtime::Result<()> {
    linker.func_wrap(
        ABI_MODULE,
        import::LOG,
        |mut caller: Caller<'_, State>, level: i32, ptr: i32, len: i32| -> wasmtime::Result<()> {
            let (mem, st) = guest(&mut caller, import::LOG)?;
            let text = span(mem.len(), import::LOG, "message", ptr, len)?;
            st.logs
                .push(LogLevel::from_abi(level), LogSource::Log, &mem[text]);
            Ok(())
        },
    )?;

    linker.func_wrap(
        ABI_MODULE,
        import::SET_REASON,
        |mut caller: Caller<'_, State>, ptr: i32, len: i32| -> wasmtime::Result<()> {
            let (mem, st) = guest(&mut caller, import::SET_REASON)?;
            let text = span(mem.len(), import::SET_REASON, "reason", ptr, len)?;
            // One line: it goes into the `worker-error` header.
            let reason: String = bounded_text(&mem[text], limits::MAX_REASON)
                .chars()
                .map(|c| if c.is_control() { ' ' } else { c })
                .collect();
            st.reason = Some(reason);
            Ok(())
        },
    )?;
    Ok(())
}

/// `publish`: buffered, not sent, so the publishes go out only if the message is settled ok.
fn add_publishing(linker: &mut Linker<State>) -> wasmtime::Result<()> {
    linker.func_wrap(
        ABI_MODULE,
        import::PUBLISH,
        |mut caller: Caller<'_, State>,
         ex_ptr: i32,
         ex_len: i32,
         key_ptr: i32,
         key_len: i32,
         body_ptr: i32,
         body_len: i32,
         delay_ms: i64|
         -> wasmtime::Result<i32> {
            let (mem, st) = guest(&mut caller, import::PUBLISH)?;
            let ex = span(mem.len(), import::PUBLISH, "exchange", ex_ptr, ex_len)?;
            let key = span(mem.len(), import::PUBLISH, "routing key", key_ptr, key_len)?;
            let body = span(mem.len(), import::PUBLISH, "body", body_ptr, body_len)?;
            Ok(publish(st, &mem[ex], &mem[key], &mem[body], delay_ms))
        },
    )?;
    Ok(())
}

/// Buffers one publish if the policy allows it; returns the ABI code.
fn publish(st: &mut State, exchange: &[u8], key: &[u8], body: &[u8], delay_ms: i64) -> i32 {
    let (Ok(exchange), Ok(key)) = (std::str::from_utf8(exchange), std::str::from_utf8(key)) else {
        return refuse(
            st,
            "?",
            PublishRefusal::Invalid,
            "exchange or routing key is not UTF-8",
        );
    };
    let delay = match delay_of(delay_ms) {
        Ok(delay) => delay,
        Err(Refused { refusal, why }) => return refuse(st, exchange, refusal, &why),
    };
    let publish = Publish {
        exchange: exchange.to_string(),
        routing_key: key.to_string(),
        body: body.to_vec(),
        delay,
        content_type: None,
        headers: Vec::new(),
    };
    let input = st.input.clone();
    match st.pending.push(&input.publish, publish) {
        Ok(()) => PUBLISH_ACCEPTED,
        Err(Refused { refusal, why }) => refuse(st, exchange, refusal, &why),
    }
}

fn refuse(st: &mut State, exchange: &str, refusal: PublishRefusal, why: &str) -> i32 {
    let code = refusal.code();
    let msg = format!("publish to `{exchange}` refused ({code}): {why}");
    st.logs
        .push(LogLevel::Warn, LogSource::Host, msg.as_bytes());
    code
}
