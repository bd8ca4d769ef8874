//! Hot reload: swaps plugin versions atomically when their files change (the watching itself is
//! in `watch`), and tells the service when worker.toml changed.
//!
//! Calls already running keep the `Arc<Plugin>` they started with; new calls load the new one.
//! A new version is read, hashed, compiled, ABI-checked and pre-linked (`InstancePre`) on a
//! blocking thread before the one pointer store that publishes it, so the message path never
//! waits for a compile and never sees a half-built version.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use sha2::{Digest, Sha256};
use tracing::{debug, info, warn};

use crate::plugin::{LoadError, Plugin, Runtime};

mod watch;

pub(crate) use watch::watch;

/// Why a changed plugin file was not swapped in.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ReloadError {
    /// The file is gone; the last version keeps serving.
    #[error("{0} was deleted")]
    Deleted(String),
    /// The file could not be read (out of descriptors, say): worth another try later.
    #[error("cannot read {path}: {reason}")]
    Read { path: String, reason: String },
    /// The file is refused (larger than max_plugin_size, not wasm) or its bytes do not make a
    /// valid plugin (half-written, missing export, ...).
    #[error("{0}")]
    Invalid(String),
}

/// Counters of reload results, for metrics.
#[derive(Debug, Default)]
pub(crate) struct ReloadStats {
    /// New versions swapped in.
    pub ok: AtomicU64,
    /// Changes refused (bad file, deleted, unreadable).
    pub failed: AtomicU64,
    /// Events whose bytes matched the running version.
    pub unchanged: AtomicU64,
}

type Slots = HashMap<PathBuf, Arc<ArcSwap<Plugin>>>;

/// The plugin versions in use, one slot per plugin file; shared by the subscriptions that name it.
#[derive(Clone)]
pub(crate) struct PluginSet {
    runtime: Runtime,
    slots: Arc<Mutex<Slots>>,
    /// Held from reading a file to storing its version, so two loads of one file (the watcher
    /// and a config reload or SIGHUP) never race and leave an older version in place.
    loading: Arc<tokio::sync::Mutex<()>>,
    /// Reload outcomes so far.
    pub stats: Arc<ReloadStats>,
}

/// What a watched change means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    /// worker.toml changed (or SIGHUP asked for a re-read).
    Config,
}

impl PluginSet {
    /// An empty set compiling with `runtime`.
    pub(crate) fn new(runtime: Runtime) -> PluginSet {
        PluginSet {
            runtime,
            slots: Arc::default(),
            loading: Arc::default(),
            stats: Arc::default(),
        }
    }

    /// Sets `[plugins] max_plugin_size` for every later load and reload.
    /// Reload counts and the versions serving now, for `/metrics`.
    pub(crate) fn report(&self) -> crate::metrics::PluginReport {
        let count = |c: &AtomicU64| c.load(Ordering::Relaxed);
        crate::metrics::PluginReport {
            reloads: [
                ("ok", count(&self.stats.ok)),
                ("failed", count(&self.stats.failed)),
                ("unchanged", count(&self.stats.unchanged)),
            ],
            versions: self.versions(),
        }
    }

    pub(crate) fn set_max_plugin_size(&self, bytes: u64) {
        self.runtime.set_max_plugin_size(bytes);
    }

    /// Checks and compiles plugin bytes that are not a file of the plugins folder (a console
    /// upload), with the limits of any plugin; nothing is kept.
    pub(crate) async fn load_bytes(
        &self,
        name: &str,
        bytes: Vec<u8>,
    ) -> anyhow::Result<Arc<Plugin>> {
        let max = self.runtime.max_plugin_size();
        if bytes.len() as u64 > max {
            anyhow::bail!(
                "{name}: {} bytes, over [plugins] max_plugin_size ({max})",
                bytes.len()
            );
        }
        let runtime = self.runtime.clone();
        let name = name.to_string();
        tokio::task::spawn_blocking(move || runtime.load_bytes(&name, &bytes))
            .await
            .map_err(|e| anyhow::anyhow!("compiling the upload: {e}"))?
            .map_err(anyhow::Error::from)
    }

    /// The slot for `path`, loading the file the first time it is named.
    pub(crate) async fn slot(&self, path: &Path) -> anyhow::Result<Arc<ArcSwap<Plugin>>> {
        let _loading = self.loading.lock().await;
        if let Some(slot) = self.get(path) {
            return Ok(slot);
        }
        let plugin = self.runtime.load_file_async(path).await?;
        info!(
            plugin = plugin.name(),
            version = plugin.short_sha(),
            how = %plugin.loaded(),
            "plugin loaded"
        );
        let mut slots = self.lock();
        let slot = slots
            .entry(path.to_path_buf())
            .or_insert_with(|| Arc::new(ArcSwap::new(plugin)));
        Ok(slot.clone())
    }

    /// Forgets the slots of files no subscription uses any more (calls in flight keep their
    /// version alive); a file named again later is loaded afresh.
    pub(crate) fn retain(&self, in_use: impl Fn(&Path) -> bool) {
        self.lock().retain(|path, _| in_use(path));
    }

