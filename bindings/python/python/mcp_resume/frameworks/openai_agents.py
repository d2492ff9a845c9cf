"""The OpenAI Agents SDK over ``mcp_resume.bridge``: ``MCPServerResumable`` is its
``MCPServerStreamableHttp`` with the streams made by the bridge, so an agent keeps the SDK's
API (``connect``, ``list_tools``, ``call_tool``, ``Agent(mcp_servers=[...])``)::

    from mcp_resume.frameworks.openai_agents import MCPServerResumable

    async with MCPServerResumable({"url": "http://127.0.0.1:8080/mcp"}) as server:
        tools = await server.list_tools()

The SDK's ``max_retry_attempts`` retries every failed ``call_tool``, on the same session or on
a fresh one. A call that may have run (the bridge's ``outcome_unknown`` or
``context_mismatch``) does not fail: it completes as an ``isError`` result whose text says that
the call may have run (the model reads it as the tool's output) and whose
``_meta["io.github.mcp-resume/outcome"]`` names the kind (the bridge's
``interrupted_as_result``), so nothing retries it. Every other failure is retried as the SDK's
setting says.

The bridge's deadline (``bridge_options["call_timeout"]``, else ``params["sse_read_timeout"]``,
300 s by default) is a call's only one: ``client_session_timeout_seconds`` defaults to ``None``
here, not to the SDK's 5 s, and a shorter one raises ``TypeError``. The SDK's own timeout ends
a call that may still be running with an error that does not say so, which its retry answers
by sending the call again.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import timedelta
from typing import Any

from ..bridge import check_options, streamablehttp_client
from ._outcome import keyed_meta, require

_mcp = require("agents.mcp", "openai-agents", "the OpenAI Agents SDK (openai-agents)")
MCPServerStreamableHttp = _mcp.MCPServerStreamableHttp

__all__ = ["MCPServerResumable"]

# `params` members that mean the same on the bridge, by their name there.
_PARAMS = ("headers", "timeout", "sse_read_timeout", "terminate_on_close")
# `params` members that configure an httpx client, which the bridge does not use.
_HTTPX_ONLY = {
    "auth": "pass a token as bridge_options={'bearer_token': ...} (or a Authorization header)",
    "httpx_client_factory": "the bridge's HTTP stack is the Rust SDK's; configure it with "
    "bridge_options (headers, timeout, bearer_token, reconnect, ...)",
}
# On `mcp` 2.x the SDK hands the streams to `mcp`'s `Client`, which takes (read, write).
_PAIR = int(importlib.metadata.version("mcp").split(".")[0]) >= 2


class MCPServerResumable(MCPServerStreamableHttp):  # type: ignore[misc, valid-type]
    """``MCPServerStreamableHttp`` over the bridge.

    ``params`` keeps its meaning (``url``, ``headers``, ``timeout``, ``sse_read_timeout``,
    ``terminate_on_close``); ``auth`` and ``httpx_client_factory`` configure an httpx client
    the bridge does not have, so they raise ``TypeError`` (pass a token as
    ``bridge_options={"bearer_token": ...}``). ``bridge_options`` are the keywords of
    ``mcp_resume.bridge.streamablehttp_client`` (``era``, ``reconnect``, ``resend_policy``,
    ``call_timeout``, …; unknown names raise ``TypeError`` here); one given both in ``params``
    and in ``bridge_options`` raises too. ``tool_call_keys=True`` gives every tool call the
    agent makes an idempotency key derived from its tool call id (composed with the SDK's
    ``tool_meta_resolver``), so re-running the same invocation is deduplicated by a server
    that honours keys. Every other argument is the SDK's.
    """

    def __init__(
        self,
        params: Any,
        *args: Any,
        bridge_options: dict[str, Any] | None = None,
        tool_call_keys: bool = False,
        **kwargs: Any,
    ) -> None:
        for name, instead in _HTTPX_ONLY.items():
            if params.get(name) is not None:
                raise TypeError(f"MCPServerResumable: params[{name!r}] has no effect here: {instead}")
        options = dict(bridge_options or {})
        check_options(options, "MCPServerResumable bridge_options")
        both = sorted(n for n in _PARAMS if n in params and n in options)
        if both:
            raise TypeError(
                f"MCPServerResumable: {', '.join(both)} given in params and in bridge_options"
            )
        if "call_timeout" in options and "sse_read_timeout" in params:
            raise TypeError("MCPServerResumable: call_timeout and sse_read_timeout are one deadline")
        if tool_call_keys:
            kwargs["tool_meta_resolver"] = _keying(kwargs.get("tool_meta_resolver"))
        if options.get("interrupted_as_result") is False:
            raise TypeError(
                "MCPServerResumable: interrupted_as_result=False would let the SDK's retries "
                "run a call that may have run again"
            )
        # `client_session_timeout_seconds` is the SDK's fourth parameter.
        if len(args) >= 3:
            session_timeout = args[2]
        else:
            session_timeout = kwargs.setdefault("client_session_timeout_seconds", None)
        deadline = _seconds(options.get("call_timeout", params.get("sse_read_timeout", 60 * 5)))
        if session_timeout is not None and _seconds(session_timeout) < deadline:
            raise TypeError(
                f"MCPServerResumable: client_session_timeout_seconds={session_timeout} ends a "
                f"call before the bridge's deadline ({deadline:g} s) while it may still run, "
                "and the SDK's retry would send it again: leave it unset and set "
                "bridge_options={'call_timeout': ...}"
            )
        super().__init__(params, *args, **kwargs)
        self._bridge_options = {**options, "interrupted_as_result": True}

    def create_streams(self) -> AbstractAsyncContextManager[Any]:
        params = self.params
        given = {name: params[name] for name in _PARAMS if name in params}
        defaults = {"timeout": 5, "terminate_on_close": True}
        if "call_timeout" not in self._bridge_options:
            defaults["sse_read_timeout"] = 60 * 5
        streams = streamablehttp_client(
            params["url"], **{**defaults, **given, **self._bridge_options}
        )
        return _pair(streams) if _PAIR else streams


def _seconds(value: float | timedelta) -> float:
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


@asynccontextmanager
async def _pair(streams: AbstractAsyncContextManager[Any]) -> AsyncIterator[Any]:
    async with streams as (read, write, _):
        yield read, write


def _keying(resolver: Callable[[Any], Any] | None) -> Callable[[Any], Awaitable[Any]]:
    """The SDK's ``tool_meta_resolver`` with this invocation's key added to what it returns."""

    async def resolve(context: Any) -> Any:
        meta = resolver(context) if resolver is not None else None
        if isinstance(meta, Awaitable):
            meta = await meta
        call_id = getattr(context.run_context, "tool_call_id", None)
        return keyed_meta(meta, call_id, context.tool_name)

    return resolve
