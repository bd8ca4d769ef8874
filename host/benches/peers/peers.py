"""The Python peers of the throughput bench: Celery (-P solo) and Dramatiq (-p 2 -t 8).

    python peers.py celery|dramatiq --messages N --body FILE [--url AMQP]

Publishes N messages with the framework's own publisher into a queue of this run's own (the task
argument is the JSON object in FILE), waits until the broker holds all of them, then starts the
framework's worker as people run it and prints `rate <msgs/s>`: from the first message taken
from the queue to the moment none is left ready. At that moment at most the worker's prefetch
(Celery solo 4, Dramatiq 2 x 16) is still in its hands, a fraction of a percent of a run of
20,000. Worker start-up is not counted, as the host's is not. Deletes its queues at the end.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time

import pika

HERE = os.path.dirname(os.path.abspath(__file__))


def publish(peer, payload, n):
    if peer == "celery":
        from tasks import app, noop

        with app.producer_or_acquire() as producer:
            for _ in range(n):
                noop.apply_async(args=[payload], producer=producer)
    else:
        from tasks import broker, noop

        for _ in range(n):
            noop.send(payload)
        broker.close()


def worker_command(peer, queue):
    bin_dir = os.path.dirname(sys.executable)
    if peer == "celery":
        return [os.path.join(bin_dir, "celery"), "-A", "tasks", "worker", "-P", "solo",
                "-Q", queue, "--without-gossip", "--without-mingle", "--without-heartbeat",
                "-l", "warning"]
    return [os.path.join(bin_dir, "dramatiq"), "tasks", "-p", "2", "-t", "8", "-Q", queue]


def wait(url, queue, done, what, limit=600.0):
    """Polls the ready count every 5 ms until `done(count)`; the time it was first true."""
    deadline = time.monotonic() + limit
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    try:
        while True:
            count = ch.queue_declare(queue, passive=True).method.message_count
            if done(count):
                return time.monotonic()
            if time.monotonic() > deadline:
                sys.exit(f"peers: {what}: still {count} ready after {limit:.0f} s")
            time.sleep(0.005)
    finally:
        conn.close()


def delete_queues(url, queue):
    conn = pika.BlockingConnection(pika.URLParameters(url))
    for name in (queue, f"{queue}.DQ", f"{queue}.XQ"):
        ch = conn.channel()
        try:
            ch.queue_delete(name)
        except pika.exceptions.ChannelClosedByBroker:
            pass
    conn.close()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("peer", choices=["celery", "dramatiq"])
    p.add_argument("--messages", type=int, default=20000)
    p.add_argument("--body", required=True)
    p.add_argument("--url", default="amqp://guest:guest@127.0.0.1:5672/%2f")
    a = p.parse_args()
    queue = f"bench-{a.peer}-{os.getpid()}"
    os.environ.update(BENCH_PEER=a.peer, BENCH_QUEUE=queue, BENCH_URL=a.url)
    sys.path.insert(0, HERE)
    with open(a.body, encoding="utf-8") as f:
        payload = json.load(f)
    worker = None
    try:
        publish(a.peer, payload, a.messages)
        wait(a.url, queue, lambda c: c >= a.messages, "publishing", 120)
        worker = subprocess.Popen(worker_command(a.peer, queue), cwd=HERE,
                                  stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        start = wait(a.url, queue, lambda c: c < a.messages, "worker start")
        end = wait(a.url, queue, lambda c: c == 0, "consuming")
        taken_at_start = 1  # at least one message was taken when the drop was seen
        print(f"rate {(a.messages - taken_at_start) / max(end - start, 1e-9):.1f}", flush=True)
    finally:
        if worker is not None:
            worker.send_signal(signal.SIGTERM)
            try:
                worker.wait(30)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
        delete_queues(a.url, queue)


if __name__ == "__main__":
    main()
