//! The process-wide wasmtime engine (pooling allocator, epoch ticker) and loading plugin
//! versions: core modules (ABI v1) compiled in place, components (ABI v2) through the cache.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio::sync::Semaphore;
use wasmtime::component::Linker as ComponentLinker;
use wasmtime::{
    Config, Enabled, Engine, InstanceAllocationStrategy, Linker, Module, PoolingAllocationConfig,
    Strategy,
};

use worker_abi::limits;

use super::abi::{self, Checked};
use super::cache::Compiler;
use super::component::{self, ComponentPlugin, state::CState};
use super::error::{LoadError, chain_text};
use super::module::ModulePlugin;
use super::state::State;
use super::version::{Kind, Loaded, Plugin};

/// How often the epoch advances: the granularity of timeouts and of a long
/// call yielding its tokio worker.
const EPOCH_TICK: Duration = Duration::from_millis(5);
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
    /// Where compiled components are kept across restarts; `None` compiles on every load.
    pub cache_dir: Option<PathBuf>,
    /// The `worker-host` executable that compiles components in a child process, so the
    /// compiler's memory never stays in the service; `None` compiles in this process.
    pub compiler_exe: Option<PathBuf>,
    /// How that child shares the CPU.
    pub compile_priority: CompilePriority,
}

/// How a compile in the child process shares the CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompilePriority {
    /// Beside running subscriptions (the service): at nice 10, so a compile never starves them.
    Background,
    /// For a command someone waits on (`check`, `failed dry-run`): at the caller's priority, as a
    /// niced compile of a Python or JavaScript runtime crawls on a busy machine.
    Foreground,
}

impl CompilePriority {
    /// The child's `nice` increment.
    pub(crate) fn nice(self) -> i32 {
        match self {
            CompilePriority::Background => 10,
            CompilePriority::Foreground => 0,
        }
    }
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
    components: ComponentLinker<CState>,
    compiler: Compiler,
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
        let components = component::linker(&engine)?;
        let compiler = Compiler::new(cfg, &engine);
        Ok(Runtime {
            inner: Arc::new(Inner {
                engine,
                plain,
                with_wasi,
                components,
                compiler,
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
        let sha256 = hex::encode(Sha256::digest(bytes));
        let started = std::time::Instant::now();
        let (kind, cached) = match bytes[4..8] {
            [1, 0, 0, 0] => (Kind::Module(self.module(name, bytes)?), false),
            // Component model binary: version 0x0d, layer 1.
            [0x0d, 0, 1, 0] => {
                let (component, cached) = self.component(name, &sha256, bytes)?;
                (Kind::Component(component), cached)
            }
            _ => return Err(LoadError::NotWasm { file: file() }),
        };
        let loaded = if cached {
            Loaded::Cached(started.elapsed())
        } else {
            Loaded::Compiled(started.elapsed())
        };
        Ok(Arc::new(Plugin {
            loaded,
            name: name.to_string(),
            short_sha: sha256[..12].to_string(),
            sha256,
            kind,
            slots: self.inner.slots.clone(),
        }))
    }

    fn module(&self, name: &str, bytes: &[u8]) -> Result<ModulePlugin, LoadError> {
        let module = Module::new(&self.inner.engine, bytes).map_err(|e| LoadError::Compile {
            file: name.to_string(),
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
                file: name.to_string(),
                reason: chain_text(&e),
            })?;
        Ok(ModulePlugin {
            uses_wasi,
            pre,
            handle,
            memory,
        })
    }

    fn component(
        &self,
        name: &str,
        sha256: &str,
        bytes: &[u8],
    ) -> Result<(ComponentPlugin, bool), LoadError> {
        let (component, cached) =
            self.inner
                .compiler
                .component(&self.inner.engine, name, sha256, bytes)?;
        Ok((
            ComponentPlugin::new(name, &self.inner.components, &component)?,
            cached,
        ))
    }
}

/// Linear memories of the pool per instance slot: language runtimes link several modules, most
/// sharing one memory.
const POOL_MEMORIES_PER_SLOT: usize = 4;

/// The instance pool: one slot per concurrent call, each memory as large as the largest
/// `memory_limit`, so an instance is never refused for want of room.
pub(crate) fn pool(slots: u32, max_memory: usize) -> PoolingAllocationConfig {
    let mut pool = PoolingAllocationConfig::new();
    // A component instance takes several core instances, memories and tables of the pool
    // (CPython 14 core instances, a JavaScript engine 4); a v1 module one of each.
    let per = |n: usize| slots.saturating_mul(n as u32);
    pool.total_component_instances(slots)
        .total_core_instances(per(component::state::MAX_CORE_INSTANCES / 2))
        .total_memories(per(POOL_MEMORIES_PER_SLOT))
        .total_tables(per(component::state::MAX_TABLES / 4))
        .total_stacks(slots)
        .max_core_instances_per_component(component::state::MAX_CORE_INSTANCES as u32)
        .max_memories_per_component(component::state::MAX_MEMORIES as u32)
        .max_tables_per_component(component::state::MAX_TABLES as u32)
        .max_memories_per_module(limits::MAX_MEMORIES as u32)
        .max_tables_per_module(limits::MAX_TABLES as u32)
        .table_elements(component::state::MAX_TABLE_ELEMENTS as usize)
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
/// need. The compiler child process builds the same one (see `cache`), so artifacts match.
pub(crate) fn engine(pool: PoolingAllocationConfig) -> anyhow::Result<Engine> {
    let mut config = Config::new();
    config
        .strategy(Strategy::Cranelift)
        .allocation_strategy(InstanceAllocationStrategy::Pooling(pool))
        .epoch_interruption(true)
        .memory_init_cow(true)
        // Threads and exceptions are not compiled into this wasmtime build
        // (no `threads` or `gc` feature), so they are refused already.
        .wasm_gc(false)
        .wasm_component_model(true)
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
