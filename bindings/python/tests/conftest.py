"""Fixtures: the mock cluster binary (built once per session unless given) and a scripted
server for what the cluster does not do (server requests, the modern era, recording
cancellations)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import threading
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


def end(proc: subprocess.Popen[str]) -> None:
    """Waits for a process told to exit, and kills it if it has not within 5 s."""
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


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

    def settled_oracle(self, quiet: float = 0.3, limit: float = 10.0) -> dict[str, Any]:
        """The oracle once its totals stop changing for `quiet` seconds: a call cut off from
        its client may still be running on an instance. The binary has no idle route, so
        this is a heuristic; it fails if the totals still change after `limit` seconds
        rather than hand back an oracle that is still moving."""
        deadline = time.monotonic() + limit
        last = self.oracle()
        while time.monotonic() < deadline:
            time.sleep(quiet)
            now = self.oracle()
            if now["totals"] == last["totals"]:
                return now
            last = now
        pytest.fail(f"the cluster's oracle did not settle within {limit} s: {last['totals']}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            end(self.proc)


@pytest.fixture
def cluster(mock_cluster_bin: Path) -> Iterator[Callable[..., Cluster]]:
    """Starts clusters: `cluster("strict", "--cut-after-events", "1")`; all stopped at the
    end of the test. `capabilities`: what the test's clients negotiate, told the oracle,
    which then flags any execution under other client capabilities as `wrong_capability`
    (without it, a client sending the wrong ones would go unseen)."""
    started: list[Cluster] = []

    def start(preset: str, *args: str, capabilities: dict[str, Any] | None = None) -> Cluster:
        if capabilities is not None:
            args = (*args, "--expect-client-capabilities", json.dumps(capabilities))
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


class TsServer:
    """The official TypeScript SDK server of `tests/interop` (`ts-server.mjs`), which logs one
    JSON object per line of what it saw and did: what really ran. It can be killed in the
    middle of a call and started again at the same URL; `events` holds the log of every
    process it was, in order."""

    SCRIPT = REPO / "tests" / "interop" / "ts-server.mjs"

    def __init__(self, *args: str) -> None:
        self.args = list(args)
        node = shutil.which("node")
        if node is None or not (self.SCRIPT.parent / "node_modules").is_dir():
            pytest.fail(
                "the TypeScript SDK server needs node and `npm ci` in tests/interop "
                "(bindings/python/test.sh runs it)"
            )
        self.node = node
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.events: list[dict[str, Any]] = []
        self._changed = threading.Condition()
        self.proc: subprocess.Popen[str] | None = None
        self.start()

    def start(self) -> None:
        proc = subprocess.Popen(
            [self.node, str(self.SCRIPT), "--port", str(self.port), *self.args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        first = proc.stdout.readline().strip()
        if not first.startswith("http://"):
            proc.kill()
            raise RuntimeError(f"ts-server did not start: {first!r}")
        self.url = first
        self.proc = proc
        threading.Thread(target=self._read, args=(proc,), daemon=True).start()

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            with self._changed:
                self.events.append(json.loads(line))
                self._changed.notify_all()

    def mark(self) -> int:
        """Where the log is now: `wait_for(..., after=mark)` sees only what comes later."""
        with self._changed:
            return len(self.events)

    def wait_for(
        self, ev: str, timeout: float = 10, after: int = 0, **fields: Any
    ) -> dict[str, Any]:
        """The first event named `ev` logged since `after` whose members equal `fields`."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for e in self.events[after:]:
                    if e.get("ev") == ev and all(e.get(k) == v for k, v in fields.items()):
                        return e
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no {ev} {fields} in the server's log")
                self._changed.wait(left)

    def find(self, ev: str, after: int = 0, **fields: Any) -> list[dict[str, Any]]:
        """The events named `ev` logged since `after` whose members equal `fields`."""
        with self._changed:
            return [
                e
                for e in self.events[after:]
                if e.get("ev") == ev and all(e.get(k) == v for k, v in fields.items())
            ]

    def ran(self, tool: str) -> int:
        """How many times the server started running `tool`, across every process."""
        return sum(1 for e in self.events if e.get("ev") == "tool" and e.get("name") == tool)

    def admin(self, path: str) -> dict[str, Any]:
        """POSTs an admin route (`/admin/release` ends every `block` call running now;
        `/admin/mark` only logs, after whatever the server had under way); its JSON reply."""
        base = self.url.rsplit("/mcp", 1)[0]
        request = urllib.request.Request(f"{base}{path}", data=b"", method="POST")
        with urllib.request.urlopen(request, timeout=5) as resp:
            reply: dict[str, Any] = json.load(resp)
            return reply

    def kill(self) -> None:
        """SIGKILL: the server dies mid-call, as a crashed or redeployed one does."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def restart(self) -> None:
        self.kill()
        self.start()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()  # the script exits when its stdin closes
            end(self.proc)


@pytest.fixture
def ts_server() -> Iterator[TsServer]:
    """A TypeScript SDK server of its own for the test."""
    server = TsServer()
    yield server
    server.stop()


@pytest.fixture
def ts_server_auth() -> Iterator[TsServer]:
    """A TypeScript SDK server requiring `Authorization: Bearer tok-1` on every request."""
    server = TsServer("--auth")
    yield server
    server.stop()
