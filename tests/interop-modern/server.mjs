// A stateless MCP server built only from the official TypeScript SDK v2
// (`@modelcontextprotocol/server`), speaking protocol revision 2026-07-28, used as an
// independent peer for the modern-era interop tests of mcp-resume.
//
// Usage: node server.mjs [--port N] [--legacy reject|stateless] [--response-mode auto|sse|json]
//   --port N          listen on 127.0.0.1:N (default 0: an ephemeral port)
//   --legacy reject   (default) modern-only: 2025-era traffic (`initialize`, GET, DELETE) is
//                     refused the way the SDK refuses it on a strict endpoint
//   --legacy stateless  dual-era: the SDK's stateless 2025 fallback serves legacy traffic from
//                     the same tool definitions
//   --response-mode   how modern requests are answered (the SDK's `responseMode`, default auto:
//                     JSON unless the handler emits a notification first, then SSE)
//
// Prints the endpoint URL as its first stdout line, then one JSON object per line describing
// what it saw and did (HTTP requests with the MCP headers and the `_meta` they carried, tool
// runs with their arguments and idempotency keys, streams it cut), so tests assert on what
// really happened on the server rather than on what the client believed. Exits when stdin
// closes, so a test process that dies never leaves it behind.
//
// Admin routes (POST, JSON body, JSON reply), outside the MCP endpoint:
//   /admin/state          the counter and the idempotency keys it has seen
//   /admin/arm-drop       {"tool": NAME, "count": N, "phase": "before_head"|"after_head"}: the
//                         next N runs of NAME cut their response stream after the side effect
//   /admin/tools-changed  publishes notifications/tools/list_changed to open subscriptions
//   /admin/release        releases every waiting `block` call

import http from 'node:http';
import { performance } from 'node:perf_hooks';
import {
  McpServer,
  acceptedContent,
  createMcpHandler,
  fromJsonSchema,
  inputRequired,
  inputResponse,
} from '@modelcontextprotocol/server';

const args = process.argv.slice(2);
const option = (name, fallback) => {
  const i = args.indexOf(name);
  return i >= 0 && i + 1 < args.length ? args[i + 1] : fallback;
};
const port = Number.parseInt(option('--port', '0'), 10);
const legacy = option('--legacy', 'reject');
const responseMode = option('--response-mode', 'auto');
if (!['reject', 'stateless'].includes(legacy) || !['auto', 'sse', 'json'].includes(responseMode)) {
  process.stderr.write(`bad arguments: ${args.join(' ')}\n`);
  process.exit(2);
}

const log = (ev, fields = {}) => {
  process.stdout.write(JSON.stringify({ ev, t: performance.now(), ...fields }) + '\n');
};

// The resume-safety extension, advertised where 2026-07-28 puts extensions: the `extensions`
// map of the server's capabilities (basic/versioning, "Extension Negotiation").
const RESUME_SAFETY = 'io.github.mcp-resume/resume-safety';
const IDEMPOTENCY_META_KEY = 'io.github.mcp-resume/idempotency-key';
const IDEMPOTENCY_HEADER = 'Idempotency-Key';
const TASKS = 'io.modelcontextprotocol/tasks';

const CAPABILITIES = {
  tools: { listChanged: true },
  extensions: {
    [RESUME_SAFETY]: {
      version: 1,
      idempotency: { metaKey: IDEMPOTENCY_META_KEY, header: IDEMPOTENCY_HEADER },
    },
    // SEP-2663. The SDK has no runtime for it: `tasks/get`, `tasks/update` and `tasks/cancel`
    // are served below from plain handlers, and `slow_task` returns the task handle itself.
    [TASKS]: {},
  },
};

// ---- process-wide state -------------------------------------------------------------------

let counter = 0;
// idempotency key -> the result the first run returned (a re-sent key gets it again).
const seenKeys = new Map();
// tool name -> [{ phase }], consumed one per run.
const armedDrops = new Map();
// Calls of `block` waiting for /admin/release.
let blocked = [];
// task id -> task record (SEP-2663 shape).
const tasks = new Map();
let nextTask = 1;

// Per HTTP exchange, keyed by the fetch Request handed to the SDK (the SDK gives handlers the
// same object as `ctx.http.req`): lets a tool cut its own response stream.
const exchanges = new WeakMap();

// ---- tools --------------------------------------------------------------------------------

const schema = (properties, required = []) =>
  fromJsonSchema({ type: 'object', properties, required, additionalProperties: true });
