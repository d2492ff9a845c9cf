"""The `mcp` package's own `ClientSession` (1.x, from PyPI) over `mcp_resume.bridge`, against
the mock cluster binary: the demo's workload on every preset, stock transport against the
bridge, judged by the cluster's oracle; and era translation (a legacy-only `ClientSession`
reaching a 2026-07-28-only server)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client as stock_streamable_http_client
from mcp.shared.exceptions import McpError

from conftest import Cluster
from scripted_server import ScriptedServer
from mcp_resume import ReconnectPolicy
from mcp_resume.bridge import (
    IDEMPOTENCY_META_KEY,
    OUTCOME_META_KEY,
    streamable_http_client,
    streamablehttp_client,
)
from workload import CAPABILITIES, TAG, wrong_answer

PRESETS = ["naive", "strict", "replicated", "sticky"]
# The workload's deadline per call, as the demo's.
DEADLINE = timedelta(seconds=3)
MODERN_CAPABILITIES = {"extensions": {"io.modelcontextprotocol/tasks": {}}}


class WorkloadSession(ClientSession):
    """A `ClientSession` whose `initialize` negotiates the workload's capabilities (a
    non-default sampling temperature), which `ClientSession.initialize` cannot express: a
    made-up session on another instance then answers differently, as in the incident."""

    async def initialize(self) -> types.InitializeResult:
        result = await self.send_request(
            types.ClientRequest(
                types.InitializeRequest(
                    params=types.InitializeRequestParams(
                        protocolVersion=types.LATEST_PROTOCOL_VERSION,
                        capabilities=types.ClientCapabilities(
                            experimental=CAPABILITIES["experimental"]
                        ),
                        clientInfo=types.Implementation(name="workload", version="1"),
                    )
                )
            ),
            types.InitializeResult,
        )
        await self.send_notification(types.ClientNotification(types.InitializedNotification()))
        return result


@dataclass
class Call:
    tag: str
    tool: str
    keyed: bool
    result: Any = None
    error: str | None = None
    # On success, the tag the result's `_meta` echoed (another one: another call's answer).
    echoed: str | None = None


@dataclass
class Run:
    preset: str
    client: str
    calls: list[Call] = field(default_factory=list)
    oracle: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    connect_error: str | None = None

    def executions(self, tag: str) -> list[dict[str, Any]]:
        return [e for e in self.oracle["executions"] if e.get("tag") == tag]

    def silent_wrong(self) -> list[str]:
        return [
            c.tag
            for c in self.calls
            if c.error is None and wrong_answer(c, self.executions(c.tag))
        ]

    def failed(self) -> list[Call]:
        return [c for c in self.calls if c.error is not None]


def streams(client: str, url: str) -> AbstractAsyncContextManager[Any]:
    if client == "stock":
        return stock_streamable_http_client(url)
    return streamablehttp_client(
        url, reconnect=ReconnectPolicy(initial_delay=0.01, max_delay=0.2), jitter_seed=7
    )


async def session_workload(url: str, preset: str, client: str, rounds: int = 4) -> Run:
    """The demo's workload through a `ClientSession` over `client`'s transport."""
    run = Run(preset, client)
    started = time.monotonic()

    async def call(session: ClientSession, tool: str, args: dict[str, Any], keyed: bool) -> Any:
        tag = f"{preset}/{client}/{len(run.calls):03}-{tool}"
        record = Call(tag, tool, keyed)
        run.calls.append(record)
        meta: dict[str, Any] = {TAG: tag}
        if keyed:
            meta[IDEMPOTENCY_META_KEY] = str(uuid.uuid4())
        try:
            result = await session.call_tool(tool, args, read_timeout_seconds=DEADLINE, meta=meta)
        except McpError as e:
            record.error = str(e.error.data.get("kind") if isinstance(e.error.data, dict) else e)
            return None
        if result.isError:
            record.error = "tool_error"
            return None
        record.result = result.structuredContent
        record.echoed = (result.meta or {}).get(TAG)
        return result.structuredContent

    try:
        async with streams(client, url) as (read, write, _):
            async with WorkloadSession(read, write, read_timeout_seconds=DEADLINE) as session:
                await session.initialize()
                await call(session, "slow", {"steps": 6, "delay_ms": 20}, True)
                for n in range(rounds):
                    await call(session, "generate", {"prompt": f"summary {n}"}, False)
                    prepared = await call(session, "prepare", {"item": f"order-{n}"}, True)
                    if isinstance(prepared, dict) and isinstance(prepared.get("record"), str):
                        await call(session, "commit", {"record": prepared["record"]}, True)
                    await call(session, "counter_increment", {}, True)
                    await call(session, "counter_increment", {}, False)
    except Exception as e:  # the stock transport may fail the whole session
        run.connect_error = repr(e)
    run.seconds = time.monotonic() - started
    return run


def table(runs: list[Run]) -> str:
    lines = [f"{'preset':<11}{'client':<9}{'calls':>6}{'ok':>5}{'SILENT':>8}{'failed':>8}{'secs':>7}"]
    for r in runs:
        ok = len(r.calls) - len(r.failed())
        lines.append(
            f"{r.preset:<11}{r.client:<9}{len(r.calls):>6}{ok:>5}{len(r.silent_wrong()):>8}"
            f"{len(r.failed()):>8}{r.seconds:>7.2f}"
        )
    return "\n".join(lines)


async def test_stock_against_bridged_client_session_on_every_preset(
    cluster: Callable[..., Cluster],
) -> None:
    runs: list[Run] = []
    for preset in PRESETS:
        # The stock transport on `replicated` and `sticky` only loses the cut call to the
        # deadline (it does not resume a cut POST stream): 3 s each, asserted nowhere.
        clients = ("stock", "bridged") if preset in ("naive", "strict") else ("bridged",)
        for client in clients:
            c = cluster(
                preset,
                "--idle-timeout-ms",
                "0",
                "--cut-after-events",
                "3",
                capabilities=CAPABILITIES,
            )
            run = await session_workload(c.url, preset, client)
            run.oracle = c.settled_oracle()
            c.stop()
            runs.append(run)
    print("\n" + table(runs))
    by = {(r.preset, r.client): r for r in runs}
    for preset in PRESETS:
        bridged = by[(preset, "bridged")]
        summary = f"{preset}: {[(c.tag, c.error) for c in bridged.failed()]} {bridged.connect_error}"
        # Over the bridge: never a silent wrong answer, no keyed side effect twice, no unkeyed
        # call run twice.
        assert bridged.connect_error is None, summary
        assert bridged.silent_wrong() == [], summary
        assert bridged.oracle["totals"]["repeated_unkeyed_executions"] == 0, summary
        if preset != "naive":
            # Resume is safe or refused explicitly: nothing is lost, the cut call included.
            assert bridged.failed() == [], summary
        else:
            # What cannot be proven right is an explicit error naming its kind.
            assert bridged.failed(), summary
            assert {c.error for c in bridged.failed()} <= {
                "context_mismatch",
                "outcome_unknown",
                "session_lost",
            }, summary
    # The stock client reproduces the incident on `naive` (success reported, wrong context
    # underneath) and loses calls on `strict`.
    assert by[("naive", "stock")].silent_wrong(), table(runs)
    stock_strict = by[("strict", "stock")]
    assert stock_strict.failed() or stock_strict.connect_error, table(runs)


@pytest.mark.parametrize("era", ["modern"])
async def test_a_legacy_client_session_reaches_a_2026_07_28_server(
    cluster: Callable[..., Cluster], era: str
) -> None:
    # What the bridge's client sends in each 2026-07-28 request: the tasks extension it
    # declares on top of the session's (empty) capabilities.
    c = cluster("replicated", "--era", era, capabilities=MODERN_CAPABILITIES)
    async with streamable_http_client(c.url) as (read, write, get_session_id):
        async with ClientSession(read, write, read_timeout_seconds=DEADLINE) as session:
            init = await session.initialize()
            # The answer is built from server/discover, in the version the session asked for.
            assert init.protocolVersion == types.LATEST_PROTOCOL_VERSION
            assert init.capabilities.tools is not None
            tools = await session.list_tools()
            assert "echo" in {t.name for t in tools.tools}
            result = await session.call_tool(
                "echo", {"text": "modern"}, meta={TAG: "modern/echo"}
            )
            assert result.content[0].text == "modern"  # type: ignore[union-attr]
            # The 2026-07-28 era has no sessions.
            assert get_session_id() is None
    oracle = c.settled_oracle()
    assert oracle["totals"]["initializes"] == 0, oracle["totals"]
    runs = [e for e in oracle["executions"] if e.get("tag") == "modern/echo"]
    assert len(runs) == 1 and not runs[0]["wrong_capability"], runs


async def test_server_requests_reach_the_client_sessions_own_callbacks(
    scripted: Callable[..., ScriptedServer],
) -> None:
    server = scripted("legacy")
    seen: list[types.CreateMessageRequestParams] = []

    async def sampling(
        context: Any, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult:
        seen.append(params)
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text="from the session"),
            model="python-model",
        )

    async with streamablehttp_client(server.url) as (read, write, _):
        async with ClientSession(read, write, sampling_callback=sampling) as session:
            await session.initialize()
            result = await session.call_tool("ask", {})
    assert [p.maxTokens for p in seen] == [5]
    answer = result.structuredContent["answer"]  # type: ignore[index]
    assert answer["result"]["content"]["text"] == "from the session", answer
    assert answer["result"]["model"] == "python-model"
    # The session declared sampling at `initialize`, through the bridge.
    init = server.requests("initialize")[0]
    assert "sampling" in init["params"]["capabilities"], init


async def test_answers_to_server_requests_pass_requests_waiting_for_capacity(
    scripted: Callable[..., ScriptedServer],
) -> None:
    # Capacity 1: the second call waits for the first, whose server asks the session for a
    # sampling; the session's answer must reach the server past the waiting call.
    server = scripted("legacy")

    async def sampling(
        context: Any, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult:
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text="sampled"),
            model="python-model",
        )

    results: list[types.CallToolResult] = []
    async with streamablehttp_client(server.url, capacity=1, call_timeout=5) as (read, write, _):
        async with ClientSession(read, write, sampling_callback=sampling) as session:
            await session.initialize()

            async def ask() -> None:
                results.append(await session.call_tool("ask", {}))

            with anyio.fail_after(3):
                async with anyio.create_task_group() as calls:
                    calls.start_soon(ask)
                    calls.start_soon(ask)
    assert len(results) == 2
    for result in results:
        assert not result.isError, result
        answer = result.structuredContent["answer"]  # type: ignore[index]
        assert answer["result"]["content"]["text"] == "sampled", answer


class Tap:
    """A session's write stream that keeps the id of each request once the transport has it:
    an `mcp` 1.x application cancels by hand, naming the id."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.sent: list[tuple[str, Any]] = []
        self.changed = anyio.Condition()

    async def send(self, message: Any) -> None:
        await self.inner.send(message)
        root = message.message.root
        if isinstance(root, types.JSONRPCRequest):
            async with self.changed:
                self.sent.append((root.method, root.id))
                self.changed.notify_all()

    async def request_id(self, method: str, nth: int) -> Any:
        """The id of the `nth` request of `method` (from 0), once it was sent."""
        async with self.changed:
            while len(ids := [i for m, i in self.sent if m == method]) <= nth:
                await self.changed.wait()
        return ids[nth]

    async def __aenter__(self) -> Tap:
        await self.inner.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> Any:
        return await self.inner.__aexit__(*exc)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_a_request_cancelled_while_it_waits_for_its_place_is_never_sent(
    scripted: Callable[..., ScriptedServer],
) -> None:
    # Capacity 1, one call hanging: the next request waits for a place. The application
    # cancels it there (by hand, as `mcp` 1.x applications do; 2.x sends the same
    # notification itself), so its tool must never run, not even once the place frees. The
    # place frees at the hanging call's deadline, inside the runtime, while the loop is held:
    # freed by the application's cancel, it would need the loop, which would let a cancel the
    # skin had put off go out in time on some runs.
    server = scripted("legacy")
    started = anyio.Event()

    async def logged(params: types.LoggingMessageNotificationParams) -> None:
        if params.data == "started":
            started.set()

    # The hanging call's deadline: far past the few milliseconds the steps before the hold
    # take, also on a loaded machine.
    async with streamablehttp_client(server.url, capacity=1, call_timeout=3) as (read, write, _):
        tap: Any = Tap(write)
        async with ClientSession(read, tap, logging_callback=logged) as session:
            await session.initialize()

            async def hang() -> None:
                with pytest.raises(McpError):
                    await session.call_tool("hang")

            echo = types.ClientRequest(
                types.CallToolRequest(
                    params=types.CallToolRequestParams(name="echo", arguments={"text": "no"})
                )
            )
            cancel = types.CancelledNotificationParams(requestId=-1)
            with anyio.fail_after(10):
                async with anyio.create_task_group() as calls:
                    calls.start_soon(hang)
                    # Its notification read: the bridge's one place towards the session is free
                    # for the hanging call's end.
                    await started.wait()
                    waiting = anyio.CancelScope()

                    async def cancelled_echo() -> None:
                        with waiting:
                            await session.send_request(echo, types.CallToolResult)

                    calls.start_soon(cancelled_echo)
                    cancel.requestId = await tap.request_id("tools/call", 1)
                    await session.send_notification(
                        types.ClientNotification(types.CancelledNotification(params=cancel))
                    )
                    # Waits for a place behind whatever still waits for one.
                    calls.start_soon(session.send_ping)
                    await tap.request_id("ping", 0)
                    # The skin handles the session's messages in order: once the server has
                    # this one, the skin has handled the cancel and the ping.
                    await session.send_roots_list_changed()
                    await anyio.to_thread.run_sync(
                        lambda: _wait(lambda: server.requests("notifications/roots/list_changed"))
                    )
                    # The skin is held (the loop's thread is) while the hanging call's deadline
                    # passes and the place goes to the next request that waits for it: what
                    # the skin had not sent by now comes too late.
                    _wait(lambda: len(server.requests("tools/call")) > 1 or server.requests("ping"))
                    waiting.cancel()
    assert len(server.requests("tools/call")) == 1, server.requests("tools/call")
    assert len(server.requests("ping")) == 1


