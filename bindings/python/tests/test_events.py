"""Session events and server notifications as async iterators."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from conftest import Cluster
from mcp_resume import Client, Era, ExtensionStatus, ServerNotification
from workload import drain


async def test_events_report_the_connection_and_a_resume(cluster: Callable[..., Cluster]) -> None:
    c = cluster("replicated", "--idle-timeout-ms", "0", "--cut-after-events", "3")
    client = Client(c.url, open_listen_stream=False)
    events = client.events()
    assert client.era is None and client.extension_status is None
    info = await client.connect()
    assert info.server_name == "mcp-resume-mock" and info.protocol_version == "2025-11-25"
    assert info.to_dict()["serverInfo"]["name"] == "mcp-resume-mock"
    result = await client.call_tool("slow", {"steps": 4, "delay_ms": 10})
    assert result.text == "slow: done after 4 steps"
    status = client.extension_status
    assert isinstance(status, ExtensionStatus)
    assert status.advertised and status.capability_hash and status.idempotency
    assert status.to_dict()["sequenced_event_ids"] is True
    await client.close()
    seen = await drain(events)
    types = [e.type for e in seen]
    assert types[0] == "connected", types
    assert "resumed" in types and "closed" in types, types
    [era] = [e for e in seen if e.type == "era_detected"]
    assert era.era is Era.LEGACY and era.era == "legacy"
    [resumed] = [e for e in seen if e.type == "resumed"]
    assert resumed.last_event_id and resumed.call is None
    assert resumed.to_dict() == {"type": "resumed", "last_event_id": resumed.last_event_id}
    assert client.era is Era.LEGACY
    assert events.missed == 0


async def test_progress_notifications_name_their_call(cluster: Callable[..., Cluster]) -> None:
    c = cluster("replicated", "--idle-timeout-ms", "0")
    async with Client(c.url, open_listen_stream=False) as client:
        notifications = client.notifications()
        received: list[ServerNotification] = []

        async def collect() -> None:
            async for n in notifications:
                received.append(n)

        collector = asyncio.create_task(collect())
        await client.call_tool("slow", {"steps": 3, "delay_ms": 5}, progress="tok-1")
    # The close ends the stream after every notification that came before it: the count
    # below is all of the call's progress.
    await asyncio.wait_for(collector, 10)
    progress = [n for n in received if n.method == "notifications/progress"]
    assert len(progress) == 3, received
    assert {n.progress_token for n in progress} == {"tok-1"}
    assert all(n.call is not None for n in progress)
    assert progress[0].to_dict()["params"]["progressToken"] == "tok-1"


async def test_event_iteration_ends_when_the_client_is_gone(
    cluster: Callable[..., Cluster],
) -> None:
    c = cluster("replicated", "--idle-timeout-ms", "0")
    client = Client(c.url, open_listen_stream=False)
    events = client.events()
    await client.connect()
    del client  # the last handle: the driver stops and the stream ends
    seen = [e.type async for e in events]
    assert "connected" in seen, seen


async def test_event_iteration_ends_when_the_client_is_closed(
    cluster: Callable[..., Cluster],
) -> None:
    c = cluster("replicated", "--idle-timeout-ms", "0")
    client = Client(c.url, open_listen_stream=False)
    events = client.events()
    notifications = client.notifications()
    await client.connect()
    await client.close()
    # The client is still referenced: the close ends the streams.
    seen = await asyncio.wait_for(_types(events), 10)
    assert seen[-1] == "closed", seen
    assert await asyncio.wait_for(_types(notifications), 10) == []
    assert client is not None


async def _types(stream: Any) -> list[str]:
    return [getattr(item, "type", getattr(item, "method", "")) async for item in stream]


async def test_results_take_part_in_garbage_collection(cluster: Callable[..., Cluster]) -> None:
    import gc
    import weakref

    c = cluster("replicated", "--idle-timeout-ms", "0")
    async with Client(c.url, open_listen_stream=False) as client:
        result = await client.call_tool("generate", {"prompt": "x"})
    assert isinstance(result.structured_content, dict)
    result.structured_content["self"] = result  # a cycle through a JSON attribute
    alive = weakref.ref(result)
    del result
    gc.collect()
    assert alive() is None
