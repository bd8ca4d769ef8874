//! The progress of `failed replay` and `failed discard` on the command line: a bar on stderr
//! when it is a terminal (indicatif), and plain log lines otherwise, so a pipe, a file or the
//! journal gets no control codes and `--log-format json` stays one object per line. Ctrl-C
//! stops the action between batches; a second one exits at once.

use std::future::Future;
use std::io::IsTerminal as _;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tokio_util::sync::CancellationToken;

use crate::failed::Progress;

/// The `tracing` target of the progress lines; main always enables it at info.
pub const PROGRESS_TARGET: &str = "worker_host::progress";
/// At most one progress line this often, besides the first and the last of each queue.
const EVERY: Duration = Duration::from_secs(1);

/// Progress on stderr: a bar or lines.
pub(super) struct Shown {
    verb: &'static str,
    bar: Option<ProgressBar>,
    lines: Mutex<Lines>,
}

/// The figures of the walk under way, for the lines (and the bar's message).
struct Lines {
    failed: String,
    total: u64,
    examined: u64,
    done: u64,
    started: Instant,
    logged: Instant,
}

impl Shown {
    /// `verb`: what is being done (`replay`, `discard`); a bar if stderr is a terminal.
    pub(super) fn new(verb: &'static str) -> Shown {
        // Hidden until a walk begins and says how long it is.
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::hidden();
            // The template is a constant; it parses.
            if let Ok(style) =
                ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} looked at, {eta} left")
            {
                bar.set_style(style.progress_chars("=> "));
            }
            bar
        });
        let now = Instant::now();
        Shown {
            verb,
            bar,
            lines: Mutex::new(Lines {
                failed: String::new(),
                total: 0,
                examined: 0,
                done: 0,
                started: now,
                logged: now,
            }),
        }
    }

    fn past(&self) -> &'static str {
        if self.verb == "replay" {
            "moved"
        } else {
            "removed"
        }
    }

    /// Clears the bar, or logs where a walk stopped short; the line of what was done follows
    /// on stdout.
    pub(super) fn finish(&self) {
        match &self.bar {
            Some(bar) => bar.finish_and_clear(),
            None => {
                let lines = self.lines.lock().unwrap_or_else(PoisonError::into_inner);
                if lines.examined < lines.total {
                    self.log(&lines);
                }
            }
        }
    }

    fn log(&self, lines: &Lines) {
        let elapsed = lines.started.elapsed().as_secs_f64();
        let rate = if elapsed > 0.0 {
            (lines.examined as f64 / elapsed).round()
        } else {
            0.0
        };
        let left = lines.total.saturating_sub(lines.examined);
        let eta_seconds = if rate > 0.0 {
            (left as f64 / rate).ceil()
        } else {
            0.0
        };
        let (verb, queue, past) = (self.verb, lines.failed.as_str(), self.past());
        let (examined, total, done) = (lines.examined, lines.total, lines.done);
        let text = if examined == 0 {
            format!("{verb} {queue}: {total} messages to look at")
        } else {
            format!(
                "{verb} {queue}: {examined} of {total} looked at, {done} {past}, {rate}/s, \
                 about {eta_seconds}s left"
            )
        };
        tracing::info!(
            target: PROGRESS_TARGET,
            queue,
            examined,
            total,
            done,
            rate,
            eta_seconds,
            "{text}"
        );
    }
}

impl Progress for Shown {
    fn begin(&self, failed: &str, total: u64) {
        let mut lines = self.lines.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        *lines = Lines {
            failed: failed.to_string(),
            total,
            examined: 0,
            done: 0,
            started: now,
            logged: now,
        };
        match &self.bar {
            Some(bar) => {
                bar.reset();
                bar.set_length(total);
                bar.set_message(format!("{} {failed}", self.verb));
                bar.set_draw_target(ProgressDrawTarget::stderr());
            }
            None => self.log(&lines),
        }
    }

    fn advance(&self, examined: u64, done: u64) {
        let mut lines = self.lines.lock().unwrap_or_else(PoisonError::into_inner);
        lines.examined += examined;
        lines.done += done;
        match &self.bar {
            Some(bar) => {
                let rate = lines.examined as f64 / lines.started.elapsed().as_secs_f64().max(0.001);
                bar.set_message(format!(
                    "{} {}: {} {}, {rate:.0}/s",
                    self.verb,
                    lines.failed,
                    lines.done,
                    self.past()
                ));
                bar.inc(examined);
            }
            None => {
                let last = lines.examined >= lines.total;
                if examined > 0 && (last || lines.logged.elapsed() >= EVERY) {
                    lines.logged = Instant::now();
                    self.log(&lines);
                }
            }
        }
    }
}

/// Runs `work` until it ends; the first Ctrl-C cancels `cancel` (the action stops after its
/// batch under way and returns), a second one exits at once (exit 130), leaving what the broker
/// had not confirmed where it was.
pub(super) async fn until_interrupted<T>(
    work: impl Future<Output = T>,
    cancel: &CancellationToken,
) -> T {
    tokio::pin!(work);
    tokio::select! {
        out = &mut work => return out,
        Ok(()) = tokio::signal::ctrl_c() => {
            tracing::warn!("interrupted: stopping after the batch under way (Ctrl-C again to quit now)");
            cancel.cancel();
        }
    }
    tokio::select! {
        out = &mut work => out,
        Ok(()) = tokio::signal::ctrl_c() => std::process::exit(130),
    }
}
