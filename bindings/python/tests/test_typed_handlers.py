"""Typed handlers of server requests (`on_sampling`, `on_elicitation`, `on_roots`): the
capabilities they declare at `initialize`, the typed requests they get, the answers the
server receives."""

from __future__ import annotations

import asyncio
import gc
import itertools
import logging
import weakref
from collections.abc import Callable
from typing import Any

import pytest

from mcp_resume import (
    Client,
    CreateMessageRequest,
    CreateMessageResult,
    ElicitRequest,
    ElicitResult,
    InvalidConfigError,
    ListRootsRequest,
    OutcomeUnknownError,
    Root,
    RpcError,
    ServerRequest,
)
from scripted_server import ScriptedServer

SAMPLING = {
    "method": "sampling/createMessage",
    "params": {
        "messages": [
            {"role": "user", "content": {"type": "text", "text": "capital of France?"}},
            {"role": "assistant", "content": [{"type": "text", "text": "thinking"},
                                              {"type": "tool_use", "id": "t1", "name": "f",
                                               "input": {}}]},
        ],
        "systemPrompt": "be brief",
        "maxTokens": 20,
        "temperature": 0.5,
        "stopSequences": ["\n"],
        "modelPreferences": {"hints": [{"name": "small"}]},
        "x-new": 1,
        "_meta": {"progressToken": "p"},
    },
}
ELICITATION = {
    "method": "elicitation/create",
    "params": {"message": "your name?",
               "requestedSchema": {"type": "object",
                                   "properties": {"name": {"type": "string"}}}},
}
ROOTS = {"method": "roots/list", "params": {}}


def answer_of(result: Any) -> dict[str, Any]:
    """What the server received in answer to its request (the `ask` tool's result)."""
    received: dict[str, Any] = result.structured_content["answer"]
    return received


def initialize_capabilities(server: ScriptedServer) -> dict[str, Any]:
    [init] = server.requests("initialize")
    capabilities: dict[str, Any] = init["params"]["capabilities"]
    return capabilities


async def test_sampling_handler_gets_a_typed_request_and_its_answer_is_sent(
    scripted: Callable[..., ScriptedServer],
) -> None:
    server = scripted("legacy")
    seen: list[CreateMessageRequest] = []
    client = Client(server.url, era="legacy", open_listen_stream=False)

    @client.on_sampling
    async def sample(request: CreateMessageRequest) -> CreateMessageResult:
        seen.append(request)
        await asyncio.sleep(0.01)  # runs on this event loop
        return CreateMessageResult("local-model", "Paris", stop_reason="endTurn")

    async with client:
        result = await client.call_tool("ask", SAMPLING)
    assert answer_of(result) == {"jsonrpc": "2.0", "id": "srv-1", "result": {
        "role": "assistant", "content": {"type": "text", "text": "Paris"},
        "model": "local-model", "stopReason": "endTurn"}}
    [request] = seen
    assert request.request_id == "srv-1"
    assert (request.max_tokens, request.system_prompt, request.temperature) == (20, "be brief",
                                                                               0.5)
    assert request.stop_sequences == ["\n"]
    assert request.model_preferences == {"hints": [{"name": "small"}]}
    assert request.meta == {"progressToken": "p"}
    assert request.include_context is None and request.tools is None
    user, assistant = request.messages
    assert (user.role, user.text, [c.type for c in user.content]) == (
        "user", "capital of France?", ["text"])
    assert [c.type for c in assistant.content] == ["text", "tool_use"]
    assert assistant.text == "thinking"
    # The params as sent, members the SDK does not model included.
    assert request.to_dict() == SAMPLING["params"]
    assert assistant.to_dict() == SAMPLING["params"]["messages"][1]  # type: ignore[index]


async def test_elicitation_and_roots_handlers_plain_functions_and_dicts(
    scripted: Callable[..., ScriptedServer],
) -> None:
    server = scripted("legacy")
    elicited: list[ElicitRequest] = []
    roots_asked: list[ListRootsRequest] = []

    def elicit(request: ElicitRequest) -> ElicitResult:
        elicited.append(request)
        return ElicitResult.accept({"name": "Ada"})

    def roots(request: ListRootsRequest) -> list[Any]:
        roots_asked.append(request)
        return [Root("file:///work", "work"), "file:///tmp",
                {"uri": "file:///data", "name": "data", "_meta": {"k": 1}}]

    async with Client(server.url, era="legacy", open_listen_stream=False,
                      on_elicitation=elicit, on_roots=roots) as client:
        elicitation = await client.call_tool("ask", ELICITATION)
        listed = await client.call_tool("ask", ROOTS)

    assert answer_of(elicitation)["result"] == {"action": "accept", "content": {"name": "Ada"}}
    [request] = elicited
    assert (request.message, request.mode, request.is_url_mode) == ("your name?", None, False)
    assert request.requested_schema == ELICITATION["params"]["requestedSchema"]  # type: ignore[index]
    assert request.request_id == "srv-1" and request.to_dict() == ELICITATION["params"]

    assert answer_of(listed)["result"] == {"roots": [
        {"uri": "file:///work", "name": "work"},
        {"uri": "file:///tmp"},
        {"uri": "file:///data", "name": "data", "_meta": {"k": 1}},
    ]}
    [asked] = roots_asked
    assert asked.request_id == "srv-2" and asked.to_dict() == {}


