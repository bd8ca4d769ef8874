# demo-python: the demo handler that the Rust, Python and JS examples share (the host's
# integration tests drive it). The body is a JSON object; its keys, all optional, act in this order:
#   "log": text -> an info log line        "print": text -> a line on stdout
#   "grow_mb": n -> take n MiB             "trap": true -> an uncaught exception
#   "loop": true -> never return
#   (then, on every message, the capabilities the subscription grants, see below)
#   "http": {"url", "method", "body", "headers"} -> sends that request (worker.http); its answer,
#       {"status", "body"} or {"error"}, is logged and goes into the echo
#   "echo": {"exchange", "routing_key"} -> publishes what it received as JSON (config, count of
#       calls in this instance, attempt, routing keys, message_id, headers, body_len, seen,
#       audited, and http when asked)
#   "publish": [{"exchange", "routing_key", "body", "delay_ms"}] -> publishes each;
#       a refusal answers fail("publish refused: <WIT error name>")
#   "outcome": "ok" | "retry" | "fail", "reason" (default "requested"), "after_ms" (retry only)
# A body that is not a JSON object answers fail("not a JSON object").
#
# Capabilities, when granted (without a grant the call answers `denied`: logged at debug, skipped):
#   kv = "NAME": counts messages per original routing key, key "seen:<key>" -> echo "seen"
#   sql = "NAME": one audit row per message ($1 placeholders: SQLite or PostgreSQL; MySQL takes ?),
#       committed only when the answer is ok -> echo "audited" (the rows committed so far, plus
#       this one)
# A store or database that is down answers retry("kv unavailable: ..." / "sql unavailable: ..."),
# and so does a constraint error (two first messages creating the table at once, in PostgreSQL).

from typing import Any, Optional

import worker
from worker import http, kv, sql

# Handle calls in this instance: 1 in a fresh one, counting up under instance = "reuse".
count = 0


@worker.handler
def handle(msg: worker.Message):
    global count
    count += 1
    try:
        order = msg.json()
    except ValueError:  # also UnicodeDecodeError
        order = None
    if not isinstance(order, dict):
        return worker.fail("not a JSON object")

    if "log" in order:
        worker.info(order["log"])
    if "print" in order:
        print(order["print"], flush=True)
    if "grow_mb" in order:
        grown = grow(int(order["grow_mb"]))  # noqa: F841 (held until the answer)
    if order.get("trap") is True:
        raise RuntimeError("trap requested")
    if order.get("loop") is True:
        while True:
            pass
    seen = count_seen(msg)
    audited = audit(msg)
    fetched = fetch(order["http"]) if "http" in order else None
    if "echo" in order:
        echo(msg, order["echo"], seen=seen, audited=audited, http=fetched)
    for p in order.get("publish", []):
        try:
            worker.publish(
                p["exchange"], p["routing_key"], p["body"], delay_ms=p.get("delay_ms", 0)
            )
        except worker.PublishError as e:
            return worker.fail(f"publish refused: {e.kind}")
    return answer(order)


def grow(mib: int) -> bytearray:
    """mib MiB, every page written, so the memory is really taken."""
    block = bytearray(mib * 1024 * 1024)
    for i in range(0, len(block), 4096):
        block[i] = 1
    return block


# The audit table, made by the plugin itself: the same DDL suits SQLite, MySQL and PostgreSQL.
AUDIT_TABLE = """CREATE TABLE IF NOT EXISTS demo_audit (
    routing_key VARCHAR(255) NOT NULL,
    message_id VARCHAR(255),
    attempt INTEGER NOT NULL,
    body_len INTEGER NOT NULL,
    handled_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP
)"""
AUDIT_ROW = (
    "INSERT INTO demo_audit (routing_key, message_id, attempt, body_len) VALUES ($1, $2, $3, $4)"
)
AUDIT_COUNT = "SELECT COUNT(*) FROM demo_audit"


def count_seen(msg: worker.Message) -> Optional[int]:
    """This message's number among those of its original routing key; None without a kv grant."""
    try:
        return kv.increment(f"seen:{msg.original_routing_key}")
    except worker.KvError as e:
        if e.kind == "denied":
            worker.debug("kv not granted: messages are not counted")
            return None
        if e.kind == "unavailable":
            raise worker.retry(f"kv unavailable: {e.detail}") from None
        raise


def audit(msg: worker.Message) -> Optional[int]:
    """Writes this message's audit row; the rows in the table then. None without a sql grant."""
    try:
        sql.execute(AUDIT_TABLE)
        sql.execute(AUDIT_ROW, msg.original_routing_key, msg.message_id, msg.attempt, len(msg.body))
        return int(sql.query(AUDIT_COUNT).scalar() or 0)
    except worker.SqlError as e:
        if e.kind == "denied":
            worker.debug("sql not granted: no audit row")
            return None
        if e.kind == "unavailable":
            raise worker.retry(f"sql unavailable: {e.detail}") from None
        if e.kind == "constraint":  # the table made by another message meanwhile: try again
            raise worker.retry(f"audit: {e}") from None
        raise worker.fail(f"audit: {e}") from None


def fetch(req: dict) -> dict:
    """Sends the request the body describes; its answer (status and text) or its error."""
    method, url = req.get("method", "GET"), req["url"]
    try:
        answer = http.request(method, url, body=req.get("body"), headers=req.get("headers"))
        report = {"status": answer.status, "body": answer.text}
    except http.HttpError as e:
        report = {"error": e.code, "detail": e.detail}
    worker.info(f"http {method} {url}: {report.get('status', report.get('error'))}")
    return report


def echo(msg: worker.Message, to: dict, **capabilities: Any) -> None:
    report = {
        "config": worker.config(),
        "count": count,
        "attempt": msg.attempt,
        "routing_key": msg.routing_key,
        "original_routing_key": msg.original_routing_key,
        "message_id": msg.message_id,
        "headers": msg.headers,
        "body_len": len(msg.body),
        "seen": capabilities["seen"],
        "audited": capabilities["audited"],
    }
    if capabilities["http"] is not None:
        report["http"] = capabilities["http"]
    worker.publish_json(to["exchange"], to["routing_key"], report)


def answer(order: dict) -> worker.Outcome:
    outcome = order.get("outcome", "ok")
    reason = order.get("reason", "requested")
    if outcome == "ok":
        return worker.ok()
    if outcome == "retry":
        after_ms = order.get("after_ms")
        return worker.retry(reason, after_ms=None if after_ms is None else int(after_ms))
    if outcome == "fail":
        return worker.fail(reason)
    return worker.fail(f"unknown outcome: {outcome}")
