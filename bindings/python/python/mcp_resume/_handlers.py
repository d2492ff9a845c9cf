"""Runs a server-request handler on the client's event loop (scheduled there by the
extension with ``asyncio.run_coroutine_threadsafe``): a plain function is called on the
loop's thread, a coroutine function awaited there."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any


async def invoke(callback: Callable[[Any], Any], argument: Any) -> Any:
    result = callback(argument)
    if inspect.isawaitable(result):
        result = await result
    return result