const text = (s, structured) => ({
  content: [{ type: 'text', text: s }],
  ...(structured === undefined ? {} : { structuredContent: structured }),
});

// The idempotency key a request carries: `_meta` (what the SDK leaves after lifting the
// reserved envelope keys) and/or the header.
function keysOf(ctx) {
  const meta = ctx.mcpReq._meta?.[IDEMPOTENCY_META_KEY];
  const header = ctx.http?.req?.headers.get(IDEMPOTENCY_HEADER) ?? undefined;
  return {
    meta: typeof meta === 'string' ? meta : undefined,
    header,
  };
}

function logTool(name, a, ctx, extra = {}) {
  const keys = keysOf(ctx);
  log('tool', {
    name,
    request_id: ctx.mcpReq.id,
    arguments: a,
    meta: ctx.mcpReq._meta ?? null,
    envelope: ctx.mcpReq.envelope ?? null,
    key_meta: keys.meta ?? null,
    key_header: keys.header ?? null,
    input_responses: ctx.mcpReq.inputResponses ?? null,
    request_state: ctx.mcpReq.requestState() ?? null,
    ...extra,
  });
  return keys;
}

// Runs the counter side effect once per idempotency key; an unkeyed call always runs.
function incrementOnce(name, by, keys) {
  const key = keys.meta ?? keys.header;
  if (keys.meta !== undefined && keys.header !== undefined && keys.meta !== keys.header) {
    throw new Error(`idempotency key mismatch: _meta ${keys.meta} vs header ${keys.header}`);
  }
  if (key !== undefined && seenKeys.has(key)) {
    const first = seenKeys.get(key);
    log('dedup', { name, key, counter: first.counter });
    return { ...first, deduplicated: true };
  }
  counter += by;
  const outcome = { counter, deduplicated: false };
  if (key !== undefined) seenKeys.set(key, outcome);
  log('side_effect', { name, key: key ?? null, counter });
  return outcome;
}

// Cuts the response stream of the exchange running `ctx`: `before_head` closes the connection
// with nothing sent; `after_head` first makes the SDK open its SSE response (a progress
// notification), waits until that head is on the wire, then closes the connection.
async function cutStream(ctx, phase, name) {
  const exchange = exchanges.get(ctx.http?.req);
  if (exchange === undefined) throw new Error('no HTTP exchange for this request');
  if (phase === 'after_head') {
    const token = ctx.mcpReq._meta?.progressToken ?? `drop-${ctx.mcpReq.id}`;
    await ctx.mcpReq.notify({
      method: 'notifications/progress',
      params: { progressToken: token, progress: 1, message: 'side effect done; cutting the stream' },
    });
    await exchange.headSent;
  }
  log('stream_cut', { name, request_id: ctx.mcpReq.id, phase, head_sent: exchange.res.headersSent });
  exchange.res.socket?.destroy();
  exchange.res.destroy();
  // The SDK sees the disconnect as cancellation; this run's result goes nowhere.
  await new Promise((resolve) => {
    if (ctx.mcpReq.signal.aborted) return resolve();
    ctx.mcpReq.signal.addEventListener('abort', resolve, { once: true });
  });
  log('cancelled', { name, request_id: ctx.mcpReq.id });
}

function takeArmedDrop(name) {
  const queue = armedDrops.get(name);
  if (!queue || queue.length === 0) return undefined;
  return queue.shift();
}

function declaredTasks(ctx) {
  const caps = ctx.mcpReq.envelope?.['io.modelcontextprotocol/clientCapabilities'];
  return caps?.extensions?.[TASKS] !== undefined;
}

function taskView(task) {
  const { taskId, status, createdAt, lastUpdatedAt, ttlMs, pollIntervalMs } = task;
  const view = { taskId, status, createdAt, lastUpdatedAt, ttlMs, pollIntervalMs };
  if (task.statusMessage !== undefined) view.statusMessage = task.statusMessage;
  if (status === 'completed') view.result = task.result;
  return view;
}

