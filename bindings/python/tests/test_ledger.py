"""The ledger through the binding: the store choices read onto the SDK's builder, and a
worker process killed mid-call on a Redis ledger whose calls the next process recovers
(judged by the mock cluster's oracle). The rules themselves are the Rust SDK's, tested there
(`tests/external/restart.rs`); this proves the plumbing."""

from __future__ import annotations

import asyncio
import gc
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator
from typing import Any, cast

import pytest

from conftest import Cluster
from mcp_resume import (
    CallToolResult,
    Client,
    Era,
    InvalidConfigError,
    MemoryLedger,
    OutcomeUnknownError,
)
from workload import TAG


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture
def redis_url() -> Iterator[str]:
    """A redis-server of the test's own, on a free port."""
    binary = shutil.which("redis-server") or next(
        (p for p in ("/usr/sbin/redis-server", "/usr/bin/redis-server") if os.path.exists(p)),
        None,
    )
    if binary is None:
        pytest.fail("the ledger tests need redis-server (apt-get install redis-server)")
    port = _free_port()
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.Popen(
            [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", tmp],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 10
            while True:
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                        s.sendall(b"PING\r\n")
                        if s.recv(16).startswith(b"+PONG"):
                            break
                except OSError:
                    pass
                assert time.monotonic() < deadline, "redis-server did not start"
                time.sleep(0.01)
            yield f"redis://127.0.0.1:{port}"
        finally:
            proc.kill()
            proc.wait()


async def test_the_store_choices_are_read_onto_the_builder(
    cluster: Callable[..., Cluster],
) -> None:
    c = cluster("strict")
    with pytest.raises(InvalidConfigError):
        Client(c.url, ledger="bogus")
    with pytest.raises(InvalidConfigError):
        Client(c.url, ledger="redis://127.0.0.1:1")  # no identity
    with pytest.raises(InvalidConfigError):
        Client(c.url, ledger_identity="w-1")  # an identity without a Redis ledger
    with pytest.raises(InvalidConfigError):
        Client(c.url, ledger=MemoryLedger(), ledger_identity="w-1")  # nor with a memory one
    with pytest.raises(InvalidConfigError):
        Client(c.url, ledger="redis://127.0.0.1:1", ledger_identity="has{brace}")
    with pytest.raises(TypeError):
        Client(c.url, ledger=42)  # type: ignore[arg-type]

    # A refused ledger string is not echoed: a URL of another scheme may carry a password.
    for refused in ("valkey://:hunter2@cache:6379", "REDIS://:hunter2@cache", ":hunter2@cache"):
        with pytest.raises(InvalidConfigError) as refusal:
            Client(c.url, ledger=refused)
        assert "hunter2" not in str(refusal.value)
    with pytest.raises(InvalidConfigError, match="valkey://"):
        Client(c.url, ledger="valkey://:hunter2@cache:6379")

    shared = MemoryLedger()
    async with Client(c.url, ledger=shared) as client:
        result = await client.call_tool("echo", {"text": "hi"})
        assert result.text == "hi"
        assert len(shared) == 0, "an ended call leaves no entry"
        assert await client.recover() == []
    async with Client(c.url, ledger="none") as client:
        assert await client.recover() == []


WORKER = textwrap.dedent(
    """
    import asyncio, os, sys
    from mcp_resume import Client, Era

    async def main() -> None:
        client = Client(os.environ["URL"], era=Era.LEGACY, ledger=os.environ["REDIS"],
                        ledger_identity=os.environ["IDENTITY"], call_timeout=60)
        await client.connect()
        slow = {"steps": 3, "delay_ms": 300}
        tag = "io.github.mcp-resume/tag"
        asyncio.ensure_future(client.call_tool(
            "counter_increment", slow, idempotency_key="py-key", meta={tag: "py-keyed"}))
        asyncio.ensure_future(client.call_tool(
            "counter_increment", slow, meta={tag: "py-unkeyed"}))
        await asyncio.Event().wait()  # killed while waiting

    asyncio.run(main())
    """
)


def _executions(c: Cluster, tag: str) -> list[dict[str, Any]]:
    return [e for e in c.oracle()["executions"] if e["tag"] == tag]


def _run_and_kill_worker(c: Cluster, redis_url: str, identity: str) -> None:
    """Runs WORKER as ``identity`` on the ledger at ``redis_url`` and kills it once both its
    calls ran."""
    env = {**os.environ, "URL": c.url, "REDIS": redis_url, "IDENTITY": identity}
    worker = subprocess.Popen([sys.executable, "-c", WORKER], env=env)
    try:
        deadline = time.monotonic() + 20
        # Both side effects ran: their entries were written before their requests left.
        while not (_executions(c, "py-keyed") and _executions(c, "py-unkeyed")):
            assert worker.poll() is None, "the worker exited"
            assert time.monotonic() < deadline, c.oracle()["totals"]
            time.sleep(0.01)
    finally:
        worker.kill()
        worker.wait()


async def test_a_killed_worker_is_recovered_by_the_next_process(
    cluster: Callable[..., Cluster], redis_url: str
) -> None:
    c = cluster("strict")
    identity = f"py-worker-{os.getpid()}"
    _run_and_kill_worker(c, redis_url, identity)

    client = Client(
        c.url, era=Era.LEGACY, ledger=redis_url, ledger_identity=identity, call_timeout=60
    )
    calls = await client.recover()
    assert sorted((call.params or {})["_meta"][TAG] for call in calls) == [
        "py-keyed",
        "py-unkeyed",
    ]
    for call in calls:
        assert call.method == "tools/call" and call.tool_name == "counter_increment"
        assert call.arguments == {"steps": 3, "delay_ms": 300}
        assert call.stage == "sent"
        if call.idempotency_key == "py-key":
            result = await call
            assert isinstance(result, CallToolResult)
            assert result.structured_content is not None, result
        else:
            assert call.idempotency_key is None
            with pytest.raises(OutcomeUnknownError):
                await call
    assert await client.recover() == [], "every entry went with its call"
    await client.close()
    oracle = c.settled_oracle()
    assert len([e for e in oracle["executions"] if e["tag"] == "py-keyed"]) == 1
    assert len([e for e in oracle["executions"] if e["tag"] == "py-unkeyed"]) == 1
    assert oracle["totals"]["duplicate_side_effects"] == 0


async def test_a_recover_cancelled_after_it_picked_up_calls_hands_them_to_the_next(
    cluster: Callable[..., Cluster], redis_url: str
) -> None:
    c = cluster("strict")
    identity = f"py-worker-cancel-{os.getpid()}"
    _run_and_kill_worker(c, redis_url, identity)
    client = Client(
        c.url, era=Era.LEGACY, ledger=redis_url, ledger_identity=identity, call_timeout=60
    )
    initializes = c.oracle()["totals"]["initializes"]
    task = asyncio.ensure_future(client.recover())
    await asyncio.sleep(0)  # the recovery starts on the runtime
    # The loop is held until the runtime has picked the calls up: this client opens a
    # session only for a call it registered (a recovery that picks up nothing opens none),
    # and once the first entry is registered the recovery registers the rest and queues its
    # outcome for the loop without awaiting again, so it can no longer be cancelled. The
    # task's cancellation then lands after the pick-up, before the hand-over.
    deadline = time.monotonic() + 20
    while c.oracle()["totals"]["initializes"] == initializes:
        assert time.monotonic() < deadline, "the recovery picked nothing up"
        time.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    calls = await client.recover()
    assert sorted((call.params or {})["_meta"][TAG] for call in calls) == [
        "py-keyed",
        "py-unkeyed",
    ]
    for call in calls:
        if call.idempotency_key is None:
            with pytest.raises(OutcomeUnknownError):
                await call
        else:
            await call
    await client.close()
    oracle = c.settled_oracle()
    assert len([e for e in oracle["executions"] if e["tag"] == "py-keyed"]) == 1
    assert oracle["totals"]["duplicate_side_effects"] == 0


async def test_a_recover_cancelled_as_its_result_arrives_hands_its_calls_to_the_next(
    cluster: Callable[..., Cluster], redis_url: str
) -> None:
    c = cluster("strict")
    identity = f"py-worker-cancel-late-{os.getpid()}"
    _run_and_kill_worker(c, redis_url, identity)
    client = Client(
        c.url, era=Era.LEGACY, ledger=redis_url, ledger_identity=identity, call_timeout=60
    )
    # The binding's awaitable is the loop's own future, which the result is set on.
    fut = cast("asyncio.Future[Any]", client._raw.recover())

    async def take() -> Any:
        return await fut

    task = asyncio.ensure_future(take())
    # Registered before the task first awaits, so it runs before the task's wake-up: the
    # list is handed to the future, then the task is cancelled without ever receiving it.
    fut.add_done_callback(lambda _: task.cancel())
    with pytest.raises(asyncio.CancelledError):
        await task
    del fut
    gc.collect()
    calls = await client.recover()
    assert sorted((call.params or {})["_meta"][TAG] for call in calls) == [
        "py-keyed",
        "py-unkeyed",
    ]
    for call in calls:
        if call.idempotency_key is None:
            with pytest.raises(OutcomeUnknownError):
                await call
        else:
            result = await call
            assert isinstance(result, CallToolResult)
            assert result.structured_content is not None, result
    assert await client.recover() == [], "every entry went with its call"
    await client.close()
    oracle = c.settled_oracle()
    assert len([e for e in oracle["executions"] if e["tag"] == "py-keyed"]) == 1
    assert len([e for e in oracle["executions"] if e["tag"] == "py-unkeyed"]) == 1
    assert oracle["totals"]["duplicate_side_effects"] == 0
