"""Server-to-client requests answered by Python callbacks, in both eras."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
import textwrap
from collections.abc import Callable
from typing import Any

import pytest

from mcp_resume import Client, MissingCapabilityError, RpcError, ServerRequest
from scripted_server import ScriptedServer


async def test_async_handler_answers_a_sampling_request(
    scripted: Callable[..., ScriptedServer],
) -> None:
    server = scripted("legacy")
    seen: list[ServerRequest] = []
    client = Client(server.url, era="legacy", open_listen_stream=False)

    @client.on_server_request
    async def answer(request: ServerRequest) -> dict[str, Any]:
        seen.append(request)
        await asyncio.sleep(0.01)  # runs on this event loop
        return {"role": "assistant", "content": {"type": "text", "text": "from python"}}

    async with client:
        result = await client.call_tool("ask")
    assert [r.method for r in seen] == ["sampling/createMessage"]
    assert seen[0].id == "srv-1" and seen[0].params["maxTokens"] == 5
    assert seen[0].to_dict()["method"] == "sampling/createMessage"
    answer_msg = result.structured_content["answer"]
    assert answer_msg["result"]["content"]["text"] == "from python"


async def test_handler_given_at_construction_and_sync_handlers(
    scripted: Callable[..., ScriptedServer],
) -> None:
    server = scripted("legacy")

    def answer(request: ServerRequest) -> dict[str, Any]:
        return {"echo": request.method}

    async with Client(server.url, era="legacy", on_server_request=answer) as client:
        result = await client.call_tool("ask")
    assert result.structured_content["answer"]["result"] == {"echo": "sampling/createMessage"}


async def test_rpc_error_raised_by_the_handler_is_the_answer(
    scripted: Callable[..., ScriptedServer],
) -> None:
    server = scripted("legacy")
    client = Client(server.url, era="legacy")

    @client.on_server_request
    async def refuse(request: ServerRequest) -> Any:
        raise RpcError(-32000, "user declined", {"why": "test"})

    async with client:
        result = await client.call_tool("ask")
    error = result.structured_content["answer"]["error"]
    assert error == {"code": -32000, "message": "user declined", "data": {"why": "test"}}


async def test_other_exceptions_are_logged_and_answered_as_internal_errors(
    scripted: Callable[..., ScriptedServer], caplog: pytest.LogCaptureFixture
) -> None:
    server = scripted("legacy")
    client = Client(server.url, era="legacy")

    @client.on_server_request
    async def broken(request: ServerRequest) -> Any:
        raise KeyError("secret detail")

    with caplog.at_level(logging.ERROR, logger="mcp_resume"):
        async with client:
            result = await client.call_tool("ask")
    error = result.structured_content["answer"]["error"]
    assert error["code"] == -32603 and "secret" not in error["message"]
    assert any("sampling/createMessage" in r.getMessage() for r in caplog.records)


def run_python(script: str) -> subprocess.CompletedProcess[str]:
    """Runs `script` in a new interpreter: a conversion that overflowed the stack would abort
    that process, not the test run."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=60,
    )


async def test_a_handler_answer_that_holds_itself_is_an_internal_error_not_a_crash(
    scripted: Callable[..., ScriptedServer],
) -> None:
    server = scripted("legacy")
    child = await asyncio.to_thread(
        run_python,
        f"""
        import asyncio, json
        from mcp_resume import Client

        async def main():
            client = Client({server.url!r}, era="legacy")

            @client.on_server_request
            async def cyclic(request):
                answer = {{}}
                answer["self"] = answer
                return answer

            async with client:
                result = await client.call_tool("ask")
            print(json.dumps(result.structured_content["answer"]))

        asyncio.run(main())
        """,
    )
    assert child.returncode == 0, child.stderr
    answer = json.loads(child.stdout.strip().splitlines()[-1])
    assert answer["error"]["code"] == -32603
    assert "sampling/createMessage" in child.stderr  # logged, as any failed handler is


