"""Resume safety for Python MCP servers: an ASGI middleware over ``mcp-resume-server``'s guard.

    from mcp.server.fastmcp import FastMCP
    from mcp_resume.server import ResumeSafetyMiddleware

    mcp = FastMCP("demo")
    app = ResumeSafetyMiddleware(mcp.streamable_http_app(), store="redis://127.0.0.1:6379")

The middleware is a skin: every rule (the advertisement, capability hashes, sequenced event
ids, resume authorization, idempotency keys), the store steps and the rewriting of responses
are the Rust guard's, the same one the tower ``ResumeSafetyLayer`` drives. It

- advertises ``capabilities.experimental.resumeSafety`` in ``initialize`` results, naming
  only what it enforces;
- puts ``Mcp-Capability-Hash`` on every response of a session and renumbers SSE event ids
  ``<stream>-<seq>``;
- lets a resume (``GET`` with ``Last-Event-ID``) through only on the instance that opened the
  stream and only if the inner server's replay proves it; otherwise ``404`` with
  ``Mcp-Resume-Rejected`` and the session forgotten (nothing to forget for
  ``unknown_session``); a replay longer than the body bound is checked as it passes, and a
  divergence then cuts the stream (``ResponseAborted``);
- claims keyed ``tools/call`` requests (an idempotency key in ``params._meta`` or the
  ``Idempotency-Key`` header) atomically across instances: the same call again gets the
  stored answer, a call whose first run is still going ``IDEMPOTENCY_KEY_IN_USE``, one whose
  instance died mid-run or whose run ended without an answer to store
  ``IDEMPOTENCY_OUTCOME_UNKNOWN``, for as long as the store keeps the key (24 h in memory,
  7 days on Redis).

It never blocks the event loop (the store is reached on the binding's runtime), streams stay
streams (every chunk is forwarded as it comes), and what it does not guard (other scopes,
other methods, bodies over ``max_body``) passes untouched. A keyed call runs to its end even
when its client leaves, so its answer is stored for the client's re-send.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from ._mcp_resume import RawGuard, RawOutbound, RawStep

__all__ = ["ResumeSafetyMiddleware", "ResponseAborted"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_Sent = tuple[Any, bytes, "str | None"]


class ResponseAborted(Exception):
    """Raised to the server once the guard has cut a response short: the inner server's
    replay of a resumed stream diverged from what was sent, or its response failed after
    its head. The server then drops the connection, so the client cannot take what would
    follow as the stream's continuation. A cut while the app still sends (a diverged replay)
    is raised into the app's ``send`` at once, and reaches the server as the app unwinds:
    the connection is dropped then, not when the app would have ended its stream."""


class ResumeSafetyMiddleware:
    """Wraps an ASGI app serving MCP's Streamable HTTP transport (``FastMCP(...)
    .streamable_http_app()``, the ``mcp`` package's ``StreamableHTTPSessionManager`` in a
    Starlette app) in the resume-safety guard.

    Args:
        app: the ASGI app.
        store: where what instances share is kept: ``"memory"`` (the default: one process)
            or a ``redis://`` URL (several replicas; connected here, so a Redis that cannot
            be reached raises ``ConnectionError`` now).
        instance_id: the name this process writes as owner of sessions and claims (1 to
            128 visible ASCII characters). Default: a random one per middleware, which is
            right: each replica, and each restart of it, must have its own.
        max_body: request bodies, JSON response bodies and SSE events longer than this (in
            bytes) pass untouched (a keyed call that long is refused with ``413``).
            Default: 4 MiB.
        lease: seconds a keyed call's claim holds without renewal (renewed every third of
            it while the call runs); a dead instance's keys read as "outcome unknown" this
            long after its last renewal. Default: 10.
        resume_checks: capability hashes, sequenced event ids and resume authorization.
            Default: on. Off, resumes pass unchecked and only idempotency is advertised.
        idempotency: claim and deduplicate keyed ``tools/call`` requests. Default: on.
        retry_after: the ``Retry-After`` (seconds) of retryable refusals (the store cannot
            be reached). Default: 1.
        key_scope_header: a request header naming the client (set by what authenticated it
            in front of the middleware): idempotency keys are then that client's own, and a
            keyed call without the header is refused. Default: none, one namespace of keys
            per store (right when clients draw their keys at random).
        seed: seeds the stream ids (tests that want the same ids every run). Default:
            random.

    Every setting and its default are the Rust guard's (``GuardBuilder``); an invalid one
    raises ``mcp_resume.InvalidConfigError``.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        store: str = "memory",
        instance_id: str | None = None,
        max_body: int | None = None,
        lease: float | None = None,
        resume_checks: bool | None = None,
        idempotency: bool | None = None,
        retry_after: float | None = None,
        key_scope_header: str | None = None,
        seed: int | None = None,
    ) -> None:
        self.app = app
        self._guard = RawGuard(
            store=store,
            instance_id=instance_id,
            max_body=max_body,
            lease=lease,
            resume_checks=resume_checks,
            idempotency=idempotency,
            retry_after=retry_after,
            key_scope_header=key_scope_header,
            seed=seed,
        )

    @property
    def instance_id(self) -> str:
        """The name this process writes as owner of sessions and claims."""
        return self._guard.instance_id

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        step = self._guard.begin(scope["method"], scope["headers"])
        if not isinstance(step, RawStep):
            step = await step
        if step.kind == "read_body":
            read = await _read_body(receive, step.limit)
            if read is None:
                return  # the client left while sending its request: nothing to forward
            body, messages = read
            receive = _replaying(messages, receive)
            step = step.body(body)
            if not isinstance(step, RawStep):
                step = await step
        kind = step.kind
        if kind == "pass":
            await self.app(scope, receive, send)
        elif kind == "answer":
            answer = step.take_answer()
            assert answer is not None
            await _Response(send).emit(answer)
        else:
            out = step.take_outbound()
            assert out is not None
            last_event_id = step.last_event_id
            if last_event_id is not None:
                scope = dict(scope)
                headers = [(n, v) for n, v in scope["headers"] if n.lower() != b"last-event-id"]
                headers.append((b"last-event-id", last_event_id))
                scope["headers"] = headers
            await _forward(self.app, scope, receive, send, out)


