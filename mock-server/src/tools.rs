//! The tools every instance serves. Each one makes a particular wrong answer observable.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::context;
use crate::instance::{code, Emitter, Incarnation};
use crate::oracle::Execution;
use crate::store::{PreparedRecord, SessionRecord, TaskRecord, TaskStatus};

/// Bounds that keep a hostile `slow` call from tying an instance up forever.
const MAX_STEPS: u64 = 10_000;
const MAX_DELAY_MS: u64 = 60_000;

/// What a task suggests as the interval between `tasks/get` polls.
const TASK_POLL_MS: u64 = 20;
/// How long a task is kept (advertised; the store's own retention decides).
const TASK_TTL_MS: u64 = 600_000;

/// A validated tool call.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Call {
    Echo {
        text: String,
    },
    Slow {
        steps: u64,
        delay_ms: u64,
    },
    Generate {
        prompt: String,
    },
    Prepare {
        item: Value,
    },
    Commit {
        record: String,
    },
    CounterIncrement {
        steps: u64,
        delay_ms: u64,
    },
    /// 2026-07-28 only: asks the user through an MRTR round (`input_required`).
    Confirm {
        question: String,
    },
    /// 2026-07-28 only: a long job, a task when the client declares the tasks extension.
    BatchJob {
        steps: u64,
        delay_ms: u64,
    },
}

impl Call {
    fn name(&self) -> &'static str {
        match self {
            Call::Echo { .. } => "echo",
            Call::Slow { .. } => "slow",
            Call::Generate { .. } => "generate",
            Call::Prepare { .. } => "prepare",
            Call::Commit { .. } => "commit",
            Call::CounterIncrement { .. } => "counter_increment",
            Call::Confirm { .. } => "confirm",
            Call::BatchJob { .. } => "batch_job",
        }
    }

    /// The client capability a 2026-07-28 request must declare for this call, as the
    /// `requiredCapabilities` of a refusal.
    pub(crate) fn required_capability(&self) -> Option<Value> {
        match self {
            Call::Confirm { .. } => Some(json!({ "elicitation": {} })),
            _ => None,
        }
    }

    /// Whether running the call twice does something running it once does not, so the
    /// oracle counts a second execution of its tag as a duplicate side effect.
    ///
    /// `prepare` stores a record (twice: two records for one request, one of them never
    /// committed); `commit` is the write the prepared record stands for (the mock keeps no
    /// commit state, so the oracle is the only place a double commit shows);
    /// `counter_increment` adds one. `echo`, `slow`, `generate`, `confirm` and `batch_job`
    /// only read.
    pub(crate) fn has_side_effect(&self) -> bool {
        match self {
            Call::Echo { .. }
            | Call::Slow { .. }
            | Call::Generate { .. }
            | Call::Confirm { .. }
            | Call::BatchJob { .. } => false,
            Call::Prepare { .. } | Call::Commit { .. } | Call::CounterIncrement { .. } => true,
        }
    }
}

