//! The process-wide wasmtime engine (pooling allocator, epoch ticker),
//! loading plugin versions, and running one handler call per message.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use tokio::sync::Semaphore;
use wasmtime::{
    Config, Enabled, Engine, Extern, InstanceAllocationStrategy, InstancePre, Linker, Module,
    ModuleExport, PoolingAllocationConfig, Store, Strategy, UpdateDeadline,
};

use worker_abi::{export, limits};

use super::abi::{self, Checked};
use super::error::{DeadlineHit, HandlerError, LoadError, chain_text, classify};
use super::state::State;
use super::{Answer, Input, Invocation, Limits};

/// How often the epoch advances: the granularity of timeouts and of a long
/// call yielding its tokio worker.
const EPOCH_TICK: Duration = Duration::from_millis(5);
/// Extra time the outer timer grants beyond the epoch deadline; it only fires
/// when the guest is stuck inside a host call.
const OUTER_GRACE: Duration = Duration::from_millis(100);

/// Most dirty bytes of a used memory reset in place (and kept resident) when
/// the kernel can tell which pages are dirty; the rest go back with `madvise`.
const KEEP_RESIDENT_WITH_PAGEMAP: usize = 1 << 20;
/// Low bytes of a used memory reset with memset when it cannot.
const KEEP_RESIDENT_WITHOUT_PAGEMAP: usize = 64 * 1024;

/// Sizing of the instance pool.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// Instances alive at once: the sum of every subscription's concurrency.
    pub max_instances: u32,
    /// Largest linear memory of any instance: the largest `memory_limit`.
    pub max_memory: u64,
}

/// One per process; cheap to clone.
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<Inner>,
}

struct Inner {
    engine: Engine,
    plain: Linker<State>,
    with_wasi: Linker<State>,
    /// Never more calls in flight than pool slots: wait rather than fail.
    slots: Arc<Semaphore>,
    /// Larger plugin files are refused before they are read (`[plugins] max_plugin_size`).
    max_plugin_size: AtomicU64,
}

impl Runtime {
    pub fn new(cfg: &RuntimeConfig) -> anyhow::Result<Runtime> {
        let slots = cfg.max_instances.max(1);
        let max_memory = usize::try_from(cfg.max_memory)
            .map_err(|_| anyhow::anyhow!("max_memory {} does not fit in memory", cfg.max_memory))?;
        let engine = engine(pool(slots, max_memory))?;
        spawn_ticker(&engine)?;
        let (plain, with_wasi) = linkers(&engine)?;
        Ok(Runtime {
            inner: Arc::new(Inner {
                engine,
                plain,
                with_wasi,
                slots: Arc::new(Semaphore::new(slots as usize)),
                max_plugin_size: AtomicU64::new(crate::config::DEFAULT_MAX_PLUGIN_SIZE),
            }),
        })
    }

    /// Sets `[plugins] max_plugin_size` for every later read (the default is
    /// `DEFAULT_MAX_PLUGIN_SIZE`); a config reload may change it.
    pub fn set_max_plugin_size(&self, bytes: u64) {
        self.inner.max_plugin_size.store(bytes, Ordering::Relaxed);
    }

    /// The largest plugin file read.
    pub fn max_plugin_size(&self) -> u64 {
        self.inner.max_plugin_size.load(Ordering::Relaxed)
    }

    /// Blocking (reads and compiles): call it from `spawn_blocking`.
    /// [`Runtime::load_file`] on the blocking pool, off the async workers.
    pub async fn load_file_async(&self, path: &Path) -> anyhow::Result<Arc<Plugin>> {
        let runtime = self.clone();
        let owned = path.to_path_buf();
        let loaded = tokio::task::spawn_blocking(move || runtime.load_file(&owned))
            .await
            .map_err(|e| anyhow::anyhow!("plugin compile task failed: {e}"))?;
        Ok(loaded?)
    }

    pub fn load_file(&self, path: &Path) -> Result<Arc<Plugin>, LoadError> {
        let bytes = self.read_file(path)?;
        self.load_bytes(&super::file::file_name(path), &bytes)
    }

    /// The bytes of a plugin file, refused before being read whole when the file is larger than
    /// `max_plugin_size` or does not start like WebAssembly. Blocking.
    pub fn read_file(&self, path: &Path) -> Result<Vec<u8>, LoadError> {
        super::file::read(path, self.max_plugin_size())
    }

