//! The wire of protocol revision 2026-07-28 against a server nobody here wrote: the official
//! TypeScript SDK v2 (`@modelcontextprotocol/server`, pinned in
//! `tests/interop-modern/package.json`), stateless and modern-only, run by
//! `tests/interop-modern/server.mjs`.
//!
//! These tests speak raw HTTP (reqwest): they pin what the SDK answers, so that the client's
//! modern era is built against observed behaviour — era detection (`server/discover` and what a
//! legacy `initialize` gets), header validation (-32020), version negotiation (-32022), MRTR,
//! idempotency-key deduplication, broken streams, `subscriptions/listen` and tasks.
//!
//! The client-level tests of the same server are in `interop_ts_modern/modern_client.rs`.
//!
//! Every assertion about what the server did is made on the server's own log (requests as
//! received, tool runs with their keys, side effects, streams cut), not on the reply alone.

use crate::interop_support;
mod modern_client;

use std::time::Duration;

use serde_json::{json, Value};

use interop_support::{modern_interop_dir, TsServer};

/// Hang guard for anything awaited in these tests.
const GUARD: Duration = Duration::from_secs(20);

/// The only revision the server speaks.
const MODERN: &str = "2026-07-28";

const RESUME_SAFETY: &str = "io.github.mcp-resume/resume-safety";
const KEY_META: &str = "io.github.mcp-resume/idempotency-key";

/// Starts `server.mjs` with `args` (`--legacy stateless` for the dual-era variant).
pub(crate) fn start_modern(args: &[&str]) -> TsServer {
    TsServer::start_script(&modern_interop_dir(), "server.mjs", args)
}

async fn within<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(GUARD, fut)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within {GUARD:?}"))
}

/// The per-request `_meta` of revision 2026-07-28, with `capabilities` as the client's.
fn envelope(capabilities: Value) -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": capabilities,
        "io.modelcontextprotocol/clientInfo": {"name": "mcp-resume-raw", "version": "0.0.0"},
    })
}

/// A JSON-RPC request whose `params` get the envelope merged into their `_meta`.
fn request(id: u64, method: &str, mut params: Value, capabilities: Value) -> Value {
    let meta = params
        .as_object_mut()
        .expect("params are an object")
        .entry("_meta")
        .or_insert_with(|| json!({}));
    for (k, v) in envelope(capabilities).as_object().unwrap() {
        meta[k] = v.clone();
    }
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

/// The headers a conforming client sends with `body`: the version, `Mcp-Method`, and
/// `Mcp-Name` for the methods that name something.
fn standard_headers(body: &Value) -> Vec<(String, String)> {
    let method = body["method"].as_str().unwrap_or_default();
    let mut headers = vec![
        ("MCP-Protocol-Version".to_owned(), MODERN.to_owned()),
        ("Mcp-Method".to_owned(), method.to_owned()),
    ];
    let name = match method {
        "tools/call" | "prompts/get" => body["params"]["name"].as_str(),
        "resources/read" => body["params"]["uri"].as_str(),
        "tasks/get" | "tasks/update" | "tasks/cancel" => body["params"]["taskId"].as_str(),
        _ => None,
    };
    if let Some(name) = name {
        headers.push(("Mcp-Name".to_owned(), name.to_owned()));
    }
    headers
}

/// What came back for one POST: the status, the head, and the JSON-RPC messages of the body
/// (one for a JSON answer; every `data` of an SSE answer, in order).
#[derive(Debug)]
struct Reply {
    status: u16,
    content_type: String,
    session_id: Option<String>,
    messages: Vec<Value>,
    /// The body ended with a transport error (connection cut mid-stream).
    broken: bool,
}

impl Reply {
    /// The response (the message carrying `id`), if it arrived.
    fn response(&self, id: u64) -> Option<&Value> {
        self.messages.iter().find(|m| m["id"] == id)
    }

    fn result(&self, id: u64) -> &Value {
        let response = self
            .response(id)
            .unwrap_or_else(|| panic!("no response to {id}: {self:?}"));
        assert!(response.get("error").is_none(), "error for {id}: {self:?}");
        &response["result"]
    }

    fn error(&self, id: u64) -> &Value {
        let response = self
            .messages
            .iter()
            .find(|m| m.get("error").is_some())
            .unwrap_or_else(|| panic!("no error response to {id}: {self:?}"));
        assert!(
            response["id"] == id || response["id"].is_null(),
            "error for another request: {self:?}"
        );
        &response["error"]
    }

    fn notifications(&self, method: &str) -> Vec<&Value> {
        self.messages
            .iter()
            .filter(|m| m["method"] == method)
            .collect()
    }
}

/// The messages in a complete SSE body: every event's `data` lines joined, empty data skipped.
fn sse_messages(body: &str) -> Vec<Value> {
    let body = body.replace("\r\n", "\n");
    body.split("\n\n")
        .filter_map(|event| {
            let data: Vec<&str> = event
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(|d| d.strip_prefix(' ').unwrap_or(d))
                .collect();
            if data.is_empty() || data.iter().all(|d| d.is_empty()) {
                return None;
            }
            Some(serde_json::from_str(&data.join("\n")).expect("SSE data is JSON"))
        })
        .collect()
}

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("reqwest client")
}

