"""``langchain-mcp-adapters`` over ``mcp_resume.bridge``.

``load_mcp_tools`` takes a ``ClientSession``; ``tools`` opens one over the bridge and yields
the LangChain tools, valid while the block runs::

    from mcp_resume.frameworks.langchain import tools

    async with tools("http://127.0.0.1:8080/mcp") as mcp_tools:
        result = await mcp_tools[0].ainvoke({"text": "hi"})
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from ..bridge import streamablehttp_client

if TYPE_CHECKING:
    from langchain_core.tools import BaseTool

__all__ = ["tools"]


@asynccontextmanager
async def tools(url: str, **options: Any) -> AsyncIterator[list[BaseTool]]:
    """The server's tools as LangChain tools, on an initialized ``ClientSession`` over the
    bridge (``options``: those of ``mcp_resume.bridge.streamablehttp_client``)."""
    from langchain_mcp_adapters.tools import load_mcp_tools
    from mcp import ClientSession

    async with streamablehttp_client(url, **options) as (read, write, _):
        async with ClientSession(read, write) as session:
            await session.initialize()
            yield await load_mcp_tools(session)
