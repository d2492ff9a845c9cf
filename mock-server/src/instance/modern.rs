//! The 2026-07-28 revision on `/mcp`: stateless. No session, no `initialize`, no GET stream,
//! no resumption. Every request carries its protocol version and its client's capabilities in
//! `params._meta`, mirrored in `MCP-Protocol-Version`, `Mcp-Method` and `Mcp-Name`, and is
//! served by whichever instance the balancer picks; what must outlive a request (`prepare`
//! handles, idempotency keys, tasks) lives in the shared store.
//!
//! Closing a request's response stream cancels it (the specification's rule): an unkeyed
//! call stops at its next step and sends nothing more. A keyed call runs on to store its
//! outcome under its key: the extension promises that outcome to the call re-issued with the
//! same key, and stopping would break the promise without undoing anything already applied.

use base64::Engine as _;

use super::*;
use crate::context::{extensions, modern_code, modern_meta, MODERN_VERSION};
use crate::store::{TaskRecord, TaskStatus};

/// What a 2026-07-28 request carried about its client, for the tool it runs.
#[derive(Clone, Copy)]
pub(super) struct Carried<'a> {
    /// The hash of the context the request carried (protocol version, its client
    /// capabilities, this server's capabilities).
    pub hash: &'a str,
    pub capabilities: &'a Value,
    /// It asked for log messages.
    pub log_level: bool,
    /// Its client declares the tasks extension.
    pub tasks: bool,
}

/// Whether this POST is served as 2026-07-28. A dual-era instance serves the legacy era to
/// whoever opens with `initialize` or names a session, and the modern one to the rest.
pub(super) fn serves(era: ClusterEra, headers: &HeaderMap, parsed: &Value) -> bool {
    match era {
        ClusterEra::Legacy => false,
        ClusterEra::Modern => true,
        ClusterEra::Dual => {
            parsed.is_object()
                && !headers.contains_key(h::SESSION_ID)
                && parsed.get("method").and_then(Value::as_str) != Some("initialize")
        }
    }
}

/// A validated 2026-07-28 request.
struct ModernRequest {
    id: Value,
    method: String,
    value: Value,
    /// The context the request carried, as an instance runs a call under it.
    context: SessionRecord,
    log_level: bool,
    tasks: bool,
}

impl ModernRequest {
    fn carried(&self) -> Carried<'_> {
        Carried {
            hash: &self.context.capability_hash,
            capabilities: &self.context.client_capabilities,
            log_level: self.log_level,
            tasks: self.tasks,
        }
    }
}

fn refusal(
    status: StatusCode,
    id: &Value,
    code: i64,
    message: &str,
    data: Option<Value>,
) -> Response {
    json_response(status, &rpc_err(id, code, message, data))
}

fn mismatch(id: &Value, message: &str) -> Response {
    refusal(
        StatusCode::BAD_REQUEST,
        id,
        modern_code::HEADER_MISMATCH,
        &format!("Header mismatch: {message}"),
        None,
    )
}

fn unsupported_version(inc: &Incarnation, id: &Value, requested: Option<&str>) -> Response {
    let supported = context::supported_versions(inc.settings().era);
    let message = if supported.len() == 1 {
        format!("Unsupported protocol version: this server speaks {MODERN_VERSION} only")
    } else {
        "Unsupported protocol version".to_owned()
    };
    refusal(
        StatusCode::BAD_REQUEST,
        id,
        modern_code::UNSUPPORTED_PROTOCOL_VERSION,
        &message,
        Some(json!({ "supported": supported, "requested": requested })),
    )
}

fn server_info() -> Value {
    json!({ "name": "mcp-resume-mock", "version": env!("CARGO_PKG_VERSION") })
}

/// Every result says what it is (`complete` unless it says otherwise) and who answered.
fn finish_result(result: &mut Value) {
    if result.get("resultType").is_none() {
        result["resultType"] = json!("complete");
    }
    if result.get("_meta").is_none_or(Value::is_object) {
        result["_meta"][modern_meta::SERVER_INFO] = server_info();
    }
}

fn complete(id: &Value, mut result: Value) -> Response {
    finish_result(&mut result);
    json_response(StatusCode::OK, &rpc_result(id, result))
}

/// A mirrored header's value, decoded from the base64 sentinel when it uses it; `None` when it
/// has characters a header may not carry or the sentinel does not decode.
fn header_text(v: &HeaderValue) -> Option<String> {
    let s = v.to_str().ok()?;
    match s
        .strip_prefix("=?base64?")
        .and_then(|rest| rest.strip_suffix("?="))
    {
        Some(encoded) => {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .ok()?;
            String::from_utf8(bytes).ok()
        }
        None => Some(s.to_owned()),
    }
}

