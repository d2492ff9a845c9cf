// The seed scenario from Node: the TypeScript SDK's Client through the demo's workload, over
// its stock transport and over ResumeTransport, on every preset of the mock cluster (3
// instances, streams cut after 3 events), each call judged by the cluster's oracle.
import assert from "node:assert/strict";
import { test } from "node:test";
import { Cluster, expecting } from "./support/servers.mjs";
import { CAPABILITIES, judge, runWorkload, table } from "./support/workload.mjs";

const PRESETS = ["naive", "strict", "replicated", "sticky"];

test("stock against bridged TypeScript client on every preset", async () => {
  // Independent clusters: every run at once.
  const runs = await Promise.all(
    PRESETS.flatMap((preset) => ["stock", "bridged"].map(async (client) => {
      const cluster = await Cluster.start(preset, "--idle-timeout-ms", "0", "--cut-after-events", "3", ...expecting(CAPABILITIES));
      try {
        const run = await runWorkload(cluster.url, preset, client);
        return judge(run, await cluster.oracle());
      } finally {
        await cluster.stop();
      }
    })),
  );
  const shown = table(runs);
  console.log(`\n${shown}\n`);
  const by = (preset, client) => runs.find((r) => r.preset === preset && r.client === client);

  for (const preset of PRESETS) {
    const bridged = by(preset, "bridged");
    const why = `${preset}:\n${shown}\n${JSON.stringify(bridged.failed)}`;
    assert.equal(bridged.connectError, null, why);
    // Never a silent wrong answer, no keyed side effect twice, no unkeyed call run twice.
    assert.deepEqual(bridged.silent, [], why);
    assert.equal(bridged.duplicateKeyed, 0, why);
    assert.equal(bridged.repeatedUnkeyed, 0, why);
    if (preset === "naive") {
      // What cannot be proven right fails explicitly, naming its kind.
      for (const c of bridged.failed) {
        assert.ok(["context_mismatch", "outcome_unknown", "session_lost"].includes(c.error), why);
      }
    } else {
      // Nothing lost where the cluster can answer correctly, the cut `slow` call included.
      assert.deepEqual(bridged.failed, [], why);
      assert.equal(bridged.ok, bridged.calls.length, why);
    }
    if (preset === "replicated" || preset === "sticky") {
      // The resume was proven: one session from start to end.
      assert.equal(bridged.initializes, 1, why);
    }
  }
  // The stock client reproduces the incident on `naive` (success reported, wrong context
  // underneath) and never re-initializes after `strict`'s rejected resume.
  assert.ok(by("naive", "stock").silent.length > 0, shown);
  const stockStrict = by("strict", "stock");
  assert.equal(stockStrict.initializes, 1, shown);
  assert.ok(stockStrict.failed.length > stockStrict.calls.length / 2, shown);
});