/// The `tools/list` result's `tools`.
pub(crate) fn list() -> Value {
    json!([
        {
            "name": "echo",
            "description": "Returns its text.",
            "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
            "annotations": {"readOnlyHint": true, "idempotentHint": true}
        },
        {
            "name": "slow",
            "description": "Sends `steps` progress notifications, `delay_ms` apart, then a result.",
            "inputSchema": {"type": "object", "properties": {
                "steps": {"type": "integer", "minimum": 0, "maximum": MAX_STEPS},
                "delay_ms": {"type": "integer", "minimum": 0, "maximum": MAX_DELAY_MS}
            }, "required": ["steps", "delay_ms"]},
            "annotations": {"readOnlyHint": true, "idempotentHint": true}
        },
        {
            "name": "generate",
            "description": "Generates text whose output depends on the sampling temperature negotiated at initialize (capabilities.experimental.sampling.temperature, default 1.0).",
            "inputSchema": {"type": "object", "properties": {"prompt": {"type": "string"}}, "required": ["prompt"]},
            "annotations": {"readOnlyHint": true}
        },
        {
            "name": "prepare",
            "description": "Creates a request record for `item` and returns its id; `commit` needs it.",
            "inputSchema": {"type": "object", "properties": {"item": {}}, "required": ["item"]}
        },
        {
            "name": "commit",
            "description": "Commits a record created by `prepare`.",
            "inputSchema": {"type": "object", "properties": {"record": {"type": "string"}}, "required": ["record"]}
        },
        {
            "name": "counter_increment",
            "description": "Increments a cluster-wide counter (a side effect; deduplicated by idempotency key), then reports `steps` progress events, `delay_ms` apart (both 0 by default).",
            "inputSchema": {"type": "object", "properties": {
                "steps": {"type": "integer", "minimum": 0, "maximum": MAX_STEPS},
                "delay_ms": {"type": "integer", "minimum": 0, "maximum": MAX_DELAY_MS}
            }},
            "annotations": {"idempotentHint": false, "destructiveHint": false}
        }
    ])
}

/// The `tools/list` result's `tools` in the 2026-07-28 era: the same tools, and those that
/// use what only that era has (MRTR, tasks).
pub(crate) fn list_modern() -> Value {
    let mut tools = list();
    if let Some(all) = tools.as_array_mut() {
        all.push(json!({
            "name": "confirm",
            "description": "Asks the user to confirm `question` (an elicitation, through an `input_required` result), then returns the answer. Needs the elicitation capability.",
            "inputSchema": {"type": "object", "properties": {"question": {"type": "string"}}, "required": ["question"]},
            "annotations": {"readOnlyHint": true}
        }));
        all.push(json!({
            "name": "batch_job",
            "description": "A long job of `steps` steps, `delay_ms` apart. A client that declares the tasks extension gets a task at once (`tasks/get` on any instance reports it); any other runs it inline with progress, like `slow`.",
            "inputSchema": {"type": "object", "properties": {
                "steps": {"type": "integer", "minimum": 0, "maximum": MAX_STEPS},
                "delay_ms": {"type": "integer", "minimum": 0, "maximum": MAX_DELAY_MS}
            }, "required": ["steps", "delay_ms"]},
            "annotations": {"readOnlyHint": true}
        }));
    }
    tools
}

fn str_arg(args: &Value, name: &str) -> Result<String, String> {
    args.get(name)
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| format!("argument `{name}` must be a string"))
}

fn int_arg(args: &Value, name: &str, max: u64) -> Result<u64, String> {
    match args.get(name).and_then(Value::as_u64) {
        Some(n) if n <= max => Ok(n),
        _ => Err(format!(
            "argument `{name}` must be an integer between 0 and {max}"
        )),
    }
}

fn opt_int_arg(args: &Value, name: &str, max: u64) -> Result<u64, String> {
    match args.get(name) {
        None | Some(Value::Null) => Ok(0),
        Some(_) => int_arg(args, name, max),
    }
}

/// Validates a call's name and arguments; `modern` admits the tools only the 2026-07-28 era
/// serves.
pub(crate) fn parse(name: &str, args: &Value, modern: bool) -> Result<Call, String> {
    Ok(match name {
        "echo" => Call::Echo {
            text: str_arg(args, "text")?,
        },
        "slow" => Call::Slow {
            steps: int_arg(args, "steps", MAX_STEPS)?,
            delay_ms: int_arg(args, "delay_ms", MAX_DELAY_MS)?,
        },
        "generate" => Call::Generate {
            prompt: str_arg(args, "prompt")?,
        },
        "prepare" => Call::Prepare {
            item: args
                .get("item")
                .cloned()
                .ok_or("argument `item` is required")?,
        },
        "commit" => Call::Commit {
            record: str_arg(args, "record")?,
        },
        "counter_increment" => Call::CounterIncrement {
            steps: opt_int_arg(args, "steps", MAX_STEPS)?,
            delay_ms: opt_int_arg(args, "delay_ms", MAX_DELAY_MS)?,
        },
        "confirm" if modern => Call::Confirm {
            question: str_arg(args, "question")?,
        },
        "batch_job" if modern => Call::BatchJob {
            steps: int_arg(args, "steps", MAX_STEPS)?,
            delay_ms: int_arg(args, "delay_ms", MAX_DELAY_MS)?,
        },
        other => return Err(format!("Unknown tool: {other}")),
    })
}

