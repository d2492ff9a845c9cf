"""FastMCP's client over ``mcp_resume.bridge``: ``ResumeTransport`` is a FastMCP
``ClientTransport``, so ``fastmcp.Client`` (and what is built on it, such as pydantic-ai's
``MCPToolset``) keeps its API::

    import fastmcp
    from mcp_resume.frameworks.fastmcp import ResumeTransport

    async with fastmcp.Client(ResumeTransport("http://127.0.0.1:8080/mcp")) as client:
        result = await client.call_tool("echo", {"text": "hi"})
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastmcp.client.transports import ClientTransport
from mcp import ClientSession

from ..bridge import streamablehttp_client

__all__ = ["ResumeTransport"]


class ResumeTransport(ClientTransport):
    """A FastMCP transport whose session runs on mcp-resume (``options``: those of
    ``mcp_resume.bridge.streamablehttp_client``)."""

    def __init__(self, url: str, **options: Any) -> None:
        self.url = url
        self._options = options
        self._session_id: Any = None

    @asynccontextmanager
    async def connect_session(self, **session_kwargs: Any) -> AsyncIterator[ClientSession]:
        async with streamablehttp_client(self.url, **self._options) as (read, write, session_id):
            self._session_id = session_id
            async with ClientSession(read, write, **session_kwargs) as session:
                yield session

    def get_session_id(self) -> str | None:
        return self._session_id() if self._session_id is not None else None

    def __repr__(self) -> str:
        return f"<ResumeTransport(url={self.url!r})>"
