//! What every backend must do the same way: each scenario takes an opened store and is run by
//! `embedded.rs` and `redis.rs`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Ctx, deadline};
use crate::capability::Capability as _;
use crate::capability::kv::{MAX_KEY_LEN, Store};
use crate::wit::worker::plugin::kv::{Host as _, KvError};

/// get, set, delete on present, absent and overwritten keys; binary values come back as set.
pub(super) async fn operations(ctx: &Ctx) {
    let s = &ctx.store;
    assert_eq!(s.get("a", deadline()).await.unwrap(), None);
    s.set("a", b"one".to_vec(), None, deadline()).await.unwrap();
    assert_eq!(s.get("a", deadline()).await.unwrap(), Some(b"one".to_vec()));
    s.set("a", b"two".to_vec(), None, deadline()).await.unwrap();
    assert_eq!(s.get("a", deadline()).await.unwrap(), Some(b"two".to_vec()));

    let binary = vec![0, 255, 1, 0, 128];
    s.set("bin", binary.clone(), None, deadline())
        .await
        .unwrap();
    assert_eq!(s.get("bin", deadline()).await.unwrap(), Some(binary));
    s.set("empty", Vec::new(), None, deadline()).await.unwrap();
    assert_eq!(s.get("empty", deadline()).await.unwrap(), Some(Vec::new()));

    assert!(s.delete("a", deadline()).await.unwrap(), "a existed");
    assert!(!s.delete("a", deadline()).await.unwrap(), "a is gone");
    assert_eq!(s.get("a", deadline()).await.unwrap(), None);
    assert!(!s.delete("never", deadline()).await.unwrap());
}

/// increment: absent is 0, the count reads back as decimal text, other values and overflow
/// are refused with the documented variants and leave the value as it was.
pub(super) async fn increment(ctx: &Ctx) {
    let s = &ctx.store;
    assert_eq!(s.increment("n", 5, deadline()).await.unwrap(), 5);
    assert_eq!(s.increment("n", -7, deadline()).await.unwrap(), -2);
    assert_eq!(s.get("n", deadline()).await.unwrap(), Some(b"-2".to_vec()));

    s.set("text", b"12".to_vec(), None, deadline())
        .await
        .unwrap();
    assert_eq!(s.increment("text", 30, deadline()).await.unwrap(), 42);

    s.set("word", b"abc".to_vec(), None, deadline())
        .await
        .unwrap();
    let err = s.increment("word", 1, deadline()).await.unwrap_err();
    assert!(matches!(err, KvError::InvalidKey), "{err:?}");
    assert_eq!(
        s.get("word", deadline()).await.unwrap(),
        Some(b"abc".to_vec())
    );

    s.set("max", i64::MAX.to_string().into_bytes(), None, deadline())
        .await
        .unwrap();
    let err = s.increment("max", 1, deadline()).await.unwrap_err();
    assert!(matches!(err, KvError::TooLarge), "{err:?}");
    let max = Some(i64::MAX.to_string().into_bytes());
    assert_eq!(s.get("max", deadline()).await.unwrap(), max);
}

/// compare-and-swap with none (only if absent) and with a value, matching or not.
pub(super) async fn compare_and_swap(ctx: &Ctx) {
    let s = &ctx.store;
    let cas = |expected: Option<&[u8]>, value: &[u8]| {
        s.compare_and_swap(
            "c",
            expected.map(<[u8]>::to_vec),
            value.to_vec(),
            None,
            deadline(),
        )
    };
    assert!(cas(None, b"first").await.unwrap(), "absent: writes");
    assert!(
        !cas(None, b"second").await.unwrap(),
        "present: none does not match"
    );
    assert_eq!(
        s.get("c", deadline()).await.unwrap(),
        Some(b"first".to_vec())
    );
    assert!(
        !cas(Some(b"other"), b"third").await.unwrap(),
        "different value"
    );
    assert!(cas(Some(b"first"), b"fourth").await.unwrap(), "equal value");
    assert_eq!(
        s.get("c", deadline()).await.unwrap(),
        Some(b"fourth".to_vec())
    );
    assert!(
        cas(Some(b"fourth"), b"").await.unwrap(),
        "an empty value is a value"
    );
    assert!(!cas(None, b"x").await.unwrap(), "an empty value is present");

    s.delete("c", deadline()).await.unwrap();
    assert!(!cas(Some(b""), b"x").await.unwrap(), "absent is not empty");
    assert!(cas(None, b"again").await.unwrap());
}

