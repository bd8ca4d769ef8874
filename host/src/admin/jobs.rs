//! The console's jobs: a replay or discard of many parked messages runs in the host, not in the
//! HTTP request, with its progress (messages looked at of the total, moved or removed, rate,
//! time left) kept for the page and a cancel that stops it between batches. The registry keeps
//! a bounded number of jobs; finished ones expire. Every job is a tracked task that stops on the
//! service's shutdown too, and writes one audit line when it starts and one when it ends.

use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use serde::Serialize;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::failed::{AUDIT_TARGET, Progress, Report, Watch};

/// Jobs kept, running and finished; past it the oldest finished one goes.
pub(crate) const MAX_KEPT: usize = 32;
/// Jobs running at once: each holds a broker connection and fetches as fast as the broker
/// answers.
pub(crate) const MAX_RUNNING: usize = 4;
/// How long a finished job stays to be looked at.
const KEEP_FINISHED: Duration = Duration::from_secs(3600);

/// What a job acts on: one queue's parked messages, or a failure group in every queue.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Target {
    Queue(String),
    Group(String),
}

/// Where a job is.
#[derive(Debug, Clone)]
enum State {
    Done,
    Cancelled,
    Failed(String),
}

/// The figures a job's progress adds up.
#[derive(Default)]
struct Figures {
    /// Messages each walk looks at, by failed queue (an estimate until the walk begins).
    totals: BTreeMap<String, u64>,
    examined: u64,
    done: u64,
}

/// One job: what it does, its progress, its cancel.
pub(crate) struct Job {
    pub(crate) id: String,
    action: &'static str,
    target: Target,
    started: Instant,
    started_at: SystemTime,
    cancel: CancellationToken,
    figures: Mutex<Figures>,
    end: Mutex<Option<(Instant, State, Vec<String>)>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding these leaves plain figures behind, still good to read.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Progress for Job {
    fn begin(&self, failed: &str, total: u64) {
        lock(&self.figures).totals.insert(failed.to_string(), total);
    }

    fn advance(&self, examined: u64, done: u64) {
        let mut figures = lock(&self.figures);
        figures.examined += examined;
        figures.done += done;
    }
}

impl Job {
    /// Its progress sink and cancel, for the `failed` action it runs.
    pub(crate) fn watch(&self) -> Watch<'_> {
        Watch {
            progress: self,
            cancel: &self.cancel,
        }
    }

    /// Asks it to stop before its next batch; false when it had ended already.
    pub(crate) fn cancel(&self) -> bool {
        if lock(&self.end).is_some() {
            return false;
        }
        self.cancel.cancel();
        true
    }

    fn finished(&self) -> Option<Instant> {
        lock(&self.end).as_ref().map(|(at, _, _)| *at)
    }

    fn finish(&self, result: anyhow::Result<Report>) -> State {
        let (state, missing) = match result {
            Ok(report) if report.cancelled => (State::Cancelled, report.missing),
            Ok(report) => (State::Done, report.missing),
            Err(err) => (State::Failed(format!("{err:#}")), Vec::new()),
        };
        *lock(&self.end) = Some((Instant::now(), state.clone(), missing));
        state
    }

    /// What the API shows of it.
    pub(crate) fn view(&self) -> View {
        let (total, examined, done) = {
            let f = lock(&self.figures);
            (f.totals.values().sum::<u64>(), f.examined, f.done)
        };
        let end = lock(&self.end).clone();
        let until = end.as_ref().map_or_else(Instant::now, |(at, _, _)| *at);
        let finished_at = end
            .as_ref()
            .map(|(at, _, _)| self.started_at + (*at - self.started));
        let elapsed = until.duration_since(self.started).as_secs_f64();
        let rate = if elapsed > 0.0 {
            examined as f64 / elapsed
        } else {
            0.0
        };
        let (state, error, missing) = match end {
            None if self.cancel.is_cancelled() => ("cancelling", None, Vec::new()),
            None => ("running", None, Vec::new()),
            Some((_, State::Done, m)) => ("done", None, m),
            Some((_, State::Cancelled, m)) => ("cancelled", None, m),
            Some((_, State::Failed(why), m)) => ("failed", Some(why), m),
        };
        let left = total.saturating_sub(examined);
        let running = matches!(state, "running" | "cancelling");
        let eta_seconds = (running && rate > 0.0).then(|| left as f64 / rate);
        View {
            id: self.id.clone(),
            action: self.action,
            target: self.target.clone(),
            state,
            error,
            total: total.max(examined),
            examined,
            done,
            missing,
            rate: (rate * 10.0).round() / 10.0,
            eta_seconds: eta_seconds.map(|s| (s * 10.0).round() / 10.0),
            elapsed_seconds: (elapsed * 10.0).round() / 10.0,
            started_at: rfc3339(self.started_at),
            finished_at: finished_at.map(rfc3339),
        }
    }
}