async def _read_body(receive: Receive, limit: int) -> tuple[bytes, list[Message]] | None:
    """The request body (when longer than ``limit``, what was read of it, for the guard to
    look through for a key) and the messages read, to give the app again; ``None`` when the
    client left first."""
    messages: list[Message] = []
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        messages.append(message)
        chunk = message.get("body", b"")
        size += len(chunk)
        chunks.append(chunk)
        if size > limit:
            return b"".join(chunks), messages
        if not message.get("more_body", False):
            body = b"".join(chunks)
            return body, [{"type": "http.request", "body": body, "more_body": False}]


def _replaying(messages: list[Message], receive: Receive) -> Receive:
    """``receive`` giving ``messages`` first."""
    pending = list(messages)

    async def replay() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replay


class _Response:
    """The client's side of one response: what the guard says to send, in order."""

    def __init__(self, send: Send) -> None:
        self.send = send
        self.started = False
        self.finished = False
        self.aborted = False
        #: What the server's ``send`` raised once the client left (ASGI: an ``OSError``);
        #: nothing more is sent to it.
        self.gone: OSError | None = None

    async def put(self, message: Message) -> None:
        """Sends ``message`` to the client, unless it is gone."""
        if self.gone is not None:
            return
        try:
            await self.send(message)
        except OSError as e:
            self.gone = e

    async def emit(self, sent: _Sent, start: Message | None = None) -> None:
        head, body, end = sent
        if self.finished:
            return
        if head is not None:
            status, headers = head
            message: Message = dict(start) if start is not None else {}
            message.update(type="http.response.start", status=status, headers=headers)
            await self.put(message)
            self.started = True
        if end == "complete":
            self.finished = True
            await self.put({"type": "http.response.body", "body": body, "more_body": False})
            return
        if body:
            await self.put({"type": "http.response.body", "body": body, "more_body": True})
        if end == "abort":
            self.finished = True
            self.aborted = True


