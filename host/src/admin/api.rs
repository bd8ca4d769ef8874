//! The JSON API under `/api/`: the parked messages of every subscription, and the `failed`
//! actions with the command line's semantics (the same selections, the same audit lines).
//! Every request passes the guard first (`guard`); a few are answered at once, so slow ones
//! cannot hold every connection of the listener and lock the probes out.

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::Semaphore;

use super::console::{BODY_BYTES, Console, bad_request, failure, json_lines, try_plugin};
use super::error_answer as error;
use super::guard::{self, Guard, JSON, JSON_OR_WASM};
use super::{job_api, views};
use crate::failed::{self, Selection};

/// Messages a listing returns when it names no limit.
const PAGE: u64 = 100;
/// The most messages one listing returns: each may show 64 KiB of body.
const MAX_PAGE: u64 = 1000;
/// API requests answered at once. Each opens a broker connection and may take a minute; the
/// listener keeps room for the probes among its connections.
const AT_ONCE: usize = 4;

/// The `/api/` routes, behind `guard`.
pub(crate) fn routes(console: Console, guard: Arc<Guard>, max_upload: usize) -> Router {
    let json = middleware::from_fn_with_state(JSON, guard::content_type);
    let json_or_wasm = middleware::from_fn_with_state(JSON_OR_WASM, guard::content_type);
    let upload = middleware::from_fn_with_state(Arc::new(Semaphore::new(1)), one_upload);
    let changes = Router::new()
        .route(
            "/api/failed/{queue}/replay",
            post(replay).route_layer(json.clone()),
        )
        .route(
            "/api/failed/{queue}/discard",
            post(discard).route_layer(json.clone()),
        )
        .route("/api/failed/{queue}/edit", post(edit).route_layer(json))
        .route(
            "/api/failed/{queue}/dry-run",
            post(dry_run).route_layer(upload).route_layer(json_or_wasm),
        )
        .layer(DefaultBodyLimit::max(max_upload));
    let busy = Arc::new(Semaphore::new(AT_ONCE));
    Router::new()
        .route("/api/failed", get(queues))
        .route("/api/failed/{queue}", get(messages))
        .merge(changes)
        .merge(views::routes(max_upload))
        .merge(job_api::routes())
        .route_layer(middleware::from_fn_with_state(busy, few_at_once))
        .route_layer(middleware::from_fn_with_state(guard, guard::api))
        .with_state(console)
}

/// Answers `AT_ONCE` requests at a time; more are refused at once (429) rather than queued,
/// each queued one holding a connection.
async fn few_at_once(State(busy): State<Arc<Semaphore>>, request: Request, next: Next) -> Response {
    match busy.try_acquire_owned() {
        Ok(_permit) => next.run(request).await,
        Err(_) => error(
            StatusCode::TOO_MANY_REQUESTS,
            &format!(
                "busy: the console answers {AT_ONCE} API requests at once; try again when one is done"
            ),
        ),
    }
}

/// Runs one uploaded plugin at a time (each is compiled, and may be large); a second upload
/// meanwhile is refused (429) before its body is read.
async fn one_upload(State(one): State<Arc<Semaphore>>, request: Request, next: Next) -> Response {
    if !guard::is_kind(request.headers(), "application/wasm") {
        return next.run(request).await;
    }
    match one.try_acquire_owned() {
        Ok(_permit) => next.run(request).await,
        Err(_) => error(
            StatusCode::TOO_MANY_REQUESTS,
            "busy: another uploaded plugin is being dry-run, and one upload runs at a time; \
             try again when it is done",
        ),
    }
}

/// `GET /api/failed`: every subscription with its failed queue and how many messages wait.
async fn queues(State(console): State<Console>) -> Response {
    match failed::counts(&console.config).await {
        Ok(counts) => {
            let queues: Vec<Value> = counts
                .into_iter()
                .map(|(queue, failed, count)| {
                    json!({"queue": queue, "failed_queue": failed, "count": count})
                })
                .collect();
            axum::Json(json!({ "queues": queues })).into_response()
        }
        Err(err) => failure(&err),
    }
}

#[derive(Deserialize)]
struct Page {
    limit: Option<u64>,
}

/// `GET /api/failed/{queue}?limit=N`: the first N (at most `MAX_PAGE`) parked messages as
/// `failed list` shows them, with up to 64 KiB of each body; nothing moves.
async fn messages(
    State(console): State<Console>,
    Path(queue): Path<String>,
    Query(page): Query<Page>,
) -> Response {
    let limit = page.limit.unwrap_or(PAGE);
    if limit > MAX_PAGE {
        return bad_request(&format!(
            "limit: a listing returns at most {MAX_PAGE} messages, got {limit} \
             (`worker-host failed list` reads them all)"
        ));
    }
    let mut out = Vec::new();
    let selection = Selection::First(limit);
    match failed::list_with(&console.config, &queue, &selection, BODY_BYTES, &mut out).await {
        Ok(_) => axum::Json(json!({ "messages": json_lines(&out) })).into_response(),
        Err(err) => failure(&err),
    }
}

