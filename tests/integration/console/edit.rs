//! Edit and replay through the API with `[admin] token`: a JSON body must stay JSON; the edited
//! copy goes to the queue as `<id>.edit1` and is handled, and the original leaves; the token
//! and the cross-site rules hold.

use serde_json::json;

use super::groups::TwoQueues;
use super::{TOKEN, request};

#[tokio::test]
async fn an_edited_copy_is_replayed_and_handled_and_the_original_removed() {
    let mut fixture = TwoQueues::start("console-edit").await;
    fixture
        .park("ga", "e-1", "bad total", "2026-11-01T00:00:00Z")
        .await;
    let admin = fixture.admin;
    let edit = format!("/api/failed/{}/edit", fixture.queue("ga"));

    let fixed =
        json!({"id": "e-1", "body": r#"{"id": "e-1-fixed"}"#, "set_headers": {"fixed-by": "ops"}})
            .to_string();
    let (status, _) = request(admin, "POST", &edit, None, &fixed).await;
    assert_eq!(status, 401);
    let head = format!(
        "POST {edit} HTTP/1.1\r\nHost: {admin}\r\nAuthorization: Bearer {TOKEN}\r\n\
         Content-Type: application/json\r\nOrigin: http://evil.example\r\n"
    );
    let (status, body) = super::raw(admin, &head, fixed.as_bytes()).await;
    assert_eq!(status, 403, "{body}");
    let broken = json!({"id": "e-1", "body": "{not json"}).to_string();
    let (status, body) = request(admin, "POST", &edit, Some(TOKEN), &broken).await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"]
            .as_str()
            .is_some_and(|e| e.contains("must stay JSON")),
        "{body}"
    );
    let (status, _) = request(admin, "POST", &edit, Some(TOKEN), r#"{"id": "nope"}"#).await;
    assert_eq!(status, 404);
    assert_eq!(fixture.depth("ga").await, 1, "nothing moved yet");

    let (status, done) = request(admin, "POST", &edit, Some(TOKEN), &fixed).await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["id"], json!("e-1.edit1"));
    assert!(
        done["diff"]
            .as_str()
            .is_some_and(|d| d.contains("+fixed-by")),
        "{done}"
    );
    assert_eq!(
        fixture.probe.report("e-1-fixed").await["id"],
        json!("e-1-fixed")
    );
    assert_eq!(fixture.depth("ga").await, 0, "the original is gone");
    fixture.probe.stop().await;
}
