//! The cost of `[tracing]`: the ok plugin exporting its spans to a collector that takes them
//! (a receiver in this process that answers every export), and to one that is gone (a closed
//! port), each against (b) of the same run.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Router;
use axum::body::Bytes;
use axum::routing::post;

use super::process::Extra;

/// A collector on a free port of 127.0.0.1 that answers every export; its address, and the
/// bytes it received.
pub(super) async fn collector() -> (String, Arc<AtomicU64>) {
    let received = Arc::new(AtomicU64::new(0));
    let counted = received.clone();
    let app = Router::new().route(
        "/v1/traces",
        post(move |body: Bytes| {
            let counted = counted.clone();
            async move {
                counted.fetch_add(body.len() as u64, Ordering::Relaxed);
                ""
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the bench collector");
    let addr = listener.local_addr().expect("local addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr.to_string(), received)
}

/// A port nothing listens on.
pub(super) fn gone() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("local addr").to_string()
}

/// worker.toml's `[tracing]` for the collector at `addr`.
pub(super) fn extra(addr: &str) -> Extra {
    Extra {
        sections: format!("[tracing]\notlp = \"http://{addr}\"\n"),
        subscription: String::new(),
        ..Extra::default()
    }
}
