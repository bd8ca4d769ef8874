//! The admin HTTP endpoint: `/metrics` (Prometheus text), `/healthz` (alive), `/readyz`
//! (connected and consuming), and the console (`overview`, `page`, `api`) behind its
//! guard. Probes must keep answering whatever else connects, so every connection is bounded
//! in time and in number (`conns`), and failed accepts (out of file descriptors) are logged
//! and retried.

mod api;
mod conns;
mod console;
mod guard;
mod job_api;
mod jobs;
mod overview;
mod page;
mod views;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use crate::metrics::Metrics;
use crate::reload::PluginSet;
use conns::{Conns, Ticket};
pub(crate) use console::Console;
use guard::Guard;
pub(crate) use jobs::Jobs;

/// Most connections open at once; when full, the one idle the longest is closed for a new one.
const MAX_CONNECTIONS: usize = 128;
/// Longest wait for a request's headers, on a new connection and between keep-alive requests:
/// covers idle connections and slow senders alike.
const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest life of a connection, however busy; bounds one whose client never reads.
const MAX_AGE: Duration = Duration::from_secs(60);
/// Time a closing connection gets to finish the response under way.
const CLOSE_GRACE: Duration = Duration::from_secs(2);
/// Pause after a failed accept (out of descriptors): the backlog waits, the loop does not spin.
const ACCEPT_PAUSE: Duration = Duration::from_millis(100);
/// While accepts keep failing, how often that is logged again.
const ACCEPT_LOG_EVERY: Duration = Duration::from_secs(10);

#[derive(Clone)]
struct AppState {
    metrics: Arc<Metrics>,
    plugins: PluginSet,
}

/// Binds `listen` now (so a taken port is a startup error) and serves until `cancel`; the
/// console's jobs must stop on `cancel` too (see `Jobs::new`).
pub(crate) async fn serve(
    listen: SocketAddr,
    metrics: Arc<Metrics>,
    console: Console,
    cancel: CancellationToken,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let listener = TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen} for [admin]"))?;
    info!(%listen, "admin endpoint up: /metrics /healthz /readyz /overview /failed /api/");
    let plugins = console.plugins.clone();
    let jobs = console.jobs.clone();
    let max_upload = usize::try_from(console.config.plugins.max_plugin_size).unwrap_or(usize::MAX);
    let guard = Guard::new(listen, console.config.admin.as_ref());
    let overview = overview::Overview::new(metrics.clone(), &console);
    let app = Router::new()
        .route("/metrics", get(metrics_text))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .with_state(AppState { metrics, plugins })
        .merge(overview::api_routes(overview.clone(), guard.clone()))
        .merge(overview::page_routes(guard.clone()))
        .merge(api::routes(console, guard.clone(), max_upload))
        .merge(page::routes(guard));
    let tasks = TaskTracker::new();
    overview.spawn(&tasks, &cancel);
    tasks.spawn(accept_loop(listener, app, cancel));
    tasks.close();
    Ok(tokio::spawn(async move {
        tasks.wait().await;
        // Cancelled with the service, each job stops after the batch under way.
        jobs.wait().await;
    }))
}

/// Accepts until `cancel`, then lets open connections finish (bounded by `CLOSE_GRACE`).
async fn accept_loop(listener: TcpListener, app: Router, cancel: CancellationToken) {
    let conns = Arc::new(Conns::new(MAX_CONNECTIONS));
    let tasks = TaskTracker::new();
    let mut trouble = AcceptTrouble::default();
    loop {
        let accepted = tokio::select! {
            _ = cancel.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _)) => {
                trouble.recovered();
                stream
            }
            // This one connection is gone before it was accepted; nothing to do.
            Err(err) if is_connection_error(&err) => continue,
            Err(err) => {
                trouble.failed(&err);
                tokio::select! {
                    _ = cancel.cancelled() => break,
                    _ = tokio::time::sleep(ACCEPT_PAUSE) => continue,
                }
            }
        };
        match conns.admit() {
            Some(ticket) => {
                tasks.spawn(serve_connection(
                    stream,
                    app.clone(),
                    ticket,
                    cancel.clone(),
                ));
            }
            // Full, and every connection is answering a request right now.
            None => drop(stream),
        }
    }
    tasks.close();
    tasks.wait().await;
}

/// Serves one connection until it closes, times out, is evicted, ages out or `cancel`.
async fn serve_connection(
    stream: TcpStream,
    app: Router,
    ticket: Ticket,
    cancel: CancellationToken,
) {
    let evicted = ticket.evicted();
    let app = TowerToHyperService::new(app);
    let service = hyper::service::service_fn(move |request| {
        let busy = ticket.busy();
        let response = hyper::service::Service::call(&app, request);
        async move {
            let response = response.await;
            drop(busy);
            response
        }
    });
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .keep_alive(true);
    let conn = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    tokio::select! {
        result = conn.as_mut() => {
            if let Err(err) = result {
                debug!("admin connection closed: {err}");
            }
            return;
        }
        // Dropping the connection closes its socket.
        _ = evicted.cancelled() => return,
        _ = cancel.cancelled() => {}
        _ = tokio::time::sleep(MAX_AGE) => {}
    }
    conn.as_mut().graceful_shutdown();
    let _ = tokio::time::timeout(CLOSE_GRACE, conn).await;
}

/// Errors of one pending connection, not of the listener.
fn is_connection_error(err: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        err.kind(),
        ConnectionAborted | ConnectionReset | ConnectionRefused
    )
}

/// Failed accepts (EMFILE, ENFILE, ENOBUFS, ...): logged when they start, every
/// `ACCEPT_LOG_EVERY` while they last, and when they end.
#[derive(Default)]
struct AcceptTrouble {
    since: Option<Instant>,
    failures: u64,
    logged: Option<Instant>,
}

impl AcceptTrouble {
    fn failed(&mut self, err: &std::io::Error) {
        let now = Instant::now();
        self.since.get_or_insert(now);
        self.failures += 1;
        if self.logged.is_none_or(|at| now - at >= ACCEPT_LOG_EVERY) {
            warn!(
                failures = self.failures,
                "admin endpoint cannot accept connections: {err}; retrying"
            );
            self.logged = Some(now);
        }
    }

    fn recovered(&mut self) {
        if let Some(since) = self.since.take() {
            info!(
                failures = self.failures,
                "admin endpoint accepting again after {:?}",
                since.elapsed()
            );
            self.failures = 0;
            self.logged = None;
        }
    }
}

/// An error answer of the console: `{"error": why}`, never a bare status.
fn error_answer(status: StatusCode, why: &str) -> Response {
    (status, axum::Json(serde_json::json!({ "error": why }))).into_response()
}

async fn metrics_text(State(state): State<AppState>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        state.metrics.encode(Some(&state.plugins.report())),
    )
}

async fn readyz(State(state): State<AppState>) -> impl IntoResponse {
    match state.metrics.readiness() {
        Ok(()) => (StatusCode::OK, "ready\n".to_string()),
        Err(why) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {why}\n"),
        ),
    }
}
