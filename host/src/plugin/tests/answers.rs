//! Answer codes and fresh instances.

use super::*;

#[tokio::test]
async fn answers_map_to_ok_retry_fail() {
    assert_eq!(run("ok", input("")).await.answer, Ok(Answer::Ok));
    assert_eq!(run("retry", input("")).await.answer, Ok(Answer::Retry));
    assert_eq!(run("fail", input("")).await.answer, Ok(Answer::Fail));
}

#[tokio::test]
async fn unknown_answer_code_is_an_error() {
    let inv = run("bad_answer", input("")).await;
    assert_eq!(inv.answer, Err(HandlerError::BadAnswer(7)));
    assert!(inv.answer.unwrap_err().to_string().contains("returned 7"));
}

#[tokio::test]
async fn every_message_gets_a_fresh_instance() {
    let plugin = load("fresh");
    for _ in 0..3 {
        let inv = plugin.handle(Arc::new(input("")), &limits()).await;
        assert_eq!(inv.answer, Ok(Answer::Ok));
    }
}