/// Sends the head of a POST to the MCP endpoint with exactly `headers` (plus Content-Type and
/// Accept).
async fn send(
    server: &TsServer,
    body: &Value,
    headers: &[(String, String)],
) -> reqwest::Result<reqwest::Response> {
    let mut req = http()
        .post(&server.url)
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .body(body.to_string());
    for (name, value) in headers {
        req = req.header(name.as_str(), value.as_str());
    }
    within("POST", req.send()).await
}

/// Reads a whole reply: a JSON body, or an SSE stream to its end (or to a transport error).
async fn read(resp: reqwest::Response) -> Reply {
    let status = resp.status().as_u16();
    let head = |name: &str| {
        resp.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let content_type = head("content-type").unwrap_or_default();
    let session_id = head("mcp-session-id");
    let mut resp = resp;
    let mut bytes = Vec::new();
    let mut broken = false;
    loop {
        match within("response body", resp.chunk()).await {
            Ok(Some(chunk)) => bytes.extend_from_slice(&chunk),
            Ok(None) => break,
            Err(_) => {
                broken = true;
                break;
            }
        }
    }
    let text = String::from_utf8_lossy(&bytes);
    let messages = if content_type.starts_with("text/event-stream") {
        sse_messages(&text)
    } else if text.trim().is_empty() {
        Vec::new()
    } else {
        vec![serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("JSON body ({e}): {text:?} (status {status})"))]
    };
    Reply {
        status,
        content_type,
        session_id,
        messages,
        broken,
    }
}

/// POSTs `body` with the standard headers and reads the whole reply.
async fn post(server: &TsServer, body: &Value) -> Reply {
    let headers = standard_headers(body);
    post_with(server, body, &headers).await
}

async fn post_with(server: &TsServer, body: &Value, headers: &[(String, String)]) -> Reply {
    let resp = send(server, body, headers)
        .await
        .unwrap_or_else(|e| panic!("POST {body}: {e}\n{}", server.dump()));
    read(resp).await
}

fn call(id: u64, name: &str, arguments: Value) -> Value {
    request(
        id,
        "tools/call",
        json!({"name": name, "arguments": arguments}),
        json!({}),
    )
}

fn tool_runs(server: &TsServer, name: &str) -> Vec<Value> {
    server.find("tool", |e| e["name"] == name)
}

/// Waits until the server has finished the HTTP exchange of the request with JSON-RPC id `id`
/// (ids are unique within a test); everything the server logged before it is then readable.
async fn exchange_done(server: &TsServer, id: u64) -> Value {
    server
        .wait_for("http_done", GUARD, |e| e["rpc_id"] == id)
        .await
}

/// The server's counter and seen keys (`/admin/state`), once everything it logged before
/// answering is readable here.
async fn state(server: &TsServer) -> Value {
    let before = server.find("admin", |_| true).len();
    let state = server.admin("/admin/state").await;
    server
        .wait_count("admin", before + 1, GUARD, |_| true)
        .await;
    state
}

// ---- discovery and era detection ----------------------------------------------------------

