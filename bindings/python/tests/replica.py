"""One replica of a Python MCP deployment, for the server guard's tests and benchmark: the
``mcp`` package's server on uvicorn, with or without ``ResumeSafetyMiddleware`` in front.

    python replica.py --kind fastmcp|lowlevel --port N [--redis URL] [--store memory|redis]
                      [--no-guard] [--lease SECONDS] [--session-prefix iN-]

Kinds:

- ``fastmcp``: ``FastMCP(...).streamable_http_app()``, answering calls as SSE streams, with an
  event store (its streams can be resumed);
- ``lowlevel``: the low-level ``Server`` under ``StreamableHTTPSessionManager`` in a Starlette
  app, answering with JSON (``json_response=True``: a cut answer cannot be resumed).

Its tool ``bump {tag, delay_ms}`` applies a side effect first (``INCR effects:<tag>`` in
Redis, the truth the tests read, and ``ran:<tag>`` = its pid), waits ``delay_ms`` (a call to
cut, drain or kill after its effect), then counts its finish (``INCR done:<tag>``). ``echo
{text}`` touches nothing (the benchmark's call). What the tests read to know a fault bit, per
tag: ``posts:<tag>``, the ``tools/call`` requests that reached a replica (a re-send makes two);
``cut:<tag>``, those whose connection closed before their answer went (nginx cut it, or a drain
closed it); ``drained:<tag>``, the runs in flight when a drain began.

Prints ``http://127.0.0.1:PORT/mcp`` on its first stdout line once it listens. SIGTERM drains
it as a shutdown that does not wait for open responses does: no new connections, every open
one closed at once (a client whose answer had not come must come back elsewhere), the calls
already running let go on to their end (and the guard store their answers), then the rest of
the shutdown (``DrainingServer``); SIGKILL is a crash; it exits when its stdin closes, so a
test that dies leaves no replica behind.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import threading
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlparse

import uvicorn


class Redis:
    """Just enough of the Redis protocol for the tool's side effect."""

    def __init__(self, url: str) -> None:
        parsed = urlparse(url)
        self.host = parsed.hostname or "127.0.0.1"
        self.port = parsed.port or 6379

    async def run(self, *commands: list[str]) -> list[bytes]:
        reader, writer = await asyncio.open_connection(self.host, self.port)
        try:
            payload = b""
            for args in commands:
                payload += b"*%d\r\n" % len(args)
                for arg in args:
                    data = arg.encode()
                    payload += b"$%d\r\n%s\r\n" % (len(data), data)
            writer.write(payload)
            await writer.drain()
            return [await reader.readline() for _ in commands]
        finally:
            writer.close()


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--kind", choices=["fastmcp", "lowlevel"], required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--redis", default="redis://127.0.0.1:6379")
    p.add_argument("--store", choices=["memory", "redis"], default="redis")
    p.add_argument("--no-guard", dest="guard", action="store_false")
    p.add_argument("--lease", type=float, default=10.0)
    p.add_argument("--session-prefix", default="")
    return p.parse_args()


#: How long a drain waits for the calls in flight to end before it shuts down anyway.
DRAIN_S = 10.0

#: The tags of the tool runs in flight (one entry per run).
RUNNING: list[str] = []


