//! The hostile server speaking the modern era (2026-07-28): the same raw HTTP/1.1 server
//! ([`crate::server`]), with a well-behaved modern answer in place of its legacy one. A case's
//! script answers what it wants to misbehave on and returns `None` for the modern default.
//!
//! The default: `server/discover` lists 2026-07-28 and offers tool list changes and the tasks
//! extension; `tools/list` has `echo` and `regional` (whose `region` is mirrored as
//! `Mcp-Param-Region`); `echo` echoes; `ping` is answered; `subscriptions/listen` is
//! acknowledged and held open; notifications get 202; anything else is 404 with -32601.

#![allow(dead_code)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use mcp_resume::{Client, ClientBuilder, Era};
use serde_json::{json, Value};

use crate::harness::{self, within};
use crate::server::{echo_result, result_msg, sse_event, Reply, Request, Server};

/// The revision the server speaks.
pub(crate) const MODERN: &str = "2026-07-28";

/// A modern hostile server: dereferences to the raw server for its log and counts.
pub(crate) struct ModernServer {
    server: Server,
    good: Arc<AtomicBool>,
}

impl std::ops::Deref for ModernServer {
    type Target = Server;

    fn deref(&self) -> &Server {
        &self.server
    }
}

impl ModernServer {
    /// Starts a server answering through `script`; `None` is the modern default.
    pub(crate) async fn start(
        script: impl Fn(&Request) -> Option<Reply> + Send + Sync + 'static,
    ) -> Self {
        let good = Arc::new(AtomicBool::new(false));
        let behaving = good.clone();
        let server = Server::start(move |req| {
            let scripted = if behaving.load(Ordering::SeqCst) {
                None
            } else {
                script(req)
            };
            scripted.unwrap_or_else(|| good_modern(req))
        })
        .await;
        ModernServer { server, good }
    }

    /// From now on every request gets the well-behaved modern answer.
    pub(crate) fn behave(&self) {
        self.good.store(true, Ordering::SeqCst);
    }
}

/// A client for the modern server: the hostile harness's limits and deadlines, the modern era
/// forced (so no case depends on an era cache), and the tasks extension declared.
pub(crate) fn builder(server: &ModernServer) -> ClientBuilder {
    harness::builder(server).era(Era::Modern)
}

/// A modern JSON-RPC result: `resultType: "complete"` unless it names its own.
pub(crate) fn complete(req: &Request, mut result: Value) -> Reply {
    if result.get("resultType").is_none() {
        result["resultType"] = json!("complete");
    }
    Reply::result(req, result)
}

/// A JSON-RPC error in a body with `status`.
pub(crate) fn rpc_error(req: &Request, status: u16, code: i64, data: Value) -> Reply {
    Reply::json(
        status,
        &json!({"jsonrpc": "2.0", "id": req.rpc_id(),
            "error": {"code": code, "message": "hostile", "data": data}}),
    )
}

/// The result of `tasks/get` for task `id` in `status`.
pub(crate) fn task_status(id: &str, status: &str) -> Value {
    json!({"resultType": "complete", "taskId": id, "status": status, "pollIntervalMs": 10})
}

/// The acknowledgement opening a `subscriptions/listen` stream, as an SSE event.
pub(crate) fn acknowledgement(req: &Request) -> String {
    sse_event(
        None,
        &json!({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
            "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": req.rpc_id()},
                "notifications": req.params()["notifications"]}}),
    )
}

/// A tool list change on the `subscriptions/listen` stream `req` opened, as an SSE event.
pub(crate) fn list_changed(req: &Request) -> String {
    sse_event(
        None,
        &json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed",
            "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": req.rpc_id()}}}),
    )
}

pub(crate) fn tools() -> Value {
    json!({"tools": [
        {"name": "echo", "inputSchema": {"type": "object"}},
        {"name": "regional", "inputSchema": {"type": "object", "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"}}}},
    ]})
}

fn good_modern(req: &Request) -> Reply {
    if !req.is_post() {
        return Reply::status(405);
    }
    let Some(method) = req.rpc_method() else {
        return Reply::status(202);
    };
    if req.rpc_id().is_null() {
        return Reply::status(202);
    }
    match method {
        "server/discover" => complete(
            req,
            json!({
                "supportedVersions": [MODERN],
                "capabilities": {"tools": {"listChanged": true},
                    "extensions": {"io.modelcontextprotocol/tasks": {}}},
                "_meta": {"io.modelcontextprotocol/serverInfo":
                    {"name": "hostile-modern", "version": "6.6.6"}},
            }),
        ),
        "ping" => complete(req, json!({})),
        "tools/list" => complete(req, tools()),
        "tools/call" => {
            let text = req.params()["arguments"]["text"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            complete(req, echo_result(&text))
        }
        "subscriptions/listen" => Reply::sse_open(acknowledgement(req)),
        _ => rpc_error(req, 404, -32601, Value::Null),
    }
}

/// The server turns good; the same client must then ping and call a tool.
pub(crate) async fn assert_usable(what: &str, server: &ModernServer, client: &Client) {
    server.behave();
    let limit = Duration::from_secs(5);
    match within(what, limit, client.ping()).await {
        Ok(Ok(())) => {}
        Ok(Err(err)) => panic!("{what}: client unusable afterwards, ping failed: {err}"),
        Err(message) => panic!("{message} (ping afterwards)"),
    }
    match within(what, limit, client.call_tool(harness::echo("again"))).await {
        Ok(Ok(result)) => assert_eq!(result.text(), "again", "{what}"),
        Ok(Err(err)) => panic!("{what}: client unusable afterwards, call failed: {err}"),
        Err(message) => panic!("{message} (call afterwards)"),
    }
}

/// The JSON-RPC result for `req` as a value (for scripts building SSE events).
pub(crate) fn result_event(req: &Request, result: Value) -> String {
    sse_event(None, &result_msg(req, result))
}
