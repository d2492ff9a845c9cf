"""Agent frameworks from PyPI on `mcp_resume.bridge`, against the mock cluster binary, each
through its own API and with no language model in the loop: langchain-mcp-adapters' tools,
the OpenAI Agents SDK's MCP server class, FastMCP's client, and pydantic-ai's MCP toolset
driven by its deterministic `TestModel`. Every call is checked on the cluster's oracle: it
ran, once, under the session's own context."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from conftest import Cluster
from mcp_resume.bridge import IDEMPOTENCY_META_KEY
from workload import TAG

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


async def test_openai_agents_server_class_lists_and_calls_over_the_bridge(
    cluster: Callable[..., Cluster],
) -> None:
    from mcp_resume.frameworks.openai_agents import MCPServerResumable

    c = cluster("strict", *ARGS)
    tag = f"agents/{uuid.uuid4()}"
    async with MCPServerResumable(
        {"url": c.url}, client_session_timeout_seconds=10
    ) as server:
        names = {t.name for t in await server.list_tools()}
        assert {"echo", "slow"} <= names
        result = await server.call_tool(
            "slow",
            {"steps": 4, "delay_ms": 10},
            meta={TAG: tag, IDEMPOTENCY_META_KEY: str(uuid.uuid4())},
        )
        assert not result.isError, result
    oracle = c.settled_oracle()
    assert ran_right(oracle, tag), oracle["executions"]
    recovered_by_reinitializing(oracle)


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
