//! The example order flow (plugins/order-service in Python, plugins/stock-service in
//! JavaScript, `outbox = true` on every subscription) under crashes, on SQLite and PostgreSQL:
//! 1,000 orders, half of them paid, the host killed with SIGKILL three times mid-stream and the
//! broker restarted once. Every unpaid order is closed, every paid one untouched, every stock
//! lock settled once (the stock count proves no release happened twice), and every message the
//! host published for an order carries one id however often it went out. These restart the
//! broker, so they run alone (the `broker_restart_` prefix; scripts/test.sh).

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use lapin::BasicProperties;
use serde_json::{Value, json};
use sqlx::{AssertSqlSafe, Connection as _, PgPool, SqlitePool};

use crate::faults::support::metric;
use crate::harness::{self, Host, free_addr, http_get};
use crate::service::support::BrokerDown;

const ORDERS: usize = 1000;
/// The payment window: every order must be created and its payment handled within it, kills
/// included (on 2 busy cores creating 1,000 orders on PostgreSQL has taken a minute).
const ORDER_TTL: Duration = Duration::from_secs(150);
/// The stock's own check, after the order's.
const STOCK_TTL: Duration = Duration::from_secs(160);
const SKU: &str = "t-sku";
const STOCK: i64 = 1_000_000;
const SUBSCRIPTIONS: [(&str, &str, &str); 6] = [
    ("order@create", "order_service.wasm", "order.create.order"),
    ("order@pay", "order_service.wasm", "order.pay"),
    ("order@release", "order_service.wasm", "order.release.order"),
    ("stock@reserve", "stock_service.wasm", "order.create.order"),
    ("stock@release", "stock_service.wasm", "order.release.other"),
    ("stock@timeout", "stock_service.wasm", "stock.release"),
];

#[tokio::test]
async fn broker_restart_order_flow_on_sqlite_survives_kills_exactly_once() {
    order_flow(false).await;
}

#[tokio::test]
async fn broker_restart_order_flow_on_postgres_survives_kills_exactly_once() {
    order_flow(true).await;
}

/// The shop database, from outside the host.
enum Db {
    Sqlite(SqlitePool),
    Postgres(PgPool, String),
}

/// Runs `$body` with `$p` bound to whichever pool `$db` holds.
macro_rules! on_pool {
    ($db:expr, |$p:ident| $body:expr) => {
        match $db {
            Db::Sqlite($p) => $body,
            Db::Postgres($p, _) => $body,
        }
    };
}

impl Db {
    async fn exec(&self, statement: &str) {
        let sql = || AssertSqlSafe(statement.to_owned());
        on_pool!(self, |p| sqlx::query(sql()).execute(p).await.map(drop))
            .unwrap_or_else(|e| panic!("{statement}: {e}"));
    }

    async fn scalar(&self, statement: &str) -> i64 {
        let sql = || AssertSqlSafe(statement.to_owned());
        on_pool!(self, |p| sqlx::query_scalar::<_, i64>(sql())
            .fetch_one(p)
            .await)
        .unwrap_or(0)
    }

    async fn pairs(&self, statement: &str) -> Vec<(String, String)> {
        let sql = || AssertSqlSafe(statement.to_owned());
        on_pool!(self, |p| sqlx::query_as::<_, (String, String)>(sql())
            .fetch_all(p)
            .await)
        .unwrap_or_else(|e| panic!("{statement}: {e}"))
    }

    async fn count(&self, status: &str, table: &str) -> i64 {
        let sql = format!("SELECT COUNT(*) FROM {table} WHERE status = '{status}'");
        self.scalar(&sql).await
    }
}

/// A fresh database: a SQLite file under `state`, or a PostgreSQL database of its own.
async fn database(postgres: bool, state: &Path, p: &str) -> (Db, String) {
    if !postgres {
        let file = state.join("shop.db");
        let url = format!("sqlite://{}?mode=rwc", file.display());
        let pool = SqlitePool::connect(&url).await.expect("open SQLite");
        return (Db::Sqlite(pool), "sqlite:shop.db".into());
    }
    let admin = "postgres://postgres@127.0.0.1:5432/test";
    let mut conn = sqlx::PgConnection::connect(admin)
        .await
        .unwrap_or_else(|e| {
            panic!("PostgreSQL at {admin}: {e}\nstart it with: service postgresql start")
        });
    let name = p.replace(['-', '.'], "_").to_ascii_lowercase();
    sqlx::query(AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut conn)
        .await
        .expect("create database");
    let url = format!("postgres://postgres@127.0.0.1:5432/{name}");
    let pool = PgPool::connect(&url).await.expect("connect");
    (Db::Postgres(pool, name), url)
}

