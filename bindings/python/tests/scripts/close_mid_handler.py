"""Run by tests/test_binding_defects.py in a process of its own, many times over: a client
closed while one of its handlers is in flight, then the interpreter left to exit as any
program's does (argv: the scripted server's URL, then `polite` or `stubborn`, the handler's
way with its cancellation). Its exit status is what is asserted: the extension's threads must
not touch the interpreter while it finalizes."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from mcp_resume import ClosedError, Client

url, manner = sys.argv[1], sys.argv[2]
started = asyncio.Event()


async def handler(request: Any) -> Any:
    started.set()
    while True:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            if manner == "polite":
                raise


async def main() -> None:
    client = Client(url, era="legacy", on_sampling=handler)
    call = asyncio.ensure_future(client.call_tool("ask"))
    await asyncio.wait_for(started.wait(), 10)
    await client.close()
    try:
        await call
    except ClosedError:
        pass


asyncio.run(main())
print("returned", flush=True)
