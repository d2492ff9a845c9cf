// The package as a user meets it: index.d.ts declares exactly what index.js exports (classes
// with the same members), the examples type-check against it (and against the TypeScript and
// AI SDKs' transport types) and run; the JavaScript layer type-checks against the addon's
// generated declarations.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { test } from "node:test";
import ts from "typescript";
import * as api from "../index.js";
import { Cluster } from "./support/servers.mjs";

const run = promisify(execFile);
const root = fileURLToPath(new URL("..", import.meta.url));

/** What index.d.ts declares: export name → its methods and accessors (classes) or null. */
function declared() {
  const file = `${root}/index.d.ts`;
  const program = ts.createProgram([file], { strict: true, types: [] });
  const checker = program.getTypeChecker();
  const module = checker.getSymbolAtLocation(program.getSourceFile(file));
  const exports = new Map();
  for (const symbol of checker.getExportsOfModule(module)) {
    if (!(symbol.flags & (ts.SymbolFlags.Class | ts.SymbolFlags.Variable | ts.SymbolFlags.Function))) continue;
    const members = symbol.flags & ts.SymbolFlags.Class
      ? [...symbol.members.values()].filter((m) => m.flags & (ts.SymbolFlags.Method | ts.SymbolFlags.Accessor)).map((m) => m.name).sort()
      : null;
    exports.set(symbol.name, members);
  }
  return exports;
}

/** A class's methods and accessors. */
const methods = (Class) => Object.getOwnPropertyNames(Class.prototype).filter((n) => n !== "constructor").sort();

test("index.d.ts declares what index.js exports", () => {
  const declarations = declared();
  assert.deepEqual([...declarations.keys()].sort(), Object.keys(api).sort());
  for (const [name, declaredMembers] of declarations) {
    if (declaredMembers !== null) assert.deepEqual(methods(api[name]), declaredMembers, name);
  }
});

test("the examples and the JavaScript layer type-check, and the examples run", async () => {
  const tsc = `${root}/node_modules/typescript/bin/tsc`;
  await run(process.execPath, [tsc, "-p", root]);
  await run(process.execPath, [tsc, "-p", `${root}/tsconfig.lib.json`]);
  const cluster = await Cluster.start("strict", "--idle-timeout-ms", "0", "--cut-after-events", "3");
  try {
    for (const example of ["quickstart", "ts-sdk", "ai-sdk"]) {
      const { stdout } = await run(process.execPath, [`${root}/examples/${example}.mjs`, cluster.url]);
      assert.match(stdout, /echo/, example);
    }
  } finally {
    await cluster.stop();
  }
});
