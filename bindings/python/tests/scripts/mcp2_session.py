"""Run by tests/test_mcp_session.py in a virtualenv holding `mcp` 2.x and the wheel: a 2.x
`ClientSession` over `mcp_resume.bridge` lists the tools and calls one (argv: the MCP URL)."""

from __future__ import annotations

import asyncio
import sys

from mcp import ClientSession

from mcp_resume.bridge import streamablehttp_client


async def main(url: str) -> None:
    async with streamablehttp_client(url) as (read, write, _):
        async with ClientSession(read, write) as session:
            await session.initialize()
            tools = await session.list_tools()
            assert "echo" in {t.name for t in tools.tools}
            result = await session.call_tool("echo", {"text": "from mcp 2"})
            print(result.content[0].text)  # type: ignore[union-attr]


asyncio.run(asyncio.wait_for(main(sys.argv[1]), 30))
