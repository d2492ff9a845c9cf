//! The tools every instance serves. Each one makes a particular wrong answer observable.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::context;
use crate::instance::{code, Emitter, Incarnation};
use crate::oracle::Execution;
use crate::store::{PreparedRecord, SessionRecord};

/// Bounds that keep a hostile `slow` call from tying an instance up forever.
const MAX_STEPS: u64 = 10_000;
const MAX_DELAY_MS: u64 = 60_000;

/// A validated tool call.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Call {
    Echo { text: String },
    Slow { steps: u64, delay_ms: u64 },
    Generate { prompt: String },
    Prepare { item: Value },
    Commit { record: String },
    CounterIncrement,
}

impl Call {
    fn name(&self) -> &'static str {
        match self {
            Call::Echo { .. } => "echo",
            Call::Slow { .. } => "slow",
            Call::Generate { .. } => "generate",
            Call::Prepare { .. } => "prepare",
            Call::Commit { .. } => "commit",
            Call::CounterIncrement => "counter_increment",
        }
    }

    /// Whether running the call twice does something running it once does not, so the
    /// oracle counts a second execution of its tag as a duplicate side effect.
    ///
    /// `prepare` stores a record (twice: two records for one request, one of them never
    /// committed); `commit` is the write the prepared record stands for (the mock keeps no
    /// commit state, so the oracle is the only place a double commit shows);
    /// `counter_increment` adds one. `echo`, `slow` and `generate` only read.
    pub(crate) fn has_side_effect(&self) -> bool {
        match self {
            Call::Echo { .. } | Call::Slow { .. } | Call::Generate { .. } => false,
            Call::Prepare { .. } | Call::Commit { .. } | Call::CounterIncrement => true,
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
            "description": "Increments a cluster-wide counter (a side effect; deduplicated by idempotency key).",
            "inputSchema": {"type": "object", "properties": {}},
            "annotations": {"idempotentHint": false, "destructiveHint": false}
        }
    ])
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

/// Validates a call's name and arguments.
pub(crate) fn parse(name: &str, args: &Value) -> Result<Call, String> {
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
        "counter_increment" => Call::CounterIncrement,
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
    } = ctx;
    let oracle = &inc.env.oracle;
    let me = inc.env.index;
    // Journaled before the tool runs: an execution the oracle cannot record does not happen.
    let exec = |unknown_record: bool| {
        oracle.execution(Execution {
            tag: tag.clone(),
            tool: call.name(),
            instance: me,
            session: &session.id,
            capability_hash: &session.capability_hash,
            unknown_record,
            side_effect: call.has_side_effect(),
            keyed,
        })
    };
    let unrecorded =
        |e: crate::store::StoreError| error(code::INTERNAL, &e.to_string(), Value::Null);
    match &call {
        Call::Echo { text: t } => {
            let _running = exec(false).await.map_err(unrecorded)?;
            Ok(text(t.clone()))
        }
        Call::Slow { steps, delay_ms } => {
            let _running = exec(false).await.map_err(unrecorded)?;
            let mut emitter = emitter;
            for i in 1..=*steps {
                tokio::time::sleep(Duration::from_millis(*delay_ms)).await;
                if let Some(em) = emitter.as_deref_mut() {
                    // Without a progress token there is nothing to attach progress to, but
                    // the stream still carries an event per step so it can be cut mid-call.
                    let note = match &progress_token {
                        Some(tok) => {
                            json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {
                            "progressToken": tok, "progress": i, "total": steps,
                            "message": format!("step {i} of {steps}")}})
                        }
                        None => {
                            json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {
                            "level": "info", "logger": "slow", "data": format!("step {i} of {steps}")}})
                        }
                    };
                    em.notify(note).await;
                }
            }
            Ok(text(format!("slow: done after {steps} steps")))
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
            inc.prepared()
                .put_prepared(rec)
                .await
                .map_err(|e| error(code::INTERNAL, &e.to_string(), Value::Null))?;
            let mut r = text(id.clone());
            r["structuredContent"] = json!({ "record": id });
            Ok(r)
        }
        Call::Commit { record } => {
            let found = inc
                .prepared()
                .get_prepared(record)
                .await
                .map_err(|e| error(code::INTERNAL, &e.to_string(), Value::Null))?;
            let permissive =
                inc.env.settings.placement.resume == crate::config::ResumePolicy::Permissive;
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
        Call::CounterIncrement => {
            let _running = exec(false).await.map_err(unrecorded)?;
            let n = inc
                .env
                .shared
                .increment_counter("counter")
                .await
                .map_err(|e| error(code::INTERNAL, &e.to_string(), Value::Null))?;
            let mut r = text(n.to_string());
            r["structuredContent"] = json!({ "value": n });
            Ok(r)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_validates() {
        assert_eq!(
            parse("echo", &json!({"text": "a"})).unwrap(),
            Call::Echo { text: "a".into() }
        );
        assert!(parse("echo", &json!({})).is_err());
        assert!(parse("slow", &json!({"steps": 1, "delay_ms": 999_999})).is_err());
        assert!(parse("nope", &json!({})).is_err());
        assert_eq!(
            parse("counter_increment", &json!({})).unwrap(),
            Call::CounterIncrement
        );
    }

    #[test]
    fn every_listed_tool_says_whether_it_has_a_side_effect() {
        let args = json!({"text": "t", "steps": 0, "delay_ms": 0, "prompt": "p", "item": 1, "record": "r"});
        let effects: Vec<(String, bool)> = list()
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                let name = t["name"].as_str().unwrap();
                (
                    name.to_owned(),
                    parse(name, &args).unwrap().has_side_effect(),
                )
            })
            .collect();
        let named = |n: &str| effects.iter().find(|(t, _)| t == n).unwrap().1;
        assert!(!named("echo") && !named("slow") && !named("generate"));
        assert!(named("prepare") && named("commit") && named("counter_increment"));
    }
}
