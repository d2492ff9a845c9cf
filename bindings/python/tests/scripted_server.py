"""A small scripted MCP server (stdlib only) that records every message it receives.

Legacy era: `initialize` with a session id, `tools/list`, and `tools/call` of
- `echo`: JSON result;
- `mixed`: a result holding one content item of each type (`isError`, `_meta`);
- `ask`: an SSE stream that sends the client a request (`sampling/createMessage` by default,
  else the `method` and `params` of its arguments), waits for the client's answer (POSTed
  separately), and returns it as the tool's structured result; with `cancel_after_ms` it
  cancels its request after that long (`notifications/cancelled`) and returns the answer
  that arrived anyway (`None` when none did);
- `hang`: an SSE stream that stays open until the client cancels the call (or 10 s);
- `raw`: answered with its arguments as the members of the JSON-RPC answer besides `jsonrpc`
  and `id`, whatever they are (`{"result": null}`: what no client can read);

and the typed methods: `resources/list` in two pages (cursor `page-2`),
`resources/templates/list`, `resources/read`, `resources/subscribe` and `unsubscribe`,
`prompts/list`, `prompts/get` (its messages echo the arguments), `completion/complete` (its
values echo the request), `logging/setLevel`. Every message received is recorded, with the
headers of its POST.

A request carrying `Authorization: Bearer expired` is refused with 401 and a `Bearer`
challenge.

Modern era (2026-07-28): `server/discover`, `tools/list`, and `tools/call` of
- `confirm`: answered `input_required` (an `elicitation/create` input request) until the call
  comes back with `inputResponses`, then completed with the elicitation's `action`;
- `needs_sampling`: refused with -32021 (a required client capability).
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODERN = "2026-07-28"

TOOLS = [
    {"name": name, "inputSchema": {"type": "object"}}
    for name in ("echo", "ask", "hang", "confirm", "needs_sampling", "mixed", "raw")
]
# One tool with what the typed view reads besides the basics.
TOOLS[0]["icons"] = [{"src": "https://example.com/echo.png", "mimeType": "image/png"}]
TOOLS[0]["_meta"] = {"vendor/rank": 1}

RESOURCES_PAGE_1 = [
    {"uri": "file:///a.txt", "name": "a", "mimeType": "text/plain", "size": 5,
     "annotations": {"audience": ["user"], "priority": 0.5}, "icons": [{"src": "a.png"}]},
    {"uri": "file:///b.bin", "name": "b", "title": "Bee", "_meta": {"k": "v"}},
]
RESOURCES_PAGE_2 = [{"uri": "mem://c", "name": "c", "description": "third"}]

TEMPLATES = [
    {"uriTemplate": "file:///logs/{day}.log", "name": "logs", "mimeType": "text/plain",
     "x-new": True},
]

PROMPTS = [
    {"name": "greet", "title": "Greeting", "description": "says hello",
     "arguments": [{"name": "who", "required": True}, {"name": "style"}]},
]

# One content item of every type, and one of a type no client knows.
MIXED = [
    {"type": "text", "text": "hello", "annotations": {"priority": 1}},
    {"type": "image", "data": "iVBORw0K", "mimeType": "image/png"},
    {"type": "audio", "data": "UklGRg==", "mimeType": "audio/wav"},
    {"type": "resource_link", "uri": "file:///a.txt", "name": "a", "mimeType": "text/plain"},
    {"type": "resource", "resource": {"uri": "file:///b.bin", "blob": "AAE=",
                                      "mimeType": "application/octet-stream"}},
    {"type": "hologram", "frames": 3},
]


class ScriptedServer:
    def __init__(self, era: str) -> None:
        self.era = era
        self.lock = threading.Lock()
        self.messages: list[dict[str, Any]] = []
        # The headers of each message's POST (names in lower case), in `messages`' order.
        self.headers: list[dict[str, str]] = []
        self.answers: dict[Any, dict[str, Any]] = {}
        self.answered = threading.Condition(self.lock)
        self.cancelled = threading.Event()
        self.hanging = threading.Event()
        self.asked = 0
        # The status DELETE is answered with (a server failing to end its sessions: 500).
        self.delete_status = 200
        # With an authorization server (tests/oauth_server.py), every POST needs a token it
        # issued; others are refused with 401 naming its resource metadata.
        self.auth: Any = None
        server = self

        class Handler(_Handler):
            owner = server

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/mcp"

    def stop(self) -> None:
        self.cancelled.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def record(self, message: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        with self.lock:
            self.messages.append(message)
            self.headers.append(headers or {})
            if "method" not in message and "id" in message:
                self.answers[message["id"]] = message
                self.answered.notify_all()
            if message.get("method") == "notifications/cancelled":
                self.cancelled.set()

    def requests(self, method: str) -> list[dict[str, Any]]:
        with self.lock:
            return [m for m in self.messages if m.get("method") == method]

    def request_headers(self, method: str) -> list[dict[str, str]]:
        """The headers of the POST of each `method` request received, in order."""
        with self.lock:
            return [h for m, h in zip(self.messages, self.headers) if m.get("method") == method]

    def wait_answer(self, request_id: Any, timeout: float) -> dict[str, Any] | None:
        with self.lock:
            self.answered.wait_for(lambda: request_id in self.answers, timeout)
            return self.answers.get(request_id)


class _Handler(BaseHTTPRequestHandler):
    owner: ScriptedServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._empty(405)

    def do_DELETE(self) -> None:
        self._empty(self.owner.delete_status)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        message = json.loads(self.rfile.read(length))
        self.owner.record(message, {k.lower(): v for k, v in self.headers.items()})
        auth = self.owner.auth
        if auth is not None:
            if not auth.admits(self.headers.get("Authorization", ""), self.headers.get("DPoP")):
                self.send_response(401)
                self.send_header("WWW-Authenticate", auth.challenge())
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
        if self.headers.get("Authorization") == "Bearer expired":
            self.send_response(401)
            self.send_header(
                "WWW-Authenticate",
                'Bearer error="invalid_token", scope="tools:call", '
                'resource_metadata="http://127.0.0.1/.well-known/oauth-protected-resource"',
            )
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if "method" not in message or "id" not in message:
            self._empty(202)
            return
        if self.owner.era == "modern":
            self._modern(message)
        else:
            self._legacy(message)

    def _legacy(self, msg: dict[str, Any]) -> None:
        method, params = msg["method"], msg.get("params") or {}
        if method == "initialize":
            result = {
                "protocolVersion": params.get("protocolVersion", "2025-11-25"),
                "capabilities": {"tools": {}, "resources": {"subscribe": True}, "prompts": {},
                                 "completions": {}, "logging": {}},
                "serverInfo": {"name": "scripted", "version": "1"},
            }
            self._json(msg["id"], result, {"Mcp-Session-Id": "session-1"})
        elif method == "tools/list":
            self._json(msg["id"], {"tools": TOOLS})
        elif method == "ping":
            self._json(msg["id"], {})
        elif method == "tools/call" and params.get("name") == "echo":
            text = (params.get("arguments") or {}).get("text", "")
            self._json(msg["id"], {"content": [{"type": "text", "text": text}]})
        elif method == "tools/call" and params.get("name") == "raw":
            members = params.get("arguments") or {}
            self._send_json({"jsonrpc": "2.0", "id": msg["id"], **members}, None, 200)
        elif method == "tools/call" and params.get("name") == "mixed":
            self._json(msg["id"], {"content": MIXED, "isError": True, "_meta": {"k": 1}})
        elif method == "tools/call" and params.get("name") == "ask":
            args = params.get("arguments") or {}
            with self.owner.lock:
                self.owner.asked += 1
                rid = f"srv-{self.owner.asked}"
            self._sse_start()
            question = {
                "jsonrpc": "2.0",
                "id": rid,
                "method": args.get("method", "sampling/createMessage"),
                "params": args.get("params", {"messages": [], "maxTokens": 5}),
            }
            self._sse_event(question)
            cancel_after = args.get("cancel_after_ms")
            if cancel_after is not None:
                # The server gives up on its own request: the client must not answer it.
                time.sleep(cancel_after / 1000)
                self._sse_event({"jsonrpc": "2.0", "method": "notifications/cancelled",
                                 "params": {"requestId": rid, "reason": "no longer needed"}})
                answer = self.owner.wait_answer(rid, timeout=0.5)
            else:
                answer = self.owner.wait_answer(rid, timeout=5)
            result = {
                "content": [{"type": "text", "text": "answered"}],
                "structuredContent": {"answer": answer},
            }
            self._sse_event({"jsonrpc": "2.0", "id": msg["id"], "result": result})
        elif method == "resources/list":
            if params.get("cursor") == "page-2":
                self._json(msg["id"], {"resources": RESOURCES_PAGE_2})
            else:
                self._json(msg["id"], {"resources": RESOURCES_PAGE_1, "nextCursor": "page-2"})
        elif method == "resources/templates/list":
            self._json(msg["id"], {"resourceTemplates": TEMPLATES})
        elif method == "resources/read":
            uri = params["uri"]
            self._json(msg["id"], {"contents": [
                {"uri": uri, "mimeType": "text/plain", "text": f"text of {uri}"},
                {"uri": uri + "#2", "blob": "AAE=", "mimeType": "application/octet-stream"},
                {"uri": uri + "#3", "text": "more"},
            ], "_meta": {"read": 1}})
        elif method in ("resources/subscribe", "resources/unsubscribe", "logging/setLevel"):
            self._json(msg["id"], {})
        elif method == "prompts/list":
            self._json(msg["id"], {"prompts": PROMPTS})
        elif method == "prompts/get":
            args = params.get("arguments") or {}
            text = ", ".join(f"{k}={v}" for k, v in sorted(args.items()))
            self._json(msg["id"], {"description": f"{params['name']} rendered", "messages": [
                {"role": "user", "content": {"type": "text", "text": text}},
                {"role": "assistant", "content": {"type": "resource_link", "uri": "file:///a.txt",
                                                  "name": "a"}},
            ]})
        elif method == "completion/complete":
            ref, arg = params["ref"], params["argument"]
            label = ref.get("name") or ref.get("uri")
            context = (params.get("context") or {}).get("arguments") or {}
            values = [f"{arg['value']}-{label}-{arg['name']}"]
            values += [f"{k}={v}" for k, v in sorted(context.items())]
            self._json(msg["id"], {"completion": {"values": values, "total": 10,
                                                  "hasMore": True}})
        elif method == "tools/call" and params.get("name") == "hang":
            self._sse_start()
            self._sse_event({"jsonrpc": "2.0", "method": "notifications/message",
                             "params": {"level": "info", "data": "started"}})
            self.owner.hanging.set()
            self.owner.cancelled.wait(10)
        else:
            self._error(msg["id"], -32601, f"unknown: {method}")

    def _modern(self, msg: dict[str, Any]) -> None:
        method, params = msg["method"], msg.get("params") or {}
        if method == "server/discover":
            self._json(msg["id"], {
                "resultType": "complete",
                "supportedVersions": [MODERN],
                "capabilities": {"tools": {}},
                "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "scripted", "version": "2"}},
            })
        elif method == "tools/list":
            self._json(msg["id"], {"resultType": "complete", "tools": TOOLS})
        elif method == "tools/call" and params.get("name") == "confirm":
            if "inputResponses" not in params:
                self._json(msg["id"], {
                    "resultType": "input_required",
                    "inputRequests": {"ok": {"method": "elicitation/create",
                                             "params": {"message": "proceed?",
                                                        "requestedSchema": {"type": "object"}}}},
                    "requestState": "state-1",
                })
            else:
                action = params["inputResponses"]["ok"].get("action", "none")
                self._json(msg["id"], {"resultType": "complete",
                                       "content": [{"type": "text", "text": action}],
                                       "structuredContent": {"state": params.get("requestState")}})
        elif method == "tools/call" and params.get("name") == "needs_sampling":
            self._error(msg["id"], -32021, "needs sampling",
                        {"requiredCapabilities": {"sampling": {}}}, status=400)
        else:
            self._error(msg["id"], -32601, "Method not found", status=404)

    def _json(self, rid: Any, result: dict[str, Any], headers: dict[str, str] | None = None,
              status: int = 200) -> None:
        self._send_json({"jsonrpc": "2.0", "id": rid, "result": result}, headers, status)

    def _error(self, rid: Any, code: int, message: str, data: Any = None,
               status: int = 200) -> None:
        error: dict[str, Any] = {"code": code, "message": message}
        if data is not None:
            error["data"] = data
        self._send_json({"jsonrpc": "2.0", "id": rid, "error": error}, None, status)

    def _send_json(self, body: dict[str, Any], headers: dict[str, str] | None,
                   status: int) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _empty(self, status: int) -> None:
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _sse_start(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

    def _sse_event(self, message: dict[str, Any]) -> None:
        try:
            self.wfile.write(f"data: {json.dumps(message)}\n\n".encode())
            self.wfile.flush()
        except OSError:
            pass
