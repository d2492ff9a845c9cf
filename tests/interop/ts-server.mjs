// An MCP server built only from the official TypeScript SDK, used as an independent peer for
// the interoperability tests of mcp-resume.
//
// Usage: node ts-server.mjs [--json] [--retry-ms N] [--no-event-store] [--unknown-session-400]
//                           [--auth] [--port N]
//   (--port: listen on that port of 127.0.0.1 rather than a free one, so that a test can kill
//   the server and start another at the same URL)
//   (or env MCP_INTEROP_JSON=1, MCP_INTEROP_RETRY_MS=N)
//
// Besides tools it serves the rest of the 2025-11-25 server surface: paginated resources,
// resource templates, reads, subscriptions, paginated prompts, completions and logging levels;
// and tools that make the server ask the client (sampling, elicitation, roots) or notify it
// (resource updates, list changes). It enforces client capabilities strictly: a server-to-client
// request the client did not declare fails on the server.
//
// --auth requires `Authorization: Bearer <token>` on every /mcp request. POST /admin/token hands
// out the current token (the tests' stand-in for an authorization server), POST /admin/rotate
// invalidates it, POST /admin/refuse makes every token invalid. A refused request gets 401 with a
// WWW-Authenticate challenge naming a scope and the resource metadata URL.
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
  CompleteRequestSchema,
  GetPromptRequestSchema,
  ListPromptsRequestSchema,
  ListResourceTemplatesRequestSchema,
  ListResourcesRequestSchema,
  ListToolsRequestSchema,
  McpError,
  ReadResourceRequestSchema,
  SubscribeRequestSchema,
  UnsubscribeRequestSchema,
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
const requireAuth = flag('--auth');
const port = Number.parseInt(option('--port') ?? '0', 10);

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
  {
    name: 'sample',
    description: 'Asks the client for a model message (sampling/createMessage) and returns it',
    inputSchema: { type: 'object', properties: { prompt: { type: 'string' } } },
  },
  {
    name: 'sample_then_cancel',
    description:
      'Asks the client for a model message, then cancels that request on POST /admin/release',
    inputSchema: { type: 'object', properties: {} },
  },
  {
    name: 'elicit',
    description: 'Asks the user for a name (elicitation/create, form mode) and returns the answer',
    inputSchema: { type: 'object', properties: {} },
  },
  {
    name: 'roots',
    description: "Asks for the client's roots (roots/list) and returns them",
    inputSchema: { type: 'object', properties: {} },
  },
  {
    name: 'log',
    description:
      'Sends one log message per level in `levels` on its own stream, skipping those below the ' +
      "session's logging/setLevel",
    inputSchema: { type: 'object', properties: { levels: { type: 'array', items: { type: 'string' } } } },
  },
  {
    name: 'touch_resource',
    description: 'Sends notifications/resources/updated for `uri` if the session subscribed to it',
    inputSchema: { type: 'object', properties: { uri: { type: 'string' } } },
  },
  {
    name: 'add_tool',
    description: 'Adds a tool named `name` to this session and sends notifications/tools/list_changed',
    inputSchema: { type: 'object', properties: { name: { type: 'string' } } },
  },
  {
    name: 'schema_rich',
    description: 'Declares 2020-12 schemas with $ref, $defs and keywords older drafts lack',
    inputSchema: {
      $schema: 'https://json-schema.org/draft/2020-12/schema',
      type: 'object',
      $defs: { positive: { type: 'integer', exclusiveMinimum: 0 } },
      properties: {
        n: { $ref: '#/$defs/positive' },
        pair: { type: 'array', prefixItems: [{ type: 'string' }, { type: 'number' }], items: false },
      },
      dependentRequired: { pair: ['n'] },
      unevaluatedProperties: false,
    },
    outputSchema: {
      type: 'object',
      properties: { doubled: { $ref: '#/$defs/positive' } },
      $defs: { positive: { type: 'integer', minimum: 1 } },
    },
    annotations: { readOnlyHint: true, idempotentHint: true },
    'x-vendor': { tier: 'gold' },
  },
];

// Five notes, listed two per page. Every resource carries a member no revision defines, which
// the client must keep.
const NOTES = [1, 2, 3, 4, 5].map((n) => ({
  uri: `mem://notes/${n}`,
  name: `note-${n}`,
  title: `Note ${n}`,
  mimeType: 'text/plain',
  size: `note ${n} body`.length,
  annotations: { audience: ['user'], priority: n / 10 },
  'x-vendor': { shard: n % 2 },
}));
const RESOURCES = [
  ...NOTES,
  { uri: 'mem://blob', name: 'blob', mimeType: 'application/octet-stream', description: 'three bytes' },
];
const RESOURCES_PAGE = 2;
const TEMPLATES = [
  {
    uriTemplate: 'mem://notes/{id}',
    name: 'note',
    title: 'A note by id',
    mimeType: 'text/plain',
  },
];
const PROMPTS = [
  {
    name: 'greet',
    title: 'Greeting',
    description: 'Greets someone in a language',
    arguments: [
      { name: 'name', description: 'Who', required: true },
      { name: 'language', description: 'Which language' },
    ],
  },
  {
    name: 'summarize',
    description: 'Summarizes a note',
    arguments: [{ name: 'uri', required: true }],
    icons: [{ src: 'https://example.com/icon.png', mimeType: 'image/png' }],
  },
];
const LANGUAGES = ['de', 'en', 'es', 'fr'];