async def test_answers_given_as_dicts_and_the_answer_classes(
    scripted: Callable[..., ScriptedServer],
) -> None:
    server = scripted("legacy")

    async def sample(request: CreateMessageRequest) -> dict[str, Any]:
        return {"role": "assistant", "model": "m",
                "content": {"type": "image", "data": "AA==", "mimeType": "image/png"}}

    async def elicit(request: ElicitRequest) -> dict[str, Any]:
        return {"action": "decline"}

    async with Client(server.url, era="legacy", open_listen_stream=False,
                      on_sampling=sample, on_elicitation=elicit) as client:
        sampled = await client.call_tool("ask")
        declined = await client.call_tool("ask", ELICITATION)
    assert answer_of(sampled)["result"] == {
        "role": "assistant", "model": "m",
        "content": {"type": "image", "data": "AA==", "mimeType": "image/png"}}
    assert answer_of(declined)["result"] == {"action": "decline"}

    many = CreateMessageResult("m", [{"type": "text", "text": "a"},
                                     {"type": "text", "text": "b"}], meta={"k": 1})
    assert many.to_dict() == {"role": "assistant", "model": "m", "_meta": {"k": 1},
                              "content": [{"type": "text", "text": "a"},
                                          {"type": "text", "text": "b"}]}
    assert (many.model, many.stop_reason) == ("m", None)
    assert ElicitResult.cancel().to_dict() == {"action": "cancel"}
    assert ElicitResult.accept().to_dict() == {"action": "accept"}
    assert ElicitResult.accept({"x": 1}).content == {"x": 1}
    assert ElicitResult.decline().action == "decline"
    assert Root("file:///a").to_dict() == {"uri": "file:///a"}


@pytest.mark.parametrize(
    "registered",
    [set(c) for n in range(4) for c in itertools.combinations(
        ["sampling", "elicitation", "roots"], n)],
    ids=lambda r: "+".join(sorted(r)) or "none",
)
@pytest.mark.parametrize("how", ["keyword", "decorator"])
async def test_each_handler_declares_its_capability_at_initialize(
    scripted: Callable[..., ScriptedServer], registered: set[str], how: str,
) -> None:
    server = scripted("legacy")

    def handler(request: Any) -> Any:
        raise AssertionError("not called")

    keywords = {f"on_{name}": handler for name in registered} if how == "keyword" else {}
    client = Client(server.url, era="legacy", open_listen_stream=False,
                    on_server_request=handler, **keywords)
    if how == "decorator":
        for name in registered:
            getattr(client, f"on_{name}")(handler)
    async with client:
        pass
    capabilities = initialize_capabilities(server)
    assert set(capabilities) == registered
    if "roots" in registered:
        assert capabilities["roots"] == {"listChanged": True}
    if "elicitation" in registered:
        assert capabilities["elicitation"] == {"form": {}}


async def test_declared_capabilities_win_over_what_handlers_imply(
    scripted: Callable[..., ScriptedServer],
) -> None:
    server = scripted("legacy")
    client = Client(server.url, era="legacy", open_listen_stream=False,
                    capabilities={"roots": {"listChanged": False},
                                  "elicitation": {"url": {}}, "experimental": {"x": 1}})
    client.on_roots(lambda request: [])
    client.on_elicitation(lambda request: {"action": "cancel"})
    async with client:
        pass
    assert initialize_capabilities(server) == {
        "roots": {"listChanged": False},
        "elicitation": {"url": {}, "form": {}},
        "experimental": {"x": 1},
    }


async def test_a_typed_handler_cannot_be_added_once_the_client_is_used(
    scripted: Callable[..., ScriptedServer],
) -> None:
    server = scripted("legacy")
    first: list[str] = []
    client = Client(server.url, era="legacy", open_listen_stream=False,
                    on_sampling=lambda request: first.append("first") or {
                        "role": "assistant", "model": "1",
                        "content": {"type": "text", "text": "first"}})
    async with client:
        with pytest.raises(InvalidConfigError, match="on_elicitation"):
            client.on_elicitation(lambda request: {"action": "cancel"})
        with pytest.raises(InvalidConfigError, match="on_roots"):
            client.on_roots(lambda request: [])
        await client.call_tool("ask")

        # A handler the client was built with can be replaced, and removed.
        @client.on_sampling
        def second(request: CreateMessageRequest) -> CreateMessageResult:
            return CreateMessageResult("2", "second")

        replaced = await client.call_tool("ask")
        client._raw.sampling_handler = None
        removed = await client.call_tool("ask")
        client.on_sampling(second)  # declared at initialize: allowed again
    assert first == ["first"]
    assert answer_of(replaced)["result"]["model"] == "2"
    assert answer_of(removed)["error"]["code"] == -32601
    assert set(initialize_capabilities(server)) == {"sampling"}
    assert client._raw.elicitation_handler is None and client._raw.roots_handler is None
    with pytest.raises(TypeError):
        Client(server.url, on_roots="not callable")  # type: ignore[arg-type]


