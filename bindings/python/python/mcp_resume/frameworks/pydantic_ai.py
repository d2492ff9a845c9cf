"""pydantic-ai over ``mcp_resume.bridge``: ``ResumeToolset`` is pydantic-ai's ``MCPToolset``
(the 2.x toolset, on FastMCP's client) with its session on mcp-resume::

    from pydantic_ai import Agent
    from mcp_resume.frameworks.pydantic_ai import ResumeToolset

    agent = Agent("openai:gpt-5", toolsets=[ResumeToolset("http://127.0.0.1:8080/mcp")])

By default ``MCPToolset`` turns every failed call into ``ModelRetry``, and the agent loop calls
the tool again. A call that may have run (the bridge's ``outcome_unknown`` or
``context_mismatch``) becomes ``ToolFailed`` instead, whatever ``tool_error_behavior`` says
(except ``"error"``, which raises it to the application unchanged): the model reads that the
call may have run, and nothing prompts it to retry.
"""

from __future__ import annotations

import functools
from typing import Any

from ..bridge import check_options
from ._outcome import final_kind, interrupted_message, keyed_meta, require

_mcp = require("pydantic_ai.mcp", "pydantic-ai", "pydantic-ai (pydantic-ai-slim[mcp])")
_exceptions = require("pydantic_ai.exceptions", "pydantic-ai", "pydantic-ai")
MCPToolset = _mcp.MCPToolset

__all__ = ["ResumeToolset"]


class ResumeToolset(MCPToolset):  # type: ignore[misc, valid-type]
    """``MCPToolset`` over ``ResumeTransport``.

    ``client``: the server's URL (a ``fastmcp.Client`` over ``ResumeTransport(url,
    **bridge_options)`` is made for it) or a ``fastmcp.Client`` of your own over a
    ``ResumeTransport``. ``bridge_options``: the keywords of
    ``mcp_resume.bridge.streamablehttp_client`` (with a URL only). ``tool_call_keys=True``
    gives every call the agent makes an idempotency key derived from its tool call id
    (``RunContext.tool_call_id``), composed with ``process_tool_call``, so re-running the same
    invocation (a durable execution's replay) is deduplicated by a server that honours keys.
    Every other argument is ``MCPToolset``'s.
    """

    def __init__(
        self,
        client: Any,
        *,
        bridge_options: dict[str, Any] | None = None,
        tool_call_keys: bool = False,
        **kwargs: Any,
    ) -> None:
        if isinstance(client, str):
            import fastmcp

            from .fastmcp import ResumeTransport

            client = fastmcp.Client(ResumeTransport(client, **(bridge_options or {})))
        elif bridge_options:
            raise TypeError("ResumeToolset: bridge_options go with a URL, not with a client")
        else:
            from .fastmcp import ResumeTransport

            if not isinstance(getattr(client, "transport", None), ResumeTransport):
                raise TypeError("ResumeToolset: the client's transport is not a ResumeTransport")
        if tool_call_keys:
            kwargs["process_tool_call"] = _keying(kwargs.get("process_tool_call"))
        super().__init__(client, **kwargs)

    async def call_tool(self, name: str, tool_args: dict[str, Any], ctx: Any, tool: Any) -> Any:
        try:
            return await super().call_tool(name, tool_args, ctx, tool)
        except _exceptions.ModelRetry as retry:
            # pydantic-ai makes every protocol error a ModelRetry: not this one.
            kind = final_kind(retry)
            if kind is None:
                raise
            raise _exceptions.ToolFailed(interrupted_message(kind, name)) from retry


def _keying(hook: Any) -> Any:
    """``process_tool_call`` with this invocation's key put in the call's ``_meta``."""

    async def process(ctx: Any, call_tool: Any, name: str, tool_args: dict[str, Any]) -> Any:
        async def keyed(
            name: str, args: dict[str, Any], *, metadata: dict[str, Any] | None = None, **kw: Any
        ) -> Any:
            metadata = keyed_meta(metadata, getattr(ctx, "tool_call_id", None), name)
            return await call_tool(name, args, metadata=metadata, **kw)

        if hook is not None:
            return await hook(ctx, keyed, name, tool_args)
        return await keyed(name, tool_args)

    return functools.wraps(hook)(process) if hook is not None else process
