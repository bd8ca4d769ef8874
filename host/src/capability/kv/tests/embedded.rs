//! The embedded (redb) backend: the shared scenarios, the file surviving a restart, and the
//! sweep of expired keys.

use std::time::Duration;

use super::super::Backend;
use super::{Ctx, deadline, embedded, message, open, scenarios};
use crate::config::KvBackend;
use crate::wit::worker::plugin::kv::{Host as _, KvError};

fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().expect("temp dir")
}

/// The (all, expiring) entry counts of the store's file.
fn stored(ctx: &Ctx) -> (u64, u64) {
    match &ctx.store.backend {
        Backend::Embedded(e) => e.stored(),
        Backend::Redis(_) => unreachable!("an embedded store"),
    }
}

#[tokio::test]
async fn operations() {
    let dir = tempdir();
    scenarios::operations(&embedded(dir.path(), "ops").await).await;
}

#[tokio::test]
async fn increment() {
    let dir = tempdir();
    scenarios::increment(&embedded(dir.path(), "inc").await).await;
}

#[tokio::test]
async fn compare_and_swap() {
    let dir = tempdir();
    scenarios::compare_and_swap(&embedded(dir.path(), "cas").await).await;
}

#[tokio::test]
async fn ttl() {
    let dir = tempdir();
    scenarios::ttl(&embedded(dir.path(), "ttl").await).await;
}

#[tokio::test]
async fn limits() {
    let dir = tempdir();
    let path = dir.path().join("limits.redb");
    let ctx = open("limits", KvBackend::Embedded { path }, 1000).await;
    scenarios::limits(&ctx, 1000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cas_contention() {
    let dir = tempdir();
    scenarios::cas_contention(&embedded(dir.path(), "race").await, 25).await;
}

#[tokio::test]
async fn through_instance() {
    let dir = tempdir();
    scenarios::through_instance(&embedded(dir.path(), "guest").await).await;
}

#[tokio::test]
async fn past_deadline() {
    let dir = tempdir();
    scenarios::past_deadline(&embedded(dir.path(), "late").await).await;
}

#[tokio::test]
async fn denied_without_grant() {
    let mut m = message(None, Duration::from_secs(10));
    assert!(matches!(m.get("k".into()).await, Err(KvError::Denied)));
    assert!(matches!(
        m.set("k".into(), vec![], None).await,
        Err(KvError::Denied)
    ));
    assert!(matches!(m.delete("k".into()).await, Err(KvError::Denied)));
    assert!(matches!(
        m.increment("k".into(), 1).await,
        Err(KvError::Denied)
    ));
    let cas = m.compare_and_swap("k".into(), None, vec![], None).await;
    assert!(matches!(cas, Err(KvError::Denied)));
}

/// Closing and reopening the file (a host restart) keeps values, counts and TTLs; the
/// directory is created on first open.
#[tokio::test]
async fn survives_reopen() {
    let dir = tempdir();
    {
        let ctx = embedded(dir.path(), "keep").await;
        assert!(dir.path().join("kv/keep.redb").is_file());
        let s = &ctx.store;
        s.set("plain", b"v".to_vec(), None, deadline())
            .await
            .unwrap();
        s.increment("count", 41, deadline()).await.unwrap();
        s.set("later", b"l".to_vec(), Some(3_600_000), deadline())
            .await
            .unwrap();
        s.set("soon", b"s".to_vec(), Some(100), deadline())
            .await
            .unwrap();
    }
    let ctx = embedded(dir.path(), "keep").await;
    let s = &ctx.store;
    assert_eq!(
        s.get("plain", deadline()).await.unwrap(),
        Some(b"v".to_vec())
    );
    assert_eq!(s.increment("count", 1, deadline()).await.unwrap(), 42);
    assert_eq!(
        s.get("later", deadline()).await.unwrap(),
        Some(b"l".to_vec())
    );
    scenarios::wait_absent(s, "soon").await;
    assert!(s.ping().await.is_ok());
}

/// Expired keys nobody reads again are removed by later writes, index and all.
#[tokio::test]
async fn writes_sweep_expired_keys() {
    let dir = tempdir();
    let ctx = embedded(dir.path(), "sweep").await;
    let s = &ctx.store;
    // Long enough that no key expires while the eleven durable writes run on a busy machine
    // (50 ms did not, in CI), so the first count is exact.
    for i in 0..10 {
        s.set(&format!("gone{i}"), b"v".to_vec(), Some(1_500), deadline())
            .await
            .unwrap();
    }
    s.set("stays", b"v".to_vec(), None, deadline())
        .await
        .unwrap();
    assert_eq!(stored(&ctx), (11, 10));
    scenarios::wait_absent(s, "gone9").await;
    s.set("other", b"v".to_vec(), None, deadline())
        .await
        .unwrap();
    assert_eq!(stored(&ctx), (2, 0), "only the live keys are left");
}

/// A file another store holds open cannot be opened twice: a start-up error naming it.
#[tokio::test]
async fn second_open_of_a_file_fails_at_start() {
    let dir = tempdir();
    let _first = embedded(dir.path(), "once").await;
    let path = dir.path().join("kv/once.redb");
    let config = crate::config::KvStoreConfig {
        name: "once".into(),
        backend: KvBackend::Embedded { path },
        max_value_size: 10,
    };
    let recorder = crate::capability::Recorder::detached("kv", "once");
    let err = super::Store::open(&config, recorder)
        .await
        .err()
        .expect("refused");
    assert!(format!("{err:#}").contains("once.redb"), "{err:#}");
}
