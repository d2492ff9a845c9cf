//! A scripted host: plain JSON-RPC messages through a `Bridge`, as a host SDK's client sends
//! and reads them.

use std::time::Duration;

use mcp_resume::bridge::Bridge;
use serde_json::{json, Value};

/// Hang guard: generous, never a stand-in for synchronisation.
pub(crate) const GUARD: Duration = Duration::from_secs(30);

pub(crate) async fn guarded<T>(fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(GUARD, fut)
        .await
        .expect("hang guard: the future did not complete")
}

pub(crate) struct Host {
    pub bridge: Bridge,
    next: i64,
    /// Every message received that was not the awaited answer, in order.
    pub seen: Vec<Value>,
}

impl Host {
    pub(crate) fn new(bridge: Bridge) -> Self {
        Host {
            bridge,
            next: 0,
            seen: Vec::new(),
        }
    }

    /// `initialize` with this version and capabilities, then `notifications/initialized`;
    /// returns the answer.
    pub(crate) async fn initialize(&mut self, version: &str, capabilities: Value) -> Value {
        let answer = self
            .request(
                "initialize",
                json!({"protocolVersion": version, "capabilities": capabilities,
                       "clientInfo": {"name": "scripted-host", "version": "0.0.1"}}),
            )
            .await;
        self.notify("notifications/initialized", None).await;
        answer
    }

    /// Sends a request with the next numeric id and returns the id.
    pub(crate) async fn send(&mut self, method: &str, params: Value) -> Value {
        self.next += 1;
        let id = json!(self.next);
        self.send_with_id(id.clone(), method, params).await;
        id
    }

    pub(crate) async fn send_with_id(&mut self, id: Value, method: &str, params: Value) {
        let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        guarded(self.bridge.send(message)).await.unwrap();
    }

    pub(crate) async fn notify(&mut self, method: &str, params: Option<Value>) {
        let mut message = json!({"jsonrpc": "2.0", "method": method});
        if let Some(params) = params {
            message["params"] = params;
        }
        guarded(self.bridge.send(message)).await.unwrap();
    }

    /// Sends a request and waits for its answer (the whole message).
    pub(crate) async fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.send(method, params).await;
        self.answer(&id).await
    }

    /// The answer to request `id`; anything received before it goes to `seen`.
    pub(crate) async fn answer(&mut self, id: &Value) -> Value {
        loop {
            let message = self.next_message().await;
            if message.get("method").is_none() && message.get("id") == Some(id) {
                return message;
            }
            self.seen.push(message);
        }
    }

    /// The next message from the bridge.
    pub(crate) async fn next_message(&mut self) -> Value {
        guarded(self.bridge.recv())
            .await
            .expect("the bridge closed")
    }

    /// The next server request forwarded to the host (other messages go to `seen`).
    pub(crate) async fn server_request(&mut self) -> Value {
        loop {
            let message = self.next_message().await;
            if message.get("method").is_some() && message.get("id").is_some() {
                return message;
            }
            self.seen.push(message);
        }
    }

    /// The methods of the notifications seen so far.
    pub(crate) fn notifications(&self) -> Vec<String> {
        self.seen
            .iter()
            .filter(|m| m.get("id").is_none())
            .filter_map(|m| m["method"].as_str().map(str::to_owned))
            .collect()
    }
}

/// The `data.kind` and code of an error answer, or a panic naming the message.
pub(crate) fn error_of(answer: &Value) -> (i64, String) {
    let error = answer
        .get("error")
        .unwrap_or_else(|| panic!("expected an error answer: {answer}"));
    (
        error["code"].as_i64().expect("error code"),
        error["data"]["kind"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
    )
}
