//! Compiling components: in a child process (the compiler's memory, hundreds of MB for a Python
//! or JavaScript runtime, never stays in the service) and cached by content hash, so a restart
//! loads them in milliseconds. A cache entry names the file's SHA-256 and the engine's
//! compatibility hash, so a new wasmtime or engine setting never reads an old artifact.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

use wasmtime::Engine;
use wasmtime::component::Component;

use super::error::{LoadError, chain_text};
use super::settings::{RuntimeConfig, engine, pool};

/// Most artifacts kept; the least recently written go first.
const MAX_ENTRIES: usize = 64;
/// The hidden subcommand the child runs.
pub const COMPILE_COMMAND: &str = "compile-plugin";

pub(crate) struct Compiler {
    cache_dir: Option<PathBuf>,
    exe: Option<PathBuf>,
    max_instances: u32,
    max_memory: u64,
    nice: i32,
    compat: String,
}

impl Compiler {
    pub(super) fn new(cfg: &RuntimeConfig, engine: &Engine) -> Compiler {
        let mut hasher = DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        Compiler {
            cache_dir: cfg.cache_dir.clone(),
            exe: cfg.compiler_exe.clone(),
            max_instances: cfg.max_instances,
            max_memory: cfg.max_memory,
            nice: cfg.compile_priority.nice(),
            compat: format!("{:016x}", hasher.finish()),
        }
    }

    /// The compiled component of `bytes`, and whether it came from the cache; else compiled (and
    /// cached).
    pub(super) fn component(
        &self,
        engine: &Engine,
        file: &str,
        sha256: &str,
        bytes: &[u8],
    ) -> Result<(Component, bool), LoadError> {
        let entry = self
            .cache_dir
            .as_ref()
            .map(|dir| dir.join(format!("{sha256}-{}.cwasm", self.compat)));
        if let Some(entry) = entry.as_deref().filter(|e| e.is_file()) {
            // SAFETY: the file is an artifact this host's compiler wrote into its own cache
            // directory; wasmtime checks that it was made by a compatible engine.
            match unsafe { Component::deserialize_file(engine, entry) } {
                Ok(component) => return Ok((component, true)),
                Err(e) => {
                    tracing::warn!(file, entry = %entry.display(), "unusable cached artifact, compiling again: {}", chain_text(&e));
                    let _ = std::fs::remove_file(entry);
                }
            }
        }
        let started = std::time::Instant::now();
        let artifact = self.compile(engine, file, bytes)?;
        tracing::info!(
            file,
            seconds = started.elapsed().as_secs_f64(),
            bytes = artifact.len(),
            "compiled component"
        );
        let load_err = |e: wasmtime::Error| {
            let (file, reason) = (file.to_string(), chain_text(&e));
            // wasmtime checks the component against the pool's limits when it is loaded.
            if reason.contains("pooling allocator") {
                LoadError::TooBigForPool { file, reason }
            } else {
                LoadError::Compile { file, reason }
            }
        };
        if let Some(entry) = entry.as_deref()
            && let Err(e) = store(entry, &artifact)
        {
            tracing::warn!(file, entry = %entry.display(), "cannot cache the compiled component: {e}");
        } else if let Some(entry) = entry.as_deref() {
            // SAFETY: just written by this process from the compiler's output.
            return unsafe { Component::deserialize_file(engine, entry) }
                .map(|c| (c, false))
                .map_err(load_err);
        }
        // SAFETY: the bytes come from this host's own compiler, a moment ago.
        unsafe { Component::deserialize(engine, &artifact) }
            .map(|c| (c, false))
            .map_err(load_err)
    }

    /// Serialized artifact of `bytes`, from the child compiler when there is one.
    fn compile(&self, engine: &Engine, file: &str, bytes: &[u8]) -> Result<Vec<u8>, LoadError> {
        let failed = |reason: String| LoadError::Compile {
            file: file.to_string(),
            reason,
        };
        if let Some(exe) = &self.exe {
            match self.compile_in_child(exe, bytes) {
                Ok(Ok(artifact)) => return Ok(artifact),
                Ok(Err(reason)) => return Err(failed(reason)),
                Err(e) => {
                    tracing::warn!(file, exe = %exe.display(), "cannot run the compiler process, compiling here: {e}");
                }
            }
        }
        engine
            .precompile_component(bytes)
            .map_err(|e| failed(chain_text(&e)))
    }

