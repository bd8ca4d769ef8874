# The seam between the API and whatever answers it: the WIT imports inside a component, a
# worker.testing.FakeHost under plain CPython.
import sys
from typing import Any, Optional

_installed: Optional[Any] = None


def current() -> Any:
    """The backend calls go to. Inside a component: the generated bindings (worker.component).

    A backend has the methods log, config, publish, kv_get, kv_set, kv_delete, kv_increment,
    kv_compare_and_swap, sql_query, sql_execute and http_send, on plain Python values (see
    FakeHost), and raises worker's PublishError / KvError / SqlError / HttpError.
    """
    global _installed
    if _installed is None:
        if sys.platform != "wasi":
            raise RuntimeError(
                "worker: no host outside a component; in tests use worker.testing.FakeHost"
            )
        from . import component  # only importable where componentize-py's runtime exists

        _installed = component.Bindings()
    return _installed


def install(backend: Optional[Any]) -> Optional[Any]:
    """Makes `backend` current (None: back to the default); returns the one it replaces."""
    global _installed
    previous, _installed = _installed, backend
    return previous
