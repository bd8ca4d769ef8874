# The seam between the API and whatever answers it: the WIT imports inside a component, a
# worker.testing.FakeHost under plain CPython.
import sys
from typing import Any, Optional

_installed: Optional[Any] = None


def current() -> Any:
    """The backend calls go to. Inside a component: the generated bindings (worker.component),
    installed by worker.entry before the plugin's app is imported.

    A backend has the methods log, config, publish, kv_get, kv_set, kv_delete, kv_increment,
    kv_compare_and_swap, sql_query, sql_execute and http_send, on plain Python values (see
    FakeHost), and raises worker's PublishError / KvError / SqlError / HttpError.
    """
    if _installed is None:
        if sys.platform != "wasi":
            raise RuntimeError(
                "worker: no host outside a component; in tests use worker.testing.FakeHost"
            )
        raise RuntimeError("worker: no host installed; a component's entry is worker.entry")
    return _installed


def install(backend: Optional[Any]) -> Optional[Any]:
    """Makes `backend` current (None: none); returns the one it replaces."""
    global _installed
    previous, _installed = _installed, backend
    return previous
