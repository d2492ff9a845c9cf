"""Connect, list the tools, call two of them, and tell an unknown outcome from a failure.

    cargo run -p mock-server --bin mock-cluster -- --preset strict --listen 127.0.0.1:8080
    python examples/quickstart.py http://127.0.0.1:8080/mcp
"""

from __future__ import annotations

import asyncio
import sys
import uuid

from mcp_resume import Client, McpResumeError, OutcomeUnknownError


async def main(url: str) -> None:
    async with Client(url, capabilities={"experimental": {"sampling": {"temperature": 0.2}}}) as client:
        for tool in await client.list_tools():
            print(f"{tool.name}: {tool.description or ''}")

        reply = await client.call_tool("echo", {"text": "hi"})
        print(reply.text)

        # A side effect: the key lets the client re-send the call after an interruption,
        # when the server deduplicates keys. Without one, an interrupted call raises
        # OutcomeUnknownError rather than run twice.
        try:
            counted = await client.call_tool(
                "counter_increment", {}, idempotency_key=uuid.uuid4(), timeout=5
            )
            print("counter:", counted.structured_content)
        except OutcomeUnknownError:
            print("interrupted: it may or may not have run; check before retrying")
        except McpResumeError as e:
            print(f"failed ({e.kind}): {e}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8080/mcp"))