    /// Blocking (compiles): call it from `spawn_blocking`.
    pub fn load_bytes(&self, name: &str, bytes: &[u8]) -> Result<Arc<Plugin>, LoadError> {
        let file = || name.to_string();
        if bytes.len() < 8 || &bytes[..4] != b"\0asm" {
            return Err(LoadError::NotWasm { file: file() });
        }
        if bytes[4..8] != [1, 0, 0, 0] {
            // Layer 1 is a component; anything else is not wasm we know.
            return Err(if bytes[6..8] == [1, 0] {
                LoadError::Component { file: file() }
            } else {
                LoadError::NotWasm { file: file() }
            });
        }
        let sha256 = hex::encode(Sha256::digest(bytes));
        let module = Module::new(&self.inner.engine, bytes).map_err(|e| LoadError::Compile {
            file: file(),
            reason: chain_text(&e),
        })?;
        let Checked {
            handle,
            memory,
            uses_wasi,
        } = abi::check_module(name, &module)?;
        let linker = if uses_wasi {
            &self.inner.with_wasi
        } else {
            &self.inner.plain
        };
        let pre = linker
            .instantiate_pre(&module)
            .map_err(|e| LoadError::Link {
                file: file(),
                reason: chain_text(&e),
            })?;
        Ok(Arc::new(Plugin {
            name: name.to_string(),
            short_sha: sha256[..12].to_string(),
            sha256,
            uses_wasi,
            pre,
            handle,
            memory,
            slots: self.inner.slots.clone(),
        }))
    }
}

/// The instance pool: one slot per concurrent call, each memory as large as the largest
/// `memory_limit`, so an instance is never refused for want of room.
fn pool(slots: u32, max_memory: usize) -> PoolingAllocationConfig {
    let mut pool = PoolingAllocationConfig::new();
    pool.total_core_instances(slots)
        .total_memories(slots)
        .total_tables(slots)
        .total_stacks(slots)
        .max_memories_per_module(limits::MAX_MEMORIES as u32)
        .max_tables_per_module(limits::MAX_TABLES as u32)
        .table_elements(limits::MAX_TABLE_ELEMENTS as usize)
        .max_memory_size(max_memory)
        .table_keep_resident(16 * 1024);
    // Resetting a used memory with `madvise` costs a TLB shootdown on every
    // core running a tokio worker, and the next instance then page-faults
    // the same pages back in: that dominated SDK plugins (docs/performance.md).
    // With PAGEMAP_SCAN (Linux 6.7+) only the pages the instance dirtied are
    // found and reset with memset, and stay resident for the next one.
    // Without it, keep_resident would memset that many low bytes on every
    // call (the stack of a Rust module, mostly untouched), so stay small.
    if PoolingAllocationConfig::is_pagemap_scan_available() {
        pool.pagemap_scan(Enabled::Yes)
            .linear_memory_keep_resident(KEEP_RESIDENT_WITH_PAGEMAP);
    } else {
        pool.linear_memory_keep_resident(KEEP_RESIDENT_WITHOUT_PAGEMAP);
    }
    pool
}

/// The engine: pooled instances, epoch interruption for timeouts, no proposal the ABI does not
/// need.
fn engine(pool: PoolingAllocationConfig) -> anyhow::Result<Engine> {
    let mut config = Config::new();
    config
        .strategy(Strategy::Cranelift)
        .allocation_strategy(InstanceAllocationStrategy::Pooling(pool))
        .epoch_interruption(true)
        .memory_init_cow(true)
        // Threads and exceptions are not compiled into this wasmtime build
        // (no `threads` or `gc` feature), so they are refused already.
        .wasm_gc(false)
        .wasm_component_model(false)
        .wasm_stack_switching(false);
    Engine::new(&config)
        .map_err(|e| anyhow::anyhow!("cannot create the wasm engine: {}", chain_text(&e)))
}

/// Two linkers: a module that imports nothing from WASI is linked without it, and so never pays
/// for a WASI context.
fn linkers(engine: &Engine) -> anyhow::Result<(Linker<State>, Linker<State>)> {
    let mut plain = Linker::new(engine);
    abi::add_to_linker(&mut plain).map_err(|e| anyhow::anyhow!("{}", chain_text(&e)))?;
    let mut with_wasi = Linker::new(engine);
    abi::add_to_linker(&mut with_wasi).map_err(|e| anyhow::anyhow!("{}", chain_text(&e)))?;
    wasmtime_wasi::p1::add_to_linker_async(&mut with_wasi, State::wasi_ctx)
        .map_err(|e| anyhow::anyhow!("{}", chain_text(&e)))?;
    Ok((plain, with_wasi))
}

