"""A Python MCP deployment from real parts, for the server guard's tests: a ``redis-server``,
three replicas of ``replica.py`` (the ``mcp`` package's server on uvicorn, with or without
``ResumeSafetyMiddleware``), nginx in front (idle responses cut; a session pinned to the
replica that holds it in memory by its id's prefix, the others its backups), its
configuration the one ``mock-cluster nginx-config`` renders for the Rust real-parts tests. The truth is the tool's own counters in Redis.

Faults come from outside, as in ``server/tests/real_parts``: nginx cutting a call's silent
response, a rolling restart (SIGTERM drains each replica, a new process takes its port), and
``kill -9`` of the replica running a call."""

from __future__ import annotations

import concurrent.futures
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent

#: nginx's ``proxy_read_timeout``: a response silent this long is cut.
IDLE_MS = 300
#: The replicas' claim lease: a killed replica's keys read as lost this long after it died.
LEASE_S = 0.8


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def program(name: str) -> str:
    found = shutil.which(name) or next(
        (p for p in (f"/usr/sbin/{name}", f"/usr/bin/{name}") if os.access(p, os.X_OK)), None
    )
    if found is None:
        pytest.fail(f"the server guard's deployment tests need {name} (apt-get install {name})")
    return found


def stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM, wait: float = 10) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class Redis:
    """A ``redis-server`` of the test's own, and the few commands the tests send it."""

    def __init__(self) -> None:
        self.dir = tempfile.TemporaryDirectory(prefix="guard-redis-")
        for _ in range(5):
            self.port = free_port()
            self.proc = subprocess.Popen(
                [program("redis-server"), "--port", str(self.port), "--bind", "127.0.0.1",
                 "--save", "", "--appendonly", "no", "--dir", self.dir.name],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and self.proc.poll() is None:
                try:
                    if self.command("PING") == "PONG":
                        return
                except OSError:
                    time.sleep(0.02)
            stop(self.proc)
        raise RuntimeError("redis-server did not start")

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def command(self, *args: str) -> str | None:
        """One command; its reply as text (``None`` for a nil)."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
            payload = b"*%d\r\n" % len(args)
            for arg in args:
                data = arg.encode()
                payload += b"$%d\r\n%s\r\n" % (len(data), data)
            s.sendall(payload)
            reply = s.makefile("rb")
            line = reply.readline().rstrip(b"\r\n")
            if line.startswith(b"-"):
                raise RuntimeError(line.decode())
            if not line.startswith(b"$"):
                return line[1:].decode()
            size = int(line[1:])
            return None if size < 0 else reply.read(size + 2)[:size].decode()

    def stop(self) -> None:
        stop(self.proc, signal.SIGKILL)
        self.dir.cleanup()


class Nginx:
    """nginx in front of the replicas, with the configuration the Rust real-parts tests use."""

    def __init__(self, mock_cluster: Path, upstreams: list[int]) -> None:
        self.dir = tempfile.TemporaryDirectory(prefix="guard-nginx-")
        self.pid_file = Path(self.dir.name) / "nginx.pid"  # where the generated config has it
        os.chmod(self.dir.name, 0o755)  # nginx's workers (run as root: another user) read it
        # A port free when picked may be taken before nginx binds it: nginx then exits, and
        # starts again on another.
        for _ in range(5):
            self.port = free_port()
            conf = subprocess.run(
                [str(mock_cluster), "nginx-config", "--listen", f"127.0.0.1:{self.port}",
                 "--prefix", self.dir.name, "--session-prefixes", "--idle-timeout-ms",
                 str(IDLE_MS), *[a for p in upstreams for a in ("--upstream", f"127.0.0.1:{p}")]],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            path = Path(self.dir.name) / "nginx.conf"
            path.write_text(conf)
            self.proc = subprocess.Popen(
                [program("nginx"), "-p", self.dir.name, "-c", str(path), "-e",
                 str(Path(self.dir.name) / "error.log")],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                try:
                    # nginx writes its pid file once its sockets are bound: a port taken by
                    # another process is not mistaken for nginx listening.
                    if self.pid_file.read_text().strip() == str(self.proc.pid):
                        socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                        return
                except OSError:
                    pass
                if self.proc.poll() is not None:
                    break
                time.sleep(0.02)
            if self.proc.poll() is None:
                break  # running but not listening: another port would not help
        raise RuntimeError("nginx did not start:\n" + self.log("error.log"))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def log(self, name: str) -> str:
        try:
            return (Path(self.dir.name) / name).read_text()[-4000:]
        except OSError:
            return ""

    def stop(self) -> None:
        stop(self.proc)
        self.dir.cleanup()


class Replica:
    """One ``replica.py`` process on a port of its own."""

    def __init__(self, kind: str, guarded: bool, redis: Redis, port: int, index: int) -> None:
        self.args = [sys.executable, str(HERE / "replica.py"), "--kind", kind,
                     "--port", str(port), "--redis", redis.url, "--lease", str(LEASE_S),
                     "--session-prefix", f"i{index}-"]
        if not guarded:
            self.args.append("--no-guard")
        self.port = port
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        proc = subprocess.Popen(
            self.args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
        assert proc.stdout is not None
        first = proc.stdout.readline().decode().strip()
        if not first.startswith("http://"):
            proc.kill()
            raise RuntimeError(f"the replica did not start: {first!r}")
        self.proc = proc

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill9(self) -> None:
        if self.proc is not None:
            stop(self.proc, signal.SIGKILL)

    def drain(self) -> None:
        """SIGTERM: the replica closes its connections, lets the calls in flight finish (their
        answers stored by the guard, none sent), then exits."""
        if self.proc is not None:
            stop(self.proc, signal.SIGTERM, wait=15)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            stop(self.proc)


class Deployment:
    """Three replicas of ``kind`` behind nginx, sharing ``redis``."""

    def __init__(self, mock_cluster: Path, redis: Redis, kind: str, guarded: bool) -> None:
        self.kind = kind
        self.guarded = guarded
        self.redis = redis
        # In parallel: each spends most of its start importing.
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            self.replicas = list(pool.map(lambda i: self._first(kind, guarded, redis, i), range(3)))
        self.nginx = Nginx(mock_cluster, [r.port for r in self.replicas])

    @staticmethod
    def _first(kind: str, guarded: bool, redis: Redis, index: int) -> Replica:
        """Replica ``index`` started on a free port. A port free when picked may be taken
        before the replica binds it: the replica then exits, and starts again on another.
        Later starts (a restart, a revival) keep the port nginx knows."""
        attempts = 5
        while True:
            replica = Replica(kind, guarded, redis, free_port(), index)
            try:
                replica.start()
                return replica
            except RuntimeError:
                attempts -= 1
                if attempts == 0:
                    raise

    @staticmethod
    def _start(replicas: list[Replica]) -> None:
        with concurrent.futures.ThreadPoolExecutor(len(replicas)) as pool:
            list(pool.map(Replica.start, replicas))

    @property
    def url(self) -> str:
        return self.nginx.url

    def effects(self, tag: str) -> int:
        """How many times the tool applied its side effect for ``tag``: the truth."""
        return int(self.redis.command("GET", f"effects:{tag}") or 0)

    def finished(self, tag: str) -> int:
        """How many runs of the call tagged ``tag`` reached their end (not killed mid-run)."""
        return int(self.redis.command("GET", f"done:{tag}") or 0)

    def effect_pid(self, tag: str) -> int | None:
        """The pid of the replica that applied the effect of the call tagged ``tag``, if one has."""
        pid = self.redis.command("GET", f"ran:{tag}")
        return None if pid is None else int(pid)

    def kill9(self, pid: int) -> None:
        next(r for r in self.replicas if r.pid == pid).kill9()

    def revive(self) -> None:
        self._start([r for r in self.replicas if not r.alive()])

    def stop(self) -> None:
        self.nginx.stop()
        for r in self.replicas:
            r.stop()
