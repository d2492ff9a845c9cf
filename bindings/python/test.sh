#!/usr/bin/env bash
# Builds the Python extension into a virtualenv, then type-checks the examples and the stubs
# and runs the pytest suite. Run from anywhere; `cargo test --workspace` runs it
# (tests/external/bindings.rs).
#
#   CARGO_TARGET_DIR   where cargo builds (default: the workspace's `target/`, so the mock
#                      cluster binary comes from `cargo test --workspace`'s build)
#   MCP_RESUME_PY_VENV the virtualenv (default: $CARGO_TARGET_DIR/python-venv)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$repo/target}"
venv="${MCP_RESUME_PY_VENV:-$CARGO_TARGET_DIR/python-venv}"

[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$here/requirements-dev.txt"
export VIRTUAL_ENV="$venv" PATH="$venv/bin:$PATH"

# The mock cluster binary `cargo test --workspace` builds (its own tests run it): after that
# command this is a no-op. The extension is a workspace of its own, built into the same
# target directory.
(cd "$repo" && cargo test --workspace --no-run --quiet)
export MCP_RESUME_MOCK_CLUSTER="$CARGO_TARGET_DIR/debug/mock-cluster"
# What a user installs: a wheel (cargo's dev profile, to reuse the build) and an sdist, both
# checked by tests/test_packaging.py; the suite runs against the installed wheel.
dist="$CARGO_TARGET_DIR/python-dist"
rm -rf "$dist"
(cd "$here" && maturin build --quiet --profile dev --out "$dist" && maturin sdist --out "$dist" >/dev/null)
wheel="$(ls "$dist"/*.whl)"
python -m pip install -q --disable-pip-version-check --force-reinstall --no-deps "$wheel"
export MCP_RESUME_WHEEL="$wheel" MCP_RESUME_SDIST="$(ls "$dist"/*.tar.gz)"

cd "$here"
mypy --strict examples
python -m mypy.stubtest mcp_resume._mcp_resume
# In four processes (pytest-xdist): the suite waits on servers and subprocesses far more
# than it computes, and each test starts its own servers on ports of its own.
python -m pytest -n 4