def _wait(check: Callable[[], Any], seconds: float = 5) -> None:
    """Polls `check` on this thread until it holds (failing after `seconds`)."""
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


@pytest.mark.parametrize("result", [None, [], "ok"], ids=["null", "list", "string"])
async def test_a_result_that_is_not_an_object_fails_its_call_and_nothing_else(
    scripted: Callable[..., ScriptedServer], result: Any
) -> None:
    # No `ClientSession` can read such an answer: its call fails as the bridge's protocol
    # error instead of waiting forever, and the session goes on.
    server = scripted("legacy")
    async with streamablehttp_client(server.url) as (read, write, _):
        async with ClientSession(read, write) as session:
            await session.initialize()
            with anyio.fail_after(5):
                with pytest.raises(McpError) as raised:
                    await session.call_tool("raw", {"result": result})
                echoed = await session.call_tool("echo", {"text": "after"})
    assert raised.value.error.code == -32054, raised.value.error
    assert (raised.value.error.data or {}).get("kind") == "protocol", raised.value.error
    # The server answered it: the call ran, though its result cannot be read.
    assert (raised.value.error.data or {}).get("mayHaveRun") is True, raised.value.error
    assert getattr(echoed.content[0], "text", None) == "after", echoed


@pytest.mark.parametrize("result", [None, [], "ok"], ids=["null", "list", "string"])
async def test_a_result_that_is_not_an_object_completes_as_one_that_may_have_run(
    scripted: Callable[..., ScriptedServer], result: Any
) -> None:
    # With `interrupted_as_result`, as every call that may have run: an error result saying
    # so, which a framework's retry does not run again.
    server = scripted("legacy")
    async with streamablehttp_client(server.url, interrupted_as_result=True) as (read, write, _):
        async with ClientSession(read, write) as session:
            await session.initialize()
            with anyio.fail_after(5):
                answered = await session.call_tool("raw", {"result": result})
                echoed = await session.call_tool("echo", {"text": "after"})
    assert answered.isError, answered
    outcome = (answered.meta or {}).get(OUTCOME_META_KEY)
    assert outcome is not None and outcome["kind"] == "protocol", answered
    assert "may or may not have run" in outcome["message"], outcome
    assert getattr(echoed.content[0], "text", None) == "after", echoed