/// The stock table as the stock service makes it, with plenty of the test's sku.
async fn seed(db: &Db) {
    db.exec(
        "CREATE TABLE IF NOT EXISTS stock (sku VARCHAR(64) PRIMARY KEY, available INTEGER NOT NULL)",
    )
    .await;
    db.exec(&format!(
        "INSERT INTO stock (sku, available) VALUES ('{SKU}', {STOCK})"
    ))
    .await;
}

fn worker_toml(p: &str, state: &Path, admin: SocketAddr, url: &str) -> String {
    let ex = format!("{p}.orders");
    let mut toml = format!(
        "[broker]\nurl = \"{broker}\"\n\n\
         [exchanges]\nmaster = \"{p}.master\"\nretry = \"{p}.retry\"\nfailed = \"{p}.failed\"\n\n\
         [admin]\nlisten = \"{admin}\"\n\n[state]\ndir = \"{state}\"\n\n\
         [defaults]\nprefetch = 20\nconcurrency = 4\nmax_retries = 100\nretry_delays = [\"1s\"]\n\
         timeout = \"20s\"\ninstance = \"reuse\"\n\n\
         [[exchange]]\nname = \"{ex}\"\ntype = \"topic\"\n\n\
         [[queue]]\nname = \"{p}.order.delay\"\nmessage_ttl = \"{order_ttl}s\"\n\
         dead_letter_exchange = \"{ex}\"\ndead_letter_routing_key = \"order.release.order\"\n\
         bindings = [{{ exchange = \"{ex}\", key = \"order.create.order\" }}]\n\n\
         [[queue]]\nname = \"{p}.stock.delay\"\nmessage_ttl = \"{stock_ttl}s\"\n\
         dead_letter_exchange = \"{ex}\"\ndead_letter_routing_key = \"stock.release\"\n\
         bindings = [{{ exchange = \"{ex}\", key = \"stock.locked\" }}]\n\n\
         [[queue]]\nname = \"{p}.capture\"\nbindings = [{{ exchange = \"{ex}\", key = \"#\" }}]\n\n\
         [sql.shop]\nurl = \"{url}\"\n\n",
        broker = harness::broker_url(),
        state = state.display(),
        order_ttl = ORDER_TTL.as_secs(),
        stock_ttl = STOCK_TTL.as_secs(),
    );
    for (queue, plugin, key) in SUBSCRIPTIONS {
        toml.push_str(&format!(
            "[[subscription]]\nqueue = \"{p}.{queue}\"\nplugin = \"{plugin}\"\nexchange = \"{ex}\"\n\
             bindings = [\"{key}\"]\npublish = [\"{ex}\"]\nsql = \"shop\"\noutbox = true\n\
             [subscription.config]\nexchange = \"{ex}\"\n\n"
        ));
    }
    toml
}

/// The host (the binary, its log appended to one file across restarts) and the duplicates it
/// counted across its processes.
struct Running {
    host: Host,
    /// `worker_duplicates_total` of the processes before this one, and this one's last reading.
    duplicates_before: u64,
    duplicates_now: u64,
}

impl Running {
    /// Reads this process's duplicates counter (kept when the process is gone).
    async fn observe(&mut self) {
        if let Some((_, text)) = http_get(self.host.admin(), "/metrics").await {
            let sum = metric(&text, "worker_duplicates_total", "");
            self.duplicates_now = self.duplicates_now.max(sum as u64);
        }
    }

    /// SIGKILL, then a new process on the same config.
    async fn kill_and_restart(&mut self, why: &str) {
        self.observe().await;
        self.host.kill();
        eprintln!("killed the host: {why}");
        self.duplicates_before += std::mem::take(&mut self.duplicates_now);
        self.host.respawn();
    }

    fn duplicates(&self) -> u64 {
        self.duplicates_before + self.duplicates_now
    }
}

fn order_id(i: usize) -> String {
    format!("o-{i:04}")
}

fn qty(i: usize) -> i64 {
    1 + (i % 3) as i64
}

