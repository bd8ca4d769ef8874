//! The store data of a component: the message it handles, what the guest produced so far, the
//! WASI 0.2 context it runs in (no files, environment, arguments or sockets; stdout and stderr
//! captured) and the per-message state of its capabilities (HTTP, kv, sql).

use std::sync::Arc;
use std::time::Instant;

use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtxView, WasiHttpView};

use super::super::pending::Pending;
use super::super::state::{Limiter, LogBuffer};
use super::super::wasi::BoundedPipe;
use super::super::{Input, LogLevel, LogSource};
use crate::capability::{self, Effects, Instances, Scope};

/// Core instances, tables and memories one component store may create: what the language
/// runtimes measured need (Python 14 core instances, JavaScript 4), with room to spare.
pub(crate) const MAX_CORE_INSTANCES: usize = 32;
pub(crate) const MAX_TABLES: usize = 64;
pub(crate) const MAX_MEMORIES: usize = 8;
/// Elements of one table: an interpreter's function table is far larger than a v1 module's.
pub(crate) const MAX_TABLE_ELEMENTS: u32 = 100_000;
/// Resources (streams, HTTP requests and responses, pollables, ...) the guest may hold at once,
/// a tenth of wasmtime's default: past it a new one traps the call instead of growing the
/// host's memory. The language runtimes hold a few dozen.
pub(crate) const MAX_RESOURCES: usize = 100_000;

pub(crate) struct CState {
    pub input: Arc<Input>,
    pub pending: Pending,
    pub logs: LogBuffer,
    pub limiter: Limiter,
    pub deadline: Instant,
    wasi: WasiCtx,
    table: ResourceTable,
    capabilities: Instances,
    stdout: BoundedPipe,
    stderr: BoundedPipe,
}

impl CState {
    pub(crate) fn new(input: Arc<Input>, memory_limit: u64, deadline: Instant) -> CState {
        let stdout = BoundedPipe::default();
        let stderr = BoundedPipe::default();
        // The builder grants nothing by default: no preopened dirs, no env, no args, stdin
        // closed; sockets and name lookup are denied explicitly.
        let wasi = WasiCtxBuilder::new()
            .stdout(stdout.clone())
            .stderr(stderr.clone())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .build();
        CState {
            input,
            pending: Pending::default(),
            logs: LogBuffer::default(),
            limiter: Limiter {
                memory_limit,
                table_elements: MAX_TABLE_ELEMENTS,
                instances: MAX_CORE_INSTANCES,
                tables: MAX_TABLES,
                memories: MAX_MEMORIES,
            },
            deadline,
            wasi,
            table: {
                let mut table = ResourceTable::new();
                table.set_max_capacity(MAX_RESOURCES);
                table
            },
            capabilities: Instances::default(),
            stdout,
            stderr,
        }
    }

    /// Starts the next message (in a new or a reused instance): nothing of the last call's
    /// output stays, and the capabilities begin under this message's grants.
    pub(crate) fn begin(&mut self, input: Arc<Input>, plugin: &Arc<str>, deadline: Instant) {
        let scope = Scope {
            plugin: plugin.clone(),
            queue: input.meta.queue.clone(),
            deadline,
            capture: input.granted.capture.clone(),
            message_id: (input.granted.outbox)
                .then(|| input.meta.message_id.clone())
                .flatten(),
        };
        self.capabilities.begin(&input.granted, &scope);
        self.input = input;
        self.pending.clear();
        self.logs = LogBuffer::default();
        self.deadline = deadline;
        self.stdout.take();
        self.stderr.take();
    }

    /// The message's capability effects, still open: the caller commits or undoes them. A
    /// dry run's are never committed.
    pub(crate) fn take_effects(&mut self) -> Effects {
        Effects::take(&mut self.capabilities, self.input.granted.capture.is_some())
    }

    /// Moves captured stdout/stderr into the log buffer and hands over the call's output.
    pub(crate) fn finish(&mut self) -> (LogBuffer, Pending) {
        let out = self.stdout.take();
        let err = self.stderr.take();
        self.logs.push_text(LogLevel::Info, LogSource::Stdout, &out);
        self.logs.push_text(LogLevel::Warn, LogSource::Stderr, &err);
        (
            std::mem::take(&mut self.logs),
            std::mem::take(&mut self.pending),
        )
    }
}

impl WasiView for CState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for CState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        self.capabilities.http.view(&mut self.table)
    }
}

impl capability::Host for CState {
    fn capabilities(&mut self) -> &mut Instances {
        &mut self.capabilities
    }
}
