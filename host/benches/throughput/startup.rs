//! (s) Start-up, target 5: a host with 12 subscriptions of the demo plugins (3 Python, 2
//! JavaScript, 2 Rust components, 2 of the v1 SDK plugin, 3 WAT modules), timed from its spawn
//! until `/readyz` answers 200, which it does once every subscription is consuming. The cache of
//! compiled plugins is warm: a first host, not timed, fills it (the bench's shared `[state] dir`).

use super::languages::Ctx;
use super::*;

/// Seconds from spawn to ready, one timed start.
pub(super) async fn seconds(ctx: &Ctx<'_>) -> f64 {
    let files = [
        "plugins/demo_python.wasm",
        "plugins/demo_python.wasm",
        "plugins/demo_python.wasm",
        "plugins/demo_js.wasm",
        "plugins/demo_js.wasm",
        "plugins/demo_rust.wasm",
        "plugins/demo_rust.wasm",
        "plugins/user_monitor.wasm",
        "plugins/user_monitor.wasm",
    ];
    let paths: Vec<PathBuf> = files.iter().map(|f| ctx.plugin(f)).collect();
    let mut plugins: Vec<Plugin<'_>> = paths.iter().map(|p| Plugin::File(p)).collect();
    plugins.extend([
        Plugin::Wat(OK_WAT),
        Plugin::Wat(OK_WAT),
        Plugin::Wat(RETRY_ONCE_WAT),
    ]);
    let prefix = unique("bench-start");
    let sections = ctx.extra(false).sections;
    let subs = subs_of(&plugins, &prefix, "");
    {
        let warm = start_subs(ctx.bin, &subs, &prefix, &sections);
        wait_ready(&warm.admin).await;
    }
    let host = start_subs(ctx.bin, &subs, &prefix, &sections);
    wait_ready(&host.admin).await;
    let secs = host.spawned.elapsed().as_secs_f64();
    drop(host);
    let conn = connect().await;
    let ch = conn.create_channel().await.expect("channel");
    for sub in &subs {
        remove_topology(&ch, &sub.queue, &prefix).await;
    }
    let _ = conn.close(200, "bye".into()).await;
    secs
}
