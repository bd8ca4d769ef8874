//! The API routes across queues: failure groups (`/api/groups`) with replay, discard and
//! dry-run of a whole group, and search (`/api/search`). Both read a bounded part of each
//! queue, from its head, and say which part. Merged into `api`'s router, so the guard, the
//! JSON content type of changes and the few-at-once limit hold for them too.

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::StatusCode;
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::{Value, json};

use super::console::{BODY_BYTES, Console, bad_request, failure, try_plugin};
use super::error_answer as error;
use super::guard::{self, JSON};
use super::job_api;
use crate::failed::{self, Selection};

/// Messages read from the head of each queue when a request names no `scan`.
const SCAN: u64 = 1000;
/// The most a request may read from each queue: each read message is fetched from the broker.
const MAX_SCAN: u64 = 10_000;
/// Matches a search returns when it names no `limit`, and at most.
const FOUND: usize = 50;
const MAX_FOUND: usize = 500;
/// Bytes of body each group's example shows.
const EXAMPLE_BYTES: usize = 4 << 10;

/// `/api/groups...` and `/api/search`.
pub(super) fn routes(max_upload: usize) -> Router<Console> {
    let json = middleware::from_fn_with_state(JSON, guard::content_type);
    Router::new()
        .route("/api/groups", get(groups))
        .route("/api/search", get(search))
        .route("/api/groups/{group}/{action}", post(act).route_layer(json))
        .layer(DefaultBodyLimit::max(max_upload))
}

/// `scan=N`, within bounds.
fn scan_of(scan: Option<u64>) -> Result<u64, Response> {
    match scan.unwrap_or(SCAN) {
        0 => Err(bad_request("scan: read at least one message of each queue")),
        n if n > MAX_SCAN => Err(bad_request(&format!(
            "scan: a request reads at most {MAX_SCAN} messages of each queue, got {n}"
        ))),
        n => Ok(n),
    }
}

#[derive(Deserialize)]
struct GroupsQuery {
    scan: Option<u64>,
}

/// `GET /api/groups?scan=N`: the failure groups of the first N messages of every failed queue.
async fn groups(State(console): State<Console>, Query(query): Query<GroupsQuery>) -> Response {
    let per_queue = match scan_of(query.scan) {
        Ok(n) => n,
        Err(response) => return response,
    };
    match failed::groups(&console.config, per_queue, EXAMPLE_BYTES).await {
        Ok(listing) => axum::Json(listing).into_response(),
        Err(err) => failure(&err),
    }
}

#[derive(Deserialize)]
struct SearchQuery {
    q: Option<String>,
    queue: Option<String>,
    scan: Option<u64>,
    limit: Option<usize>,
}

/// `GET /api/search?q=TEXT[&queue=Q][&scan=N][&limit=N]`: the parked messages whose id,
/// correlation id, a header value or body holds TEXT (any case).
async fn search(State(console): State<Console>, Query(query): Query<SearchQuery>) -> Response {
    let per_queue = match scan_of(query.scan) {
        Ok(n) => n,
        Err(response) => return response,
    };
    let text = query.q.unwrap_or_default();
    if text.trim().is_empty() {
        return bad_request("q: give the text to find (an id, a header value, a word of a body)");
    }
    let limit = query.limit.unwrap_or(FOUND);
    if limit == 0 || limit > MAX_FOUND {
        return bad_request(&format!(
            "limit: from 1 to {MAX_FOUND} matches, got {limit}"
        ));
    }
    let only = query.queue.as_deref().filter(|q| !q.is_empty());
    let bounds = (per_queue, limit);
    match failed::search(&console.config, only, &text, bounds, BODY_BYTES).await {
        Ok(found) => axum::Json(found).into_response(),
        Err(err) => failure(&err),
    }
}

/// `POST /api/groups/{group}/replay|discard|dry-run` with a JSON body (`{}`): the action on
/// every message of the group, in every queue (not only the part a listing scanned); replay and
/// discard run as a job when the queues hold more than `JOB_AFTER` messages.
async fn act(
    State(console): State<Console>,
    Path((group, action)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    if serde_json::from_slice::<serde_json::Map<String, Value>>(&body).is_err() {
        return bad_request("the body of a group action is a JSON object: {}");
    }
    if !matches!(action.as_str(), "replay" | "discard" | "dry-run") {
        return error(
            StatusCode::NOT_FOUND,
            &format!("no group action {action:?}: replay, discard or dry-run"),
        );
    }
    if !group.starts_with("g-") {
        return bad_request(&format!("{group:?} is no group id (g-<16 hex>)"));
    }
    if action != "dry-run" {
        let action = if action == "replay" {
            "replay"
        } else {
            "discard"
        };
        return job_api::group_action(&console, action, group).await;
    }
    let selection = Selection::Group(group);
    let mut queues = Vec::new();
    let mut done = 0;
    for sub in &console.config.subscriptions {
        let queue = sub.queue.as_str();
        match try_plugin(&console, queue, None, &selection).await {
            Ok(results) => {
                done += results.len() as u64;
                queues.push(json!({"queue": queue, "results": results}));
            }
            Err(response) if response.status() == StatusCode::NOT_FOUND => continue,
            Err(response) => return response,
        }
    }
    axum::Json(json!({"done": done, "queues": queues})).into_response()
}
