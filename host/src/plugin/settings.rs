//! How the wasmtime engine is built and sized: the runtime's settings, the instance pool and
//! the engine configuration. The service's runtime (`engine`) and the compiler child process
//! (`cache`) both build their engine here, so their artifacts match.

use std::path::PathBuf;

use wasmtime::{
    Config, Enabled, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Strategy,
};
use worker_abi::limits;

use super::component;
use super::error::chain_text;

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
