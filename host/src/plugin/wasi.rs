//! WASI preview1 for plugins that import it: no files, environment,
//! arguments or sockets; stdout and stderr captured into bounded buffers that
//! become log lines.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use wasmtime_wasi::WasiCtxBuilder;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p1::WasiP1Ctx;
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};
use worker_abi::limits::MAX_WASI_OUTPUT;

pub(crate) struct WasiState {
    pub ctx: WasiP1Ctx,
    stdout: BoundedPipe,
    stderr: BoundedPipe,
}

impl WasiState {
    pub(crate) fn new() -> WasiState {
        let stdout = BoundedPipe::default();
        let stderr = BoundedPipe::default();
        // The builder's defaults grant nothing: no preopened dirs, no env, no
        // args, stdin closed, sockets and name lookup denied.
        let ctx = WasiCtxBuilder::new()
            .stdout(stdout.clone())
            .stderr(stderr.clone())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .build_p1();
        WasiState {
            ctx,
            stdout,
            stderr,
        }
    }

    /// The captured (stdout, stderr).
    pub(crate) fn into_output(self) -> (Vec<u8>, Vec<u8>) {
        drop(self.ctx);
        (self.stdout.take(), self.stderr.take())
    }
}

/// An output stream that keeps the first `MAX_WASI_OUTPUT` bytes and silently
/// drops the rest, so a chatty guest never sees a write error (Rust's
/// `println!` would panic on one).
#[derive(Clone, Default)]
pub(crate) struct BoundedPipe {
    buf: Arc<Mutex<Vec<u8>>>,
}

impl BoundedPipe {
    fn append(&self, data: &[u8]) {
        // A poisoned lock only means another writer panicked; the bytes are fine.
        let mut buf = self.buf.lock().unwrap_or_else(|e| e.into_inner());
        let room = MAX_WASI_OUTPUT.saturating_sub(buf.len());
        buf.extend_from_slice(&data[..data.len().min(room)]);
    }

    pub(super) fn take(&self) -> Vec<u8> {
        std::mem::take(&mut *self.buf.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl IsTerminal for BoundedPipe {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for BoundedPipe {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for BoundedPipe {
    async fn ready(&mut self) {}
}

impl OutputStream for BoundedPipe {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.append(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        // Always writable; what exceeds the bound is dropped in `write`.
        Ok(MAX_WASI_OUTPUT)
    }
}

impl tokio::io::AsyncWrite for BoundedPipe {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.append(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
