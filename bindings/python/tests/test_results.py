"""Results as classes with attributes; `to_dict()` gives the server's JSON back."""

from __future__ import annotations

from collections.abc import Callable

from mcp_resume import Client
from scripted_server import MIXED, ScriptedServer


async def test_content_items_of_every_type(scripted: Callable[..., ScriptedServer]) -> None:
    server = scripted("legacy")
    async with Client(server.url, era="legacy", open_listen_stream=False) as client:
        result = await client.call_tool("mixed")
    assert result.is_error and result.meta == {"k": 1} and result.structured_content is None
    assert result.text == "hello"
    text, image, audio, link, embedded, unknown = result.content
    assert (text.type, text.text) == ("text", "hello")
    assert (image.type, image.data, image.mime_type) == ("image", "iVBORw0K", "image/png")
    assert (audio.type, audio.mime_type) == ("audio", "audio/wav")
    assert (link.type, link.uri, link.mime_type) == ("resource_link", "file:///a.txt", "text/plain")
    assert (embedded.type, embedded.uri, embedded.data) == ("resource", "file:///b.bin", "AAE=")
    assert unknown.type == "hologram" and unknown.text is None
    assert [item.to_dict() for item in result.content] == MIXED
    assert result.to_dict()["content"] == MIXED


async def test_to_dict_is_a_fresh_copy(scripted: Callable[..., ScriptedServer]) -> None:
    server = scripted("legacy")
    async with Client(server.url, era="legacy", open_listen_stream=False) as client:
        info = await client.connect()
        [echo] = [t for t in await client.list_tools() if t.name == "echo"]
        result = await client.call_tool("echo", {"text": "x"})
    first = result.to_dict()
    first["content"].clear()
    assert result.to_dict()["content"] == [{"type": "text", "text": "x"}]
    assert info.server_name == "scripted" and info.to_dict()["serverInfo"]["version"] == "1"
    assert echo.input_schema == {"type": "object"} and echo.output_schema is None
    assert not echo.is_idempotent_hint and echo.to_dict()["name"] == "echo"
    assert "echo" in repr(echo) and "x" in repr(result)


async def test_results_compare_by_value_pickle_and_expose_meta_icons_annotations(
    scripted: Callable[..., ScriptedServer],
) -> None:
    import pickle

    server = scripted("legacy")
    async with Client(server.url, era="legacy", open_listen_stream=False) as client:
        first = await client.call_tool("mixed")
        second = await client.call_tool("mixed")
        tools = await client.list_tools()
    # Two answers sent alike are equal; a different one is not.
    assert first == second
    assert first.content[0] == second.content[0]
    assert first.content[0] != first.content[1]
    assert first != first.content[0]
    for value in (first, first.content[0], tools[0]):
        copy = pickle.loads(pickle.dumps(value))
        assert type(copy) is type(value) and copy == value
        assert copy.to_dict() == value.to_dict()
    echo = next(t for t in tools if t.name == "echo")
    assert echo.meta == {"vendor/rank": 1}
    assert echo.icons == [{"src": "https://example.com/echo.png", "mimeType": "image/png"}]
    assert first.content[0].annotations == {"priority": 1}
    for item in first.content:
        assert item.annotations == item.to_dict().get("annotations")
        assert item.meta == item.to_dict().get("_meta")
