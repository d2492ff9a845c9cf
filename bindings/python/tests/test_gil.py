"""Waiting on a call holds neither the GIL nor the event loop."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

from conftest import Cluster
from mcp_resume import Client


async def test_another_thread_runs_while_a_call_waits(cluster: Callable[..., Cluster]) -> None:
    c = cluster("replicated", "--idle-timeout-ms", "0")
    async with Client(c.url, open_listen_stream=False) as client:
        counter = [0]
        stop = threading.Event()

        def spin() -> None:
            # Pure Python: it only advances while it holds the GIL.
            while not stop.is_set():
                counter[0] += 1

        thread = threading.Thread(target=spin)
        before = time.monotonic()
        thread.start()
        try:
            start_count = counter[0]
            result = await client.call_tool("slow", {"steps": 4, "delay_ms": 100})
            during = counter[0] - start_count
        finally:
            stop.set()
            thread.join()
        elapsed = time.monotonic() - before
    assert result.text == "slow: done after 4 steps"
    assert elapsed >= 0.4
    # A thread starved of the GIL would have counted (almost) nothing in 0.4 s.
    assert during > 100_000, during


async def test_the_event_loop_keeps_running_while_a_call_waits(
    cluster: Callable[..., Cluster],
) -> None:
    c = cluster("replicated", "--idle-timeout-ms", "0")
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    async with Client(c.url, open_listen_stream=False) as client:
        ticker = asyncio.create_task(tick())
        started = time.monotonic()
        await client.call_tool("slow", {"steps": 3, "delay_ms": 100})
        elapsed = time.monotonic() - started
        ticker.cancel()
    during = ticks
    # The same ticker over a plain sleep as long as the call took: what the loop manages on
    # this machine now, however loaded. A loop held by the call would tick (almost) never.
    ticks = 0
    ticker = asyncio.create_task(tick())
    await asyncio.sleep(elapsed)
    ticker.cancel()
    baseline = ticks
    assert during >= max(1, baseline // 2), (during, baseline)
