# The Python handler of the performance targets: parse the 1 KiB JSON body, answer ok. The same
# work as the peers' no-op tasks (Celery and Dramatiq decode the same JSON and return).
import json

import worker


@worker.handler
def handle(msg: worker.Message):
    body = json.loads(msg.body)
    if not isinstance(body, dict):
        return worker.fail("not a JSON object")
    return worker.ok()