/// What a running tool may use.
pub(crate) struct ToolCtx<'a> {
    pub inc: Arc<Incarnation>,
    pub session: &'a SessionRecord,
    pub tag: Option<String>,
    /// The call carries an idempotency key the instance honours.
    pub keyed: bool,
    pub progress_token: Option<Value>,
    pub emitter: Option<&'a mut Emitter>,
    /// Set when the call reaches its execution (before the oracle records it and the tool
    /// acts): from then on a call that ends without an outcome may have had its effect.
    pub ran: &'a AtomicBool,
    /// 2026-07-28 era: what the request itself carried (None: a legacy session's call).
    pub modern: Option<ModernCall<'a>>,
}

/// What a 2026-07-28 call carries that a tool may need: there is no session to remember it.
#[derive(Clone, Copy)]
pub(crate) struct ModernCall<'a> {
    /// The `tools/call` params (MRTR: `inputResponses`, `requestState`).
    pub params: &'a Value,
    /// The call's arguments.
    pub args: &'a Value,
    /// The hash of the context the request carried and its client capabilities: the truth
    /// the oracle judges the execution against.
    pub carried_hash: &'a str,
    pub carried_capabilities: &'a Value,
    /// The request asked for log messages (`_meta` logLevel).
    pub log_level: bool,
    /// The request's client capabilities declare the tasks extension.
    pub tasks: bool,
}

fn text(t: String) -> Value {
    json!({ "content": [{ "type": "text", "text": t }] })
}

fn error(code: i64, message: &str, data: Value) -> Value {
    json!({ "code": code, "message": message, "data": data })
}

/// Runs a call: the `tools/call` result, or a JSON-RPC error object. A result echoes the
/// caller's tag in `_meta` (see [`context::meta::TAG`]), so a caller can check that the answer
/// it got belongs to the call it made.
pub(crate) async fn run(call: Call, ctx: ToolCtx<'_>) -> Result<Value, Value> {
    let tag = ctx.tag.clone();
    let mut result = run_tool(call, ctx).await?;
    if let Some(tag) = tag {
        result["_meta"][context::meta::TAG] = Value::String(tag);
    }
    Ok(result)
}

