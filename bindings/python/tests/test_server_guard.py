"""``mcp_resume.server.ResumeSafetyMiddleware``: its plumbing, in process on 127.0.0.1, and real
Python MCP servers under it.

The rules are the Rust guard's and are tested there; here, what the skin itself must do: pass
what it does not guard, keep streams streaming, never block the event loop on the store, read
its settings onto the guard's builder. Then the ``mcp`` package's servers (``FastMCP`` and the
low-level ``Server``) as three uvicorn replicas behind nginx on one Redis, with the faults of
the Rust real-parts tests (a cut response, a rolling restart, ``kill -9`` mid-call) and two
clients (mcp-resume's own, and ``mcp.ClientSession`` over the bridge); the truth is the
tool's own counters in Redis.

The default run covers both server kinds guarded and the low-level one unguarded;
``MCP_RESUME_FULL_MATRIX=1`` adds FastMCP unguarded. ``pytest -s -k deployment`` prints the
tables of the README."""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
import socket
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from mcp import ClientSession
from mcp.server.fastmcp import Context
from mcp.shared.exceptions import McpError

from guarded_deployment import Deployment, Redis
from mcp_resume import Client, Era, InvalidConfigError, OutcomeUnknownError, ResendPolicy
from mcp_resume.bridge import IDEMPOTENCY_META_KEY, streamablehttp_client
from mcp_resume.server import ResponseAborted, ResumeSafetyMiddleware

if sys.version_info < (3, 11):
    from exceptiongroup import BaseExceptionGroup

# ---------------------------------------------------------------------------------------------
# The plumbing, in process.


