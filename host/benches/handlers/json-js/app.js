// The JavaScript handler of the performance targets: parse the 1 KiB JSON body, answer ok. The
// same work as the peers' no-op tasks (Celery and Dramatiq decode the same JSON and return).
import { handler, ok, fail } from "worker";

export const handle = handler((msg) => {
  const body = msg.json();
  if (body === null || typeof body !== "object") return fail("not a JSON object");
  return ok();
});