fn rfc3339(at: SystemTime) -> String {
    humantime::format_rfc3339_millis(at).to_string()
}

/// A job as `/api/jobs` shows it.
#[derive(Debug, Serialize)]
pub(crate) struct View {
    pub(crate) id: String,
    /// `replay` or `discard`.
    action: &'static str,
    /// `{"queue": Q}` or `{"group": G}`.
    target: Target,
    /// `running`, `cancelling`, `done`, `cancelled` or `failed`.
    pub(crate) state: &'static str,
    /// Why it failed.
    error: Option<String>,
    /// Messages its walks look at, at most (those parked when each began).
    total: u64,
    /// Messages looked at so far, selected or not.
    examined: u64,
    /// Messages moved back (replay) or removed (discard).
    done: u64,
    /// Ids asked for that no message had (once done).
    missing: Vec<String>,
    /// Messages looked at per second, on average since it started.
    rate: f64,
    /// Seconds left at that rate, while it runs.
    eta_seconds: Option<f64>,
    elapsed_seconds: f64,
    started_at: String,
    finished_at: Option<String>,
}

/// Why a job was not started.
#[derive(Debug, thiserror::Error)]
#[error(
    "busy: {MAX_RUNNING} jobs are running, the most at once; cancel one or wait until one ends"
)]
pub(crate) struct Busy;

/// The registry of jobs, shared by the API's handlers.
#[derive(Clone)]
pub(crate) struct Jobs {
    inner: Arc<Inner>,
}

struct Inner {
    jobs: Mutex<VecDeque<Arc<Job>>>,
    next: AtomicU64,
    tasks: TaskTracker,
    /// The service's: cancelled at shutdown, it stops every job.
    cancel: CancellationToken,
}

impl Jobs {
    /// An empty registry whose jobs stop when `cancel` is cancelled.
    pub(crate) fn new(cancel: CancellationToken) -> Jobs {
        Jobs {
            inner: Arc::new(Inner {
                jobs: Mutex::new(VecDeque::new()),
                next: AtomicU64::new(1),
                tasks: TaskTracker::new(),
                cancel,
            }),
        }
    }