# Objects `mcp`'s `CallToolResult` cannot read: content that is not a list, an item of a type
# it does not know; and one it reads but whose tag says it is no call's outcome (a task).
UNREADABLE_CALL_RESULTS = [
    {"content": 5},
    {"content": [{"type": "hologram"}]},
    {"content": [], "resultType": "task", "task": {"taskId": "t-1", "status": "working"}},
]
UNREADABLE_IDS = ["content", "item", "tagged"]


@pytest.mark.parametrize("result", UNREADABLE_CALL_RESULTS, ids=UNREADABLE_IDS)
async def test_a_call_result_mcp_cannot_read_fails_as_one_that_may_have_run(
    scripted: Callable[..., ScriptedServer], result: Any
) -> None:
    # An object, so a JSON-RPC message, but no `CallToolResult`: without the bridge's word the
    # session would raise its own validation error, which says nothing of the call having
    # run, and a framework's retry would run it again. The server answered it: it ran.
    server = scripted("legacy")
    async with streamablehttp_client(server.url) as (read, write, _):
        async with ClientSession(read, write) as session:
            await session.initialize()
            with anyio.fail_after(5):
                with pytest.raises(McpError) as raised:
                    await session.call_tool("raw", {"result": result})
                echoed = await session.call_tool("echo", {"text": "after"})
    assert raised.value.error.code == -32054, raised.value.error
    assert (raised.value.error.data or {}).get("kind") == "protocol", raised.value.error
    assert (raised.value.error.data or {}).get("mayHaveRun") is True, raised.value.error
    assert getattr(echoed.content[0], "text", None) == "after", echoed
    assert len(server.requests("tools/call")) == 2, server.requests("tools/call")


