"""A token provider in Python: asked for each request's token on the client's event loop,
and once more, with the server's challenge, after a 401."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

from mcp_resume import Client
from scripted_server import ScriptedServer


async def test_an_async_provider_is_asked_again_after_a_401(
    scripted: Callable[..., ScriptedServer],
) -> None:
    server = scripted("legacy")
    asked: list[dict[str, Any]] = []
    loop_thread = threading.get_ident()

    async def provider(request: dict[str, Any]) -> str:
        assert threading.get_ident() == loop_thread
        await asyncio.sleep(0)
        asked.append(request)
        # The scripted server refuses "expired" with 401 and a challenge.
        return "fresh" if request["refresh"] else "expired"

    async with Client(
        server.url, era="legacy", open_listen_stream=False, token_provider=provider
    ) as client:
        result = await client.call_tool("echo", {"text": "hi"})
    assert result.text == "hi"
    assert asked[0]["refresh"] is False and asked[0]["challenge"] is None
    assert asked[0]["url"] == server.url
    refreshed = next(r for r in asked if r["refresh"])
    assert refreshed["refused_token"] == "expired"
    assert refreshed["challenge"]["scope"] == "tools:call"
    assert refreshed["challenge"]["error"] == "invalid_token"


async def test_a_plain_function_provider_and_its_failure(
    scripted: Callable[..., ScriptedServer],
) -> None:
    server = scripted("legacy")
    vault_open = True

    def provider(request: dict[str, Any]) -> str:
        if not vault_open:
            raise LookupError("the vault is sealed")
        return "good"

    client = Client(
        server.url,
        era="legacy",
        open_listen_stream=False,
        token_provider=provider,
        call_timeout=1.0,
    )
    await client.connect()
    vault_open = False
    # Every later request finds no token: it is never sent, and the call fails in time.
    try:
        await client.call_tool("echo", {"text": "x"})
    except Exception as e:  # noqa: BLE001 - the kind is what matters
        assert "token" in str(e).lower() or type(e).__name__ == "McpTimeoutError", e
    else:
        raise AssertionError("a call without a token succeeded")
    assert server.requests("tools/call") == []
