//! The SDK's `Client` for JavaScript: constructed from an options object, every network
//! method a promise. `lib/client.js` wraps it into the public `Client`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use mcp_resume::client::models::{CompleteRequest, CompletionReference, LoggingLevel};
use mcp_resume::{CallHandle, Client, Era, Request, ToolCall};
use napi::bindgen_prelude::{Function, PromiseRaw};
use napi::Env;
use napi_derive::napi;
use serde_json::{json, Map, Value};
use tokio::sync::watch;

use crate::cancel::{CancelToken, Cancellation};
use crate::convert::{self, parse_optional, text};
use crate::errors::{invalid, promise, to_js, Failure};
use crate::handlers::HandlerOptions;
use crate::options::{configure, millis, ClientOptions};
use crate::streams::{NativeStream, Source};
use crate::telemetry::{caller_context, flush, under, CallerContext};
use mcp_resume::client::telemetry::Otlp;

/// Per-call options of `callTool` and `request`.
#[napi(object, object_to_js = false)]
pub struct CallOptions {
    /// Makes the call keyed: re-sent after an interruption where the server deduplicates
    /// (`tools/call` only).
    pub idempotency_key: Option<String>,
    /// This call's deadline (ms), across every resume and re-send.
    pub timeout: Option<f64>,
    /// Members added to the request's `_meta`: an object, as JSON text.
    pub meta: Option<String>,
    /// `_meta.progressToken`, as JSON text: the server's progress arrives under it on
    /// `notifications()`.
    pub progress_token: Option<String>,
}

/// The low-level client; use `Client` from the package. JSON crosses as text both ways
/// (`JSON.stringify` in, `JSON.parse` out, see `convert`).
#[napi]
pub struct NativeClient {
    client: Client,
    /// Turned true by `close()`: the client's streams end.
    closed: Arc<watch::Sender<bool>>,
    /// The calls `recover()` picked up whose outcome JavaScript has not asked for yet, by
    /// the number it was given for each.
    recovered: Arc<Mutex<Recovered>>,
    /// The OTLP exporters, when `otlpEndpoint` was given (flushed by `close()`).
    otlp: Option<Arc<Otlp>>,
    /// Reads the span active in JavaScript, when telemetry is on.
    caller: Option<CallerContext>,
}

#[derive(Default)]
struct Recovered {
    next: u32,
    handles: HashMap<u32, CallHandle<Value>>,
}

/// A method's promise over a clone of the client, its call under the span active in
/// JavaScript when telemetry is on.
macro_rules! call {
    ($self:ident, $env:ident, |$client:ident| $body:expr) => {{
        let $client = $self.client.clone();
        let parent = caller_context($env, $self.caller.as_ref());
        promise($env, under(parent, async move { $body }))
    }};
}

#[napi]
impl NativeClient {
    /// Checks the options and builds the client; touches no network.
    #[napi(constructor, catch_unwind)]
    ///
    /// `caller` (`lib/telemetry.js`) returns the `traceparent` of the span active in
    /// JavaScript; it is asked as each call is made when `otlpEndpoint` is set.
    pub fn new(
        env: Env,
        url: String,
        options: Option<ClientOptions>,
        handlers: Option<HandlerOptions>,
        caller: Option<Function<'_, (), Option<String>>>,
    ) -> napi::Result<Self> {
        let built = configure(Client::builder(url), options).and_then(|(mut builder, otlp)| {
            if let Some(handlers) = handlers {
                builder = handlers.register(builder);
            }
            Ok((builder.build()?, otlp))
        });
        match built {
            Ok((client, otlp)) => Ok(NativeClient {
                client,
                closed: Arc::new(watch::channel(false).0),
                recovered: Arc::default(),
                caller: match (&otlp, caller) {
                    (Some(_), Some(caller)) => Some(caller.create_ref()?),
                    _ => None,
                },
                otlp,
            }),
            Err(failure) => Err(to_js(&env, &failure)),
        }
    }