/// Values written with a TTL disappear after it (polled, not slept), whichever call wrote
/// them; `increment` keeps a TTL; `set` without one makes a key permanent. The TTL is long
/// enough that the writes and reads before the wait finish inside it on a busy machine.
pub(super) async fn ttl(ctx: &Ctx) {
    let s = &ctx.store;
    s.set("t-set", b"v".to_vec(), Some(1_500), deadline())
        .await
        .unwrap();
    s.compare_and_swap("t-cas", None, b"v".to_vec(), Some(1_500), deadline())
        .await
        .unwrap();
    s.set("t-inc", b"1".to_vec(), Some(1_500), deadline())
        .await
        .unwrap();
    assert_eq!(s.increment("t-inc", 1, deadline()).await.unwrap(), 2);
    s.set("t-perm", b"v".to_vec(), Some(1_500), deadline())
        .await
        .unwrap();
    s.set("t-perm", b"w".to_vec(), None, deadline())
        .await
        .unwrap();
    assert_eq!(
        s.get("t-set", deadline()).await.unwrap(),
        Some(b"v".to_vec())
    );

    for key in ["t-set", "t-cas", "t-inc"] {
        wait_absent(s, key).await;
    }
    assert_eq!(
        s.get("t-perm", deadline()).await.unwrap(),
        Some(b"w".to_vec())
    );
    assert!(
        !s.delete("t-set", deadline()).await.unwrap(),
        "expired is absent"
    );
    assert!(
        s.compare_and_swap("t-cas", None, b"new".to_vec(), None, deadline())
            .await
            .unwrap(),
        "expired counts as absent for compare-and-swap"
    );
    assert_eq!(
        s.increment("t-inc", 1, deadline()).await.unwrap(),
        1,
        "expired counts as 0"
    );
    // A TTL of 0 is taken as 1 ms, not refused.
    s.set("t-zero", b"v".to_vec(), Some(0), deadline())
        .await
        .unwrap();
    wait_absent(s, "t-zero").await;
}