function buildServer() {
  const server = new McpServer(
    { name: 'mcp-resume-interop-ts-modern', version: '1.0.0' },
    {
      capabilities: CAPABILITIES,
      instructions: 'Interop peer for mcp-resume: echo, progress, counter_increment, confirm.',
    },
  );

  server.registerTool(
    'echo',
    { description: 'Returns its text argument', inputSchema: schema({ text: { type: 'string' } }, ['text']) },
    async (a, ctx) => {
      logTool('echo', a, ctx);
      return text(String(a.text ?? ''));
    },
  );

  server.registerTool(
    'progress',
    {
      description: "Sends `steps` progress notifications for the caller's progressToken, then a result",
      inputSchema: schema({ steps: { type: 'integer' } }),
    },
    async (a, ctx) => {
      logTool('progress', a, ctx);
      const steps = Number.isInteger(a.steps) ? a.steps : 3;
      const token = ctx.mcpReq._meta?.progressToken;
      if (token === undefined) {
        log('progress_without_token', { request_id: ctx.mcpReq.id });
      } else {
        for (let i = 1; i <= steps; i++) {
          await ctx.mcpReq.notify({
            method: 'notifications/progress',
            params: { progressToken: token, progress: i, total: steps, message: `step ${i}` },
          });
        }
      }
      return text(`progress done after ${steps} steps`, { steps });
    },
  );

  server.registerTool(
    'counter_increment',
    {
      description:
        'Adds `by` (default 1) to a process-wide counter; deduplicated by the idempotency key ' +
        `(params._meta["${IDEMPOTENCY_META_KEY}"] and/or the ${IDEMPOTENCY_HEADER} header)`,
      inputSchema: schema({ by: { type: 'integer' } }),
    },
    async (a, ctx) => {
      const keys = logTool('counter_increment', a, ctx);
      const outcome = incrementOnce('counter_increment', Number.isInteger(a.by) ? a.by : 1, keys);
      const drop = takeArmedDrop('counter_increment');
      if (drop !== undefined) await cutStream(ctx, drop.phase, 'counter_increment');
      return text(`counter=${outcome.counter}`, outcome);
    },
  );

  server.registerTool(
    'drop_stream',
    {
      description:
        'Increments the counter (deduplicated like counter_increment), then closes its own ' +
        'response stream before the result: `phase` before_head (no response at all) or ' +
        'after_head (default: an SSE response that ends without its result)',
      inputSchema: schema({ phase: { type: 'string', enum: ['before_head', 'after_head'] } }),
    },
    async (a, ctx) => {
      const keys = logTool('drop_stream', a, ctx);
      const outcome = incrementOnce('drop_stream', 1, keys);
      await cutStream(ctx, a.phase === 'before_head' ? 'before_head' : 'after_head', 'drop_stream');
      return text(`counter=${outcome.counter}`, outcome);
    },
  );

  server.registerTool(
    'confirm',
    {
      description:
        'Multi round-trip: answers input_required with an elicitation the first time, then ' +
        'completes with what the elicitation answered',
      inputSchema: schema({ question: { type: 'string' } }),
    },
    async (a, ctx) => {
      logTool('confirm', a, ctx);
      const answer = inputResponse(ctx.mcpReq.inputResponses, 'confirm');
      if (answer.kind !== 'elicit') {
        log('input_required', { name: 'confirm', request_id: ctx.mcpReq.id });
        return inputRequired({
          inputRequests: {
            confirm: inputRequired.elicit({
              message: String(a.question ?? 'Proceed?'),
              requestedSchema: {
                type: 'object',
                properties: { confirmed: { type: 'boolean', default: true } },
                required: ['confirmed'],
              },
            }),
          },
          requestState: JSON.stringify({ round: 1, question: a.question ?? null }),
        });
      }
      const content = acceptedContent(ctx.mcpReq.inputResponses, 'confirm') ?? null;
      log('confirmed', { request_id: ctx.mcpReq.id, action: answer.action, content });
      return text(`elicitation ${answer.action}: ${JSON.stringify(content)}`, {
        action: answer.action,
        content,
      });
    },
  );

  server.registerTool(
    'slow_task',
    {
      description:
        'SEP-2663 tasks: to a client that declared the tasks extension, returns a task handle ' +
        'that completes on its `polls`-th tasks/get (default 2); to others, the result directly',
      inputSchema: schema({ polls: { type: 'integer' }, text: { type: 'string' } }),
    },
    async (a, ctx) => {
      logTool('slow_task', a, ctx, { tasks_declared: declaredTasks(ctx) });
      const result = text(`task done: ${a.text ?? ''}`);
      if (!declaredTasks(ctx)) return result;
      const now = new Date().toISOString();
      const task = {
        taskId: `task-${nextTask++}`,
        status: 'working',
        createdAt: now,
        lastUpdatedAt: now,
        ttlMs: 600000,
        pollIntervalMs: 10,
        pollsLeft: Number.isInteger(a.polls) && a.polls > 0 ? a.polls : 2,
        result: { ...result, resultType: 'complete' },
      };
      tasks.set(task.taskId, task);
      log('task_created', { task_id: task.taskId });
      return { resultType: 'task', ...taskView(task) };
    },
  );

  server.registerTool(
    'block',
    { description: 'Runs until POST /admin/release or until cancelled', inputSchema: schema({}) },
    async (a, ctx) => {
      logTool('block', a, ctx);
      const outcome = await new Promise((resolve) => {
        blocked.push(() => resolve('released'));
        ctx.mcpReq.signal.addEventListener('abort', () => resolve('cancelled'), { once: true });
      });
      log(outcome === 'released' ? 'tool_done' : 'cancelled', { name: 'block', request_id: ctx.mcpReq.id });
      return text(outcome);
    },
  );

  server.registerTool(
    'locate',
    {
      description: 'Echoes its region; `region` is mirrored in the Mcp-Param-Region header (x-mcp-header)',
      inputSchema: fromJsonSchema({
        type: 'object',
        properties: { region: { type: 'string', 'x-mcp-header': 'Region' }, query: { type: 'string' } },
        required: ['region'],
      }),
    },
    async (a, ctx) => {
      logTool('locate', a, ctx);
      return text(`region=${a.region}`);
    },
  );

  // SEP-2663 methods, on plain handlers (the SDK has no tasks runtime).
  const taskIdParams = { params: fromJsonSchema({ type: 'object', properties: { taskId: { type: 'string' } }, required: ['taskId'] }) };
  const lookup = (taskId) => {
    const task = tasks.get(taskId);
    if (task === undefined) throw new Error(`unknown task ${taskId}`);
    return task;
  };
  server.server.setRequestHandler('tasks/get', taskIdParams, async (p, ctx) => {
    const task = lookup(p.taskId);
    if (task.status === 'working') {
      task.pollsLeft -= 1;
      if (task.pollsLeft <= 0) {
        task.status = 'completed';
        task.lastUpdatedAt = new Date().toISOString();
      }
    }
    log('tasks_get', { request_id: ctx.mcpReq.id, task_id: p.taskId, status: task.status });
    return taskView(task);
  });
  server.server.setRequestHandler('tasks/update', taskIdParams, async (p, ctx) => {
    lookup(p.taskId);
    log('tasks_update', { request_id: ctx.mcpReq.id, task_id: p.taskId });
    return {};
  });
  server.server.setRequestHandler('tasks/cancel', taskIdParams, async (p, ctx) => {
    const task = lookup(p.taskId);
    if (task.status === 'working') {
      task.status = 'cancelled';
      task.lastUpdatedAt = new Date().toISOString();
    }
    log('tasks_cancel', { request_id: ctx.mcpReq.id, task_id: p.taskId, status: task.status });
    return {};
  });

  return server;
}

