"""Runs a server-request handler on the client's event loop (scheduled there by the
extension with ``asyncio.run_coroutine_threadsafe``): a plain function is called on the
loop's thread, a coroutine function awaited there.

A cancelled handler (the server cancelled its request, the call it served ended, the client
was closed, or the loop is shutting down) gets ``CANCEL_GRACE`` seconds to end. One still
running then, having caught its ``CancelledError`` and carried on, is abandoned: it is closed
where it waits (``GeneratorExit``: its ``finally`` and ``__aexit__`` code runs up to its
first ``await``) and a warning is logged on the ``mcp_resume`` logger. Its task then ends as
cancelled, so neither the request nor the shutdown of the loop (``asyncio.run`` cancels every
task left and waits for them all) is held by it. Only the handler's own coroutine can be
abandoned so: a task it started (``asyncio.gather``, a ``TaskGroup``, ``wait_for`` before
3.12) that ignores its cancellation still holds ``asyncio.run``. On 3.10, which does not
count cancellations, a ``CancelledError`` the handler catches from anything (its own
``wait_for`` included) starts the grace."""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import types
from collections.abc import Callable, Generator
from typing import Any

CANCEL_GRACE = 2.0
"""Seconds a cancelled handler has to end before it is abandoned."""

_log = logging.getLogger("mcp_resume")


async def invoke(callback: Callable[[Any], Any], argument: Any) -> Any:
    result = callback(argument)
    if inspect.isawaitable(result):
        result = await _bounded(_driven(result), callback)
    return result


def _driven(awaitable: Any) -> Generator[Any, None, Any]:
    """What ``await awaitable`` drives, with ``send``, ``throw`` and ``close`` whatever it
    is: an ``__await__`` may answer a plain iterator, and a generator-based coroutine has no
    ``__await__`` at all."""
    inner = awaitable.__await__() if hasattr(awaitable, "__await__") else awaitable
    return (yield from inner)


@types.coroutine
def _bounded(steps: Generator[Any, None, Any], callback: Any) -> Generator[Any, None, Any]:
    """Awaits `steps` (what `await` on the handler's awaitable drives) as `await` does,
    handing the task each future it waits on, until a cancellation of the task outlives the
    step it was thrown into: from then on it waits for each of those futures at most until
    the grace ends. A handler driven in a task of its own instead could not be left behind:
    `asyncio.run` would wait for that task too."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    give_up_at: float | None = None
    thrown: BaseException | None = None
    while True:
        try:
            waiting = steps.send(None) if thrown is None else steps.throw(thrown)
        except StopIteration as done:
            return done.value
        if (
            give_up_at is None
            and isinstance(thrown, asyncio.CancelledError)
            and _cancellation_pending(task)
        ):
            give_up_at = loop.time() + CANCEL_GRACE
        elif give_up_at is not None and not _cancellation_pending(task):
            # Taken back (the handler's own `asyncio.timeout` whose cleanup awaited): the
            # task is not being cancelled any more, and the handler owes nothing.
            give_up_at = None
        thrown = None
        if give_up_at is not None and loop.time() >= give_up_at:
            _abandon(steps, waiting, callback)
        if give_up_at is None or not asyncio.isfuture(waiting) or waiting.done():
            try:
                yield waiting
            except BaseException as e:  # noqa: BLE001 - handed on to the handler
                thrown = e
            continue
        # In its grace, waiting on a future: until that future is done or the grace ends.
        wake: asyncio.Future[None] = loop.create_future()
        # Bound to this wait's future: a callback scheduled before it was removed (a
        # cancelled future's) still runs, and must not end the next wait.
        ready = functools.partial(_wake, wake)
        timer = loop.call_at(give_up_at, ready)
        waiting.add_done_callback(ready)
        try:
            yield from wake
        except BaseException as e:  # noqa: BLE001 - cancelled again: the handler is told
            # As a task cancelled while waiting on a future cancels that future.
            waiting.cancel()
            thrown = e
            continue
        finally:
            timer.cancel()
            waiting.remove_done_callback(ready)
        if not waiting.done():
            _abandon(steps, waiting, callback)


def _wake(wake: asyncio.Future[None], _: Any = None) -> None:
    if not wake.done():
        wake.set_result(None)


def _cancellation_pending(task: asyncio.Task[Any] | None) -> bool:
    """Whether the task is still being cancelled: not so once the handler's own
    ``asyncio.timeout`` (or ``wait_for``, which uses it) took back the cancellation it made.
    Python 3.10 does not count cancellations (nor has ``asyncio.timeout``): any is taken as
    the task's own."""
    cancelling = getattr(task, "cancelling", None)
    return cancelling is None or cancelling() > 0


def _abandon(steps: Generator[Any, None, Any], waiting: Any, callback: Any) -> None:
    _log.warning(
        "handler %r did not end within %s s of its cancellation; it is abandoned "
        "(closed where it waits)",
        callback,
        CANCEL_GRACE,
    )
    if asyncio.isfuture(waiting):
        waiting.cancel()
    try:
        steps.close()
    except BaseException:  # noqa: BLE001 - it awaited in its `finally` or raised there
        _log.warning("handler %r did not close cleanly", callback, exc_info=True)
    raise asyncio.CancelledError