async fn run_tool(call: Call, ctx: ToolCtx<'_>) -> Result<Value, Value> {
    let ToolCtx {
        inc,
        session,
        tag,
        keyed,
        progress_token,
        emitter,
        ran,
        modern,
    } = ctx;
    let oracle = &inc.env.oracle;
    let me = inc.env.index;
    // Journaled before the tool runs: an execution the oracle cannot record does not happen.
    let exec = |unknown_record: bool| {
        ran.store(true, Ordering::SeqCst);
        oracle.execution(Execution {
            tag: tag.clone(),
            tool: call.name(),
            instance: me,
            session: &session.id,
            capability_hash: &session.capability_hash,
            unknown_record,
            side_effect: call.has_side_effect(),
            keyed,
            carried: modern.map(|m| (m.carried_hash, m.carried_capabilities)),
            client_capabilities: &session.client_capabilities,
        })
    };
    let unrecorded =
        |e: crate::store::StoreError| error(code::INTERNAL, &e.to_string(), Value::Null);
    let mut steps = Steps {
        inc: &inc,
        tag: tag.as_deref(),
        emitter,
        progress_token: progress_token.as_ref(),
        // The 2026-07-28 revision sends `notifications/message` only to a request that set a
        // log level; the legacy sessions always got them.
        messages: modern.is_none_or(|m| m.log_level),
    };
    // A `prepare` handle must resolve on whichever instance a stateless request reaches.
    let prepared: &dyn crate::store::Store = if modern.is_some() {
        &*inc.env.shared
    } else {
        inc.prepared()
    };
    match &call {
        Call::Echo { text: t } => {
            let _running = exec(false).await.map_err(unrecorded)?;
            Ok(text(t.clone()))
        }
        Call::Slow { steps: n, delay_ms } => {
            let _running = exec(false).await.map_err(unrecorded)?;
            steps.run("slow", *n, *delay_ms).await;
            Ok(text(format!("slow: done after {n} steps")))
        }
        Call::Generate { prompt } => {
            let _running = exec(false).await.map_err(unrecorded)?;
            let t = context::negotiated_temperature(&session.client_capabilities);
            let mut r = text(format!("{prompt} [generated at temperature {t}]"));
            r["structuredContent"] = json!({ "temperature": t });
            Ok(r)
        }
        Call::Prepare { item } => {
            let _running = exec(false).await.map_err(unrecorded)?;
            let id = format!("rec-{}", uuid::Uuid::new_v4().simple());
            let rec = PreparedRecord {
                id: id.clone(),
                session: session.id.clone(),
                item: item.clone(),
                instance: me,
            };
            prepared
                .put_prepared(rec)
                .await
                .map_err(|e| error(code::INTERNAL, &e.to_string(), Value::Null))?;
            let mut r = text(id.clone());
            r["structuredContent"] = json!({ "record": id });
            Ok(r)
        }
        Call::Commit { record } => {
            let found = prepared
                .get_prepared(record)
                .await
                .map_err(|e| error(code::INTERNAL, &e.to_string(), Value::Null))?;
            let permissive = modern.is_none()
                && inc.env.settings.placement.resume == crate::config::ResumePolicy::Permissive;
            match found {
                Some(rec) => {
                    let _running = exec(false).await.map_err(unrecorded)?;
                    Ok(text(format!("committed {record}: {}", rec.item)))
                }
                // The observed system: the record is unknown here, and it "commits" anyway.
                None if permissive => {
                    let _running = exec(true).await.map_err(unrecorded)?;
                    Ok(text(format!("committed {record}")))
                }
                None => Err(error(
                    code::INVALID_PARAMS,
                    &format!("Unknown record {record}"),
                    json!({ "code": "UNKNOWN_RECORD" }),
                )),
            }
        }
        Call::CounterIncrement { steps: n, delay_ms } => {
            let _running = exec(false).await.map_err(unrecorded)?;
            let value = inc
                .env
                .shared
                .increment_counter("counter")
                .await
                .map_err(|e| error(code::INTERNAL, &e.to_string(), Value::Null))?;
            // The effect is applied: whatever happens to the call from here on, it happened.
            steps.run("counter_increment", *n, *delay_ms).await;
            let mut r = text(value.to_string());
            r["structuredContent"] = json!({ "value": value });
            Ok(r)
        }
        Call::Confirm { question } => {
            let Some(m) = modern else {
                return Err(error(
                    code::INVALID_PARAMS,
                    "confirm needs the 2026-07-28 revision",
                    Value::Null,
                ));
            };
            confirm(question, m, exec).await
        }
        Call::BatchJob { steps: n, delay_ms } => {
            if modern.is_some_and(|m| m.tasks) {
                return start_task(
                    &inc,
                    &call,
                    tag,
                    session,
                    keyed,
                    modern.map(|m| (m.carried_hash.to_owned(), m.carried_capabilities.clone())),
                    (*n, *delay_ms),
                )
                .await;
            }
            let _running = exec(false).await.map_err(unrecorded)?;
            steps.run("batch_job", *n, *delay_ms).await;
            Ok(text(format!("batch_job: done after {n} steps")))
        }
    }
}

