//! The SDK's message bridge (`mcp_resume::bridge::Bridge`) for JavaScript: JSON-RPC messages
//! in and out as JSON text (`JSON.stringify` in, `JSON.parse` out, see `convert`), in between
//! an mcp-resume session with every recovery rule. `lib/transport.js` makes the TypeScript
//! SDK's `Transport` of it (`ResumeTransport`).

use std::sync::Arc;

use mcp_resume::bridge::{codes, Bridge, IDEMPOTENCY_META_KEY};
use mcp_resume::client::telemetry::Otlp;
use mcp_resume::Client;
use napi::bindgen_prelude::PromiseRaw;
use napi::Env;
use napi_derive::napi;
use serde_json::{json, Value};
use tokio::sync::watch;

use crate::convert::{fits, parse, too_long};
use crate::errors::{promise, to_js, Failure};
use crate::options::{configure, count, BridgeOptions, ClientOptions};
use crate::streams::{NativeStream, Source};
use crate::telemetry::flush;

/// The low-level bridge; use `ResumeTransport` from the package.
#[napi]
pub struct NativeBridge {
    bridge: Bridge,
    /// Turned true by `close()`: the bridge's event streams end.
    closed: Arc<watch::Sender<bool>>,
    /// The OTLP exporters, when `otlpEndpoint` was given (flushed by `close()`). Held for the
    /// bridge's life: dropping them shuts their providers down, and the session's spans would
    /// then be invalid (not exported, no `traceparent` sent).
    otlp: Option<Arc<Otlp>>,
}

#[napi]
impl NativeBridge {
    /// A bridge whose session is configured by `options` (the host's `initialize` then sets
    /// the protocol version, capabilities and client info); touches no network.
    #[napi(constructor, catch_unwind)]
    pub fn new(
        env: Env,
        url: String,
        options: Option<ClientOptions>,
        bridge_options: Option<BridgeOptions>,
    ) -> napi::Result<Self> {
        let built =
            configure(Client::builder(url.clone()), options).and_then(|(template, otlp)| {
                let mut builder = Bridge::builder(url).configure(|_| template);
                if let Some(o) = bridge_options {
                    if let Some(trust) = o.trust_tool_annotations {
                        builder = builder.trust_tool_annotations(trust);
                    }
                    if let Some(capacity) = o.capacity {
                        builder = builder.capacity(count(capacity, "capacity")? as usize);
                    }
                }
                Ok((builder.build()?, otlp))
            });
        match built {
            Ok((bridge, otlp)) => Ok(NativeBridge {
                bridge,
                closed: Arc::new(watch::channel(false).0),
                otlp,
            }),
            Err(failure) => Err(to_js(&env, &failure)),
        }
    }

    /// Host → server: one JSON-RPC message (JSON text); resolves once the bridge took it (it
    /// waits while the bridge holds `capacity` requests in flight).
    #[napi(catch_unwind)]
    pub fn send<'env>(
        &self,
        env: &'env Env,
        message: String,
    ) -> napi::Result<PromiseRaw<'env, ()>> {
        // Handed to the bridge now, in the order of the calls: a request's cancel sent right
        // after it reaches it, whichever of their promises' tasks runs first.
        let sending = parse(&message, "the message").map(|message| self.bridge.send(message));
        promise(env, async move { Ok(sending?.await?) })
    }

    /// Server → host: the next JSON-RPC message (JSON text), or `null` once the bridge is
    /// closed.
    ///
    /// A message longer than a JavaScript string can be is not delivered, and ends nothing
    /// else: an answer is replaced by a `too_large` error answer to its request, a server's
    /// request is answered with that error, a notification is left out.
    #[napi(catch_unwind)]
    pub fn recv<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, Option<String>>> {
        let bridge = self.bridge.clone();
        promise(env, async move {
            while let Some(message) = bridge.recv().await {
                let text = message.to_string();
                if fits(&text) {
                    return Ok(Some(text));
                }
                let reason = too_long(&text);
                drop(text);
                match (message.get("id"), message.get("method")) {
                    (Some(id), None) => {
                        // The answer exists: its request ran.
                        let error = json!({
                            "code": codes::TOO_LARGE,
                            "message": reason,
                            "data": { "kind": "too_large", "mayHaveRun": true },
                        });
                        let answer = json!({ "jsonrpc": "2.0", "id": id, "error": error });
                        return Ok(Some(answer.to_string()));
                    }
                    (Some(id), Some(_)) => {
                        let error = json!({ "code": -32603, "message": reason });
                        let answer = json!({ "jsonrpc": "2.0", "id": id, "error": error });
                        // Best effort, as any answer: a bridge closing meanwhile ends the loop.
                        let _ = bridge.send(answer).await;
                    }
                    _ => {}
                }
            }
            Ok::<_, Failure>(None)
        })
    }

    /// Closes the session (DELETE, best effort): later sends fail, `recv` gives `null`.
    #[napi(catch_unwind)]
    pub fn close<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        let bridge = self.bridge.clone();
        let closed = self.closed.clone();
        let otlp = self.otlp.clone();
        promise(env, async move {
            let outcome = bridge.close().await;
            closed.send_replace(true);
            // What the exporters hold goes out before the promise resolves.
            if let Some(otlp) = otlp {
                flush(otlp).await;
            }
            Ok(outcome?)
        })
    }

    /// The real session's `Mcp-Session-Id` (legacy era): `null` before `initialize` and in
    /// the 2026-07-28 era.
    #[napi(getter, catch_unwind)]
    pub fn session_id(&self) -> Option<String> {
        self.bridge.session_id().map(|id| id.expose().to_owned())
    }

    /// The real session's events (resumes, re-initializations, re-sends) from now on.
    #[napi(catch_unwind)]
    pub fn events(&self) -> NativeStream {
        NativeStream::new(
            Source::Events(self.bridge.events()),
            self.closed.subscribe(),
        )
    }
}

/// The bridge's constants (`bridgeConstants`).
pub(crate) fn constants() -> Value {
    json!({
        "idempotencyMetaKey": IDEMPOTENCY_META_KEY,
        "errorCodes": {
            "closed": codes::CLOSED,
            "timeout": codes::TIMEOUT,
            "outcome_unknown": codes::OUTCOME_UNKNOWN,
            "context_mismatch": codes::CONTEXT_MISMATCH,
            "session_lost": codes::SESSION_LOST,
            "transport": codes::TRANSPORT,
            "protocol": codes::PROTOCOL,
            "too_large": codes::TOO_LARGE,
            "unauthorized": codes::UNAUTHORIZED,
            "invalid_config": codes::INVALID_CONFIG,
            "ledger": codes::LEDGER,
        },
    })
}
