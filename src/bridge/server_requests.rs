//! Server requests forwarded to the host: the ids the bridge gives them, and the host's
//! answers routed back.

use std::future::Future;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

use rustc_hash::FxHashMap;
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};

use super::lock;
use super::message::request;
use crate::client::handlers::internal;
use crate::error::RpcError;
use crate::proto::ServerRequest;

type Answer = oneshot::Sender<Result<Value, RpcError>>;

/// The server requests waiting for the host's answer, by the bridge's id.
pub(crate) struct ServerRequests {
    out: mpsc::Sender<Value>,
    next: AtomicI64,
    pending: Mutex<FxHashMap<i64, Answer>>,
}

impl ServerRequests {
    pub(crate) fn new(out: mpsc::Sender<Value>) -> Self {
        ServerRequests {
            out,
            next: AtomicI64::new(1),
            pending: Mutex::new(FxHashMap::default()),
        }
    }

    /// The client's handler for every server request: forward, then wait for the host.
    pub(crate) fn handler(
        self: &Arc<Self>,
    ) -> impl Fn(
        ServerRequest,
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<Value, RpcError>> + Send>>
           + Send
           + Sync
           + 'static {
        let this = Arc::clone(self);
        move |req| {
            let this = Arc::clone(&this);
            Box::pin(async move { this.forward(req).await })
        }
    }

    async fn forward(self: Arc<Self>, req: ServerRequest) -> Result<Value, RpcError> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        lock(&self.pending).insert(id, tx);
        // A server's cancellation drops this future: the request is withdrawn, and once the
        // host has it, the host is told.
        let mut guard = Pending {
            id,
            requests: Some(Arc::clone(&self)),
            delivered: false,
        };
        self.out
            .send(request(Some(json!(id)), &req.method, req.params))
            .await
            .map_err(|_| internal("the bridge is closed"))?;
        guard.delivered = true;
        let answer = rx
            .await
            .map_err(|_| internal("the bridge closed before the host answered"));
        guard.disarm();
        answer?
    }

    /// The host's answer to the request the bridge forwarded as `id`; an answer to nothing
    /// pending (late, or an id the bridge never sent) is dropped.
    pub(crate) fn answer(&self, id: &Value, result: Result<Value, RpcError>) {
        // A host that turned the id into a string still means it.
        let number = id
            .as_i64()
            .or_else(|| id.as_str().and_then(|s| s.parse().ok()));
        let Some(id) = number else {
            tracing::debug!(%id, "host answered an id the bridge never sent");
            return;
        };
        match lock(&self.pending).remove(&id) {
            Some(tx) => {
                let _ = tx.send(result);
            }
            None => tracing::debug!(id, "host answered a server request that is not pending"),
        }
    }

    /// Fails every pending request (the bridge closes).
    pub(crate) fn close(&self) {
        lock(&self.pending).clear();
    }
}

/// A forwarded request still waiting: dropped before the host answered (the server
/// cancelled it, or the client closed), it is withdrawn, and the host told if it had it.
struct Pending {
    id: i64,
    requests: Option<Arc<ServerRequests>>,
    /// In the host's queue. A request still waiting for room there is withdrawn without a
    /// word: a cancellation for it would be news of nothing, and would wait for room itself
    /// (one task per request a server asks and cancels while the host stalls).
    delivered: bool,
}

impl Pending {
    fn disarm(mut self) {
        self.requests = None;
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        let Some(requests) = self.requests.take() else {
            return;
        };
        lock(&requests.pending).remove(&self.id);
        if !self.delivered {
            return;
        }
        let cancelled = request(
            None,
            "notifications/cancelled",
            Some(json!({ "requestId": self.id, "reason": "cancelled by the server" })),
        );
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = requests.out.send(cancelled).await;
            });
        }
    }
}