/// The body field `Mcp-Name` mirrors, for the methods that have one.
fn name_field(method: &str) -> Option<&'static str> {
    match method {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" => Some("uri"),
        _ => None,
    }
}

/// The specification's server validation, in order: the version header and the version in
/// `_meta` agree, the version is one this server speaks, `Mcp-Method` and `Mcp-Name` match
/// the body; then the request's own context.
fn validate(
    inc: &Incarnation,
    headers: &HeaderMap,
    id: Value,
    method: String,
    value: Value,
) -> Result<ModernRequest, Response> {
    let params = value.get("params");
    let meta = params.and_then(|p| p.get("_meta"));
    let Some(version_header) = headers.get(h::PROTOCOL_VERSION) else {
        return Err(mismatch(&id, "the MCP-Protocol-Version header is required"));
    };
    let Some(version) = header_text(version_header) else {
        return Err(mismatch(&id, "MCP-Protocol-Version is malformed"));
    };
    let in_meta = meta
        .and_then(|m| m.get(modern_meta::PROTOCOL_VERSION))
        .and_then(Value::as_str);
    if in_meta != Some(version.as_str()) {
        return Err(mismatch(
            &id,
            &format!(
                "MCP-Protocol-Version {version:?} does not match params._meta[{:?}] ({in_meta:?})",
                modern_meta::PROTOCOL_VERSION
            ),
        ));
    }
    if version != MODERN_VERSION {
        return Err(unsupported_version(inc, &id, Some(&version)));
    }
    match headers.get(h::MCP_METHOD).map(header_text) {
        None => return Err(mismatch(&id, "the Mcp-Method header is required")),
        Some(Some(m)) if m == method => {}
        Some(m) => {
            return Err(mismatch(
                &id,
                &format!("Mcp-Method {m:?} does not match the body's method {method:?}"),
            ))
        }
    }
    let named = name_field(&method).map(|f| params.and_then(|p| p.get(f)).and_then(Value::as_str));
    let task_named = method
        .starts_with("tasks/")
        .then(|| params.and_then(|p| p.get("taskId")).and_then(Value::as_str));
    match (headers.get(h::MCP_NAME).map(header_text), named, task_named) {
        (None, Some(_), _) => {
            return Err(mismatch(
                &id,
                &format!("the Mcp-Name header is required for {method}"),
            ))
        }
        (Some(got), Some(body), _) | (Some(got), None, Some(body)) if got.as_deref() != body => {
            return Err(mismatch(
                &id,
                &format!("Mcp-Name {got:?} does not match the body's {body:?}"),
            ))
        }
        _ => {}
    }
    let capabilities = match meta.and_then(|m| m.get(modern_meta::CLIENT_CAPABILITIES)) {
        Some(c @ Value::Object(_)) => c.clone(),
        _ => {
            return Err(refusal(
                StatusCode::BAD_REQUEST,
                &id,
                code::INVALID_PARAMS,
                &format!(
                    "params._meta[{:?}] is required (an object, {{}} when none)",
                    modern_meta::CLIENT_CAPABILITIES
                ),
                None,
            ))
        }
    };
    let tasks = capabilities
        .get("extensions")
        .and_then(|e| e.get(extensions::TASKS))
        .is_some();
    let log_level = meta.is_some_and(|m| m.get(modern_meta::LOG_LEVEL).is_some());
    let server_caps = context::modern_server_capabilities(inc.settings().extension);
    let context = SessionRecord {
        id: String::new(),
        capability_hash: context::capability_hash(&version, &capabilities, &server_caps),
        protocol_version: version,
        client_capabilities: capabilities,
        server_capabilities: server_caps,
        created_by: inc.env.index,
        default_context: false,
    };
    Ok(ModernRequest {
        id,
        method,
        value,
        context,
        log_level,
        tasks,
    })
}

