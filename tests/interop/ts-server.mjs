// An MCP server built only from the official TypeScript SDK, used as an independent peer for
// the interoperability tests of mcp-resume.
//
// Usage: node ts-server.mjs [--json] [--retry-ms N] [--no-event-store] [--unknown-session-400]
//   (or env MCP_INTEROP_JSON=1, MCP_INTEROP_RETRY_MS=N)
//
// Prints the endpoint URL as its first stdout line, then one JSON object per line describing what
// it saw and did (HTTP requests, tool executions, stream closes), so tests assert on what really
// happened on the server rather than on what the client believed. Exits when stdin closes, so a
// test process that dies never leaves it behind.

import http from 'node:http';
import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import {
  CallToolRequestSchema,
  ListToolsRequestSchema,
  isInitializeRequest,
} from '@modelcontextprotocol/sdk/types.js';

const args = process.argv.slice(2);
const flag = (name) => args.includes(name);
const option = (name) => {
  const i = args.indexOf(name);
  return i >= 0 && i + 1 < args.length ? args[i + 1] : undefined;
};

const jsonResponse = flag('--json') || process.env.MCP_INTEROP_JSON === '1';
const retryText = option('--retry-ms') ?? process.env.MCP_INTEROP_RETRY_MS;
const retryInterval = retryText === undefined ? undefined : Number.parseInt(retryText, 10);
const useEventStore = !flag('--no-event-store');
// Older SDK example servers (and servers derived from them) answer an unknown session id with
// 400 instead of 404.
const unknownSession400 = flag('--unknown-session-400');

const log = (ev, fields = {}) => {
  process.stdout.write(JSON.stringify({ ev, t: performance.now(), ...fields }) + '\n');
};

// The SDK exports an example InMemoryEventStore, but it orders events by a millisecond timestamp
// plus a random suffix (events stored within one millisecond can replay out of order) and cannot
// map an id of the standalone `_GET_stream` back to its stream. This one keeps insertion order.
class OrderedEventStore {
  constructor() {
    this.next = 1;
    this.events = []; // { id, streamId, message }
    this.streamOf = new Map();
  }

  async storeEvent(streamId, message) {
    const id = `${this.next++}`;
    this.events.push({ id, streamId, message });
    this.streamOf.set(id, streamId);
    return id;
  }

  async getStreamIdForEventId(eventId) {
    return this.streamOf.get(eventId);
  }

  async replayEventsAfter(lastEventId, { send }) {
    const streamId = this.streamOf.get(lastEventId);
    if (streamId === undefined) {
      return '';
    }
    const start = this.events.findIndex((e) => e.id === lastEventId) + 1;
    let count = 0;
    for (const e of this.events.slice(start)) {
      // The priming events carry an empty message: nothing to replay for them.
      if (e.streamId !== streamId || Object.keys(e.message).length === 0) {
        continue;
      }
      await send(e.id, e.message);
      count += 1;
    }
    log('replay', { last_event_id: lastEventId, stream: streamId, count });
    return streamId;
  }
}

const TOOLS = [
  {
    name: 'echo',
    description: 'Returns its text argument',
    inputSchema: { type: 'object', properties: { text: { type: 'string' } }, required: ['text'] },
  },
  {
    name: 'progress',
    description: 'Sends `steps` progress notifications for the caller\'s progressToken, then a result',
    inputSchema: { type: 'object', properties: { steps: { type: 'integer' } } },
  },
  {
    name: 'close_stream',
    description:
      'Closes its own request stream right away (closeSSEStream), then completes after delay_ms',
    inputSchema: { type: 'object', properties: { delay_ms: { type: 'integer' } } },
  },
  {
    name: 'notify',
    description: 'Sends a notifications/message unrelated to any request (standalone GET stream)',
    inputSchema: { type: 'object', properties: { text: { type: 'string' } } },
  },
  {
    name: 'close_listen_stream',
    description:
      'Closes the standalone GET stream (closeStandaloneSSEStream), then optionally sends a ' +
      'notification while it is down (stored for replay)',
    inputSchema: { type: 'object', properties: { then_notify: { type: 'string' } } },
  },
  {
    name: 'block',
    description: 'Runs until POST /admin/release or until cancelled',
    inputSchema: { type: 'object', properties: {} },
  },
];

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const text = (s) => ({ content: [{ type: 'text', text: s }] });