/// `server/discover` with the envelope and the standard headers gets a modern answer: the
/// supported versions, the capabilities with the resume-safety extension where 2026-07-28
/// places extensions (`capabilities.extensions`), and the server's identity in `_meta`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discover_is_answered_as_modern() {
    let server = start_modern(&[]);
    let body = request(1, "server/discover", json!({}), json!({}));
    let reply = post(&server, &body).await;

    assert_eq!(reply.status, 200, "{reply:?}");
    assert!(
        reply.content_type.starts_with("application/json"),
        "{reply:?}"
    );
    assert_eq!(
        reply.session_id, None,
        "a 2026-07-28 server mints no session"
    );
    let result = reply.result(1);
    assert_eq!(result["resultType"], "complete", "{result}");
    assert_eq!(result["supportedVersions"], json!([MODERN]), "{result}");
    assert_eq!(
        result["capabilities"]["extensions"][RESUME_SAFETY],
        json!({
            "version": 1,
            "idempotency": {"metaKey": KEY_META, "header": "Idempotency-Key"},
        }),
        "{result}"
    );
    assert_eq!(
        result["capabilities"]["extensions"]["io.modelcontextprotocol/tasks"],
        json!({})
    );
    assert_eq!(result["capabilities"]["tools"]["listChanged"], true);
    assert_eq!(
        result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "mcp-resume-interop-ts-modern"
    );
    // Cacheable (SEP-2549): the SDK fills both fields.
    assert!(result["ttlMs"].is_u64(), "{result}");
    assert!(result["cacheScope"].is_string(), "{result}");

    let seen = server
        .wait_for("http_in", GUARD, |e| e["rpc_method"] == "server/discover")
        .await;
    assert_eq!(seen["headers"]["mcp-method"], "server/discover");
    assert_eq!(seen["headers"]["mcp-protocol-version"], MODERN);
    assert_eq!(
        seen["meta"]["io.modelcontextprotocol/protocolVersion"],
        MODERN
    );
}

/// What a legacy client (and a dual-era client that opens with `initialize`) sees from a
/// modern-only TypeScript v2 server: 400 with the recognised modern error -32022 naming the
/// supported versions, and no session. GET and DELETE (the 2025 stream and session
/// operations) are 405.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_initialize_gets_unsupported_version_from_the_modern_only_server() {
    let server = start_modern(&[]);
    let initialize = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "mcp-resume-raw", "version": "0.0.0"},
        },
    });
    let reply = post_with(&server, &initialize, &[]).await;
    assert_eq!(reply.status, 400, "{reply:?}");
    assert!(
        reply.content_type.starts_with("application/json"),
        "{reply:?}"
    );
    assert_eq!(reply.session_id, None);
    let error = reply.error(1);
    assert_eq!(error["code"], -32022, "{error}");
    assert_eq!(error["data"]["supported"], json!([MODERN]), "{error}");
    assert_eq!(error["data"]["requested"], "2025-11-25", "{error}");
    assert_eq!(
        reply.messages[0]["id"], 1,
        "the error echoes the request id"
    );

    for method in [reqwest::Method::GET, reqwest::Method::DELETE] {
        let resp = within(
            "legacy stream operation",
            http()
                .request(method.clone(), &server.url)
                .header("Accept", "text/event-stream")
                .send(),
        )
        .await
        .unwrap();
        assert_eq!(resp.status().as_u16(), 405, "{method}");
        assert_eq!(
            resp.headers().get("allow").and_then(|v| v.to_str().ok()),
            Some("POST")
        );
    }
    assert!(tool_runs(&server, "echo").is_empty());
}

