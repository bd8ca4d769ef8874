//! The overview page in headless Chromium, with `[admin] token` set: it asks for the token,
//! shows a subscription's ok rate moving while messages flow, and marks it paused once
//! `pause_after` trips, without a reload. Writes the screenshot of docs/console-overview.png.
//! Also measures the page's first contentful paint with five subscriptions.

use serde_json::Value;

use super::{Driver, give_token, screenshot_path, until};
use crate::capabilities::support::{Probe, Sub};
use crate::console::overview::Flow;

/// A script answering whether the row of `queue` matches `test` (a JS expression on `row`).
fn row_check(queue: &str, test: &str) -> String {
    format!(
        "const row = document.querySelector('tr[data-queue=\"{queue}\"]'); return !!row && ({test});"
    )
}

#[tokio::test]
async fn the_overview_shows_rates_moving_and_a_paused_subscription_in_a_browser() {
    let driver = Driver::start().await;
    let flow = Flow::start("browser-ov").await;
    let (admin, queue, steady) = (flow.admin, flow.queue.clone(), flow.steady.clone());
    let page = driver.browser().await;
    page.goto(&format!("http://{admin}/"))
        .await
        .expect("open / (the overview)");
    give_token(&page, crate::console::TOKEN).await;
    until(
        &page,
        "the rows",
        &row_check(
            &queue,
            "row.querySelector('.state').textContent === 'running'",
        ),
    )
    .await;

    flow.send("ov", 15).await;
    flow.send("st", 25).await;
    let ok_moves = "row.querySelector('td[data-rate=\"ok\"]').textContent !== '0' && \
                    row.querySelector('.last-ok').textContent.endsWith('ago')";
    until(&page, "ok rate moving", &row_check(&queue, ok_moves)).await;
    until(&page, "steady ok rate", &row_check(&steady, ok_moves)).await;
    // Traffic that varies for half a minute: six sparkline points with a shape.
    let mut every = tokio::time::interval(std::time::Duration::from_secs(5));
    for n in [40, 10, 60, 30, 5, 20] {
        every.tick().await;
        flow.send("ov", n / 5).await;
        flow.send("st", n).await;
    }
    let link = page
        .execute(
            &row_check(
                &queue,
                "row.querySelector('td.queue a').getAttribute('href')",
            ),
            vec![],
        )
        .await
        .expect("read the link");
    assert_eq!(link, Value::String(format!("/failed#{queue}")));

    flow.break_dependency().await;
    flow.send("ov", 10).await;
    until(
        &page,
        "the paused mark",
        &row_check(
            &queue,
            "row.classList.contains('paused') && row.querySelector('.state').textContent === 'paused' \
             && row.querySelector('td[data-rate=\"retry\"]').textContent !== '0'",
        ),
    )
    .await;
    // A sparkline has points once two samples are taken (5 s apart).
    until(
        &page,
        "the sparkline",
        &row_check(
            &steady,
            "row.querySelector('polyline.ok-line').getAttribute('points').split(' ').length >= 2",
        ),
    )
    .await;
    // One more refresh for the picture, with a few more messages in it.
    flow.send("st", 10).await;
    let shown = page
        .execute(
            "return document.getElementById('status').textContent",
            vec![],
        )
        .await
        .expect("read the status");
    let newer = format!("return document.getElementById('status').textContent !== {shown}");
    until(&page, "one more refresh", &newer).await;
    page.set_window_size(1280, 520)
        .await
        .expect("a window as tall as the table");
    let shot = page.screenshot().await.expect("screenshot");
    let path = screenshot_path("console-overview.png");
    std::fs::write(&path, shot).expect("write the screenshot");
    println!("overview screenshot: {}", path.display());
    page.close().await.expect("close the browser");
    flow.stop().await;
}

/// The first contentful paint of /overview with five subscriptions, and when their rows were
/// there, as Chromium reports them (printed: docs/console.md quotes the figures).
#[tokio::test]
async fn the_overview_paints_five_subscriptions_quickly_in_a_browser() {
    let driver = Driver::start().await;
    let state = tempfile::tempdir().expect("state dir");
    let admin = crate::harness::free_addr();
    let tables = format!("[admin]\nlisten = \"{admin}\"\n");
    let subs: Vec<Sub> = (1..=5).map(|i| Sub::new(&format!("s{i}"), "")).collect();
    let probe = Probe::start("browser-ov-paint", &subs, state.path(), &tables).await;
    let page = driver.browser().await;
    for round in ["cold", "warm"] {
        page.goto(&format!("http://{admin}/overview"))
            .await
            .expect("open /overview");
        until(
            &page,
            "five rows with depths",
            "return document.querySelectorAll('#rows tr').length === 5 && \
             document.querySelector('#rows td.depth').textContent !== '?'",
        )
        .await;
        let rows = page
            .execute("return performance.now()", vec![])
            .await
            .expect("now");
        let paint = page
            .execute(
                "return performance.getEntriesByType('paint')\
                 .find(e => e.name === 'first-contentful-paint')?.startTime ?? null",
                vec![],
            )
            .await
            .expect("read the paint timing");
        println!(
            "overview, 5 subscriptions, {round}: first contentful paint {paint} ms, rows with depths by {rows} ms"
        );
        assert!(paint.as_f64().is_some_and(|ms| ms < 5000.0), "{paint}");
    }
    page.close().await.expect("close the browser");
    probe.stop().await;
}
