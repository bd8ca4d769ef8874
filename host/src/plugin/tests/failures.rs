//! Traps, timeouts, memory limits and bad pointers: each a typed error.

use super::*;

#[tokio::test]
async fn trap_unreachable_names_kind_and_function() {
    let inv = run("trap_unreachable", input("")).await;
    let err = inv.answer.unwrap_err();
    assert!(
        matches!(
            &err,
            HandlerError::Trap {
                kind: TrapKind::Unreachable,
                ..
            }
        ),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(text.starts_with("trap: unreachable"), "{text}");
    assert!(text.contains("explode"), "{text}");
}

#[tokio::test]
async fn trap_out_of_bounds() {
    let err = run("trap_oob", input("")).await.answer.unwrap_err();
    assert!(
        matches!(
            err,
            HandlerError::Trap {
                kind: TrapKind::OutOfBounds,
                ..
            }
        ),
        "{err:?}"
    );
}

#[tokio::test]
async fn trap_stack_overflow() {
    let err = run("stack_overflow", input("")).await.answer.unwrap_err();
    assert!(
        matches!(
            err,
            HandlerError::Trap {
                kind: TrapKind::StackOverflow,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("stack overflow"));
}

#[tokio::test]
async fn infinite_loop_is_stopped_by_the_timeout() {
    let plugin = load("infinite_loop");
    let lim = Limits {
        timeout: Duration::from_millis(200),
        memory_limit: 16 * MIB,
        instance: Instances::Fresh,
    };
    let inv = plugin.handle(Arc::new(input("")), &lim).await;
    assert_eq!(
        inv.answer,
        Err(HandlerError::Timeout(Duration::from_millis(200)))
    );
    assert!(inv.elapsed >= Duration::from_millis(200));
    assert!(inv.elapsed < Duration::from_secs(5), "{:?}", inv.elapsed);
    assert_eq!(
        inv.answer.unwrap_err().to_string(),
        "timeout: handler still running after 200ms"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn infinite_loop_yields_to_other_tasks() {
    // On a single-threaded runtime, a spinning plugin must still let a timer fire.
    let plugin = load("infinite_loop");
    let lim = Limits {
        timeout: Duration::from_millis(300),
        memory_limit: 16 * MIB,
        instance: Instances::Fresh,
    };
    let ticker = tokio::spawn(async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        std::time::Instant::now()
    });
    let inv = plugin.handle(Arc::new(input("")), &lim).await;
    let done = std::time::Instant::now();
    let fired = ticker.await.expect("ticker task");
    assert!(matches!(inv.answer, Err(HandlerError::Timeout(_))));
    // Without yielding, the timer task could only run after the call returned.
    assert!(fired < done, "timer only ran after the call");
}

#[tokio::test]
async fn memory_bomb_is_stopped_by_the_limit() {
    let plugin = load("memory_bomb");
    let lim = Limits {
        timeout: Duration::from_secs(5),
        memory_limit: 4 * MIB,
        instance: Instances::Fresh,
    };
    let inv = plugin.handle(Arc::new(input("")), &lim).await;
    assert_eq!(
        inv.answer,
        Err(HandlerError::MemoryLimit { limit: 4 * MIB })
    );
    assert!(
        inv.answer
            .unwrap_err()
            .to_string()
            .starts_with("memory limit")
    );
}

#[tokio::test]
async fn initial_memory_over_the_limit_is_a_memory_limit_error() {
    let plugin = load("ok");
    let lim = Limits {
        timeout: Duration::from_secs(5),
        memory_limit: 1024, // less than the fixture's one page
        instance: Instances::Fresh,
    };
    let inv = plugin.handle(Arc::new(input("")), &lim).await;
    assert_eq!(inv.answer, Err(HandlerError::MemoryLimit { limit: 1024 }));
}

#[tokio::test]
async fn bad_pointer_in_an_import_call_traps_with_a_cause() {
    let inv = run("bad_pointer", input("abc")).await;
    let err = inv.answer.unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, HandlerError::BadImportCall(_)), "{err:?}");
    assert!(text.contains("worker_v1.body_read"), "{text}");
    assert!(text.contains("outside guest memory"), "{text}");
}