const handler = createMcpHandler(() => buildServer(), {
  legacy,
  responseMode,
  onerror: (error) => log('sdk_error', { message: String(error?.message ?? error) }),
});

// ---- HTTP: node:http <-> the SDK's fetch-shaped handler ------------------------------------

function readBody(req) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks)));
    req.on('error', reject);
  });
}

const HEADERS_OF_INTEREST = ['mcp-protocol-version', 'mcp-method', 'mcp-name', 'mcp-session-id', 'last-event-id', 'idempotency-key', 'accept', 'content-type'];

function headersOfInterest(req) {
  const out = {};
  for (const [name, value] of Object.entries(req.headers)) {
    if (HEADERS_OF_INTEREST.includes(name) || name.startsWith('mcp-param-')) out[name] = value;
  }
  return out;
}

function jsonOrNull(bytes) {
  try {
    return JSON.parse(bytes.toString('utf8'));
  } catch {
    return null;
  }
}

async function handleMcp(req, res) {
  const bytes = req.method === 'POST' ? await readBody(req) : Buffer.alloc(0);
  const rpc = jsonOrNull(bytes);
  const single = rpc && !Array.isArray(rpc) ? rpc : undefined;
  const entry = {
    method: req.method,
    headers: headersOfInterest(req),
    rpc_method: single?.method ?? null,
    rpc_id: single?.id ?? null,
    tool: single?.method === 'tools/call' ? single.params?.name ?? null : null,
    meta: single?.params?._meta ?? null,
  };
  log('http_in', entry);
  const started = performance.now();
  const summary = { method: entry.method, rpc_method: entry.rpc_method, rpc_id: entry.rpc_id, tool: entry.tool };

  const abort = new AbortController();
  const headers = new Headers();
  for (const [name, value] of Object.entries(req.headers)) {
    if (Array.isArray(value)) value.forEach((v) => headers.append(name, v));
    else headers.set(name, value);
  }
  const request = new Request(`http://${req.headers.host ?? '127.0.0.1'}${req.url}`, {
    method: req.method,
    headers,
    body: req.method === 'GET' || req.method === 'HEAD' ? undefined : bytes,
    signal: abort.signal,
  });
  let markHead;
  const headSent = new Promise((resolve) => {
    markHead = resolve;
  });
  exchanges.set(request, { res, headSent });
  res.on('close', () => {
    if (!res.writableFinished) abort.abort();
    log('http_done', { ...summary, status: res.statusCode, started, server_ended: res.writableFinished });
  });

  const response = await handler.fetch(request);
  if (res.destroyed) return;
  const outHeaders = {};
  response.headers.forEach((value, name) => {
    outHeaders[name] = value;
  });
  const contentType = response.headers.get('content-type');
  const streaming = contentType?.startsWith('text/event-stream') ?? false;
  if (!streaming) {
    // A JSON (or empty) answer: read it whole and log it, then send it.
    const body = Buffer.from(await response.arrayBuffer());
    if (res.destroyed) return;
    log('http_head', { ...summary, status: response.status, content_type: contentType, headers: outHeaders });
    log('http_body', { ...summary, status: response.status, body: jsonOrNull(body) ?? body.toString('utf8') });
    res.writeHead(response.status, outHeaders);
    markHead();
    res.end(body);
    return;
  }
  res.writeHead(response.status, outHeaders);
  res.flushHeaders();
  log('http_head', { ...summary, status: response.status, content_type: contentType, headers: outHeaders });
  markHead();
  const reader = response.body.getReader();
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done || res.destroyed) break;
      res.write(value);
    }
  } catch (err) {
    log('stream_error', { ...summary, message: String(err?.message ?? err) });
  } finally {
    reader.cancel().catch(() => {});
    if (!res.destroyed) res.end();
  }
}

