//! Watching the plugins folder and the config file's folder: file events become plugin reloads
//! and config changes. A watched folder that is deleted and recreated (or replaced by a rename or
//! a symlink swap) is watched again, and reads that failed (out of descriptors, say) are retried.

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use notify::RecursiveMode;
use notify_debouncer_full::{
    DebounceEventResult, DebouncedEvent, Debouncer, RecommendedCache, new_debouncer,
};
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;
use tracing::{info, warn};

use super::{Change, PluginSet, ReloadError};

/// How long a burst of file events must be quiet before it is acted on: long enough for an
/// editor's write-temp-then-rename or a `cp` of a plugin, short enough for the 500 ms target.
const DEBOUNCE: Duration = Duration::from_millis(100);
/// How often the watched folders are checked for having been replaced: inotify watches a folder,
/// not its path, and says nothing when a new folder appears under the old name.
const CHECK_EVERY: Duration = Duration::from_millis(500);
/// First and longest wait before reading files again that could not be read.
const RETRY_FIRST: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(30);

type FileDebouncer = Debouncer<notify::RecommendedWatcher, RecommendedCache>;

/// Keeps the watcher alive; dropping it stops watching.
pub(crate) struct Watcher {
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Watches the plugins folder and the config file's folder (the folders, so renames and
/// re-creations of files are seen). Plugin changes are applied here; config changes go to
/// `changes`.
pub(crate) fn watch(
    plugins_dir: &Path,
    config_path: &Path,
    plugins: PluginSet,
    changes: mpsc::Sender<Change>,
) -> anyhow::Result<Watcher> {
    let (tx, rx) = mpsc::unbounded_channel::<DebounceEventResult>();
    let mut debouncer = new_debouncer(DEBOUNCE, None, move |result| {
        let _ = tx.send(result);
    })?;
    let plugins_dir = Folder::new(plugins_dir);
    debouncer.watch(&plugins_dir.watched, RecursiveMode::NonRecursive)?;
    let config_name = config_path
        .file_name()
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("worker.toml"));
    let config_dir = match config_path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let config_dir = Some(Folder::new(config_dir)).filter(|dir| dir.watched != plugins_dir.watched);
    if let Some(dir) = &config_dir {
        debouncer.watch(&dir.watched, RecursiveMode::NonRecursive)?;
    }
    let mut state = State {
        debouncer,
        plugins_dir,
        config_dir,
        config_name,
        config_digest: None,
        config_unreadable: false,
        plugins,
        changes,
        retry: None,
    };
    state.config_digest = digest_of(&state.config_path()).ok();
    let task = tokio::spawn(state.run(rx));
    Ok(Watcher { task })
}

/// A watched folder: where the config says it is, and which folder is watched there now.
struct Folder {
    /// As configured (relative, or through symlinks): the name that must stay watched.
    configured: PathBuf,
    /// The canonical path the watcher was given; file events carry it as their prefix.
    watched: PathBuf,
    /// Device and inode of the folder watched; None while it is missing.
    identity: Option<(u64, u64)>,
    /// The watcher said the folder itself was removed or moved: watch again even if a new one
    /// got the same inode.
    lost: bool,
    /// The last error watching it again, so a lasting one is logged once.
    last_error: Option<String>,
}

impl Folder {
    fn new(configured: &Path) -> Folder {
        Folder {
            configured: configured.to_path_buf(),
            watched: std::fs::canonicalize(configured).unwrap_or_else(|_| configured.to_path_buf()),
            identity: identity(configured),
            lost: false,
            last_error: None,
        }
    }

    /// Whether the folder found under the configured name is not the one watched.
    fn replaced(&self) -> bool {
        self.lost || identity(&self.configured) != self.identity
    }

    /// Notes an event about the folder itself leaving (deleted, or renamed away).
    fn note(&mut self, event: &notify::Event) {
        let leaves = event.kind.is_remove()
            || matches!(
                event.kind,
                notify::EventKind::Modify(notify::event::ModifyKind::Name(_))
            );
        if leaves && event.paths.contains(&self.watched) {
            self.lost = true;
        }
    }

    /// Drops the old watch and watches what is there now. Ok(false): nothing is there (yet).
    fn rewatch(&mut self, debouncer: &mut FileDebouncer) -> notify::Result<bool> {
        // The old folder may still exist elsewhere (renamed away): stop hearing about it.
        let _ = debouncer.unwatch(&self.watched);
        self.identity = None;
        self.lost = false;
        let Some(now) = identity(&self.configured) else {
            return Ok(false);
        };
        let canonical =
            std::fs::canonicalize(&self.configured).unwrap_or_else(|_| self.configured.clone());
        debouncer.watch(&canonical, RecursiveMode::NonRecursive)?;
        self.watched = canonical;
        // Replaced again meanwhile? Then the next check sees a different identity.
        self.identity = Some(now);
        Ok(true)
    }
}