// Calls of `block` waiting for /admin/release.
let blocked = [];

function createServer(sessionRef) {
  const server = new Server(
    { name: 'mcp-resume-interop-ts', version: '1.0.0' },
    { capabilities: { tools: {}, logging: {} } },
  );

  server.setRequestHandler(ListToolsRequestSchema, async () => ({ tools: TOOLS }));

  server.setRequestHandler(CallToolRequestSchema, async (request, extra) => {
    const name = request.params.name;
    const a = request.params.arguments ?? {};
    log('tool', {
      name,
      session: sessionRef.id ?? null,
      request_id: extra.requestId,
      arguments: a,
      meta: request.params._meta ?? null,
    });
    switch (name) {
      case 'echo':
        return text(String(a.text ?? ''));
      case 'progress': {
        const steps = Number.isInteger(a.steps) ? a.steps : 3;
        const token = extra._meta?.progressToken;
        if (token === undefined) {
          log('progress_without_token', { request_id: extra.requestId });
        } else {
          for (let i = 1; i <= steps; i++) {
            await extra.sendNotification({
              method: 'notifications/progress',
              params: { progressToken: token, progress: i, total: steps, message: `step ${i}` },
            });
          }
        }
        return text(`progress done after ${steps} steps`);
      }
      case 'close_stream': {
        if (!extra.closeSSEStream) {
          throw new Error(
            'closeSSEStream unavailable: the client negotiated a protocol before 2025-11-25 ' +
              'or the server runs without an event store',
          );
        }
        const delay = Number.isInteger(a.delay_ms) ? a.delay_ms : 0;
        log('stream_closed', { request_id: extra.requestId });
        extra.closeSSEStream();
        await sleep(delay);
        log('tool_done', { name, request_id: extra.requestId });
        return text(`completed ${delay} ms after closing the stream`);
      }
      case 'notify': {
        // No relatedRequestId: the transport routes it to the standalone GET stream.
        await server.notification({
          method: 'notifications/message',
          params: { level: 'info', logger: 'interop', data: String(a.text ?? 'hello') },
        });
        log('notified', { session: sessionRef.id ?? null });
        return text('notification sent');
      }
      case 'close_listen_stream': {
        if (!extra.closeStandaloneSSEStream) {
          throw new Error('closeStandaloneSSEStream unavailable (protocol < 2025-11-25 or no event store)');
        }
        extra.closeStandaloneSSEStream();
        log('listen_stream_closed', { session: sessionRef.id ?? null });
        if (typeof a.then_notify === 'string') {
          await server.notification({
            method: 'notifications/message',
            params: { level: 'info', logger: 'interop', data: a.then_notify },
          });
          log('notified', { session: sessionRef.id ?? null, while_closed: true });
        }
        return text('standalone stream closed');
      }
      case 'block': {
        await new Promise((resolve) => {
          blocked.push(resolve);
          extra.signal.addEventListener('abort', () => {
            log('cancelled', { request_id: extra.requestId });
            resolve();
          });
        });
        log('tool_done', { name, request_id: extra.requestId });
        return text('released');
      }
      default:
        throw new Error(`unknown tool: ${name}`);
    }
  });

  return server;
}

// Live sessions by id.
const sessions = new Map();

function jsonError(res, status, code, message) {
  res.writeHead(status, { 'Content-Type': 'application/json' });
  res.end(JSON.stringify({ jsonrpc: '2.0', error: { code, message }, id: null }));
}

// The Content-Type of a response head, whether set beforehand or passed to writeHead.
function contentType(res, writeHeadArgs) {
  for (const arg of writeHeadArgs) {
    if (Array.isArray(arg)) {
      const flat = Array.isArray(arg[0]) ? arg.flat() : arg;
      for (let i = 0; i + 1 < flat.length; i += 2) {
        if (String(flat[i]).toLowerCase() === 'content-type') return String(flat[i + 1]);
      }
    } else if (arg && typeof arg === 'object') {
      for (const [k, v] of Object.entries(arg)) {
        if (k.toLowerCase() === 'content-type') return String(v);
      }
    }
  }
  return res.getHeader('content-type') ?? null;
}

