//! The admin HTTP endpoint: `/metrics` (Prometheus text), `/healthz` (alive), `/readyz`
//! (connected and consuming).

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context as _;
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use crate::reload::PluginSet;

#[derive(Clone)]
struct AppState {
    metrics: Arc<Metrics>,
    plugins: PluginSet,
}

/// Binds `listen` now (so a taken port is a startup error) and serves until `cancel`.
pub async fn serve(
    listen: SocketAddr,
    metrics: Arc<Metrics>,
    plugins: PluginSet,
    cancel: CancellationToken,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen} for [admin]"))?;
    tracing::info!(%listen, "admin endpoint up: /metrics /healthz /readyz");
    let app = Router::new()
        .route("/metrics", get(metrics_text))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .with_state(AppState { metrics, plugins });
    Ok(tokio::spawn(async move {
        let server = axum::serve(listener, app).with_graceful_shutdown(cancel.cancelled_owned());
        if let Err(err) = server.await {
            tracing::error!("admin endpoint stopped: {err}");
        }
    }))
}

async fn metrics_text(State(state): State<AppState>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        state.metrics.encode(Some(&state.plugins)),
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
