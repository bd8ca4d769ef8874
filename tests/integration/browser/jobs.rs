//! A replay of 20,000 parked messages from the page: it runs as a job whose progress (a bar,
//! messages looked at of the total, the rate, the time left) the page shows while it polls,
//! and whose Cancel button stops it with the rest still parked and every moved message
//! handled once. Writes a screenshot of the running job (`console-job.png`, docs/console.md).

use fantoccini::Client;
use serde_json::json;

use super::{Driver, give_token, screenshot_path, until};
use crate::console::jobs::JobHost;
use crate::console::{TOKEN, request};

const TOTAL: u32 = 20_000;

#[tokio::test]
async fn a_replay_of_20000_messages_shows_its_progress_in_the_page_and_is_cancelled() {
    let driver = Driver::start().await;
    let fixture = JobHost::start("browser-jobs").await;
    fixture.park(TOTAL as usize).await;
    let (admin, q) = (fixture.admin, fixture.q());

    let page = driver.browser().await;
    page.goto(&format!("http://{admin}/failed#{q}"))
        .await
        .expect("open /failed");
    give_token(&page, TOKEN).await;
    until(
        &page,
        "the queue's first messages",
        "return document.querySelectorAll('.message').length > 0",
    )
    .await;
    page.execute(
        "[...document.querySelectorAll('.toolbar button')].find(b => b.textContent === 'Replay all').click()",
        vec![],
    )
    .await
    .expect("click Replay all");
    // Progress shown while it runs: the bar part way (past 5%, for the screenshot), the
    // figures, the rate and time left.
    until(
        &page,
        "the job's progress part way",
        "const bar = document.querySelector('.job[data-state=\"running\"] progress'); \
         return !!bar && bar.value > bar.max / 20 && bar.value < bar.max",
    )
    .await;
    running_job_shown(&page).await;

    // Clicked inside the page in one step: the panel is drawn again at every poll, so a
    // button found by WebDriver can be gone by the time it is clicked.
    let clicked = page
        .execute(
            "const b = document.querySelector('.job button[data-action=\"cancel\"]'); \
             if (b) b.click(); return !!b",
            vec![],
        )
        .await
        .expect("click Cancel");
    assert_eq!(clicked, json!(true), "no Cancel button");
    until(
        &page,
        "the job cancelled",
        "return !!document.querySelector('.job[data-state=\"cancelled\"]')",
    )
    .await;
    until(
        &page,
        "the notice",
        "return document.getElementById('notice').textContent.includes('the rest are still parked')",
    )
    .await;
    let (status, jobs) = request(admin, "GET", "/api/jobs", Some(TOKEN), "").await;
    assert_eq!(status, 200, "{jobs}");
    let job = &jobs["jobs"][0];
    assert_eq!(job["state"], json!("cancelled"), "{job}");
    let moved = job["done"].as_u64().expect("done");
    assert!(moved > 0 && moved < u64::from(TOTAL), "{job}");
    // The page's listings hold messages while they read them: closed first, for exact counts.
    page.close().await.expect("close the browser");
    fixture.settled(moved, TOTAL).await;
    fixture.stop().await;
}

/// The running job's figures (looked at of the total, the rate), and a screenshot of it.
async fn running_job_shown(page: &Client) {
    let figures = page
        .execute(
            "return document.querySelector('.job .job-figures').textContent",
            vec![],
        )
        .await
        .expect("read the figures");
    let figures = figures.as_str().unwrap_or_default().to_string();
    assert!(
        figures.contains("of 20,000 looked at") && figures.contains("/s"),
        "{figures}"
    );
    let shot = page.screenshot().await.expect("screenshot");
    let path = screenshot_path("console-job.png");
    std::fs::write(&path, shot).expect("write the screenshot");
    println!("job screenshot: {}", path.display());
}
