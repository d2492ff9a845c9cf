// @ts-check
// The TypeScript SDK's Client, its transport switched: node examples/ts-sdk.mjs [url]
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { McpError } from "@modelcontextprotocol/sdk/types.js";
import { BRIDGE_ERROR_CODES, IDEMPOTENCY_META_KEY, ResumeTransport } from "mcp-resume";

const url = process.argv[2] ?? "http://127.0.0.1:8080/mcp";
const client = new Client({ name: "example", version: "1.0.0" });
const transport = new ResumeTransport(url); // was: new StreamableHTTPClientTransport(new URL(url))
await client.connect(transport);

const { tools } = await client.listTools();
console.log(tools.map((t) => t.name).join(", "));
try {
  // A key in `_meta` makes the call keyed: re-sent only where the server deduplicates.
  const result = await client.callTool({ name: "counter_increment", arguments: {}, _meta: { [IDEMPOTENCY_META_KEY]: "order-7" } });
  console.log(result.structuredContent);
} catch (error) {
  // What JSON-RPC cannot say arrives as an error of its own code (and `data.kind`): never a
  // silent success.
  if (error instanceof McpError && error.code === BRIDGE_ERROR_CODES.outcome_unknown) {
    console.log("interrupted: it may or may not have run");
  }
  else throw error;
}
await client.close();