async def _ready(result: Any) -> _Sent:
    if isinstance(result, tuple):
        return result
    sent: _Sent = await result
    return sent


async def _forward(app: ASGIApp, scope: Scope, receive: Receive, send: Send, out: RawOutbound) -> None:
    """Runs the app with its response pushed through ``out``."""
    client = _Response(send)
    left = False  # the client left (``http.disconnect``)
    from_client = receive

    async def watched() -> Message:
        nonlocal left
        message = await from_client()
        if message["type"] == "http.disconnect":
            left = True
        return message

    receive = watched
    keyed = out.keyed
    if keyed:
        # A keyed call runs to its end whoever waits for it: the app never hears that its
        # client left (its answer is stored for the client's re-send), neither from
        # ``receive`` nor from a ``send`` the server made raise: the outbound is fed on.
        receive = _until_complete(receive)
    ended = False
    # What the app's sends raise once an unkeyed call's response is over while the app still
    # sends: the server's ``send`` raised (its client left), or the guard cut the response
    # short (raised at once: the server drops the connection as the app unwinds, however
    # long the app would have kept the stream open). The outbound was let go without an end,
    # and nothing more crosses it.
    detached: BaseException | None = None

    async def guarded_send(message: Message) -> None:
        nonlocal detached
        if detached is None:
            try:
                await through_guard(message)
            finally:
                if not keyed and (client.gone is not None or client.aborted):
                    # As when the client left first (below): an end would tell the guard the
                    # app failed, and the client's resume would be refused.
                    detached = client.gone if client.gone is not None else _aborted()
                    out.close()
        if detached is not None:
            raise detached

    async def through_guard(message: Message) -> None:
        nonlocal ended
        kind = message["type"]
        if kind == "http.response.start":
            sent = await _ready(out.head(message["status"], message.get("headers", [])))
            await client.emit(sent, message)
        elif kind == "http.response.body":
            body = message.get("body", b"")
            more = message.get("more_body", False)
            if out.untouched:
                if not client.finished:
                    await client.put(message)
                    client.finished = not more
                ended = not more
                return
            if body:
                await client.emit(await _ready(out.body(body)))
            if not more:
                ended = True
                await client.emit(await _ready(out.end(True)))
        elif not client.finished:
            await client.put(message)

    try:
        try:
            await app(scope, receive, guarded_send)
        except BaseException as e:
            if not ended and detached is None:
                await client.emit(await _ready(out.end(False)))
            if isinstance(detached, ResponseAborted) and isinstance(e, Exception) and e is not detached:
                # The app unwound from the cut raised into it (wrapped in a group, or an
                # error of its own on the way out): the server is told of the cut.
                raise _aborted() from e
            raise
        if not ended and not left and detached is None:
            # The app returned without ending its response, its client still there: what it
            # sent is all there is.
            await client.emit(await _ready(out.end(False)))
        # Its client left first: the outbound is let go without an end (closed below). An
        # end would tell the guard the app failed, and the stream's requests would read as
        # lost: the client's resume, which the app can still serve, would be refused.
    finally:
        out.close()
    if client.aborted:
        raise _aborted()


def _aborted() -> ResponseAborted:
    return ResponseAborted("mcp_resume: the guard cut this response short (see ResponseAborted)")


def _until_complete(receive: Receive) -> Receive:
    """``receive`` for a keyed call: the request's own messages, then nothing until the app
    is done (it is cancelled with the app's own tasks)."""
    body_done = False

    async def guarded() -> Message:
        nonlocal body_done
        if not body_done:
            message = await receive()
            if message["type"] == "http.request" and message.get("more_body", False):
                return message
            if message["type"] == "http.request":
                body_done = True
                return message
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    return guarded