@pytest.mark.parametrize("result", UNREADABLE_CALL_RESULTS, ids=UNREADABLE_IDS)
async def test_a_call_result_mcp_cannot_read_completes_as_one_that_may_have_run(
    scripted: Callable[..., ScriptedServer], result: Any
) -> None:
    server = scripted("legacy")
    async with streamablehttp_client(server.url, interrupted_as_result=True) as (read, write, _):
        async with ClientSession(read, write) as session:
            await session.initialize()
            with anyio.fail_after(5):
                answered = await session.call_tool("raw", {"result": result})
                echoed = await session.call_tool("echo", {"text": "after"})
    assert answered.isError, answered
    outcome = (answered.meta or {}).get(OUTCOME_META_KEY)
    assert outcome is not None and outcome["kind"] == "protocol", answered
    assert "may or may not have run" in outcome["message"], outcome
    assert getattr(echoed.content[0], "text", None) == "after", echoed
    assert len(server.requests("tools/call")) == 2, server.requests("tools/call")


# What an `mcp` 2.x session reads as no `CallToolResult` but as an answer of its own: a round
# asking for input (`requestState`), a task. The Rust bridge completes a multi-round call and a
# task itself, so a `tools/call` that was not asked as a task never legitimately gets either.
MCP2_NON_CALL_RESULTS = [
    {"requestState": "x"},
    {"resultType": "task", "task": {"taskId": "t-1", "status": "working"}},
]

