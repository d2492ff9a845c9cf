"""``Client``: the asyncio face of the Rust SDK's client.

Every method forwards to the extension; each network method is a coroutine function, so
``asyncio.run(client.connect())`` works and the awaitable belongs to the loop that awaits it.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from types import TracebackType
from typing import Any, TypeVar, Union

from ._enums import Era, ResendPolicy
from ._errors import McpResumeError
from ._mcp_resume import (
    CallToolResult,
    EraCache,
    EventStream,
    ExtensionStatus,
    InitializeResult,
    NotificationStream,
    RawClient,
    ReconnectPolicy,
    ServerRequest,
    Tool,
)

__all__ = ["Client", "ServerRequestHandler"]

ServerRequestHandler = Callable[[ServerRequest], Union[Awaitable[Any], Any]]
"""Answers a server-to-client request: returns (or resolves to) the JSON result, or raises
``RpcError`` to answer with that error. Any other exception is logged on the
``mcp_resume`` logger and answered as a JSON-RPC internal error."""

_Handler = TypeVar("_Handler", bound=ServerRequestHandler)


class Client:
    """A resume-aware MCP client over the Streamable HTTP transport.

    Construction checks the configuration (``InvalidConfigError``) and touches no network.
    ``async with Client(url) as client:`` connects on entry and closes on exit; otherwise the
    first call connects by itself.

    Every argument left at ``None`` takes the SDK's default:

    Args:
        url: the MCP endpoint, e.g. ``"http://127.0.0.1:8080/mcp"``.
        capabilities: client capabilities sent at ``initialize`` (a dict); default ``{}``.
        client_info: ``(name, version)`` sent as ``clientInfo``; default the SDK's.
        protocol_version: legacy protocol version offered at ``initialize``, e.g.
            ``"2025-06-18"``; default ``"2025-11-25"``.
        era: ``Era.AUTO`` (default: probe, then fall back), ``Era.LEGACY`` or ``Era.MODERN``.
        era_cache: where the era of each origin is remembered; default the process-wide one.
        bearer_token: sent as ``Authorization: Bearer <token>`` on every request.
        headers: extra headers on every request: a mapping, or ``(name, value)`` pairs to
            repeat a name. Protocol headers cannot be set this way.
        call_timeout: default deadline of a call in seconds, spanning every resume and
            re-send; default 60.
        connect_timeout: TCP connect timeout in seconds; default 10.
        reconnect: backoff and caps (``ReconnectPolicy``).
        resend_policy: when keyed calls may be re-sent; default
            ``ResendPolicy.SERVER_ADVERTISED``.
        max_event_size: largest SSE event accepted, in bytes; default 16 MiB.
        max_body_size: largest JSON body accepted, in bytes; default 16 MiB.
        open_listen_stream: open the standalone GET stream after ``initialize``; default
            ``True``.
        jitter_seed: fixes the reconnect jitter (reproducible tests).
        on_server_request: the handler of server-to-client requests (see
            ``Client.on_server_request``).

    Raises:
        InvalidConfigError: a bad URL, header, size, duration, era or policy.
    """

    __slots__ = ("_raw", "__weakref__")

    def __init__(
        self,
        url: str,
        *,
        capabilities: Mapping[str, Any] | None = None,
        client_info: tuple[str, str] | None = None,
        protocol_version: str | None = None,
        era: Era | str | None = None,
        era_cache: EraCache | None = None,
        bearer_token: str | None = None,
        headers: Mapping[str, str] | Iterable[tuple[str, str]] | None = None,
        call_timeout: float | None = None,
        connect_timeout: float | None = None,
        reconnect: ReconnectPolicy | None = None,
        resend_policy: ResendPolicy | str | None = None,
        max_event_size: int | None = None,
        max_body_size: int | None = None,
        open_listen_stream: bool | None = None,
        jitter_seed: int | None = None,
        on_server_request: ServerRequestHandler | None = None,
    ) -> None:
        self._raw = RawClient(
            url,
            capabilities=capabilities,
            client_info=client_info,
            protocol_version=protocol_version,
            era=era,
            era_cache=era_cache,
            bearer_token=bearer_token,
            headers=headers,
            call_timeout=call_timeout,
            connect_timeout=connect_timeout,
            reconnect=reconnect,
            resend_policy=resend_policy,
            max_event_size=max_event_size,
            max_body_size=max_body_size,
            open_listen_stream=open_listen_stream,
            jitter_seed=jitter_seed,
            on_server_request=on_server_request,
        )

    async def __aenter__(self) -> Client:
        await self.connect()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            await self.close()
        except McpResumeError:
            # A failure to close must not hide the exception that ended the block.
            if exc is None:
                raise

    async def connect(self) -> InitializeResult:
        """Initializes the session (``initialize``, ``notifications/initialized``, then the
        standalone stream if enabled; in the modern era, ``server/discover``) and returns the
        server's answer. Optional: the first call connects by itself; calling it again returns
        the first answer."""
        return await self._raw.connect()

    async def list_tools(self) -> list[Tool]:
        """Lists the server's tools (``tools/list``, every page)."""
        return await self._raw.list_tools()

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        idempotency_key: str | uuid.UUID | None = None,
        timeout: float | None = None,
        progress: str | int | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> CallToolResult:
        """Calls a tool (``tools/call``).

        A tool that fails says so in the result (``is_error``); an exception means the call
        itself failed. ``OutcomeUnknownError`` says it was interrupted, may or may not have
        run, and was not re-sent because that was not provably safe.

        Cancelling the awaiting task cancels the call: the server is sent
        ``notifications/cancelled``.

        Args:
            name: the tool's name.
            arguments: its arguments (a JSON object); ``None`` sends none.
            idempotency_key: lets the client re-send the call after an interruption when the
                server deduplicates keys (``str(uuid.uuid4())`` is a good key). It stays the
                same across re-sends.
            timeout: this call's deadline in seconds (default: the client's
                ``call_timeout``), spanning every resume and re-send.
            progress: a progress token (``_meta.progressToken``): the server's progress
                notifications for it arrive on ``notifications()``.
            meta: extra ``params._meta`` entries (e.g. a caller's tag).
        """
        return await self._raw.call_tool(
            name,
            arguments,
            idempotency_key=idempotency_key,
            timeout=timeout,
            progress=progress,
            meta=meta,
        )

    async def request(self, method: str, params: Any = None) -> Any:
        """Sends any JSON-RPC request and returns its ``result`` as native objects.

        Never re-sent after an interruption whose outcome is unknown (it has no idempotency
        key)."""
        return await self._raw.request(method, params)

    async def notify(self, method: str, params: Any = None) -> None:
        """Sends a notification; returns once it is queued, not when delivered."""
        await self._raw.notify(method, params)

    async def ping(self) -> None:
        """Checks the server is alive (``ping``)."""
        await self._raw.ping()

    async def resume_task(self, task_id: str) -> Any:
        """Polls a task a call became earlier (modern era, tasks extension) until it ends,
        and returns its final result."""
        return await self._raw.resume_task(task_id)

    async def close(self) -> None:
        """Closes the session: waiting calls fail with ``ClosedError``, the session is
        deleted on the server, later calls fail with ``ClosedError``."""
        await self._raw.close()

    @property
    def url(self) -> str:
        """The endpoint URL."""
        return self._raw.url

    @property
    def era(self) -> Era | None:
        """The era the server was found to speak; ``None`` before the first handshake."""
        return self._raw.era

    @property
    def extension_status(self) -> ExtensionStatus | None:
        """Which resume-safety checks the server advertised and which are in force;
        ``None`` before the first session."""
        return self._raw.extension_status

    def events(self) -> EventStream:
        """Lifecycle events from now on, as an async iterator: ``async for event in
        client.events()``. Subscribe before ``connect()`` to see ``connected``.

        A subscriber more than 256 events behind loses the oldest (counted by ``missed``);
        the client never waits for subscribers. The iteration ends once the client is
        gone."""
        return self._raw.events()

    def notifications(self) -> NotificationStream:
        """Server notifications (progress, log messages, list changes) from now on, as an
        async iterator; buffered like ``events()``."""
        return self._raw.notifications()

    def on_server_request(self, handler: _Handler) -> _Handler:
        """Registers the handler of server-to-client requests (sampling, elicitation,
        roots, and in the modern era the input requests of a call); usable as a decorator.

        The handler gets a ``ServerRequest`` and returns the JSON result, directly or from
        an ``async def``; it runs on the event loop that last used this client. Raise
        ``RpcError(code, message, data)`` to answer with that error. Without a handler the
        client answers "method not found"; ``ping`` is always answered for you.
        """
        self._raw.server_request_handler = handler
        return handler

    def __repr__(self) -> str:
        return f"Client({self._raw.url!r})"
