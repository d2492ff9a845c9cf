//! Server requests answered by JavaScript callbacks.
//!
//! The JavaScript side (`lib/handlers.js`) gives one `dispatch` function for all of a
//! client's handlers, and says which ones exist. Each typed handler present is registered on
//! the SDK's builder (`on_sampling`, `on_elicitation`, `on_roots`), which declares its
//! capability at `initialize`; the generic one (`on_server_request`) takes any other method.
//! A request goes to `dispatch` as `{type: "call", id, kind, method, params}` and is answered
//! by the promise it returns: `{result}` or `{error: {code, message, data}}`, both ways as
//! JSON text (as all JSON crossing the boundary, see `convert`). When the server
//! cancels the request (or the client is closed) the SDK drops the handler's future, and
//! `dispatch` gets `{type: "abort", id}`: the handler's `AbortSignal` fires. An answer the
//! SDK's types refuse is answered to the server as a bare internal error, and what is wrong
//! with it goes to `dispatch` as `{type: "warning", kind, method, message}`, for the process
//! to tell: it quotes the answer, which the server should not see.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use mcp_resume::client::models::{CreateMessageResult, ElicitResult, Root};
use mcp_resume::{ClientBuilder, RequestContext, RpcError, ServerRequest};
use napi::bindgen_prelude::Promise;
use napi::threadsafe_function::{ThreadsafeFunction, ThreadsafeFunctionCallMode};
use napi::Status;
use napi_derive::napi;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

use crate::convert::wire;

/// `dispatch`: called from the runtime's threads, it does not keep Node's event loop alive
/// (weak), and what it throws is caught (the promise it returns is awaited).
type Dispatch = ThreadsafeFunction<String, Promise<String>, String, Status, false, true>;

/// Which handlers the client has, and the function that runs them.
#[napi(object, object_to_js = false)]
pub struct HandlerOptions {
    /// `(message) => Promise<answer>`, see the module docs.
    pub dispatch: Dispatch,
    /// A sampling handler exists (declares `sampling`).
    pub sampling: Option<bool>,
    /// An elicitation handler exists (declares `elicitation`).
    pub elicitation: Option<bool>,
    /// A roots handler exists (declares `roots`).
    pub roots: Option<bool>,
    /// A generic server-request handler exists.
    pub server_request: Option<bool>,
}

impl HandlerOptions {
    /// Registers the handlers present on `b`.
    pub(crate) fn register(self, mut b: ClientBuilder) -> ClientBuilder {
        let js = Dispatcher(Arc::new(Shared {
            dispatch: self.dispatch,
            next_id: AtomicU64::new(1),
        }));
        if self.sampling == Some(true) {
            let js = js.clone();
            b = b.on_sampling(move |request, ctx| {
                let js = js.clone();
                async move {
                    let answer = js.ask("sampling", &ctx, wire(&request)).await?;
                    js.typed::<CreateMessageResult>(answer, "sampling", &ctx)
                }
            });
        }
        if self.elicitation == Some(true) {
            let js = js.clone();
            b = b.on_elicitation(move |request, ctx| {
                let js = js.clone();
                async move {
                    let answer = js.ask("elicitation", &ctx, wire(&request)).await?;
                    js.typed::<ElicitResult>(answer, "elicitation", &ctx)
                }
            });
        }
        if self.roots == Some(true) {
            let js = js.clone();
            b = b.on_roots(move |ctx| {
                let js = js.clone();
                async move {
                    let answer = js.ask("roots", &ctx, Value::Null).await?;
                    js.typed::<Vec<Root>>(answer, "roots", &ctx)
                }
            });
        }
        if self.server_request == Some(true) {
            b = b.on_server_request(move |request: ServerRequest| {
                let js = js.clone();
                async move {
                    let call = Call {
                        kind: "request",
                        method: request.method,
                        request_id: request.id.to_json(),
                        params: request.params.unwrap_or(Value::Null),
                    };
                    js.run(call).await
                }
            });
        }
        b
    }
}

