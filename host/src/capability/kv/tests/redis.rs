//! The Redis backend: the shared scenarios on the machine's server, keys namespaced per store,
//! and a server that is down, silent or comes back.

use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{Ctx, deadline, open, scenarios};
use crate::config::{DEFAULT_KV_MAX_VALUE, KvBackend, Secret};
use crate::testing::unique;
use crate::wit::worker::plugin::kv::{Host as _, KvError};

/// Runs `scenario` on a fresh store (whose keys are removed when it drops).
async fn with_store<F: AsyncFnOnce(&Ctx)>(max_value_size: u64, scenario: F) {
    scenario(&redis(max_value_size).await).await;
}

#[tokio::test]
async fn operations() {
    with_store(DEFAULT_KV_MAX_VALUE, scenarios::operations).await;
}

#[tokio::test]
async fn increment() {
    with_store(DEFAULT_KV_MAX_VALUE, scenarios::increment).await;
}

#[tokio::test]
async fn compare_and_swap() {
    with_store(DEFAULT_KV_MAX_VALUE, scenarios::compare_and_swap).await;
}

#[tokio::test]
async fn ttl() {
    with_store(DEFAULT_KV_MAX_VALUE, scenarios::ttl).await;
}

#[tokio::test]
async fn limits() {
    with_store(1000, async |ctx| scenarios::limits(ctx, 1000).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cas_contention() {
    with_store(DEFAULT_KV_MAX_VALUE, async |ctx| {
        scenarios::cas_contention(ctx, 25).await;
    })
    .await;
}

#[tokio::test]
async fn through_instance() {
    with_store(DEFAULT_KV_MAX_VALUE, scenarios::through_instance).await;
}

#[tokio::test]
async fn past_deadline() {
    with_store(DEFAULT_KV_MAX_VALUE, scenarios::past_deadline).await;
}

/// A store's keys live under `kv:{store}:`; another store of the same server does not see them.
#[tokio::test]
async fn keys_are_namespaced_per_store() {
    let a = redis(DEFAULT_KV_MAX_VALUE).await;
    let b = redis(DEFAULT_KV_MAX_VALUE).await;
    a.store
        .set("shared", b"a".to_vec(), None, deadline())
        .await
        .unwrap();
    assert_eq!(b.store.get("shared", deadline()).await.unwrap(), None);
    let mut conn = raw_redis().await;
    let raw: Option<Vec<u8>> = ::redis::cmd("GET")
        .arg(format!("kv:{}:shared", a.name))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(raw, Some(b"a".to_vec()));
}

/// Nothing listens: opening succeeds, calls answer `unavailable` at once, `/readyz` says why
/// without the password, and a ping fails.
#[tokio::test]
async fn server_down_answers_unavailable() {
    let url = format!("redis://:hunter2@127.0.0.1:{}/0", closed_port());
    let ctx = open(
        &unique("down"),
        KvBackend::Redis {
            url: Secret::new(url),
        },
        100,
    )
    .await;
    let mut m = ctx.message(Duration::from_secs(5));
    let started = Instant::now();
    let err = m.get("k".into()).await.unwrap_err();
    assert!(matches!(err, KvError::Unavailable(_)), "{err:?}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    let err = m.set("k".into(), b"v".to_vec(), None).await.unwrap_err();
    assert!(matches!(err, KvError::Unavailable(_)), "{err:?}");

    let ready = ctx.metrics.readiness().unwrap_err();
    assert!(ready.contains(&format!("kv.{}", ctx.name)), "{ready}");
    let ping = ctx.store.ping().await.unwrap_err();
    // What `/readyz` hears names no URL, not even without its password.
    assert!(
        !ping.contains("127.0.0.1") && !ping.contains("redis://"),
        "{ping}"
    );
    for text in [
        &ready,
        &ping,
        &format!("{err:?}"),
        &ctx.metrics.encode(None),
    ] {
        assert!(!text.contains("hunter2"), "the password leaked: {text}");
    }
}

/// A server that accepts connections and never answers: every call still ends by its deadline.
#[tokio::test]
async fn silent_server_does_not_hang_past_the_deadline() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    // Accepts and holds connections, reading nothing; ends with the test process.
    std::thread::spawn(move || {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept() {
            held.push(socket);
        }
    });
    let url = Secret::new(format!("redis://127.0.0.1:{port}/0"));
    let ctx = open(&unique("silent"), KvBackend::Redis { url }, 100).await;
    for _ in 0..3 {
        let mut m = ctx.message(Duration::from_millis(300));
        let started = Instant::now();
        let err = m.increment("k".into(), 1).await.unwrap_err();
        // The deadline's answer, not the connect timeout's (1 s) nor the response timeout's.
        assert!(
            matches!(&err, KvError::Unavailable(why) if why.starts_with("timed out")),
            "{err:?}"
        );
        let took = started.elapsed();
        assert!(took < Duration::from_secs(3), "took {took:?}");
    }
}

/// A Redis server of this test, on a port of its own; stopped (by its pid) when dropped.
struct OwnServer {
    child: Child,
}

impl OwnServer {
    fn start(port: u16) -> OwnServer {
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server runs (the Redis tests need it installed, as for `redis-server --daemonize yes`)");
        OwnServer { child }
    }
}

impl Drop for OwnServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `set` until it succeeds; fails after 30 s.
async fn until_set(ctx: &Ctx) {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let mut m = ctx.message(Duration::from_secs(2));
        match m.set("k".into(), b"v".to_vec(), None).await {
            Ok(()) => return,
            Err(e) => assert!(Instant::now() < until, "still failing after 30 s: {e:?}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Down at start, then up: the store connects by itself; then stopped and started again: calls
/// answer `unavailable` meanwhile and work again after, and `/readyz` follows.
#[tokio::test]
async fn reconnects_when_the_server_comes_back() {
    redis_up();
    let port = closed_port();
    let url = Secret::new(format!("redis://127.0.0.1:{port}/0"));
    let ctx = open(&unique("back"), KvBackend::Redis { url }, 100).await;
    let mut m = ctx.message(Duration::from_secs(2));
    assert!(matches!(
        m.get("k".into()).await,
        Err(KvError::Unavailable(_))
    ));
    assert!(ctx.metrics.readiness().is_err());

    let server = OwnServer::start(port);
    until_set(&ctx).await;
    assert!(ctx.metrics.readiness().is_ok(), "back in /readyz");
    assert!(ctx.store.ping().await.is_ok());

    drop(server);
    let mut m = ctx.message(Duration::from_secs(2));
    let err = m.get("k".into()).await.unwrap_err();
    assert!(matches!(err, KvError::Unavailable(_)), "{err:?}");
    assert!(ctx.metrics.readiness().is_err());

    let _server = OwnServer::start(port);
    until_set(&ctx).await;
    let mut m = ctx.message(Duration::from_secs(2));
    assert_eq!(m.get("k".into()).await.unwrap(), Some(b"v".to_vec()));
    assert!(ctx.metrics.readiness().is_ok());
}

/// `rediss://` builds a TLS client (rustls over ring) without panicking; a server that does
/// not speak TLS answers `unavailable`.
#[tokio::test]
async fn tls_to_a_plain_server_is_unavailable() {
    redis_up();
    let url = Secret::new("rediss://127.0.0.1:6379/0");
    let ctx = open(&unique("tls"), KvBackend::Redis { url }, 100).await;
    let mut m = ctx.message(Duration::from_secs(3));
    let err = m.get("k".into()).await.unwrap_err();
    assert!(matches!(err, KvError::Unavailable(_)), "{err:?}");
}

const REDIS_URL: &str = "redis://127.0.0.1:6379/0";

/// A Redis store of a fresh name; fails the test if Redis does not answer.
async fn redis(max_value_size: u64) -> Ctx {
    redis_up();
    let url = Secret::new(REDIS_URL);
    let name = unique("t");
    let mut ctx = open(&name, KvBackend::Redis { url }, max_value_size).await;
    ctx._keys = Some(Box::new(RedisKeys(name)));
    ctx
}

/// Fails (never skips) when the machine's Redis is not there.
fn redis_up() {
    let addr = SocketAddr::from(([127, 0, 0, 1], 6379));
    if TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_err() {
        panic!(
            "Redis does not answer on 127.0.0.1:6379: start it with `redis-server --daemonize yes`"
        );
    }
}

/// A raw connection to the test Redis, beside the store's.
async fn raw_redis() -> ::redis::aio::MultiplexedConnection {
    ::redis::Client::open(REDIS_URL)
        .expect("redis url")
        .get_multiplexed_async_connection()
        .await
        .expect("Redis answers: start it with `redis-server --daemonize yes`")
}

/// The keys of a Redis store under test, removed from the server on drop.
struct RedisKeys(String);

impl Drop for RedisKeys {
    fn drop(&mut self) {
        let removed = ::redis::Client::open(REDIS_URL)
            .and_then(|c| c.get_connection())
            .and_then(|mut conn| {
                let keys: Vec<String> = ::redis::cmd("KEYS")
                    .arg(format!("kv:{}:*", self.0))
                    .query(&mut conn)?;
                if !keys.is_empty() {
                    ::redis::cmd("DEL").arg(keys).exec(&mut conn)?;
                }
                Ok(())
            });
        if let Err(e) = removed {
            eprintln!("could not remove the keys of store {}: {e}", self.0);
        }
    }
}

/// A port on which nothing listens.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("local addr").port();
    drop(listener);
    port
}
