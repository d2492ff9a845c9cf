"""``langchain-mcp-adapters`` over ``mcp_resume.bridge``.

``tools`` opens one bridged session and yields its tools, valid while the block runs::

    from mcp_resume.frameworks.langchain import tools

    async with tools("http://127.0.0.1:8080/mcp", server_name="shop") as mcp_tools:
        result = await mcp_tools[0].ainvoke({"text": "hi"})

``MultiServerMCPClient`` is the adapters' class with its ``streamable_http`` (``http``)
connections run over the bridge, a session per tool call as the adapters make them (with the
headers an interceptor set through ``request.override(headers=...)`` and the client's
logging and elicitation callbacks); other transports (``stdio``, ``sse``, ``websocket``) are
the adapters' own::

    from mcp_resume.frameworks.langchain import MultiServerMCPClient

    client = MultiServerMCPClient({"shop": {"transport": "http", "url": url, "era": "legacy"}})
    agent_tools = await client.get_tools()

A call that may have run (the bridge's ``outcome_unknown`` or ``context_mismatch``) completes
as an ``isError`` result saying so instead of raising: with ``handle_tool_errors=True`` (the
adapters' default) the model gets it as a ``ToolMessage`` with ``status="error"``, and nothing
is raised for a ``.with_retry()`` or a graph's retry policy to retry. (With
``handle_tool_errors=False`` the adapters raise it as a ``ToolException``, which a retry
wrapper would retry: keep the default.)
"""

from __future__ import annotations

import contextvars
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from ..bridge import check_options, streamablehttp_client
from ._outcome import keyed_meta, require

_client = require("langchain_mcp_adapters.client", "langchain", "langchain-mcp-adapters")
_tools = require("langchain_mcp_adapters.tools", "langchain", "langchain-mcp-adapters")
_callbacks = require("langchain_mcp_adapters.callbacks", "langchain", "langchain-mcp-adapters")
_mcp = require("mcp", "langchain", "the mcp package")

if TYPE_CHECKING:
    from langchain_core.tools import BaseTool

__all__ = ["MultiServerMCPClient", "tools"]

# The key of the tool call being made, set by the interceptor `tool_call_keys` adds (the
# adapters pass no `_meta` through their interceptors) and read by the session.
_KEY: contextvars.ContextVar[tuple[str, str] | None] = contextvars.ContextVar(
    "mcp_resume_langchain_tool_call", default=None
)
# The headers of the tool call being made as the interceptors left them (`request.override(
# headers=...)`), set by the innermost interceptor of a bridged connection's tools and read
# by the session opened for the call.
_HEADERS: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "mcp_resume_langchain_headers", default=None
)
# Connection members that mean the same on the bridge.
_CONNECTION = ("headers", "timeout", "sse_read_timeout", "terminate_on_close")
_HTTP = {"streamable_http", "streamable-http", "http"}


class _ResumeSession(_mcp.ClientSession):  # type: ignore[misc, name-defined]
    """A ``ClientSession`` whose ``call_tool`` adds the key of the invocation being made."""

    async def call_tool(self, name: str, arguments: Any = None, *args: Any, **kwargs: Any) -> Any:
        current = _KEY.get()
        if current is not None and current[1] == name:
            kwargs["meta"] = keyed_meta(kwargs.get("meta"), current[0], name)
        return await super().call_tool(name, arguments, *args, **kwargs)


