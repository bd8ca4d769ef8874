//! What the console's API routes share: the service state they work on, and how a `failed`
//! action's result or error becomes a response.

use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::Value;

use super::error_answer as error;
use super::jobs::Jobs;
use crate::capability::Capabilities;
use crate::config::Config;
use crate::failed::{self, FailedError, Selection, Trial};
use crate::reload::PluginSet;

/// What the API works on: the service's config, its plugins, its open stores and its jobs.
#[derive(Clone)]
pub(crate) struct Console {
    pub config: Arc<Config>,
    pub plugins: PluginSet,
    pub capabilities: Arc<Capabilities>,
    /// Long replays and discards, running in the host.
    pub jobs: Jobs,
}

/// Bytes of each body a listing shows.
pub(super) const BODY_BYTES: usize = 64 << 10;

/// An error of a `failed` action as a response: a refused edit 400, unknown queues and ids 404,
/// a broker that cannot be reached 503, anything else 500; always with the reason.
pub(super) fn failure(err: &anyhow::Error) -> Response {
    let text = format!("{err:#}");
    if err
        .chain()
        .any(|e| matches!(e.downcast_ref(), Some(FailedError::BadEdit(_))))
    {
        return error(StatusCode::BAD_REQUEST, &text);
    }
    if err.chain().any(|e| e.is::<FailedError>()) {
        return error(StatusCode::NOT_FOUND, &text);
    }
    if err.chain().any(|e| e.is::<crate::broker::Unreachable>()) {
        return error(StatusCode::SERVICE_UNAVAILABLE, &text);
    }
    error(StatusCode::INTERNAL_SERVER_ERROR, &text)
}

pub(super) fn json_lines(out: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(out)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

pub(super) fn bad_request(why: &str) -> Response {
    error(StatusCode::BAD_REQUEST, why)
}

/// Dry-runs the selected messages of `queue` through its subscription's plugin, or through
/// `upload` (a `.wasm`, checked like any plugin); the results, or the answer saying why not.
pub(super) async fn try_plugin(
    console: &Console,
    queue: &str,
    upload: Option<Vec<u8>>,
    selection: &Selection,
) -> Result<Vec<Value>, Response> {
    let sub = failed::subscription(&console.config, queue).map_err(|e| failure(&e.into()))?;
    let plugin = match upload {
        Some(bytes) => console.plugins.load_bytes("upload.wasm", bytes).await,
        None => console
            .plugins
            .slot(&sub.plugin_path)
            .await
            .map(|slot| slot.load_full()),
    };
    let plugin = plugin.map_err(|err| error(StatusCode::BAD_REQUEST, &format!("{err:#}")))?;
    let granted = console.capabilities.grant(sub);
    let trial = Trial {
        plugin: &plugin,
        granted: &granted,
    };
    let mut out = Vec::new();
    match failed::dry_run(&console.config, queue, &trial, selection, &mut out).await {
        Ok(_) => Ok(json_lines(&out)),
        Err(err) => Err(failure(&err)),
    }
}