async fn order_flow(postgres: bool) {
    let p = harness::unique(if postgres { "orders-pg" } else { "orders-lite" });
    let dir = tempfile::tempdir().expect("temp dir");
    let (plugins, state) = (dir.path().join("plugins"), dir.path().join("state"));
    std::fs::create_dir_all(&plugins).expect("plugins dir");
    std::fs::create_dir_all(&state).expect("state dir");
    // Compiled components are cached by content hash: one cache for both order flows (and
    // later runs), so only the first compiles the two interpreters, which on 2 cores shared
    // with other work has taken minutes.
    let compiled = Path::new(env!("CARGO_TARGET_TMPDIR")).join("orders-compiled");
    std::fs::create_dir_all(&compiled).expect("shared compiled-component folder");
    std::os::unix::fs::symlink(&compiled, state.join("compiled")).expect("compiled link");
    for plugin in ["order_service.wasm", "stock_service.wasm"] {
        let built = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../plugins")
            .join(plugin);
        std::fs::copy(&built, plugins.join(plugin)).unwrap_or_else(|e| {
            panic!(
                "{} is not built ({e}): run scripts/build-plugins.sh",
                built.display()
            )
        });
    }
    let (shop, url) = database(postgres, &state, &p).await;
    let db = &shop;
    seed(db).await;
    let admin = free_addr();
    let config = dir.path().join("worker.toml");
    std::fs::write(&config, worker_toml(&p, &state, admin, &url)).expect("worker.toml");
    let mut host = Running {
        host: Host::child(&config)
            .env("RUST_LOG", "warn")
            .admin(admin)
            .start(),
        duplicates_before: 0,
        duplicates_now: 0,
    };
    let conn = harness::connect().await;
    // The first start may compile two interpreters' components (cached for the restarts and
    // the other flow): a minute alone, several on a machine busy with other work.
    for (queue, _, _) in SUBSCRIPTIONS {
        let queue = format!("{p}.{queue}");
        harness::eventually(Duration::from_secs(600), &queue, || async {
            harness::probe(&conn, &queue)
                .await
                .filter(|q| q.consumer_count() > 0)
        })
        .await;
    }

    // Orders, then payments for the even ones: all within the payment window.
    let ch = conn.create_channel().await.expect("channel");
    ch.confirm_select(Default::default())
        .await
        .expect("confirms");
    let ex = format!("{p}.orders");
    let started = Instant::now();
    for i in 0..ORDERS {
        let body = json!({"order_id": order_id(i), "sku": SKU, "qty": qty(i)});
        let props = BasicProperties::default().with_message_id(order_id(i).into());
        harness::publish(
            &ch,
            &ex,
            "order.create.order",
            body.to_string().as_bytes(),
            props,
        )
        .await;
    }

    // Kill 1 while orders are created; the payments for the even ones once all exist, kill 2
    // while they are handled.
    wait_for(
        &mut host,
        db,
        "250 orders",
        Duration::from_secs(60),
        || async move { db.scalar("SELECT COUNT(*) FROM orders").await >= 250 },
    )
    .await;
    host.kill_and_restart("250 orders created").await;
    wait_for(&mut host, db, "every order", ORDER_TTL, || async move {
        db.scalar("SELECT COUNT(*) FROM orders").await == ORDERS as i64
    })
    .await;
    for i in (0..ORDERS).step_by(2) {
        let body = json!({"order_id": order_id(i)});
        let props =
            BasicProperties::default().with_message_id(format!("pay-{}", order_id(i)).into());
        harness::publish(&ch, &ex, "order.pay", body.to_string().as_bytes(), props).await;
    }
    let _ = conn.close(200, "published".into()).await;
    wait_for(
        &mut host,
        db,
        "200 payments",
        Duration::from_secs(60),
        || async move { db.count("paid", "orders").await >= 200 },
    )
    .await;
    host.kill_and_restart("200 orders paid").await;
    wait_for(&mut host, db, "every payment", ORDER_TTL, || async move {
        db.count("paid", "orders").await == (ORDERS / 2) as i64
    })
    .await;
    assert!(
        started.elapsed() < ORDER_TTL,
        "too slow for this test: the payments took {:?}, the payment window is {ORDER_TTL:?}",
        started.elapsed()
    );

    // Kill 3 and the broker restart while orders are closed and stock released.
    let wait = ORDER_TTL + Duration::from_secs(60);
    wait_for(&mut host, db, "100 closed orders", wait, || async move {
        db.count("closed", "orders").await >= 100
    })
    .await;
    host.kill_and_restart("100 orders closed").await;
    wait_for(
        &mut host,
        db,
        "250 closed orders",
        Duration::from_secs(60),
        || async move { db.count("closed", "orders").await >= 250 },
    )
    .await;
    let broker = BrokerDown::stop().await;
    broker.start().await;
    eprintln!("restarted the broker");
    let wait = STOCK_TTL + Duration::from_secs(90);
    wait_for(&mut host, db, "every lock settled", wait, || async move {
        db.count("closed", "orders").await == (ORDERS / 2) as i64
            && db.count("locked", "stock_locks").await == 0
    })
    .await;
    host.observe().await;

    check_database(db).await;
    check_published(&p).await;
    println!(
        "{ORDERS} orders in {:?}: 3 kills, 1 broker restart, {} duplicate deliveries acked \
         without a call",
        started.elapsed(),
        host.duplicates()
    );
    assert!(
        host.duplicates() > 0,
        "no duplicate delivery after three kills"
    );
    drop(host);
    cleanup(&p, shop).await;
}

