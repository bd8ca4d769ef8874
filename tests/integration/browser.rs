//! The console page in a real headless browser (Debian's Chromium, driven through chromedriver
//! over WebDriver): the 401 notice and the token prompt on opening, a group of parked messages,
//! a dry-run and its result, a replay that leaves the page and is handled in its queue, a
//! discard, and a `<script>` body shown as text; every request as Chromium sends it, through
//! the listener's guard. Writes a screenshot of the page (its path is printed). `jobs`: a
//! replay of 20,000 messages followed and cancelled in the page.

mod jobs;

mod overview;

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};

use crate::console::Parking;
use crate::harness::{self, free_addr};

const TOKEN: &str = "browser-test-token-19ab";
const XSS: &str = "<script>alert(1)</script>";

/// chromedriver on a free port, killed when dropped.
struct Driver {
    child: Child,
    addr: SocketAddr,
}

impl Driver {
    async fn start() -> Driver {
        let addr = free_addr();
        let child = Command::new("chromedriver")
            .arg(format!("--port={}", addr.port()))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot run chromedriver ({e}): install it with scripts/packages.sh browser")
            });
        let driver = Driver { child, addr };
        harness::eventually(
            Duration::from_secs(20),
            "chromedriver listening",
            || async { tokio::net::TcpStream::connect(addr).await.ok().map(|_| ()) },
        )
        .await;
        driver
    }

    async fn browser(&self) -> Client {
        let mut caps = serde_json::Map::new();
        let args = [
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--window-size=1280,1000",
        ];
        caps.insert(
            "goog:chromeOptions".into(),
            json!({"binary": "/usr/bin/chromium", "args": args}),
        );
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        ClientBuilder::new(connector)
            .capabilities(caps)
            .connect(&format!("http://{}", self.addr))
            .await
            .expect("a Chromium session (scripts/packages.sh browser installs it)")
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits (15 s at most) until `script` returns true in the page.
async fn until(page: &Client, what: &str, script: &str) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let done = page.execute(script, vec![]).await.expect("run a script");
        if done == Value::Bool(true) {
            return;
        }
        if Instant::now() >= deadline {
            let text = page.execute("return document.body.innerText", vec![]).await;
            panic!("{what} never happened; the page says: {text:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn click(page: &Client, css: &str) {
    page.find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("no {css}: {e}"))
        .click()
        .await
        .unwrap_or_else(|e| panic!("cannot click {css}: {e}"));
}

fn button(id: &str, action: &str) -> String {
    format!(".message[data-id=\"{id}\"] button[data-action=\"{action}\"]")
}

#[tokio::test]
async fn the_console_page_shows_dry_runs_replays_discards_and_edits_in_a_browser() {
    let driver = Driver::start().await;
    let mut fixture = Parking::start("browser", &format!("token = \"{TOKEN}\"")).await;
    fixture.park(&["b-1", "b-2"]).await;
    fixture.park_raw("xss-1", XSS.as_bytes()).await;
    fixture.wait_parked(3).await;
    let (admin, queue, failed) = (fixture.admin, fixture.queue.clone(), fixture.failed.clone());

    let page = driver.browser().await;
    page.goto(&format!("http://{admin}/failed#{queue}"))
        .await
        .expect("open /failed");
    // Reads need the token too: the page says so and asks for it.
    until(
        &page,
        "the 401 notice",
        "return document.getElementById('notice').textContent.includes('needs its token')",
    )
    .await;
    until(
        &page,
        "the token prompt",
        "return document.getElementById('token-dialog').open",
    )
    .await;
    page.find(Locator::Id("token-input"))
        .await
        .expect("token input")
        .send_keys(TOKEN)
        .await
        .expect("type");
    click(&page, "#token-save").await;
    until(
        &page,
        "the group of three",
        "return document.querySelector('.group .head strong')?.textContent === 'fail · 3 messages'",
    )
    .await;
    // The body is text on the page: no element, no alert.
    let body = page
        .execute(
            "return document.querySelector('.message[data-id=\"xss-1\"] pre.body').textContent",
            vec![],
        )
        .await
        .expect("read the body");
    assert_eq!(body, json!(XSS));
    let scripts = page
        .execute(
            "return document.querySelectorAll('main script').length",
            vec![],
        )
        .await;
    assert_eq!(scripts.expect("count scripts"), json!(0));

    // Chromium's own requests (Origin, Sec-Fetch-Site, JSON) pass the guard.
    click(&page, &button("b-2", "dry-run")).await;
    until(&page, "the dry-run result", "return document.querySelector('.message[data-id=\"b-2\"] .result strong')?.textContent.startsWith('dry-run: fail')").await;
    let shot = page.screenshot().await.expect("screenshot");
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("console.png");
    std::fs::write(&path, shot).expect("write the screenshot");
    println!("console screenshot: {}", path.display());

    // Replayed with the flag table there: it leaves the page and is handled in its queue.
    fixture.allow().await;
    click(&page, &button("b-1", "replay")).await;
    until(
        &page,
        "b-1 gone",
        "return !document.querySelector('.message[data-id=\"b-1\"]')",
    )
    .await;
    assert_eq!(fixture.probe.report("b-1").await["id"], json!("b-1"));

    click(&page, &button("xss-1", "discard")).await;
    page.accept_alert().await.expect("confirm the discard");
    until(
        &page,
        "xss-1 gone",
        "return !document.querySelector('.message[data-id=\"xss-1\"]')",
    )
    .await;
    assert_eq!(
        harness::depth(&fixture.probe.ch, &failed).await,
        1,
        "b-2 is still parked"
    );

    // b-2 edited (its script now reports as b-2-fixed) and replayed: the copy is handled, the
    // original leaves.
    click(&page, &button("b-2", "edit")).await;
    until(
        &page,
        "the edit dialog",
        "return document.getElementById('edit-dialog').open",
    )
    .await;
    let edit = "const b = document.getElementById('edit-body'); \
                b.value = b.value.replace('\"b-2\"', '\"b-2-fixed\"'); return b.value";
    let edited = page.execute(edit, vec![]).await.expect("edit the body");
    assert!(
        edited.as_str().is_some_and(|b| b.contains("b-2-fixed")),
        "{edited}"
    );
    click(&page, "#edit-save").await;
    until(
        &page,
        "the edited copy replayed",
        "return document.getElementById('notice').textContent.includes('as b-2.edit1')",
    )
    .await;
    assert_eq!(
        fixture.probe.report("b-2-fixed").await["id"],
        json!("b-2-fixed")
    );
    harness::eventually(Duration::from_secs(10), "b-2 gone", || async {
        (harness::depth(&fixture.probe.ch, &failed).await == 0).then_some(())
    })
    .await;
    page.close().await.expect("close the browser");
    fixture.stop().await;
}

/// Types `token` into the prompt the page opens when the API first answers 401.
async fn give_token(page: &Client, token: &str) {
    until(
        page,
        "the token prompt",
        "return document.getElementById('token-dialog').open",
    )
    .await;
    page.find(Locator::Id("token-input"))
        .await
        .expect("token input")
        .send_keys(token)
        .await
        .expect("type");
    click(page, "#token-save").await;
}

fn screenshot_path(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(name)
}

#[tokio::test]
async fn the_console_page_shows_failure_groups_and_search_in_a_browser() {
    let driver = Driver::start().await;
    let fixture = crate::console::groups::TwoQueues::start("browser-groups").await;
    let duplicate =
        r#"sql error: constraint: duplicate key value violates unique constraint "orders_pkey""#;
    for (sub, id, n) in [("ga", "d-1", 4711), ("ga", "d-2", 12), ("gb", "d-3", 99)] {
        let cause = format!("{duplicate} (id={n})");
        fixture.park(sub, id, &cause, "2026-11-01T10:00:00Z").await;
    }
    fixture
        .park(
            "gb",
            "t-1",
            "sql error: no such table: flags",
            "2026-11-02T00:00:00Z",
        )
        .await;
    fixture
        .park(
            "gb",
            "s-1",
            "timeout: still running after 8s",
            "2026-11-03T00:00:00Z",
        )
        .await;
    let admin = fixture.admin;

    let page = driver.browser().await;
    page.goto(&format!("http://{admin}/failed#groups"))
        .await
        .expect("open /failed#groups");
    give_token(&page, crate::console::TOKEN).await;
    until(
        &page,
        "three groups",
        "return document.querySelectorAll('.fgroup').length === 3",
    )
    .await;
    let counts = page
        .execute(
            "return [...document.querySelectorAll('.fgroup')].map(g => \
             g.querySelector('.fingerprint').textContent + ' = ' + g.querySelector('.gcount').textContent).sort()",
            vec![],
        )
        .await
        .expect("read the groups");
    assert_eq!(
        counts,
        json!([
            r#"sql error: constraint: duplicate key value violates unique constraint "*" (id=*) = 3 messages"#,
            "sql error: no such table: flags = 1 message",
            "timeout: still running after *s = 1 message",
        ])
    );
    until(
        &page,
        "the scan's bounds",
        "return document.querySelector('.scan')?.textContent.includes('3 of 3 read')",
    )
    .await;
    let shot = page.screenshot().await.expect("screenshot");
    let path = screenshot_path("console-groups.png");
    std::fs::write(&path, shot).expect("write the screenshot");
    println!("groups screenshot: {}", path.display());

    // A group discarded as a whole, from the page, through the guard.
    let timeout =
        "[...document.querySelectorAll('.fgroup')].find(g => g.textContent.startsWith('timeout'))";
    page.execute(
        &format!("{timeout}.querySelector('button[data-action=\"discard\"]').click()"),
        vec![],
    )
    .await
    .expect("click discard");
    page.accept_alert().await.expect("confirm the discard");
    until(
        &page,
        "two groups left",
        "return document.querySelectorAll('.fgroup').length === 2",
    )
    .await;
    assert_eq!(fixture.depth("gb").await, 2, "d-3 and t-1 stay");

    // A word of one body finds that message alone.
    page.find(Locator::Id("search-input"))
        .await
        .expect("search input")
        .send_keys("parcel for d-2")
        .await
        .expect("type");
    click(&page, "#search-button").await;
    until(
        &page,
        "the one message found",
        "return document.querySelectorAll('.found').length === 1 && \
         document.querySelector('.found').dataset.id === 'd-2'",
    )
    .await;
    let shot = page.screenshot().await.expect("screenshot");
    let path = screenshot_path("console-search.png");
    std::fs::write(&path, shot).expect("write the screenshot");
    println!("search screenshot: {}", path.display());
    page.close().await.expect("close the browser");
    fixture.probe.stop().await;
}
