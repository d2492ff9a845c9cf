"""Agent frameworks from PyPI on `mcp_resume.bridge`, each through its own API and with no
language model in the loop (pydantic-ai's deterministic test models stand in for one):
langchain-mcp-adapters' tools and `MultiServerMCPClient`, the OpenAI Agents SDK's MCP server
class, FastMCP's client, and pydantic-ai's MCP toolset.

- Against the mock cluster binary, every stream cut: each call is checked on the cluster's
  oracle (it ran, once, under the session's own context).
- Against the official TypeScript SDK server killed and restarted in the middle of a call,
  each framework's own retry turned on: the server's log shows the call ran once and was
  never re-run, the application gets the explicit outcome, and the next call works.
- With the key derived from the framework's tool call id, against the cluster (which
  deduplicates keys): a retry of the same invocation is answered from the stored result.

The same file runs in a second virtualenv with `mcp` 2.x, FastMCP 4 and pydantic-ai on it
(`requirements-mcp2.txt`); tests of frameworks that virtualenv lacks are skipped there."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest

from conftest import Cluster, TsServer
from scripted_server import ScriptedServer
from mcp_resume.bridge import IDEMPOTENCY_META_KEY
from workload import TAG

T = TypeVar("T")
OUTCOME = "io.github.mcp-resume/outcome"


def needs(module: str) -> pytest.MarkDecorator:
    """Skips where the framework is not installed (each virtualenv has its own set)."""
    return pytest.mark.skipif(
        importlib.util.find_spec(module) is None, reason=f"{module} not in this virtualenv"
    )


async def interrupted(server: TsServer, call: Awaitable[T], tool: str = "block") -> T:
    """Runs `call`, kills the server once the tool runs, starts it again at the same URL,
    and returns what the call came to."""
    mark = server.mark()
    task = asyncio.ensure_future(call)
    await asyncio.to_thread(server.wait_for, "tool", after=mark, name=tool)
    await asyncio.to_thread(server.restart)
    return await asyncio.wait_for(task, 30)


def settle(server: TsServer) -> None:
    """Waits until the server's log holds everything it had under way: `/admin/mark` is
    logged after it, and every line logged before the mark's is read once the mark's is."""
    after = server.mark()
    server.admin("/admin/mark")
    server.wait_for("admin", after=after, path="/admin/mark")


def is_error(result: Any) -> bool:
    """`isError` (`mcp` 1.x) or `is_error` (2.x)."""
    return bool(getattr(result, "isError", None) or getattr(result, "is_error", False))


def may_have_run(text: str) -> bool:
    return "may or may not have run" in text and "outcome_unknown" in text

# Every stream is cut after 3 events, so recovery runs under each framework: on `replicated`
# the cut stream is resumed; on `strict` the resume is refused, the session re-initialized,
# and a keyed call re-sent (answered from the server's idempotency store).
ARGS = ("--idle-timeout-ms", "0", "--cut-after-events", "3")


def executions(oracle: dict[str, Any], tool: str) -> list[dict[str, Any]]:
    return [e for e in oracle["executions"] if e.get("tool") == tool]


def ran_right(oracle: dict[str, Any], tag: str) -> bool:
    """Ran once (a re-send answered from the idempotency store does not run again), under
    the session's own context."""
    runs = [e for e in oracle["executions"] if e.get("tag") == tag]
    return len(runs) == 1 and not (
        runs[0]["wrong_capability"] or runs[0]["unknown_record"] or runs[0]["duplicate_side_effect"]
    )


def recovered_by_reinitializing(oracle: dict[str, Any]) -> None:
    """The cut call's resume was refused and the session re-initialized underneath."""
    totals = oracle["totals"]
    assert totals["rejections"], totals
    assert totals["initializes"] >= 2, totals