/// Polls `done` every 100 ms until `wait` passes, reading the duplicates counter meanwhile.
async fn wait_for<F, Fut>(host: &mut Running, db: &Db, what: &str, wait: Duration, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + wait;
    while !done().await {
        if let Some(status) = host.host.exit_status() {
            panic!("worker-host exited ({status}) waiting for {what}");
        }
        if Instant::now() >= deadline {
            panic!(
                "no {what} after {wait:?}; {}\nthe host's log (RUST_LOG=warn), last 40 lines:\n{}",
                summary(db).await,
                host.host.log_tail(40)
            );
        }
        host.observe().await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Orders and locks by status, for a failure's message.
async fn summary(db: &Db) -> String {
    let mut text = String::new();
    for table in ["orders", "stock_locks"] {
        let rows = db
            .pairs(&format!(
                "SELECT status, CAST(COUNT(*) AS TEXT) FROM {table} GROUP BY status"
            ))
            .await;
        text.push_str(&format!("{table}: {rows:?} "));
    }
    text
}

/// Paid orders untouched, unpaid ones closed, locks settled once: what was released came back
/// exactly once, what was paid stays taken.
async fn check_database(db: &Db) {
    let orders: BTreeMap<String, String> = db
        .pairs("SELECT order_id, status FROM orders")
        .await
        .into_iter()
        .collect();
    let locks: BTreeMap<String, String> = db
        .pairs("SELECT order_id, status FROM stock_locks")
        .await
        .into_iter()
        .collect();
    assert_eq!(orders.len(), ORDERS, "every order created once");
    assert_eq!(locks.len(), ORDERS, "every order's stock locked once");
    let mut sold = 0;
    for i in 0..ORDERS {
        let id = order_id(i);
        let (want_order, want_lock) = if i % 2 == 0 {
            ("paid", "deducted")
        } else {
            ("closed", "released")
        };
        assert_eq!(orders[&id], want_order, "order {id}");
        assert_eq!(locks[&id], want_lock, "stock lock of {id}");
        if i % 2 == 0 {
            sold += qty(i);
        }
    }
    let available = db
        .scalar(&format!(
            "SELECT CAST(available AS BIGINT) FROM stock WHERE sku = '{SKU}'"
        ))
        .await;
    assert_eq!(
        available,
        STOCK - sold,
        "released stock came back exactly once"
    );
}

/// Every message the host published for an order (its close, its stock lock) has one message
/// id of the form `<input id>:<n>`, however many copies went out.
async fn check_published(p: &str) {
    let (conn, ch) = harness::channel().await;
    let queue = format!("{p}.capture");
    let mut ids: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    while let Some(msg) = harness::get(&ch, &queue).await {
        let key = msg.delivery.routing_key.to_string();
        if !matches!(key.as_str(), "order.release.other" | "stock.locked") {
            continue;
        }
        let body: Value = serde_json::from_slice(&msg.delivery.data).expect("JSON");
        let order = body["order_id"].as_str().expect("order_id").to_owned();
        let id = msg
            .delivery
            .properties
            .message_id()
            .as_ref()
            .map_or(String::new(), |s| s.to_string());
        assert!(
            id.starts_with(&format!("{order}:")),
            "{key} of {order} has id {id:?}"
        );
        ids.entry((key, order)).or_default().insert(id);
    }
    let _ = conn.close(200, "checked".into()).await;
    let releases = ids
        .keys()
        .filter(|(k, _)| k == "order.release.other")
        .count();
    let locks = ids.keys().filter(|(k, _)| k == "stock.locked").count();
    assert_eq!(
        (releases, locks),
        (ORDERS / 2, ORDERS),
        "published messages per order"
    );
    let twice: Vec<_> = ids.iter().filter(|(_, set)| set.len() > 1).collect();
    assert!(twice.is_empty(), "published under different ids: {twice:?}");
}

async fn cleanup(p: &str, db: Db) {
    let mut queues = vec![
        format!("{p}.order.delay"),
        format!("{p}.stock.delay"),
        format!("{p}.capture"),
    ];
    for (queue, _, _) in SUBSCRIPTIONS {
        let q = format!("{p}.{queue}");
        queues.extend([format!("{q}@failed"), format!("{q}@retry.1s"), q]);
    }
    let exchanges = ["orders", "master", "retry", "failed"].map(|e| format!("{p}.{e}"));
    harness::cleanup(&queues, &exchanges).await;
    if let Db::Postgres(pool, name) = db {
        pool.close().await;
        if let Ok(mut conn) =
            sqlx::PgConnection::connect("postgres://postgres@127.0.0.1:5432/test").await
        {
            let _ = sqlx::query(AssertSqlSafe(format!("DROP DATABASE IF EXISTS {name}")))
                .execute(&mut conn)
                .await;
        }
    }
}
