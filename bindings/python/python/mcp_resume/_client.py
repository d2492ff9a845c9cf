"""``Client``: the asyncio face of the Rust SDK's client.

Every method forwards to the extension; each network method is a coroutine function, so
``asyncio.run(client.connect())`` works and the awaitable belongs to the loop that awaits it.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from types import TracebackType
from typing import Any, TypeVar, Union

from ._enums import Era, LoggingLevel, ResendPolicy
from ._errors import McpResumeError
from ._mcp_resume import (
    CallToolResult,
    Completion,
    CreateMessageRequest,
    CreateMessageResult,
    ElicitRequest,
    ElicitResult,
    EraCache,
    EventStream,
    ExtensionStatus,
    GetPromptResult,
    InitializeResult,
    ListRootsRequest,
    MemoryLedger,
    OAuth,
    NotificationStream,
    Page,
    Prompt,
    PromptReference,
    RawClient,
    ReadResourceResult,
    ReconnectPolicy,
    RecoveredCall,
    Resource,
    ResourceTemplate,
    ResourceTemplateReference,
    Root,
    ServerRequest,
    Tool,
)

__all__ = [
    "Client",
    "ElicitationHandler",
    "RootsHandler",
    "SamplingHandler",
    "ServerRequestHandler",
]

ServerRequestHandler = Callable[[ServerRequest], Union[Awaitable[Any], Any]]
"""Answers a server-to-client request: returns (or resolves to) the JSON result, or raises
``RpcError`` to answer with that error. Any other exception is logged on the
``mcp_resume`` logger and answered as a JSON-RPC internal error."""

_SamplingAnswer = Union[CreateMessageResult, Mapping[str, Any]]
SamplingHandler = Callable[
    [CreateMessageRequest], Union[Awaitable[_SamplingAnswer], _SamplingAnswer]
]
"""Answers ``sampling/createMessage``: returns (or resolves to) a ``CreateMessageResult`` or
its JSON (``{"role": "assistant", "content": {...}, "model": ...}``)."""

_ElicitationAnswer = Union[ElicitResult, Mapping[str, Any]]
ElicitationHandler = Callable[
    [ElicitRequest], Union[Awaitable[_ElicitationAnswer], _ElicitationAnswer]
]
"""Answers ``elicitation/create``: returns (or resolves to) an ``ElicitResult`` or its JSON
(``{"action": "accept", "content": {...}}``)."""

_RootsAnswer = Iterable[Union[Root, str, Mapping[str, Any]]]
RootsHandler = Callable[[ListRootsRequest], Union[Awaitable[_RootsAnswer], _RootsAnswer]]
"""Answers ``roots/list``: returns (or resolves to) the roots, each a ``Root``, a URI or a
root's JSON (``{"uri": ..., "name": ...}``)."""
TokenProvider = Callable[[dict[str, Any]], Union[Awaitable[str], str]]
"""A token provider: a dict (``refresh``, ``challenge``, ``refused_token``, ``url``) in, the
token out, directly or from an ``async def``."""