/// The same SDK serving both eras (`legacy: 'stateless'`): `initialize` is answered over SSE
/// with a 2025-11-25 result and no session id; `server/discover` on the same endpoint is
/// modern. A dual-era client probing with `server/discover` stays modern here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dual_era_server_answers_both_eras() {
    let server = start_modern(&["--legacy", "stateless"]);
    let initialize = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "mcp-resume-raw", "version": "0.0.0"},
        },
    });
    let reply = post_with(&server, &initialize, &[]).await;
    assert_eq!(reply.status, 200, "{reply:?}");
    assert!(
        reply.content_type.starts_with("text/event-stream"),
        "{reply:?}"
    );
    assert_eq!(reply.session_id, None, "stateless: no Mcp-Session-Id");
    let result = reply.result(1);
    assert_eq!(result["protocolVersion"], "2025-11-25");
    // The legacy answer carries the same capabilities, extensions included (2025-11-25 has no
    // `extensions` member: a legacy client looks under `experimental` and finds nothing).
    assert!(result["capabilities"]["extensions"][RESUME_SAFETY].is_object());
    assert!(result["capabilities"]["experimental"].is_null(), "{result}");

    let discover = post(
        &server,
        &request(2, "server/discover", json!({}), json!({})),
    )
    .await;
    assert_eq!(discover.status, 200, "{discover:?}");
    assert_eq!(discover.result(2)["supportedVersions"], json!([MODERN]));
}

/// A version the server does not speak: 400 and -32022 with the supported list (the client
/// picks one and retries).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsupported_version_names_the_supported_ones() {
    let server = start_modern(&[]);
    let mut body = request(1, "server/discover", json!({}), json!({}));
    body["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("2099-01-01");
    let headers = vec![
        ("MCP-Protocol-Version".to_owned(), "2099-01-01".to_owned()),
        ("Mcp-Method".to_owned(), "server/discover".to_owned()),
    ];
    let reply = post_with(&server, &body, &headers).await;
    assert_eq!(reply.status, 400, "{reply:?}");
    let error = reply.error(1);
    assert_eq!(error["code"], -32022);
    assert_eq!(error["data"]["supported"], json!([MODERN]));
    assert_eq!(error["data"]["requested"], "2099-01-01");

    // The header and the envelope disagreeing is a header mismatch, not a version problem.
    let mut body = request(2, "server/discover", json!({}), json!({}));
    body["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("2099-01-01");
    let reply = post(&server, &body).await;
    assert_eq!(reply.status, 400, "{reply:?}");
    assert_eq!(reply.error(2)["code"], -32020);
}

/// An unknown method is 404 with -32601: "method not found", not "session gone" (there are no
/// sessions).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_method_is_404_method_not_found() {
    let server = start_modern(&[]);
    let reply = post(&server, &request(1, "nope/nothing", json!({}), json!({}))).await;
    assert_eq!(reply.status, 404, "{reply:?}");
    assert_eq!(reply.error(1)["code"], -32601);
    assert_eq!(reply.session_id, None);
}

// ---- requests and header validation -------------------------------------------------------

/// `tools/list` is a cacheable modern result listing every tool, `x-mcp-header` annotations
/// included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_list_is_a_cacheable_result() {
    let server = start_modern(&[]);
    let reply = post(&server, &request(1, "tools/list", json!({}), json!({}))).await;
    let result = reply.result(1);
    assert_eq!(result["resultType"], "complete");
    assert!(result["ttlMs"].is_u64() && result["cacheScope"].is_string());
    let tools = result["tools"].as_array().expect("tools");
    let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    for expected in [
        "echo",
        "progress",
        "counter_increment",
        "drop_stream",
        "confirm",
        "slow_task",
        "block",
        "locate",
    ] {
        assert!(
            names.contains(&expected),
            "{expected} missing from {names:?}"
        );
    }
    let locate = tools.iter().find(|t| t["name"] == "locate").unwrap();
    assert_eq!(
        locate["inputSchema"]["properties"]["region"]["x-mcp-header"],
        "Region"
    );
}

/// `tools/call` of `echo` answers with its text; the handler saw the envelope the request
/// carried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echo_call_runs_under_the_envelope_it_carried() {
    let server = start_modern(&[]);
    let reply = post(&server, &call(7, "echo", json!({"text": "hello"}))).await;
    assert_eq!(reply.status, 200);
    assert!(reply.content_type.starts_with("application/json"));
    let result = reply.result(7);
    assert_eq!(result["resultType"], "complete");
    assert_eq!(result["content"][0]["text"], "hello");
    assert_eq!(
        result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "mcp-resume-interop-ts-modern",
        "the server names itself on every result"
    );

    let run = server
        .wait_for("tool", GUARD, |e| e["name"] == "echo")
        .await;
    assert_eq!(run["arguments"], json!({"text": "hello"}));
    assert_eq!(
        run["envelope"]["io.modelcontextprotocol/clientInfo"]["name"],
        "mcp-resume-raw"
    );
    assert_eq!(
        run["envelope"]["io.modelcontextprotocol/protocolVersion"],
        MODERN
    );
    let seen = server
        .wait_for("http_in", GUARD, |e| e["rpc_id"] == 7)
        .await;
    assert_eq!(seen["headers"]["mcp-name"], "echo");
    assert_eq!(seen["headers"]["mcp-method"], "tools/call");
}