    /// Starts `run` as a job on `target`, handing it the job (its progress and cancel).
    /// `depths`: the messages in each failed queue it will walk, by name, as counted before;
    /// each walk replaces its queue's count when it begins.
    pub(crate) fn start<F, Fut>(
        &self,
        (action, target): (&'static str, Target),
        depths: BTreeMap<String, u64>,
        run: F,
    ) -> Result<Arc<Job>, Busy>
    where
        F: FnOnce(Arc<Job>) -> Fut,
        Fut: Future<Output = anyhow::Result<Report>> + Send + 'static,
    {
        let mut jobs = lock(&self.inner.jobs);
        prune(&mut jobs, Instant::now());
        if jobs.iter().filter(|j| j.finished().is_none()).count() >= MAX_RUNNING {
            return Err(Busy);
        }
        let n = self.inner.next.fetch_add(1, Ordering::Relaxed);
        let job = Arc::new(Job {
            id: job_id(n),
            action,
            target,
            started: Instant::now(),
            started_at: SystemTime::now(),
            cancel: self.inner.cancel.child_token(),
            figures: Mutex::new(Figures {
                totals: depths,
                ..Figures::default()
            }),
            end: Mutex::default(),
        });
        jobs.push_back(job.clone());
        drop(jobs);
        audit_start(&job);
        let work = run(job.clone());
        let ran = job.clone();
        self.inner.tasks.spawn(async move {
            let result = work.await;
            let state = ran.finish(result);
            audit_end(&ran, &state);
        });
        Ok(job)
    }

    /// Every job kept, newest first.
    pub(crate) fn list(&self) -> Vec<Arc<Job>> {
        let mut jobs = lock(&self.inner.jobs);
        prune(&mut jobs, Instant::now());
        jobs.iter().rev().cloned().collect()
    }

    pub(crate) fn get(&self, id: &str) -> Option<Arc<Job>> {
        self.list().into_iter().find(|j| j.id == id)
    }

    /// Waits until every job has stopped (they stop on the service's token).
    pub(crate) async fn wait(&self) {
        self.inner.tasks.close();
        self.inner.tasks.wait().await;
    }
}

/// A job id that a restarted host does not hand out again: the start time and a count.
fn job_id(n: u64) -> String {
    static BOOT: std::sync::LazyLock<u64> = std::sync::LazyLock::new(|| {
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
    });
    format!("j-{:x}-{n}", *BOOT)
}

/// Drops finished jobs older than `KEEP_FINISHED`, then the oldest finished ones past
/// `MAX_KEPT`; running jobs stay (there are at most `MAX_RUNNING`).
fn prune(jobs: &mut VecDeque<Arc<Job>>, now: Instant) {
    jobs.retain(|j| j.finished().is_none_or(|at| now - at < KEEP_FINISHED));
    while jobs.len() > MAX_KEPT {
        let Some(oldest) = jobs.iter().position(|j| j.finished().is_some()) else {
            break;
        };
        jobs.remove(oldest);
    }
}

fn target_fields(job: &Job) -> (&str, &str) {
    match &job.target {
        Target::Queue(q) => (q.as_str(), ""),
        Target::Group(g) => ("", g.as_str()),
    }
}

fn audit_start(job: &Job) {
    let (queue, group) = target_fields(job);
    let total = job.view().total;
    let (id, action) = (job.id.as_str(), job.action);
    tracing::info!(target: AUDIT_TARGET, job = id, action, queue, group, total, who = "console", "job started");
}

fn audit_end(job: &Job, state: &State) {
    let (queue, group) = target_fields(job);
    let view = job.view();
    let (id, action, done, examined) = (job.id.as_str(), job.action, view.done, view.examined);
    let elapsed = view.elapsed_seconds;
    match state {
        State::Failed(error) => tracing::warn!(
            target: AUDIT_TARGET, job = id, action, queue, group, done, examined,
            elapsed, error = error.as_str(), "job failed; the messages not reached are still parked"
        ),
        _ => tracing::info!(
            target: AUDIT_TARGET, job = id, action, queue, group, done, examined, elapsed,
            cancelled = matches!(state, State::Cancelled), "job ended"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A job that reports `n` walks of 100 and then waits for its cancel.
    fn start(jobs: &Jobs, n: u64) -> Result<Arc<Job>, Busy> {
        let depths = BTreeMap::from([("q@failed".to_string(), 1000)]);
        jobs.start(
            ("replay", Target::Queue("q".into())),
            depths,
            move |job| async move {
                job.begin("q@failed", 400);
                job.advance(n * 100, n * 100);
                job.cancel.cancelled().await;
                Ok(Report {
                    done: n * 100,
                    cancelled: true,
                    ..Report::default()
                })
            },
        )
    }

    async fn ended(job: &Job) -> View {
        for _ in 0..200 {
            let view = job.view();
            if !matches!(view.state, "running" | "cancelling") {
                return view;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("the job never ended")
    }

    #[tokio::test]
    async fn a_job_shows_its_progress_and_stops_on_cancel() {
        let jobs = Jobs::new(CancellationToken::new());
        let job = start(&jobs, 1).expect("started");
        tokio::time::sleep(Duration::from_millis(20)).await;
        let view = job.view();
        assert_eq!(
            (view.state, view.total, view.examined),
            ("running", 400, 100)
        );
        assert!(view.rate > 0.0 && view.eta_seconds.is_some(), "{view:?}");
        assert!(job.cancel());
        let view = ended(&job).await;
        assert_eq!(
            (view.state, view.done, view.eta_seconds),
            ("cancelled", 100, None)
        );
        assert!(view.finished_at.is_some());
        assert!(!job.cancel(), "an ended job");
        assert_eq!(
            jobs.get(&job.id).map(|j| j.id.clone()),
            Some(job.id.clone())
        );
    }

    #[tokio::test]
    async fn at_most_a_few_run_and_the_service_stops_them_all() {
        let service = CancellationToken::new();
        let jobs = Jobs::new(service.clone());
        let running: Vec<_> = (0..MAX_RUNNING as u64)
            .map(|n| start(&jobs, n).expect("started"))
            .collect();
        assert!(start(&jobs, 9).is_err(), "one too many");
        service.cancel();
        jobs.wait().await;
        for job in &running {
            assert_eq!(ended(job).await.state, "cancelled");
        }
        assert_eq!(jobs.list().len(), MAX_RUNNING);
    }

    #[test]
    fn finished_jobs_expire_and_the_oldest_go_past_the_bound() {
        let job = |n: u64, end: Option<Instant>| {
            Arc::new(Job {
                id: job_id(n),
                action: "discard",
                target: Target::Group("g".into()),
                started: Instant::now(),
                started_at: SystemTime::now(),
                cancel: CancellationToken::new(),
                figures: Mutex::default(),
                end: Mutex::new(end.map(|at| (at, State::Done, Vec::new()))),
            })
        };
        let now = Instant::now();
        let old = now.checked_sub(KEEP_FINISHED + Duration::from_secs(1));
        let mut jobs: VecDeque<_> = [job(0, old), job(1, None)].into();
        jobs.extend((2..MAX_KEPT as u64 + 3).map(|n| job(n, Some(now))));
        prune(&mut jobs, now);
        assert_eq!(jobs.len(), MAX_KEPT);
        assert_eq!(jobs[0].id, job_id(1), "the running one stays");
        assert_eq!(jobs[1].id, job_id(4), "the oldest finished went first");
    }
}
