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
silent success (a ``tools/call`` answered with a result the session cannot read raises the
``protocol`` kind marked ``mayHaveRun``: the server answered, so the call ran); a
``tools/call`` whose ``meta`` holds ``IDEMPOTENCY_META_KEY`` is keyed; server requests
(sampling, elicitation, roots) reach the session's own callbacks; and a ``ClientSession`` of
``mcp`` 1.x, which speaks only the legacy lifecycle, reaches a 2026-07-28-only server (era
translation).

Requires ``mcp`` (the ``mcp_resume[mcp]`` extra: 1.x from 1.24, the line the frameworks
pin, tested with 1.30; and 2.x, whose ``ClientSession`` takes the same streams, tried with
2.3) and the asyncio backend of anyio (the binding's awaitables are asyncio futures).
"""

from __future__ import annotations

import inspect
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from ._enums import Era, ResendPolicy
from ._errors import ClosedError
from ._mcp_resume import RawBridge, RawClient, ReconnectPolicy

logger = logging.getLogger(__name__)

if TYPE_CHECKING:
    from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
    from mcp.shared.message import SessionMessage

__all__ = [
    "IDEMPOTENCY_META_KEY",
    "OUTCOME_META_KEY",
    "check_options",
    "interrupted_message",
    "streamable_http_client",
    "streamablehttp_client",
]

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
    sse_read_timeout: float | timedelta | None = None,
    terminate_on_close: bool = True,
    *,
    call_timeout: float | timedelta | None = None,
    era: Era | None = None,
    bearer_token: str | None = None,
    reconnect: ReconnectPolicy | None = None,
    resend_policy: ResendPolicy | None = None,
    trust_tool_annotations: bool = False,
    capacity: int | None = None,
    jitter_seed: int | None = None,
    interrupted_as_result: bool = False,
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
            every resume and re-send (the client's call timeout; default 300). A
            ``ClientSession``'s own ``read_timeout_seconds`` still applies on top. The
            deadline ends the request at the bridge; the session learns of it only through
            its receive loop, which a 1.x ``ClientSession`` blocks while its sampling,
            elicitation or roots callback runs: bound those callbacks yourself there.
        call_timeout: the same deadline under the name it has everywhere else in mcp-resume;
            giving both is an error.
        terminate_on_close: DELETE the session on exit (the default, as ``mcp``'s). As
            there, a DELETE that fails is logged as a warning, never raised: it would hide
            how the block ended (a call's own error among them).
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
        interrupted_as_result: a ``tools/call`` that may have run (``outcome_unknown``,
            ``context_mismatch``, or an error marked ``mayHaveRun``, as a call whose deadline
            passed while the server ran it or one answered with a result the session cannot
            read) completes as an ``isError`` result whose text says so and whose
            ``_meta["io.github.mcp-resume/outcome"]`` is ``{"kind", "message"}``, instead of
            raising ``McpError``: the form in which an agent framework's automatic retry sees
            a completed call and does not run it again (the framework modules turn it on where
            their framework retries exceptions). Off by default.
    """
    import anyio
    import anyio.abc
    from mcp.shared.message import SessionMessage
    from mcp.types import JSONRPCMessage
    from pydantic import TypeAdapter, ValidationError

    if call_timeout is not None and sse_read_timeout is not None:
        raise TypeError("give the call deadline once: call_timeout or sse_read_timeout")
    deadline = call_timeout if call_timeout is not None else sse_read_timeout

    # `mcp` 1.x models a message as a RootModel, 2.x as a union: an adapter reads both.
    messages: TypeAdapter[Any] = TypeAdapter(JSONRPCMessage)
    call_result_problem = _call_result_reader()

    options = RawClient(
        url,
        headers=dict(headers) if headers else None,
        connect_timeout=_seconds(timeout),
        call_timeout=_seconds(300 if deadline is None else deadline),
        era=era,
        bearer_token=bearer_token,
        reconnect=reconnect,
        resend_policy=resend_policy,
        jitter_seed=jitter_seed,
    )
    bridge = RawBridge(options, trust_tool_annotations=trust_tool_annotations, capacity=capacity)
    read_send, read_recv = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_send, write_recv = anyio.create_memory_object_stream[SessionMessage](0)
    # Each `tools/call` still unanswered, by id: its tool, and whether its answer is one the
    # session reads as a `CallToolResult` (not a task-augmented call's, whose answer is a
    # task). Entries leave with their answer, so this holds no more than the calls in flight.
    calls: dict[Any, tuple[str, bool]] = {}

    async def server_to_session() -> None:
        async with read_send:
            while True:
                message: Any = await bridge.recv()
                if message is None:
                    return
                tool = None
                if calls and isinstance(message, dict) and "method" not in message:
                    call = calls.pop(message.get("id"), None)
                    if call is not None:
                        tool, read_as_result = call
                        if read_as_result:
                            message = _unreadable_call_result(message, call_result_problem)
                        if interrupted_as_result and "error" in message:
                            message = _as_result(message, tool)
                try:
                    parsed = messages.validate_python(message)
                except ValidationError as error:
                    # An answer the session cannot read must still end its request (the
                    # session's receive loop only logs an error it is given): it becomes the
                    # bridge's protocol error under the same id (with `interrupted_as_result`,
                    # a call's that says it may have run completes as the other interruptions).
                    answer = _unreadable_answer(message)
                    if answer is not None and tool is not None and interrupted_as_result:
                        answer = _as_result(answer, tool)
                    try:
                        parsed = messages.validate_python(answer) if answer else None
                    except ValidationError:
                        parsed = None
                    if parsed is None:
                        # Anything else, as `mcp`'s own transport does: the session sees the
                        # error.
                        await read_send.send(error)
                        continue
                await read_send.send(SessionMessage(parsed))

    # Set once the block ends: a send the bridge's closing ends is no error of the session.
    closing = False

    async def taken(pending: Awaitable[None]) -> None:
        try:
            await pending
        except ClosedError:
            if not closing:
                raise

    async def session_to_server(tasks: anyio.abc.TaskGroup) -> None:
        # A request may wait for a capacity permit, so it waits in a task of its own: the
        # session's answers to server requests (which the calls in flight may be waiting
        # for), its notifications and its cancels go on at once. The bridge knows a request
        # from the moment it is handed over, so a cancel that follows reaches it, ending the
        # wait of one still waiting for its place (never sent then).
        async with write_recv:
            async for session_message in write_recv:
                message = session_message.message.model_dump(
                    by_alias=True, mode="json", exclude_none=True
                )
                method = message.get("method")
                params = message.get("params") or {}
                if method == "tools/call":
                    calls[message.get("id")] = (str(params.get("name")), "task" not in params)
                elif method == "notifications/cancelled":
                    calls.pop(params.get("requestId"), None)
                if method is not None and "id" in message:
                    # Handed to the bridge here, in the session's order; awaited apart.
                    tasks.start_soon(taken, bridge.send(message))
                else:
                    await taken(bridge.send(message))

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(server_to_session)
        tasks.start_soon(session_to_server, tasks)
        try:
            yield read_recv, write_send, bridge.session_id
        finally:
            closing = True
            if terminate_on_close:
                try:
                    await bridge.close()
                except Exception as error:  # noqa: BLE001 - logged, as `mcp`'s transport does
                    logger.warning("session termination failed: %s", error)
            tasks.cancel_scope.cancel()
            await write_send.aclose()
            await read_recv.aclose()


#: The ``_meta`` member of the result ``interrupted_as_result`` makes of a call that may have
#: run: ``{"kind": "outcome_unknown" | "context_mismatch" | "timeout" | …, "message": ...}``.
OUTCOME_META_KEY = "io.github.mcp-resume/outcome"
_MAY_HAVE_RUN = frozenset({"outcome_unknown", "context_mismatch"})


def may_have_run_kind(data: Any) -> str | None:
    """The bridge's error kind if the error ``data`` is of a call that may have run on the
    server (``outcome_unknown``, ``context_mismatch``, or any kind with ``mayHaveRun``, as a
    timed-out call that had been sent; ``"rpc"`` for a server's own error marked so, as a
    task's poll refused while the task may run on), else ``None``."""
    if not isinstance(data, dict):
        return None
    kind = data.get("kind")
    marked = data.get("mayHaveRun") is True
    if not isinstance(kind, str):
        return "rpc" if marked else None
    return kind if kind in _MAY_HAVE_RUN or marked else None


def interrupted_message(kind: str, tool: str) -> str:
    """What the model or the application reads of a call that may have run."""
    if kind == "context_mismatch":
        return (
            f"The call to tool {tool!r} ran on the server under another session context than "
            "the one negotiated, so its answer was discarded (mcp-resume: context_mismatch). "
            "It was not retried: it already ran. Check its effects before calling it again."
        )
    what = "was interrupted" if kind == "outcome_unknown" else "did not complete"
    return (
        f"The call to tool {tool!r} {what} and may or may not have run on the server "
        f"(mcp-resume: {kind}). It was not retried automatically. Check whether its "
        "effect happened before calling it again."
    )


def _as_result(response: dict[str, Any], tool: str) -> dict[str, Any]:
    """The bridge's error answer to a call that may have run, as an ``isError`` result;
    any other answer unchanged."""
    kind = may_have_run_kind((response.get("error") or {}).get("data"))
    if kind is None:
        return response
    message = interrupted_message(kind, tool)
    return {
        "jsonrpc": "2.0",
        "id": response.get("id"),
        "result": {
            "content": [{"type": "text", "text": message}],
            "isError": True,
            "_meta": {OUTCOME_META_KEY: {"kind": kind, "message": message}},
        },
    }


#: The JSON-RPC error code of the bridge's protocol error (``mcp_resume::bridge::codes``).
_PROTOCOL = -32054
_JSON_TYPES = {type(None): "null", bool: "a boolean", int: "a number", float: "a number",
               str: "a string", list: "an array"}


def _call_result_reader() -> Callable[[dict[str, Any]], str | None]:
    """What is wrong with the result of a ``tools/call`` not asked as a task (``None``:
    nothing): ``mcp``'s ``CallToolResult`` only, in either major. The Rust bridge completes a
    multi-round call and a task itself, so any other answer (``mcp`` 2.x's
    ``InputRequiredResult``, a task, an extension's tagged result) is not the call's outcome,
    and the session would raise an error of its own for it that says nothing of the call
    having run, or (a 1.x session, or a 2.x one reading an unclaimed tag) take it for one."""
    from mcp import types
    from pydantic import TypeAdapter, ValidationError

    results: TypeAdapter[Any] = TypeAdapter(types.CallToolResult)

    def problem(result: dict[str, Any]) -> str | None:
        # `CallToolResult` in 2.x takes any tag, and a 2.x session routes a claimed one to
        # its extension: only the final result's tag, or none, is the call's outcome.
        tag = result.get("resultType", "complete")
        if tag != "complete":
            return f"resultType: {json.dumps(tag)} is not a complete call's"
        try:
            results.validate_python(result)
        except ValidationError as error:
            first = error.errors()[0]
            where = ".".join(str(part) for part in first["loc"]) or "result"
            return f"{where}: {first['msg']}"
        return None

    return problem


def _unreadable_call_result(
    message: dict[str, Any], problem: Callable[[dict[str, Any]], str | None]
) -> dict[str, Any]:
    """A ``tools/call``'s answer whose result is an object the session cannot read as one
    (``problem`` says why, from ``_call_result_reader``), as the bridge's protocol error marked
    ``mayHaveRun``; any other answer unchanged. The session would otherwise raise its own
    validation error, which does not say that the call ran, and a framework's retry would
    run it again."""
    result = message.get("result")
    if not isinstance(result, dict) or message.get("id") is None:
        # Not an object: the message itself is unreadable, answered as such further on.
        return message
    wrong = problem(result)
    if wrong is None:
        return message
    reason = f"its result is not a tools/call result ({wrong})"
    return _unreadable_answer(message, reason) or message


def _unreadable_answer(message: Any, reason: str | None = None) -> dict[str, Any] | None:
    """For a server answer (a result or an error) the session's model cannot read: the
    bridge's protocol error with the same id, as the Rust skins answer it, saying ``reason``
    when given; ``None`` for any other message. A result says ``mayHaveRun``: the server
    answered, so the request ran; an error keeps the ``mayHaveRun`` its data had."""
    if not isinstance(message, dict) or "method" in message or message.get("id") is None:
        return None
    data: dict[str, Any] = {"kind": "protocol"}
    if "result" in message:
        data["mayHaveRun"] = True
    else:
        error = message.get("error")
        error_data = error.get("data") if isinstance(error, dict) else None
        if isinstance(error_data, dict) and error_data.get("mayHaveRun") is True:
            data["mayHaveRun"] = True
    if reason is None and "result" in message and not isinstance(message["result"], dict):
        what = _JSON_TYPES.get(type(message["result"]))
        reason = f"its result is {what}, not an object" if what else "its result is not an object"
    elif reason is None:
        reason = "it is not a JSON-RPC result or error"
    return {
        "jsonrpc": "2.0",
        "id": message["id"],
        "error": {
            "code": _PROTOCOL,
            "message": f"the server's answer could not be read as mcp's model: {reason}",
            "data": data,
        },
    }


#: Every keyword ``streamablehttp_client`` takes.
_OPTIONS = frozenset(
    name
    for name, p in inspect.signature(streamablehttp_client).parameters.items()
    if name != "url" and p.kind is not inspect.Parameter.VAR_KEYWORD
)


def check_options(options: Mapping[str, Any], where: str) -> None:
    """Raises ``TypeError`` naming any of ``options`` that ``streamablehttp_client`` does not
    take, so a misspelt or unsupported option fails where it is given, not at connect time."""
    unknown = sorted(set(options) - _OPTIONS)
    if unknown:
        raise TypeError(
            f"{where}: unknown option(s) {', '.join(unknown)}; the bridge takes "
            f"{', '.join(sorted(_OPTIONS))}"
        )


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
