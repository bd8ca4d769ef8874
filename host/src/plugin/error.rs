//! Errors of loading a plugin version and of one handler call, and the
//! classification of wasmtime errors into them.

use std::fmt;
use std::time::Duration;

use worker_abi::{ABI_MODULE, Answer, export};

/// Why a plugin file could not be loaded. Every message names the file.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{file}: cannot read: {error}")]
    Io { file: String, error: std::io::Error },
    #[error("{file}: not a WebAssembly module (the file does not start with \\0asm)")]
    NotWasm { file: String },
    #[error("{file}: not a regular file")]
    NotAFile { file: String },
    /// Sizes as `human_size` writes them.
    #[error("{file}: the file is {size}, larger than max_plugin_size ({limit}); it was not read")]
    TooLarge {
        file: String,
        size: String,
        limit: String,
    },
    #[error("{file}: not a component of the world worker:plugin/handler@2.0.0: {reason}")]
    WrongWorld { file: String, reason: String },
    #[error("{file}: needs more than the instance pool gives one plugin instance: {reason}")]
    TooBigForPool { file: String, reason: String },
    #[error("{file}: does not compile: {reason}")]
    Compile { file: String, reason: String },
    #[error("{file}: missing export `{export}` ({expected}); is it built for worker ABI v1?")]
    MissingExport {
        file: String,
        export: &'static str,
        expected: String,
    },
    #[error("{file}: export `{export}` is {found}, expected {expected}")]
    BadExport {
        file: String,
        export: &'static str,
        found: String,
        expected: String,
    },
    #[error("{file}: import `{module}.{name}` is not allowed: {reason}")]
    BadImport {
        file: String,
        module: String,
        name: String,
        reason: String,
    },
    #[error("{file}: cannot link: {reason}")]
    Link { file: String, reason: String },
}

/// Why a handler call produced no answer. The caller turns every variant into
/// a retry; `Display` is the one-line cause written to `worker-error`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandlerError {
    #[error("trap: {kind}{}", in_func(.func))]
    Trap {
        kind: TrapKind,
        func: Option<String>,
    },
    #[error("timeout: handler still running after {}", humantime::format_duration(*.0))]
    Timeout(Duration),
    #[error("memory limit: plugin tried to grow its memory past {limit} bytes")]
    MemoryLimit { limit: u64 },
    #[error("table limit: plugin tried to grow a table past {limit} elements")]
    TableLimit { limit: u32 },
    #[error("bad answer: {handle} returned {0} (expected {answers})", handle = export::HANDLE, answers = Answer::list())]
    BadAnswer(i32),
    #[error("bad import call: {0}")]
    BadImportCall(String),
    #[error("plugin exited with code {0} instead of answering")]
    Exit(i32),
    #[error("cannot instantiate: {0}")]
    Instantiate(String),
    /// The handler answered ok but its SQL transaction could not be committed.
    #[error("cannot commit: {0}")]
    Commit(String),
}

fn in_func(func: &Option<String>) -> String {
    match func {
        Some(f) => format!(" in `{f}`"),
        None => String::new(),
    }
}

/// The kind of a WebAssembly trap, short enough for a metric label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TrapKind {
    Unreachable,
    OutOfBounds,
    StackOverflow,
    DivisionByZero,
    IntegerOverflow,
    BadConversion,
    TableOutOfBounds,
    IndirectCallToNull,
    BadSignature,
    NullReference,
    Other(String),
}

impl TrapKind {
    pub fn as_str(&self) -> &str {
        match self {
            TrapKind::Unreachable => "unreachable",
            TrapKind::OutOfBounds => "out of bounds memory access",
            TrapKind::StackOverflow => "stack overflow",
            TrapKind::DivisionByZero => "integer divide by zero",
            TrapKind::IntegerOverflow => "integer overflow",
            TrapKind::BadConversion => "invalid conversion to integer",
            TrapKind::TableOutOfBounds => "out of bounds table access",
            TrapKind::IndirectCallToNull => "call of a null table element",
            TrapKind::BadSignature => "indirect call type mismatch",
            TrapKind::NullReference => "null reference",
            TrapKind::Other(s) => s,
        }
    }