_Handler = TypeVar("_Handler", bound=ServerRequestHandler)
_Sampling = TypeVar("_Sampling", bound=SamplingHandler)
_Elicitation = TypeVar("_Elicitation", bound=ElicitationHandler)
_Roots = TypeVar("_Roots", bound=RootsHandler)


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
        on_server_request: the handler of the server-to-client requests no typed handler
            takes (see ``Client.on_server_request``).
        on_sampling: the handler of ``sampling/createMessage``; declares the ``sampling``
            capability (see ``Client.on_sampling``).
        on_elicitation: the handler of ``elicitation/create``; declares the ``elicitation``
            capability (see ``Client.on_elicitation``).
        on_roots: the handler of ``roots/list``; declares the ``roots`` capability (see
            ``Client.on_roots``).
        token_provider: asked for every request's token (instead of ``bearer_token``), and
            once more after a 401: a callable (``async def`` or plain, run on the client's
            event loop) taking a dict (``refresh``: whether the last token was refused,
            ``challenge``: the server's ``WWW-Authenticate`` parts, ``refused_token``,
            ``url``) and returning the token. An exception fails the request as never sent
            (tried again within the reconnect policy) and is logged.
        oauth: MCP authorization by the SDK's OAuth provider (``OAuth.client_credentials``
            or ``OAuth.authorization_code``): discovery from the server's 401, dynamic
            registration, PKCE, refresh and step-up. Not with ``token_provider`` or
            ``bearer_token``: one source of the Authorization header.
        ledger: where calls in flight are recorded, so that the process that replaces this
            one picks them up with ``recover()``: a Redis URL (``"redis://host:6379"``,
            with ``ledger_identity``) for a fleet of workers, a ``MemoryLedger`` shared with
            the client that takes over in this process, ``"memory"`` (the default: one of
            its own) or ``"none"`` (nothing recorded).
        ledger_identity: the worker's stable name (a pod's, a slot's): the Redis ledger's
            namespace, the same in the process that replaces this one.
        record_session_ids: whether ledger entries name the session each call went out on
            (legacy era); default ``False`` (a session id is a credential of sorts).
        otlp_endpoint: exports the client's OpenTelemetry spans and metrics (the MCP
            semantic conventions, and the recovery attributes of the SDK's README) over
            OTLP/HTTP to the collector at this base URL, e.g. ``"http://127.0.0.1:4318"``
            (spans to ``/v1/traces``, metrics to ``/v1/metrics``). Each call's span is a child
            of the span current when it is made (read through ``opentelemetry.trace`` when
            it is installed: ``pip install "mcp_resume[otel]"``). ``close()`` flushes what is
            waiting. Default: no telemetry.

    Raises:
        InvalidConfigError: a bad URL, header, size, duration, era or policy; both
            ``oauth`` and ``token_provider``.
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
        on_sampling: SamplingHandler | None = None,
        on_elicitation: ElicitationHandler | None = None,
        on_roots: RootsHandler | None = None,
        token_provider: TokenProvider | None = None,
        oauth: OAuth | None = None,
        ledger: MemoryLedger | str | None = None,
        ledger_identity: str | None = None,
        record_session_ids: bool | None = None,
        otlp_endpoint: str | None = None,
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
            on_sampling=on_sampling,
            on_elicitation=on_elicitation,
            on_roots=on_roots,
            token_provider=token_provider,
            oauth=oauth,
            ledger=ledger,
            ledger_identity=ledger_identity,
            record_session_ids=record_session_ids,
            otlp_endpoint=otlp_endpoint,
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

    async def list_tools_page(self, cursor: str | None = None) -> Page[Tool]:
        """One page of ``tools/list``: the first with ``cursor=None``, then each
        ``next_cursor`` in turn."""
        return await self._raw.list_tools_page(cursor)

    async def list_resources(self) -> list[Resource]:
        """Lists the server's resources (``resources/list``, every page)."""
        return await self._raw.list_resources()

    async def list_resources_page(self, cursor: str | None = None) -> Page[Resource]:
        """One page of ``resources/list``."""
        return await self._raw.list_resources_page(cursor)

    async def list_resource_templates(self) -> list[ResourceTemplate]:
        """Lists the server's resource templates (``resources/templates/list``, every
        page)."""
        return await self._raw.list_resource_templates()

    async def list_resource_templates_page(
        self, cursor: str | None = None
    ) -> Page[ResourceTemplate]:
        """One page of ``resources/templates/list``."""
        return await self._raw.list_resource_templates_page(cursor)

    async def read_resource(self, uri: str) -> ReadResourceResult:
        """Reads a resource (``resources/read``)."""
        return await self._raw.read_resource(uri)

    async def subscribe_resource(self, uri: str) -> None:
        """Subscribes to a resource's changes (``resources/subscribe``): each arrives as a
        ``notifications/resources/updated`` on ``notifications()``. A subscription belongs
        to the session: after a ``reinitialized`` event, subscribe again."""
        await self._raw.subscribe_resource(uri)

    async def unsubscribe_resource(self, uri: str) -> None:
        """Ends a subscription (``resources/unsubscribe``)."""
        await self._raw.unsubscribe_resource(uri)

    async def list_prompts(self) -> list[Prompt]:
        """Lists the server's prompts (``prompts/list``, every page)."""
        return await self._raw.list_prompts()

    async def list_prompts_page(self, cursor: str | None = None) -> Page[Prompt]:
        """One page of ``prompts/list``."""
        return await self._raw.list_prompts_page(cursor)

    async def get_prompt(
        self, name: str, arguments: Mapping[str, str] | None = None
    ) -> GetPromptResult:
        """Renders a prompt (``prompts/get``) with its arguments (names to string
        values)."""
        return await self._raw.get_prompt(name, arguments)

    async def complete(
        self,
        ref: PromptReference | ResourceTemplateReference | Mapping[str, Any],
        argument_name: str,
        argument_value: str,
        *,
        context: Mapping[str, str] | None = None,
    ) -> Completion:
        """Asks for completions of a prompt's argument or a resource template's variable
        (``completion/complete``).

        Args:
            ref: what is completed: ``PromptReference(name)``,
                ``ResourceTemplateReference(uri_template)``, or their dict
                (``{"type": "ref/prompt", "name": ...}``).
            argument_name: the argument (or template variable) being completed.
            argument_value: what the user typed so far.
            context: the values of the arguments already chosen.
        """
        return await self._raw.complete(ref, argument_name, argument_value, context=context)

    async def set_logging_level(self, level: LoggingLevel | str) -> None:
        """Sets the least severe level of the log messages the server sends
        (``logging/setLevel``); they arrive as ``notifications/message`` on
        ``notifications()``. The level belongs to the session: after a ``reinitialized``
        event, set it again. An unknown level raises ``InvalidConfigError``."""
        await self._raw.set_logging_level(level)

    async def notify_roots_changed(self) -> None:
        """Tells the server the roots changed (``notifications/roots/list_changed``): it
        asks for them again, and the ``on_roots`` handler answers."""
        await self._raw.notify_roots_changed()

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

    async def recover(self) -> list[RecoveredCall]:
        """Picks up every call the ledger holds for this endpoint and this client does not
        have in flight: what the process this one replaces left behind. The one way a fleet
        restarts: build the client on the same ledger (``ledger="redis://..."`` with the
        worker's ``ledger_identity``) and call this first.

        Each entry becomes a call again by the rule that governs every interruption: a keyed
        call is re-sent under its key when the server deduplicates keys, an MRTR round
        waiting for input asks this client's handlers again, a task is polled; an unkeyed
        call that may have run is never re-sent. Await each ``RecoveredCall`` for its
        outcome: ``OutcomeUnknownError`` for those, with ``tool_name`` and ``arguments`` to
        report. Cancelling this coroutine loses nothing: calls it picked up but could not
        hand over come back from the next ``recover()``, and so does a ``RecoveredCall``
        dropped before its outcome was awaited.

        Raises:
            LedgerError: the ledger cannot be read.
            ClosedError: the client was closed (nothing is picked up: every entry is left
                to the next process).
        """
        return await self._raw.recover()

    async def resume_task(self, task_id: str, *, timeout: float | None = None) -> Any:
        """Polls a task a call became earlier (modern era, tasks extension) until it ends,
        and returns its final result. ``timeout`` (seconds) bounds the whole wait; ``None``
        means the client's call timeout."""
        return await self._raw.resume_task(task_id, timeout=timeout)

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
        closed (after the events before, ``closed`` among them) or gone."""
        return self._raw.events()

    def notifications(self) -> NotificationStream:
        """Server notifications (progress, log messages, list changes) from now on, as an
        async iterator; buffered like ``events()``."""
        return self._raw.notifications()

    def on_server_request(self, handler: _Handler) -> _Handler:
        """Registers the handler of the server-to-client requests no typed handler
        (``on_sampling``, ``on_elicitation``, ``on_roots``) takes: any method, in the modern
        era also the input requests of a call; usable as a decorator, at any time.

        The handler gets a ``ServerRequest`` and returns the JSON result, directly or from
        an ``async def``; it runs on the client's event loop (plain functions too, on the loop's
        thread), and is cancelled when the server cancels its request (or the call it serves
        ends, or the client closes): one still running 2 s later, having caught its
        ``CancelledError``, is abandoned with a warning on the ``mcp_resume`` logger (its own
        coroutine, closed where it waits; not the tasks it started). Raise
        ``RpcError(code, message, data)`` to answer with that error. Without a handler the
        client answers "method not found"; ``ping`` is always answered for you. It declares
        no capability: pass what it answers in ``capabilities``.
        """
        self._raw.server_request_handler = handler
        return handler

    def on_sampling(self, handler: _Sampling) -> _Sampling:
        """Registers the handler of ``sampling/createMessage`` (in the modern era also of
        such input requests of a call); usable as a decorator. It declares the ``sampling``
        capability at ``initialize``, so register it before the client is first used
        (``connect()``, a call, ``events()``, ``notifications()``); afterwards only a
        handler registered before can be replaced (else ``InvalidConfigError``).

        The handler gets a ``CreateMessageRequest`` and returns a ``CreateMessageResult``
        or its JSON, directly or from an ``async def``, on the client's event loop. ``RpcError`` and other exceptions are answered as with
        ``on_server_request``; an answer of the wrong shape is logged and answered as an
        internal error.
        """
        self._raw.sampling_handler = handler
        return handler

    def on_elicitation(self, handler: _Elicitation) -> _Elicitation:
        """Registers the handler of ``elicitation/create`` (in the modern era also of such
        input requests of a call); usable as a decorator. It declares the ``elicitation``
        capability (form mode; add ``{"elicitation": {"url": {}}}`` to ``capabilities`` for
        URL mode) at ``initialize``: register it before the client is first used, as
        ``on_sampling``.

        The handler gets an ``ElicitRequest`` and returns an ``ElicitResult``
        (``ElicitResult.accept(values)``, ``.decline()``, ``.cancel()``) or its JSON.
        """
        self._raw.elicitation_handler = handler
        return handler

    def on_roots(self, handler: _Roots) -> _Roots:
        """Registers the handler of ``roots/list``; usable as a decorator. It declares the
        ``roots`` capability (with ``listChanged``: call ``notify_roots_changed()`` when
        they change) at ``initialize``: register it before the client is first used, as
        ``on_sampling``.

        The handler gets a ``ListRootsRequest`` and returns the roots: ``Root(uri, name)``
        objects, URIs, or root dicts.
        """
        self._raw.roots_handler = handler
        return handler

    def __repr__(self) -> str:
        return f"Client({self._raw.url!r})"