function readBody(req) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

async function handleMcp(req, res) {
  const sid = req.headers['mcp-session-id'];
  let body;
  if (req.method === 'POST') {
    try {
      body = JSON.parse(await readBody(req));
    } catch {
      return jsonError(res, 400, -32700, 'Parse error');
    }
  }
  const rpc = body && !Array.isArray(body) ? body : undefined;
  const entry = {
    method: req.method,
    session: sid ?? null,
    last_event_id: req.headers['last-event-id'] ?? null,
    protocol_version: req.headers['mcp-protocol-version'] ?? null,
    rpc_method: rpc?.method ?? null,
    rpc_id: rpc?.id ?? null,
    tool: rpc?.method === 'tools/call' ? rpc.params?.name ?? null : null,
  };
  const started = performance.now();
  log('http_in', entry);
  // Logged when the response head goes out; for a GET stream this means the transport has
  // registered it, so a notification sent from now on is delivered on it.
  const writeHead = res.writeHead;
  res.writeHead = function (status, ...rest) {
    const result = writeHead.call(this, status, ...rest);
    log('http_head', { ...entry, status, content_type: contentType(this, rest) });
    return result;
  };
  res.on('close', () => {
    log('http_done', {
      ...entry,
      status: res.statusCode,
      started,
      // false: the client went away before the server ended the response.
      server_ended: res.writableFinished,
    });
  });

  if (sid !== undefined) {
    const transport = sessions.get(sid);
    if (!transport) {
      return unknownSession400
        ? jsonError(res, 400, -32000, 'Bad Request: No valid session ID provided')
        : jsonError(res, 404, -32001, 'Session not found');
    }
    return transport.handleRequest(req, res, body);
  }
  if (req.method === 'POST' && isInitializeRequest(body)) {
    const sessionRef = {};
    const transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      enableJsonResponse: jsonResponse,
      eventStore: useEventStore ? new OrderedEventStore() : undefined,
      retryInterval,
      onsessioninitialized: (id) => {
        sessionRef.id = id;
        sessions.set(id, transport);
        log('session_created', { session: id });
      },
    });
    transport.onclose = () => {
      if (sessionRef.id !== undefined && sessions.get(sessionRef.id) === transport) {
        sessions.delete(sessionRef.id);
        log('session_closed', { session: sessionRef.id });
      }
    };
    const server = createServer(sessionRef);
    transport.server = server;
    await server.connect(transport);
    return transport.handleRequest(req, res, body);
  }
  return jsonError(res, 400, -32000, 'Bad Request: No valid session ID provided');
}

async function handleAdmin(req, res, path) {
  await readBody(req);
  let reply;
  if (path === '/admin/drop-sessions') {
    // Server-side session deletion: the next request carrying the id gets 404.
    const all = [...sessions.values()];
    for (const t of all) {
      await t.close();
      await t.server?.close();
    }
    reply = { dropped: all.length };
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
  const handler = path === '/mcp' ? handleMcp(req, res) : handleAdmin(req, res, path);
  handler.catch((err) => {
    log('error', { message: String(err?.stack ?? err) });
    if (!res.headersSent) {
      jsonError(res, 500, -32603, 'Internal server error');
    } else {
      res.end();
    }
  });
});

httpServer.listen(0, '127.0.0.1', () => {
  const { port } = httpServer.address();
  process.stdout.write(`http://127.0.0.1:${port}/mcp\n`);
  log('config', {
    json_response: jsonResponse,
    retry_ms: retryInterval ?? null,
    event_store: useEventStore,
    unknown_session_400: unknownSession400,
  });
});

process.stdin.on('data', () => {});
process.stdin.on('end', () => process.exit(0));
process.on('SIGTERM', () => process.exit(0));
