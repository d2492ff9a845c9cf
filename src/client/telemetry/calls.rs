//! An MCP request's span, started where the request is registered, in the caller's context.

use std::time::Instant;

use opentelemetry::trace::{SpanKind, Status, TraceContextExt, Tracer};
use opentelemetry::{Context, KeyValue};
use serde_json::Value;

use super::{isolate, names, w3c, Instrumentation};
use crate::error::Error;
use crate::proto::CallRequest;

/// A request's span and what its metrics need; it ends with the request.
pub(crate) struct CallTrace {
    /// The context whose span is the request's.
    pub(super) cx: Context,
    pub(super) method: String,
    /// `gen_ai.tool.name` or `gen_ai.prompt.name`.
    pub(super) target: Option<KeyValue>,
    pub(super) started: Instant,
    /// Its span records (an exporter takes it): its HTTP requests get spans too.
    pub(super) recording: bool,
    /// What its latest HTTP request said (the JSON-RPC id, the session in force), set on the
    /// span when it ends: an attribute set twice would be exported twice.
    pub(super) facts: Vec<KeyValue>,
}

impl Instrumentation {
    /// Starts `request`'s span, a child of the context its `params._meta` carries or else of
    /// the caller's, and writes the span's own context into `params._meta`.
    pub(crate) fn start_call(&self, request: &mut CallRequest) -> CallTrace {
        let parent = w3c::extract_meta(request.params.as_ref()).unwrap_or_else(Context::current);
        let method = request.method.clone();
        let target = target(&method, request.params.as_ref());
        let name = match &target {
            Some(target) => format!("{method} {}", target.value.as_str()),
            None => method.clone(),
        };
        let span = self
            .tracer()
            .span_builder(name)
            .with_kind(SpanKind::Client)
            .start_with_context(self.tracer(), &parent);
        let cx = parent.with_span(span);
        let span = cx.span();
        let recording = span.is_recording();
        if recording {
            span.set_attribute(KeyValue::new(names::MCP_METHOD_NAME, method.clone()));
            span.set_attributes(self.connection());
            if let Some(target) = &target {
                span.set_attribute(target.clone());
            }
            if method == "tools/call" {
                span.set_attribute(KeyValue::new(names::GEN_AI_OPERATION_NAME, "execute_tool"));
            }
            if let Some(uri) = resource_uri(&method, request.params.as_ref()) {
                span.set_attribute(KeyValue::new(names::MCP_RESOURCE_URI, uri.to_owned()));
            }
        }
        if let Some(own) = w3c::valid_span(&cx) {
            w3c::inject_meta(&mut request.params, &own);
        }
        CallTrace {
            cx,
            method,
            target,
            started: Instant::now(),
            recording,
            facts: Vec::new(),
        }
    }
}

impl CallTrace {
    /// Ends the span with the request's outcome and records its duration.
    pub(super) fn end(mut self, inst: &Instrumentation, outcome: Outcome<'_>) {
        let span = self.cx.span();
        span.set_attributes(std::mem::take(&mut self.facts));
        let error = outcome.error_type(&self.method);
        let mut attributes: Vec<KeyValue> = inst.connection().collect();
        attributes.push(KeyValue::new(names::MCP_METHOD_NAME, self.method.clone()));
        if let Some(target) = &self.target {
            attributes.push(target.clone());
        }
        if self.method == "tools/call" {
            attributes.push(KeyValue::new(names::GEN_AI_OPERATION_NAME, "execute_tool"));
        }
        if let Some(error) = &error {
            let kv = KeyValue::new(names::ERROR_TYPE, error.clone());
            span.set_attribute(kv.clone());
            attributes.push(kv);
            if let Outcome::Failed(err) = outcome {
                if let Some(rpc) = err.rpc_error() {
                    let code = KeyValue::new(names::RPC_RESPONSE_STATUS_CODE, rpc.code.to_string());
                    span.set_attribute(code.clone());
                    attributes.push(code);
                }
            }
            span.set_status(Status::error(outcome.description()));
        }
        span.end();
        inst.instruments()
            .operation_duration
            .record(self.started.elapsed().as_secs_f64(), &attributes);
    }
}

impl Drop for CallTrace {
    /// A trace dropped without [`end`](Self::end) (its call never registered: the driver
    /// had stopped) ends its span here, where the application's span processors run: their
    /// panic is caught, as on every other path, instead of unwinding the caller.
    fn drop(&mut self) {
        let cx = std::mem::replace(&mut self.cx, Context::new());
        isolate(move || {
            cx.span().end();
            drop(cx);
        });
    }
}

/// How a request ended, as the span tells it.
pub(super) enum Outcome<'a> {
    Answered(&'a Value),
    Failed(&'a Error),
    /// The application dropped or cancelled it.
    Cancelled,
}

impl Outcome<'_> {
    fn error_type(&self, method: &str) -> Option<String> {
        match self {
            Outcome::Answered(result) => (method == "tools/call"
                && result.get("isError").and_then(Value::as_bool) == Some(true))
            .then(|| "tool_error".to_owned()),
            Outcome::Failed(err) => Some(match err.rpc_error() {
                Some(rpc) => rpc.code.to_string(),
                None => err.kind().as_str().to_owned(),
            }),
            Outcome::Cancelled => Some("cancelled".to_owned()),
        }
    }

    fn description(&self) -> String {
        match self {
            Outcome::Answered(_) => "the tool reported an error".to_owned(),
            Outcome::Failed(err) => match err.rpc_error() {
                Some(rpc) => rpc.message.clone(),
                None => err.message().to_owned(),
            },
            Outcome::Cancelled => "cancelled by the application".to_owned(),
        }
    }
}

/// `gen_ai.tool.name` of a `tools/call`, `gen_ai.prompt.name` of a `prompts/get`.
fn target(method: &str, params: Option<&Value>) -> Option<KeyValue> {
    let key = match method {
        "tools/call" => names::GEN_AI_TOOL_NAME,
        "prompts/get" => names::GEN_AI_PROMPT_NAME,
        _ => return None,
    };
    let name = params?.get("name")?.as_str()?;
    Some(KeyValue::new(key, name.to_owned()))
}

/// `mcp.resource.uri` of the requests that name a resource.
fn resource_uri<'a>(method: &str, params: Option<&'a Value>) -> Option<&'a str> {
    match method {
        "resources/read" | "resources/subscribe" | "resources/unsubscribe" => {
            params?.get("uri")?.as_str()
        }
        _ => None,
    }
}