    /// Outer error: the child could not be run. Inner error: it ran and refused the file.
    fn compile_in_child(
        &self,
        exe: &Path,
        bytes: &[u8],
    ) -> std::io::Result<Result<Vec<u8>, String>> {
        let mut child = Command::new(exe)
            .arg(COMPILE_COMMAND)
            .args(["--max-instances", &self.max_instances.to_string()])
            .args(["--max-memory", &self.max_memory.to_string()])
            .args(["--nice", &self.nice.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let mut stdin = child
            .stdin
            .take()
            .ok_or_else(|| std::io::Error::other("no stdin pipe"))?;
        // Feed stdin while the child's output is read, or both could wait on a full pipe.
        let output = std::thread::scope(|scope| {
            scope.spawn(move || {
                // A child that stopped reading reports why on stderr.
                let _ = stdin.write_all(bytes);
            });
            child.wait_with_output()
        })?;
        if output.status.success() {
            return Ok(Ok(output.stdout));
        }
        let stderr = String::from_utf8_lossy(&output.stderr);
        let reason = stderr
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("the compiler process failed without a message")
            .trim_start_matches("error: ")
            .to_string();
        Ok(Err(reason))
    }
}

/// Writes `artifact` to `entry` atomically, then trims the directory to `MAX_ENTRIES`.
fn store(entry: &Path, artifact: &[u8]) -> std::io::Result<()> {
    let dir = entry
        .parent()
        .ok_or_else(|| std::io::Error::other("cache entry without a directory"))?;
    std::fs::create_dir_all(dir)?;
    // Unique per write, not only per process: two loads of the same file in one process (two
    // services in a test binary, a reload racing a config change) would otherwise write one temp
    // file at once, and one of them rename the other's half-written artifact into place.
    static WRITES: AtomicU64 = AtomicU64::new(0);
    let n = WRITES.fetch_add(1, Ordering::Relaxed);
    let tmp = entry.with_extension(format!("tmp.{}.{n}", std::process::id()));
    std::fs::write(&tmp, artifact)?;
    std::fs::rename(&tmp, entry)?;
    prune(dir);
    Ok(())
}

/// Temp files older than this were left by a process that died mid-write.
const STALE_TEMP: std::time::Duration = std::time::Duration::from_secs(3600);

/// Removes the oldest artifacts beyond `MAX_ENTRIES` and stale temp files; errors only cost
/// disk space.
fn prune(dir: &Path) {
    let Ok(read) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries = Vec::new();
    for entry in read.filter_map(Result::ok) {
        let path = entry.path();
        let Some(modified) = entry.metadata().ok().and_then(|m| m.modified().ok()) else {
            continue;
        };
        if path.extension().is_some_and(|x| x == "cwasm") {
            entries.push((modified, path));
        } else if path.to_string_lossy().contains(".tmp.")
            && modified.elapsed().is_ok_and(|age| age > STALE_TEMP)
        {
            let _ = std::fs::remove_file(&path);
        }
    }
    if entries.len() <= MAX_ENTRIES {
        return;
    }
    entries.sort();
    for (_, path) in &entries[..entries.len() - MAX_ENTRIES] {
        let _ = std::fs::remove_file(path);
    }
}

/// The child's side: compiles the component in `bytes` for the engine the parent described, at
/// the priority it asked for (`nice`, an increment).
pub fn compile_for_parent(
    max_instances: u32,
    max_memory: u64,
    nice: i32,
    bytes: &[u8],
) -> anyhow::Result<Vec<u8>> {
    if nice != 0 {
        let _ = rustix::process::nice(nice);
    }
    let max_memory = usize::try_from(max_memory)?;
    let engine = engine(pool(max_instances.max(1), max_memory))?;
    engine
        .precompile_component(bytes)
        .map_err(|e| anyhow::anyhow!("{}", chain_text(&e)))
}
