"""Bad configuration is refused at construction with InvalidConfigError (a ValueError too);
wrong types are TypeErrors, as Python expects."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest

import mcp_resume
from mcp_resume import (
    Client,
    ClosedError,
    Era,
    EraCache,
    InvalidConfigError,
    McpResumeError,
    ReconnectPolicy,
    ResendPolicy,
    RpcError,
)
from scripted_server import ScriptedServer

URL = "http://127.0.0.1:9/mcp"


@pytest.mark.parametrize(
    "url, kwargs",
    [
        ("not a url", {}),
        ("ftp://127.0.0.1/mcp", {}),
        (URL, {"headers": {"Mcp-Session-Id": "x"}}),
        (URL, {"headers": {"bad name": "x"}}),
        (URL, {"headers": [("X-Ok", "a\nb")]}),
        (URL, {"call_timeout": 0}),
        (URL, {"call_timeout": -1}),
        (URL, {"call_timeout": float("nan")}),
        (URL, {"connect_timeout": 0}),
        (URL, {"max_event_size": 0}),
        (URL, {"max_body_size": -5}),
        (URL, {"protocol_version": "1999-01-01"}),
        (URL, {"protocol_version": "2026-07-28"}),
        (URL, {"era": "future"}),
        (URL, {"resend_policy": "always"}),
        (URL, {"capabilities": [1, 2]}),
        (URL, {"client_info": ("", "1")}),
        (URL, {"bearer_token": ""}),
    ],
)
def test_invalid_configuration_raises_at_construction(url: str, kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidConfigError) as info:
        Client(url, **kwargs)
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, McpResumeError)
    assert info.value.kind == "invalid_config"
    assert str(info.value)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"multiplier": 0.5},
        {"jitter": 2.0},
        {"max_attempts": 0},
        {"initial_delay": 1.0, "max_delay": 0.5},
        {"initial_delay": -1.0},
    ],
)
def test_invalid_reconnect_policy(kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidConfigError):
        ReconnectPolicy(**kwargs)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"headers": 42},
        {"headers": [("only-a-name",)]},
        {"on_server_request": "not callable"},
        {"call_timeout": "soon"},
        {"open_listen_stream": "yes"},
    ],
)
def test_wrong_types_are_type_errors(kwargs: dict[str, Any]) -> None:
    with pytest.raises(TypeError):
        Client(URL, **kwargs)


def test_valid_configuration_touches_no_network() -> None:
    client = Client(
        URL,
        capabilities={"experimental": {"sampling": {"temperature": 0.2}}},
        client_info=("agent", "1.0"),
        protocol_version="2025-06-18",
        era=Era.LEGACY,
        era_cache=EraCache(),
        bearer_token="secret",
        headers=[("X-Trace", "a"), ("X-Trace", "b")],
        call_timeout=2.5,
        connect_timeout=1,
        reconnect=ReconnectPolicy(initial_delay=0.01),
        resend_policy=ResendPolicy.ASSUME_SERVER_DEDUPLICATES,
        max_event_size=1 << 20,
        max_body_size=1 << 20,
        open_listen_stream=False,
        jitter_seed=1,
    )
    assert client.url == URL and client.era is None
    assert "secret" not in repr(client)
    policy = ReconnectPolicy(max_attempts=3)
    assert policy.max_attempts == 3 and policy.initial_delay == pytest.approx(0.02)


def test_era_cache() -> None:
    cache = EraCache()
    assert cache.get("http://127.0.0.1:1/mcp") is None
    cache.remember("http://127.0.0.1:1/mcp", "modern")
    assert cache.get("http://127.0.0.1:1/other") is Era.MODERN
    cache.clear()
    assert cache.get("http://127.0.0.1:1/mcp") is None
    with pytest.raises(InvalidConfigError):
        cache.remember("http://127.0.0.1:1/mcp", "sideways")
    assert isinstance(EraCache.global_cache(), EraCache)


async def test_bad_call_options_raise_from_the_call(
    scripted: Callable[..., ScriptedServer],
) -> None:
    server = scripted("legacy")
    async with Client(server.url, era="legacy", open_listen_stream=False) as client:
        with pytest.raises(InvalidConfigError):
            await client.call_tool("echo", {"text": "x"}, idempotency_key="bad\nkey")
        with pytest.raises(InvalidConfigError):
            await client.call_tool("echo", {"text": "x"}, timeout=0)
        with pytest.raises(TypeError):
            await client.call_tool("echo", {"text": "x"}, idempotency_key=42)  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            await client.call_tool("echo", {"text": object()})
        with pytest.raises(TypeError):
            await client.request("tools/list", {"n": 2**70})
        ok = await client.call_tool("echo", {"text": "x"}, idempotency_key=uuid.uuid4())
        assert ok.text == "x"
        assert server.requests("tools/call")[-1]["params"]["_meta"]


async def test_every_call_fails_after_close(scripted: Callable[..., ScriptedServer]) -> None:
    server = scripted("legacy")
    client = Client(server.url, era="legacy", open_listen_stream=False)
    await client.connect()
    await client.ping()
    await client.close()
    with pytest.raises(ClosedError) as info:
        await client.ping()
    assert info.value.kind == "closed"


async def test_unreachable_server_is_a_transport_error() -> None:
    client = Client(
        "http://127.0.0.1:9/mcp",
        era="legacy",
        call_timeout=2,
        reconnect=ReconnectPolicy(initial_delay=0.01, max_delay=0.02, max_attempts=2),
    )
    with pytest.raises(mcp_resume.TransportError) as info:
        await client.connect()
    assert info.value.kind == "transport" and info.value.retry_after is None


def test_version() -> None:
    assert mcp_resume.__version__


def test_exceptions_pickle_with_their_attributes() -> None:
    import pickle

    rpc = pickle.loads(pickle.dumps(RpcError(-32602, "bad", {"x": 1}, retry_after=1.5)))
    assert (rpc.code, rpc.message, rpc.data, rpc.retry_after) == (-32602, "bad", {"x": 1}, 1.5)
    assert str(rpc) == "JSON-RPC error -32602: bad"
    lost = pickle.loads(pickle.dumps(mcp_resume.OutcomeUnknownError("maybe ran")))
    assert type(lost) is mcp_resume.OutcomeUnknownError and lost.kind == "outcome_unknown"
    other = pickle.loads(pickle.dumps(McpResumeError("new", kind="future_kind")))
    assert other.kind == "future_kind" and other.message == "new"
    missing = pickle.loads(
        pickle.dumps(mcp_resume.MissingCapabilityError("m", code=-32021, data={"r": 1}))
    )
    assert (missing.code, missing.data) == (-32021, {"r": 1})
    assert repr(mcp_resume.ClosedError("x")).startswith("ClosedError(")
    assert mcp_resume.ClosedError.__module__ == "mcp_resume"


async def test_refused_credentials_raise_unauthorized_error_with_the_challenge(
    scripted: Callable[..., ScriptedServer],
) -> None:
    server = scripted("legacy")
    client = Client(server.url, era="legacy", bearer_token="expired")
    with pytest.raises(mcp_resume.UnauthorizedError) as info:
        await client.connect()
    challenge = info.value.auth_challenge
    assert info.value.kind == "unauthorized"
    assert challenge is not None
    assert challenge["status"] == 401 and challenge["error"] == "invalid_token"
    assert challenge["scope"] == "tools:call"
    assert challenge["resource_metadata"].endswith("/.well-known/oauth-protected-resource")