/// The events a tool sends while it works, one per step, and the crash points armed on them.
struct Steps<'a, 'e> {
    inc: &'a Arc<Incarnation>,
    tag: Option<&'a str>,
    emitter: Option<&'e mut Emitter>,
    progress_token: Option<&'a Value>,
    messages: bool,
}

impl Steps<'_, '_> {
    async fn run(&mut self, logger: &str, steps: u64, delay_ms: u64) {
        for i in 1..=steps {
            tokio::time::sleep(Duration::from_millis(delay_ms)).await;
            if let Some(em) = self.emitter.as_deref_mut() {
                // Without a progress token there is nothing to attach progress to, but a
                // legacy stream still carries an event per step so it can be cut mid-call.
                let note = match self.progress_token {
                    Some(tok) => Some(json!({"jsonrpc": "2.0", "method": "notifications/progress",
                        "params": {"progressToken": tok, "progress": i, "total": steps,
                        "message": format!("step {i} of {steps}")}})),
                    None if self.messages => Some(json!({"jsonrpc": "2.0",
                        "method": "notifications/message", "params": {"level": "info",
                        "logger": logger, "data": format!("step {i} of {steps}")}})),
                    None => None,
                };
                if let Some(note) = note {
                    em.notify(note).await;
                }
            }
            if self.inc.crash_point(self.tag, i) {
                // The instance is being killed right here (see `Cluster::crash_mid_call`):
                // nothing more of this call may happen before the kill aborts it.
                std::future::pending::<()>().await;
            }
        }
    }
}

