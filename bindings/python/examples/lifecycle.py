"""Watch what the session goes through while calls run: resumes, rejections,
re-initializations, re-sends, and the progress of a long call.

    cargo run -p mock-server --bin mock-cluster -- --preset strict --cut-after-events 3 \\
        --listen 127.0.0.1:8080
    python examples/lifecycle.py http://127.0.0.1:8080/mcp
"""

from __future__ import annotations

import asyncio
import sys
import uuid

from mcp_resume import Client, EventStream, NotificationStream


async def watch_events(events: EventStream) -> None:
    async for event in events:
        if event.type == "reinitialized":
            print(f"re-initialized ({event.reason}); capabilities changed: "
                  f"{event.capabilities_changed}")
        else:
            print("event:", event.to_dict())


async def watch_progress(notifications: NotificationStream) -> None:
    async for note in notifications:
        if note.method == "notifications/progress":
            print(f"progress of call {note.call}: {note.params['progress']}")


async def main(url: str) -> None:
    client = Client(url)
    # Subscribe before connecting to see the connection itself.
    watchers = [
        asyncio.create_task(watch_events(client.events())),
        asyncio.create_task(watch_progress(client.notifications())),
    ]
    async with client:
        result = await client.call_tool(
            "slow", {"steps": 5, "delay_ms": 50}, idempotency_key=uuid.uuid4(), progress="slow-1"
        )
        print(result.text)
        # Cancelling the task that awaits a call cancels the call on the server.
        call = asyncio.create_task(client.call_tool("slow", {"steps": 100, "delay_ms": 100}))
        await asyncio.sleep(0.3)
        call.cancel()
        await asyncio.gather(call, return_exceptions=True)
    for watcher in watchers:
        watcher.cancel()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8080/mcp"))