@needs("langchain_mcp_adapters")
async def test_langchain_mcp_adapters_tools_run_over_the_bridge(
    cluster: Callable[..., Cluster],
) -> None:
    from mcp_resume.frameworks.langchain import tools

    # LangChain tools carry no `_meta`, so no idempotency key: `replicated`, where the cut
    # call is resumed rather than re-sent.
    c = cluster("replicated", *ARGS)
    async with tools(c.url) as loaded:
        by_name = {t.name: t for t in loaded}
        assert {"echo", "slow", "counter_increment"} <= set(by_name)
        # A LangChain tool invoked the LangChain way; the slow call's stream is cut.
        result = await by_name["slow"].ainvoke({"steps": 4, "delay_ms": 10})
        assert "4" in str(result), result
        echoed = await by_name["echo"].ainvoke({"text": "from langchain"})
        assert "from langchain" in str(echoed), echoed
    oracle = c.settled_oracle()
    assert len(executions(oracle, "slow")) == 1, oracle["totals"]
    assert oracle["totals"]["wrong_capability"] == 0, oracle["totals"]
    # The cut stream was resumed underneath, invisibly to LangChain.
    assert any(r["honored"] for r in oracle["resumes"]), oracle["resumes"]


@needs("agents")
async def test_openai_agents_server_class_lists_and_calls_over_the_bridge(
    cluster: Callable[..., Cluster],
) -> None:
    from mcp_resume.frameworks.openai_agents import MCPServerResumable

    c = cluster("strict", *ARGS)
    tag = f"agents/{uuid.uuid4()}"
    async with MCPServerResumable(
        {"url": c.url}
    ) as server:
        names = {t.name for t in await server.list_tools()}
        assert {"echo", "slow"} <= names
        result = await server.call_tool(
            "slow",
            {"steps": 4, "delay_ms": 10},
            meta={TAG: tag, IDEMPOTENCY_META_KEY: str(uuid.uuid4())},
        )
        assert not is_error(result), result
    oracle = c.settled_oracle()
    assert ran_right(oracle, tag), oracle["executions"]
    recovered_by_reinitializing(oracle)


@needs("fastmcp")
async def test_fastmcp_client_over_the_bridge(cluster: Callable[..., Cluster]) -> None:
    import fastmcp

    from mcp_resume.frameworks.fastmcp import ResumeTransport

    c = cluster("strict", *ARGS)
    tag = f"fastmcp/{uuid.uuid4()}"
    async with fastmcp.Client(ResumeTransport(c.url)) as client:
        assert "echo" in {t.name for t in await client.list_tools()}
        result = await client.call_tool(
            "slow",
            {"steps": 4, "delay_ms": 10},
            meta={TAG: tag, IDEMPOTENCY_META_KEY: str(uuid.uuid4())},
        )
        assert not result.is_error, result
    oracle = c.settled_oracle()
    assert ran_right(oracle, tag), oracle["executions"]
    recovered_by_reinitializing(oracle)


@needs("pydantic_ai")
async def test_pydantic_ai_toolset_calls_through_its_agent(cluster: Callable[..., Cluster]) -> None:
    import fastmcp
    from pydantic_ai import Agent
    from pydantic_ai.mcp import MCPToolset
    from pydantic_ai.models.test import TestModel

    from mcp_resume.frameworks.fastmcp import ResumeTransport

    c = cluster("replicated", *ARGS)
    toolset = MCPToolset(fastmcp.Client(ResumeTransport(c.url)))
    # TestModel is deterministic: it calls the named tool with arguments built from the
    # tool's schema, then answers with what the tools returned.
    agent = Agent(TestModel(call_tools=["echo"]), toolsets=[toolset])
    async with agent:
        run = await agent.run("echo something")
    assert "echo" in run.output, run.output
    oracle = c.settled_oracle()
    runs = executions(oracle, "echo")
    assert len(runs) == 1, oracle["executions"]
    assert not runs[0]["wrong_capability"], runs


# --- A server killed mid-call, each framework's own retry on --------------------------------