/// Which messages an action takes, as JSON: `{"ids": [...]}`, `{"reason": "..."}`,
/// `{"limit": N}` or `{"all": true}`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Pick {
    #[serde(default)]
    ids: Vec<String>,
    reason: Option<String>,
    limit: Option<u64>,
    #[serde(default)]
    all: bool,
}

impl Pick {
    /// The selection, or why the request names none or several.
    fn selection(self) -> Result<Selection, &'static str> {
        let named = usize::from(!self.ids.is_empty())
            + usize::from(self.reason.is_some())
            + usize::from(self.limit.is_some())
            + usize::from(self.all);
        match named {
            0 => Err("name the messages: ids, reason, limit or all"),
            1 if !self.ids.is_empty() => Ok(Selection::ids(self.ids)),
            1 if self.all => Ok(Selection::All),
            1 => Ok(self
                .reason
                .map_or_else(|| Selection::limit(self.limit), Selection::Reason)),
            _ => Err("only one of ids, reason, limit and all"),
        }
    }
}

/// The selection a body names, or why it names none (a 400).
fn pick(body: &[u8]) -> Result<Selection, String> {
    let pick: Pick = serde_json::from_slice(body).map_err(|e| format!("bad selection: {e}"))?;
    pick.selection().map_err(str::to_string)
}

/// `POST /api/failed/{queue}/replay`: as `failed replay`; a job past `JOB_AFTER` messages.
async fn replay(
    State(console): State<Console>,
    Path(queue): Path<String>,
    body: Bytes,
) -> Response {
    match pick(&body) {
        Ok(selection) => job_api::queue_action(&console, "replay", queue, selection).await,
        Err(why) => bad_request(&why),
    }
}

/// `POST /api/failed/{queue}/discard`: as `failed discard`, one audit line per message; a job
/// past `JOB_AFTER` messages.
async fn discard(
    State(console): State<Console>,
    Path(queue): Path<String>,
    body: Bytes,
) -> Response {
    match pick(&body) {
        Ok(Selection::First(_) | Selection::Reason(_)) => {
            bad_request("discard takes ids or all, as the command does")
        }
        Ok(selection) => job_api::queue_action(&console, "discard", queue, selection).await,
        Err(why) => bad_request(&why),
    }
}

/// The body of an edit: the message, and what to change.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EditBody {
    id: String,
    body: Option<String>,
    #[serde(default)]
    set_headers: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    remove_headers: Vec<String>,
}

/// `POST /api/failed/{queue}/edit`: as `failed edit`; the edited copy's id and what changed.
async fn edit(State(console): State<Console>, Path(queue): Path<String>, body: Bytes) -> Response {
    let asked: EditBody = match serde_json::from_slice(&body) {
        Ok(asked) => asked,
        Err(e) => return bad_request(&format!("bad edit: {e}")),
    };
    let change = failed::Edit {
        body: asked.body.map(String::into_bytes),
        set_headers: asked.set_headers,
        remove_headers: asked.remove_headers,
    };
    match failed::edit(&console.config, &queue, &asked.id, &change, "console").await {
        Ok(done) => axum::Json(json!({"id": done.id, "diff": done.diff})).into_response(),
        Err(err) => failure(&err),
    }
}

#[derive(Deserialize)]
struct DryRunQuery {
    /// The selection as JSON when the body is an uploaded plugin.
    select: Option<String>,
}

/// `POST /api/failed/{queue}/dry-run`: as `failed dry-run`. The body is the selection (JSON),
/// run through the subscription's plugin; or a `.wasm` (`Content-Type: application/wasm`),
/// checked like any plugin, with the selection in `?select=`.
async fn dry_run(
    State(console): State<Console>,
    Path(queue): Path<String>,
    Query(query): Query<DryRunQuery>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let uploaded = guard::is_kind(&headers, "application/wasm");
    let selection = match (uploaded, &query.select) {
        (true, Some(select)) => pick(select.as_bytes()),
        (true, None) => Err("name the messages in ?select=".to_string()),
        (false, _) => pick(&body),
    };
    let selection = match selection {
        Ok(selection) => selection,
        Err(why) => return bad_request(&why),
    };
    let upload = uploaded.then(|| body.to_vec());
    match try_plugin(&console, &queue, upload, &selection).await {
        Ok(results) => axum::Json(json!({ "results": results })).into_response(),
        Err(response) => response,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(body: &str) -> Result<Selection, String> {
        pick(body.as_bytes())
    }

    #[test]
    fn a_body_names_exactly_one_selection() {
        assert_eq!(parse(r#"{"ids": ["a"]}"#), Ok(Selection::ids(["a"])));
        assert_eq!(parse(r#"{"all": true}"#), Ok(Selection::All));
        assert_eq!(parse(r#"{"limit": 2}"#), Ok(Selection::First(2)));
        assert_eq!(
            parse(r#"{"reason": "x"}"#),
            Ok(Selection::Reason("x".into()))
        );
        assert!(parse("{}").unwrap_err().contains("name the messages"));
        assert!(
            parse(r#"{"all": true, "ids": ["a"]}"#)
                .unwrap_err()
                .contains("only one")
        );
        assert!(
            parse(r#"{"every": true}"#)
                .unwrap_err()
                .contains("unknown field")
        );
        assert!(parse("not json").unwrap_err().starts_with("bad selection"));
    }
}