    /// Every slot with its file, for metrics.
    pub(crate) fn versions(&self) -> Vec<(String, String)> {
        self.lock()
            .values()
            .map(|slot| {
                let p = slot.load();
                (p.name().to_string(), p.sha256().to_string())
            })
            .collect()
    }

    /// The file name and short sha256 of the version of `path` serving now, if it is loaded;
    /// never loads it.
    pub(crate) fn version_of(&self, path: &Path) -> Option<(String, String)> {
        let slot = self.get(path)?;
        let p = slot.load();
        Some((p.name().to_string(), p.short_sha().to_string()))
    }

    fn get(&self, path: &Path) -> Option<Arc<ArcSwap<Plugin>>> {
        self.lock().get(path).cloned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Slots> {
        // A panic while holding this lock cannot leave the map half-updated; keep going.
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn paths(&self) -> Vec<PathBuf> {
        self.lock().keys().cloned().collect()
    }

    /// Re-reads `path` and swaps in the new version when it differs and is valid. Returns the
    /// new version, or None when the bytes were unchanged or nothing uses the file. Counts and
    /// logs the outcome.
    pub(crate) async fn reload(&self, path: &Path) -> Result<Option<Arc<Plugin>>, ReloadError> {
        let _loading = self.loading.lock().await;
        self.reload_logged(path, true).await
    }

    /// Checks every file in use by its hash and swaps in what changed: for SIGHUP, and for
    /// filesystems that send no events.
    pub(crate) async fn recheck(&self) {
        let _ = self.sweep(&[]).await;
    }

    /// `reload` without taking `loading`; an unchanged file is counted and logged only with
    /// `count_unchanged` (sweeps check every file, most of them unchanged).
    async fn reload_logged(
        &self,
        path: &Path,
        count_unchanged: bool,
    ) -> Result<Option<Arc<Plugin>>, ReloadError> {
        let Some(slot) = self.get(path) else {
            return Ok(None);
        };
        let before = slot.load_full();
        let result = self.try_reload(path, &slot).await;
        match &result {
            Ok(Some(new)) => {
                self.stats.ok.fetch_add(1, Ordering::Relaxed);
                info!(
                    plugin = new.name(),
                    version = new.short_sha(),
                    previous = before.short_sha(),
                    "plugin reloaded"
                );
            }
            Ok(None) => {
                if count_unchanged {
                    self.stats.unchanged.fetch_add(1, Ordering::Relaxed);
                    debug!(
                        plugin = before.name(),
                        version = before.short_sha(),
                        "plugin file touched, bytes unchanged"
                    );
                }
            }
            Err(err) => {
                self.stats.failed.fetch_add(1, Ordering::Relaxed);
                warn!(
                    plugin = before.name(),
                    version = before.short_sha(),
                    "plugin not reloaded, the running version keeps serving: {err}"
                );
            }
        }
        result
    }

    async fn try_reload(
        &self,
        path: &Path,
        slot: &ArcSwap<Plugin>,
    ) -> Result<Option<Arc<Plugin>>, ReloadError> {
        let runtime = self.runtime.clone();
        let owned = path.to_path_buf();
        // Reading is bounded by max_plugin_size and refuses foreign files after four bytes;
        // reading and hashing stay off the async workers like compiling does.
        let read = tokio::task::spawn_blocking(move || {
            runtime.read_file(&owned).map(|bytes| {
                let sha = hex::encode(Sha256::digest(&bytes));
                (bytes, sha)
            })
        })
        .await
        .map_err(|e| ReloadError::Invalid(format!("read task failed: {e}")))?;
        let (bytes, sha) = match read {
            Ok(read) => read,
            Err(LoadError::Io { error, .. }) if error.kind() == std::io::ErrorKind::NotFound => {
                return Err(ReloadError::Deleted(path.display().to_string()));
            }
            Err(LoadError::Io { error, .. }) => {
                return Err(ReloadError::Read {
                    path: path.display().to_string(),
                    reason: error.to_string(),
                });
            }
            Err(refused) => return Err(ReloadError::Invalid(refused.to_string())),
        };
        if sha == slot.load().sha256() {
            return Ok(None);
        }
        let runtime = self.runtime.clone();
        let name = file_name(path);
        // Compiling takes milliseconds to seconds: keep it off the async workers.
        let compiled = tokio::task::spawn_blocking(move || runtime.load_bytes(&name, &bytes))
            .await
            .map_err(|e| ReloadError::Invalid(format!("compile task failed: {e}")))?
            .map_err(|e| ReloadError::Invalid(format!("{e:#}")))?;
        slot.store(compiled.clone());
        Ok(Some(compiled))
    }

    /// Checks every file in use; unchanged ones are skipped quietly. Returns whether a file
    /// could not be read (out of descriptors, say), which is worth another try later.
    async fn sweep(&self, except: &[PathBuf]) -> bool {
        let _loading = self.loading.lock().await;
        let mut unreadable = false;
        // Listed under the lock, so a slot being created meanwhile is included.
        for path in self.paths() {
            if !except.contains(&path) {
                let result = self.reload_logged(&path, false).await;
                unreadable |= matches!(result, Err(ReloadError::Read { .. }));
            }
        }
        unreadable
    }
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}
