//! The process-wide runtime (the engine of `settings`, its epoch ticker, the linkers) and
//! loading plugin versions: core modules (ABI v1) compiled in place, components (ABI v2)
//! through the cache.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio::sync::Semaphore;
use wasmtime::component::Linker as ComponentLinker;
use wasmtime::{Engine, Linker, Module};

use super::abi::{self, Checked};
use super::cache::Compiler;
use super::component::{self, ComponentPlugin, state::CState};
use super::error::{LoadError, chain_text};
use super::module::ModulePlugin;
use super::settings::{RuntimeConfig, engine, pool};
use super::state::State;
use super::version::{Kind, Loaded, Plugin};

/// How often the epoch advances: the granularity of timeouts and of a long
/// call yielding its tokio worker.
const EPOCH_TICK: Duration = Duration::from_millis(5);
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
