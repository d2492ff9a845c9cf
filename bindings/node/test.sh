#!/usr/bin/env bash
# Builds the addon and runs the node --test suite against the mock cluster this workspace
# builds and the TypeScript SDK servers of tests/interop and tests/interop-modern. Run from
# anywhere; `cargo test --workspace` runs it (tests/external/bindings.rs).
#
#   CARGO_TARGET_DIR        where cargo builds (default: the workspace's `target/`, so the
#                           addon reuses what the workspace compiled)
#   MCP_RESUME_MOCK_CLUSTER the mock-cluster binary (default: built by
#                           `cargo test --workspace --no-run`, a no-op after that command)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$repo/target}"

# The pinned npm packages: the binding's (SDKs, the build's declaration generator), and the
# servers'.
for dir in "$here" "$repo/tests/interop" "$repo/tests/interop-modern"; do
  [ -d "$dir/node_modules" ] || (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
done

if [ -z "${MCP_RESUME_MOCK_CLUSTER:-}" ]; then
  (cd "$repo" && cargo test --workspace --no-run --quiet)
  export MCP_RESUME_MOCK_CLUSTER="$CARGO_TARGET_DIR/debug/mock-cluster"
fi

node "$here/build.mjs"
cd "$here"
# A test that fails with a client still open would keep its process alive: each file's
# process is ended once its tests are done, and no test runs longer than a minute. Four files
# at a time (node's default is one per core but one): they wait on servers, each its own.
node --test --test-force-exit --test-timeout=60000 --test-concurrency=4 test/*.test.mjs
