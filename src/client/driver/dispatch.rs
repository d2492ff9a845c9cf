//! Server requests handed to the application's handlers.
//!
//! Each runs in a task of its own on the driver's runtime: not on the runtime of whichever
//! task happened to read the request (a caller's, which may shut down under it), and never
//! under the session's lock or in a driver task. A handler's setup and its future run inside
//! that task, under `catch_unwind`; whatever ends it without an answer (a panic, its task
//! dropped with its runtime) still answers the server with an internal error, so the server
//! is never left waiting and the request's slot (one of a bounded number) is freed.

use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Weak};

use futures::FutureExt;
use serde_json::Value;
use tokio::sync::watch;
use tracing::Instrument;

use super::core::Core;
use crate::client::handlers::{internal, Handlers, RequestContext};
use crate::error::RpcError;
use crate::ids::RequestId;
use crate::proto::ServerRequest;

/// A server request on its way to its handler.
pub(crate) struct Dispatch {
    pub(super) request: ServerRequest,
    /// Which delivery of the request's id this is (its answer names it).
    pub(super) delivery: u64,
    pub(super) cancel: watch::Receiver<Option<String>>,
    pub(super) handlers: Arc<Handlers>,
    pub(super) core: Weak<Core>,
}

/// The answer a server request owes: given once, or, if never given, an internal error when
/// it is dropped.
struct Owed {
    id: Option<RequestId>,
    delivery: u64,
    core: Weak<Core>,
}

impl Owed {
    /// Gives the answer (`None`: the server cancelled the request, nothing is sent).
    fn give(mut self, answer: Option<Result<Value, RpcError>>) {
        if let (Some(id), Some(core)) = (self.id.take(), self.core.upgrade()) {
            core.answer(id, self.delivery, answer);
        }
    }
}

impl Drop for Owed {
    fn drop(&mut self) {
        if let (Some(id), Some(core)) = (self.id.take(), self.core.upgrade()) {
            tracing::warn!(%id, "a server request's handler ended without answering");
            core.answer(id, self.delivery, Some(Err(internal("internal error"))));
        }
    }
}

impl Dispatch {
    /// Starts the handler on `runtime` (the driver's); its answer (or nothing, if the server
    /// cancelled) goes back to the session.
    pub(super) fn spawn(self, runtime: Option<&tokio::runtime::Handle>) {
        let Dispatch {
            request,
            delivery,
            cancel,
            handlers,
            core,
        } = self;
        let owed = Owed {
            id: Some(request.id.clone()),
            delivery,
            core,
        };
        let Some(runtime) = runtime else {
            // No runtime to run it on: `owed` answers as it is dropped.
            return;
        };
        let handling = async move {
            // Called here, so a handler sees its request even if the server cancels it at
            // once; a handler that panics before its future exists is answered like one that
            // panics later.
            let ctx = RequestContext::new(&request, cancel.clone());
            let dispatched =
                std::panic::catch_unwind(AssertUnwindSafe(|| handlers.dispatch(request, ctx)));
            let Ok(handling) = dispatched else {
                tracing::error!("server request handler panicked");
                return owed.give(Some(Err(internal("internal error"))));
            };
            let handling = AssertUnwindSafe(handling).catch_unwind();
            let mut cancelled = cancel;
            let answer = tokio::select! {
                result = handling => Some(result.unwrap_or_else(|_| {
                    tracing::error!("server request handler panicked");
                    Err(internal("internal error"))
                })),
                // The server no longer wants the answer: stop the handler, send nothing.
                _ = cancelled.wait_for(Option::is_some) => None,
            };
            owed.give(answer);
        };
        runtime.spawn(handling.in_current_span());
    }
}
