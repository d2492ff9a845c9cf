// @ts-check
// The Vercel AI SDK's MCP client on ResumeTransport: node examples/ai-sdk.mjs [url]
import { createMCPClient } from "@ai-sdk/mcp";
import { ResumeTransport } from "mcp-resume";

const url = process.argv[2] ?? "http://127.0.0.1:8080/mcp";
const client = await createMCPClient({ transport: new ResumeTransport(url) });
const tools = await client.tools(); // ready for generateText({ tools, ... })
console.log(Object.keys(tools).join(", "));
const result = await tools.echo.execute({ text: "from the AI SDK" }, { toolCallId: "1", messages: [] });
console.log(JSON.stringify(result));
await client.close();
