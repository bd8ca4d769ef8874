//! Replay and discard as jobs: an action that looks at more than `JOB_AFTER` parked messages
//! answers 202 at once with a job (`Location: /api/jobs/{id}`) and runs in the host; a smaller
//! one answers when it is done, as it always did. `/api/jobs` lists the jobs, `/api/jobs/{id}`
//! shows one's progress, `POST /api/jobs/{id}/cancel` stops it between batches. Merged into
//! `api`'s router, behind the same guard.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

use super::console::{Console, failure};
use super::error_answer as error;
use super::guard::{self, JSON};
use super::jobs::{Job, Target};
use crate::config::Config;
use crate::failed::{self, Report, Selection, Watch};

/// The most messages an action looks at in the request; past it, it runs as a job. Replay and
/// discard go through a few thousand messages a second, so this answers within a fraction of a
/// second, while a page or a script is never left waiting on a request for minutes.
pub(crate) const JOB_AFTER: u64 = 500;

/// `/api/jobs...`.
pub(super) fn routes() -> Router<Console> {
    let json = middleware::from_fn_with_state(JSON, guard::content_type);
    Router::new()
        .route("/api/jobs", get(list))
        .route("/api/jobs/{id}", get(show))
        .route("/api/jobs/{id}/cancel", post(cancel).route_layer(json))
}

/// `GET /api/jobs`: every job kept, newest first.
async fn list(State(console): State<Console>) -> Response {
    let jobs: Vec<_> = console.jobs.list().iter().map(|j| j.view()).collect();
    axum::Json(json!({ "jobs": jobs })).into_response()
}

fn unknown(id: &str) -> Response {
    error(
        StatusCode::NOT_FOUND,
        &format!("no job {id:?}: it never was, or it ended over an hour ago"),
    )
}

/// `GET /api/jobs/{id}`: its progress.
async fn show(State(console): State<Console>, Path(id): Path<String>) -> Response {
    match console.jobs.get(&id) {
        Some(job) => axum::Json(job.view()).into_response(),
        None => unknown(&id),
    }
}

/// `POST /api/jobs/{id}/cancel`: it stops before its next batch (202: still `cancelling`);
/// what it moved stays moved, the rest stays parked. A job already ended is a 409.
async fn cancel(State(console): State<Console>, Path(id): Path<String>) -> Response {
    let Some(job) = console.jobs.get(&id) else {
        return unknown(&id);
    };
    if !job.cancel() {
        let view = job.view();
        return error(
            StatusCode::CONFLICT,
            &format!("job {id} has ended already ({})", view.state),
        );
    }
    (StatusCode::ACCEPTED, axum::Json(job.view())).into_response()
}

/// 202 with the job, and where to follow it.
fn started(job: &Job) -> Response {
    let location = format!("/api/jobs/{}", job.id);
    let body = axum::Json(json!({ "job": job.view() }));
    (StatusCode::ACCEPTED, [(header::LOCATION, location)], body).into_response()
}

/// The messages parked in each failed queue now, by name (queues not declared left out).
async fn depths(config: &Config) -> anyhow::Result<BTreeMap<String, u64>> {
    let counts = failed::counts(config).await?;
    Ok(counts
        .into_iter()
        .filter_map(|(_, failed, count)| Some((failed, count?)))
        .collect())
}

/// `replay` or `discard` of `selection` in `queue`: answered when done if it looks at
/// `JOB_AFTER` messages or fewer, else started as a job (202).
pub(super) async fn queue_action(
    console: &Console,
    action: &'static str,
    queue: String,
    selection: Selection,
) -> Response {
    let mut depths = match depths(&console.config).await {
        Ok(depths) => depths,
        Err(err) => return failure(&err),
    };
    let failed = crate::config::failed_queue_name(&queue);
    let depth = depths.remove(&failed).unwrap_or(0);
    let looked_at = match selection {
        Selection::First(n) => depth.min(n),
        _ => depth,
    };
    let config = console.config.clone();
    if looked_at <= JOB_AFTER {
        let report = run(&config, action, &queue, &selection, Watch::none()).await;
        return match report {
            Ok(r) => axum::Json(json!({"done": r.done, "missing": r.missing})).into_response(),
            Err(err) => failure(&err),
        };
    }
    let estimate = BTreeMap::from([(failed, looked_at)]);
    let target = (action, Target::Queue(queue.clone()));
    let job = console
        .jobs
        .start(target, estimate, move |job: Arc<Job>| async move {
            run(&config, action, &queue, &selection, job.watch()).await
        });
    match job {
        Ok(job) => started(&job),
        Err(busy) => error(StatusCode::TOO_MANY_REQUESTS, &busy.to_string()),
    }
}

async fn run(
    config: &Config,
    action: &str,
    queue: &str,
    selection: &Selection,
    watch: Watch<'_>,
) -> anyhow::Result<Report> {
    if action == "replay" {
        failed::replay(config, queue, selection, watch).await
    } else {
        failed::discard(config, queue, selection, watch).await
    }
}

/// `replay` or `discard` of failure group `group` in every queue: answered when done if the
/// failed queues hold `JOB_AFTER` messages or fewer in all, else started as a job (202).
pub(super) async fn group_action(
    console: &Console,
    action: &'static str,
    group: String,
) -> Response {
    let depths = match depths(&console.config).await {
        Ok(depths) => depths,
        Err(err) => return failure(&err),
    };
    let config = console.config.clone();
    if depths.values().sum::<u64>() <= JOB_AFTER {
        return match in_every_queue(&config, action, &group, Watch::none()).await {
            Ok((report, queues)) => {
                axum::Json(json!({"done": report.done, "queues": queues})).into_response()
            }
            Err(err) => failure(&err),
        };
    }
    let target = (action, Target::Group(group.clone()));
    let job = console
        .jobs
        .start(target, depths, move |job: Arc<Job>| async move {
            let done = in_every_queue(&config, action, &group, job.watch()).await;
            done.map(|(report, _)| report)
        });
    match job {
        Ok(job) => started(&job),
        Err(busy) => error(StatusCode::TOO_MANY_REQUESTS, &busy.to_string()),
    }
}

/// Replays or discards the messages of `group` in each subscription's failed queue in turn
/// (those not declared yet hold none); stops at the first error or a cancel. The sum, and each
/// queue's count.
async fn in_every_queue(
    config: &Config,
    action: &str,
    group: &str,
    watch: Watch<'_>,
) -> anyhow::Result<(Report, Vec<Value>)> {
    let selection = Selection::Group(group.to_string());
    let mut sum = Report::default();
    let mut queues = Vec::new();
    for sub in &config.subscriptions {
        let queue = sub.queue.as_str();
        let report = match run(config, action, queue, &selection, watch).await {
            Ok(report) => report,
            Err(err) if missing(&err) => continue,
            Err(err) => return Err(err),
        };
        sum.done += report.done;
        queues.push(json!({"queue": queue, "done": report.done}));
        if report.cancelled {
            sum.cancelled = true;
            break;
        }
    }
    Ok((sum, queues))
}

/// Whether `err` is a failed queue not declared yet: a group has no messages there.
fn missing(err: &anyhow::Error) -> bool {
    err.chain().any(|e| {
        matches!(
            e.downcast_ref::<failed::FailedError>(),
            Some(failed::FailedError::Missing { .. })
        )
    })
}