    /// The calls the ledger holds for this endpoint that this client does not have in
    /// flight, picked up: each entry's facts and the number `recoveredOutcome` takes.
    ///
    /// A call's handle is kept under its number only once JavaScript is sure to get the
    /// numbers: when the entries are more than a JavaScript string holds (`too_large`), the
    /// calls are dropped, which cancels them, as dropping a `CallHandle` does. A kept handle
    /// goes when its outcome is asked for, else with this client: one never asked for keeps
    /// its call, and its result once it ends, until the client is garbage collected.
    #[napi(catch_unwind)]
    pub fn recover<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, String>> {
        let recovered = self.recovered.clone();
        call!(self, env, |c| {
            let calls = c.recover().await?;
            // Numbers taken now (a recovery that fails leaves a gap), the handles kept below.
            let first = {
                let mut table = recovered.lock().unwrap_or_else(|p| p.into_inner());
                let first = table.next;
                table.next = first.wrapping_add(calls.len() as u32);
                first
            };
            let mut handles = Vec::with_capacity(calls.len());
            let entries: Vec<Value> = calls
                .into_iter()
                .zip(1u32..)
                .map(|(call, offset)| {
                    let (entry, handle) = call.into_parts();
                    let number = first.wrapping_add(offset);
                    handles.push((number, handle));
                    let mut facts = convert::ledger_entry(&entry);
                    facts["handle"] = json!(number);
                    facts
                })
                .collect();
            let text = text(&entries)?;
            recovered
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .handles
                .extend(handles);
            Ok(text)
        })
    }