# Run in the `mcp` 2.x virtualenv (argv: the URL, the result as JSON, `interrupted_as_result`):
# prints how the call on `raw` ended, as JSON, then calls `echo` to show the session goes on.
_MCP2_RAW_CALL = """
import asyncio, json, sys

from mcp import ClientSession

from mcp_resume.bridge import OUTCOME_META_KEY, streamablehttp_client


async def main(url, result, as_result):
    async with streamablehttp_client(url, interrupted_as_result=as_result) as (read, write, _):
        async with ClientSession(read, write) as session:
            await session.initialize()
            try:
                answered = await session.call_tool("raw", {"result": result})
            except Exception as error:
                data = getattr(getattr(error, "error", None), "data", None)
                code = getattr(getattr(error, "error", None), "code", None)
                ended = {"raised": type(error).__name__, "code": code, "data": data}
            else:
                ended = {"is_error": answered.is_error,
                         "outcome": (answered.meta or {}).get(OUTCOME_META_KEY)}
            echoed = await session.call_tool("echo", {"text": "after"})
            ended["after"] = echoed.content[0].text
            print(json.dumps(ended))


asyncio.run(asyncio.wait_for(main(sys.argv[1], json.loads(sys.argv[2]), sys.argv[3] == "1"), 30))
"""