/// An `Mcp-Name` that disagrees with `params.name` is refused with 400 / -32020 before the
/// tool runs; so is a request missing `Mcp-Method` or `MCP-Protocol-Version`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_mismatches_are_refused_before_running() {
    let server = start_modern(&[]);

    let body = call(1, "echo", json!({"text": "x"}));
    let mut headers = standard_headers(&body);
    headers.retain(|(n, _)| n != "Mcp-Name");
    headers.push(("Mcp-Name".to_owned(), "counter_increment".to_owned()));
    let reply = post_with(&server, &body, &headers).await;
    assert_eq!(reply.status, 400, "{reply:?}");
    assert_eq!(reply.error(1)["code"], -32020);

    for (id, missing) in [
        (2, "Mcp-Name"),
        (3, "Mcp-Method"),
        (4, "MCP-Protocol-Version"),
    ] {
        let body = call(id, "echo", json!({"text": "x"}));
        let mut headers = standard_headers(&body);
        headers.retain(|(n, _)| n != missing);
        let reply = post_with(&server, &body, &headers).await;
        assert_eq!(reply.status, 400, "without {missing}: {reply:?}");
        assert_eq!(reply.error(id)["code"], -32020, "without {missing}");
    }

    exchange_done(&server, 4).await;
    assert!(
        tool_runs(&server, "echo").is_empty(),
        "a refused request ran: {}",
        server.dump()
    );
}

/// A parameter marked `x-mcp-header` must be mirrored in `Mcp-Param-{Name}` and agree with the
/// body; the base64 sentinel is decoded before comparing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_param_headers_must_match_the_body() {
    let server = start_modern(&[]);
    let locate = |id: u64, header: Option<&str>| {
        let body = call(id, "locate", json!({"region": "eu-west1"}));
        let mut headers = standard_headers(&body);
        if let Some(value) = header {
            headers.push(("Mcp-Param-Region".to_owned(), value.to_owned()));
        }
        (body, headers)
    };

    let (body, headers) = locate(1, Some("us-east1"));
    let reply = post_with(&server, &body, &headers).await;
    assert_eq!(reply.status, 400, "{reply:?}");
    assert_eq!(reply.error(1)["code"], -32020);

    let (body, headers) = locate(2, None);
    let reply = post_with(&server, &body, &headers).await;
    assert_eq!(reply.status, 400, "a missing Mcp-Param header: {reply:?}");
    assert_eq!(reply.error(2)["code"], -32020);

    let (body, headers) = locate(3, Some("eu-west1"));
    let reply = post_with(&server, &body, &headers).await;
    assert_eq!(reply.result(3)["content"][0]["text"], "region=eu-west1");

    // "eu-west1" as =?base64?ZXUtd2VzdDE=?=
    let (body, headers) = locate(4, Some("=?base64?ZXUtd2VzdDE=?="));
    let reply = post_with(&server, &body, &headers).await;
    assert_eq!(reply.result(4)["content"][0]["text"], "region=eu-west1");

    exchange_done(&server, 4).await;
    let runs = tool_runs(&server, "locate");
    let ids: Vec<&Value> = runs.iter().map(|r| &r["request_id"]).collect();
    assert_eq!(ids, [&json!(3), &json!(4)], "{}", server.dump());
}

