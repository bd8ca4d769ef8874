# demo-python: the demo handler that the Rust, Python and JS examples share (the host's
# integration tests drive it). The body is a JSON object; its keys, all optional, act in this order:
#   "log": text -> an info log line        "print": text -> a line on stdout
#   "grow_mb": n -> take n MiB             "trap": true -> an uncaught exception
#   "loop": true -> never return
#   "echo": {"exchange", "routing_key"} -> publishes what it received as JSON (config, count of
#       calls in this instance, attempt, routing keys, message_id, headers, body_len)
#   "publish": [{"exchange", "routing_key", "body", "delay_ms"}] -> publishes each;
#       a refusal answers fail("publish refused: <WIT error name>")
#   "outcome": "ok" | "retry" | "fail", "reason" (default "requested"), "after_ms" (retry only)
# A body that is not a JSON object answers fail("not a JSON object").

import worker

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
    if "echo" in order:
        echo(msg, order["echo"])
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


def echo(msg: worker.Message, to: dict) -> None:
    worker.publish_json(
        to["exchange"],
        to["routing_key"],
        {
            "config": worker.config(),
            "count": count,
            "attempt": msg.attempt,
            "routing_key": msg.routing_key,
            "original_routing_key": msg.original_routing_key,
            "message_id": msg.message_id,
            "headers": msg.headers,
            "body_len": len(msg.body),
        },
    )


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