class InFlight:
    """Counts the POSTs being answered. It wraps the guard too, so a keyed call counts until
    the guard has stored its answer. It counts each ``tools/call`` that reaches it
    (``posts:<tag>``) and each whose connection closed before its answer went (``cut:<tag>``),
    and knows which have not sent their answer yet."""

    def __init__(self, app: Any, redis: Redis) -> None:
        self.app = app
        self.redis = redis
        self.count = 0
        self.idle = asyncio.Event()
        self.idle.set()
        #: The ``tools/call``s whose answer has not gone: their tags.
        self.unanswered: dict[int, str] = {}

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            return await self.app(scope, receive, send)
        self.count += 1
        self.idle.clear()
        try:
            await self.post(scope, receive, send)
        finally:
            self.count -= 1
            if self.count == 0:
                self.idle.set()

    async def post(self, scope: Any, receive: Any, send: Any) -> None:
        # The body read first (to name the call), then handed on as it came.
        messages = []
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request" or not message.get("more_body"):
                break
        body = b"".join(m.get("body", b"") for m in messages)
        try:
            request = json.loads(body) if b'"tag"' in body else {"method": None}
            tag = (
                request["params"]["arguments"]["tag"]
                if request["method"] == "tools/call"
                else None
            )
        except (ValueError, KeyError, TypeError):
            tag = None
        if not isinstance(tag, str):
            tag = None

        async def replay() -> Any:
            return messages.pop(0) if messages else await receive()

        if tag is None:
            return await self.app(scope, replay, send)
        await self.redis.run(["INCR", f"posts:{tag}"])
        me = id(messages)
        self.unanswered[me] = tag

        async def watch(message: Any) -> None:
            if message["type"] == "http.response.body" and (
                b'"result"' in message.get("body", b"") or not message.get("more_body")
            ):
                self.unanswered.pop(me, None)
            await send(message)

        heard = False

        async def hear_close() -> None:
            # The body read, uvicorn's receive answers only once the connection closed or the
            # response ended: closed while the answer had not gone (nginx cut it), a cut. The
            # app may not hear it: uvicorn drops what it sends after.
            nonlocal heard
            await receive()
            heard = True
            if self.unanswered.pop(me, None) is not None:
                await self.redis.run(["INCR", f"cut:{tag}"])

        hearing = asyncio.create_task(hear_close())
        try:
            await self.app(scope, replay, watch)
        finally:
            # A close that ended the app was heard first: its count goes on.
            await asyncio.sleep(0)
            if not heard:
                hearing.cancel()
            self.unanswered.pop(me, None)
            await asyncio.gather(hearing, return_exceptions=True)


class DrainingServer(uvicorn.Server):
    """uvicorn whose shutdown closes every connection at once and lets the calls running end.

    A shutdown stops accepting, names the runs in flight (``drained:<tag>``) and the calls whose
    answer had not gone (``cut:<tag>``), closes every open connection (their clients come back
    elsewhere), and waits until no POST is in flight and no run is left (a keyed call's until
    the guard stored its answer): the lifespan's shutdown, after, would cancel them. sse_starlette
    is told not to end SSE responses at SIGTERM by itself (the calls' runs must not hear it);
    it ends the streams left (GET streams) when uvicorn's own shutdown begins."""

    def __init__(self, config: uvicorn.Config, in_flight: InFlight) -> None:
        from sse_starlette.sse import AppStatus

        AppStatus.disable_automatic_graceful_drain()
        super().__init__(config)
        self.in_flight = in_flight

    async def shutdown(self, sockets: Any = None) -> None:
        from sse_starlette.sse import AppStatus

        for server in self.servers:
            server.close()
        redis = self.in_flight.redis
        for tag in list(RUNNING):
            await redis.run(["INCR", f"drained:{tag}"])
        # Counted here, not again when their connection closes.
        unanswered = list(self.in_flight.unanswered.values())
        self.in_flight.unanswered.clear()
        for tag in unanswered:
            await redis.run(["INCR", f"cut:{tag}"])
        for connection in list(self.server_state.connections):
            connection.transport.close()

        async def ended() -> None:
            await self.in_flight.idle.wait()
            while RUNNING:
                await asyncio.sleep(0.01)

        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(ended(), DRAIN_S)
        AppStatus.should_exit = True
        await super().shutdown(sockets)


