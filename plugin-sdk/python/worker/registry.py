# The plugin's one handler: registered by @worker.handler, called once per delivery.
from typing import Any, Callable, Optional

from .message import Message
from .outcome import Outcome, ok

Handler = Callable[[Message], Optional[Outcome]]

_handler: Optional[Handler] = None


def handler(func: Handler) -> Handler:
    """Marks `func(message) -> Outcome | None` as the plugin's handler; returns it unchanged.

    Returning None means ok. Returning or raising an Outcome answers it; any other exception
    escapes and traps the instance (the host retries the message with worker-error).
    """
    global _handler
    if _handler is not None and _handler is not func:
        raise RuntimeError(f"a plugin has one handler: {_handler.__name__} is already registered")
    _handler = func
    return func


def registered() -> Handler:
    if _handler is None:
        raise RuntimeError("no handler: decorate the handler function with @worker.handler")
    return _handler


def dispatch(func: Handler, message: Message) -> Outcome:
    """Calls the handler and turns what it returns or raises into an Outcome."""
    try:
        answer: Any = func(message)
    except Outcome as raised:
        return raised
    if answer is None:
        return ok()
    if not isinstance(answer, Outcome):
        raise TypeError(f"a handler returns worker.ok()/retry()/fail() or None, not {answer!r}")
    return answer