@pytest.mark.parametrize("as_result", [False, True], ids=["raises", "as_result"])
@pytest.mark.parametrize("result", MCP2_NON_CALL_RESULTS, ids=["input_required", "task"])
def test_an_mcp_2_session_reads_a_call_result_of_another_kind_as_one_that_may_have_run(
    scripted: Callable[..., ScriptedServer], tmp_path: Path, result: Any, as_result: bool
) -> None:
    # `mcp` 2.x's session reads either as an answer of its own and raises an error of its own
    # for it (its validation error, or one asking for `allow_input_required`), which says
    # nothing of the call having run: a framework's retry would run it again.
    python = os.environ.get("MCP_RESUME_MCP2_PYTHON")
    if not python:
        pytest.fail("MCP_RESUME_MCP2_PYTHON is not set: run the suite through bindings/python/test.sh")
    server = scripted("legacy")
    out = subprocess.run(
        [python, "-c", _MCP2_RAW_CALL, server.url, json.dumps(result), "1" if as_result else "0"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    ended = json.loads(out.stdout)
    if as_result:
        assert ended.get("is_error") is True, ended
        outcome = ended.get("outcome") or {}
        assert outcome.get("kind") == "protocol", ended
        assert "may or may not have run" in outcome.get("message", ""), ended
    else:
        assert ended.get("raised") == "MCPError" and ended.get("code") == -32054, ended
        assert (ended.get("data") or {}).get("kind") == "protocol", ended
        assert (ended.get("data") or {}).get("mayHaveRun") is True, ended
    assert ended["after"] == "after", ended
    assert len(server.requests("tools/call")) == 2, server.requests("tools/call")


async def test_a_call_timed_out_on_the_server_completes_as_one_that_may_have_run(
    scripted: Callable[..., ScriptedServer],
) -> None:
    # Sent, and running when its deadline passed: a framework's retry must not run it again,
    # so with `interrupted_as_result` it completes as an error result saying so.
    server = scripted("legacy")
    async with streamablehttp_client(server.url, call_timeout=0.5, interrupted_as_result=True) as (
        read,
        write,
        _,
    ):
        async with ClientSession(read, write) as session:
            await session.initialize()
            with anyio.fail_after(5):
                result = await session.call_tool("hang")
    assert result.isError, result
    outcome = (result.meta or {}).get(OUTCOME_META_KEY)
    assert outcome is not None and outcome["kind"] == "timeout", result
    assert "may or may not have run" in outcome["message"], outcome


async def test_a_failed_delete_on_exit_is_logged_and_hides_nothing(
    scripted: Callable[..., ScriptedServer], caplog: pytest.LogCaptureFixture
) -> None:
    # As `mcp`'s own transport: ending the block never fails for the DELETE's sake, so how
    # the block ended (a result, or a call's own error) is what the application sees.
    server = scripted("legacy")
    server.delete_status = 500
    async with streamablehttp_client(server.url) as (read, write, _):
        async with ClientSession(read, write) as session:
            await session.initialize()
            result = await session.call_tool("echo", {"text": "kept"})
    assert not result.isError
    assert any("session termination failed" in r.getMessage() for r in caplog.records)

    class Mine(Exception):
        pass

    try:
        async with streamablehttp_client(server.url) as (read, write, _):
            async with ClientSession(read, write) as session:
                await session.initialize()
                raise Mine
    except BaseException as e:  # noqa: BLE001 - the task groups wrap it; it must be Mine
        while isinstance(e, BaseExceptionGroup) and len(e.exceptions) == 1:
            e = e.exceptions[0]
        assert isinstance(e, Mine), repr(e)
    else:
        raise AssertionError("the block's own error was lost")


def test_an_mcp_2_client_session_runs_over_the_bridge(
    cluster: Callable[..., Cluster], tmp_path: Path
) -> None:
    """`mcp` 2.x (from PyPI, in a virtualenv of its own: langchain-mcp-adapters pins 1.x)
    takes the same streams."""
    # test.sh's second virtualenv (requirements-mcp2.txt, the wheel installed).
    python = os.environ.get("MCP_RESUME_MCP2_PYTHON")
    if not python:
        pytest.fail("MCP_RESUME_MCP2_PYTHON is not set: run the suite through bindings/python/test.sh")
    c = cluster("strict", "--idle-timeout-ms", "0", "--cut-after-events", "3")
    script = Path(__file__).parent / "scripts" / "mcp2_session.py"
    out = subprocess.run(
        [python, str(script), c.url], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "from mcp 2"


def test_a_servers_error_marked_may_have_run_reads_as_such() -> None:
    # A server's JSON-RPC error that did not answer the call itself (a task's poll refused):
    # the SDK keeps the server's error and marks it, without a kind of its own.
    from mcp_resume.bridge import may_have_run_kind

    assert may_have_run_kind({"mayHaveRun": True}) == "rpc"
    assert may_have_run_kind({"detail": "unknown task", "mayHaveRun": True}) == "rpc"
    assert may_have_run_kind({"detail": "unknown task"}) is None
    assert may_have_run_kind({"kind": "timeout", "mayHaveRun": True}) == "timeout"
    assert may_have_run_kind({"kind": "timeout"}) is None