// Page `cursor` of `items`: cursors are the index of the page's first item.
function page(items, cursor, size) {
  const start = cursor === undefined ? 0 : Number.parseInt(cursor, 10);
  if (!Number.isInteger(start) || start < 0 || start > items.length) {
    throw new McpError(-32602, `invalid cursor: ${cursor}`);
  }
  const end = start + size;
  return { items: items.slice(start, end), nextCursor: end < items.length ? String(end) : undefined };
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const text = (s) => ({ content: [{ type: 'text', text: s }] });

// Calls of `block` waiting for /admin/release.
let blocked = [];

function createServer(sessionRef) {
  const server = new Server(
    { name: 'mcp-resume-interop-ts', version: '1.0.0' },
    {
      capabilities: {
        tools: { listChanged: true },
        logging: {},
        resources: { subscribe: true, listChanged: true },
        prompts: { listChanged: true },
        completions: {},
      },
      enforceStrictCapabilities: true,
    },
  );
  // Per session: tools added by `add_tool`, subscribed resource URIs.
  const addedTools = [];
  const subscriptions = new Set();

  server.setRequestHandler(ListToolsRequestSchema, async () => ({ tools: [...TOOLS, ...addedTools] }));

  server.setRequestHandler(ListResourcesRequestSchema, async (request) => {
    const { items, nextCursor } = page(RESOURCES, request.params?.cursor, RESOURCES_PAGE);
    log('list', { method: 'resources/list', cursor: request.params?.cursor ?? null });
    return { resources: items, nextCursor, _meta: { 'x-page-note': 'kept' } };
  });

  server.setRequestHandler(ListResourceTemplatesRequestSchema, async () => ({
    resourceTemplates: TEMPLATES,
  }));

  server.setRequestHandler(ReadResourceRequestSchema, async (request) => {
    const uri = request.params.uri;
    if (uri === 'mem://blob') {
      return { contents: [{ uri, mimeType: 'application/octet-stream', blob: 'AQID' }] };
    }
    const note = NOTES.find((n) => n.uri === uri);
    if (!note) {
      throw new McpError(-32002, `resource not found: ${uri}`, { uri });
    }
    const n = uri.split('/').pop();
    return { contents: [{ uri, mimeType: 'text/plain', text: `note ${n} body` }] };
  });

  server.setRequestHandler(SubscribeRequestSchema, async (request) => {
    subscriptions.add(request.params.uri);
    log('subscribed', { session: sessionRef.id ?? null, uri: request.params.uri });
    return {};
  });

  server.setRequestHandler(UnsubscribeRequestSchema, async (request) => {
    subscriptions.delete(request.params.uri);
    log('unsubscribed', { session: sessionRef.id ?? null, uri: request.params.uri });
    return {};
  });

  server.setRequestHandler(ListPromptsRequestSchema, async (request) => {
    const { items, nextCursor } = page(PROMPTS, request.params?.cursor, 1);
    return { prompts: items, nextCursor };
  });

  server.setRequestHandler(GetPromptRequestSchema, async (request) => {
    const a = request.params.arguments ?? {};
    switch (request.params.name) {
      case 'greet':
        return {
          description: 'A greeting',
          messages: [
            {
              role: 'user',
              content: { type: 'text', text: `Greet ${a.name ?? 'nobody'} in ${a.language ?? 'en'}` },
            },
            {
              role: 'assistant',
              content: {
                type: 'resource',
                resource: { uri: 'mem://notes/1', mimeType: 'text/plain', text: 'note 1 body' },
              },
            },
          ],
        };
      case 'summarize':
        return {
          messages: [
            {
              role: 'user',
              content: { type: 'resource_link', uri: a.uri ?? 'mem://notes/1', name: 'note' },
            },
          ],
        };
      default:
        throw new McpError(-32602, `unknown prompt: ${request.params.name}`);
    }
  });

  server.setRequestHandler(CompleteRequestSchema, async (request) => {
    const { ref, argument, context } = request.params;
    log('complete', { ref, argument, context: context ?? null });
    let values = [];
    if (ref.type === 'ref/prompt' && ref.name === 'greet' && argument.name === 'language') {
      values = LANGUAGES.filter((l) => l.startsWith(argument.value));
      // The value chosen for another argument shapes the suggestions.
      if (context?.arguments?.name === 'Ada') {
        values = values.map((l) => `${l}-formal`);
      }
    } else if (ref.type === 'ref/resource' && ref.uri === 'mem://notes/{id}') {
      values = NOTES.map((n) => n.uri.split('/').pop()).filter((id) => id.startsWith(argument.value));
    }
    return { completion: { values, total: values.length, hasMore: false } };
  });

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
      case 'sample': {
        const result = await server.createMessage(
          {
            messages: [{ role: 'user', content: { type: 'text', text: String(a.prompt ?? 'hello') } }],
            systemPrompt: 'Answer briefly.',
            maxTokens: 64,
            temperature: 0.3,
            metadata: { 'x-trace': 'abc' },
          },
          { relatedRequestId: extra.requestId },
        );
        log('sampled', { request_id: extra.requestId, result });
        const content = Array.isArray(result.content) ? result.content[0] : result.content;
        return text(`${result.model}: ${content.type === 'text' ? content.text : content.type}`);
      }
      case 'sample_then_cancel': {
        const abort = new AbortController();
        const asked = server
          .createMessage(
            { messages: [{ role: 'user', content: { type: 'text', text: 'never answered' } }], maxTokens: 8 },
            { relatedRequestId: extra.requestId, signal: abort.signal },
          )
          .then(
            () => 'answered',
            (err) => `rejected: ${err?.message ?? err}`,
          );
        await new Promise((resolve) => blocked.push(resolve));
        abort.abort('the tool no longer needs it');
        const outcome = await asked;
        log('sampling_cancelled', { request_id: extra.requestId, outcome });
        return text(outcome);
      }
      case 'elicit': {
        const result = await server.elicitInput(
          {
            message: 'What is your name?',
            requestedSchema: {
              type: 'object',
              properties: { name: { type: 'string', title: 'Name', default: 'anonymous' } },
              required: ['name'],
            },
          },
          { relatedRequestId: extra.requestId },
        );
        log('elicited', { request_id: extra.requestId, result });
        return { content: [{ type: 'text', text: JSON.stringify(result) }], structuredContent: result };
      }
      case 'roots': {
        const result = await server.listRoots(undefined, { relatedRequestId: extra.requestId });
        log('roots', { request_id: extra.requestId, result });
        return { content: [{ type: 'text', text: JSON.stringify(result.roots) }], structuredContent: result };
      }
      case 'log': {
        const levels = Array.isArray(a.levels) ? a.levels : ['info'];
        const sent = [];
        for (const level of levels) {
          if (server.isMessageIgnored(level, sessionRef.id)) continue;
          // On the call's own stream, so the client can tie each message to the call.
          await extra.sendNotification({
            method: 'notifications/message',
            params: { level, logger: 'interop', data: { level, n: sent.length } },
          });
          sent.push(level);
        }
        return text(`logged ${sent.join(',')}`);
      }
      case 'touch_resource': {
        const uri = String(a.uri ?? '');
        if (!subscriptions.has(uri)) {
          return text(`not subscribed to ${uri}`);
        }
        await server.sendResourceUpdated({ uri });
        log('resource_updated', { session: sessionRef.id ?? null, uri });
        return text(`updated ${uri}`);
      }
      case 'add_tool': {
        const added = String(a.name ?? 'added');
        addedTools.push({ name: added, description: 'Added at run time', inputSchema: { type: 'object' } });
        await server.sendToolListChanged();
        log('tool_added', { session: sessionRef.id ?? null, name: added });
        return text(`added ${added}`);
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

// --auth: the token currently valid; refuseAll makes every token invalid.
let tokenGeneration = 1;
let refuseAll = false;
const currentToken = () => `tok-${tokenGeneration}`;

// Refuses the request with 401 unless it carries the current token; returns whether it did.
function refuseCredentials(req, res) {
  if (!requireAuth) return false;
  const header = req.headers.authorization ?? '';
  if (!refuseAll && header === `Bearer ${currentToken()}`) return false;
  const { port } = req.socket.address();
  log('auth_refused', {
    method: req.method,
    session: req.headers['mcp-session-id'] ?? null,
    presented: header.replace(/^Bearer /, '') || null,
  });
  res.writeHead(401, {
    'Content-Type': 'application/json',
    'WWW-Authenticate':
      `Bearer error="invalid_token", error_description="token expired or revoked", ` +
      `scope="mcp:tools mcp:resources", ` +
      `resource_metadata="http://127.0.0.1:${port}/.well-known/oauth-protected-resource"`,
  });
  res.end(JSON.stringify({ error: 'invalid_token' }));
  return true;
}

async function handleMcp(req, res) {
  if (refuseCredentials(req, res)) {
    return;
  }
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
  } else if (path === '/admin/token') {
    reply = { token: currentToken() };
  } else if (path === '/admin/rotate') {
    tokenGeneration += 1;
    reply = { token: currentToken() };
  } else if (path === '/admin/refuse') {
    refuseAll = true;
    reply = { refusing: true };
  } else if (path === '/admin/mark') {
    // Nothing but the log line: once a test has read it, it has read every line before it.
    reply = { marked: true };
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

httpServer.listen(port, '127.0.0.1', () => {
  const { port } = httpServer.address();
  process.stdout.write(`http://127.0.0.1:${port}/mcp\n`);
  log('config', {
    json_response: jsonResponse,
    retry_ms: retryInterval ?? null,
    event_store: useEventStore,
    unknown_session_400: unknownSession400,
    auth: requireAuth,
  });
});

process.stdin.on('data', () => {});
process.stdin.on('end', () => process.exit(0));
process.on('SIGTERM', () => process.exit(0));
