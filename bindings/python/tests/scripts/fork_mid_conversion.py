"""Run by tests/test_binding_defects.py in a process of its own: a handler's answer is being
converted on one of the extension's threads (its mapping's items read slowly, with the GIL
let go) when the program forks; the child then exits at once. It inherits the extension's
exit hook and its count of threads inside, which do not exist in the child: its exit must not
wait for them (argv: the scripted server's URL). Prints the child's exit time in seconds."""

from __future__ import annotations

import asyncio
import atexit
import collections.abc
import os
import sys
import threading
import time
import warnings
from typing import Any, Iterator

from mcp_resume import Client

url = sys.argv[1]
converting = threading.Event()


class Slow(collections.abc.Mapping[str, Any]):
    """Read by the extension's thread: each item read sleeps, the GIL let go."""

    def __getitem__(self, key: str) -> Any:
        converting.set()
        time.sleep(1.5)
        return True

    def __iter__(self) -> Iterator[str]:
        return iter(["answered"])

    def __len__(self) -> int:
        return 1


def handler(request: Any) -> Any:
    return Slow()


async def main() -> None:
    async with Client(url, era="legacy", on_sampling=handler) as client:
        call = asyncio.ensure_future(client.call_tool("ask"))
        await asyncio.get_running_loop().run_in_executor(None, converting.wait, 10)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:
            started = time.monotonic()
            atexit._run_exitfuncs()
            os.write(1, f"{time.monotonic() - started:.3f}\n".encode())
            os._exit(0)
        os.waitpid(pid, 0)
        try:
            await call
        except Exception:  # noqa: BLE001 - the child's exit is what is measured
            pass


asyncio.run(main())
