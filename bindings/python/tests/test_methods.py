"""The typed MCP methods: resources, prompts, completion, logging, pages of lists; each
checked against what the scripted server received."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from mcp_resume import (
    Client,
    Completion,
    InvalidConfigError,
    LoggingLevel,
    Page,
    PromptReference,
    Resource,
    ResourceTemplateReference,
)
from scripted_server import PROMPTS, RESOURCES_PAGE_1, RESOURCES_PAGE_2, TEMPLATES, ScriptedServer


@pytest.fixture
async def connected(
    scripted: Callable[..., ScriptedServer],
) -> AsyncIterator[tuple[Client, ScriptedServer]]:
    server = scripted("legacy")
    async with Client(server.url, era="legacy", open_listen_stream=False) as client:
        yield client, server


def params_of(server: ScriptedServer, method: str) -> list[Any]:
    return [m.get("params") for m in server.requests(method)]


async def test_list_resources_follows_the_cursor_to_the_end(
    connected: tuple[Client, ScriptedServer],
) -> None:
    client, server = connected
    resources = await client.list_resources()
    assert params_of(server, "resources/list") == [{}, {"cursor": "page-2"}]
    assert [r.uri for r in resources] == ["file:///a.txt", "file:///b.bin", "mem://c"]
    a, b, c = resources
    assert isinstance(a, Resource)
    assert (a.name, a.mime_type, a.size, a.title) == ("a", "text/plain", 5, None)
    assert a.annotations == {"audience": ["user"], "priority": 0.5}
    assert (b.title, b.meta, b.size) == ("Bee", {"k": "v"}, None)
    assert c.description == "third"
    # The server's JSON, members the SDK does not model (icons) included; a fresh copy.
    assert [r.to_dict() for r in resources] == RESOURCES_PAGE_1 + RESOURCES_PAGE_2
    a.to_dict()["name"] = "changed"
    assert a.to_dict()["name"] == "a"


async def test_list_pages_one_at_a_time(connected: tuple[Client, ScriptedServer]) -> None:
    client, server = connected
    first = await client.list_resources_page()
    assert isinstance(first, Page)
    assert [r.name for r in first.items] == ["a", "b"]
    assert first.next_cursor == "page-2"
    assert first.to_dict()["nextCursor"] == "page-2"
    assert first.next_cursor is not None
    second = await client.list_resources_page(first.next_cursor)
    assert [r.name for r in second.items] == ["c"] and second.next_cursor is None
    assert params_of(server, "resources/list") == [{}, {"cursor": "page-2"}]

    tools = await client.list_tools_page()
    assert [t.name for t in tools.items][:2] == ["echo", "ask"] and tools.next_cursor is None
    prompts = await client.list_prompts_page(None)
    assert [p.name for p in prompts.items] == ["greet"]
    templates = await client.list_resource_templates_page()
    assert [t.name for t in templates.items] == ["logs"]
    assert params_of(server, "tools/list") == [{}]
    assert params_of(server, "prompts/list") == [{}]
    assert params_of(server, "resources/templates/list") == [{}]


async def test_resource_templates(connected: tuple[Client, ScriptedServer]) -> None:
    client, server = connected
    [template] = await client.list_resource_templates()
    assert template.uri_template == "file:///logs/{day}.log"
    assert (template.name, template.mime_type, template.title) == ("logs", "text/plain", None)
    assert template.to_dict() == TEMPLATES[0]
    assert len(server.requests("resources/templates/list")) == 1


async def test_read_resource(connected: tuple[Client, ScriptedServer]) -> None:
    client, server = connected
    result = await client.read_resource("file:///a.txt")
    assert params_of(server, "resources/read") == [{"uri": "file:///a.txt"}]
    text, binary, more = result.contents
    assert (text.uri, text.mime_type, text.text, text.blob) == (
        "file:///a.txt", "text/plain", "text of file:///a.txt", None)
    assert (binary.uri, binary.blob, binary.text) == ("file:///a.txt#2", "AAE=", None)
    assert binary.mime_type == "application/octet-stream"
    assert result.text == "text of file:///a.txt\nmore"
    assert result.meta == {"read": 1}
    assert result.to_dict()["contents"][1] == binary.to_dict()


async def test_subscribe_and_unsubscribe_reach_the_server(
    connected: tuple[Client, ScriptedServer],
) -> None:
    client, server = connected
    assert await client.subscribe_resource("file:///a.txt") is None
    await client.subscribe_resource("mem://c")
    await client.unsubscribe_resource("file:///a.txt")
    assert params_of(server, "resources/subscribe") == [{"uri": "file:///a.txt"},
                                                        {"uri": "mem://c"}]
    assert params_of(server, "resources/unsubscribe") == [{"uri": "file:///a.txt"}]


async def test_prompts(connected: tuple[Client, ScriptedServer]) -> None:
    client, server = connected
    [prompt] = await client.list_prompts()
    assert (prompt.name, prompt.title, prompt.description) == ("greet", "Greeting", "says hello")
    assert [(a.name, a.required) for a in prompt.arguments] == [("who", True), ("style", None)]
    assert prompt.to_dict() == PROMPTS[0]
    assert prompt.arguments[0].to_dict() == {"name": "who", "required": True}

    rendered = await client.get_prompt("greet", {"who": "Ada", "style": "formal"})
    bare = await client.get_prompt("greet")
    assert params_of(server, "prompts/get") == [
        {"name": "greet", "arguments": {"who": "Ada", "style": "formal"}},
        {"name": "greet"},
    ]
    assert rendered.description == "greet rendered"
    user, assistant = rendered.messages
    assert (user.role, user.content.type, user.content.text) == ("user", "text",
                                                                  "style=formal, who=Ada")
    assert (assistant.role, assistant.content.type) == ("assistant", "resource_link")
    assert assistant.content.uri == "file:///a.txt"
    assert rendered.to_dict()["messages"][1] == assistant.to_dict()
    assert bare.messages[0].content.text == ""
    with pytest.raises(TypeError):
        await client.get_prompt("greet", {"who": 3})  # type: ignore[dict-item]


async def test_complete_with_each_kind_of_reference(
    connected: tuple[Client, ScriptedServer],
) -> None:
    client, server = connected
    by_prompt = await client.complete(PromptReference("greet"), "style", "fo",
                                      context={"who": "Ada"})
    by_template = await client.complete(ResourceTemplateReference("file:///logs/{day}.log"),
                                        "day", "2026")
    by_dict = await client.complete({"type": "ref/prompt", "name": "greet"}, "who", "A")
    assert params_of(server, "completion/complete") == [
        {"ref": {"type": "ref/prompt", "name": "greet"},
         "argument": {"name": "style", "value": "fo"},
         "context": {"arguments": {"who": "Ada"}}},
        {"ref": {"type": "ref/resource", "uri": "file:///logs/{day}.log"},
         "argument": {"name": "day", "value": "2026"}},
        {"ref": {"type": "ref/prompt", "name": "greet"},
         "argument": {"name": "who", "value": "A"}},
    ]
    assert isinstance(by_prompt, Completion)
    assert by_prompt.values == ["fo-greet-style", "who=Ada"]
    assert (by_prompt.total, by_prompt.has_more) == (10, True)
    assert by_prompt.to_dict() == {"values": ["fo-greet-style", "who=Ada"], "total": 10,
                                   "hasMore": True}
    assert by_template.values == ["2026-file:///logs/{day}.log-day"]
    assert by_dict.values == ["A-greet-who"]
    assert PromptReference("greet").to_dict() == {"type": "ref/prompt", "name": "greet"}
    for bad in ({"type": "ref/other", "name": "x"}, {"name": "x"}, "greet"):
        with pytest.raises(TypeError):
            await client.complete(bad, "a", "b")  # type: ignore[arg-type]
    assert len(server.requests("completion/complete")) == 3


async def test_set_logging_level(connected: tuple[Client, ScriptedServer]) -> None:
    client, server = connected
    await client.set_logging_level(LoggingLevel.WARNING)
    await client.set_logging_level("debug")
    with pytest.raises(InvalidConfigError):
        await client.set_logging_level("loud")
    assert params_of(server, "logging/setLevel") == [{"level": "warning"}, {"level": "debug"}]


async def test_typed_results_compare_by_value_and_pickle(
    connected: tuple[Client, ScriptedServer],
) -> None:
    import pickle

    client, _ = connected
    values: list[Any] = [
        (await client.list_resources())[0],
        (await client.list_resource_templates())[0],
        await client.read_resource("file:///a.txt"),
        (await client.list_prompts())[0],
        await client.get_prompt("greet", {"who": "Ada"}),
        await client.complete(PromptReference("greet"), "style", "fo"),
    ]
    for value in values:
        copy = pickle.loads(pickle.dumps(value))
        assert type(copy) is type(value), value
        assert copy == value and copy.to_dict() == value.to_dict()
    # Another answer is another value.
    assert values[0] != (await client.list_resources())[1]
    assert await client.read_resource("file:///a.txt") == values[2]
