//! Hot reload: watches the plugins folder and the config file, swaps plugin versions atomically,
//! and tells the service when worker.toml changed.
//!
//! Calls already running keep the `Arc<Plugin>` they started with; new calls load the new one.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use notify::RecursiveMode;
use notify_debouncer_full::{DebounceEventResult, new_debouncer};
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use crate::plugin::{Plugin, Runtime};

/// What a reload attempt came to.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReloadError {
    /// The file is gone; the last version keeps serving.
    #[error("{0} was deleted; keeping the running version")]
    Deleted(String),
    /// The file could not be read.
    #[error("cannot read {path}: {reason}")]
    Read { path: String, reason: String },
    /// The new bytes do not make a valid plugin; the last version keeps serving.
    #[error("{0}")]
    Invalid(String),
}

/// Counters of reload results, for metrics.
#[derive(Debug, Default)]
pub struct ReloadStats {
    /// New versions swapped in.
    pub ok: AtomicU64,
    /// Changes refused (bad file, deleted, unreadable).
    pub failed: AtomicU64,
    /// Events whose bytes matched the running version.
    pub unchanged: AtomicU64,
}

/// The plugin versions in use, one slot per plugin file; shared by the subscriptions that name it.
#[derive(Clone)]
pub struct PluginSet {
    runtime: Runtime,
    slots: Arc<Mutex<HashMap<PathBuf, Arc<ArcSwap<Plugin>>>>>,
    /// Reload outcomes so far.
    pub stats: Arc<ReloadStats>,
}

/// What a watched change means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// worker.toml changed.
    Config,
}

impl PluginSet {
    /// An empty set compiling with `runtime`.
    pub fn new(runtime: Runtime) -> PluginSet {
        PluginSet {
            runtime,
            slots: Arc::default(),
            stats: Arc::default(),
        }
    }

    /// The slot for `path`, loading the file the first time it is named.
    pub async fn slot(&self, path: &Path) -> anyhow::Result<Arc<ArcSwap<Plugin>>> {
        if let Some(slot) = self.get(path) {
            return Ok(slot);
        }
        let plugin = crate::service::load_plugin(&self.runtime, path).await?;
        info!(plugin = plugin.name(), version = plugin.short_sha(), "plugin loaded");
        let mut slots = self.lock();
        let slot = slots
            .entry(path.to_path_buf())
            .or_insert_with(|| Arc::new(ArcSwap::new(plugin)));
        Ok(slot.clone())
    }

    /// Every slot with its file, for metrics.
    pub fn versions(&self) -> Vec<(String, String)> {
        self.lock()
            .values()
            .map(|slot| {
                let p = slot.load();
                (p.name().to_string(), p.sha256().to_string())
            })
            .collect()
    }

