"""The bridge between the runtime and asyncio: every awaitable resolves once, on its own
loop, however many complete together, and cancelling one drops it."""

from __future__ import annotations

import asyncio
import threading

from mcp_resume import _mcp_resume


async def test_many_concurrent_completions_are_all_delivered() -> None:
    # A lost wake-up leaves the loop asleep with outcomes queued: the timeout catches it.
    async def worker(n: int) -> None:
        for i in range(300):
            assert await _mcp_resume._resolved((n, i)) == (n, i)

    for _ in range(50):
        await asyncio.wait_for(
            asyncio.gather(*(_mcp_resume._resolved(i) for i in range(16))), 10
        )
    await asyncio.wait_for(asyncio.gather(*(worker(n) for n in range(16))), 60)


def test_each_loop_gets_its_own_completions() -> None:
    async def run(tag: str) -> list[str]:
        return [await _mcp_resume._resolved(f"{tag}{i}") for i in range(200)]

    results: dict[str, list[str]] = {}

    def in_thread(tag: str) -> None:
        results[tag] = asyncio.run(run(tag))

    threads = [threading.Thread(target=in_thread, args=(t,)) for t in "abcd"]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert {k: v[-1] for k, v in results.items()} == {t: f"{t}199" for t in "abcd"}
    # A new loop after the others closed still works.
    assert asyncio.run(run("e"))[0] == "e0"


async def test_a_cancelled_awaitable_stays_cancelled() -> None:
    fut = _mcp_resume._resolved(1)
    assert isinstance(fut, asyncio.Future)
    fut.cancel()
    await asyncio.sleep(0.05)
    assert fut.cancelled()
