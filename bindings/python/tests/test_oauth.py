"""MCP authorization from Python: the SDK's OAuth provider against an authorization server of
the test's own (`oauth_server.py`), with the client credentials grant, workload identity,
enterprise-managed authorization (an ID token exchanged at the IdP), and the authorization
code grant whose user step is a Python callable."""

from __future__ import annotations

import asyncio
import base64
import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from mcp_resume import Client, InvalidConfigError, OAuth
from oauth_server import (
    CLIENT_ID,
    CLIENT_SECRET,
    ID_TOKEN,
    IDENTITY_GRANT,
    JWT_BEARER,
    TOKEN_EXCHANGE,
    WORKLOAD_TOKEN,
    AuthServer,
)
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
    oauth = OAuth.client_credentials(CLIENT_ID, CLIENT_SECRET, issuer=auth.url)
    async with Client(server.url, era="legacy", open_listen_stream=False, oauth=oauth) as client:
        result = await client.call_tool("echo", {"text": "machine"})
    assert result.text == "machine"
    assert auth.grants == ["client_credentials"]


def jwt_part(token: str, index: int) -> dict[str, Any]:
    """One part of a compact JWT (0: the JOSE header, 1: the claims), decoded."""
    part = token.split(".")[index]
    decoded: dict[str, Any] = json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))
    return decoded


@pytest.mark.parametrize("offered", [True, False])
async def test_client_credentials_with_dpop(
    scripted: Callable[..., ScriptedServer], auth: AuthServer, offered: bool
) -> None:
    server = scripted("legacy")
    protect(server, auth)
    if offered:
        auth.dpop_algs = ["ES256"]
    oauth = OAuth.client_credentials(CLIENT_ID, CLIENT_SECRET, issuer=auth.url, dpop=True)
    async with Client(server.url, era="legacy", open_listen_stream=False, oauth=oauth) as client:
        result = await client.call_tool("echo", {"text": "bound"})
        assert (await client.call_tool("echo", {"text": "again"})).text == "again"
    assert result.text == "bound"
    if not offered:
        # An authorization server that does not offer DPoP grants `Bearer` tokens as usual.
        assert auth.token_proofs == [] and auth.dpop_bound == set() and auth.mcp_proofs == []
        return
    # The token request carried a proof of the process's key, for the token endpoint ...
    (token_proof,) = auth.token_proofs
    header = jwt_part(token_proof, 0)
    assert header["typ"] == "dpop+jwt" and header["alg"] == "ES256" and "jwk" in header
    assert jwt_part(token_proof, 1)["htm"] == "POST"
    assert jwt_part(token_proof, 1)["htu"] == f"{auth.url}/token"
    # ... and every MCP request presented the bound token with a fresh proof of the same key,
    # for the MCP endpoint, carrying the token's hash.
    assert len(auth.mcp_proofs) >= 3  # initialize, initialized, two calls
    assert all(token in auth.dpop_bound for token, _ in auth.mcp_proofs)
    claims = [jwt_part(proof, 1) for _, proof in auth.mcp_proofs]
    assert all(c["htm"] == "POST" and c["htu"] == server.url and c["ath"] for c in claims)
    assert len({c["jti"] for c in claims}) == len(claims), "a proof is used once"
    assert all(jwt_part(proof, 0)["jwk"] == header["jwk"] for _, proof in auth.mcp_proofs)


async def test_workload_identity(
    scripted: Callable[..., ScriptedServer], auth: AuthServer
) -> None:
    server = scripted("legacy")
    protect(server, auth)
    oauth = OAuth.workload_identity("workload-1", WORKLOAD_TOKEN, issuer=auth.url)
    assert repr(oauth) == f'OAuth.workload_identity(client_id="workload-1", issuer="{auth.url}")'
    async with Client(server.url, era="legacy", open_listen_stream=False, oauth=oauth) as client:
        result = await client.call_tool("echo", {"text": "workload"})
    assert result.text == "workload"
    assert auth.grants == [JWT_BEARER]
    assert auth.forms[0]["assertion"] == WORKLOAD_TOKEN
    assert auth.forms[0]["client_id"] == "workload-1"


async def test_identity_assertion(
    scripted: Callable[..., ScriptedServer], auth: AuthServer
) -> None:
    server = scripted("legacy")
    protect(server, auth)
    oauth = OAuth.identity_assertion(
        CLIENT_ID,
        CLIENT_SECRET,
        f"{auth.url}/idp/token",
        ID_TOKEN,
        issuer=auth.url,
        idp_client_id="idp-app",
    )
    async with Client(server.url, era="legacy", open_listen_stream=False, oauth=oauth) as client:
        result = await client.call_tool("echo", {"text": "enterprise"})
    assert result.text == "enterprise"
    # The ID token went to the IdP, for a grant meant for this authorization server and this
    # MCP server; the grant, never the ID token, went to the authorization server.
    assert auth.grants == [TOKEN_EXCHANGE, JWT_BEARER]
    exchange, bearer = auth.forms
    assert exchange["subject_token"] == ID_TOKEN
    assert exchange["audience"] == auth.url
    assert exchange["resource"] == server.url
    assert exchange["client_id"] == "idp-app"
    assert bearer["assertion"] == IDENTITY_GRANT
    assert ID_TOKEN not in bearer.values()
    assert auth.authorizations[1].startswith("Basic ")


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


async def test_machine_credentials_go_only_to_their_issuer(
    scripted: Callable[..., ScriptedServer], auth: AuthServer
) -> None:
    # Without the issuer, the MCP server would decide who receives the secret or the token.
    for build in (
        lambda: OAuth.client_credentials(CLIENT_ID, CLIENT_SECRET),
        lambda: OAuth.workload_identity("workload-1", WORKLOAD_TOKEN),
        lambda: OAuth.identity_assertion(CLIENT_ID, CLIENT_SECRET, f"{auth.url}/idp/token", ID_TOKEN),
    ):
        with pytest.raises(InvalidConfigError, match="issuer"):
            build()
    # Bound to another authorization server than the one the MCP server names: nothing is
    # sent anywhere.
    server = scripted("legacy")
    protect(server, auth)
    oauth = OAuth.client_credentials(CLIENT_ID, CLIENT_SECRET, issuer="https://as.example")
    client = Client(
        server.url, era="legacy", open_listen_stream=False, oauth=oauth, call_timeout=5.0
    )
    with pytest.raises(Exception) as raised:
        await client.connect()
    assert type(raised.value).__name__ == "UnauthorizedError"
    assert auth.grants == [] and auth.forms == []
    # The explicit opt-out trusts whichever server is named.
    trusting = OAuth.client_credentials(
        CLIENT_ID, CLIENT_SECRET, dangerous_trust_discovered_issuer=True
    )
    assert repr(trusting) == f'OAuth.client_credentials(client_id="{CLIENT_ID}")'


def test_oauth_and_a_token_provider_are_one_too_many() -> None:
    oauth = OAuth.client_credentials(CLIENT_ID, CLIENT_SECRET, issuer="https://as.example")
    with pytest.raises(InvalidConfigError, match="choose one"):
        Client("http://127.0.0.1:1/mcp", oauth=oauth, token_provider=lambda request: "t")
