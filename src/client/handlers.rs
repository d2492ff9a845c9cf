//! Server-to-client requests: the typed handlers registered on the builder, the capabilities
//! they declare, and the one dispatch function the driver calls.
//!
//! Dispatch is a plain function of the request and its context returning a future of the
//! JSON answer, independent of how the request arrived: the same handlers can answer a
//! request delivered on an SSE stream today or a round of a multi-round-trip exchange later.

use std::future::Future;
use std::sync::Arc;

use futures::future::BoxFuture;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{Map, Value};
use tokio::sync::watch;

use super::models::{
    CreateMessageRequest, CreateMessageResult, ElicitRequest, ElicitResult, ListRootsResult, Root,
};
use crate::error::RpcError;
use crate::ids::RequestId;
use crate::proto::ServerRequest;

/// JSON-RPC error codes the client answers with.
const METHOD_NOT_FOUND: i64 = -32601;
const INVALID_PARAMS: i64 = -32602;
const INTERNAL_ERROR: i64 = -32603;

/// The generic handler of [`ClientBuilder::on_server_request`](super::ClientBuilder::on_server_request).
pub(crate) type ServerRequestHandler =
    Arc<dyn Fn(ServerRequest) -> BoxFuture<'static, Result<Value, RpcError>> + Send + Sync>;

type Typed<Req, Res> =
    Arc<dyn Fn(Req, RequestContext) -> BoxFuture<'static, Result<Res, RpcError>> + Send + Sync>;
type RootsHandler =
    Arc<dyn Fn(RequestContext) -> BoxFuture<'static, Result<Vec<Root>, RpcError>> + Send + Sync>;

/// What a server-request handler knows besides the request's params: which request it is,
/// and whether the server has cancelled it.
///
/// When the server cancels the request (`notifications/cancelled` naming it), the client
/// stops waiting for the handler: its future is dropped and no answer is sent, as the
/// specification asks. Work the handler handed elsewhere (a dialog, a model call in another
/// task) learns of it through [`RequestContext::cancelled`]. The same happens to every request
/// still being handled when the client closes, with the reason `"client closed"`, and when
/// the session that delivered it is replaced or lost, with `"session replaced"`: its server is
/// gone, and an answer would reach the next session's. An input a 2026-07-28 call's MRTR round
/// or task asked for is stopped the same way when that call ends (reason `"session replaced"`
/// too, or `"client closed"` when the close ended it): nobody would read the answer.
#[derive(Debug, Clone)]
pub struct RequestContext {
    request_id: RequestId,
    method: String,
    meta: Option<Value>,
    cancel: watch::Receiver<Option<String>>,
}

impl RequestContext {
    pub(crate) fn new(request: &ServerRequest, cancel: watch::Receiver<Option<String>>) -> Self {
        RequestContext {
            request_id: request.id.clone(),
            method: request.method.clone(),
            meta: request
                .params
                .as_ref()
                .and_then(|p| p.get("_meta"))
                .cloned(),
            cancel,
        }
    }

    /// The request's id: the server's, or, for an input of one of the app's 2026-07-28
    /// calls, one the client made (its call, round and number).
    pub fn request_id(&self) -> &RequestId {
        &self.request_id
    }

    /// The request's method, e.g. `sampling/createMessage`.
    pub fn method(&self) -> &str {
        &self.method
    }

    /// The request's `params._meta`, if any.
    pub fn meta(&self) -> Option<&Value> {
        self.meta.as_ref()
    }

    /// Whether the server has cancelled the request.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.borrow().is_some()
    }

    /// Resolves with the reason (the server's, possibly empty; or `"client closed"`, or
    /// `"session replaced"`, see [`RequestContext`]) once the request is cancelled; never
    /// resolves for a request that is not.
    pub async fn cancelled(&self) -> String {
        let mut rx = self.cancel.clone();
        let reason = match rx.wait_for(Option::is_some).await {
            Ok(reason) => reason.clone(),
            // The request was answered and nobody will cancel it any more.
            Err(_) => None,
        };
        match reason {
            Some(reason) => reason,
            None => std::future::pending().await,
        }
    }
}