async function handleAdmin(req, res, path) {
  const body = jsonOrNull(await readBody(req)) ?? {};
  let reply;
  if (path === '/admin/state') {
    reply = { counter, keys: [...seenKeys.keys()] };
  } else if (path === '/admin/arm-drop') {
    const tool = String(body.tool ?? 'counter_increment');
    const count = Number.isInteger(body.count) ? body.count : 1;
    const phase = body.phase === 'before_head' ? 'before_head' : 'after_head';
    const queue = armedDrops.get(tool) ?? [];
    for (let i = 0; i < count; i++) queue.push({ phase });
    armedDrops.set(tool, queue);
    reply = { tool, armed: queue.length, phase };
  } else if (path === '/admin/tools-changed') {
    handler.notify.toolsChanged();
    reply = { published: 'notifications/tools/list_changed', listeners: handler.bus.listenerCount ?? null };
  } else if (path === '/admin/release') {
    const waiting = blocked;
    blocked = [];
    waiting.forEach((resolve) => resolve());
    reply = { released: waiting.length };
  } else {
    res.writeHead(404);
    return res.end();
  }
  log('admin', { path, ...reply });
  res.writeHead(200, { 'Content-Type': 'application/json' });
  res.end(JSON.stringify(reply));
}

const httpServer = http.createServer((req, res) => {
  const path = new URL(req.url, 'http://127.0.0.1').pathname;
  const served = path === '/mcp' ? handleMcp(req, res) : handleAdmin(req, res, path);
  served.catch((err) => {
    log('error', { message: String(err?.stack ?? err) });
    if (!res.headersSent) {
      res.writeHead(500, { 'Content-Type': 'application/json' });
      res.end(JSON.stringify({ jsonrpc: '2.0', error: { code: -32603, message: 'Internal server error' }, id: null }));
    } else {
      res.destroy();
    }
  });
});

httpServer.listen(port, '127.0.0.1', () => {
  const { port: bound } = httpServer.address();
  process.stdout.write(`http://127.0.0.1:${bound}/mcp\n`);
  log('config', { legacy, response_mode: responseMode, sdk: '@modelcontextprotocol/server' });
});

process.stdin.on('data', () => {});
process.stdin.on('end', () => process.exit(0));
process.on('SIGTERM', () => process.exit(0));
