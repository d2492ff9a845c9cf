"""Fixtures: the mock cluster binary (built once per session unless given) and a scripted
server for what the cluster does not do (server requests, the modern era, recording
cancellations)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from scripted_server import ScriptedServer

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="session")
def mock_cluster_bin() -> Path:
    """The `mock-cluster` binary: `$MCP_RESUME_MOCK_CLUSTER`, else built with cargo."""
    given = os.environ.get("MCP_RESUME_MOCK_CLUSTER")
    if given:
        return Path(given)
    out = subprocess.run(
        [
            "cargo",
            "build",
            "-p",
            "mock-server",
            "--bin",
            "mock-cluster",
            "--message-format=json-render-diagnostics",
        ],
        cwd=REPO,
        check=True,
        stdout=subprocess.PIPE,
        text=True,
    ).stdout
    for line in out.splitlines():
        msg = json.loads(line)
        if msg.get("reason") == "compiler-artifact" and msg["target"]["name"] == "mock-cluster":
            if msg.get("executable"):
                return Path(msg["executable"])
    raise RuntimeError("cargo built no mock-cluster executable")


class Cluster:
    """One `mock-cluster` process: its MCP URL and its oracle."""

    def __init__(self, binary: Path, args: list[str]) -> None:
        self.args = args
        self.proc = subprocess.Popen(
            [str(binary), "--listen", "127.0.0.1:0", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        first = self.proc.stdout.readline().strip()
        if not first.startswith("http://"):
            self.stop()
            raise RuntimeError(f"mock-cluster did not start: {first!r}")
        self.url = first
        self.base = first.rsplit("/mcp", 1)[0]

    def oracle(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.base}/admin/oracle", timeout=5) as resp:
            result: dict[str, Any] = json.load(resp)
            return result

    def settled_oracle(self, quiet: float = 0.3, limit: float = 5.0) -> dict[str, Any]:
        """The oracle once executions stop changing: a call cut off from its client may
        still be running on an instance (the binary has no idle route)."""
        deadline = time.monotonic() + limit
        last = self.oracle()
        while time.monotonic() < deadline:
            time.sleep(quiet)
            now = self.oracle()
            if now["totals"] == last["totals"]:
                return now
            last = now
        return last

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def cluster(mock_cluster_bin: Path) -> Iterator[Callable[..., Cluster]]:
    """Starts clusters: `cluster("strict", "--cut-after-events", "1")`; all stopped at the
    end of the test."""
    started: list[Cluster] = []

    def start(preset: str, *args: str) -> Cluster:
        c = Cluster(mock_cluster_bin, ["--preset", preset, "--instances", "3", *args])
        started.append(c)
        return c

    yield start
    for c in started:
        c.stop()


@pytest.fixture
def scripted() -> Iterator[Callable[..., ScriptedServer]]:
    """Starts scripted servers: `scripted("legacy")` or `scripted("modern")`."""
    started: list[ScriptedServer] = []

    def start(era: str = "legacy") -> ScriptedServer:
        s = ScriptedServer(era)
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()
