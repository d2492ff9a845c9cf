"""Cancelling the Python task that awaits a call cancels the call on the server."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from mcp_resume import Client, McpResumeError, McpTimeoutError
from scripted_server import ScriptedServer


async def test_cancelled_task_sends_notifications_cancelled(
    scripted: Callable[..., ScriptedServer],
) -> None:
    server = scripted("legacy")
    async with Client(server.url, era="legacy", open_listen_stream=False) as client:
        task = asyncio.create_task(client.call_tool("hang"))
        assert await asyncio.to_thread(server.hanging.wait, 5), "the call never reached the server"
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        assert task.cancelled()
        assert await asyncio.to_thread(server.cancelled.wait, 5), "no notifications/cancelled"
        [call] = [m for m in server.requests("tools/call") if m["params"]["name"] == "hang"]
        [cancel] = server.requests("notifications/cancelled")
        assert cancel["params"]["requestId"] == call["id"]
        # The client is still usable.
        assert (await client.call_tool("echo", {"text": "after"})).text == "after"


async def test_wait_for_timeout_cancels_the_call(
    scripted: Callable[..., ScriptedServer],
) -> None:
    server = scripted("legacy")
    async with Client(server.url, era="legacy", open_listen_stream=False) as client:
        try:
            await asyncio.wait_for(client.call_tool("hang"), 0.3)
            raise AssertionError("the call should not have completed")
        except asyncio.TimeoutError:
            pass
        assert await asyncio.to_thread(server.cancelled.wait, 5)


async def test_the_calls_own_deadline_raises_mcp_timeout_error(
    scripted: Callable[..., ScriptedServer],
) -> None:
    server = scripted("legacy")
    async with Client(server.url, era="legacy", open_listen_stream=False) as client:
        try:
            await client.call_tool("hang", timeout=0.3)
            raise AssertionError("the call should have timed out")
        except McpTimeoutError as e:
            assert isinstance(e, TimeoutError)
            assert e.kind == "timeout"
            # It was sent and the server was running it: retrying could run it twice.
            assert e.may_have_run
        # On its deadline the SDK cancels the call on the server too.
        assert await asyncio.to_thread(server.cancelled.wait, 5)


async def test_a_call_that_never_reached_a_server_did_not_run() -> None:
    # Nothing listens on port 9: every connection is refused until the deadline.
    client = Client("http://127.0.0.1:9/mcp", era="legacy", open_listen_stream=False)
    try:
        await client.call_tool("echo", {"text": "x"}, timeout=0.5)
        raise AssertionError("the call should have failed")
    except McpResumeError as e:
        assert e.kind in ("timeout", "transport"), e
        assert not e.may_have_run, e
    finally:
        await client.close()
