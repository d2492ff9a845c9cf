"""What ResumeSafetyMiddleware costs a Python MCP server, side by side in one run.

    cd bindings/python
    maturin develop --release
    python bench/guard_overhead.py [--rounds 7] [--calls 500] [--concurrency 8]

Per server kind of ``tests/replica.py`` (FastMCP with an event store; the low-level ``mcp``
server answering JSON), two uvicorn replicas run at once: one wrapped in the middleware
(memory store), one bare. Rounds alternate between them, so a load that comes and goes on the
machine weighs on both: unkeyed ``echo`` calls by ``mcp_resume.Client`` from this process,
a fresh session each round, the clock covering the calls only. Prints the median calls/s of
each, their ratio, each replica's CPU time per call (from /proc: Linux), and the machine's
load average before and after.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
from pathlib import Path

from calls_per_second import python_round  # this folder's, on sys.path as the script's

REPLICA = Path(__file__).resolve().parents[1] / "tests" / "replica.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start(kind: str, guarded: bool) -> tuple[subprocess.Popen[str], str]:
    args = [sys.executable, str(REPLICA), "--kind", kind, "--port", str(free_port()), "--store", "memory"]
    if not guarded:
        args.append("--no-guard")
    child = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    url = child.stdout.readline().strip()
    if not url.startswith("http://"):
        child.kill()
        raise SystemExit(f"the {kind} replica did not start")
    return child, url


def stop(child: subprocess.Popen[str]) -> None:
    assert child.stdin is not None
    child.stdin.close()
    try:
        child.wait(10)
    except subprocess.TimeoutExpired:
        child.kill()


def cpu(pid: int) -> float:
    """A process's CPU time so far (user and system, µs), from /proc (Linux)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(") ", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1e6 / os.sysconf("SC_CLK_TCK")


async def one_round(replica: subprocess.Popen[str], url: str, calls: int, concurrency: int) -> tuple[float, float]:
    """One round (timed as `calls_per_second.py` times its rounds): calls per second, and the
    replica's CPU µs per call."""
    before = cpu(replica.pid)
    seconds = await python_round(url, calls, concurrency)
    return calls / seconds, (cpu(replica.pid) - before) / calls


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--calls", type=int, default=500)
    p.add_argument("--concurrency", type=int, default=8)
    a = p.parse_args()
    print(
        f"{a.calls} calls per round, {a.rounds} rounds each, {a.concurrency} in flight; "
        f"load average (1 5 15 min) before: {load()}"
    )
    print("| server kind | bare calls/s | guarded calls/s | guarded / bare | server CPU µs/call, bare | guarded |")
    print("|---|---|---|---|---|---|")
    for kind, name in (("fastmcp", "FastMCP, SSE with an event store"), ("lowlevel", "low-level server, JSON")):
        bare, bare_url = start(kind, guarded=False)
        guarded, guarded_url = start(kind, guarded=True)
        try:
            # One round each to warm up, not counted.
            await one_round(bare, bare_url, a.calls, a.concurrency)
            await one_round(guarded, guarded_url, a.calls, a.concurrency)
            runs: dict[str, list[tuple[float, float]]] = {"bare": [], "guarded": []}
            for _ in range(a.rounds):
                runs["bare"].append(await one_round(bare, bare_url, a.calls, a.concurrency))
                runs["guarded"].append(await one_round(guarded, guarded_url, a.calls, a.concurrency))
            b, g = (statistics.median(r for r, _ in runs[k]) for k in ("bare", "guarded"))
            cb, cg = (statistics.median(c for _, c in runs[k]) for k in ("bare", "guarded"))
            print(f"| {name} | {b:.0f} | {g:.0f} | {g / b:.2f}x | {cb:.0f} | {cg:.0f} |")
        finally:
            stop(bare)
            stop(guarded)
    print(f"load average after: {load()}")


if __name__ == "__main__":
    asyncio.run(main())
