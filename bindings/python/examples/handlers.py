"""Answer the server's requests: sampling, elicitation and roots with typed handlers (each
declares its capability at ``initialize``), anything else with one generic handler.

    python examples/handlers.py http://127.0.0.1:8080/mcp
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from mcp_resume import (
    Client,
    CreateMessageRequest,
    CreateMessageResult,
    ElicitRequest,
    ElicitResult,
    ListRootsRequest,
    Root,
    RpcError,
    ServerRequest,
)


async def main(url: str) -> None:
    client = Client(url)

    # Typed handlers are registered before the client is first used: the capabilities they
    # declare are sent at `initialize`.
    @client.on_sampling
    async def sample(request: CreateMessageRequest) -> CreateMessageResult:
        question = request.messages[-1].text if request.messages else ""
        return CreateMessageResult("local", f"a short answer to {question!r}",
                                   stop_reason="endTurn")

    @client.on_elicitation
    def elicit(request: ElicitRequest) -> ElicitResult:
        if request.is_url_mode:
            return ElicitResult.decline()
        return ElicitResult.accept({"name": "Ada"})

    @client.on_roots
    def roots(request: ListRootsRequest) -> list[Root]:
        return [Root("file:///tmp", "tmp")]

    # Any other request is refused with a JSON-RPC error of our choosing.
    @client.on_server_request
    def other(request: ServerRequest) -> dict[str, Any]:
        raise RpcError(-32601, f"not supported: {request.method}")

    async with client:
        info = await client.connect()
        print(f"connected to {info.server_name} {info.server_version} ({client.era})")
        for tool in await client.list_tools():
            print(tool.name)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8080/mcp"))
