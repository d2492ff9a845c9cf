"""The seed scenario from Python against the mock cluster binary, on every preset, judged
by the cluster's oracle rather than by what the client believed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from conftest import Cluster
from mcp_resume import (
    Client,
    ContextMismatchError,
    McpResumeError,
    OutcomeUnknownError,
    ReconnectPolicy,
    SessionLostError,
)
from workload import CAPABILITIES, CLASS_OF_KIND, TAG, TEMPERATURE, drain, run_workload

PRESETS = ["naive", "strict", "replicated", "sticky"]


@pytest.mark.parametrize("preset", PRESETS)
async def test_workload_never_gives_a_silent_wrong_answer(
    cluster: Callable[..., Cluster], preset: str
) -> None:
    c = cluster(
        preset, "--idle-timeout-ms", "0", "--cut-after-events", "3", capabilities=CAPABILITIES
    )
    run = await run_workload(c.url, preset)
    run.oracle = c.settled_oracle()
    totals = run.oracle["totals"]
    summary = f"{preset}: errors {run.errors()}, totals {totals}"

    assert run.silent_wrong() == [], summary
    assert run.duplicate_keyed() == 0, summary
    # No unkeyed call was ever sent twice.
    assert totals["repeated_unkeyed_executions"] == 0, summary
    # Every failure is explicit, raised as the class of its kind.
    for call in run.calls:
        if call.error is not None:
            assert type(call.error) is CLASS_OF_KIND[call.error.kind], call.error
    assert len({call.tag for call in run.calls}) == len(run.calls)

    if preset in ("replicated", "sticky"):
        # Resume is safe there: every call succeeded, ran once, on the first session.
        assert run.errors() == {}, summary
        assert totals["initializes"] == 1, summary
        assert any(r["honored"] for r in run.oracle["resumes"]), summary
        assert run.event_count("resumed") >= 1
        for call in run.calls:
            assert len(run.executions(call.tag)) == 1, call.tag
    elif preset == "strict":
        # The cross-instance resume is rejected; the client re-initializes and re-sends
        # the keyed `slow` call, which the idempotency store answers without running it
        # again.
        assert run.errors() == {}, summary
        assert totals["rejections"], summary
        assert run.event_count("reinitialized") >= 1
        assert run.event_count("redispatched") >= 1
        slow = run.calls[0]
        assert slow.tool == "slow" and len(run.executions(slow.tag)) == 1
        assert totals["idempotent_replays"] >= 1, summary
        assert totals["duplicate_side_effects"] == 0, summary
    else:
        # naive: the cluster itself runs calls under the wrong context; each one is
        # reported as an error, never as success.
        assert totals["wrong_capability"] > 0, summary
        assert set(run.errors()) <= {"context_mismatch", "session_lost"}, summary
        assert run.errors().get("context_mismatch", 0) >= 1, summary

    for call in run.calls:
        if call.tool == "generate" and call.error is None:
            assert call.result == {"temperature": TEMPERATURE}, call.tag


def _cut_client(url: str) -> Client:
    # Only the scenario's own requests go through the balancer (no listen stream).
    return Client(
        url,
        capabilities=CAPABILITIES,
        open_listen_stream=False,
        call_timeout=5.0,
        reconnect=ReconnectPolicy(initial_delay=0.02, max_delay=0.2),
        jitter_seed=3,
    )


@pytest.mark.parametrize("preset", PRESETS)
async def test_unkeyed_interrupted_call_is_never_resent(
    cluster: Callable[..., Cluster], preset: str
) -> None:
    """An unkeyed side effect whose stream is cut right after its first event."""
    c = cluster(
        preset, "--idle-timeout-ms", "0", "--cut-after-events", "1", capabilities=CAPABILITIES
    )
    client = _cut_client(c.url)
    events = client.events()
    await client.connect()
    outcome: Any
    try:
        outcome = await client.call_tool("counter_increment", {}, meta={TAG: "unkeyed"})
    except McpResumeError as e:
        outcome = e
    oracle = c.settled_oracle()
    await client.close()
    seen = [e.type for e in await drain(events)]

    runs = [e for e in oracle["executions"] if e["tag"] == "unkeyed"]
    # It ran exactly once, whatever the preset: never re-sent; under the negotiated client
    # capabilities except on naive.
    assert len(runs) == 1, oracle["totals"]
    assert runs[0]["wrong_capability"] == (preset == "naive"), runs
    assert "redispatched" not in seen, seen
    if preset == "strict":
        # The resume is rejected by another instance: the client cannot know whether it
        # ran, so it says so.
        assert isinstance(outcome, OutcomeUnknownError), outcome
        assert outcome.kind == "outcome_unknown"
        assert "outcome_unknown" in seen and "resume_rejected" in seen, seen
    elif preset == "naive":
        # It ran under a made-up context on an instance that never saw `initialize`.
        assert runs[0]["wrong_capability"]
        assert isinstance(outcome, ContextMismatchError), outcome
    else:
        # The resume is honoured: the one execution's answer is delivered.
        assert not isinstance(outcome, Exception), outcome
        assert outcome.structured_content is not None
        assert "resumed" in seen, seen


async def test_naive_failures_are_explicit(cluster: Callable[..., Cluster]) -> None:
    """On naive, every answer produced under the wrong context is an explicit error; a
    success is a correct answer. (Re-initializing is not given up on: `SessionLost` is kept
    for re-initializations that keep failing until a call's deadline.)"""
    c = cluster("naive", "--idle-timeout-ms", "0", capabilities=CAPABILITIES)
    client = _cut_client(c.url)
    await client.connect()
    outcomes: list[object] = []
    for n in range(12):
        try:
            outcomes.append(
                await client.call_tool("generate", {"prompt": "x"}, meta={TAG: f"g{n}"})
            )
        except (ContextMismatchError, SessionLostError) as e:
            outcomes.append(e)
    oracle = c.settled_oracle()
    await client.close()

    failed = [n for n, o in enumerate(outcomes) if isinstance(o, Exception)]
    assert failed, "round-robin on naive must put some call on a stranger instance"
    for n, outcome in enumerate(outcomes):
        runs = [e for e in oracle["executions"] if e["tag"] == f"g{n}"]
        if isinstance(outcome, Exception):
            continue
        # A success is a correct answer: it ran where the session's context is.
        assert outcome.structured_content == {"temperature": TEMPERATURE}, outcome
        assert runs and not any(r["wrong_capability"] for r in runs), runs