@needs("agents")
async def test_openai_agents_retry_attempts_never_rerun_an_interrupted_call(
    ts_server: TsServer,
) -> None:
    from mcp_resume.frameworks.openai_agents import MCPServerResumable

    async with MCPServerResumable(
        {"url": ts_server.url},
        max_retry_attempts=2,
        retry_backoff_seconds_base=0.05,
    ) as server:
        # `call_tool` holds the SDK's retry loop (the same session, then a fresh one); a
        # model's tool call goes through it too, and reads the result's text.
        result = await interrupted(ts_server, server.call_tool("block", {}))
        assert is_error(result) and result.meta[OUTCOME]["kind"] == "outcome_unknown", result
        assert may_have_run(result.content[0].text), result
        echoed = await server.call_tool("echo", {"text": "after the restart"})
        assert echoed.content[0].text == "after the restart"
    # Run once, never sent again by the SDK's retries.
    await asyncio.to_thread(settle, ts_server)
    assert ts_server.ran("block") == 1, ts_server.events
    assert ts_server.ran("echo") == 1


@needs("pydantic_ai")
async def test_pydantic_ai_agent_loop_never_reruns_an_interrupted_call(
    ts_server: TsServer,
) -> None:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ToolReturnPart
    from pydantic_ai.models.test import TestModel

    from mcp_resume.frameworks.pydantic_ai import ResumeToolset

    toolset = ResumeToolset(ts_server.url)
    # The default loop: a failed tool call becomes ModelRetry, and TestModel calls it again.
    agent = Agent(TestModel(call_tools=["block"]), toolsets=[toolset])
    async with agent:
        run = await interrupted(ts_server, agent.run("block"))
        failed = [
            p
            for m in run.all_messages()
            for p in m.parts
            if isinstance(p, ToolReturnPart) and p.tool_name == "block"
        ]
        assert len(failed) == 1 and may_have_run(str(failed[0].content)), run.all_messages()
        again = await Agent(TestModel(call_tools=["echo"]), toolsets=[toolset]).run("echo")
        assert "echo" in again.output, again.output
    await asyncio.to_thread(settle, ts_server)
    assert ts_server.ran("block") == 1, ts_server.events
    assert ts_server.ran("echo") == 1


@needs("fastmcp")
async def test_fastmcp_client_gets_the_outcome_and_its_auth_reaches_the_server(
    ts_server_auth: TsServer,
) -> None:
    import fastmcp

    from mcp_resume.frameworks.fastmcp import ResumeTransport

    server = ts_server_auth
    # FastMCP's own way of passing a token.
    async with fastmcp.Client(ResumeTransport(server.url), auth="tok-1") as client:
        with pytest.raises(Exception) as raised:
            await interrupted(server, client.call_tool("block", {}))
        assert raised.value.error.data["kind"] == "outcome_unknown", raised.value  # type: ignore[attr-defined]
        result = await client.call_tool("echo", {"text": "after the restart"})
        assert result.content[0].text == "after the restart"
    await asyncio.to_thread(settle, server)
    assert server.ran("block") == 1, server.events
    assert not [e for e in server.events if e.get("ev") == "auth_refused"]


@needs("langchain_mcp_adapters")
async def test_langchain_retry_and_error_handling_never_rerun_an_interrupted_call(
    ts_server: TsServer,
) -> None:
    from mcp_resume.frameworks.langchain import tools

    async with tools(ts_server.url, server_name="ts", handle_tool_errors=True) as loaded:
        by_name = {t.name: t for t in loaded}
        # LangChain's retry: any exception is tried again, up to three attempts.
        block = by_name["block"].with_retry(stop_after_attempt=3)
        call = {"name": "block", "args": {}, "id": "call_1", "type": "tool_call"}
        message = await interrupted(ts_server, block.ainvoke(call))
        assert message.status == "error" and may_have_run(str(message.content)), message
        echoed = await by_name["echo"].ainvoke({"text": "after the restart"})
        assert "after the restart" in str(echoed)
    await asyncio.to_thread(settle, ts_server)
    assert ts_server.ran("block") == 1, ts_server.events


