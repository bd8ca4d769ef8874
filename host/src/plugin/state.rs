//! The per-message store data: the input, what the guest produced so far
//! (reason, publishes, logs) and the resource limiter.

use std::sync::Arc;
use std::time::Instant;

use wasmtime::{Memory, ResourceLimiter};
use worker_abi::limits::{
    MAX_INSTANCES, MAX_LOG_BYTES, MAX_LOG_LINE, MAX_LOG_LINES, MAX_MEMORIES, MAX_TABLE_ELEMENTS,
    MAX_TABLES,
};

use super::error::{MemoryLimitHit, TableLimitHit};
use super::pending::Pending;
use super::wasi::WasiState;
use super::{Input, LogLevel, LogLine, LogSource};

pub(crate) struct State {
    pub input: Arc<Input>,
    /// The guest's exported memory, set after instantiation (or on first use
    /// when a start function calls an import).
    pub memory: Option<Memory>,
    /// Read position of `body_read`.
    pub body_pos: usize,
    pub reason: Option<String>,
    pub pending: Pending,
    pub logs: LogBuffer,
    pub limiter: Limiter,
    pub deadline: Instant,
    /// Built on the first WASI call, only for modules importing WASI.
    pub wasi: Option<WasiState>,
}

impl State {
    pub(crate) fn new(input: Arc<Input>, memory_limit: u64, deadline: Instant) -> State {
        State {
            input,
            memory: None,
            body_pos: 0,
            reason: None,
            pending: Pending::default(),
            logs: LogBuffer::default(),
            limiter: Limiter::module(memory_limit),
            deadline,
            wasi: None,
        }
    }

    /// The WASI context, created on first use (plain calls never pay for it).
    pub(crate) fn wasi_ctx(&mut self) -> &mut wasmtime_wasi::p1::WasiP1Ctx {
        &mut self.wasi.get_or_insert_with(WasiState::new).ctx
    }

    /// Moves captured WASI stdout/stderr into the log buffer.
    pub(crate) fn drain_wasi_output(&mut self) {
        if let Some(wasi) = self.wasi.take() {
            let (out, err) = wasi.into_output();
            self.logs.push_text(LogLevel::Info, LogSource::Stdout, &out);
            self.logs.push_text(LogLevel::Warn, LogSource::Stderr, &err);
        }
    }
}

/// Bounds memory, tables and instances of one store; limit hits trap with a
/// typed cause instead of making `memory.grow` return -1.
pub(crate) struct Limiter {
    pub memory_limit: u64,
    pub table_elements: u32,
    /// Core instances, tables and memories of the store: one each for an ABI v1 module, what
    /// language runtimes need for a component.
    pub instances: usize,
    pub tables: usize,
    pub memories: usize,
}

impl Limiter {
    /// The limits of an ABI v1 module.
    pub(crate) fn module(memory_limit: u64) -> Limiter {
        Limiter {
            memory_limit,
            table_elements: MAX_TABLE_ELEMENTS,
            instances: MAX_INSTANCES,
            tables: MAX_TABLES,
            memories: MAX_MEMORIES,
        }
    }
}

impl ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired as u64 > self.memory_limit {
            return Err(wasmtime::Error::new(MemoryLimitHit(self.memory_limit)));
        }
        Ok(maximum.is_none_or(|max| desired <= max))
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.table_elements as usize {
            return Err(wasmtime::Error::new(TableLimitHit(self.table_elements)));
        }
        Ok(maximum.is_none_or(|max| desired <= max))
    }

    fn instances(&self) -> usize {
        self.instances
    }

    fn tables(&self) -> usize {
        self.tables
    }

    fn memories(&self) -> usize {
        self.memories
    }
}

/// Log lines of one call, bounded in count and bytes; what does not fit is
/// counted and reported in one closing line.
#[derive(Default)]
pub(crate) struct LogBuffer {
    lines: Vec<LogLine>,
    bytes: usize,
    dropped: usize,
}

impl LogBuffer {
    pub(crate) fn push(&mut self, level: LogLevel, source: LogSource, raw: &[u8]) {
        if self.lines.len() >= MAX_LOG_LINES || self.bytes >= MAX_LOG_BYTES {
            self.dropped += 1;
            return;
        }
        let room = MAX_LOG_LINE.min(MAX_LOG_BYTES - self.bytes);
        let message = bounded_text(raw, room);
        self.bytes += message.len();
        self.lines.push(LogLine {
            level,
            message,
            source,
        });
    }

    /// Splits captured output into lines (a trailing partial line included).
    pub(crate) fn push_text(&mut self, level: LogLevel, source: LogSource, text: &[u8]) {
        for line in text.split(|&b| b == b'\n') {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if !line.is_empty() {
                self.push(level, source, line);
            }
        }
    }

    pub(crate) fn finish(mut self) -> Vec<LogLine> {
        if self.dropped > 0 {
            self.lines.push(LogLine {
                level: LogLevel::Warn,
                message: format!(
                    "{} more log lines dropped (limit per message)",
                    self.dropped
                ),
                source: LogSource::Host,
            });
        }
        self.lines
    }
}

/// Lossy UTF-8 of `raw`, cut to at most `max` bytes on a char boundary.
pub(crate) fn bounded_text(raw: &[u8], max: usize) -> String {
    let raw = &raw[..raw.len().min(max)];
    let mut s = String::from_utf8_lossy(raw).into_owned();
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
    s
}
