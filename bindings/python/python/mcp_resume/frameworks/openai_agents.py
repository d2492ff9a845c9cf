"""The OpenAI Agents SDK over ``mcp_resume.bridge``: ``MCPServerResumable`` is its
``MCPServerStreamableHttp`` with the streams made by the bridge, so an agent keeps the SDK's
API (``connect``, ``list_tools``, ``call_tool``, ``Agent(mcp_servers=[...])``)::

    from mcp_resume.frameworks.openai_agents import MCPServerResumable

    async with MCPServerResumable({"url": "http://127.0.0.1:8080/mcp"}) as server:
        tools = await server.list_tools()
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Any

from agents.mcp import MCPServerStreamableHttp

from ..bridge import streamablehttp_client

__all__ = ["MCPServerResumable"]


class MCPServerResumable(MCPServerStreamableHttp):
    """``MCPServerStreamableHttp`` over the bridge. ``params`` keeps its meaning (``url``,
    ``headers``, ``timeout``, ``sse_read_timeout``, ``terminate_on_close``); ``bridge_options``
    are those of ``mcp_resume.bridge.streamablehttp_client`` (``era``, ``reconnect``,
    ``resend_policy``, …). ``httpx_client_factory`` and ``auth`` have no counterpart: the HTTP
    stack is the Rust SDK's."""

    def __init__(
        self, params: Any, *args: Any, bridge_options: dict[str, Any] | None = None, **kwargs: Any
    ) -> None:
        super().__init__(params, *args, **kwargs)
        self._bridge_options = dict(bridge_options or {})

    def create_streams(self) -> AbstractAsyncContextManager[Any]:
        params = self.params
        return streamablehttp_client(
            params["url"],
            headers=params.get("headers"),
            timeout=params.get("timeout", 5),
            sse_read_timeout=params.get("sse_read_timeout", 60 * 5),
            terminate_on_close=params.get("terminate_on_close", True),
            **self._bridge_options,
        )
