"""The no-op task of the throughput bench's peers, as Celery and Dramatiq declare it.

Each takes the 1 KiB JSON object the worker-host scenarios get as their body (the framework
parses it from its own message format) and returns. Celery runs it with acks_late, so a message
is acked after the task, as worker-host acks after the handler. Configured by environment:
BENCH_URL (AMQP), BENCH_QUEUE (a queue of this run's own).
"""

import os

URL = os.environ.get("BENCH_URL", "amqp://guest:guest@127.0.0.1:5672/%2f")
QUEUE = os.environ.get("BENCH_QUEUE", "bench-peer")

if os.environ.get("BENCH_PEER") == "dramatiq":
    import dramatiq
    from dramatiq.brokers.rabbitmq import RabbitmqBroker

    broker = RabbitmqBroker(url=URL)
    dramatiq.set_broker(broker)

    @dramatiq.actor(queue_name=QUEUE, max_retries=0)
    def noop(payload):
        pass

else:
    from celery import Celery

    app = Celery("tasks", broker=URL)
    app.conf.update(
        task_acks_late=True,
        worker_prefetch_multiplier=100,
        task_ignore_result=True,
        task_default_queue=QUEUE,
        worker_hijack_root_logger=False,
        broker_connection_retry_on_startup=True,
    )

    @app.task(name="noop")
    def noop(payload):
        pass