fn identity(path: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(path)
        .ok()
        .filter(|m| m.is_dir())
        .map(|m| (m.dev(), m.ino()))
}

/// When to read the plugin files again after some could not be read.
struct Retry {
    at: Instant,
    delay: Duration,
}

/// The watching task.
struct State {
    debouncer: FileDebouncer,
    plugins_dir: Folder,
    /// None when worker.toml lives in the plugins folder.
    config_dir: Option<Folder>,
    config_name: PathBuf,
    config_digest: Option<[u8; 32]>,
    /// worker.toml could not be read (other than missing): read it again at the next check.
    config_unreadable: bool,
    plugins: PluginSet,
    changes: mpsc::Sender<Change>,
    retry: Option<Retry>,
}

/// The service stopped listening for config changes: stop watching.
struct Closed;

impl State {
    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<DebounceEventResult>) {
        // A file replaced between the first load and the start of watching is caught here.
        let unreadable = self.plugins.sweep(&[]).await;
        self.schedule_retry(unreadable);
        let mut tick = tokio::time::interval(CHECK_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let flow = tokio::select! {
                result = rx.recv() => match result {
                    Some(result) => self.on_events(result).await,
                    None => return,
                },
                _ = tick.tick() => self.on_tick().await,
            };
            if flow.is_err() {
                return;
            }
        }
    }

    fn config_watched(&self) -> &Path {
        self.config_dir
            .as_ref()
            .unwrap_or(&self.plugins_dir)
            .watched
            .as_path()
    }

    fn config_path(&self) -> PathBuf {
        self.config_watched().join(&self.config_name)
    }

    /// A debounced burst of file events: a folder that left is watched again, worker.toml is
    /// checked for new content, and the plugins whose files were touched are reloaded.
    async fn on_events(&mut self, result: DebounceEventResult) -> Result<(), Closed> {
        let events = match result {
            Ok(events) => events,
            Err(errors) => {
                for err in errors {
                    warn!("file watcher: {err}");
                }
                return Ok(());
            }
        };
        let touched = touched_paths(&events);
        self.note_lost_folders(&events).await?;

        // worker.toml: any change in its folder counts (a Kubernetes ConfigMap swaps a `..data`
        // symlink and never touches the file's own name), but only new content triggers a reload.
        let config_dir = self.config_watched().to_path_buf();
        if touched
            .iter()
            .any(|p| p.parent() == Some(config_dir.as_path()))
        {
            self.check_config()?;
        }

        self.reload_touched_plugins(&touched).await;
        Ok(())
    }

    /// A watched folder itself deleted or moved: act now rather than at the next check.
    async fn note_lost_folders(&mut self, events: &[DebouncedEvent]) -> Result<(), Closed> {
        for event in events {
            self.plugins_dir.note(event);
            if let Some(dir) = self.config_dir.as_mut() {
                dir.note(event);
            }
        }
        if self.plugins_dir.lost || self.config_dir.as_ref().is_some_and(|d| d.lost) {
            self.check_folders().await?;
        }
        Ok(())
    }

    /// Reloads each plugin in use whose file was touched; any other file touched in the plugins
    /// folder means a sweep. Unreadable files are read again later.
    async fn reload_touched_plugins(&mut self, touched: &[PathBuf]) {
        let (direct, unnamed) = self.touched_plugins(touched);
        let mut unreadable = false;
        for path in &direct {
            let result = self.plugins.reload(path).await;
            unreadable |= matches!(result, Err(ReloadError::Read { .. }));
        }
        if unnamed {
            // A temp file, a new plugin nobody uses yet, or a symlink swap: cheap to check every
            // file in use by its hash.
            unreadable |= self.plugins.sweep(&direct).await;
        }
        if unreadable && self.retry.is_none() {
            self.schedule_retry(true);
        }
    }

    /// The plugin files in use among `touched` (each once, as its slot names it), and whether
    /// another file of the plugins folder was touched too. worker.toml is neither.
    fn touched_plugins(&self, touched: &[PathBuf]) -> (Vec<PathBuf>, bool) {
        let config_path = self.config_path();
        let known = self.plugins.paths();
        let mut direct = Vec::new();
        let mut unnamed = false;
        for path in touched
            .iter()
            .filter(|p| p.parent() == Some(self.plugins_dir.watched.as_path()))
        {
            if *path == config_path {
                continue;
            }
            match known.iter().find(|k| same_file(k, path)) {
                Some(slot_path) if !direct.contains(slot_path) => direct.push(slot_path.clone()),
                Some(_) => {}
                None => unnamed = true,
            }
        }
        (direct, unnamed)
    }

    async fn on_tick(&mut self) -> Result<(), Closed> {
        self.check_folders().await?;
        if self.config_unreadable {
            self.check_config()?;
        }
        if self.retry.as_ref().is_some_and(|r| Instant::now() >= r.at) {
            let unreadable = self.plugins.sweep(&[]).await;
            self.schedule_retry(unreadable);
        }
        Ok(())
    }

    /// Watches again every folder that was replaced; after that, every file in it is checked,
    /// since what was written before the new watch produced no event.
    async fn check_folders(&mut self) -> Result<(), Closed> {
        let mut renewed = false;
        for (what, folder) in [
            ("plugins folder", Some(&mut self.plugins_dir)),
            ("config folder", self.config_dir.as_mut()),
        ] {
            let Some(folder) = folder else { continue };
            if !folder.replaced() {
                continue;
            }
            let was_there = folder.identity.is_some();
            match folder.rewatch(&mut self.debouncer) {
                Ok(true) => {
                    info!(folder = %folder.configured.display(), "{what} replaced; watching the new one");
                    folder.last_error = None;
                    renewed = true;
                }
                Ok(false) if was_there => warn!(
                    folder = %folder.configured.display(),
                    "{what} is gone; the running versions keep serving, and it is watched again \
                     once it is back"
                ),
                Ok(false) => {}
                Err(err) => {
                    // Tried again at the next check (its identity is unknown now).
                    let text = err.to_string();
                    if folder.last_error.as_ref() != Some(&text) {
                        warn!(folder = %folder.configured.display(), "cannot watch the {what}: {text}; trying again");
                        folder.last_error = Some(text);
                    }
                }
            }
        }
        if renewed {
            self.check_config()?;
            let unreadable = self.plugins.sweep(&[]).await;
            self.schedule_retry(unreadable);
        }
        Ok(())
    }

    /// Tells the service when worker.toml has new content.
    fn check_config(&mut self) -> Result<(), Closed> {
        let path = self.config_path();
        let digest = match digest_of(&path) {
            Ok(digest) => digest,
            // Mid-swap or deleted: the file that appears next brings its own event.
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(err) => {
                if !self.config_unreadable {
                    warn!(
                        "cannot read {} to see whether it changed: {err}; trying again",
                        path.display()
                    );
                }
                self.config_unreadable = true;
                return Ok(());
            }
        };
        self.config_unreadable = false;
        if self.config_digest == Some(digest) {
            return Ok(());
        }
        self.config_digest = Some(digest);
        match self.changes.try_send(Change::Config) {
            // Full: a reload is already queued and will read the newest file.
            Ok(()) | Err(mpsc::error::TrySendError::Full(_)) => Ok(()),
            Err(mpsc::error::TrySendError::Closed(_)) => Err(Closed),
        }
    }

    /// After a sweep: another one later if some file could not be read, backing off.
    fn schedule_retry(&mut self, unreadable: bool) {
        self.retry = unreadable.then(|| {
            let delay = self
                .retry
                .as_ref()
                .map_or(RETRY_FIRST, |r| (r.delay * 2).min(RETRY_MAX));
            Retry {
                at: Instant::now() + delay,
                delay,
            }
        });
    }
}

/// Every path the events name, sorted and once each; accesses are no change.
fn touched_paths(events: &[DebouncedEvent]) -> Vec<PathBuf> {
    let mut touched: Vec<PathBuf> = events
        .iter()
        .filter(|e| !e.kind.is_access())
        .flat_map(|e| e.paths.iter().cloned())
        .collect();
    touched.sort();
    touched.dedup();
    touched
}

/// SHA-256 of a file's bytes, streamed: worker.toml is never held in memory here, whatever its
/// size.
fn digest_of(path: &Path) -> std::io::Result<[u8; 32]> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    std::io::copy(&mut file, &mut hasher)?;
    Ok(hasher.finalize().into())
}

fn absolute(path: &Path) -> PathBuf {
    if let (Some(dir), Some(name)) = (path.parent(), path.file_name()) {
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        if let Ok(dir) = std::fs::canonicalize(dir) {
            return dir.join(name);
        }
    }
    path.to_path_buf()
}

fn same_file(slot: &Path, event: &Path) -> bool {
    slot == event || absolute(slot) == event
}