/// Polls until `key` reads as absent; fails after 5 s.
pub(super) async fn wait_absent(s: &Store, key: &str) {
    let until = Instant::now() + Duration::from_secs(5);
    while s.get(key, deadline()).await.unwrap().is_some() {
        assert!(Instant::now() < until, "{key} did not expire within 5 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Keys of 1 to 1024 bytes and values up to the store's `max_value_size` are taken; others
/// refused with `invalid-key` and `too-large`, by every operation.
pub(super) async fn limits(ctx: &Ctx, max_value_size: usize) {
    let s = &ctx.store;
    let long = "k".repeat(MAX_KEY_LEN);
    s.set(&long, b"v".to_vec(), None, deadline()).await.unwrap();
    assert_eq!(s.get(&long, deadline()).await.unwrap(), Some(b"v".to_vec()));
    let too_long = "k".repeat(MAX_KEY_LEN + 1);
    for key in ["", too_long.as_str()] {
        let d = deadline();
        assert!(matches!(s.get(key, d).await, Err(KvError::InvalidKey)));
        assert!(matches!(
            s.set(key, vec![], None, d).await,
            Err(KvError::InvalidKey)
        ));
        assert!(matches!(s.delete(key, d).await, Err(KvError::InvalidKey)));
        assert!(matches!(
            s.increment(key, 1, d).await,
            Err(KvError::InvalidKey)
        ));
        let cas = s.compare_and_swap(key, None, vec![], None, d).await;
        assert!(matches!(cas, Err(KvError::InvalidKey)));
    }

    s.set("big", vec![7; max_value_size], None, deadline())
        .await
        .unwrap();
    let over = vec![7; max_value_size + 1];
    let set = s.set("big", over.clone(), None, deadline()).await;
    assert!(matches!(set, Err(KvError::TooLarge)), "{set:?}");
    let cas = s
        .compare_and_swap("big", None, over, None, deadline())
        .await;
    assert!(matches!(cas, Err(KvError::TooLarge)), "{cas:?}");
    let big = s.get("big", deadline()).await.unwrap().unwrap();
    assert_eq!(
        big.len(),
        max_value_size,
        "the refused writes changed nothing"
    );
}

/// 8 tasks each add 1 to a counter `per_task` times by get + compare-and-swap, retrying when
/// another task won: no increment is lost.
pub(super) async fn cas_contention(ctx: &Ctx, per_task: u64) {
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let s: Arc<Store> = ctx.store.clone();
        tasks.push(tokio::spawn(async move {
            let mut conflicts = 0u64;
            for _ in 0..per_task {
                loop {
                    let current = s.get("counter", deadline()).await.unwrap();
                    let n: u64 = current
                        .as_deref()
                        .map_or(0, |v| std::str::from_utf8(v).unwrap().parse().unwrap());
                    let next = (n + 1).to_string().into_bytes();
                    let wrote = s.compare_and_swap("counter", current, next, None, deadline());
                    if wrote.await.unwrap() {
                        break;
                    }
                    conflicts += 1;
                }
            }
            conflicts
        }));
    }
    let mut conflicts = 0;
    for task in tasks {
        conflicts += task.await.unwrap();
    }
    let total = ctx.store.get("counter", deadline()).await.unwrap().unwrap();
    assert_eq!(
        String::from_utf8(total).unwrap(),
        (8 * per_task).to_string()
    );
    eprintln!(
        "{} increments, {conflicts} lost races retried",
        8 * per_task
    );
}

/// The guest's imports through a granted instance, and `denied` once the message finished.
pub(super) async fn through_instance(ctx: &Ctx) {
    let mut m = ctx.message(Duration::from_secs(10));
    m.set("guest".into(), b"1".to_vec(), None).await.unwrap();
    assert_eq!(m.get("guest".into()).await.unwrap(), Some(b"1".to_vec()));
    assert_eq!(m.increment("guest".into(), 2).await.unwrap(), 3);
    let swapped = m.compare_and_swap("guest".into(), Some(b"3".to_vec()), b"x".to_vec(), None);
    assert!(swapped.await.unwrap());
    assert!(m.delete("guest".into()).await.unwrap());
    m.finish(true).await.unwrap();
    assert!(matches!(m.get("guest".into()).await, Err(KvError::Denied)));

    let calls = ctx.metrics.encode(None);
    let ok = "result=\"ok\"";
    let line = calls
        .lines()
        .find(|l| l.contains("capability_calls") && l.contains(&ctx.name) && l.contains(ok));
    assert!(line.is_some(), "calls are counted per store:\n{calls}");
}

/// A call whose handler has no time left answers `unavailable("timed out ...")` at once.
pub(super) async fn past_deadline(ctx: &Ctx) {
    let mut m = ctx.message(Duration::ZERO);
    let started = Instant::now();
    let err = m.set("late".into(), b"v".to_vec(), None).await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(1));
    match err {
        KvError::Unavailable(why) => assert!(why.contains("timed out"), "{why}"),
        other => panic!("expected unavailable, got {other:?}"),
    }
    assert!(
        ctx.metrics.readiness().is_ok(),
        "a timeout is not a store that is down"
    );
}