/// Progress for the request's `progressToken` comes on the request's own SSE stream, before
/// the result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_precedes_the_result_on_the_request_stream() {
    let server = start_modern(&[]);
    let mut body = call(3, "progress", json!({"steps": 3}));
    body["params"]["_meta"]["progressToken"] = json!("tok-3");
    let reply = post(&server, &body).await;
    assert!(
        reply.content_type.starts_with("text/event-stream"),
        "{reply:?}"
    );
    let progress = reply.notifications("notifications/progress");
    assert_eq!(progress.len(), 3, "{reply:?}");
    for (i, n) in progress.iter().enumerate() {
        assert_eq!(n["params"]["progressToken"], "tok-3");
        assert_eq!(n["params"]["progress"], i as u64 + 1);
    }
    let last = reply.messages.last().unwrap();
    assert_eq!(last["id"], 3, "the result ends the stream: {reply:?}");
    assert_eq!(
        reply.result(3)["content"][0]["text"],
        "progress done after 3 steps"
    );
}

// ---- MRTR ---------------------------------------------------------------------------------

/// `confirm` answers `input_required` with an elicitation and an opaque `requestState`; the
/// retry (a new id, `inputResponses`, the state echoed) completes with what was answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confirm_is_a_multi_round_trip() {
    let server = start_modern(&[]);
    let caps = json!({"elicitation": {}});
    let first = request(
        1,
        "tools/call",
        json!({"name": "confirm", "arguments": {"question": "Ship it?"}}),
        caps.clone(),
    );
    let reply = post(&server, &first).await;
    let result = reply.result(1).clone();
    assert_eq!(result["resultType"], "input_required", "{result}");
    let input = &result["inputRequests"]["confirm"];
    assert_eq!(input["method"], "elicitation/create");
    assert_eq!(input["params"]["message"], "Ship it?");
    assert_eq!(input["params"]["mode"], "form", "the SDK stamps the mode");
    let state = result["requestState"]
        .as_str()
        .expect("requestState")
        .to_owned();

    let retry = request(
        2,
        "tools/call",
        json!({
            "name": "confirm",
            "arguments": {"question": "Ship it?"},
            "inputResponses": {"confirm": {"action": "accept", "content": {"confirmed": true}}},
            "requestState": state,
        }),
        caps,
    );
    let reply = post(&server, &retry).await;
    let done = reply.result(2);
    assert_eq!(done["resultType"], "complete", "{done}");
    assert_eq!(
        done["structuredContent"],
        json!({"action": "accept", "content": {"confirmed": true}})
    );

    let runs = server
        .wait_count("tool", 2, GUARD, |e| e["name"] == "confirm")
        .await;
    assert_eq!(runs[0]["input_responses"], Value::Null);
    assert_eq!(runs[1]["request_state"], state.as_str());
    assert_eq!(
        runs[1]["input_responses"]["confirm"]["action"],
        "accept",
        "{}",
        server.dump()
    );
}

/// An input request the client did not declare the capability for is refused: -32021 with the
/// capability it needs. The client must declare `elicitation` in every request's
/// `clientCapabilities` to get the elicitation round at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mrtr_needs_the_declared_capability() {
    let server = start_modern(&[]);
    let reply = post(&server, &call(1, "confirm", json!({}))).await;
    let error = reply.error(1);
    assert_eq!(error["code"], -32021, "{reply:?}");
    assert!(
        error["data"]["requiredCapabilities"]["elicitation"].is_object(),
        "{error}"
    );
}

// ---- side effects, keys and broken streams ------------------------------------------------

fn keyed_call(id: u64, name: &str, key: &str) -> (Value, Vec<(String, String)>) {
    let mut body = call(id, name, json!({}));
    body["params"]["_meta"][KEY_META] = json!(key);
    let mut headers = standard_headers(&body);
    headers.push(("Idempotency-Key".to_owned(), key.to_owned()));
    (body, headers)
}