    fn get(&self, path: &Path) -> Option<Arc<ArcSwap<Plugin>>> {
        self.lock().get(path).cloned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<PathBuf, Arc<ArcSwap<Plugin>>>> {
        // A panic while holding this lock cannot leave the map half-updated; keep going.
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Re-reads `path` and swaps in the new version when it differs and is valid. Returns the
    /// new version, or None when the bytes were unchanged or nothing uses the file.
    pub async fn reload(&self, path: &Path) -> Result<Option<Arc<Plugin>>, ReloadError> {
        let Some(slot) = self.get(path) else {
            return Ok(None);
        };
        let result = self.try_reload(path, &slot).await;
        let counter = match &result {
            Ok(Some(_)) => &self.stats.ok,
            Ok(None) => &self.stats.unchanged,
            Err(_) => &self.stats.failed,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        result
    }

    async fn try_reload(
        &self,
        path: &Path,
        slot: &ArcSwap<Plugin>,
    ) -> Result<Option<Arc<Plugin>>, ReloadError> {
        let bytes = match tokio::fs::read(path).await {
            Ok(bytes) => bytes,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                return Err(ReloadError::Deleted(path.display().to_string()));
            }
            Err(err) => {
                return Err(ReloadError::Read {
                    path: path.display().to_string(),
                    reason: err.to_string(),
                });
            }
        };
        let sha = hex::encode(Sha256::digest(&bytes));
        if sha == slot.load().sha256() {
            return Ok(None);
        }
        let runtime = self.runtime.clone();
        let name = file_name(path);
        let compiled = tokio::task::spawn_blocking(move || runtime.load_bytes(&name, &bytes))
            .await
            .map_err(|e| ReloadError::Invalid(format!("compile task failed: {e}")))?
            .map_err(|e| ReloadError::Invalid(format!("{e:#}")))?;
        slot.store(compiled.clone());
        Ok(Some(compiled))
    }

    fn paths(&self) -> Vec<PathBuf> {
        self.lock().keys().cloned().collect()
    }
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

/// Keeps the watcher alive; dropping it stops watching.
pub struct Watcher {
    _debouncer: notify_debouncer_full::Debouncer<
        notify::RecommendedWatcher,
        notify_debouncer_full::RecommendedCache,
    >,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// How long a burst of file events must be quiet before it is acted on: long enough for an
/// editor's write-temp-then-rename, short enough for the 500 ms reload target.
const DEBOUNCE: Duration = Duration::from_millis(100);

/// Watches the plugins folder and the config file's folder (the directories, so renames and
/// re-creations are seen). Plugin changes are applied here; config changes go to `changes`.
pub fn watch(
    plugins_dir: &Path,
    config_path: &Path,
    plugins: PluginSet,
    changes: mpsc::Sender<Change>,
) -> anyhow::Result<Watcher> {
    let (tx, mut rx) = mpsc::unbounded_channel::<DebounceEventResult>();
    let mut debouncer = new_debouncer(DEBOUNCE, None, move |result| {
        let _ = tx.send(result);
    })?;
    let plugins_dir = std::fs::canonicalize(plugins_dir).unwrap_or_else(|_| plugins_dir.to_path_buf());
    debouncer.watch(&plugins_dir, RecursiveMode::NonRecursive)?;
    let config_path = absolute(config_path);
    if let Some(config_dir) = config_path.parent() {
        if config_dir != plugins_dir {
            debouncer.watch(config_dir, RecursiveMode::NonRecursive)?;
        }
    }
    let task = tokio::spawn(async move {
        while let Some(result) = rx.recv().await {
            let events = match result {
                Ok(events) => events,
                Err(errors) => {
                    for err in errors {
                        warn!("file watcher: {err}");
                    }
                    continue;
                }
            };
            let mut touched: Vec<PathBuf> = events
                .iter()
                .filter(|e| !e.kind.is_access())
                .flat_map(|e| e.paths.iter().cloned())
                .collect();
            touched.sort();
            touched.dedup();
            let known = plugins.paths();
            for path in touched {
                if path == config_path {
                    let _ = changes.send(Change::Config).await;
                    continue;
                }
                let Some(slot_path) = known.iter().find(|k| same_file(k, &path)) else {
                    continue;
                };
                match plugins.reload(slot_path).await {
                    Ok(Some(new)) => info!(plugin = new.name(), version = new.short_sha(), "plugin reloaded"),
                    Ok(None) => debug!(path = %path.display(), "plugin file touched, bytes unchanged"),
                    Err(ReloadError::Deleted(p)) => warn!("plugin {p} was deleted; keeping the running version"),
                    Err(err) => warn!("plugin not reloaded, the running version keeps serving: {err}"),
                }
            }
        }
    });
    Ok(Watcher {
        _debouncer: debouncer,
        task,
    })
}

fn absolute(path: &Path) -> PathBuf {
    if let (Some(dir), Some(name)) = (path.parent(), path.file_name()) {
        let dir = if dir.as_os_str().is_empty() { Path::new(".") } else { dir };
        if let Ok(dir) = std::fs::canonicalize(dir) {
            return dir.join(name);
        }
    }
    path.to_path_buf()
}

fn same_file(slot: &Path, event: &Path) -> bool {
    slot == event || absolute(slot) == event
}
