"""What a user installs: the wheel's metadata and license files, the wheel in a fresh
virtualenv running the quickstart against the mock cluster, and the sdist's contents.
`test.sh` builds both (`maturin build`, `maturin sdist`) and names them in the environment."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Callable
from email.parser import Parser
from pathlib import Path

import pytest

from conftest import Cluster

HERE = Path(__file__).resolve().parents[1]


def built(variable: str) -> Path:
    value = os.environ.get(variable)
    if not value:
        pytest.fail(f"{variable} is not set: run the suite through bindings/python/test.sh")
    return Path(value)


def test_the_wheel_carries_its_metadata_and_licenses() -> None:
    wheel = built("MCP_RESUME_WHEEL")
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        meta_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
        metadata = Parser().parsestr(z.read(meta_name).decode())
    assert metadata["Name"] == "mcp-resume"
    assert metadata["License-Expression"] == "MIT OR Apache-2.0"
    classifiers = metadata.get_all("Classifier") or []
    assert "Programming Language :: Python :: 3.10" in classifiers
    assert "Typing :: Typed" in classifiers
    urls = metadata.get_all("Project-URL") or []
    assert any(u.startswith("Documentation, ") for u in urls), urls
    assert {"mcp", "server", "fastmcp", "pydantic-ai", "langchain", "openai-agents"} <= set(
        metadata.get_all("Provides-Extra") or []
    )
    licenses = [n for n in names if "/licenses/" in n]
    assert {Path(n).name for n in licenses} == {"LICENSE-MIT", "LICENSE-APACHE"}, names
    # The stubs and the marker ship, so type checkers see the API.
    assert any(n.endswith("mcp_resume/_mcp_resume.pyi") for n in names)
    assert any(n.endswith("mcp_resume/py.typed") for n in names)


def test_the_sdist_holds_what_a_build_needs() -> None:
    sdist = built("MCP_RESUME_SDIST")
    with tarfile.open(sdist) as t:
        names = {Path(*Path(n).parts[1:]).as_posix() for n in t.getnames()}
    for needed in ("pyproject.toml", "LICENSE-MIT", "LICENSE-APACHE", "README.md"):
        assert needed in names, sorted(names)[:40]
    # The extension and the SDK it links (a path dependency, copied in).
    assert any(n.endswith("src/lib.rs") for n in names)
    assert any(n.endswith("src/proto/session/mod.rs") for n in names), sorted(names)[:40]
    # And the server guard's crate, behind mcp_resume.server.
    assert any(n.endswith("src/skin.rs") for n in names), sorted(names)[:40]


def test_a_fresh_virtualenv_runs_the_quickstart(
    cluster: Callable[..., Cluster], tmp_path: Path
) -> None:
    wheel = built("MCP_RESUME_WHEEL")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    # No index: the wheel needs nothing but the standard library.
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-index", "--no-deps", str(wheel)],
        check=True,
    )
    c = cluster("strict")
    out = subprocess.run(
        [str(python), str(HERE / "examples" / "quickstart.py"), c.url],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,  # not the source tree: the installed package is imported
    )
    assert out.returncode == 0, out.stderr
    assert "hi" in out.stdout.splitlines(), out.stdout
    executions = [e for e in c.settled_oracle()["executions"] if e["tool"] == "counter_increment"]
    assert len(executions) == 1, executions