async def test_arguments_that_hold_themselves_raise_to_the_caller_not_crash(
    scripted: Callable[..., ScriptedServer],
) -> None:
    server = scripted("legacy")
    child = await asyncio.to_thread(
        run_python,
        f"""
        import asyncio
        from mcp_resume import Client

        async def main():
            cyclic = []
            cyclic.append(cyclic)
            deep = 0
            for _ in range(200_000):
                deep = {{"d": deep}}
            async with Client({server.url!r}, era="legacy") as client:
                for name, kwargs in [
                    ("arguments", {{"arguments": {{"a": cyclic}}}}),
                    ("meta", {{"meta": {{"k": cyclic}}}}),
                    ("progress", {{"progress": cyclic}}),
                    ("deep", {{"arguments": deep}}),
                ]:
                    try:
                        await client.call_tool("echo", **kwargs)
                    except (TypeError, ValueError) as e:
                        print(name, type(e).__name__)
                # Nesting within the bound still goes.
                nested = 0
                for _ in range(100):
                    nested = [nested]
                result = await client.call_tool("echo", {{"n": nested}})
                print("ok", result.is_error)

        asyncio.run(main())
        """,
    )
    assert child.returncode == 0, child.stderr
    lines = child.stdout.split()
    assert lines[:8] == [
        "arguments", "TypeError", "meta", "TypeError", "progress", "TypeError",
        "deep", "TypeError",
    ], child.stdout
    assert lines[8] == "ok", child.stdout


async def test_without_a_handler_the_server_gets_method_not_found(
    scripted: Callable[..., ScriptedServer],
) -> None:
    server = scripted("legacy")
    async with Client(server.url, era="legacy") as client:
        result = await client.call_tool("ask")
    assert result.structured_content["answer"]["error"]["code"] == -32601


async def test_handler_answers_modern_input_requests(
    scripted: Callable[..., ScriptedServer],
) -> None:
    """The modern era's multi round-trip requests go to the same handler."""
    server = scripted("modern")
    client = Client(server.url, era="modern")
    asked: list[str] = []

    @client.on_server_request
    async def elicit(request: ServerRequest) -> dict[str, Any]:
        asked.append(request.method)
        return {"action": "accept", "content": {}}

    async with client:
        assert str(client.era) == "modern"
        result = await client.call_tool("confirm", {}, idempotency_key="confirm-1")
    assert result.text == "accept"
    assert result.structured_content == {"state": "state-1"}
    assert asked == ["elicitation/create"]
    calls = server.requests("tools/call")
    assert len(calls) == 2
    assert calls[1]["params"]["requestState"] == "state-1"
    assert calls[0]["id"] != calls[1]["id"]


async def test_missing_capability_error_carries_the_servers_data(
    scripted: Callable[..., ScriptedServer],
) -> None:
    server = scripted("modern")
    async with Client(server.url, era="modern") as client:
        with pytest.raises(MissingCapabilityError) as info:
            await client.call_tool("needs_sampling")
    assert info.value.kind == "missing_capability"
    assert info.value.code == -32021
    assert info.value.data == {"requiredCapabilities": {"sampling": {}}}


def test_a_handler_referring_to_its_client_does_not_keep_it_alive() -> None:
    import gc
    import weakref

    def make() -> weakref.ref[Client]:
        client = Client("http://127.0.0.1:9/mcp")

        @client.on_server_request
        async def answer(request: ServerRequest) -> dict[str, Any]:
            return {"from": repr(client)}  # client -> handler -> client: a cycle

        return weakref.ref(client)

    alive = make()
    gc.collect()
    assert alive() is None


async def test_notify_request_and_ping_reach_the_server(
    scripted: Callable[..., ScriptedServer],
) -> None:
    server = scripted("legacy")
    async with Client(server.url, era="legacy", open_listen_stream=False) as client:
        await client.notify("notifications/roots/list_changed", {"why": "test"})
        listed = await client.request("tools/list", {})
        await client.ping()
        for _ in range(50):  # a notification is queued, not awaited to delivery
            if server.requests("notifications/roots/list_changed"):
                break
            await asyncio.sleep(0.02)
    assert [t["name"] for t in listed["tools"]][:2] == ["echo", "ask"]
    [note] = server.requests("notifications/roots/list_changed")
    assert note["params"] == {"why": "test"}
    assert len(server.requests("ping")) == 1
