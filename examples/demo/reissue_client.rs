//! A stock-like 2026-07-28 client in a few lines of reqwest, for the modern rows of the demo:
//! it speaks the revision correctly (per-request `_meta`, mirrored headers, MRTR rounds) and
//! follows the changelog's rule for a broken stream to the letter: "a broken response stream
//! loses the in-flight request; clients MUST re-issue it as a new request with a new request
//! ID". It re-issues every such request, whatever it does, up to [`MAX_ISSUES`] times.
//!
//! This is a model, not a particular SDK: re-issuing blindly is what the rule says when read
//! without the question it leaves open (did the lost request run?). The app's idempotency key,
//! when a call has one, travels in `_meta` and `Idempotency-Key` like every client's of the
//! demo, so a server that deduplicates keys protects the keyed calls from it; nothing protects
//! the others. It declares no tasks extension (it would not poll), so long jobs run inline.

// The demo and the end-to-end tests use different parts of this module.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use mcp_resume::ErrorKind;
use serde_json::{json, Map, Value};

/// Times one request is sent before the client gives up on it: the first and two re-issues.
pub(crate) const MAX_ISSUES: u32 = 3;
/// MRTR rounds one call may take.
const MAX_ROUNDS: u32 = 4;

const MODERN: &str = "2026-07-28";

/// What one call came to.
#[derive(Debug, Clone)]
pub(crate) struct Outcome {
    /// The result, or what the call ended with.
    pub result: Result<Value, ErrorKind>,
    /// Requests sent again after a broken stream (each with a new JSON-RPC id).
    pub reissued: u32,
}

/// The client: an HTTP client, the endpoint and the capabilities it declares on every request.
pub(crate) struct ReissueClient {
    http: reqwest::Client,
    url: String,
    capabilities: Value,
    next_id: u64,
    timeout: Duration,
}

enum Answer {
    /// The response arrived (a result or a JSON-RPC error).
    Response(Value),
    /// The stream or the connection broke before it did.
    Broken,
}

impl ReissueClient {
    /// A client declaring `capabilities` (plus `elicitation`: it answers the input requests of
    /// MRTR by accepting).
    pub(crate) fn new(url: &str, capabilities: Value, timeout: Duration) -> Self {
        let mut capabilities = capabilities;
        capabilities["elicitation"] = json!({});
        ReissueClient {
            http: reqwest::Client::new(),
            url: url.to_owned(),
            capabilities,
            next_id: 0,
            timeout,
        }
    }

    /// `server/discover`: the supported versions must include 2026-07-28.
    pub(crate) async fn discover(&mut self) -> Result<Value, ErrorKind> {
        let outcome = self.request("server/discover", json!({})).await;
        let result = outcome.result?;
        let speaks = result["supportedVersions"]
            .as_array()
            .is_some_and(|v| v.iter().any(|s| s == MODERN));
        if speaks {
            Ok(result)
        } else {
            Err(ErrorKind::Protocol)
        }
    }

    /// `tools/call` with `meta` merged into `params._meta` and, when it holds the
    /// resume-safety extension's key, that key in `Idempotency-Key` too.
    pub(crate) async fn call_tool(
        &mut self,
        name: &str,
        arguments: Value,
        meta: Map<String, Value>,
    ) -> Outcome {
        let params = json!({"name": name, "arguments": arguments, "_meta": meta});
        self.request("tools/call", params).await
    }

    /// One request to its end: re-issued after a broken stream, sent again for each MRTR
    /// round.
    pub(crate) async fn request(&mut self, method: &str, mut params: Value) -> Outcome {
        let deadline = Instant::now() + self.timeout;
        let mut reissued = 0;
        let mut issues = 0;
        let mut rounds = 0;
        loop {
            issues += 1;
            let answer = match tokio::time::timeout_at(
                tokio::time::Instant::from_std(deadline),
                self.send(method, &params),
            )
            .await
            {
                Ok(a) => a,
                Err(_) => {
                    return Outcome {
                        result: Err(ErrorKind::Timeout),
                        reissued,
                    }
                }
            };
            let response = match answer {
                Answer::Response(r) => r,
                Answer::Broken if issues < MAX_ISSUES => {
                    // The changelog's rule: the request is lost, send it as a new one.
                    reissued += 1;
                    continue;
                }
                Answer::Broken => {
                    return Outcome {
                        result: Err(ErrorKind::Transport),
                        reissued,
                    }
                }
            };
            let result = match response.get("result") {
                Some(r) => r.clone(),
                None => {
                    return Outcome {
                        result: Err(ErrorKind::Rpc),
                        reissued,
                    }
                }
            };
            if result["resultType"] != "input_required" {
                return Outcome {
                    result: Ok(result),
                    reissued,
                };
            }
            rounds += 1;
            if rounds > MAX_ROUNDS {
                return Outcome {
                    result: Err(ErrorKind::Protocol),
                    reissued,
                };
            }
            // MRTR: answer every input request (this client accepts), send the request again
            // with the answers and the server's state, unchanged.
            let mut responses = Map::new();
            if let Some(requests) = result["inputRequests"].as_object() {
                for (key, _) in requests {
                    responses.insert(
                        key.clone(),
                        json!({"action": "accept", "content": {"confirmed": true}}),
                    );
                }
            }
            params["inputResponses"] = Value::Object(responses);
            match result.get("requestState") {
                Some(state) => params["requestState"] = state.clone(),
                None => {
                    if let Some(p) = params.as_object_mut() {
                        p.remove("requestState");
                    }
                }
            }
            issues = 0;
        }
    }

    async fn send(&mut self, method: &str, params: &Value) -> Answer {
        self.next_id += 1;
        let id = self.next_id;
        let mut params = params.clone();
        params["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!(MODERN);
        params["_meta"]["io.modelcontextprotocol/clientCapabilities"] = self.capabilities.clone();
        params["_meta"]["io.modelcontextprotocol/clientInfo"] =
            json!({"name": "reissue-client", "version": "1"});
        let mut req = self
            .http
            .post(&self.url)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .header("mcp-protocol-version", MODERN)
            .header("mcp-method", method);
        if let Some(name) = params.get("name").and_then(Value::as_str) {
            req = req.header("mcp-name", name);
        }
        if let Some(key) = params["_meta"]
            .get(mock_server::context::meta::IDEMPOTENCY_KEY)
            .and_then(Value::as_str)
        {
            req = req.header("idempotency-key", key);
        }
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let Ok(mut resp) = req.body(body.to_string()).send().await else {
            return Answer::Broken;
        };
        let sse = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if !sse {
            return match resp.bytes().await {
                Ok(b) => serde_json::from_slice(&b)
                    .map(Answer::Response)
                    .unwrap_or(Answer::Broken),
                Err(_) => Answer::Broken,
            };
        }
        // SSE: events until the one answering this id.
        let mut buf = String::new();
        loop {
            match resp.chunk().await {
                Ok(Some(chunk)) => buf.push_str(&String::from_utf8_lossy(&chunk)),
                Ok(None) | Err(_) => return Answer::Broken,
            }
            while let Some(end) = buf.find("\n\n") {
                let event: String = buf.drain(..end + 2).collect();
                let data: Vec<&str> = event
                    .lines()
                    .filter_map(|l| l.strip_prefix("data:"))
                    .map(|d| d.strip_prefix(' ').unwrap_or(d))
                    .collect();
                let Ok(message) = serde_json::from_str::<Value>(&data.join("\n")) else {
                    continue;
                };
                if message.get("id") == Some(&json!(id)) && message.get("method").is_none() {
                    return Answer::Response(message);
                }
            }
        }
    }
}
