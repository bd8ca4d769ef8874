//! Unit tests of the delay encoding, limits and plan.

use super::*;
use crate::topology::{Arg, Destination};

fn delayer(levels: u8) -> DelayLevels {
    DelayLevels::new(levels).expect("valid levels")
}

#[test]
fn rounds_up_to_granularity_and_never_early() {
    let d = delayer(4);
    assert_eq!(d.steps(Duration::ZERO).unwrap(), 0);
    assert_eq!(d.steps(Duration::from_millis(1)).unwrap(), 1);
    assert_eq!(d.steps(Duration::from_millis(125)).unwrap(), 1);
    assert_eq!(d.steps(Duration::from_millis(126)).unwrap(), 2);
    assert_eq!(d.steps(Duration::from_secs(10)).unwrap(), 80);
    for ms in [1u64, 999, 1000, 1001, 7_777, 15_875] {
        let steps = d.steps(Duration::from_millis(ms)).unwrap();
        let total: u64 = (0..d.bits())
            .filter(|b| steps >> b & 1 == 1)
            .map(DelayLevels::ttl_ms)
            .sum();
        assert!(total >= ms && total < ms + 125, "{ms} ms -> {total} ms");
    }
}

#[test]
fn refuses_beyond_the_maximum() {
    let d = delayer(4);
    assert_eq!(d.max_delay(), Duration::from_millis(15_875));
    assert!(d.steps(Duration::from_millis(15_875)).is_ok());
    let err = d.steps(Duration::from_secs(16)).unwrap_err();
    assert_eq!(
        err.to_string(),
        "a delay of 16s is beyond the maximum of 15s 875ms that [delay] levels = 4 allows"
    );
    // 28 levels cover more than eight years.
    assert!(delayer(28).max_delay() > Duration::from_secs(8 * 365 * 86_400));
    assert!(DelayLevels::new(0).is_err());
    assert!(DelayLevels::new(30).is_err());
    // The top TTL of the largest topology stays below RabbitMQ's 10-year limit.
    assert!(DelayLevels::ttl_ms(delayer(MAX_LEVELS).bits() - 1) <= 315_360_000_000);
}

#[test]
fn keys_and_names() {
    let d = delayer(2);
    assert_eq!(d.bits(), 5);
    // 2.5 s = 20 steps = 10100.
    assert_eq!(
        d.routing_key(d.steps(Duration::from_millis(2500)).unwrap()),
        "1.0.1.0.0"
    );
    assert_eq!(d.level_name(0), "worker.delay.125ms");
    assert_eq!(d.level_name(3), "worker.delay.1s");
    assert_eq!(d.entry_exchange(), "worker.delay.2s");
    assert_eq!(DelayLevels::pattern(0, true), "#.1");
    assert_eq!(DelayLevels::pattern(2, false), "#.0.*.*");
    let d = delayer(28);
    assert_eq!(d.entry_exchange(), "worker.delay.134217728s");
    assert!(d.routing_key(1).len() < 255);
}

#[test]
fn plan_lists_every_level() {
    let plan = delayer(1).with_prefix("t").plan();
    // 4 levels (1 s + 3 sub-second), ready, dead.
    assert_eq!(plan.queues.len(), 6);
    assert_eq!(plan.exchanges.len(), 5);
    let q = plan.queue("t.500ms").expect("level queue");
    assert_eq!(q.argument("x-message-ttl"), Some(&Arg::Int(500)));
    assert_eq!(
        q.argument("x-dead-letter-exchange"),
        Some(&Arg::Str("t.250ms".into()))
    );
    let q = plan.queue("t.125ms").expect("level queue");
    assert_eq!(
        q.argument("x-dead-letter-exchange"),
        Some(&Arg::Str("t.ready".into()))
    );
    assert!(plan.bindings.contains(&crate::topology::BindingSpec {
        source: "t.125ms".into(),
        destination: Destination::Exchange("t.ready".into()),
        routing_key: "#.0".into(),
    }));
    assert_eq!(plan.bindings.len(), 1 + 2 * 4);
}
