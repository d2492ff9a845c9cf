"""Keep the ``mcp`` package's ``ClientSession``, get mcp-resume's recovery.

``streamablehttp_client`` has the shape of ``mcp.client.streamable_http.streamablehttp_client``:
an async context manager yielding ``(read_stream, write_stream, get_session_id)`` that carry
``SessionMessage``s. Underneath runs the Rust SDK's message bridge: an mcp-resume session with
every recovery rule of both eras. Switching is one import line::

    from mcp import ClientSession
    from mcp_resume.bridge import streamablehttp_client  # was: mcp.client.streamable_http

    async with streamablehttp_client(url) as (read, write, _):
        async with ClientSession(read, write) as session:
            await session.initialize()
            tools = await session.list_tools()

What the bridge promises holds: resumes, re-initializations and re-sends are invisible (a
re-initialization that changes the server's capabilities arrives as the matching
``notifications/*/list_changed``); what JSON-RPC cannot say (an unknown outcome, another
context, a lost session) raises ``McpError`` with ``error.data["kind"]`` naming it, never a
silent success; a ``tools/call`` whose ``meta`` holds ``IDEMPOTENCY_META_KEY`` is keyed;
server requests (sampling, elicitation, roots) reach the session's own callbacks; and a
``ClientSession`` of ``mcp`` 1.x, which speaks only the legacy lifecycle, reaches a
2026-07-28-only server (era translation).

Requires ``mcp`` (the ``mcp_resume[mcp]`` extra: 1.x from 1.24, the line the frameworks
pin, tested with 1.30; and 2.x, whose ``ClientSession`` takes the same streams, tried with
2.3) and the asyncio backend of anyio (the binding's awaitables are asyncio futures).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from ._enums import Era, ResendPolicy
from ._mcp_resume import RawBridge, RawClient, ReconnectPolicy

if TYPE_CHECKING:
    from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
    from mcp.shared.message import SessionMessage

__all__ = ["IDEMPOTENCY_META_KEY", "streamable_http_client", "streamablehttp_client"]

#: The ``params._meta`` member whose string value makes a ``tools/call`` keyed: the client may
#: re-send it after an interruption when the server deduplicates by key.
IDEMPOTENCY_META_KEY = "io.github.mcp-resume/idempotency-key"


def _seconds(value: float | timedelta) -> float:
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


@asynccontextmanager
async def streamablehttp_client(
    url: str,
    headers: Mapping[str, str] | None = None,
    timeout: float | timedelta = 30,
    sse_read_timeout: float | timedelta = 300,
    terminate_on_close: bool = True,
    *,
    era: Era | None = None,
    bearer_token: str | None = None,
    reconnect: ReconnectPolicy | None = None,
    resend_policy: ResendPolicy | None = None,
    trust_tool_annotations: bool = False,
    capacity: int | None = None,
    jitter_seed: int | None = None,
) -> AsyncIterator[
    tuple[
        MemoryObjectReceiveStream[SessionMessage | Exception],
        MemoryObjectSendStream[SessionMessage],
        Callable[[], str | None],
    ]
]:
    """The streams of a ``ClientSession`` over an mcp-resume session to ``url``.

    Args:
        url: the MCP endpoint.
        headers: extra headers on every request (resumes and DELETE included).
        timeout: the TCP connect timeout, in seconds (as ``mcp``'s HTTP timeout).
        sse_read_timeout: how long one request may wait for its answer, in seconds, across
            every resume and re-send (the client's call timeout). A ``ClientSession``'s own
            ``read_timeout_seconds`` still applies on top.
        terminate_on_close: DELETE the session on exit (the default, as ``mcp``'s).
        era: ``Era.AUTO`` (default: probe with ``server/discover``, fall back to
            ``initialize``), ``Era.LEGACY`` or ``Era.MODERN``.
        bearer_token: sent as ``Authorization: Bearer <token>``.
        reconnect: backoff and caps (``ReconnectPolicy``).
        resend_policy: when keyed calls may be re-sent.
        trust_tool_annotations: let ``readOnlyHint``/``idempotentHint`` from the server's last
            ``tools/list`` make unkeyed calls safe to re-send (off by default: the
            specification says annotations from untrusted servers must not drive decisions).
        capacity: the bridge's bound in each direction, in messages (default 64).
        jitter_seed: fixes the reconnect jitter (reproducible tests).
    """
    import anyio
    from mcp.shared.message import SessionMessage
    from mcp.types import JSONRPCMessage
    from pydantic import TypeAdapter, ValidationError

    # `mcp` 1.x models a message as a RootModel, 2.x as a union: an adapter reads both.
    messages: TypeAdapter[Any] = TypeAdapter(JSONRPCMessage)

    options = RawClient(
        url,
        headers=dict(headers) if headers else None,
        connect_timeout=_seconds(timeout),
        call_timeout=_seconds(sse_read_timeout),
        era=era,
        bearer_token=bearer_token,
        reconnect=reconnect,
        resend_policy=resend_policy,
        jitter_seed=jitter_seed,
    )
    bridge = RawBridge(options, trust_tool_annotations=trust_tool_annotations, capacity=capacity)
    read_send, read_recv = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_send, write_recv = anyio.create_memory_object_stream[SessionMessage](0)

    async def server_to_session() -> None:
        async with read_send:
            while True:
                message: Any = await bridge.recv()
                if message is None:
                    return
                try:
                    parsed = messages.validate_python(message)
                except ValidationError as error:
                    # As `mcp`'s own transport does: the session sees the error, not a hang.
                    await read_send.send(error)
                    continue
                await read_send.send(SessionMessage(parsed))

    async def session_to_server() -> None:
        async with write_recv:
            async for session_message in write_recv:
                await bridge.send(
                    session_message.message.model_dump(
                        by_alias=True, mode="json", exclude_none=True
                    )
                )

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(server_to_session)
        tasks.start_soon(session_to_server)
        try:
            yield read_recv, write_send, bridge.session_id
        finally:
            if terminate_on_close:
                await bridge.close()
            tasks.cancel_scope.cancel()
            await write_send.aclose()
            await read_recv.aclose()


def streamable_http_client(
    url: str, *, terminate_on_close: bool = True, **options: Any
) -> AbstractAsyncContextManager[
    tuple[
        MemoryObjectReceiveStream[SessionMessage | Exception],
        MemoryObjectSendStream[SessionMessage],
        Callable[[], str | None],
    ]
]:
    """The newer name ``mcp`` 1.2x gives its transport (``streamable_http_client``), with
    the defaults of ``streamablehttp_client`` and its keyword options (``era``,
    ``bearer_token``, ``reconnect``, …). ``mcp``'s ``http_client`` argument has no
    counterpart: the HTTP stack is the Rust SDK's."""
    return streamablehttp_client(url, terminate_on_close=terminate_on_close, **options)
