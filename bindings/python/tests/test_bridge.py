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


def test_loops_that_cannot_watch_a_socket_fall_back() -> None:
    """The Windows proactor loop has no add_reader; results then come through
    call_soon_threadsafe."""
    import pytest

    from mcp_resume import Client, ReconnectPolicy, TransportError

    class NoReaderLoop(asyncio.SelectorEventLoop):
        def add_reader(self, *args: object, **kwargs: object) -> None:
            raise NotImplementedError

    async def run() -> None:
        assert await _mcp_resume._resolved("x") == "x"
        client = Client(
            "http://127.0.0.1:9/mcp",
            era="legacy",
            reconnect=ReconnectPolicy(initial_delay=0.01, max_delay=0.02, max_attempts=2),
        )
        with pytest.raises(TransportError):
            await client.connect()

    loop = NoReaderLoop()
    try:
        loop.run_until_complete(run())
    finally:
        loop.close()