/// Advances the epoch until the engine is gone; holds only a weak handle so
/// it never keeps the engine alive.
fn spawn_ticker(engine: &Engine) -> anyhow::Result<()> {
    let weak = engine.weak();
    std::thread::Builder::new()
        .name("wasm-epoch".into())
        .spawn(move || {
            loop {
                std::thread::sleep(EPOCH_TICK);
                match weak.upgrade() {
                    Some(engine) => engine.increment_epoch(),
                    None => break,
                }
            }
        })
        .map_err(|e| anyhow::anyhow!("cannot start the epoch ticker thread: {e}"))?;
    Ok(())
}

/// One compiled version of a plugin file.
pub struct Plugin {
    name: String,
    sha256: String,
    short_sha: String,
    uses_wasi: bool,
    pre: InstancePre<State>,
    handle: ModuleExport,
    memory: ModuleExport,
    slots: Arc<Semaphore>,
}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugin")
            .field("name", &self.name)
            .field("sha256", &self.sha256)
            .field("uses_wasi", &self.uses_wasi)
            .finish_non_exhaustive()
    }
}

impl Plugin {
    /// The file name, e.g. `user_monitor.wasm`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// SHA-256 of the file, full lowercase hex.
    pub fn sha256(&self) -> &str {
        &self.sha256
    }

    /// The first 12 hex chars of the SHA-256, for logs.
    pub fn short_sha(&self) -> &str {
        &self.short_sha
    }

    /// Whether the module imports WASI preview1.
    pub fn uses_wasi(&self) -> bool {
        self.uses_wasi
    }

    /// Runs the handler on one message in a fresh instance. Never panics;
    /// every failure comes back in `Invocation::answer`.
    pub async fn handle(&self, input: Arc<Input>, limits: &Limits) -> Invocation {
        let start = Instant::now();
        // The semaphore is never closed, so acquiring cannot fail; a closed one
        // would only mean "no slot", reported as such.
        let _slot = match self.slots.acquire().await {
            Ok(permit) => permit,
            Err(_) => {
                return Invocation {
                    answer: Err(HandlerError::Instantiate("runtime is shutting down".into())),
                    reason: None,
                    publishes: Vec::new(),
                    logs: Vec::new(),
                    elapsed: start.elapsed(),
                };
            }
        };

        // The timeout covers the call, not the wait for a pool slot.
        let deadline = Instant::now() + limits.timeout;
        let mut store = Store::new(
            self.pre.module().engine(),
            State::new(input, limits.memory_limit, deadline),
        );
        store.limiter(|s| &mut s.limiter);
        store.epoch_deadline_callback(|ctx| {
            if Instant::now() >= ctx.data().deadline {
                Err(wasmtime::Error::new(DeadlineHit))
            } else {
                // Let other tasks run on this worker, then carry on.
                Ok(UpdateDeadline::Yield(1))
            }
        });
        store.set_epoch_deadline(1);

        let answer =
            match tokio::time::timeout(limits.timeout + OUTER_GRACE, self.run(&mut store, limits))
                .await
            {
                Ok(answer) => answer,
                Err(_) => Err(HandlerError::Timeout(limits.timeout)),
            };

        let mut state = store.into_data();
        state.drain_wasi_output();
        let publishes = if matches!(answer, Ok(Answer::Ok)) {
            state.publishes
        } else {
            // Dropped on retry, fail and errors (ABI v1).
            Vec::new()
        };
        Invocation {
            answer,
            reason: state.reason,
            publishes,
            logs: state.logs.finish(),
            elapsed: start.elapsed(),
        }
    }

    async fn run(&self, store: &mut Store<State>, limits: &Limits) -> Result<Answer, HandlerError> {
        let instance = self
            .pre
            .instantiate_async(&mut *store)
            .await
            .map_err(|e| classify(&e, limits.timeout, true))?;
        let memory = instance
            .get_module_export(&mut *store, &self.memory)
            .and_then(Extern::into_memory);
        store.data_mut().memory = memory;
        let func = instance
            .get_module_export(&mut *store, &self.handle)
            .and_then(Extern::into_func)
            .ok_or_else(|| HandlerError::Instantiate(format!("{} is missing", export::HANDLE)))?;
        let func = func
            .typed::<(), i32>(&*store)
            .map_err(|e| HandlerError::Instantiate(chain_text(&e)))?;
        let code = func
            .call_async(&mut *store, ())
            .await
            .map_err(|e| classify(&e, limits.timeout, false))?;
        Answer::from_code(code)
    }
}
