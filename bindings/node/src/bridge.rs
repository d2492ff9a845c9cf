//! The SDK's message bridge (`mcp_resume::bridge::Bridge`) for JavaScript: JSON-RPC messages
//! in and out as objects, in between an mcp-resume session with every recovery rule.
//! `lib/transport.js` makes the TypeScript SDK's `Transport` of it (`ResumeTransport`).

use std::sync::Arc;

use mcp_resume::bridge::{codes, Bridge, IDEMPOTENCY_META_KEY};
use mcp_resume::Client;
use napi::bindgen_prelude::PromiseRaw;
use napi::Env;
use napi_derive::napi;
use serde_json::{json, Value};
use tokio::sync::watch;

use crate::errors::{promise, to_js, Failure};
use crate::options::{configure, BridgeOptions, ClientOptions};
use crate::streams::{NativeStream, Source};

/// The low-level bridge; use `ResumeTransport` from the package.
#[napi]
pub struct NativeBridge {
    bridge: Bridge,
    /// Turned true by `close()`: the bridge's event streams end.
    closed: Arc<watch::Sender<bool>>,
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
            configure(Client::builder(url.clone()), options).and_then(|(template, _otlp)| {
                let mut builder = Bridge::builder(url).configure(|_| template);
                if let Some(o) = bridge_options {
                    if let Some(trust) = o.trust_tool_annotations {
                        builder = builder.trust_tool_annotations(trust);
                    }
                    if let Some(capacity) = o.capacity {
                        builder = builder.capacity(capacity as usize);
                    }
                }
                Ok(builder.build()?)
            });
        match built {
            Ok(bridge) => Ok(NativeBridge {
                bridge,
                closed: Arc::new(watch::channel(false).0),
            }),
            Err(failure) => Err(to_js(&env, &failure)),
        }
    }

    /// Host → server: one JSON-RPC message; resolves once the bridge took it (it waits while
    /// the bridge holds `capacity` requests in flight).
    #[napi(catch_unwind)]
    pub fn send<'env>(&self, env: &'env Env, message: Value) -> napi::Result<PromiseRaw<'env, ()>> {
        let bridge = self.bridge.clone();
        promise(env, async move { Ok(bridge.send(message).await?) })
    }

    /// Server → host: the next JSON-RPC message, or `null` once the bridge is closed.
    #[napi(ts_return_type = "Promise<any>", catch_unwind)]
    pub fn recv<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, Option<Value>>> {
        let bridge = self.bridge.clone();
        promise(env, async move { Ok::<_, Failure>(bridge.recv().await) })
    }

    /// Closes the session (DELETE, best effort): later sends fail, `recv` gives `null`.
    #[napi(catch_unwind)]
    pub fn close<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        let bridge = self.bridge.clone();
        let closed = self.closed.clone();
        promise(env, async move {
            let outcome = bridge.close().await;
            closed.send_replace(true);
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
        },
    })
}
