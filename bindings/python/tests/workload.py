"""The demo's agent workload (`examples/demo/workload.rs`), from Python.

Connect with a non-default sampling temperature, a keyed `slow` call whose stream the
balancer cuts, then rounds of `generate`, `prepare`→`commit`, keyed and unkeyed
`counter_increment`. Every call carries a unique tag in `_meta`; what the client reported
for a tag is joined with what the cluster's oracle recorded for it.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import mcp_resume
from mcp_resume import Client, EventStream, McpResumeError, ReconnectPolicy, SessionEvent

TEMPERATURE = 0.2
TAG = "io.github.mcp-resume/tag"
CAPABILITIES = {"experimental": {"sampling": {"temperature": TEMPERATURE}}}

# Every kind the SDK reports has its own class; a kind named by a class must match it.
CLASS_OF_KIND: dict[str, type[McpResumeError]] = {
    "transport": mcp_resume.TransportError,
    "timeout": mcp_resume.McpTimeoutError,
    "session_lost": mcp_resume.SessionLostError,
    "outcome_unknown": mcp_resume.OutcomeUnknownError,
    "context_mismatch": mcp_resume.ContextMismatchError,
    "rpc": mcp_resume.RpcError,
    "protocol": mcp_resume.ProtocolError,
    "too_large": mcp_resume.TooLargeError,
    "closed": mcp_resume.ClosedError,
    "unauthorized": mcp_resume.UnauthorizedError,
    "invalid_config": mcp_resume.InvalidConfigError,
    "missing_capability": mcp_resume.MissingCapabilityError,
}


@dataclass
class Call:
    tag: str
    tool: str
    keyed: bool
    result: Any = None
    error: McpResumeError | None = None
    # On success, the tag the result's `_meta` echoed: the cluster echoes the tag of the
    # call it answered, so another tag (or none) means another call's answer.
    echoed: str | None = None


def wrong_answer(call: Any, runs: list[dict[str, Any]]) -> bool:
    """Whether a call reported as success got a wrong answer: another call's (its result
    echoed another tag, or none), one for which nothing ran under its tag (`runs`), one whose
    execution the oracle says was wrong, or a `generate` at another temperature than the
    negotiated one. `call` has the `tag`, `tool`, `result` and `echoed` of a [`Call`]."""
    return (
        call.echoed != call.tag
        or not runs
        or any(
            e["wrong_capability"] or e["unknown_record"] or e["duplicate_side_effect"]
            for e in runs
        )
        or (call.tool == "generate" and call.result != {"temperature": TEMPERATURE})
    )


@dataclass
class Run:
    preset: str
    calls: list[Call] = field(default_factory=list)
    events: list[SessionEvent] = field(default_factory=list)
    oracle: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    def executions(self, tag: str) -> list[dict[str, Any]]:
        return [e for e in self.oracle["executions"] if e.get("tag") == tag]

    def silent_wrong(self) -> list[str]:
        """Calls reported as success with a wrong answer: another call's (the result echoed
        another tag, or none), one for which nothing ran under the call's tag, one whose
        execution the oracle says was wrong, or a `generate` at another temperature than
        the negotiated one."""
        return [
            f"{call.tag} (echoed {call.echoed!r}): {call.result!r}"
            for call in self.calls
            if call.error is None and wrong_answer(call, self.executions(call.tag))
        ]

    def duplicate_keyed(self) -> int:
        return sum(
            1
            for call in self.calls
            if call.keyed
            for e in self.executions(call.tag)
            if e["duplicate_side_effect"]
        )

    def errors(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for call in self.calls:
            if call.error is not None:
                counts[call.error.kind] = counts.get(call.error.kind, 0) + 1
        return counts

    def event_count(self, kind: str) -> int:
        return sum(1 for e in self.events if e.type == kind)


async def drain(events: EventStream, timeout: float = 10) -> list[SessionEvent]:
    """Every event of a closed client's stream: `close()` ends the stream after the events
    sent before it. Fails if the stream has not ended within `timeout` seconds."""

    async def collect() -> list[SessionEvent]:
        return [event async for event in events]

    return await asyncio.wait_for(collect(), timeout)


def build_client(url: str) -> Client:
    return Client(
        url,
        capabilities=CAPABILITIES,
        call_timeout=3.0,
        reconnect=ReconnectPolicy(initial_delay=0.01, max_delay=0.2),
        jitter_seed=7,
    )


async def run_workload(url: str, preset: str, rounds: int = 4) -> Run:
    run = Run(preset)
    client = build_client(url)
    events = client.events()

    async def collect() -> None:
        async for event in events:
            run.events.append(event)

    collector = asyncio.create_task(collect())
    started = time.monotonic()

    async def call(tool: str, args: dict[str, Any], keyed: bool) -> Any:
        tag = f"{preset}/python/{len(run.calls):03}-{tool}"
        record = Call(tag, tool, keyed)
        run.calls.append(record)
        try:
            result = await client.call_tool(
                tool,
                args,
                idempotency_key=uuid.uuid4() if keyed else None,
                progress=tag if tool == "slow" else None,
                meta={TAG: tag},
            )
            record.result = result.structured_content
            record.echoed = (result.meta or {}).get(TAG)
            return result.structured_content
        except McpResumeError as e:
            record.error = e
            return None

    await client.connect()
    await call("slow", {"steps": 6, "delay_ms": 20}, True)
    for n in range(rounds):
        await call("generate", {"prompt": f"summary {n}"}, False)
        prepared = await call("prepare", {"item": f"order-{n}"}, True)
        if isinstance(prepared, dict) and isinstance(prepared.get("record"), str):
            await call("commit", {"record": prepared["record"]}, True)
        await call("counter_increment", {}, True)
        await call("counter_increment", {}, False)
    try:
        await client.close()
    except McpResumeError:
        pass
    run.seconds = time.monotonic() - started
    # The close ends the stream after every event sent before it: the collector finishes.
    await asyncio.wait_for(collector, 10)
    return run