    /// The outcome of the recovered call `handle` names: its result, or the typed error
    /// (`OutcomeUnknownError` for an unkeyed call that may have run). Asked for once.
    #[napi(catch_unwind)]
    pub fn recovered_outcome<'env>(
        &self,
        env: &'env Env,
        handle: u32,
    ) -> napi::Result<PromiseRaw<'env, String>> {
        let taken = self
            .recovered
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .handles
            .remove(&handle);
        promise(env, async move {
            let handle =
                taken.ok_or_else(|| invalid("a recovered call's outcome is asked for once"))?;
            text(&handle.await?)
        })
    }

    /// `initialize` (or the 2026-07-28 discovery): the server's result.
    #[napi(catch_unwind)]
    pub fn connect<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, String>> {
        call!(self, env, |c| text(&c.connect().await?.raw))
    }

    /// Every tool, following `nextCursor`.
    #[napi(catch_unwind)]
    pub fn list_tools<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, String>> {
        call!(self, env, |c| {
            let tools: Vec<Value> = c.list_tools().await?.into_iter().map(|t| t.raw).collect();
            text(&tools)
        })
    }

    /// One page of `tools/list` (its whole result).
    #[napi(catch_unwind)]
    pub fn list_tools_page<'env>(
        &self,
        env: &'env Env,
        cursor: Option<String>,
    ) -> napi::Result<PromiseRaw<'env, String>> {
        call!(self, env, |c| text(
            &c.list_tools_page(cursor.as_deref()).await?.raw
        ))
    }

    /// `tools/call`: the result as the server sent it.
    #[napi(catch_unwind)]
    pub fn call_tool<'env>(
        &self,
        env: &'env Env,
        name: String,
        arguments: Option<String>,
        options: Option<CallOptions>,
        cancel: Option<&CancelToken>,
    ) -> napi::Result<PromiseRaw<'env, String>> {
        let cancel = Cancellation::of(cancel);
        call!(self, env, |c| {
            // Read on the runtime's thread, not JavaScript's.
            let call = tool_call(name, arguments, options)?;
            cancel
                .run(async move { text(&c.call_tool(call).await?.raw) })
                .await
        })
    }

    /// Any request: its `result`.
    #[napi(catch_unwind)]
    pub fn request<'env>(
        &self,
        env: &'env Env,
        method: String,
        params: Option<String>,
        options: Option<CallOptions>,
        cancel: Option<&CancelToken>,
    ) -> napi::Result<PromiseRaw<'env, String>> {
        let cancel = Cancellation::of(cancel);
        call!(self, env, |c| {
            // Read on the runtime's thread, not JavaScript's.
            let request = request(method, params, options)?;
            cancel
                .run(async move { text(&c.request::<Value>(request).await?) })
                .await
        })
    }

    /// Sends a notification (`params`: JSON text). Inside the addon's runtime: the first
    /// message of a client starts its driver there, whether or not a call came before.
    #[napi(catch_unwind)]
    pub fn notify(&self, env: Env, method: String, params: Option<String>) -> napi::Result<()> {
        parse_optional(params.as_deref(), "params")
            .and_then(|params| Ok(on_runtime(|| self.client.notify(&method, params))?))
            .map_err(|failure| to_js(&env, &failure))
    }

    /// `ping`.
    #[napi(catch_unwind)]
    pub fn ping<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        call!(self, env, |c| Ok(c.ping().await?))
    }

    /// Every resource, following `nextCursor`.
    #[napi(catch_unwind)]
    pub fn list_resources<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, String>> {
        call!(self, env, |c| text(&c.list_resources().await?))
    }

    /// One page of `resources/list`.
    #[napi(catch_unwind)]
    pub fn list_resources_page<'env>(
        &self,
        env: &'env Env,
        cursor: Option<String>,
    ) -> napi::Result<PromiseRaw<'env, String>> {
        call!(self, env, |c| text(
            &c.list_resources_page(cursor.as_deref()).await?.raw
        ))
    }

    /// Every resource template, following `nextCursor`.
    #[napi(catch_unwind)]
    pub fn list_resource_templates<'env>(
        &self,
        env: &'env Env,
    ) -> napi::Result<PromiseRaw<'env, String>> {
        call!(self, env, |c| text(&c.list_resource_templates().await?))
    }

    /// One page of `resources/templates/list`.
    #[napi(catch_unwind)]
    pub fn list_resource_templates_page<'env>(
        &self,
        env: &'env Env,
        cursor: Option<String>,
    ) -> napi::Result<PromiseRaw<'env, String>> {
        call!(self, env, |c| text(
            &c.list_resource_templates_page(cursor.as_deref()).await?.raw
        ))
    }

    /// `resources/read`.
    #[napi(catch_unwind)]
    pub fn read_resource<'env>(
        &self,
        env: &'env Env,
        uri: String,
    ) -> napi::Result<PromiseRaw<'env, String>> {
        call!(self, env, |c| text(&c.read_resource(&uri).await?))
    }

    /// `resources/subscribe`. A subscription belongs to the session: after a `reinitialized`
    /// event, subscribe again.
    #[napi(catch_unwind)]
    pub fn subscribe_resource<'env>(
        &self,
        env: &'env Env,
        uri: String,
    ) -> napi::Result<PromiseRaw<'env, ()>> {
        call!(self, env, |c| Ok(c.subscribe_resource(&uri).await?))
    }

    /// `resources/unsubscribe`.
    #[napi(catch_unwind)]
    pub fn unsubscribe_resource<'env>(
        &self,
        env: &'env Env,
        uri: String,
    ) -> napi::Result<PromiseRaw<'env, ()>> {
        call!(self, env, |c| Ok(c.unsubscribe_resource(&uri).await?))
    }

    /// Every prompt, following `nextCursor`.
    #[napi(catch_unwind)]
    pub fn list_prompts<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, String>> {
        call!(self, env, |c| text(&c.list_prompts().await?))
    }

    /// One page of `prompts/list`.
    #[napi(catch_unwind)]
    pub fn list_prompts_page<'env>(
        &self,
        env: &'env Env,
        cursor: Option<String>,
    ) -> napi::Result<PromiseRaw<'env, String>> {
        call!(self, env, |c| text(
            &c.list_prompts_page(cursor.as_deref()).await?.raw
        ))
    }

    /// `prompts/get` with string arguments.
    #[napi(catch_unwind)]
    pub fn get_prompt<'env>(
        &self,
        env: &'env Env,
        name: String,
        arguments: Option<std::collections::HashMap<String, String>>,
    ) -> napi::Result<PromiseRaw<'env, String>> {
        let arguments = arguments.unwrap_or_default();
        call!(self, env, |c| text(&c.get_prompt(&name, arguments).await?))
    }

    /// `completion/complete`: `reference` is `{type: "ref/prompt", name}` or
    /// `{type: "ref/resource", uri}`; the result's `completion`.
    #[napi(catch_unwind)]
    pub fn complete<'env>(
        &self,
        env: &'env Env,
        reference: Value,
        argument_name: String,
        argument_value: String,
        context: Option<std::collections::HashMap<String, String>>,
    ) -> napi::Result<PromiseRaw<'env, String>> {
        let request = completion_reference(&reference).map(|reference| {
            let mut request = CompleteRequest::new(reference, argument_name, argument_value);
            for (name, value) in context.unwrap_or_default() {
                request = request.context_argument(name, value);
            }
            request
        });
        call!(self, env, |c| text(&c.complete(request?).await?))
    }

    /// `logging/setLevel`.
    #[napi(catch_unwind)]
    pub fn set_logging_level<'env>(
        &self,
        env: &'env Env,
        level: String,
    ) -> napi::Result<PromiseRaw<'env, ()>> {
        let level =
            serde_json::from_value::<LoggingLevel>(Value::String(level.clone())).map_err(|_| {
                invalid(format!(
                    "unknown logging level `{level}` (expected debug, info, notice, warning, \
                     error, critical, alert or emergency)"
                ))
            });
        call!(self, env, |c| Ok(c.set_logging_level(level?).await?))
    }

    /// `notifications/roots/list_changed` (inside the addon's runtime, as `notify`).
    #[napi(catch_unwind)]
    pub fn notify_roots_changed(&self, env: Env) -> napi::Result<()> {
        on_runtime(|| self.client.notify_roots_changed()).map_err(|e| to_js(&env, &e.into()))
    }

    /// Closes the session (DELETE); later calls fail with `closed`, the streams end.
    #[napi(catch_unwind)]
    pub fn close<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        let closed = self.closed.clone();
        let otlp = self.otlp.clone();
        call!(self, env, |c| {
            let outcome = c.close().await;
            closed.send_replace(true);
            // What the exporters hold goes out before the promise resolves.
            if let Some(otlp) = otlp {
                flush(otlp).await;
            }
            Ok(outcome?)
        })
    }

    /// `auto` until the era is known, then `legacy` or `modern`.
    #[napi(getter, catch_unwind)]
    pub fn era(&self) -> &'static str {
        self.client.era().map_or("auto", Era::as_str)
    }

    /// The current `Mcp-Session-Id` (legacy era), if any.
    #[napi(getter, catch_unwind)]
    pub fn session_id(&self) -> Option<String> {
        self.client.session_id().map(|id| id.expose().to_owned())
    }

    /// The resume-safety checks in force, once connected.
    #[napi(getter, ts_return_type = "any", catch_unwind)]
    pub fn extension_status(&self) -> Option<Value> {
        self.client
            .extension_status()
            .map(convert::extension_status)
    }

    /// Session events sent from now on.
    #[napi(catch_unwind)]
    pub fn events(&self) -> NativeStream {
        NativeStream::new(
            Source::Events(self.client.events()),
            self.closed.subscribe(),
        )
    }

    /// Server notifications sent from now on.
    #[napi(catch_unwind)]
    pub fn notifications(&self) -> NativeStream {
        NativeStream::new(
            Source::Notifications(self.client.notifications()),
            self.closed.subscribe(),
        )
    }
}