# --- Keys from the tool call id, against a server that deduplicates them ----------------------


@needs("agents")
async def test_openai_agents_retry_of_a_keyed_invocation_is_answered_from_the_stored_result(
    cluster: Callable[..., Cluster],
) -> None:
    from agents.mcp import MCPUtil
    from agents.tool_context import ToolContext

    from mcp_resume.frameworks.openai_agents import MCPServerResumable

    c = cluster("strict", "--idle-timeout-ms", "0")
    tag = f"agents-key/{uuid.uuid4()}"
    arguments = json.dumps({"steps": 8, "delay_ms": 10})
    async with MCPServerResumable(
        {"url": c.url},
        tool_call_keys=True,
        tool_meta_resolver=lambda _: {TAG: tag},
        max_retry_attempts=2,
    ) as server:
        slow = next(t for t in await server.list_tools() if t.name == "slow")
        context = ToolContext(
            context=None, tool_name="slow", tool_call_id=f"call_{uuid.uuid4()}", tool_arguments=arguments
        )
        # The same invocation run twice (a run replayed, a runner's own retry): the second
        # carries the same key and is answered from the stored result.
        for _ in range(2):
            output = await MCPUtil.invoke_mcp_tool(server, slow, context, arguments)
            assert "8" in str(output), output
    oracle = c.settled_oracle()
    assert ran_right(oracle, tag), oracle["executions"]


@needs("agents")
async def test_openai_agents_session_timeout_never_ends_a_call_that_still_runs(
    cluster: Callable[..., Cluster],
) -> None:
    from mcp_resume.frameworks.openai_agents import MCPServerResumable

    c = cluster("strict", "--idle-timeout-ms", "0")
    tag = f"agents-slow/{uuid.uuid4()}"
    # Longer than the SDK's own session timeout (5 s): that timeout would end the call while
    # the tool runs, and `max_retry_attempts` would send it again, unkeyed.
    async with MCPServerResumable({"url": c.url}, max_retry_attempts=2) as server:
        result = await server.call_tool("slow", {"steps": 6, "delay_ms": 1000}, meta={TAG: tag})
        assert not is_error(result), result
    oracle = c.settled_oracle()
    assert ran_right(oracle, tag), oracle["executions"]
    # One shorter than the bridge's deadline is refused.
    for given in ({"client_session_timeout_seconds": 5}, {"bridge_options": {"call_timeout": 30}, "client_session_timeout_seconds": 10}):
        with pytest.raises(TypeError, match="client_session_timeout_seconds"):
            MCPServerResumable({"url": c.url}, **given)
    MCPServerResumable({"url": c.url}, client_session_timeout_seconds=30, bridge_options={"call_timeout": 30})


@needs("pydantic_ai")
async def test_pydantic_ai_keys_from_the_tool_call_id_deduplicate_a_rerun_invocation(
    cluster: Callable[..., Cluster],
) -> None:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
    from pydantic_ai.models.function import FunctionModel

    from mcp_resume.frameworks.pydantic_ai import ResumeToolset

    c = cluster("strict", *ARGS)
    tag = f"pydantic-key/{uuid.uuid4()}"
    call_id = f"call_{uuid.uuid4()}"

    async def tagged(ctx: Any, call_tool: Any, name: str, args: dict[str, Any]) -> Any:
        return await call_tool(name, args, metadata={TAG: tag})

    def model(messages: list[Any], info: Any) -> ModelResponse:
        if any(isinstance(p, ToolReturnPart) for m in messages for p in m.parts):
            return ModelResponse(parts=[TextPart("done")])
        args = {"steps": 4, "delay_ms": 10}
        return ModelResponse(parts=[ToolCallPart("slow", args, tool_call_id=call_id)])

    toolset = ResumeToolset(c.url, tool_call_keys=True, process_tool_call=tagged)
    agent = Agent(FunctionModel(model), toolsets=[toolset])
    async with agent:
        # The same run twice: the same tool call id, as a durable execution's replay has.
        first = await agent.run("go")
        second = await agent.run("go")
    results = [
        str(p.content)
        for run in (first, second)
        for m in run.all_messages()
        for p in m.parts
        if isinstance(p, ToolReturnPart)
    ]
    assert len(results) == 2 and results[0] == results[1], results
    oracle = c.settled_oracle()
    # The cut stream's resume was refused: the keyed call was re-sent, and the second run
    # answered from the stored result: one execution in all.
    assert ran_right(oracle, tag), oracle["executions"]
    recovered_by_reinitializing(oracle)


