//! A bare 2026-07-28 caller: every request carries its own `_meta` and mirrored headers.

use serde_json::{json, Value};

use super::{Mcp, Reply, STEP, TAG};

pub const MODERN: &str = "2026-07-28";
pub const META_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
pub const META_CAPS: &str = "io.modelcontextprotocol/clientCapabilities";
pub const META_INFO: &str = "io.modelcontextprotocol/clientInfo";

/// One request: method, params (its `_meta` completed with the request metadata), and the
/// headers to send (the mirrored ones are computed unless overridden).
pub struct Req {
    pub id: Value,
    pub method: String,
    pub params: Value,
    pub headers: Vec<(String, Option<String>)>,
}

impl Req {
    pub fn new(id: impl Into<Value>, method: &str, params: Value, caps: &Value) -> Self {
        let mut params = if params.is_object() {
            params
        } else {
            json!({})
        };
        let meta = params
            .as_object_mut()
            .unwrap()
            .entry("_meta")
            .or_insert_with(|| json!({}));
        meta[META_VERSION] = json!(MODERN);
        meta[META_CAPS] = caps.clone();
        meta[META_INFO] = json!({"name": "raw-modern-test", "version": "0"});
        Req {
            id: id.into(),
            method: method.to_owned(),
            params,
            headers: Vec::new(),
        }
    }

    /// Overrides a header (`None` leaves it out).
    pub fn header(mut self, name: &str, value: Option<&str>) -> Self {
        self.headers
            .push((name.to_ascii_lowercase(), value.map(str::to_owned)));
        self
    }

    pub fn meta(mut self, key: &str, value: Value) -> Self {
        self.params["_meta"][key] = value;
        self
    }
}

impl Mcp {
    /// Sends a 2026-07-28 request.
    pub async fn modern(&self, req: Req) -> Reply {
        let mut headers: Vec<(String, Option<String>)> = vec![
            ("mcp-protocol-version".into(), Some(MODERN.into())),
            ("mcp-method".into(), Some(req.method.clone())),
        ];
        let name = match req.method.as_str() {
            "tools/call" => req.params["name"].as_str(),
            "tasks/get" | "tasks/cancel" | "tasks/update" => req.params["taskId"].as_str(),
            _ => None,
        };
        if let Some(n) = name {
            headers.push(("mcp-name".into(), Some(n.to_owned())));
        }
        for (k, v) in req.headers {
            headers.retain(|(name, _)| *name != k);
            headers.push((k, v));
        }
        let body =
            json!({"jsonrpc": "2.0", "id": req.id, "method": req.method, "params": req.params});
        let mut r = self
            .http
            .post(&self.url)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .body(body.to_string());
        for (k, v) in headers {
            if let Some(v) = v {
                r = r.header(k, v);
            }
        }
        let resp = tokio::time::timeout(STEP, r.send())
            .await
            .expect("request hung")
            .expect("request failed");
        Self::read(resp).await
    }

    /// A tagged `tools/call` with these client capabilities.
    pub async fn modern_call(
        &self,
        id: u64,
        tool: &str,
        args: Value,
        tag: &str,
        caps: &Value,
    ) -> Reply {
        let req = Req::new(
            id,
            "tools/call",
            json!({"name": tool, "arguments": args, "_meta": {TAG: tag}}),
            caps,
        );
        self.modern(req).await
    }
}

/// `error.code` of a JSON-RPC error reply.
pub fn rpc_code(reply: &Reply) -> Option<i64> {
    reply.response()?.pointer("/error/code")?.as_i64()
}
