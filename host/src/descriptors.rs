//! File descriptors: the open-file limit, raised at start, and what has to be set up while
//! descriptors are still plentiful.

use std::future::Future as _;
use std::task::{Context, Waker};

use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

/// The soft open-file limit before and after `raise_open_file_limit` (None: unlimited).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenFileLimit {
    pub before: Option<u64>,
    pub after: Option<u64>,
}

/// Raises the soft open-file limit to the hard limit. systemd and most shells start a process
/// with a soft limit of 1024 for the sake of select(2); this process uses epoll, and every
/// broker connection, admin connection, plugin read and file watch takes a descriptor.
pub fn raise_open_file_limit() -> std::io::Result<OpenFileLimit> {
    let limit = getrlimit(Resource::Nofile);
    let raised = Rlimit {
        current: limit.maximum,
        maximum: limit.maximum,
    };
    if limit.current != limit.maximum {
        setrlimit(Resource::Nofile, raised)?;
    }
    Ok(OpenFileLimit {
        before: limit.current,
        after: getrlimit(Resource::Nofile).current,
    })
}

/// Starts async-compat's global fallback runtime now, on a thread outside any tokio runtime.
///
/// lapin's I/O thread polls its socket outside the tokio runtime, through async-compat, which
/// then builds a global runtime of its own on first use and panics if it cannot (no descriptor
/// for its epoll): the I/O thread dies, and every later connection panics on the poisoned
/// global. Built here, at start, it never has to be built when descriptors run out.
pub fn start_compat_runtime() -> anyhow::Result<()> {
    std::thread::Builder::new()
        .name("compat-start".into())
        .spawn(|| {
            let future = std::pin::pin!(async_compat::Compat::new(std::future::ready(())));
            let _ = future.poll(&mut Context::from_waker(Waker::noop()));
        })
        .map_err(|err| anyhow::anyhow!("cannot start a thread: {err}"))?
        .join()
        .map_err(|_| {
            anyhow::anyhow!("cannot start the runtime of the broker connection's I/O thread")
        })
}
