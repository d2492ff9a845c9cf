"""MCP authorization from Python: the SDK's OAuth provider against an authorization server of
the test's own (`oauth_server.py`), with the client credentials grant and with the
authorization code grant whose user step is a Python callable."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator

import pytest

from mcp_resume import Client, OAuth
from oauth_server import CLIENT_ID, CLIENT_SECRET, JWT_BEARER, WORKLOAD_TOKEN, AuthServer
from scripted_server import ScriptedServer


@pytest.fixture
def auth() -> Iterator[AuthServer]:
    server = AuthServer()
    yield server
    server.stop()


def protect(server: ScriptedServer, auth: AuthServer) -> None:
    server.auth = auth
    auth.resource = server.url


async def test_client_credentials(
    scripted: Callable[..., ScriptedServer], auth: AuthServer
) -> None:
    server = scripted("legacy")
    protect(server, auth)
    oauth = OAuth.client_credentials(CLIENT_ID, CLIENT_SECRET)
    async with Client(server.url, era="legacy", open_listen_stream=False, oauth=oauth) as client:
        result = await client.call_tool("echo", {"text": "machine"})
    assert result.text == "machine"
    assert auth.grants == ["client_credentials"]


async def test_workload_identity(
    scripted: Callable[..., ScriptedServer], auth: AuthServer
) -> None:
    server = scripted("legacy")
    protect(server, auth)
    oauth = OAuth.workload_identity("workload-1", WORKLOAD_TOKEN)
    assert repr(oauth) == 'OAuth.workload_identity(client_id="workload-1")'
    async with Client(server.url, era="legacy", open_listen_stream=False, oauth=oauth) as client:
        result = await client.call_tool("echo", {"text": "workload"})
    assert result.text == "workload"
    assert auth.grants == [JWT_BEARER]
    assert auth.forms[0]["assertion"] == WORKLOAD_TOKEN
    assert auth.forms[0]["client_id"] == "workload-1"


async def test_authorization_code_with_a_python_user_step(
    scripted: Callable[..., ScriptedServer], auth: AuthServer
) -> None:
    server = scripted("legacy")
    protect(server, auth)
    shown: list[str] = []
    loop_thread = threading.get_ident()

    async def authorize(url: str) -> str:
        # A desktop agent opens a browser here and waits for the redirect.
        assert threading.get_ident() == loop_thread
        shown.append(url)
        await asyncio.sleep(0)
        return auth.approve(url)

    oauth = OAuth.authorization_code(authorize, redirect_uri="http://127.0.0.1:9/callback")
    async with Client(server.url, era="legacy", open_listen_stream=False, oauth=oauth) as client:
        result = await client.call_tool("echo", {"text": "user"})
    assert result.text == "user"
    assert len(shown) == 1 and shown[0].startswith(f"{auth.url}/authorize?")
    assert "code_challenge_method=S256" in shown[0]
    assert auth.grants == ["authorization_code"]


async def test_a_refused_authorization_fails_the_call_explicitly(
    scripted: Callable[..., ScriptedServer], auth: AuthServer
) -> None:
    server = scripted("legacy")
    protect(server, auth)

    def authorize(url: str) -> str:
        raise PermissionError("the user closed the window")

    oauth = OAuth.authorization_code(authorize)
    client = Client(
        server.url, era="legacy", open_listen_stream=False, oauth=oauth, call_timeout=2.0
    )
    with pytest.raises(Exception) as raised:
        await client.connect()
    assert type(raised.value).__name__ in ("UnauthorizedError", "McpTimeoutError", "TransportError")
    assert server.requests("tools/call") == []