/// A POST of the 2026-07-28 era (the body already read: `body`, and parsed: `parsed`).
pub(super) async fn handle_post(
    inc: &Arc<Incarnation>,
    headers: HeaderMap,
    parsed: Value,
    body: &[u8],
) -> Response {
    if parsed.is_array() {
        return bad_request("Invalid Request: a POST carries one JSON-RPC message (no batches)");
    }
    let (id, method, value) = match classify(&parsed) {
        Some(Message::Request { id, method, value }) => (id, method, value),
        // Nothing the client can tell this revision needs an answer or an action (closing a
        // stream is how it cancels).
        Some(Message::Notification { .. }) => return StatusCode::ACCEPTED.into_response(),
        Some(Message::Response) => {
            return bad_request("Invalid Request: a client sends no responses in 2026-07-28")
        }
        None => return bad_request("Invalid Request: not a JSON-RPC 2.0 message"),
    };
    if method == "initialize" {
        // A legacy client: name the versions spoken here, its only diagnostic.
        let requested = value
            .pointer("/params/protocolVersion")
            .and_then(Value::as_str)
            .map(str::to_owned);
        return unsupported_version(inc, &id, requested.as_deref());
    }
    let req = match validate(inc, &headers, id, method, value) {
        Ok(r) => r,
        Err(refused) => return refused,
    };
    match req.method.as_str() {
        "server/discover" => {
            let result = json!({
                "supportedVersions": context::supported_versions(inc.settings().era),
                "capabilities": req.context.server_capabilities,
                "instructions": format!("mock MCP instance {} (stateless)", inc.env.index),
                "ttlMs": 60_000,
                "cacheScope": "public",
            });
            complete(&req.id, result)
        }
        "tools/list" => complete(
            &req.id,
            json!({ "tools": tools::list_modern(), "ttlMs": 60_000, "cacheScope": "public" }),
        ),
        "tools/call" => tools_call_modern(inc, headers, req, body).await,
        "tasks/get" | "tasks/update" | "tasks/cancel" => task_request(inc, &req).await,
        "subscriptions/listen" => listen(inc, &req),
        other => refusal(
            StatusCode::NOT_FOUND,
            &req.id,
            code::METHOD_NOT_FOUND,
            &format!("Method not found: {other}"),
            None,
        ),
    }
}

/// Whether `declared` client capabilities hold every top-level capability of `required`.
fn declares(declared: &Value, required: &Value) -> bool {
    required
        .as_object()
        .is_none_or(|r| r.keys().all(|k| declared.get(k).is_some()))
}

async fn tools_call_modern(
    inc: &Arc<Incarnation>,
    headers: HeaderMap,
    req: ModernRequest,
    body: &[u8],
) -> Response {
    let params = req.value.get("params").cloned().unwrap_or(Value::Null);
    if inc.settings().extension {
        // As in the legacy era: a key the guard would refuse is refused as it refuses it,
        // before anything runs, not ignored with the call run unkeyed.
        if let Err(answer) = call_key(&req.id, Some(&params), &headers) {
            return guard_answer(answer);
        }
    }
    let name = params
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let args = params
        .get("arguments")
        .cloned()
        .unwrap_or_else(context::empty_object);
    if let Ok(call) = tools::parse(name, &args, true) {
        if let Some(required) = call.required_capability() {
            if !declares(&req.context.client_capabilities, &required) {
                return refusal(
                    StatusCode::BAD_REQUEST,
                    &req.id,
                    modern_code::MISSING_REQUIRED_CLIENT_CAPABILITY,
                    &format!("{name} needs client capabilities the request does not declare"),
                    Some(json!({ "requiredCapabilities": required })),
                );
            }
        }
    }
    let keyed = idempotency_key(inc, &req.id, &params, &headers).is_some();
    // The key is claimed before anything is answered, as the guard claims it.
    let claimed = match claim_up_front(inc, &req.id, &req.value, body, &headers, true).await {
        Ok(claimed) => claimed,
        Err(refused) => return refused,
    };
    let inc = inc.clone();
    if inc.settings().json_response {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let task_inc = inc.clone();
        inc.spawn_call(async move {
            let inc = task_inc;
            let work = tools_call(
                &inc,
                &req.context,
                &req.id,
                &req.value,
                &headers,
                None,
                Some(req.carried()),
                claimed,
            );
            let mut tx = tx;
            let response = if keyed {
                work.await
            } else {
                tokio::select! {
                    r = work => r,
                    // The client went away: the request is cancelled.
                    _ = tx.closed() => return,
                }
            };
            let _ = tx.send(response);
        });
        return match rx.await {
            Ok(mut response) => {
                if let Some(result) = response.get_mut("result") {
                    finish_result(result);
                }
                json_response(StatusCode::OK, &response)
            }
            // The instance died under the call: no answer (the balancer reports the loss).
            Err(_) => StatusCode::NO_CONTENT.into_response(),
        };
    }
    let (tx, rx) = mpsc::unbounded_channel();
    let watch = tx.clone();
    let mut emitter = Emitter {
        inc: inc.clone(),
        stream: String::new(),
        seq: Arc::new(AtomicU64::new(0)),
        live: Some(tx),
        modern: true,
    };
    let task_inc = inc.clone();
    inc.spawn_call(async move {
        let inc = task_inc;
        let response = {
            let work = tools_call(
                &inc,
                &req.context,
                &req.id,
                &req.value,
                &headers,
                Some(&mut emitter),
                Some(req.carried()),
                claimed,
            );
            if keyed {
                work.await
            } else {
                tokio::select! {
                    r = work => r,
                    // The client closed the stream: the request is cancelled.
                    _ = watch.closed() => return,
                }
            }
        };
        let mut response = response;
        if let Some(result) = response.get_mut("result") {
            finish_result(result);
        }
        let _ = emitter
            .emit(
                response.to_string(),
                EventKind::Response { request_id: req.id },
                None,
            )
            .await;
    });
    modern_sse(sse_response(rx))
}