# --- Options pass through or fail loudly -----------------------------------------------------


@needs("agents")
async def test_openai_agents_options_pass_through_or_fail_loudly(
    cluster: Callable[..., Cluster],
) -> None:
    from mcp_resume.frameworks.openai_agents import MCPServerResumable

    for params, options in [
        ({"url": "http://127.0.0.1:1/mcp", "auth": object()}, {}),
        ({"url": "http://127.0.0.1:1/mcp", "httpx_client_factory": object()}, {}),
        ({"url": "http://127.0.0.1:1/mcp"}, {"no_such_option": 1}),
        ({"url": "http://127.0.0.1:1/mcp", "sse_read_timeout": 5}, {"sse_read_timeout": 5}),
        ({"url": "http://127.0.0.1:1/mcp", "sse_read_timeout": 5}, {"call_timeout": 5}),
    ]:
        with pytest.raises(TypeError):
            MCPServerResumable(params, bridge_options=options)
    # A deadline among the bridge's options, as the README says to give it.
    c = cluster("replicated")
    async with MCPServerResumable(
        {"url": c.url}, bridge_options={"call_timeout": 5}
    ) as server:
        assert (await server.call_tool("echo", {"text": "hi"})).content[0].text == "hi"


@needs("fastmcp")
def test_fastmcp_transport_refuses_what_it_cannot_honour() -> None:
    import fastmcp

    from mcp_resume.frameworks.fastmcp import ResumeTransport

    with pytest.raises(TypeError):
        ResumeTransport("http://127.0.0.1:1/mcp", no_such_option=1)
    with pytest.raises(TypeError):
        # An httpx.Auth (here any object): FastMCP's own transport would build an httpx client.
        fastmcp.Client(ResumeTransport("http://127.0.0.1:1/mcp"), auth=object())
    with pytest.raises(TypeError):
        fastmcp.Client(ResumeTransport("http://127.0.0.1:1/mcp"), auth="oauth")
    with pytest.raises(TypeError):
        fastmcp.Client(ResumeTransport("http://127.0.0.1:1/mcp", bearer_token="x"), auth="y")


def test_a_missing_framework_names_its_extra() -> None:
    from mcp_resume.frameworks._outcome import require

    with pytest.raises(ModuleNotFoundError, match=r'pip install "mcp_resume\[langchain\]"'):
        require("no_such_framework_module", "langchain", "langchain-mcp-adapters")


@needs("langchain_mcp_adapters")
async def test_langchain_multi_server_client_runs_over_the_bridge(
    cluster: Callable[..., Cluster],
) -> None:
    from mcp_resume.frameworks.langchain import MultiServerMCPClient

    with pytest.raises(TypeError):
        MultiServerMCPClient({"s": {"transport": "http", "url": "http://x/mcp", "auth": object()}})
    with pytest.raises(TypeError):
        MultiServerMCPClient({"s": {"transport": "http", "url": "http://x/mcp", "bogus": 1}})
    c = cluster("replicated", *ARGS)
    client = MultiServerMCPClient(
        {"shop": {"transport": "http", "url": c.url, "era": "legacy", "call_timeout": 10}},
        tool_name_prefix=True,
    )
    by_name = {t.name: t for t in await client.get_tools()}
    assert {"shop_echo", "shop_slow"} <= set(by_name), by_name
    result = await by_name["shop_slow"].ainvoke({"steps": 4, "delay_ms": 10})
    assert "4" in str(result), result
    oracle = c.settled_oracle()
    assert len(executions(oracle, "slow")) == 1, oracle["totals"]
    # The cut stream was resumed underneath, so the bridge carried the call.
    assert any(r["honored"] for r in oracle["resumes"]), oracle["resumes"]


