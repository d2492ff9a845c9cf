"""Calls per second from Python next to the same calls made from Rust, same server, same run.

    cd bindings/python
    maturin develop --release --features bench
    python bench/calls_per_second.py [--rounds 7] [--calls 2000] [--concurrency 1,16]

Starts the mock cluster (`replicated`, 3 instances, no cuts) unless `--url` names a server
with an `echo` tool, then alternates rounds: `echo` calls made by `mcp_resume.Client` from
an asyncio loop, and the same calls made by the Rust SDK on the binding's own runtime
(`_bench_rust_calls`, only in `bench` builds). Each round connects a fresh client with the
listen stream off; the clock covers the calls only. Prints medians, and the process CPU
time per call (client side: the server is another process).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import mcp_resume
from mcp_resume import Client, _mcp_resume

REPO = Path(__file__).resolve().parents[3]


async def python_round(url: str, calls: int, concurrency: int) -> float:
    client = Client(url, open_listen_stream=False)
    await client.connect()
    left = calls

    async def worker() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            await client.call_tool("echo", {"text": "hi"})

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - started
    await client.close()
    return elapsed


async def rust_round(url: str, calls: int, concurrency: int) -> float:
    elapsed: float = await _mcp_resume._bench_rust_calls(url, calls, concurrency)  # type: ignore[attr-defined]
    return elapsed


async def measure(url: str, rounds: int, calls: int, concurrency: int) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {"python": [], "rust": [], "python_cpu": [], "rust_cpu": []}
    await python_round(url, calls // 4, concurrency)  # warm-up
    await rust_round(url, calls // 4, concurrency)
    for n in range(rounds):
        order = [("python", python_round), ("rust", rust_round)]
        if n % 2:
            order.reverse()
        for name, run in order:
            cpu = time.process_time()
            elapsed = await run(url, calls, concurrency)
            samples[name].append(calls / elapsed)
            samples[f"{name}_cpu"].append((time.process_time() - cpu) / calls * 1e6)
    return samples


def start_cluster() -> tuple[subprocess.Popen[str], str]:
    binary = os.environ.get("MCP_RESUME_MOCK_CLUSTER")
    if not binary:
        out = subprocess.run(
            ["cargo", "build", "--release", "-p", "mock-server", "--bin", "mock-cluster",
             "--message-format=json-render-diagnostics"],
            cwd=REPO, check=True, stdout=subprocess.PIPE, text=True,
        ).stdout
        for line in out.splitlines():
            msg = json.loads(line)
            if msg.get("reason") == "compiler-artifact" and msg.get("executable"):
                if msg["target"]["name"] == "mock-cluster":
                    binary = msg["executable"]
    assert binary, "no mock-cluster binary"
    proc = subprocess.Popen(
        [binary, "--preset", "replicated", "--instances", "3", "--listen", "127.0.0.1:0",
         "--idle-timeout-ms", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    assert proc.stdout is not None
    return proc, proc.stdout.readline().strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--concurrency", default="1,16")
    args = parser.parse_args()
    if not hasattr(_mcp_resume, "_bench_rust_calls"):
        sys.exit("build the extension with `maturin develop --release --features bench`")
    proc = None
    url = args.url
    if not url:
        proc, url = start_cluster()
    try:
        print(f"mcp_resume {mcp_resume.__version__}, server {url}, {args.rounds} rounds of "
              f"{args.calls} calls, medians")
        print(f"{'in flight':>9} {'Python calls/s':>15} {'Rust calls/s':>13} {'ratio':>6} "
              f"{'Python µs/call':>15} {'Rust µs/call':>13} {'CPU µs/call Py':>15} "
              f"{'CPU µs/call Rust':>17}")
        for concurrency in (int(c) for c in args.concurrency.split(",")):
            s = asyncio.run(measure(url, args.rounds, args.calls, concurrency))
            py, rs = statistics.median(s["python"]), statistics.median(s["rust"])
            print(f"{concurrency:>9} {py:>15.0f} {rs:>13.0f} {py / rs:>6.2f} "
                  f"{1e6 / py:>15.1f} {1e6 / rs:>13.1f} "
                  f"{statistics.median(s['python_cpu']):>15.1f} "
                  f"{statistics.median(s['rust_cpu']):>17.1f}")
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=5)


if __name__ == "__main__":
    main()
