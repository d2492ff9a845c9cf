"""Defects of the binding found in review, each pinned: where handlers run, which event loop
a client belongs to, an awaitable whose Rust side panicked, a forked process, a server that
cancels its own request, a handler that will not be cancelled, and a process that exits while
a handler is in flight."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import types
from collections.abc import Callable, Generator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from mcp_resume import Client, ServerRequest, _handlers, _mcp_resume
from scripted_server import ScriptedServer


async def test_plain_function_handlers_run_on_the_event_loop(
    scripted: Callable[..., ScriptedServer],
) -> None:
    server = scripted("legacy")
    seen: list[tuple[int, bool]] = []

    def answer(request: ServerRequest) -> dict[str, Any]:
        # On the loop's own thread, where the loop is running (the README's promise).
        running = asyncio.get_running_loop() is loop
        seen.append((threading.get_ident(), running))
        return {"echo": request.method}

    loop = asyncio.get_running_loop()
    async with Client(server.url, era="legacy", on_server_request=answer) as client:
        result = await client.call_tool("ask")
    assert result.structured_content["answer"]["result"] == {"echo": "sampling/createMessage"}
    assert seen == [(threading.get_ident(), True)]


def test_a_client_belongs_to_the_event_loop_it_was_first_used_on(
    scripted: Callable[..., ScriptedServer],
) -> None:
    server = scripted("legacy")
    client = Client(server.url, era="legacy", open_listen_stream=False)
    first = asyncio.new_event_loop()
    try:
        first.run_until_complete(client.connect())
        errors: list[BaseException] = []

        def elsewhere() -> None:
            try:
                asyncio.run(client.ping())
            except BaseException as e:  # noqa: BLE001 - the test inspects it
                errors.append(e)

        t = threading.Thread(target=elsewhere)
        t.start()
        t.join(10)
        assert len(errors) == 1 and isinstance(errors[0], RuntimeError), errors
        assert "event loop" in str(errors[0])
        # Nothing was sent for the refused call.
        assert server.requests("ping") == []
        first.run_until_complete(client.ping())
        first.run_until_complete(client.close())
    finally:
        first.close()


def test_after_its_loop_closed_a_client_moves_to_the_next_one(
    scripted: Callable[..., ScriptedServer],
) -> None:
    server = scripted("legacy")

    async def answer(request: ServerRequest) -> dict[str, Any]:
        await asyncio.sleep(0)
        return {"loop": id(asyncio.get_running_loop())}

    client = Client(server.url, era="legacy", on_server_request=answer)
    asyncio.run(client.connect())  # that loop is closed when this returns

    async def ask() -> tuple[Any, int]:
        result = await client.call_tool("ask")
        return result.structured_content["answer"], id(asyncio.get_running_loop())

    answer_msg, loop_id = asyncio.run(ask())
    # Not a silent internal error: the handler ran, on the loop now in use.
    assert answer_msg.get("result") == {"loop": loop_id}, answer_msg


async def test_a_panic_in_the_runtime_fails_the_awaitable() -> None:
    with pytest.raises(RuntimeError, match="panicked"):
        await asyncio.wait_for(_mcp_resume._panicking(), 10)
    # The runtime goes on.
    assert await asyncio.wait_for(_mcp_resume._resolved(7), 10) == 7


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_forked_process_gets_an_error_not_a_hang() -> None:
    async def resolve(value: int) -> Any:
        return await asyncio.wait_for(_mcp_resume._resolved(value), 5)

    asyncio.run(resolve(1))  # the runtime has started in this process
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report what using the binding did, then leave at once
        os.close(read)
        try:
            asyncio.run(resolve(2))
            outcome = b"resolved"
        except RuntimeError as e:
            outcome = b"error: " + str(e).encode()
        except BaseException as e:  # noqa: BLE001
            outcome = b"other: " + repr(e).encode()
        os.write(write, outcome)
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        outcome = pipe.read()
    os.waitpid(pid, 0)
    assert outcome.startswith(b"error: "), outcome
    assert b"fork" in outcome, outcome


async def test_the_servers_cancellation_cancels_the_python_handler(
    scripted: Callable[..., ScriptedServer],
) -> None:
    server = scripted("legacy")
    started = asyncio.Event()
    cancelled = asyncio.Event()

    async def slow_answer(request: ServerRequest) -> dict[str, Any]:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return {}

    client = Client(server.url, era="legacy", on_server_request=slow_answer)
    async with client:
        result = await client.call_tool("ask", {"cancel_after_ms": 200})
        await asyncio.wait_for(started.wait(), 5)
        await asyncio.wait_for(cancelled.wait(), 5)
    # No answer was sent for the cancelled request.
    assert result.structured_content["answer"] is None


@pytest.mark.parametrize("cancelled_by", ["deadline", "server", "close"])
def test_a_handler_that_ignores_its_cancellation_holds_neither_the_call_nor_the_shutdown(
    scripted: Callable[..., ScriptedServer], cancelled_by: str
) -> None:
    # The handler catches every `CancelledError` and waits on. In a process of its own: were
    # the binding to wait for it, `asyncio.run` (which cancels and awaits every task left)
    # would never return.
    server = scripted("legacy")
    script = Path(__file__).parent / "scripts" / "stubborn_handler.py"
    try:
        out = subprocess.run(
            [sys.executable, str(script), server.url, cancelled_by],
            capture_output=True, text=True, timeout=30,
        )
    except subprocess.TimeoutExpired as hung:
        pytest.fail(f"the process did not end within 30 s; it printed {hung.stdout!r}")
    assert out.returncode == 0, out.stderr
    steps = {line["step"]: line for line in map(json.loads, out.stdout.splitlines())}
    ended = {"deadline": "call_timed_out", "server": "call_returned", "close": "call_closed"}
    assert ended[cancelled_by] in steps, out.stdout
    if cancelled_by == "deadline":
        assert steps["call_timed_out"]["secs"] < 3, steps  # its 1 s deadline, not the handler
    # The handler had its grace from its first cancellation, no less and not much more, and
    # was then closed; the shutdown waited for nothing else.
    handler = steps["run_returned"]["handler"]
    assert handler["started"] == 1 and handler["cancellations"] >= 1, handler
    grace = handler["closed"] - handler["first_cancelled"]
    assert _handlers.CANCEL_GRACE - 0.05 <= grace < _handlers.CANCEL_GRACE + 2, handler
    assert steps["run_returned"]["secs"] - handler["closed"] < 1, steps
    assert "did not end within" in out.stderr, out.stderr


def test_a_process_that_closed_a_client_mid_handler_exits_cleanly(
    scripted: Callable[..., ScriptedServer],
) -> None:
    # The client is closed while its handler runs, and the interpreter then exits as any
    # program's does. A runtime thread that was starting the handler (or cancelling it) when
    # the loop took over could reach the interpreter again once it was finalizing: an abort
    # (`PyGILState_Release`) or a segfault after `asyncio.run` had returned. The race is
    # narrow, so the scenario runs many times, side by side (contention widens it).
    server = scripted("legacy")
    script = Path(__file__).parent / "scripts" / "close_mid_handler.py"
    manners = ["polite"] * 40 + ["stubborn"] * 4

    def run(manner: str) -> tuple[str, int | str, str, str]:
        try:
            out = subprocess.run(
                [sys.executable, str(script), server.url, manner],
                capture_output=True, text=True, timeout=20,
                env={**os.environ, "PYTHONFAULTHANDLER": "1"},
            )
        except subprocess.TimeoutExpired as hung:
            return manner, "timed out", str(hung.stdout), str(hung.stderr)
        return manner, out.returncode, out.stdout, out.stderr

    with ThreadPoolExecutor(8) as pool:
        runs = list(pool.map(run, manners))
    failed = [r for r in runs if r[1] != 0 or r[2] != "returned\n"]
    assert not failed, f"{len(failed)} of {len(runs)} runs failed; the first: {failed[0]}"


def test_a_child_forked_while_an_answer_is_converted_exits_without_waiting(
    scripted: Callable[..., ScriptedServer],
) -> None:
    # The child inherits the exit hook and the count of the parent's threads then using the
    # interpreter, none of which exists in the child: its exit waits for none of them (it
    # waited out the whole 2 s bound).
    server = scripted("legacy")
    script = Path(__file__).parent / "scripts" / "fork_mid_conversion.py"
    out = subprocess.run(
        [sys.executable, str(script), server.url],
        capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert float(out.stdout.split()[0]) < 0.5, out.stdout


async def test_a_handlers_own_timeout_is_not_taken_for_its_cancellation(
    scripted: Callable[..., ScriptedServer], monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # `wait_for` (from 3.12 on, `asyncio.timeout`) cancels the handler's own task and takes
    # the cancellation back: the handler goes on past the grace and its answer is sent.
    monkeypatch.setattr(_handlers, "CANCEL_GRACE", 0.1)
    server = scripted("legacy")

    async def patient(request: ServerRequest) -> dict[str, Any]:
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.sleep(30), 0.05)
        await asyncio.sleep(0.3)
        return {"answered": True}

    async with Client(server.url, era="legacy", on_server_request=patient) as client:
        result = await client.call_tool("ask")
    assert result.structured_content["answer"]["result"] == {"answered": True}
    assert "did not end within" not in caplog.text


@pytest.mark.skipif(sys.version_info < (3, 11), reason="asyncio.timeout is 3.11's")
async def test_a_handlers_own_timeout_whose_cleanup_awaits_is_not_taken_for_its_cancellation(
    scripted: Callable[..., ScriptedServer], monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The handler's own timeout fires while it waits, and its cleanup awaits before the
    # timeout takes the cancellation back: the handler owes nothing after that, and runs on
    # past the grace to answer.
    monkeypatch.setattr(_handlers, "CANCEL_GRACE", 0.1)
    server = scripted("legacy")

    async def patient(request: ServerRequest) -> dict[str, Any]:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.05):  # type: ignore[attr-defined,unused-ignore]
                try:
                    await asyncio.sleep(30)
                finally:
                    await asyncio.sleep(0.01)
        await asyncio.sleep(0.3)
        return {"answered": True}

    async with Client(server.url, era="legacy", on_server_request=patient) as client:
        result = await client.call_tool("ask")
    assert result.structured_content["answer"]["result"] == {"answered": True}
    assert "did not end within" not in caplog.text


async def test_a_handler_answering_a_generator_based_coroutine_is_awaited_as_await_would(
    scripted: Callable[..., ScriptedServer],
) -> None:
    # `await` takes an awaitable without `__await__` (a generator-based coroutine); so does
    # the binding.
    server = scripted("legacy")

    @types.coroutine
    def answer() -> Generator[Any, None, dict[str, Any]]:
        yield from asyncio.sleep(0).__await__()
        return {"answered": True}

    def handler(request: ServerRequest) -> Any:
        return answer()

    async with Client(server.url, era="legacy", on_server_request=handler) as client:
        result = await client.call_tool("ask")
    assert result.structured_content["answer"]["result"] == {"answered": True}


async def test_a_cancelled_handler_finishes_its_cleanup_within_the_grace(
    scripted: Callable[..., ScriptedServer], caplog: pytest.LogCaptureFixture,
) -> None:
    server = scripted("legacy")
    cleaned = asyncio.Event()

    async def tidy(request: ServerRequest) -> dict[str, Any]:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            await asyncio.sleep(0.05)  # awaits after its cancellation, then lets it through
            cleaned.set()
            raise
        return {}

    async with Client(server.url, era="legacy", on_server_request=tidy) as client:
        result = await client.call_tool("ask", {"cancel_after_ms": 100})
        await asyncio.wait_for(cleaned.wait(), 5)
    assert result.structured_content["answer"] is None
    assert "did not end within" not in caplog.text


async def test_a_float_json_cannot_hold_is_a_type_error_and_nothing_is_sent(
    scripted: Callable[..., ScriptedServer],
) -> None:
    server = scripted("legacy")
    nan, inf = float("nan"), float("inf")
    async with Client(server.url, era="legacy", open_listen_stream=False) as client:
        # Not sent as `null`: JSON has no NaN or infinity.
        with pytest.raises(TypeError, match="not representable as JSON"):
            await client.call_tool("echo", {"x": nan})
        with pytest.raises(TypeError, match="not representable as JSON"):
            await client.call_tool("echo", {"deep": [{"x": -inf}]})
        with pytest.raises(TypeError, match="not representable as JSON"):
            await client.call_tool("echo", {"text": "x"}, meta={"x": inf})
        with pytest.raises(TypeError, match="not representable as JSON"):
            await client.request("tools/list", {"x": nan})
        assert server.requests("tools/call") == []
        assert server.requests("tools/list") == []
        # Finite floats, and the largest, pass.
        ok = await client.call_tool("echo", {"text": "x", "f": 1.5, "big": 1.7976931348623157e308})
        assert ok.text == "x"
        sent = server.requests("tools/call")[-1]["params"]["arguments"]
        assert sent["f"] == 1.5 and sent["big"] == 1.7976931348623157e308