@needs("langchain_mcp_adapters")
async def test_langchain_multi_server_client_calls_carry_the_headers_an_interceptor_sets(
    scripted: Callable[..., ScriptedServer],
) -> None:
    from mcp_resume.frameworks.langchain import MultiServerMCPClient

    # The adapters' per-call auth: an interceptor overrides the headers of one call, which
    # its session then sends on top of the connection's.
    server = scripted("legacy")

    async def tenant_b(request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
        return await handler(request.override(headers={"x-tenant": "b"}))

    connection = {"transport": "http", "url": server.url, "era": "legacy",
                  "headers": {"x-tenant": "a", "x-app": "shop"}}
    client = MultiServerMCPClient({"s": connection}, tool_interceptors=[tenant_b])
    by_name = {t.name: t for t in await client.get_tools()}
    result = await by_name["echo"].ainvoke({"text": "hi"})
    assert "hi" in str(result), result
    (call,) = server.request_headers("tools/call")
    assert (call.get("x-tenant"), call.get("x-app")) == ("b", "shop"), call
    # The listing's session has the connection's headers; the call's, the interceptor's.
    assert [h.get("x-tenant") for h in server.request_headers("initialize")] == ["a", "b"]


@needs("langchain_mcp_adapters")
async def test_langchain_multi_server_client_calls_reach_its_elicitation_callback(
    scripted: Callable[..., ScriptedServer],
) -> None:
    from langchain_mcp_adapters.callbacks import Callbacks
    from mcp import types

    from mcp_resume.frameworks.langchain import MultiServerMCPClient

    # A 2026-07-28 tool that needs an elicitation (an `input_required` round): the call's
    # own session must have the client's `on_elicitation`, with the call's context.
    server = scripted("modern")
    asked: list[tuple[str, str, str | None]] = []

    async def on_elicitation(mcp_context: Any, params: Any, context: Any) -> Any:
        asked.append((params.message, context.server_name, context.tool_name))
        return types.ElicitResult(action="accept", content={})

    client = MultiServerMCPClient(
        {"s": {"transport": "http", "url": server.url}},
        callbacks=Callbacks(on_elicitation=on_elicitation),
    )
    by_name = {t.name: t for t in await client.get_tools()}
    result = await asyncio.wait_for(by_name["confirm"].ainvoke({}), 10)
    assert asked == [("proceed?", "s", "confirm")], asked
    assert "accept" in str(result), result


@needs("langchain_mcp_adapters")
async def test_langchain_keys_from_the_tool_call_id_deduplicate_a_rerun_invocation(
    cluster: Callable[..., Cluster],
) -> None:
    from types import SimpleNamespace

    from mcp_resume.frameworks.langchain import tools

    c = cluster("strict", *ARGS)
    # What LangGraph's ToolNode injects: the tool runtime, holding the model's tool call id.
    runtime = SimpleNamespace(tool_call_id=f"call_{uuid.uuid4()}")
    async with tools(c.url, tool_call_keys=True) as loaded:
        slow = next(t for t in loaded if t.name == "slow")
        arguments = {"steps": 4, "delay_ms": 10, "runtime": runtime}
        first = await slow.ainvoke(arguments)
        # The same invocation again, as a retry of the graph's step makes it.
        second = await slow.ainvoke(arguments)
    texts = [[block["text"] for block in result] for result in (first, second)]
    assert texts[0] == texts[1] and "4" in texts[0][0], texts
    oracle = c.settled_oracle()
    # The cut call was re-sent with its key after the refused resume, and the second
    # invocation answered from the stored result: one execution.
    assert len(executions(oracle, "slow")) == 1, oracle["executions"]
    recovered_by_reinitializing(oracle)


# --- Stock: each framework on its own MCP transport, no mcp-resume ---------------------------
#
# The same kill and restart, with nothing of this project in the path: what each framework
# does on its own is the "stock" column of the README's table, and these tests keep it true.


async def killed_mid_call(
    server: TsServer, call: Awaitable[T], tool: str = "block"
) -> tuple[asyncio.Future[T], int]:
    """Starts `call`, kills the server once the tool runs and the call's event stream is open
    (the client holds its first event id, so a stock client tries to resume), starts it again
    at the same URL; the call's task, and where the restarted server's log begins."""
    mark = server.mark()
    task = asyncio.ensure_future(call)
    await asyncio.to_thread(server.wait_for, "tool", after=mark, name=tool)
    await asyncio.to_thread(server.wait_for, "http_head", after=mark, method="POST", tool=tool)
    # The head is logged when it is written, its first event a moment later: a round trip
    # through the server's event loop lets that go out before the kill.
    await asyncio.to_thread(server.admin, "/admin/mark")
    await asyncio.to_thread(server.wait_for, "admin", after=mark, path="/admin/mark")
    restarted = server.mark()
    await asyncio.to_thread(server.restart)
    return task, restarted


async def rerun_released(server: TsServer, task: asyncio.Future[T], restarted: int) -> T:
    """Waits for the framework to send the interrupted call again to the restarted server,
    lets that second run finish (`block` runs until released), and returns what the
    application got."""
    await asyncio.to_thread(server.wait_for, "tool", timeout=20, after=restarted, name="block")
    assert server.admin("/admin/release")["released"] == 1
    return await asyncio.wait_for(task, 30)


def sent_again(server: TsServer, restarted: int) -> list[int]:
    """The statuses the restarted server answered the `tools/call` requests for `block`
    with: one per time the framework sent the call again."""
    # Every line logged before the mark's is read once the mark's is.
    server.admin("/admin/mark")
    server.wait_for("admin", after=restarted, path="/admin/mark")
    return [e["status"] for e in server.find("http_head", after=restarted, tool="block")]


@needs("agents")
async def test_stock_openai_agents_retry_attempts_rerun_an_interrupted_call(
    ts_server: TsServer,
) -> None:
    from agents.mcp import MCPServerStreamableHttp

    async with MCPServerStreamableHttp(
        {"url": ts_server.url}, max_retry_attempts=2, retry_backoff_seconds_base=0.05
    ) as server:
        task, restarted = await killed_mid_call(ts_server, server.call_tool("block", {}))
        # The resume is refused (404: the session died with the server), the call waits out
        # `client_session_timeout_seconds` (5 s), and the SDK's retry sends it again on a new
        # session: the restarted server runs it a second time, and the caller gets a success.
        result = await rerun_released(ts_server, task, restarted)
        assert not is_error(result) and result.content[0].text == "released", result
    assert sent_again(ts_server, restarted) == [200]
    assert ts_server.ran("block") == 2, ts_server.events


@needs("langchain_mcp_adapters")
async def test_stock_langchain_with_retry_reruns_an_interrupted_call(ts_server: TsServer) -> None:
    from datetime import timedelta

    from langchain_mcp_adapters.client import MultiServerMCPClient

    # With no read timeout the interrupted call never returns (below), so the retry never
    # fires; with one, `with_retry` sends it again on a new session (the adapters open one
    # per call).
    connection = {
        "transport": "streamable_http",
        "url": ts_server.url,
        "session_kwargs": {"read_timeout_seconds": timedelta(seconds=2)},
    }
    client = MultiServerMCPClient({"ts": connection})  # type: ignore[dict-item]
    by_name = {t.name: t for t in await client.get_tools()}
    block = by_name["block"].with_retry(stop_after_attempt=3)
    call = {"name": "block", "args": {}, "id": "call_1", "type": "tool_call"}
    task, restarted = await killed_mid_call(ts_server, block.ainvoke(call))
    message = await rerun_released(ts_server, task, restarted)
    assert message.status == "success" and "released" in str(message.content), message
    assert sent_again(ts_server, restarted) == [200]
    assert ts_server.ran("block") == 2, ts_server.events


@needs("langchain_mcp_adapters")
async def test_stock_langchain_without_a_read_timeout_an_interrupted_call_never_returns(
    ts_server: TsServer,
) -> None:
    from langchain_mcp_adapters.client import MultiServerMCPClient

    client = MultiServerMCPClient({"ts": {"transport": "streamable_http", "url": ts_server.url}})
    by_name = {t.name: t for t in await client.get_tools()}
    block = by_name["block"].with_retry(stop_after_attempt=3)
    task, restarted = await killed_mid_call(ts_server, block.ainvoke({}))
    # `mcp` 1.x tries to resume twice, a second apart; refused (404: the session died with
    # the server), it gives up without failing the call, which then waits with no deadline.
    # Observed for twice that window: never answered, never sent again.
    done, _ = await asyncio.wait({task}, timeout=4)
    assert not done, task.result()
    task.cancel()
    assert sent_again(ts_server, restarted) == []
    assert ts_server.ran("block") == 1, ts_server.events


@needs("fastmcp")
async def test_stock_fastmcp_client_reports_an_interrupted_call_and_keeps_a_dead_session(
    ts_server: TsServer,
) -> None:
    from importlib.metadata import version

    import fastmcp
    from mcp.shared import exceptions

    mcp2 = version("mcp").startswith("2.")
    error = exceptions.MCPError if mcp2 else exceptions.McpError  # type: ignore[attr-defined]
    # FastMCP 3 on `mcp` 1.x: the call waits for the client's `timeout` (none by default);
    # FastMCP 4 on `mcp` 2.x fails it once its resume attempts are refused.
    async with fastmcp.Client(ts_server.url, timeout=3) as client:
        task, restarted = await killed_mid_call(ts_server, client.call_tool("block", {}))
        with pytest.raises(error) as raised:
            await asyncio.wait_for(task, 10)
        expected = "reconnection attempts were exhausted" if mcp2 else "Timed out"
        assert expected in str(raised.value), raised.value
        # It keeps the session that died with the server: the next call fails too.
        with pytest.raises(error) as next_call:
            await client.call_tool("echo", {"text": "after the restart"})
        assert any(
            words in str(next_call.value) for words in ("Session terminated", "Session not found")
        ), next_call.value
    assert sent_again(ts_server, restarted) == []
    assert ts_server.ran("block") == 1, ts_server.events


@needs("pydantic_ai")
async def test_stock_pydantic_ai_agent_loop_resends_an_interrupted_call(
    ts_server: TsServer,
) -> None:
    from pydantic_ai import Agent
    from pydantic_ai.exceptions import UnexpectedModelBehavior
    from pydantic_ai.mcp import MCPToolset
    from pydantic_ai.models.test import TestModel

    # `read_timeout` (5 min by default) ends the wait on `mcp` 1.x; on 2.x FastMCP 4 fails
    # the call sooner, once its resume attempts are refused (the FastMCP test above).
    toolset = MCPToolset(ts_server.url, read_timeout=3)
    agent = Agent(TestModel(call_tools=["block"]), toolsets=[toolset])
    async with agent:
        task, restarted = await killed_mid_call(ts_server, agent.run("block"))
        # The failure becomes ModelRetry and the model calls the tool again: it is sent to
        # the restarted server on the dead session, refused (404), and after the retry limit
        # the run fails.
        with pytest.raises(UnexpectedModelBehavior, match="exceeded max retries"):
            await asyncio.wait_for(task, 10)
    assert sent_again(ts_server, restarted) == [404]
    assert ts_server.ran("block") == 1, ts_server.events