    fn from_trap(trap: &wasmtime::Trap) -> TrapKind {
        use wasmtime::Trap as T;
        match trap {
            T::UnreachableCodeReached => TrapKind::Unreachable,
            T::MemoryOutOfBounds | T::HeapMisaligned => TrapKind::OutOfBounds,
            T::StackOverflow => TrapKind::StackOverflow,
            T::IntegerDivisionByZero => TrapKind::DivisionByZero,
            T::IntegerOverflow => TrapKind::IntegerOverflow,
            T::BadConversionToInteger => TrapKind::BadConversion,
            T::TableOutOfBounds => TrapKind::TableOutOfBounds,
            T::IndirectCallToNull => TrapKind::IndirectCallToNull,
            T::BadSignature => TrapKind::BadSignature,
            T::NullReference => TrapKind::NullReference,
            other => TrapKind::Other(other.to_string()),
        }
    }
}

impl fmt::Display for TrapKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Raised by the epoch callback once the wall-clock deadline has passed.
#[derive(Debug, thiserror::Error)]
#[error("deadline passed")]
pub(crate) struct DeadlineHit;

/// On every epoch tick: trap with [`DeadlineHit`] once `deadline(data)` has passed, else let
/// other tasks run on this worker and carry on.
pub(crate) fn stop_at_deadline<T: 'static>(
    store: &mut wasmtime::Store<T>,
    deadline: fn(&T) -> std::time::Instant,
) {
    store.epoch_deadline_callback(move |ctx| {
        if std::time::Instant::now() >= deadline(ctx.data()) {
            Err(wasmtime::Error::new(DeadlineHit))
        } else {
            Ok(wasmtime::UpdateDeadline::Yield(1))
        }
    });
}

/// Raised by the resource limiter when a memory would grow past the limit.
#[derive(Debug, thiserror::Error)]
#[error("memory limit of {0} bytes reached")]
pub(crate) struct MemoryLimitHit(pub u64);

/// Raised by the resource limiter when a table would grow past the cap.
#[derive(Debug, thiserror::Error)]
#[error("table limit of {0} elements reached")]
pub(crate) struct TableLimitHit(pub u32);

/// Raised by a host import when the guest passed a bad pointer, length or
/// argument. It traps the guest; the host carries on.
#[derive(Debug, thiserror::Error)]
#[error("{ABI_MODULE}.{import}: {cause}")]
pub(crate) struct GuestFault {
    pub import: &'static str,
    pub cause: String,
}

/// Turns a wasmtime error from instantiation or a call into a typed cause.
pub(crate) fn classify(
    err: &wasmtime::Error,
    timeout: Duration,
    instantiating: bool,
) -> HandlerError {
    if err.is::<DeadlineHit>() {
        return HandlerError::Timeout(timeout);
    }
    if let Some(hit) = err.downcast_ref::<MemoryLimitHit>() {
        return HandlerError::MemoryLimit { limit: hit.0 };
    }
    if let Some(hit) = err.downcast_ref::<TableLimitHit>() {
        return HandlerError::TableLimit { limit: hit.0 };
    }
    if let Some(fault) = err.downcast_ref::<GuestFault>() {
        return HandlerError::BadImportCall(one_line(&fault.to_string()));
    }
    if let Some(exit) = err.downcast_ref::<wasmtime_wasi::I32Exit>() {
        return HandlerError::Exit(exit.0);
    }
    if let Some(trap) = err.downcast_ref::<wasmtime::Trap>() {
        let func = err
            .downcast_ref::<wasmtime::WasmBacktrace>()
            .and_then(|bt| bt.frames().first())
            .and_then(|frame| frame.func_name())
            .map(one_line);
        return HandlerError::Trap {
            kind: TrapKind::from_trap(trap),
            func,
        };
    }
    let text = chain_text(err);
    if instantiating {
        HandlerError::Instantiate(text)
    } else {
        HandlerError::Trap {
            kind: TrapKind::Other(text),
            func: None,
        }
    }
}

/// The error and its causes on one line, `a: b: c`.
pub(crate) fn chain_text(err: &wasmtime::Error) -> String {
    let parts: Vec<String> = err.chain().map(|e| e.to_string()).collect();
    one_line(&parts.join(": "))
}

/// Keeps a message to one bounded line: it ends up in a message header.
pub(crate) fn one_line(s: &str) -> String {
    const MAX: usize = 400;
    let mut out: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if out.len() > MAX {
        let mut cut = MAX;
        while !out.is_char_boundary(cut) {
            cut -= 1;
        }
        out.truncate(cut);
        out.push('…');
    }
    out
}
