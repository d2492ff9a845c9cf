"""Answer the server's requests (sampling, elicitation, roots; in the modern era also the
input requests of a call) with one async function.

    python examples/handlers.py http://127.0.0.1:8080/mcp
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from mcp_resume import Client, RpcError, ServerRequest


async def answer(request: ServerRequest) -> dict[str, Any]:
    if request.method == "sampling/createMessage":
        return {
            "role": "assistant",
            "model": "local",
            "content": {"type": "text", "text": "a short answer"},
        }
    if request.method == "elicitation/create":
        return {"action": "decline"}
    if request.method == "roots/list":
        return {"roots": [{"uri": "file:///tmp", "name": "tmp"}]}
    # Any other request is refused with a JSON-RPC error of our choosing.
    raise RpcError(-32601, f"not supported: {request.method}")


async def main(url: str) -> None:
    client = Client(url, capabilities={"sampling": {}, "elicitation": {}, "roots": {}},
                    on_server_request=answer)
    async with client:
        info = await client.connect()
        print(f"connected to {info.server_name} {info.server_version} ({client.era})")
        for tool in await client.list_tools():
            print(tool.name)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8080/mcp"))
