//! The console page at `/failed`: plain HTML, CSS and a little JavaScript, built into the
//! binary, working over the API under `/api/` with no front-end build and no internet.

use std::sync::Arc;

use axum::Router;
use axum::http::header;
use axum::middleware;
use axum::response::IntoResponse;
use axum::routing::get;

use super::guard::{self, Guard};

const INDEX: &str = include_str!("console/index.html");
const SCRIPT: &str = include_str!("console/console.js");
const JOBS_SCRIPT: &str = include_str!("console/jobs.js");
const STYLE: &str = include_str!("console/console.css");

/// Only this origin's own files run on the page, whatever a message holds.
const POLICY: &str = "default-src 'self'; frame-ancestors 'none'";

/// The page's routes, answered only to this listener's `Host` names (it holds no data: the
/// API asks for the token).
pub(crate) fn routes<S: Clone + Send + Sync + 'static>(guard: Arc<Guard>) -> Router<S> {
    Router::new()
        .route("/failed", get(|| file("text/html; charset=utf-8", INDEX)))
        .route(
            "/failed/console.js",
            get(|| file("text/javascript; charset=utf-8", SCRIPT)),
        )
        .route(
            "/failed/jobs.js",
            get(|| file("text/javascript; charset=utf-8", JOBS_SCRIPT)),
        )
        .route(
            "/failed/console.css",
            get(|| file("text/css; charset=utf-8", STYLE)),
        )
        .route_layer(middleware::from_fn_with_state(guard, guard::page))
}

pub(super) async fn file(kind: &'static str, text: &'static str) -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, kind),
            (header::CONTENT_SECURITY_POLICY, POLICY),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        text,
    )
}