/// The handlers registered on the builder.
#[derive(Clone, Default)]
pub(crate) struct Handlers {
    sampling: Option<Typed<CreateMessageRequest, CreateMessageResult>>,
    elicitation: Option<Typed<ElicitRequest, ElicitResult>>,
    roots: Option<RootsHandler>,
    fallback: Option<ServerRequestHandler>,
}

impl Handlers {
    pub(crate) fn set_sampling<F, Fut>(&mut self, handler: F)
    where
        F: Fn(CreateMessageRequest, RequestContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<CreateMessageResult, RpcError>> + Send + 'static,
    {
        self.sampling = Some(Arc::new(move |req, ctx| Box::pin(handler(req, ctx))));
    }

    pub(crate) fn set_elicitation<F, Fut>(&mut self, handler: F)
    where
        F: Fn(ElicitRequest, RequestContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<ElicitResult, RpcError>> + Send + 'static,
    {
        self.elicitation = Some(Arc::new(move |req, ctx| Box::pin(handler(req, ctx))));
    }

    pub(crate) fn set_roots<F, Fut>(&mut self, handler: F)
    where
        F: Fn(RequestContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Vec<Root>, RpcError>> + Send + 'static,
    {
        self.roots = Some(Arc::new(move |ctx| Box::pin(handler(ctx))));
    }

    pub(crate) fn set_fallback(&mut self, handler: ServerRequestHandler) {
        self.fallback = Some(handler);
    }

    /// Whether no handler at all is registered (every request gets "method not found").
    pub(crate) fn is_empty(&self) -> bool {
        self.sampling.is_none()
            && self.elicitation.is_none()
            && self.roots.is_none()
            && self.fallback.is_none()
    }

    /// The client capabilities the typed handlers imply: a server only sends a request the
    /// client declared it can answer, so registering a handler declares it.
    pub(crate) fn capabilities(&self) -> Map<String, Value> {
        let mut caps = Map::new();
        if self.sampling.is_some() {
            caps.insert("sampling".to_owned(), Value::Object(Map::new()));
        }
        if self.elicitation.is_some() {
            // An empty object means "form only" to 2025-11-25 servers; naming `form` says the
            // same to servers that look for the member.
            caps.insert("elicitation".to_owned(), serde_json::json!({"form": {}}));
        }
        if self.roots.is_some() {
            caps.insert("roots".to_owned(), serde_json::json!({"listChanged": true}));
        }
        caps
    }

    /// Answers one server request with the handler registered for its method: a typed one,
    /// else the generic one, else JSON-RPC "method not found". Params that do not fit the
    /// typed request are answered "invalid params" without calling the handler.
    pub(crate) fn dispatch(
        &self,
        request: ServerRequest,
        ctx: RequestContext,
    ) -> BoxFuture<'static, Result<Value, RpcError>> {
        match request.method.as_str() {
            "sampling/createMessage" if self.sampling.is_some() => {
                typed(self.sampling.clone(), request, ctx)
            }
            "elicitation/create" if self.elicitation.is_some() => {
                typed(self.elicitation.clone(), request, ctx)
            }
            "roots/list" if self.roots.is_some() => {
                let handler = self.roots.clone();
                Box::pin(async move {
                    let handler = handler.ok_or_else(|| not_found(&request.method))?;
                    let roots = handler(ctx).await?;
                    to_value(ListRootsResult::from(roots))
                })
            }
            _ => match &self.fallback {
                Some(fallback) => fallback(request),
                None => {
                    let error = not_found(&request.method);
                    Box::pin(async move { Err(error) })
                }
            },
        }
    }
}

fn typed<Req, Res>(
    handler: Option<Typed<Req, Res>>,
    request: ServerRequest,
    ctx: RequestContext,
) -> BoxFuture<'static, Result<Value, RpcError>>
where
    Req: DeserializeOwned + Send + 'static,
    Res: Serialize + Send + 'static,
{
    Box::pin(async move {
        let handler = handler.ok_or_else(|| not_found(&request.method))?;
        let params = request.params.unwrap_or(Value::Null);
        let typed: Req = serde_json::from_value(params).map_err(|e| RpcError {
            code: INVALID_PARAMS,
            message: format!("invalid params for {}: {e}", request.method),
            data: None,
        })?;
        to_value(handler(typed, ctx).await?)
    })
}

fn to_value(result: impl Serialize) -> Result<Value, RpcError> {
    serde_json::to_value(result).map_err(|e| internal(format!("cannot encode the answer: {e}")))
}

pub(crate) fn not_found(method: &str) -> RpcError {
    RpcError {
        code: METHOD_NOT_FOUND,
        message: format!("method not found: {method}"),
        data: None,
    }
}

pub(crate) fn internal(message: impl Into<String>) -> RpcError {
    RpcError {
        code: INTERNAL_ERROR,
        message: message.into(),
        data: None,
    }
}

/// Merges `implied` (from the handlers) under `declared` (the application's): what the
/// application wrote wins, members it did not write are added, objects merge recursively.
pub(crate) fn merge_capabilities(declared: &mut Value, implied: Map<String, Value>) {
    let Value::Object(declared) = declared else {
        return;
    };
    for (key, value) in implied {
        match declared.get_mut(&key) {
            None => {
                declared.insert(key, value);
            }
            Some(existing @ Value::Object(_)) => {
                if let Value::Object(inner) = value {
                    merge_capabilities(existing, inner);
                }
            }
            // The application chose something else for this member: keep it.
            Some(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ctx(request: &ServerRequest) -> RequestContext {
        let (_tx, rx) = watch::channel(None);
        RequestContext::new(request, rx)
    }

    fn request(method: &str, params: Value) -> ServerRequest {
        ServerRequest {
            id: RequestId::Number(1),
            method: method.to_owned(),
            params: Some(params),
        }
    }

    #[test]
    fn handlers_declare_their_capabilities_and_the_application_wins() {
        let mut h = Handlers::default();
        h.set_sampling(|_, _| async { Ok(CreateMessageResult::new("m", "x")) });
        h.set_elicitation(|_, _| async { Ok(ElicitResult::decline()) });
        h.set_roots(|_| async { Ok(vec![]) });
        let mut declared = json!({"roots": {"listChanged": false}, "elicitation": {"url": {}},
                                  "experimental": {"x": 1}});
        merge_capabilities(&mut declared, h.capabilities());
        assert_eq!(
            declared,
            json!({"roots": {"listChanged": false}, "elicitation": {"url": {}, "form": {}},
                   "sampling": {}, "experimental": {"x": 1}})
        );
    }

    #[tokio::test]
    async fn dispatch_types_params_and_answers() {
        let mut h = Handlers::default();
        h.set_sampling(|req, ctx| async move {
            assert_eq!(ctx.method(), "sampling/createMessage");
            assert_eq!(ctx.meta(), Some(&json!({"progressToken": 3})));
            Ok(CreateMessageResult::new("m", req.messages[0].text()))
        });
        let req = request(
            "sampling/createMessage",
            json!({"messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}],
                   "maxTokens": 10, "_meta": {"progressToken": 3}}),
        );
        let c = ctx(&req);
        let answer = h.dispatch(req, c).await.unwrap();
        assert_eq!(
            answer,
            json!({"role": "assistant", "model": "m", "content": {"type": "text", "text": "hi"}})
        );

        let bad = request("sampling/createMessage", json!({"messages": 3}));
        let c = ctx(&bad);
        assert_eq!(h.dispatch(bad, c).await.unwrap_err().code, INVALID_PARAMS);

        let other = request("elicitation/create", json!({"message": "m"}));
        let c = ctx(&other);
        assert_eq!(
            h.dispatch(other, c).await.unwrap_err().code,
            METHOD_NOT_FOUND
        );

        h.set_fallback(Arc::new(|req| {
            Box::pin(async move { Ok(json!({"m": req.method})) })
        }));
        let other = request("elicitation/create", json!({"message": "m"}));
        let c = ctx(&other);
        assert_eq!(
            h.dispatch(other, c).await.unwrap(),
            json!({"m": "elicitation/create"})
        );
    }

    #[tokio::test]
    async fn the_context_reports_cancellation() {
        let req = request("roots/list", json!({}));
        let (tx, rx) = watch::channel(None);
        let ctx = RequestContext::new(&req, rx);
        assert!(!ctx.is_cancelled());
        tx.send_replace(Some("user gave up".to_owned()));
        assert!(ctx.is_cancelled());
        assert_eq!(ctx.cancelled().await, "user gave up");
    }
}