/// SSE as the revision asks a server to send it: unbuffered by proxies.
fn modern_sse(mut resp: Response) -> Response {
    resp.headers_mut()
        .insert("x-accel-buffering", HeaderValue::from_static("no"));
    resp
}

/// `subscriptions/listen`: the acknowledgement (with the list changes this server sends),
/// then the stream stays open until the client leaves or the instance dies.
fn listen(inc: &Arc<Incarnation>, req: &ModernRequest) -> Response {
    let wanted = req.value.pointer("/params/notifications");
    let mut agreed = serde_json::Map::new();
    if wanted
        .and_then(|w| w.get("toolsListChanged"))
        .and_then(Value::as_bool)
        == Some(true)
    {
        agreed.insert("toolsListChanged".to_owned(), Value::Bool(true));
    }
    let mut ack = json!({
        "jsonrpc": "2.0",
        "method": "notifications/subscriptions/acknowledged",
        "params": { "_meta": {}, "notifications": agreed }
    });
    ack["params"]["_meta"][modern_meta::SUBSCRIPTION_ID] = req.id.clone();
    let (tx, rx) = mpsc::unbounded_channel();
    let _ = tx.send(sse::event(None, None, &ack.to_string()));
    inc.spawn_task(async move {
        tx.closed().await;
    });
    modern_sse(sse_response(rx))
}

fn task_status(status: TaskStatus) -> &'static str {
    match status {
        TaskStatus::Working => "working",
        TaskStatus::Completed => "completed",
        TaskStatus::Failed | TaskStatus::Lost => "failed",
        TaskStatus::Cancelled => "cancelled",
    }
}

/// `tasks/get`, `tasks/update`, `tasks/cancel`: answered from the shared store by whichever
/// instance the request reaches.
async fn task_request(inc: &Arc<Incarnation>, req: &ModernRequest) -> Response {
    let id = &req.id;
    let Some(task_id) = req.value.pointer("/params/taskId").and_then(Value::as_str) else {
        return complete_error(id, code::INVALID_PARAMS, "params.taskId is required", None);
    };
    let store = &inc.env.shared;
    let task = match store.get_task(task_id).await {
        Ok(Some(t)) => t,
        Ok(None) => {
            return complete_error(
                id,
                code::INVALID_PARAMS,
                &format!("Unknown task {task_id}"),
                Some(json!({ "code": "UNKNOWN_TASK" })),
            )
        }
        Err(e) => return store_failure(e),
    };
    match req.method.as_str() {
        "tasks/get" => {
            let mut status = json!({
                "taskId": task.id,
                "status": task_status(task.status),
                "pollIntervalMs": 20,
            });
            match task.status {
                TaskStatus::Completed => {
                    status["result"] = task.result.unwrap_or_else(|| json!({}));
                }
                TaskStatus::Failed => {
                    status["error"] = task.error.unwrap_or(Value::Null);
                }
                TaskStatus::Lost => {
                    status["error"] = json!({
                        "code": code::INTERNAL,
                        "message": "The instance working on the task died; its outcome is unknown",
                        "data": { "code": "TASK_LOST" },
                    });
                }
                TaskStatus::Working | TaskStatus::Cancelled => {}
            }
            complete(id, status)
        }
        "tasks/cancel" => {
            if task.status.is_working() {
                let cancelled = TaskRecord {
                    status: TaskStatus::Cancelled,
                    ..task
                };
                if let Err(e) = store.put_task(cancelled).await {
                    return store_failure(e);
                }
            }
            complete(id, json!({}))
        }
        // The mock's tasks never ask for input: an answer is acknowledged and ignored, as the
        // extension says of answers to nothing outstanding.
        _ => complete(id, json!({})),
    }
}

fn complete_error(id: &Value, code: i64, message: &str, data: Option<Value>) -> Response {
    json_response(StatusCode::OK, &rpc_err(id, code, message, data))
}