async def _key_from_tool_call(request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
    """The interceptor behind ``tool_call_keys``: LangGraph's tool runtime carries the model's
    tool call id."""
    call_id = getattr(request.runtime, "tool_call_id", None)
    token = _KEY.set((call_id, request.name) if call_id else None)
    try:
        return await handler(request)
    finally:
        _KEY.reset(token)


async def _call_headers(request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
    """The innermost interceptor of a bridged connection's tools: hands the headers the other
    interceptors set to the session opened for the call, as the adapters' own tools put them
    on the call's connection."""
    token = _HEADERS.set(request.headers)
    try:
        return await handler(request)
    finally:
        _HEADERS.reset(token)


def _interceptors(given: list[Any] | None, tool_call_keys: bool) -> list[Any]:
    return ([_key_from_tool_call] if tool_call_keys else []) + list(given or [])


def _streams(url: str, options: dict[str, Any]) -> Any:
    # A call that may have run completes as an error result: nothing for a retry to retry.
    return streamablehttp_client(url, **{**options, "interrupted_as_result": True})


@asynccontextmanager
async def _session(
    url: str, options: dict[str, Any], session_kwargs: dict[str, Any] | None
) -> AsyncIterator[Any]:
    async with _streams(url, options) as (read, write, _):
        async with _ResumeSession(read, write, **(session_kwargs or {})) as session:
            await session.initialize()
            yield session


@asynccontextmanager
async def tools(
    url: str,
    *,
    server_name: str | None = None,
    callbacks: Any = None,
    tool_interceptors: list[Any] | None = None,
    tool_name_prefix: bool = False,
    handle_tool_errors: bool = True,
    tool_call_keys: bool = False,
    session_kwargs: dict[str, Any] | None = None,
    **options: Any,
) -> AsyncIterator[list[BaseTool]]:
    """The server's tools as LangChain tools, on one initialized session over the bridge.

    ``server_name``, ``callbacks``, ``tool_interceptors``, ``tool_name_prefix`` and
    ``handle_tool_errors`` are ``load_mcp_tools``'s; ``session_kwargs`` go to the
    ``ClientSession``; ``tool_call_keys=True`` keys every call with the tool call id of
    LangGraph's tool runtime (``ToolNode``, ``create_agent``); ``options`` are the keywords of
    ``mcp_resume.bridge.streamablehttp_client`` (an unknown one raises ``TypeError``).
    """
    check_options(options, "mcp_resume.frameworks.langchain.tools")
    async with _session(url, options, session_kwargs) as session:
        yield await _tools.load_mcp_tools(
            session,
            callbacks=callbacks,
            tool_interceptors=_interceptors(tool_interceptors, tool_call_keys),
            server_name=server_name,
            tool_name_prefix=tool_name_prefix,
            handle_tool_errors=handle_tool_errors,
        )


class _SessionPerCall:
    """What the adapters' tools call ``call_tool`` on: a bridged session opened for the call,
    as the adapters open one per call for a connection: with the headers the interceptors
    set on top of the connection's, and the client's logging and elicitation callbacks in
    the context of the call."""

    def __init__(
        self,
        url: str,
        options: dict[str, Any],
        session_kwargs: Any,
        server_name: str,
        callbacks: Any,
    ) -> None:
        self._url = url
        self._options = options
        self._session_kwargs = session_kwargs
        self._server_name = server_name
        self._callbacks = callbacks

    async def call_tool(self, name: str, arguments: Any = None, **kwargs: Any) -> Any:
        options = self._options
        headers = _HEADERS.get()
        if headers is not None:
            options = {**options, "headers": {**dict(options.get("headers") or {}), **headers}}
        session_kwargs = dict(self._session_kwargs or {})
        if self._callbacks is not None:
            context = _callbacks.CallbackContext(server_name=self._server_name, tool_name=name)
            session_kwargs.update(
                _session_callbacks(self._callbacks.to_mcp_format(context=context))
            )
        async with _session(self._url, options, session_kwargs) as session:
            return await session.call_tool(name, arguments, **kwargs)


def _bridged(connection: Any) -> tuple[str, dict[str, Any], Any] | None:
    """The URL, bridge options and session kwargs of a connection the bridge runs, else None."""
    if connection.get("transport") not in _HTTP:
        return None
    for name in ("auth", "httpx_client_factory"):
        if connection.get(name) is not None:
            raise TypeError(
                f"MultiServerMCPClient: {name!r} configures an httpx client, which a bridged "
                "connection does not use; pass a token as 'bearer_token' (or a header)"
            )
    rest = {
        k: v
        for k, v in connection.items()
        if k not in ("transport", "url", "session_kwargs", "auth", "httpx_client_factory")
    }
    check_options(rest, "MultiServerMCPClient connection")
    return connection["url"], rest, connection.get("session_kwargs")


class MultiServerMCPClient(_client.MultiServerMCPClient):  # type: ignore[misc, name-defined]
    """The adapters' ``MultiServerMCPClient``; its ``streamable_http`` / ``http`` connections
    run over the bridge and may hold the bridge's keywords (``era``, ``bearer_token``,
    ``reconnect``, ``call_timeout``, …; unknown ones and ``auth`` / ``httpx_client_factory``
    raise ``TypeError`` here). ``tool_call_keys=True`` keys every call with LangGraph's tool
    call id. Every other argument is the adapters'."""

    def __init__(
        self, connections: dict[str, Any] | None = None, *, tool_call_keys: bool = False, **kwargs: Any
    ) -> None:
        super().__init__(connections, **kwargs)
        self._bridged = {name: _bridged(c) for name, c in self.connections.items()}
        self.tool_interceptors = _interceptors(self.tool_interceptors, tool_call_keys)

    def _bridge(self, server_name: str) -> tuple[str, dict[str, Any], Any] | None:
        if server_name not in self._bridged:
            # Added to `connections` after construction.
            self._bridged[server_name] = _bridged(self.connections[server_name])
        return self._bridged[server_name]

    @asynccontextmanager
    async def session(self, server_name: str, *, auto_initialize: bool = True) -> AsyncIterator[Any]:
        bridged = self._bridge(server_name) if server_name in self.connections else None
        if bridged is None:
            async with super().session(server_name, auto_initialize=auto_initialize) as session:
                yield session
            return
        url, options, session_kwargs = bridged
        context = _callbacks.CallbackContext(server_name=server_name)
        callbacks = self.callbacks.to_mcp_format(context=context)
        session_kwargs = {**(session_kwargs or {}), **_session_callbacks(callbacks)}
        async with _streams(url, options) as (read, write, _):
            async with _ResumeSession(read, write, **session_kwargs) as session:
                if auto_initialize:
                    await session.initialize()
                yield session

    async def get_tools(self, *, server_name: str | None = None) -> list[BaseTool]:
        names = [server_name] if server_name is not None else list(self.connections)
        if server_name is not None and server_name not in self.connections:
            return await super().get_tools(server_name=server_name)  # its error
        loaded: list[BaseTool] = []
        for name in names:
            bridged = self._bridge(name)
            if bridged is None:
                loaded.extend(await super().get_tools(server_name=name))
                continue
            url, options, session_kwargs = bridged
            listed: list[Any] = []
            async with self.session(name) as session:
                cursor = None
                while True:
                    page = await session.list_tools(cursor=cursor)
                    listed.extend(page.tools)
                    cursor = page.nextCursor
                    if not cursor:
                        break
            per_call = _SessionPerCall(url, options, session_kwargs, name, self.callbacks)
            loaded.extend(
                _tools.convert_mcp_tool_to_langchain_tool(
                    per_call,
                    tool,
                    callbacks=self.callbacks,
                    tool_interceptors=[*self.tool_interceptors, _call_headers],
                    server_name=name,
                    tool_name_prefix=self.tool_name_prefix,
                    handle_tool_errors=self.handle_tool_errors,
                )
                for tool in listed
            )
        return loaded


def _session_callbacks(callbacks: Any) -> dict[str, Any]:
    kwargs: dict[str, Any] = {}
    if getattr(callbacks, "logging_callback", None) is not None:
        kwargs["logging_callback"] = callbacks.logging_callback
    if getattr(callbacks, "elicitation_callback", None) is not None:
        kwargs["elicitation_callback"] = callbacks.elicitation_callback
    return kwargs