/// `counter_increment` runs its side effect once per idempotency key (in `_meta` and the
/// header): a re-sent request (new JSON-RPC id, same key) gets the first outcome back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counter_is_deduplicated_by_idempotency_key() {
    let server = start_modern(&[]);
    let (body, headers) = keyed_call(1, "counter_increment", "key-a");
    let first = post_with(&server, &body, &headers).await;
    assert_eq!(
        first.result(1)["structuredContent"],
        json!({"counter": 1, "deduplicated": false})
    );
    let (body, headers) = keyed_call(2, "counter_increment", "key-a");
    let again = post_with(&server, &body, &headers).await;
    assert_eq!(
        again.result(2)["structuredContent"],
        json!({"counter": 1, "deduplicated": true})
    );
    let (body, headers) = keyed_call(3, "counter_increment", "key-b");
    let other = post_with(&server, &body, &headers).await;
    assert_eq!(other.result(3)["structuredContent"]["counter"], 2);
    // Unkeyed: always runs.
    let unkeyed = post(&server, &call(4, "counter_increment", json!({}))).await;
    assert_eq!(unkeyed.result(4)["structuredContent"]["counter"], 3);

    let state = state(&server).await;
    assert_eq!(state["counter"], 3);
    assert_eq!(state["keys"], json!(["key-a", "key-b"]));
    let runs = tool_runs(&server, "counter_increment");
    assert_eq!(runs[0]["key_meta"], "key-a");
    assert_eq!(runs[0]["key_header"], "key-a");
    assert_eq!(
        server.find("side_effect", |_| true).len(),
        3,
        "{}",
        server.dump()
    );
}

/// `drop_stream` (after the head): the side effect ran, the SSE response opened and then the
/// connection closed without the response. The request is lost: revision 2026-07-28 has no
/// resumption, and the server treated the close as cancellation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_stream_after_head_loses_the_response() {
    let server = start_modern(&[]);
    let reply = post(&server, &call(1, "drop_stream", json!({}))).await;
    assert_eq!(reply.status, 200);
    assert!(
        reply.content_type.starts_with("text/event-stream"),
        "{reply:?}"
    );
    assert!(reply.response(1).is_none(), "{reply:?}");
    assert!(
        reply.broken,
        "the body ends in a transport error: {reply:?}"
    );

    server
        .wait_for("side_effect", GUARD, |e| e["name"] == "drop_stream")
        .await;
    let cut = server
        .wait_for("stream_cut", GUARD, |e| e["request_id"] == 1)
        .await;
    assert_eq!(cut["phase"], "after_head");
    assert_eq!(cut["head_sent"], true);
    server
        .wait_for("cancelled", GUARD, |e| e["request_id"] == 1)
        .await;
    assert_eq!(server.admin("/admin/state").await["counter"], 1);
}

/// `drop_stream` before the head: the connection closes with no response at all, after the
/// side effect ran — the case a client cannot tell from "never arrived".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_stream_before_head_loses_the_connection() {
    let server = start_modern(&[]);
    let body = call(1, "drop_stream", json!({"phase": "before_head"}));
    let sent = send(&server, &body, &standard_headers(&body)).await;
    match sent {
        Err(e) => assert!(!e.is_timeout(), "{e}"),
        Ok(resp) => panic!("a response head arrived: {}", resp.status()),
    }
    let cut = server
        .wait_for("stream_cut", GUARD, |e| e["request_id"] == 1)
        .await;
    assert_eq!(cut["phase"], "before_head");
    assert_eq!(cut["head_sent"], false);
    assert_eq!(server.admin("/admin/state").await["counter"], 1);
}

/// The recovery the client must perform, done by hand: a keyed call whose stream breaks is
/// re-issued with a new id and the same key, and the server runs the side effect once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyed_reissue_after_a_broken_stream_runs_once() {
    let server = start_modern(&[]);
    let armed = server
        .admin_with(
            "/admin/arm-drop",
            Some(json!({"tool": "counter_increment", "count": 1, "phase": "after_head"})),
        )
        .await;
    assert_eq!(armed["armed"], 1);

    let (body, headers) = keyed_call(1, "counter_increment", "key-r");
    let broken = post_with(&server, &body, &headers).await;
    assert!(broken.response(1).is_none(), "{broken:?}");

    let (body, headers) = keyed_call(2, "counter_increment", "key-r");
    let reissued = post_with(&server, &body, &headers).await;
    assert_eq!(
        reissued.result(2)["structuredContent"],
        json!({"counter": 1, "deduplicated": true})
    );
    assert_eq!(state(&server).await["counter"], 1);
    assert_eq!(tool_runs(&server, "counter_increment").len(), 2);
    assert_eq!(server.find("side_effect", |_| true).len(), 1);
}

