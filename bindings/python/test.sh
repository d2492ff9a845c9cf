#!/usr/bin/env bash
# Builds the Python extension into a virtualenv, then type-checks the examples and the stubs
# and runs the pytest suite. Run from anywhere; `cargo test --workspace` runs it
# (tests/external/bindings.rs).
#
#   CARGO_TARGET_DIR   where cargo builds (default: the workspace's `target/`, so the mock
#                      cluster binary comes from `cargo test --workspace`'s build)
#   MCP_RESUME_PY_VENV the virtualenv (default: $CARGO_TARGET_DIR/python-venv)
#   MCP_RESUME_PY_VENV_MCP2  the second one, `mcp` 2.x with FastMCP 4 and pydantic-ai on it
#                      (default: $CARGO_TARGET_DIR/python-venv-mcp2)
#   MCP_RESUME_MOCK_CLUSTER  the mock-cluster binary (default: built by
#                      `cargo test --workspace --no-run`, a no-op after that command)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$repo/target}"
venv="${MCP_RESUME_PY_VENV:-$CARGO_TARGET_DIR/python-venv}"

[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$here/requirements-dev.txt"
# The frameworks' current majors need `mcp` 2.x, which langchain-mcp-adapters refuses: a
# virtualenv of their own (tests/test_frameworks.py runs in it too).
venv2="${MCP_RESUME_PY_VENV_MCP2:-$CARGO_TARGET_DIR/python-venv-mcp2}"
[ -x "$venv2/bin/python" ] || python3 -m venv "$venv2"
"$venv2/bin/python" -m pip install -q --disable-pip-version-check -r "$here/requirements-mcp2.txt"
export VIRTUAL_ENV="$venv" PATH="$venv/bin:$PATH"
# The TypeScript SDK server the framework tests kill mid-call (tests/interop/ts-server.mjs).
[ -d "$repo/tests/interop/node_modules" ] ||
  (cd "$repo/tests/interop" && npm ci --no-audit --no-fund --loglevel=error)

# The mock cluster binary `cargo test --workspace` builds (its own tests run it; they pass
# its path in MCP_RESUME_MOCK_CLUSTER). The extension is a workspace of its own, built into
# the same target directory.
if [ -z "${MCP_RESUME_MOCK_CLUSTER:-}" ]; then
  (cd "$repo" && cargo test --workspace --no-run --quiet)
  export MCP_RESUME_MOCK_CLUSTER="$CARGO_TARGET_DIR/debug/mock-cluster"
fi
# What a user installs: a wheel (cargo's dev profile, to reuse the build) and an sdist, both
# checked by tests/test_packaging.py; the suite runs against the installed wheel.
dist="$CARGO_TARGET_DIR/python-dist"
rm -rf "$dist"
(cd "$here" && maturin build --quiet --profile dev --out "$dist" && maturin sdist --out "$dist" >/dev/null)
wheel="$(ls "$dist"/*.whl)"
python -m pip install -q --disable-pip-version-check --force-reinstall --no-deps "$wheel"
"$venv2/bin/python" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps "$wheel"
export MCP_RESUME_WHEEL="$wheel" MCP_RESUME_SDIST="$(ls "$dist"/*.tar.gz)"
export MCP_RESUME_MCP2_PYTHON="$venv2/bin/python"

cd "$here"
mypy --strict examples
python -m mypy.stubtest mcp_resume._mcp_resume
# In four processes (pytest-xdist): the suite waits on servers and subprocesses far more
# than it computes, and each test starts its own servers on ports of its own. The framework
# tests whose code differs by major (FastMCP 4's transport, pydantic-ai on it, the Agents
# SDK's `mcp` 2.x streams) run again in the `mcp` 2.x virtualenv, at the same time (they too
# mostly wait).
mcp2_log="$(mktemp)"
"$venv2/bin/python" -m pytest -n 2 -p no:cacheprovider tests/test_frameworks.py \
  -k "fastmcp or pydantic or openai_agents_retry or openai_agents_server" >"$mcp2_log" 2>&1 &
mcp2=$!
status=0
python -m pytest -n 4 || status=$?
wait "$mcp2" || status=$?
echo "--- tests/test_frameworks.py with mcp 2.x, FastMCP 4, pydantic-ai ($venv2)"
cat "$mcp2_log"
rm -f "$mcp2_log"
exit "$status"
