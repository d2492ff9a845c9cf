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
cut, drain or kill after its effect), then counts its finish (``INCR done:<tag>``). ``echo {text}`` touches nothing (the
benchmark's call).

Prints ``http://127.0.0.1:PORT/mcp`` on its first stdout line once it listens. SIGTERM drains
it (no new connections, every call in flight answered, then the streams that never end by
themselves closed: ``DrainingServer``); SIGKILL is a crash; it exits when its stdin closes, so
a test that dies leaves no replica behind.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
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


#: How long a drain waits for the calls in flight before it ends their streams anyway.
DRAIN_S = 10.0


class InFlight:
    """Counts the POSTs being answered. It wraps the guard too, so a keyed call counts until
    the guard has stored its answer."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.count = 0
        self.idle = asyncio.Event()
        self.idle.set()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            return await self.app(scope, receive, send)
        self.count += 1
        self.idle.clear()
        try:
            await self.app(scope, receive, send)
        finally:
            self.count -= 1
            if self.count == 0:
                self.idle.set()


class DrainingServer(uvicorn.Server):
    """uvicorn whose graceful shutdown lets SSE answers finish too.

    sse_starlette, which streams the ``mcp`` server's SSE answers, ends every open SSE response
    within half a second of SIGTERM unless told not to: a call in flight then loses its answer
    although its run goes on to the end (under the guard an honest ``OutcomeUnknown``, but not
    what a rolling restart should do). Here sse_starlette is told not to, and a shutdown stops
    accepting, waits until no POST is in flight, and only then lets sse_starlette end the
    streams that never end by themselves (GET streams) before uvicorn's own shutdown."""

    def __init__(self, config: uvicorn.Config, in_flight: InFlight) -> None:
        from sse_starlette.sse import AppStatus

        AppStatus.disable_automatic_graceful_drain()
        super().__init__(config)
        self.in_flight = in_flight

    async def shutdown(self, sockets: Any = None) -> None:
        from sse_starlette.sse import AppStatus

        for server in self.servers:
            server.close()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.in_flight.idle.wait(), DRAIN_S)
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
    replies = await redis.run(["INCR", f"effects:{tag}"], ["SET", f"ran:{tag}", str(os.getpid())])
    n = int(replies[0][1:].strip())
    if delay_ms > 0:
        await asyncio.sleep(delay_ms / 1000)
    # The run finished (its answer is about to go): a call that died mid-run never gets here.
    await redis.run(["INCR", f"done:{tag}"])
    return f"{tag}:{n}"


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
    in_flight = InFlight(app)
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