class OrderedEventStore:
    """Events in insertion order, ids counting up (the SDK ships none in the package)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, Any]] = []
        self.next = 1

    async def store_event(self, stream_id: str, message: Any) -> str:
        event_id = str(self.next)
        self.next += 1
        self.events.append((event_id, stream_id, message))
        return event_id

    async def replay_events_after(self, last_event_id: str, send_callback: Any) -> str | None:
        from mcp.server.streamable_http import EventMessage

        found = [i for i, e in enumerate(self.events) if e[0] == last_event_id]
        if not found:
            return None
        stream = self.events[found[0]][1]
        for event_id, stream_id, message in self.events[found[0] + 1 :]:
            if stream_id == stream and message is not None:
                await send_callback(EventMessage(message, event_id))
        return stream


def fastmcp_app(redis: Redis) -> Any:
    from mcp.server.fastmcp import FastMCP
    from mcp.server.streamable_http import EventStore

    EventStore.register(OrderedEventStore)
    mcp = FastMCP(
        "replica", event_store=OrderedEventStore(), log_level="WARNING"  # type: ignore[arg-type]
    )

    @mcp.tool(description="Applies one side effect for the tag, then waits delay_ms")
    async def bump(tag: str, delay_ms: int = 0) -> str:
        return await effect(redis, tag, delay_ms)

    @mcp.tool(description="Returns its text")
    async def echo(text: str) -> str:
        return text

    return mcp.streamable_http_app()


def lowlevel_app(redis: Redis) -> Any:
    import mcp.types as types
    from mcp.server.lowlevel import Server
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
    from starlette.applications import Starlette
    from starlette.routing import Route

    server: Server[Any, Any] = Server("replica")

    @server.list_tools()  # type: ignore[no-untyped-call, untyped-decorator]
    async def list_tools() -> list[types.Tool]:
        return [
            types.Tool(
                name="bump",
                description="Applies one side effect for the tag, then waits delay_ms",
                inputSchema={
                    "type": "object",
                    "properties": {"tag": {"type": "string"}, "delay_ms": {"type": "integer"}},
                    "required": ["tag"],
                },
            ),
            types.Tool(
                name="echo",
                description="Returns its text",
                inputSchema={"type": "object", "properties": {"text": {"type": "string"}}},
            ),
        ]

    @server.call_tool()  # type: ignore[untyped-decorator]
    async def call_tool(name: str, arguments: dict[str, Any]) -> list[types.TextContent]:
        if name == "echo":
            return [types.TextContent(type="text", text=str(arguments.get("text", "")))]
        text = await effect(redis, arguments["tag"], int(arguments.get("delay_ms", 0)))
        return [types.TextContent(type="text", text=text)]

    manager = StreamableHTTPSessionManager(app=server, json_response=True)

    class Endpoint:
        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            await manager.handle_request(scope, receive, send)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        async with manager.run():
            yield

    return Starlette(routes=[Route("/mcp", endpoint=Endpoint())], lifespan=lifespan)


async def effect(redis: Redis, tag: str, delay_ms: int) -> str:
    RUNNING.append(tag)
    try:
        replies = await redis.run(
            ["INCR", f"effects:{tag}"], ["SET", f"ran:{tag}", str(os.getpid())]
        )
        n = int(replies[0][1:].strip())
        if delay_ms > 0:
            await asyncio.sleep(delay_ms / 1000)
        # The run finished (its answer is about to go): a call that died mid-run never gets
        # here.
        await redis.run(["INCR", f"done:{tag}"])
        return f"{tag}:{n}"
    finally:
        RUNNING.remove(tag)


def name_sessions(prefix: str) -> None:
    """Session ids start with ``prefix``: nginx pins a session to the replica that holds it
    (the ``mcp`` package keeps sessions in process memory), as a sticky balancer would."""
    import uuid

    import mcp.server.streamable_http_manager as manager

    class Named:
        def __init__(self) -> None:
            self.hex = prefix + uuid.uuid4().hex

    manager.uuid4 = Named  # type: ignore[assignment]


def main() -> None:
    args = parse()
    if args.session_prefix:
        name_sessions(args.session_prefix)
    redis = Redis(args.redis)
    app = fastmcp_app(redis) if args.kind == "fastmcp" else lowlevel_app(redis)
    if args.guard:
        from mcp_resume.server import ResumeSafetyMiddleware

        app = ResumeSafetyMiddleware(
            app,
            store=args.redis if args.store == "redis" else "memory",
            instance_id=f"replica-{args.port}-{os.getpid()}",
            lease=args.lease,
        )
    in_flight = InFlight(app, redis)
    config = uvicorn.Config(
        in_flight, host="127.0.0.1", port=args.port, log_level="warning", lifespan="on"
    )
    server = DrainingServer(config, in_flight)

    def watch_stdin() -> None:
        sys.stdin.read()
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch_stdin, daemon=True).start()

    async def serve() -> None:
        task = asyncio.create_task(server.serve())
        while not server.started:
            if task.done():
                await task
                return
            await asyncio.sleep(0.01)
        print(f"http://127.0.0.1:{args.port}/mcp", flush=True)
        await task

    asyncio.run(serve())


if __name__ == "__main__":
    main()