@contextlib.asynccontextmanager
async def serving(app: Any) -> AsyncIterator[str]:
    """``app`` on uvicorn in this event loop, on a port of its own: its MCP URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            await task
        await asyncio.sleep(0.005)
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.should_exit = True
        await task


def fastmcp_app(gate: asyncio.Event | None = None) -> Any:
    """FastMCP with ``echo`` and ``step`` (one progress notification, then the result once
    ``gate`` is set)."""
    from mcp.server.fastmcp import FastMCP
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    mcp = FastMCP("plumbing", log_level="WARNING")

    @mcp.tool()
    async def echo(text: str) -> str:
        return text

    @mcp.tool()
    async def step(ctx: Context) -> str:  # type: ignore[type-arg]
        await ctx.report_progress(1, 2, "halfway")
        assert gate is not None
        await gate.wait()
        return "done"

    app = mcp.streamable_http_app()

    async def health(_request: Any) -> PlainTextResponse:
        return PlainTextResponse("ok")

    app.router.routes.append(Route("/health", health))
    return app


async def test_a_stream_reaches_the_client_as_it_comes() -> None:
    gate = asyncio.Event()
    app = ResumeSafetyMiddleware(fastmcp_app(gate))
    async with serving(app) as url:
        async with Client(url, era=Era.LEGACY, open_listen_stream=False) as client:
            notes = client.notifications()
            call = asyncio.create_task(client.call_tool("step", {}, progress="p-1"))
            # The progress event arrives while the tool still waits: the middleware forwarded
            # it as it came, not with the rest of the stream.
            note = await asyncio.wait_for(anext(aiter(notes)), 10)
            assert note.method == "notifications/progress", note
            assert not call.done() and not gate.is_set()
            gate.set()
            assert (await call).text == "done"


async def test_what_it_does_not_guard_passes() -> None:
    app = ResumeSafetyMiddleware(fastmcp_app(), max_body=1024)
    async with serving(app) as url:
        base = url.rsplit("/mcp", 1)[0]
        # Another route of the app, and the lifespan the app needs (its session manager).
        reader, writer = await asyncio.open_connection("127.0.0.1", int(base.rsplit(":", 1)[1]))
        writer.write(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        raw = (await reader.read()).decode()
        writer.close()
        assert raw.startswith("HTTP/1.1 200") and raw.endswith("ok"), raw
        assert "mcp-capability-hash" not in raw.lower()
        async with Client(url, era=Era.LEGACY, open_listen_stream=False) as client:
            # A body over the bound is not read: it passes to the app as it is.
            long = "x" * 4096
            assert (await client.call_tool("echo", {"text": long})).text == long
            # A keyed call that long cannot be guarded: refused, not run unguarded.
            with pytest.raises(Exception) as refused:
                await client.call_tool("echo", {"text": long}, idempotency_key="k-long")
            assert "413" in str(refused.value) or "guard" in str(refused.value), refused.value
        # Keyed in its body only: what was read of it names the key, so it is refused too.
        import httpx

        call = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
            "_meta": {"io.github.mcp-resume/idempotency-key": "k-body"},
            "name": "echo", "arguments": {"text": long}}}
        async with httpx.AsyncClient() as http:
            answer = await http.post(url, json=call, headers={
                "accept": "application/json, text/event-stream"})
        assert answer.status_code == 413, answer.text


async def test_keys_scoped_by_a_header() -> None:
    app = ResumeSafetyMiddleware(fastmcp_app(), key_scope_header="x-client")
    async with serving(app) as url:
        async with Client(url, era=Era.LEGACY, open_listen_stream=False,
                          headers={"x-client": "alice"}) as client:
            assert (await client.call_tool("echo", {"text": "a"}, idempotency_key="k")).text == "a"
        async with Client(url, era=Era.LEGACY, open_listen_stream=False) as client:
            with pytest.raises(Exception) as refused:
                await client.call_tool("echo", {"text": "a"}, idempotency_key="k")
            assert "x-client" in str(refused.value), refused.value


async def test_the_event_loop_runs_while_the_store_is_slow() -> None:
    redis = Redis()
    try:
        app = ResumeSafetyMiddleware(fastmcp_app(), store=redis.url)
        async with serving(app) as url:
            async with Client(url, era=Era.LEGACY, open_listen_stream=False) as client:
                await client.call_tool("echo", {"text": "warm"})
                # Writes (a claim is one) wait in Redis from now on, for less than the
                # store's response timeout (1 s, which the middleware does not expose; longer,
                # and the claim would fail instead of waiting); the event loop must not wait
                # with them.
                redis.command("CLIENT", "PAUSE", "900", "WRITE")
                keyed = asyncio.create_task(
                    client.call_tool("echo", {"text": "keyed"}, idempotency_key="k-slow")
                )

                async def claim_waits() -> bool:
                    info = await asyncio.to_thread(redis.command, "INFO", "clients")
                    return any(
                        line.startswith("blocked_clients:") and line.split(":")[1] != "0"
                        for line in (info or "").splitlines()
                    )

                deadline = time.monotonic() + 10
                while not await claim_waits():
                    assert not keyed.done(), keyed
                    assert time.monotonic() < deadline, "the keyed call's claim never waited"
                    await asyncio.sleep(0.005)
                # An unkeyed call of the same session (no store step) is answered while the
                # keyed one's claim still waits in Redis: a loop blocked on the claim would
                # have answered it only after Redis did.
                assert (await client.call_tool("echo", {"text": "meanwhile"})).text == "meanwhile"
                assert await claim_waits(), "the claim no longer waited when the call was answered"
                assert not keyed.done(), keyed
                assert (await keyed).text == "keyed"
    finally:
        redis.stop()


INITIALIZE = (
    b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18",'
    b'"capabilities":{},"clientInfo":{"name":"t","version":"1"}}}'
)


async def unfinished_initialize(client_leaves: bool, sent: list[dict[str, Any]]) -> None:
    """An ``initialize`` whose app sends its SSE head and one partial event, then returns
    without ending its response; the client stays, or leaves (``http.disconnect``) first.
    What the middleware sends the server goes to ``sent``."""
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
        "scheme": "http", "path": "/mcp", "raw_path": b"/mcp", "query_string": b"",
        "root_path": "", "server": ("127.0.0.1", 80), "client": ("127.0.0.1", 1),
        "headers": [(b"content-type", b"application/json"),
                    (b"accept", b"application/json, text/event-stream")],
    }
    incoming = [{"type": "http.request", "body": INITIALIZE, "more_body": False}]
    if client_leaves:
        incoming.append({"type": "http.disconnect"})

    async def receive() -> dict[str, Any]:
        if incoming:
            return incoming.pop(0)
        await asyncio.Event().wait()  # the client stays
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def app(scope: Any, receive: Any, send: Any) -> None:
        assert (await receive())["type"] == "http.request"
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream")]})
        await send({"type": "http.response.body", "body": b"event: message\ndata: {\"jsonrpc\"",
                    "more_body": True})
        if client_leaves:
            assert (await receive())["type"] == "http.disconnect"

    await ResumeSafetyMiddleware(app)(scope, receive, send)


async def test_a_response_its_app_left_unfinished_is_cut_short() -> None:
    # The client is still there: the head the guard held goes, with what the app sent, and
    # the response is cut short (the server drops the connection), not failed by the
    # middleware.
    sent: list[dict[str, Any]] = []
    with pytest.raises(ResponseAborted):
        await unfinished_initialize(False, sent)
    assert [(m["type"], m.get("status"), m.get("more_body")) for m in sent] == [
        ("http.response.start", 200, None), ("http.response.body", None, True)], sent
    # The client left first: nothing goes to it, and nothing is raised.
    sent = []
    await unfinished_initialize(True, sent)
    assert sent == []


class Scripted:
    """An inner app whose handler the test sets before each request."""

    def __init__(self) -> None:
        self.handler: Callable[[Any, Any, Any], Any] | None = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        assert self.handler is not None
        await self.handler(scope, receive, send)


SSE_HEAD = {"type": "http.response.start", "status": 200,
            "headers": [(b"content-type", b"text/event-stream")]}
NOTE = b'{"jsonrpc":"2.0","method":"notifications/message","params":{}}'


def event(inner_id: str, data: bytes, more: bool = True) -> dict[str, Any]:
    return {"type": "http.response.body", "body": f"id: {inner_id}\ndata: ".encode() + data + b"\n\n",
            "more_body": more}


def tool_call(call_id: int, key: str | None = None) -> bytes:
    meta = f',"_meta":{{"io.github.mcp-resume/idempotency-key":"{key}"}}' if key else ""
    return (f'{{"jsonrpc":"2.0","id":{call_id},"method":"tools/call","params":'
            f'{{"name":"echo","arguments":{{}}{meta}}}}}').encode()


def tool_result(call_id: int, text: str) -> bytes:
    return (f'{{"jsonrpc":"2.0","id":{call_id},"result":{{"content":'
            f'[{{"type":"text","text":"{text}"}}]}}}}').encode()


async def request(
    app: Any, method: str, headers: list[tuple[bytes, bytes]], body: bytes = b"",
    send: Callable[[dict[str, Any]], Any] | None = None, client_leaves: bool = False,
) -> list[dict[str, Any]]:
    """One request to ``app`` as a server makes it: what went to the client (through ``send``
    when given). The client stays until the response ends, or leaves once its request is read."""
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
        "scheme": "http", "path": "/mcp", "raw_path": b"/mcp", "query_string": b"",
        "root_path": "", "server": ("127.0.0.1", 80), "client": ("127.0.0.1", 1),
        "headers": [(b"accept", b"application/json, text/event-stream"), *headers],
    }
    incoming: list[dict[str, Any]] = [{"type": "http.request", "body": body, "more_body": False}]
    if client_leaves:
        incoming.append({"type": "http.disconnect"})
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if incoming:
            return incoming.pop(0)
        await asyncio.Event().wait()  # the client stays
        raise AssertionError("unreachable")

    async def to_client(message: dict[str, Any]) -> None:
        if send is not None:
            await send(message)
        sent.append(message)

    await app(scope, receive, to_client)
    return sent


def body_of(sent: list[dict[str, Any]]) -> bytes:
    return b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


def gone_after_first_body(delivered: list[dict[str, Any]]) -> Callable[[dict[str, Any]], Any]:
    """A server's ``send`` whose client left after the response's first body bytes: it raises
    an ``OSError`` from then on (ASGI 2.4; uvicorn's ``ClientDisconnected`` is one). What it
    delivered goes to ``delivered``."""

    async def send(message: dict[str, Any]) -> None:
        if any(m["type"] == "http.response.body" for m in delivered):
            raise OSError("the client is gone")
        delivered.append(message)

    return send


POST = [(b"content-type", b"application/json")]


async def initialized(inner: Scripted, mw: ResumeSafetyMiddleware, sid: bytes) -> None:
    async def initialize(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        answer = (b'{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-06-18",'
                  b'"capabilities":{"tools":{}},"serverInfo":{"name":"inner","version":"1"}}}')
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", b"application/json"), (b"mcp-session-id", sid)]})
        await send({"type": "http.response.body", "body": answer})

    inner.handler = initialize
    sent = await request(mw, "POST", POST, INITIALIZE)
    assert sent[0]["status"] == 200, sent


async def test_a_keyed_answer_is_stored_when_sending_to_its_gone_client_raises() -> None:
    # The client leaves after the first event; the server's send raises on the next one. The
    # app never hears of it and runs to its answer, which is stored: the re-send gets it.
    inner = Scripted()
    mw = ResumeSafetyMiddleware(inner)

    async def answer_later(scope: Any, receive: Any, send: Any) -> None:
        assert (await receive())["type"] == "http.request"
        await send(SSE_HEAD)
        await send(event("e1", NOTE))
        await asyncio.sleep(0)
        await send(event("e2", NOTE))  # the client is gone: this send raises
        await asyncio.sleep(0)
        await send(event("e3", tool_result(2, "stored"), more=False))

    inner.handler = answer_later
    await request(mw, "POST", POST, tool_call(2, "k-gone"), send=gone_after_first_body([]),
                  client_leaves=True)

    async def never(scope: Any, receive: Any, send: Any) -> None:
        raise AssertionError("a stored call ran again")

    inner.handler = never
    answer = body_of(await request(mw, "POST", POST, tool_call(2, "k-gone")))
    assert b"stored" in answer and b"OUTCOME_UNKNOWN" not in answer, answer


async def test_a_keyed_call_cancelled_as_its_claim_is_granted_is_marked_lost_at_once() -> None:
    # The request's task is cancelled (its server's client left) after Redis granted its
    # claim but before the event loop took that step: the call its app never saw is marked
    # lost at once, not left running until its lease ends.
    # The binding wakes this loop for a finished awaitable by writing a byte to a socket the
    # loop watches (registered with the loop's first awaitable, the waiting claim's at the
    # latest): that byte is the granted claim reaching the loop, which the test can wait for
    # without letting the loop run.
    loop = asyncio.get_running_loop()
    watched: list[int] = []
    add_reader = loop.add_reader

    def spy(fd: Any, callback: Any, *args: Any) -> Any:
        watched.append(fd if isinstance(fd, int) else fd.fileno())
        return add_reader(fd, callback, *args)

    loop.add_reader = spy  # type: ignore[method-assign]
    redis = Redis()
    try:
        inner = Scripted()
        mw = ResumeSafetyMiddleware(inner, store=redis.url, lease=60)

        async def answer(scope: Any, receive: Any, send: Any) -> None:
            await receive()
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"application/json")]})
            await send({"type": "http.response.body", "body": tool_result(2, "warm")})

        inner.handler = answer
        assert b"warm" in body_of(await request(mw, "POST", POST, tool_call(2, "k-warm")))

        async def never(scope: Any, receive: Any, send: Any) -> None:
            raise AssertionError("the app was reached")

        inner.handler = never
        redis.command("CLIENT", "PAUSE", "300", "WRITE")
        call = asyncio.create_task(request(mw, "POST", POST, tool_call(2, "k-cut")))
        deadline = time.monotonic() + 10
        while "blocked_clients:0" in (await asyncio.to_thread(redis.command, "INFO", "clients")
                                      or "blocked_clients:0"):
            assert not call.done(), call
            assert time.monotonic() < deadline, "the keyed call's claim never waited"
            await asyncio.sleep(0.005)
        # The event loop is held while the pause ends (Redis no longer shows the claim
        # waiting) and the granted claim reaches the runtime, which queues the step for the
        # loop and wakes it; the task is cancelled before the loop takes it.
        while "blocked_clients:0" not in (redis.command("INFO", "clients") or ""):
            assert time.monotonic() < deadline, "the keyed call's claim was never granted"
            time.sleep(0.005)
        assert len(watched) == 1, f"the binding's wake-up socket: {watched}"
        woken, _, _ = select.select(watched, [], [], max(0.0, deadline - time.monotonic()))
        assert woken, "the granted claim never reached the loop"
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        deadline = time.monotonic() + 5
        while True:
            resent = body_of(await request(mw, "POST", POST, tool_call(2, "k-cut")))
            if b"KEY_IN_USE" not in resent or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.05)
        assert b"IDEMPOTENCY_OUTCOME_UNKNOWN" in resent, resent
    finally:
        redis.stop()
        loop.add_reader = add_reader  # type: ignore[method-assign]


async def test_a_keyed_answer_is_stored_when_the_task_is_cancelled_as_it_is_stored() -> None:
    # The store lost the claim while the call ran, and the request's task is cancelled (its
    # server shutting down, or cancelling the app as its client left) while the answer's
    # first store attempt waits on Redis: the attempt finds the key gone, and the claim is
    # still taken back and the answer stored, so the re-send gets it instead of a second run.
    redis = Redis()
    try:
        inner = Scripted()
        mw = ResumeSafetyMiddleware(inner, store=redis.url, lease=60)
        gate = asyncio.Event()
        headed = asyncio.Event()

        async def answer(scope: Any, receive: Any, send: Any) -> None:
            await receive()
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"application/json")]})
            headed.set()
            await gate.wait()
            await send({"type": "http.response.body", "body": tool_result(2, "once")})

        inner.handler = answer
        call = asyncio.create_task(request(mw, "POST", POST, tool_call(2, "k-lost")))
        await asyncio.wait_for(headed.wait(), 10)
        claim = redis.command("RANDOMKEY")
        assert claim is not None and "{k:" in claim, claim
        assert redis.command("DEL", claim) == "1"
        redis.command("CLIENT", "PAUSE", "500", "WRITE")
        gate.set()
        deadline = time.monotonic() + 10
        while "blocked_clients:0" in (await asyncio.to_thread(redis.command, "INFO", "clients")
                                      or "blocked_clients:0"):
            assert not call.done(), call
            assert time.monotonic() < deadline, "the answer's store attempt never waited"
            await asyncio.sleep(0.005)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        # Once the pause ends the attempt finds the key gone: the claim is taken back and
        # the answer stored on the runtime, which the event loop does not wait for.
        deadline = time.monotonic() + 3
        while redis.command("EXISTS", claim) != "1" and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        runs = 0

        async def counted(scope: Any, receive: Any, send: Any) -> None:
            nonlocal runs
            runs += 1
            await answer(scope, receive, send)

        inner.handler = counted
        resent = body_of(await request(mw, "POST", POST, tool_call(2, "k-lost")))
        assert runs == 0, f"the call ran again: {resent!r}"
        assert b"once" in resent, resent
    finally:
        redis.stop()


async def test_an_unkeyed_stream_whose_gone_client_raises_can_be_resumed() -> None:
    # Sending to the gone client raises into the app (as it would without the guard), and the
    # stream's requests are not taken for lost: the client's resume reaches the app.
    inner = Scripted()
    mw = ResumeSafetyMiddleware(inner)
    await initialized(inner, mw, b"s1")
    session = [(b"mcp-session-id", b"s1")]

    async def answer_later(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        await send(SSE_HEAD)
        await send(event("0/0", b""))
        await asyncio.sleep(0)
        await send(event("1/0", NOTE))
        await send(event("2/0", tool_result(2, "late"), more=False))

    inner.handler = answer_later
    delivered: list[dict[str, Any]] = []
    with pytest.raises(OSError):
        await request(mw, "POST", POST + session, tool_call(2), send=gone_after_first_body(delivered),
                      client_leaves=True)
    # The client got the priming event: it resumes after it.
    cursor = body_of(delivered).split(b"id: ")[1].split(b"\n")[0]
    resumed: list[Any] = []

    async def replay(scope: Any, receive: Any, send: Any) -> None:
        resumed.append(dict(scope["headers"]).get(b"last-event-id"))
        await send(SSE_HEAD)
        await send(event("1/0", NOTE))
        await send(event("2/0", tool_result(2, "late"), more=False))

    inner.handler = replay
    sent = await request(mw, "GET", session + [(b"last-event-id", cursor)])
    assert resumed == [b"0/0"], sent
    assert sent[0]["status"] == 200 and b"late" in body_of(sent), sent


async def test_a_resume_the_guard_cuts_short_is_cut_at_once() -> None:
    # Two resumes of one stream from the same cursor: the second numbers two new events, the
    # first then gets the later one first. Its replay diverged: the guard cuts it, at once,
    # though its app never ends its stream.
    inner = Scripted()
    mw = ResumeSafetyMiddleware(inner)
    await initialized(inner, mw, b"s1")
    session = [(b"mcp-session-id", b"s1")]

    async def no_answer(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        await send(SSE_HEAD)
        await send(event("0/0", b""))
        await send(event("1/0", NOTE, more=False))

    inner.handler = no_answer
    sent = await request(mw, "POST", POST + session, tool_call(2))
    cursor = body_of(sent).split(b"id: ")[2].split(b"\n")[0]
    resume = session + [(b"last-event-id", cursor)]
    go = asyncio.Event()
    app_sent: list[str] = []

    async def never_ends(scope: Any, receive: Any, send: Any) -> None:
        await send(SSE_HEAD)
        await go.wait()
        await send(event("7/0", NOTE))
        app_sent.append("7/0")
        await asyncio.Event().wait()  # the stream stays open: nothing more to send yet

    inner.handler = never_ends
    first: list[dict[str, Any]] = []

    async def to_first(message: dict[str, Any]) -> None:
        first.append(message)

    cut = asyncio.create_task(request(mw, "GET", resume, send=to_first))
    while not first:
        await asyncio.sleep(0.01)
    assert first[0]["status"] == 200, first

    async def numbers_two(scope: Any, receive: Any, send: Any) -> None:
        await send(SSE_HEAD)
        await send(event("6/0", NOTE))
        await send(event("7/0", NOTE, more=False))

    inner.handler = numbers_two
    await request(mw, "GET", resume)
    go.set()
    try:
        with pytest.raises(ResponseAborted):
            await asyncio.wait_for(cut, 5)
    finally:
        cut.cancel()
    # The app's send raised: it went no further.
    assert app_sent == [], app_sent
    assert not any(m.get("more_body") is False for m in first), first


def test_settings_are_read_onto_the_guard() -> None:
    app = ResumeSafetyMiddleware(fastmcp_app(), instance_id="replica-7", lease=2.5)
    assert app.instance_id == "replica-7"
    with pytest.raises(InvalidConfigError):
        ResumeSafetyMiddleware(fastmcp_app(), instance_id="has spaces")
    with pytest.raises(InvalidConfigError):
        ResumeSafetyMiddleware(fastmcp_app(), store="mysql://db")
    with pytest.raises(InvalidConfigError):
        ResumeSafetyMiddleware(fastmcp_app(), lease=-1)
    with pytest.raises(InvalidConfigError):
        ResumeSafetyMiddleware(fastmcp_app(), key_scope_header="not a header")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    with pytest.raises(ConnectionError):
        ResumeSafetyMiddleware(fastmcp_app(), store=f"redis://127.0.0.1:{closed}")


# ---------------------------------------------------------------------------------------------
# Real servers, real parts.

#: Longer than nginx's idle timeout: the response is cut while the tool waits after its effect.
CUT_DELAY_MS = 800
#: Long enough for the test to see the effect and kill the replica mid-call.
KILL_DELAY_MS = 500
#: Shorter than the idle timeout: only the drain interrupts these (it begins right after the
#: effect, while the tool still waits).
DRAIN_DELAY_MS = 250
#: How long any call may take before the test gives up on it.
DEADLINE = 10.0
#: The same, unguarded: there a keyed call cut or killed is re-sent, and runs again, until its
#: deadline (every run is counted; a few prove the duplicates).
BARE_DEADLINE = 3.0

KINDS = [("fastmcp", True), ("lowlevel", True), ("lowlevel", False)]
if os.environ.get("MCP_RESUME_FULL_MATRIX"):
    KINDS.append(("fastmcp", False))


@dataclass
class Call:
    client: str  # "native" (mcp_resume.Client) or "session" (mcp.ClientSession over the bridge)
    tag: str
    keyed: bool
    delay_ms: int


@dataclass
class Row:
    fault: str
    call: Call
    reported: str  # "ok:<text>", "unknown:<why>", or "failed:<why>"
    effects: int
    finished: int
    #: Its ``tools/call`` requests that reached a replica (a re-send makes two).
    posts: int = 0
    #: Its requests whose connection closed before their answer went (nginx cut it, or a drain
    #: closed it).
    cut: int = 0
    #: Its runs a drain found in flight.
    drained: int = 0

    @property
    def first_answer(self) -> str:
        return f"ok:{self.call.tag}:1"

    @property
    def unknown(self) -> bool:
        """It ended ``OutcomeUnknown`` (why is in ``reported``)."""
        return self.reported.startswith("unknown:")

    @property
    def wrong_answer(self) -> bool:
        """A success that is not the answer of the call's one run."""
        return self.reported.startswith("ok:") and (
            self.reported != self.first_answer or self.effects != 1
        )


async def native(url: str, call: Call, trusting: bool) -> str:
    policy = ResendPolicy.ASSUME_SERVER_DEDUPLICATES if trusting else None
    try:
        async with Client(
            url, era=Era.LEGACY, open_listen_stream=False,
            call_timeout=BARE_DEADLINE if trusting else DEADLINE,
            resend_policy=policy,
        ) as client:
            key = f"key-{call.tag}" if call.keyed else None
            args = {"tag": call.tag, "delay_ms": call.delay_ms}
            result = await client.call_tool("bump", args, idempotency_key=key)
            return f"ok:{result.text}"
    except OutcomeUnknownError as e:
        return f"unknown:{e}"
    except Exception as e:  # noqa: BLE001 - every other failure is a row of the table
        return f"failed:{type(e).__name__}: {e}"


async def session(url: str, call: Call, trusting: bool) -> str:
    policy = ResendPolicy.ASSUME_SERVER_DEDUPLICATES if trusting else None
    try:
        async with streamablehttp_client(
            url, call_timeout=BARE_DEADLINE if trusting else DEADLINE, era=Era.LEGACY,
            resend_policy=policy,
        ) as (read, write, _):
            async with ClientSession(read, write) as s:
                await s.initialize()
                meta = {IDEMPOTENCY_META_KEY: f"key-{call.tag}"} if call.keyed else None
                args = {"tag": call.tag, "delay_ms": call.delay_ms}
                result = await s.call_tool("bump", args, meta=meta)
                return f"ok:{getattr(result.content[0], 'text', '')}"
    except Exception as e:  # noqa: BLE001 - every failure is a row of the table
        # Raised inside the bridge's task group: the session's own error is in the group.
        while isinstance(e, BaseExceptionGroup) and len(e.exceptions) == 1:
            e = e.exceptions[0]
        if isinstance(e, McpError) and (e.error.data or {}).get("kind") == "outcome_unknown":
            return f"unknown:{e}"
        return f"failed:{type(e).__name__}: {e}"


async def make(d: Deployment, call: Call) -> str:
    # Unguarded, the client assumes the server deduplicates keys (what an application would
    # set for a server it trusts), to show what happens when none does.
    run = native if call.client == "native" else session
    try:
        return await asyncio.wait_for(run(d.url, call, not d.guarded), DEADLINE + 5)
    except asyncio.TimeoutError:
        return "failed:the client hung"


def calls(d: Deployment, fault: str, delay_ms: int, clients: tuple[str, ...]) -> list[Call]:
    run = f"{d.kind}-{'g' if d.guarded else 'n'}-{uuid.uuid4().hex[:6]}"
    return [
        Call(client, f"{run}-{fault}-{client}-{'k' if keyed else 'u'}", keyed, delay_ms)
        for client in clients
        for keyed in (True, False)
    ]


def judge(d: Deployment, fault: str, made: list[Call], reported: list[str]) -> list[Row]:
    def count(what: str, tag: str) -> int:
        return int(d.redis.command("GET", f"{what}:{tag}") or 0)

    return [
        Row(fault, c, r, d.effects(c.tag), d.finished(c.tag), count("posts", c.tag),
            count("cut", c.tag), count("drained", c.tag))
        for c, r in zip(made, reported)
    ]


async def in_thread(fn: Callable[[], Any]) -> Any:
    return await asyncio.get_running_loop().run_in_executor(None, fn)


async def effect_of(d: Deployment, c: Call, call: asyncio.Future) -> int | None:
    """The pid of the replica that applied ``c``'s effect, once it has; ``None`` if the call
    ended first (its row then says why the fault missed it, rather than a timeout here). Bounded
    by the call's own deadline: a loaded machine is slow to run the tool, never wrong."""
    while not call.done():
        if (pid := await in_thread(lambda: d.effect_pid(c.tag))) is not None:
            return pid
        await asyncio.sleep(0.01)
    return None


async def cut(d: Deployment) -> list[Row]:
    """nginx cuts each call's silent response while the tool waits after its effect."""
    made = calls(d, "cut", CUT_DELAY_MS, ("native", "session"))
    reported = await asyncio.gather(*(make(d, c) for c in made))
    return judge(d, "cut", made, list(reported))


async def kill(d: Deployment) -> list[Row]:
    """The replica running each call is killed (SIGKILL) right after the call's effect."""
    rows = []
    made = calls(d, "kill", KILL_DELAY_MS, ("native", "session"))
    # One at a time: each kill takes a replica down until it is revived. Both of mcp-resume's
    # calls, and the keyed one of the ClientSession's.
    for c in made[:3]:
        call = asyncio.ensure_future(make(d, c))

        async def killer(c: Call = c, call: asyncio.Future = call) -> None:
            if (pid := await effect_of(d, c, call)) is not None:
                await in_thread(lambda: d.kill9(pid))

        reported, _ = await asyncio.gather(call, killer())
        rows.extend(judge(d, "kill", [c], [reported]))
        await in_thread(d.revive)
    return rows


async def drain(d: Deployment) -> list[Row]:
    """A rolling restart's step lands on each call: the replica running it is drained (SIGTERM)
    right after the call's effect, while the tool still waits, then started again. The drain
    closes the call's connection before its answer and lets its run end."""
    rows = []
    # One at a time: each drain lands on the one replica running its call.
    for c in calls(d, "drain", DRAIN_DELAY_MS, ("native", "session")):
        call = asyncio.ensure_future(make(d, c))

        async def restart(c: Call = c, call: asyncio.Future = call) -> None:
            if (pid := await effect_of(d, c, call)) is None:
                return
            replica = next(r for r in d.replicas if r.pid == pid)
            await in_thread(replica.drain)
            await in_thread(replica.start)

        reported, _ = await asyncio.gather(call, restart())
        rows.extend(judge(d, "drain", [c], [reported]))
    return rows


def bit(r: Row, json: bool) -> str | None:
    """Why a row's fault did not bite its call (``None`` if it did): a fault that interrupts
    nothing proves nothing about the guard. ``json``: the replicas answer calls with JSON (a cut
    answer cannot be resumed)."""
    if r.fault == "cut":
        # nginx closed the call's response before its answer; with nothing to resume, a keyed
        # call was re-sent.
        if not r.cut:
            return "nginx never cut the call before its answer"
        if r.call.keyed and json and r.posts < 2:
            return "a keyed call whose JSON answer nginx cut was never re-sent"
    elif r.fault == "kill":
        # The killed run never reached its end (a re-sent keyed call's second run may have).
        # Nor did a run whose unkeyed call nginx cut (its app hears the client leave): the
        # replica running the unkeyed call, sent once, never lived to see its connection close.
        if r.finished >= r.effects:
            return "the killed run ended"
        if not r.call.keyed and r.cut:
            return "the replica running the unkeyed call lived to see its connection cut"
        # Both runs' clients re-send a keyed call to a server that (says it) deduplicates: an
        # unknown reported without asking again would be a guess, not the guard's answer.
        if r.call.keyed and r.posts < 2:
            return "the killed keyed call was not re-sent"
    else:
        return drain_bit(r)
    if not r.call.keyed and r.posts != 1:
        return "an unkeyed call was sent other than once"
    return None


def drain_bit(r: Row) -> str | None:
    """Why a drain row's drain did not bite its call (``None`` if it did)."""
    if not r.drained:
        return "the drain found the call's run ended"
    if not r.finished:
        return "the drained run did not end"
    if not r.cut:
        return "the drain did not close the call before its answer"
    if r.call.keyed and r.posts < 2:
        return "the drained keyed call was not re-sent"
    if not r.call.keyed and (r.posts != 1 or not r.unknown):
        return "an unkeyed call was re-sent, or answered after its answer was cut"
    return None


def table(d: Deployment, rows: list[Row]) -> str:
    """The README's table: per fault, what happened to keyed and unkeyed calls."""
    head = (
        f"\n{d.kind} {'with the guard' if d.guarded else 'without the guard (client trusting the server to deduplicate)'}\n"
        "| fault | calls keyed/unkeyed | keyed run twice (runs) | unkeyed run twice | "
        "keyed completed once with their first answer | OutcomeUnknown | silent wrong answers "
        "| other errors |\n"
    )
    out = head
    for fault in ("cut", "drain", "kill"):
        of = [r for r in rows if r.fault == fault]
        keyed = [r for r in of if r.call.keyed]
        twice = [r.effects for r in keyed if r.effects > 1]
        out += (
            f"| {fault} | {len(keyed)}/{len(of) - len(keyed)} | {len(twice)} {twice} | "
            f"{sum(1 for r in of if not r.call.keyed and r.effects > 1)} | "
            f"{sum(1 for r in keyed if r.reported == r.first_answer and r.effects == 1)}/{len(keyed)} | "
            f"{sum(1 for r in of if r.unknown)} | "
            f"{sum(1 for r in of if r.wrong_answer)} | "
            f"{sum(1 for r in of if r.reported.startswith('failed'))} |\n"
        )
    return out


@pytest.fixture(scope="module")
def redis() -> Any:
    server = Redis()
    yield server
    server.stop()


@pytest.mark.parametrize(("kind", "guarded"), KINDS, ids=[f"{k}-{'guarded' if g else 'bare'}" for k, g in KINDS])
async def test_deployment_under_faults(
    mock_cluster_bin: Path, redis: Redis, kind: str, guarded: bool
) -> None:
    d = await in_thread(lambda: Deployment(mock_cluster_bin, redis, kind, guarded))
    try:
        rows = await cut(d) + await kill(d) + await drain(d)
    finally:
        await in_thread(d.stop)
    report = table(d, rows)
    print(report)
    details = report + "\n".join(map(str, rows))
    missed = [f"a {r.fault} row: {why}: {r}" for r in rows if (why := bit(r, kind == "lowlevel"))]
    assert not missed, "the fault did not bite:\n" + "\n".join(missed) + f"\n{details}"
    if not guarded:
        # Without the guard, keyed calls a client re-sends run again: the duplicates the guard
        # prevents, every drained one among them. Unkeyed calls are never re-sent.
        assert any(r.call.keyed and r.effects > 1 for r in rows), details
        assert all(r.effects > 1 for r in rows if r.fault == "drain" and r.call.keyed), details
        assert all(r.call.keyed or r.effects <= 1 for r in rows), details
        # A cut SSE answer is resumed, not re-sent: its one run's answer.
        assert all(
            r.posts == 1 and r.effects == 1 and r.reported == r.first_answer
            for r in rows if r.fault == "cut" and kind == "fastmcp"
        ), details
        return
    for r in rows:
        what = f"{r}\n{details}"
        assert r.effects <= 1, f"ran twice: {what}"
        assert not r.wrong_answer, f"a silent wrong answer: {what}"
        assert not r.reported.startswith("failed"), f"an error: {what}"
        assert r.effects == 1, f"never ran: {what}"
        if r.call.keyed and r.finished:
            # Its run finished: exactly once, with its stored (first) answer.
            assert r.reported == r.first_answer, what
        elif r.call.keyed:
            # Its run died (its replica killed, or stopped mid-call by a drain): never
            # success, never a second run.
            assert r.unknown, what
        elif r.fault == "cut" and kind == "fastmcp":
            # Unkeyed, its replica alive (cut, not drained or killed), its stream resumable (an
            # event store): the client resumes it and gets its answer.
            assert r.reported == r.first_answer, what
        else:
            # Unkeyed: the answer if the client got it, else an honest unknown.
            assert r.reported == r.first_answer or r.unknown, what