/// `f` inside the addon's runtime, as the promises run: what the SDK does synchronously
/// that may start the client's driver (a notification sent before any call) finds a runtime
/// to spawn it on.
fn on_runtime<T>(f: impl FnOnce() -> T) -> T {
    napi::bindgen_prelude::within_runtime_if_available(f)
}

fn tool_call(
    name: String,
    arguments: Option<String>,
    options: Option<CallOptions>,
) -> Result<ToolCall, Failure> {
    let arguments = parse_optional(arguments.as_deref(), "arguments")?
        .unwrap_or_else(|| Value::Object(Map::new()));
    let mut call = ToolCall::new(name, arguments);
    if let Some(o) = options {
        if let Some(key) = o.idempotency_key {
            call = call.idempotency_key(key);
        }
        if let Some(ms) = o.timeout {
            call = call.timeout(millis(ms, "timeout")?);
        }
        for (key, value) in meta(o.meta.as_deref())? {
            call = call.meta(key, value);
        }
        if let Some(token) = parse_optional(o.progress_token.as_deref(), "progressToken")? {
            call = call.progress_token(token);
        }
    }
    Ok(call)
}

fn request(
    method: String,
    params: Option<String>,
    options: Option<CallOptions>,
) -> Result<Request, Failure> {
    let params = parse_optional(params.as_deref(), "params")?;
    let mut request = Request::new(method, params);
    if let Some(o) = options {
        if o.idempotency_key.is_some() {
            return Err(invalid(
                "only callTool takes an idempotencyKey: a key makes a tools/call safe to re-send",
            ));
        }
        if let Some(ms) = o.timeout {
            request = request.timeout(millis(ms, "timeout")?);
        }
        for (key, value) in meta(o.meta.as_deref())? {
            request = request.meta(key, value);
        }
        if let Some(token) = parse_optional(o.progress_token.as_deref(), "progressToken")? {
            request = request.progress_token(token);
        }
    }
    Ok(request)
}

/// The `meta` option's members (its JSON text, an object).
fn meta(text: Option<&str>) -> Result<Map<String, Value>, Failure> {
    match parse_optional(text, "meta")? {
        None => Ok(Map::new()),
        Some(Value::Object(members)) => Ok(members),
        Some(_) => Err(invalid("meta must be an object")),
    }
}

fn completion_reference(reference: &Value) -> Result<CompletionReference, Failure> {
    let member = |key: &str| reference.get(key).and_then(Value::as_str);
    match (member("type"), member("name"), member("uri")) {
        (Some("ref/prompt"), Some(name), _) => Ok(CompletionReference::prompt(name)),
        (Some("ref/resource"), _, Some(uri)) => Ok(CompletionReference::resource(uri)),
        _ => Err(invalid(
            "a completion reference is {type: \"ref/prompt\", name} or \
             {type: \"ref/resource\", uri}",
        )),
    }
}
