"""Run by tests/test_binding_defects.py in a process of its own, so that a hang fails the test
instead of the suite: a client whose handler catches `asyncio.CancelledError` and carries on
waiting, cancelled one way or another (argv: the scripted server's URL, then `deadline`, `server`
or `close`). It prints one JSON line per step; the last one, after `asyncio.run` returned,
says what the handler went through."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from typing import Any

from mcp_resume import ClosedError, Client, McpTimeoutError

url, how = sys.argv[1], sys.argv[2]
logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
started = time.monotonic()
seen: dict[str, Any] = {"started": 0, "cancellations": 0, "first_cancelled": None, "closed": None}


def report(step: str, **details: Any) -> None:
    print(json.dumps({"step": step, "secs": time.monotonic() - started, **details}), flush=True)


async def stubborn(request: Any) -> Any:
    seen["started"] += 1
    try:
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                seen["cancellations"] += 1  # and carries on
                if seen["first_cancelled"] is None:
                    seen["first_cancelled"] = time.monotonic() - started
    finally:
        seen["closed"] = time.monotonic() - started


async def main() -> None:
    if how == "deadline":
        # The call's own deadline ends it; the generic handler was asked.
        async with Client(url, era="legacy", on_server_request=stubborn) as client:
            try:
                await client.call_tool("ask", timeout=1)
            except McpTimeoutError:
                report("call_timed_out")
    elif how == "server":
        # The server cancels its own request; a typed handler was asked.
        async with Client(url, era="legacy", on_elicitation=stubborn) as client:
            await client.call_tool("ask", {
                "method": "elicitation/create",
                "params": {"message": "name?", "requestedSchema": {"type": "object"}},
                "cancel_after_ms": 200,
            })
            report("call_returned")
    else:
        # The application closes the client while the handler runs.
        client = Client(url, era="legacy", on_sampling=stubborn)
        call = asyncio.ensure_future(client.call_tool("ask"))
        while not seen["started"]:
            await asyncio.sleep(0.01)
        await client.close()
        try:
            await call
        except ClosedError:
            report("call_closed")
    report("main_returned")


asyncio.run(main())
report("run_returned", handler=seen)