// ---- subscriptions/listen -----------------------------------------------------------------

/// Reads an SSE response incrementally.
struct SseReader {
    resp: reqwest::Response,
    buf: String,
}

impl SseReader {
    async fn next(&mut self) -> Value {
        loop {
            let normalized = self.buf.replace("\r\n", "\n");
            if let Some(end) = normalized.find("\n\n") {
                let event = normalized[..end].to_owned();
                self.buf = normalized[end + 2..].to_owned();
                if let Some(message) = sse_messages(&format!("{event}\n\n")).pop() {
                    return message;
                }
                continue;
            }
            let chunk = within("listen stream", self.resp.chunk())
                .await
                .expect("listen stream read")
                .expect("listen stream ended");
            self.buf.push_str(&String::from_utf8_lossy(&chunk));
        }
    }
}

/// `subscriptions/listen` acknowledges first (`notifications/subscriptions/acknowledged`, the
/// honoured filter, the subscription id = the request id), then delivers
/// `notifications/tools/list_changed` tagged with that id when the tools change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listen_acknowledges_then_delivers_list_changed() {
    let server = start_modern(&[]);
    let body = request(
        41,
        "subscriptions/listen",
        json!({"notifications": {"toolsListChanged": true, "promptsListChanged": true}}),
        json!({}),
    );
    let resp = send(&server, &body, &standard_headers(&body))
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let mut stream = SseReader {
        resp,
        buf: String::new(),
    };
    let ack = stream.next().await;
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
    assert_eq!(
        ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        41
    );
    // Prompts are not offered: only the tools filter is honoured.
    assert_eq!(
        ack["params"]["notifications"],
        json!({"toolsListChanged": true})
    );

    let published = server.admin("/admin/tools-changed").await;
    assert_eq!(published["listeners"], 1);
    let changed = stream.next().await;
    assert_eq!(changed["method"], "notifications/tools/list_changed");
    assert_eq!(
        changed["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        41
    );
}

// ---- tasks (SEP-2663) ---------------------------------------------------------------------

/// To a client declaring the tasks extension, `slow_task` answers with a task handle
/// (`resultType: "task"`); `tasks/get` (with `Mcp-Name` = the task id) polls it to `completed`
/// with the tool result inside. Without the extension the same call completes directly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_task_returns_a_task_to_a_client_declaring_tasks() {
    let server = start_modern(&[]);
    let caps = json!({"extensions": {"io.modelcontextprotocol/tasks": {}}});
    let body = request(
        1,
        "tools/call",
        json!({"name": "slow_task", "arguments": {"polls": 2, "text": "t"}}),
        caps.clone(),
    );
    let created = post(&server, &body).await;
    let handle = created.result(1);
    assert_eq!(handle["resultType"], "task", "{handle}");
    assert_eq!(handle["status"], "working");
    let task_id = handle["taskId"].as_str().expect("taskId").to_owned();
    assert!(handle["pollIntervalMs"].is_u64() && handle["ttlMs"].is_u64());

    let mut status = String::new();
    let mut final_task = Value::Null;
    for id in 2..6 {
        let poll = request(id, "tasks/get", json!({"taskId": task_id}), caps.clone());
        let reply = post(&server, &poll).await;
        let task = reply.result(id).clone();
        assert_eq!(task["resultType"], "complete", "{task}");
        status = task["status"].as_str().unwrap_or_default().to_owned();
        if status != "working" {
            final_task = task;
            break;
        }
    }
    assert_eq!(status, "completed", "{}", server.dump());
    assert_eq!(final_task["result"]["content"][0]["text"], "task done: t");
    state(&server).await;
    let polls = server.find("http_in", |e| e["rpc_method"] == "tasks/get");
    assert!(polls
        .iter()
        .all(|p| p["headers"]["mcp-name"] == task_id.as_str()));

    let direct = post(&server, &call(9, "slow_task", json!({"text": "d"}))).await;
    assert_eq!(direct.result(9)["resultType"], "complete");
    assert_eq!(direct.result(9)["content"][0]["text"], "task done: d");
}