async def test_typed_handlers_take_their_methods_the_generic_one_the_rest(
    scripted: Callable[..., ScriptedServer],
) -> None:
    server = scripted("legacy")
    generic: list[str] = []

    def fallback(request: ServerRequest) -> dict[str, Any]:
        generic.append(request.method)
        return {"generic": True}

    async with Client(server.url, era="legacy", open_listen_stream=False,
                      on_server_request=fallback,
                      on_roots=lambda request: ["file:///r"]) as client:
        roots = await client.call_tool("ask", ROOTS)
        sampled = await client.call_tool("ask")
    assert answer_of(roots)["result"] == {"roots": [{"uri": "file:///r"}]}
    assert answer_of(sampled)["result"] == {"generic": True}
    assert generic == ["sampling/createMessage"]


async def test_typed_handler_errors(
    scripted: Callable[..., ScriptedServer], caplog: pytest.LogCaptureFixture,
) -> None:
    server = scripted("legacy")

    async def refuse(request: ElicitRequest) -> ElicitResult:
        raise RpcError(-32000, "user busy", {"retry": True})

    def malformed(request: CreateMessageRequest) -> dict[str, Any]:
        return {"model": "m"}  # no role, no content

    def broken(request: ListRootsRequest) -> list[Root]:
        raise KeyError("secret detail")

    with caplog.at_level(logging.ERROR, logger="mcp_resume"):
        async with Client(server.url, era="legacy", open_listen_stream=False,
                          on_elicitation=refuse, on_sampling=malformed,
                          on_roots=broken) as client:
            refused = await client.call_tool("ask", ELICITATION)
            bad_answer = await client.call_tool("ask")
            raised = await client.call_tool("ask", ROOTS)
            # Params that do not fit the typed request never reach the handler.
            bad_params = await client.call_tool(
                "ask", {"method": "sampling/createMessage", "params": {"messages": 3}})
    assert answer_of(refused)["error"] == {"code": -32000, "message": "user busy",
                                           "data": {"retry": True}}
    assert answer_of(bad_answer)["error"]["code"] == -32603
    assert answer_of(raised)["error"]["code"] == -32603
    assert "secret" not in answer_of(raised)["error"]["message"]
    assert answer_of(bad_params)["error"]["code"] == -32602
    logged = [r.getMessage() for r in caplog.records]
    assert any("sampling/createMessage" in m for m in logged)
    assert any("roots/list" in m for m in logged)


async def test_typed_elicitation_answers_modern_input_requests(
    scripted: Callable[..., ScriptedServer],
) -> None:
    server = scripted("modern")
    asked: list[str] = []
    client = Client(server.url, era="modern")

    @client.on_elicitation
    async def elicit(request: ElicitRequest) -> ElicitResult:
        asked.append(request.message)
        return ElicitResult.accept({})

    async with client:
        result = await client.call_tool("confirm", {}, idempotency_key="confirm-1")
    assert asked == ["proceed?"]
    assert result.text == "accept"
    calls = server.requests("tools/call")
    assert calls[1]["params"]["inputResponses"]["ok"] == {"action": "accept", "content": {}}


async def test_a_modern_input_the_handler_refused_ends_the_call_input_refused(
    scripted: Callable[..., ScriptedServer],
) -> None:
    server = scripted("modern")
    client = Client(server.url, era="modern")

    @client.on_elicitation
    async def refuse(request: ElicitRequest) -> ElicitResult:
        raise RpcError(-32000, "the user cannot be asked")

    async with client:
        with pytest.raises(OutcomeUnknownError) as raised:
            await client.call_tool("confirm", {}, idempotency_key="confirm-refused")
    assert raised.value.input_refused is True
    assert raised.value.may_have_run is True
    # Stopped at the input: never sent again, with or without an answer.
    assert len(server.requests("tools/call")) == 1
    # An error that is not a refused input says so.
    assert OutcomeUnknownError("interrupted").input_refused is False


async def test_notify_roots_changed_reaches_the_server(
    scripted: Callable[..., ScriptedServer],
) -> None:
    server = scripted("legacy")
    async with Client(server.url, era="legacy", open_listen_stream=False,
                      on_roots=lambda request: []) as client:
        await client.notify_roots_changed()
        for _ in range(50):  # a notification is queued, not awaited to delivery
            if server.requests("notifications/roots/list_changed"):
                break
            await asyncio.sleep(0.02)
    assert len(server.requests("notifications/roots/list_changed")) == 1


def test_typed_handlers_referring_to_their_client_do_not_keep_it_alive() -> None:
    def make() -> weakref.ref[Client]:
        client = Client("http://127.0.0.1:9/mcp")

        @client.on_sampling
        def sample(request: CreateMessageRequest) -> CreateMessageResult:
            return CreateMessageResult(repr(client), "x")  # a cycle through the handler

        @client.on_roots
        def roots(request: ListRootsRequest) -> list[str]:
            return [client.url]

        return weakref.ref(client)

    alive = make()
    gc.collect()
    assert alive() is None