/// The handlers' `dispatch`, shared by every registration of one client.
#[derive(Clone)]
struct Dispatcher(Arc<Shared>);

struct Shared {
    dispatch: Dispatch,
    next_id: AtomicU64,
}

/// One request for a handler.
struct Call {
    kind: &'static str,
    method: String,
    request_id: Value,
    params: Value,
}

impl Dispatcher {
    /// Asks the handler of `kind` about the request `ctx` describes.
    async fn ask(
        &self,
        kind: &'static str,
        ctx: &RequestContext,
        params: Value,
    ) -> Result<Value, RpcError> {
        let call = Call {
            kind,
            method: ctx.method().to_owned(),
            request_id: ctx.request_id().to_json(),
            params,
        };
        self.run(call).await
    }

    /// The answer of the handler of `kind` as the SDK's typed result. One of the wrong shape
    /// is the server's bare internal error: what serde says is wrong quotes the answer (model
    /// output, what a user typed, local paths), so it is told here, as a process warning.
    fn typed<T: DeserializeOwned>(
        &self,
        answer: Value,
        kind: &'static str,
        ctx: &RequestContext,
    ) -> Result<T, RpcError> {
        serde_json::from_value(answer).map_err(|e| {
            let warning = json!({
                "type": "warning",
                "kind": kind,
                "method": ctx.method(),
                "message": format!("answered wrongly: {e}"),
            });
            // Best effort, as an abort: once the client's JavaScript side is gone no one reads it.
            let _ = self
                .0
                .dispatch
                .call(warning.to_string(), ThreadsafeFunctionCallMode::NonBlocking);
            RpcError::internal_error("internal error")
        })
    }

    async fn run(&self, call: Call) -> Result<Value, RpcError> {
        let id = self.0.next_id.fetch_add(1, Ordering::Relaxed);
        let mut running = Running {
            dispatcher: self.clone(),
            id,
            settled: false,
        };
        let message = json!({
            "type": "call",
            "id": id,
            "kind": call.kind,
            "method": call.method,
            "requestId": call.request_id,
            "params": call.params,
        });
        let answer = match self.0.dispatch.call_async_catch(message.to_string()).await {
            Ok(promise) => promise.await,
            Err(e) => Err(e),
        };
        running.settled = true;
        answer
            .ok()
            .and_then(|text| serde_json::from_str(&text).ok())
            .ok_or_else(|| RpcError::internal_error("internal error"))
            .and_then(read_answer)
    }
}

/// A handler still running: dropped before it settled (the server cancelled the request),
/// it aborts the handler's signal.
struct Running {
    dispatcher: Dispatcher,
    id: u64,
    settled: bool,
}

impl Drop for Running {
    fn drop(&mut self) {
        if !self.settled {
            let abort = json!({ "type": "abort", "id": self.id });
            // Best effort: once the client's JavaScript side is gone there is nothing to abort.
            let _ = self
                .dispatcher
                .0
                .dispatch
                .call(abort.to_string(), ThreadsafeFunctionCallMode::NonBlocking);
        }
    }
}

/// `{result}` or `{error: {code, message, data}}`, as `lib/handlers.js` answers.
fn read_answer(answer: Value) -> Result<Value, RpcError> {
    let Value::Object(mut answer) = answer else {
        return Err(RpcError::internal_error("internal error"));
    };
    if let Some(result) = answer.remove("result") {
        return Ok(result);
    }
    let error = answer.remove("error").unwrap_or_default();
    let code = error
        .get("code")
        .and_then(Value::as_i64)
        .unwrap_or(RpcError::INTERNAL_ERROR);
    let message = error
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or("internal error");
    let rpc = RpcError::new(code, message);
    Err(match error.get("data") {
        Some(data) if !data.is_null() => rpc.with_data(data.clone()),
        _ => rpc,
    })
}