/// An MRTR round trip: without the user's answer, ask for it (`input_required`, nothing runs);
/// with it, and with the `requestState` this call was given, run.
async fn confirm<F, G>(question: &str, m: ModernCall<'_>, exec: F) -> Result<Value, Value>
where
    F: FnOnce(bool) -> G,
    G: std::future::Future<Output = Result<crate::oracle::RunningGuard, crate::store::StoreError>>,
{
    // Stateless: the state names the call it belongs to, so any instance can check it.
    let state = format!(
        "confirm.v1.{}",
        context::call_fingerprint("confirm", m.args)
    );
    let answer = m
        .params
        .get("inputResponses")
        .and_then(|r| r.get("confirm"));
    let Some(answer) = answer else {
        return Ok(json!({
            "resultType": "input_required",
            "inputRequests": {"confirm": {"method": "elicitation/create", "params": {
                "mode": "form", "message": question,
                "requestedSchema": {"type": "object", "properties": {"confirmed": {"type": "boolean"}}}
            }}},
            "requestState": state,
        }));
    };
    if m.params.get("requestState").and_then(Value::as_str) != Some(state.as_str()) {
        return Err(error(
            code::INVALID_PARAMS,
            "requestState does not belong to this call",
            json!({ "code": "BAD_REQUEST_STATE" }),
        ));
    }
    let _running = exec(false)
        .await
        .map_err(|e| error(code::INTERNAL, &e.to_string(), Value::Null))?;
    let action = answer
        .get("action")
        .and_then(Value::as_str)
        .unwrap_or("none")
        .to_owned();
    let mut r = text(format!("confirmed: {action}"));
    r["structuredContent"] = json!({ "action": action, "content": answer.get("content") });
    Ok(r)
}

/// Creates a task in the shared store and works on it in the background on this instance
/// (a kill stops it, and the store's record of the death makes it lost); answers at once.
async fn start_task(
    inc: &Arc<Incarnation>,
    call: &Call,
    tag: Option<String>,
    session: &SessionRecord,
    keyed: bool,
    carried: Option<(String, Value)>,
    (steps, delay_ms): (u64, u64),
) -> Result<Value, Value> {
    let id = format!("task-{}", uuid::Uuid::new_v4().simple());
    let me = inc.env.index;
    let record = TaskRecord {
        id: id.clone(),
        instance: me,
        status: TaskStatus::Working,
        result: None,
        error: None,
    };
    let failed = |e: crate::store::StoreError| error(code::INTERNAL, &e.to_string(), Value::Null);
    inc.env.shared.put_task(record).await.map_err(failed)?;
    let work_inc = inc.clone();
    let tool = call.name();
    let side_effect = call.has_side_effect();
    let session_id = session.id.clone();
    let hash = session.capability_hash.clone();
    let client_capabilities = session.client_capabilities.clone();
    let task_id = id.clone();
    inc.spawn_call(async move {
        let inc = work_inc;
        let store = inc.env.shared.clone();
        let running = inc
            .env
            .oracle
            .execution(Execution {
                tag: tag.clone(),
                tool,
                instance: me,
                session: &session_id,
                capability_hash: &hash,
                unknown_record: false,
                side_effect,
                keyed,
                carried: carried.as_ref().map(|(h, c)| (h.as_str(), c)),
                client_capabilities: &client_capabilities,
            })
            .await;
        let finish = |status, result, error| TaskRecord {
            id: task_id.clone(),
            instance: me,
            status,
            result,
            error,
        };
        if let Err(e) = running {
            let err = error(code::INTERNAL, &e.to_string(), Value::Null);
            let _ = store
                .put_task(finish(TaskStatus::Failed, None, Some(err)))
                .await;
            return;
        }
        let mut steps_of = Steps {
            inc: &inc,
            tag: tag.as_deref(),
            emitter: None,
            progress_token: None,
            messages: false,
        };
        steps_of.run("batch_job", steps, delay_ms).await;
        // Cancellation is cooperative: a task cancelled meanwhile stays cancelled.
        if let Ok(Some(t)) = store.get_task(&task_id).await {
            if !t.status.is_working() {
                return;
            }
        }
        let mut result = text(format!("batch_job: done after {steps} steps"));
        result["resultType"] = json!("complete");
        if let Some(tag) = &tag {
            result["_meta"][context::meta::TAG] = Value::String(tag.clone());
        }
        let _ = store
            .put_task(finish(TaskStatus::Completed, Some(result), None))
            .await;
        drop(running);
    });
    Ok(json!({
        "resultType": "task",
        "taskId": id,
        "status": "working",
        "pollIntervalMs": TASK_POLL_MS,
        "ttlMs": TASK_TTL_MS,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_validates() {
        assert_eq!(
            parse("echo", &json!({"text": "a"}), false).unwrap(),
            Call::Echo { text: "a".into() }
        );
        assert!(parse("echo", &json!({}), false).is_err());
        assert!(parse("slow", &json!({"steps": 1, "delay_ms": 999_999}), false).is_err());
        assert!(parse("nope", &json!({}), false).is_err());
        assert_eq!(
            parse("counter_increment", &json!({}), false).unwrap(),
            Call::CounterIncrement {
                steps: 0,
                delay_ms: 0
            }
        );
        assert!(parse("counter_increment", &json!({"steps": -1}), false).is_err());
        let confirm = json!({"question": "ok?"});
        assert!(parse("confirm", &confirm, false).is_err(), "modern only");
        assert!(parse("confirm", &confirm, true)
            .unwrap()
            .required_capability()
            .is_some());
    }

    #[test]
    fn every_listed_tool_says_whether_it_has_a_side_effect() {
        let args = json!({"text": "t", "steps": 0, "delay_ms": 0, "prompt": "p", "item": 1,
                          "record": "r", "question": "q"});
        let effects: Vec<(String, bool)> = list_modern()
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                let name = t["name"].as_str().unwrap();
                (
                    name.to_owned(),
                    parse(name, &args, true).unwrap().has_side_effect(),
                )
            })
            .collect();
        let named = |n: &str| effects.iter().find(|(t, _)| t == n).unwrap().1;
        assert!(!named("echo") && !named("slow") && !named("generate"));
        assert!(named("prepare") && named("commit") && named("counter_increment"));
        assert!(!named("confirm") && !named("batch_job"));
        assert_eq!(list().as_array().unwrap().len() + 2, effects.len());
    }
}
