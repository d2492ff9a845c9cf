//! The modern era (2026-07-28) against a hostile server: endless or oversized MRTR rounds,
//! tasks that never end, answer garbage or change their id, `subscriptions/listen` floods and
//! silences, the modern errors on every retry, header values no header can carry, an endless
//! discovery and an unknown `resultType`.
//!
//! Same checks as the legacy cases: the error kind, the time to return, this thread's peak
//! heap growth, what the server saw (request counts and bodies), and that the same client
//! works again once the server behaves.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use mcp_resume::proto::limits::{MAX_INPUTS_PER_ROUND, MAX_INPUT_ROUNDS};
use mcp_resume::proto::CallStage;
use mcp_resume::{ErrorKind, Ledger, MemoryLedger, ToolCall};
use serde_json::{json, Value};

use crate::harness::{
    assert_kind, echo, failing, heavy, initializes, tool_calls, within, Probe, MAX_BODY, MIB,
};
use crate::modern_server::{
    acknowledgement, assert_usable, builder, complete, list_changed, rpc_error, task_status, tools,
    ModernServer, MODERN,
};
use crate::server::{Reply, Request, Step};

const LIMIT: Duration = Duration::from_secs(3);

/// How a case's server answers a request.
type Script = fn(&Request) -> Reply;

fn polls(r: &Request) -> bool {
    r.is_rpc("tasks/get")
}

fn discovers(r: &Request) -> bool {
    r.is_rpc("server/discover")
}

fn listens(r: &Request) -> bool {
    r.is_rpc("subscriptions/listen")
}

/// No modern client ever sends `initialize` or a session header.
fn assert_modern_wire(what: &str, server: &ModernServer) {
    assert_eq!(
        server.count(initializes),
        0,
        "{what}: {:?}",
        server.labels()
    );
    assert!(
        server.requests().iter().all(|r| r.session_id().is_none()),
        "{what}: a session id on the wire"
    );
}

/// Connects `client` to `server`, within the limit.
async fn connected(server: &ModernServer, client: &mcp_resume::Client) {
    within("connect", LIMIT, client.connect())
        .await
        .unwrap()
        .unwrap_or_else(|err| panic!("connect: {err}; the server saw {:?}", server.labels()));
}

#[tokio::test]
async fn endless_input_rounds_end_after_the_round_limit() {
    let what = "endless input_required";
    // Each round asks for nothing but its state back: the client re-sends at once, so only
    // the round limit stops it.
    let server = ModernServer::start(|req| {
        tool_calls(req).then(|| {
            let round = req.params()["requestState"]
                .as_str()
                .and_then(|s| s.parse::<u32>().ok())
                .unwrap_or(0);
            complete(
                req,
                json!({"resultType": "input_required", "requestState": (round + 1).to_string()}),
            )
        })
    })
    .await;
    let client = builder(&server).build().unwrap();
    connected(&server, &client).await;
    let probe = Probe::start();
    let (err, took) = failing(what, LIMIT, client.call_tool(echo("x"))).await;
    assert_kind(what, &err, ErrorKind::Protocol);
    probe.assert_memory(what, 2 * MIB);
    let calls = server.matching(tool_calls);
    assert_eq!(
        calls.len(),
        MAX_INPUT_ROUNDS as usize + 1,
        "{what}: the first request and one per round ({took:?})"
    );
    // Each round echoed the state it was given, under a JSON-RPC id of its own.
    for (n, call) in calls.iter().enumerate().skip(1) {
        assert_eq!(call.params()["requestState"], n.to_string(), "{what}");
    }
    let mut ids: Vec<String> = calls.iter().map(|c| c.rpc_id().to_string()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), calls.len(), "{what}: an id reused");
    assert_modern_wire(what, &server);
    assert_usable(what, &server, &client).await;
}

#[tokio::test]
async fn endless_input_requests_ask_the_handler_once_per_round_up_to_the_limit() {
    let what = "endless inputRequests";
    let server = ModernServer::start(|req| {
        tool_calls(req).then(|| {
            complete(
                req,
                json!({"resultType": "input_required", "requestState": "s",
                    "inputRequests": {"roots": {"method": "roots/list"}}}),
            )
        })
    })
    .await;
    let asked = Arc::new(AtomicUsize::new(0));
    let counter = asked.clone();
    let client = builder(&server)
        .on_server_request(move |_| {
            counter.fetch_add(1, Ordering::SeqCst);
            async { Ok(json!({"roots": []})) }
        })
        .build()
        .unwrap();
    connected(&server, &client).await;
    let (err, _) = failing(what, LIMIT, client.call_tool(echo("x"))).await;
    assert_kind(what, &err, ErrorKind::Protocol);
    let rounds = MAX_INPUT_ROUNDS as usize;
    assert_eq!(
        asked.load(Ordering::SeqCst),
        rounds,
        "{what}: handler calls"
    );
    let calls = server.matching(tool_calls);
    assert_eq!(calls.len(), rounds + 1, "{what}");
    assert!(calls[1..]
        .iter()
        .all(|c| c.params()["inputResponses"]["roots"] == json!({"roots": []})));
    assert_usable(what, &server, &client).await;
}

#[tokio::test]
async fn an_oversized_request_state_is_refused_with_the_body_limit() {
    let what = "oversized requestState";
    let _heavy = heavy().await;
    let server = ModernServer::start(|req| {
        tool_calls(req).then(|| {
            let head = format!(
                "{{\"jsonrpc\":\"2.0\",\"id\":{},\"result\":{{\"resultType\":\"input_required\",\"requestState\":\"",
                req.rpc_id()
            );
            Reply::head(200, &[("Content-Type", "application/json")])
                .write(head)
                .then(Step::Fill(b's', 10 * MIB as u64))
                .write("\"}}")
        })
    })
    .await;
    let client = builder(&server).build().unwrap();
    connected(&server, &client).await;
    let probe = Probe::start();
    let (err, _) = failing(what, LIMIT, client.call_tool(echo("x"))).await;
    assert_kind(what, &err, ErrorKind::TooLarge);
    probe.assert_memory(what, 4 * MIB);
    let call = server.wait_for(tool_calls).await;
    let outcome = server.wait_done(call.seq, LIMIT).await;
    assert!(
        outcome.written < (MAX_BODY + 2 * MIB) as u64,
        "{what}: the server wrote {} bytes",
        outcome.written
    );
    assert_eq!(server.count(tool_calls), 1, "{what}: never re-sent");
    assert_usable(what, &server, &client).await;
}

#[tokio::test]
async fn a_large_request_state_is_echoed_each_round_without_piling_up() {
    let what = "large requestState each round";
    let _heavy = heavy().await;
    // Just under the body limit: every round is accepted, echoed once, then dropped.
    let state = "s".repeat(MAX_BODY - 1024);
    let server = ModernServer::start(move |req| {
        tool_calls(req).then(|| {
            complete(
                req,
                json!({"resultType": "input_required", "requestState": state}),
            )
        })
    })
    .await;
    let client = builder(&server).build().unwrap();
    connected(&server, &client).await;
    let probe = Probe::start();
    let (err, _) = failing(what, LIMIT, client.call_tool(echo("x"))).await;
    assert_kind(what, &err, ErrorKind::Protocol);
    // A few copies of one state at a time (read, parsed, kept, sent: about 2 MiB), not one
    // more per round (16 rounds would add 4 MiB).
    probe.assert_memory(what, 3 * MIB);
    let calls = server.matching(tool_calls);
    assert_eq!(calls.len(), MAX_INPUT_ROUNDS as usize + 1, "{what}");
    assert_eq!(
        calls[1].params()["requestState"].as_str().map(str::len),
        Some(MAX_BODY - 1024),
        "{what}: echoed unchanged"
    );
    assert_usable(what, &server, &client).await;
}

/// An `input_required` answer asking for `n` roots lists.
fn asking_for(req: &Request, n: usize) -> Reply {
    let inputs: serde_json::Map<String, Value> = (0..n)
        .map(|n| (format!("i{n}"), json!({"method": "roots/list"})))
        .collect();
    complete(
        req,
        json!({"resultType": "input_required", "requestState": "s", "inputRequests": inputs}),
    )
}

/// A client whose handler answers every input, counting them.
fn counting_inputs(server: &ModernServer) -> (mcp_resume::Client, Arc<AtomicUsize>) {
    let asked = Arc::new(AtomicUsize::new(0));
    let counter = asked.clone();
    let client = builder(server)
        .on_server_request(move |_| {
            counter.fetch_add(1, Ordering::SeqCst);
            async { Ok(json!({"roots": []})) }
        })
        .build()
        .unwrap();
    (client, asked)
}

#[tokio::test]
async fn a_round_of_the_most_inputs_is_answered_and_one_more_is_refused() {
    let what = "inputs per round";
    let server = ModernServer::start(|req| {
        tool_calls(req).then(|| match req.params().get("inputResponses") {
            None => asking_for(req, MAX_INPUTS_PER_ROUND),
            Some(_) => asking_for(req, MAX_INPUTS_PER_ROUND + 1),
        })
    })
    .await;
    let (client, asked) = counting_inputs(&server);
    connected(&server, &client).await;
    let (err, _) = failing(what, LIMIT, client.call_tool(echo("x"))).await;
    assert_kind(what, &err, ErrorKind::Protocol);
    assert_eq!(asked.load(Ordering::SeqCst), MAX_INPUTS_PER_ROUND, "{what}");
    let calls = server.matching(tool_calls);
    assert_eq!(calls.len(), 2, "{what}: {:?}", server.labels());
    let answered = calls[1].params()["inputResponses"]
        .as_object()
        .map(|m| m.len());
    assert_eq!(answered, Some(MAX_INPUTS_PER_ROUND), "{what}");
    assert_usable(what, &server, &client).await;
}

#[tokio::test]
async fn oversized_input_requests_are_refused_before_any_handler_runs() {
    let what = "oversized inputRequests";
    // A thousand handler runs (sampling, say: a model call each) for one round.
    let server = ModernServer::start(|req| tool_calls(req).then(|| asking_for(req, 1000))).await;
    let (client, asked) = counting_inputs(&server);
    connected(&server, &client).await;
    let probe = Probe::start();
    let (err, _) = failing(what, LIMIT, client.call_tool(echo("x"))).await;
    assert_kind(what, &err, ErrorKind::Protocol);
    probe.assert_memory(what, 4 * MIB);
    assert_eq!(asked.load(Ordering::SeqCst), 0, "{what}: handler calls");
    assert!(err.to_string().contains("1000 inputs"), "{what}: {err}");
    assert_eq!(server.count(tool_calls), 1, "{what}: {:?}", server.labels());
    assert_usable(what, &server, &client).await;
}

/// A task asking for more inputs at once than an MRTR round may: refused before any handler
/// runs, as the round would be, and the task cancelled (nobody will answer it).
#[tokio::test]
async fn a_task_asking_for_too_many_inputs_is_refused_before_any_handler_runs() {
    let what = "a task's oversized inputRequests";
    let server = ModernServer::start(|req| {
        if tool_calls(req) {
            let mut created = task_status("t-1", "working");
            created["resultType"] = json!("task");
            return Some(complete(req, created));
        }
        polls(req).then(|| {
            let inputs: serde_json::Map<String, Value> = (0..1000)
                .map(|n| (format!("i{n}"), json!({"method": "roots/list"})))
                .collect();
            let mut status = task_status("t-1", "input_required");
            status["inputRequests"] = Value::Object(inputs);
            complete(req, status)
        })
    })
    .await;
    let (client, asked) = counting_inputs(&server);
    connected(&server, &client).await;
    let (err, _) = failing(what, LIMIT, client.call_tool(echo("x"))).await;
    assert_kind(what, &err, ErrorKind::Protocol);
    assert!(err.to_string().contains("1000 inputs"), "{what}: {err}");
    assert_eq!(asked.load(Ordering::SeqCst), 0, "{what}: handler calls");
    let cancel = server.wait_for(|r| r.is_rpc("tasks/cancel")).await;
    assert_eq!(cancel.params()["taskId"], "t-1", "{what}");
    assert_usable(what, &server, &client).await;
}

#[tokio::test]
async fn a_task_that_never_ends_is_bounded_by_the_deadline_and_kept_in_the_ledger() {
    let what = "endless task";
    let server = ModernServer::start(|req| {
        if tool_calls(req) {
            let mut created = task_status("t-forever", "working");
            created["resultType"] = json!("task");
            return Some(complete(req, created));
        }
        polls(req).then(|| complete(req, task_status("t-forever", "working")))
    })
    .await;
    let ledger = Arc::new(MemoryLedger::new());
    let client = builder(&server).ledger(ledger.clone()).build().unwrap();
    connected(&server, &client).await;
    let deadline = Duration::from_millis(400);
    let probe = Probe::start();
    let (err, took) = failing(what, LIMIT, client.call_tool(echo("x").timeout(deadline))).await;
    assert_kind(what, &err, ErrorKind::Timeout);
    assert!(took >= deadline, "{what}: returned after {took:?}");
    probe.assert_memory(what, MIB);
    // Polled at the server's 10 ms interval, no faster, for the deadline.
    let polled = server.count(polls);
    assert!(
        (5..=deadline.as_millis() as usize / 10 + 5).contains(&polled),
        "{what}: {polled} polls in {took:?}"
    );
    assert!(server
        .matching(polls)
        .iter()
        .all(|p| p.params()["taskId"] == "t-forever" && p.header("mcp-name") == Some("t-forever")));
    // The deadline bounds the wait, not the task: it stays recorded to be resumed, and
    // nothing cancelled it.
    assert_eq!(pending_tasks(&ledger).await, ["t-forever"], "{what}");
    assert_eq!(server.count(|r| r.is_rpc("tasks/cancel")), 0, "{what}");
    assert_usable(what, &server, &client).await;
}

/// A timeout that restarts on progress is still the call's timeout: when it lapses on a
/// task polled "working", only the wait ends, as at a plain deadline; the task is not
/// cancelled and stays recorded to be resumed.
#[tokio::test]
async fn a_task_silent_past_a_timeout_reset_on_progress_is_kept_not_cancelled() {
    let what = "endless task, timeout reset on progress";
    let server = ModernServer::start(|req| {
        if tool_calls(req) {
            let mut created = task_status("t-forever", "working");
            created["resultType"] = json!("task");
            return Some(complete(req, created));
        }
        if req.is_rpc("tasks/cancel") {
            return Some(complete(req, json!({})));
        }
        polls(req).then(|| complete(req, task_status("t-forever", "working")))
    })
    .await;
    let ledger = Arc::new(MemoryLedger::new());
    let client = builder(&server).ledger(ledger.clone()).build().unwrap();
    connected(&server, &client).await;
    let idle = Duration::from_millis(300);
    let call = echo("x").timeout(idle).reset_timeout_on_progress(true);
    let (err, took) = failing(what, LIMIT, client.call_tool(call)).await;
    assert_kind(what, &err, ErrorKind::Timeout);
    assert!(err.may_have_run(), "{what}: {err:?}");
    assert!(took >= idle, "{what}: returned after {took:?}");
    assert!(server.count(polls) >= 2, "{what}: polled while waiting");
    assert_eq!(pending_tasks(&ledger).await, ["t-forever"], "{what}");
    // After a request sent later was answered: a cancellation would have gone out before it.
    assert_usable(what, &server, &client).await;
    assert_eq!(server.count(|r| r.is_rpc("tasks/cancel")), 0, "{what}");
}

/// A call that becomes task `t-1`, whose polls `poll` answers: it fails with `expect`, and
/// the task stays recorded (nothing says it ended), to be resumed.
async fn task_case(
    what: &str,
    poll: Script,
    expect: ErrorKind,
) -> (ModernServer, mcp_resume::Client) {
    let server = ModernServer::start(move |req| {
        if tool_calls(req) {
            let mut created = task_status("t-1", "working");
            created["resultType"] = json!("task");
            return Some(complete(req, created));
        }
        polls(req).then(|| poll(req))
    })
    .await;
    let ledger = Arc::new(MemoryLedger::new());
    let client = builder(&server).ledger(ledger.clone()).build().unwrap();
    connected(&server, &client).await;
    let probe = Probe::start();
    let (err, took) = failing(what, LIMIT, client.call_tool(echo("x"))).await;
    assert_kind(what, &err, expect);
    // The task runs on (it is kept to be resumed): a framework retrying the call on the
    // error's word would run it twice.
    assert!(err.may_have_run(), "{what}: {err:?}");
    probe.assert_memory(what, MIB);
    eprintln!(
        "{what}: {err} after {took:?}, {} polls",
        server.count(polls)
    );
    assert_eq!(
        server.count(tool_calls),
        1,
        "{what}: the call itself never re-sent"
    );
    assert_eq!(pending_tasks(&ledger).await, ["t-1"], "{what}");
    (server, client)
}

/// The tasks `ledger` keeps for a later `recover`.
async fn pending_tasks(ledger: &MemoryLedger) -> Vec<String> {
    ledger
        .entries()
        .await
        .unwrap()
        .into_iter()
        .filter_map(|e| match e.stage() {
            CallStage::Task { task_id } => Some(task_id.clone()),
            _ => None,
        })
        .collect()
}

/// The polls after the first failed one came after a backoff that grew.
fn assert_backoff(what: &str, server: &ModernServer) {
    let at: Vec<_> = server.matching(polls).iter().map(|p| p.at).collect();
    let gaps: Vec<Duration> = at.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(gaps.len() >= 2, "{what}: {gaps:?}");
    assert!(
        gaps.iter().all(|g| *g >= Duration::from_millis(5)),
        "{what}: {gaps:?}"
    );
    assert!(gaps.last() > gaps.first(), "{what}: no growth in {gaps:?}");
}

#[tokio::test]
async fn a_task_poll_answered_5xx_backs_off_and_gives_up() {
    let what = "tasks/get 503";
    // The task may still end well: its outcome is unknown, and its id is kept to resume it.
    let (server, client) = task_case(what, |_| Reply::status(503), ErrorKind::OutcomeUnknown).await;
    let polled = server.count(polls);
    let max = crate::harness::fast_policy().max_attempts as usize;
    assert!(
        (2..=max + 1).contains(&polled),
        "{what}: {polled} polls, at most {max} retries"
    );
    assert_backoff(what, &server);
    assert_usable(what, &server, &client).await;
}

#[tokio::test]
async fn a_task_poll_answered_with_garbage_is_retried_boundedly() {
    let what = "tasks/get garbage";
    let (server, client) = task_case(
        what,
        |_| {
            Reply::full(
                200,
                &[("Content-Type", "application/json")],
                "{\"jsonrpc\":",
            )
        },
        ErrorKind::OutcomeUnknown,
    )
    .await;
    let polled = server.count(polls);
    let max = crate::harness::fast_policy().max_attempts as usize;
    assert!((2..=max + 1).contains(&polled), "{what}: {polled} polls");
    assert_backoff(what, &server);
    assert_usable(what, &server, &client).await;
}

#[tokio::test]
async fn a_task_completed_without_its_result_fails_the_call() {
    // A completed task carries its final result (SEP-2663); one that does not has lost it, or
    // is not yet readable: an empty result in its place would be a success nobody produced.
    let what = "task completed without a result";
    let (server, client) = task_case(
        what,
        |req| complete(req, task_status("t-1", "completed")),
        ErrorKind::Protocol,
    )
    .await;
    assert_eq!(server.count(polls), 1, "{what}");
    assert_usable(what, &server, &client).await;
}

#[tokio::test]
async fn a_task_created_completed_without_its_result_is_polled_for_it() {
    // The call's own answer is the task, already completed (a quick tool): a task's final
    // result is what `tasks/get` returns, so it is polled for, once, instead of the call
    // failing on an answer that never was to carry the result.
    let what = "task created completed";
    let server = ModernServer::start(|req| {
        if tool_calls(req) {
            let mut created = task_status("t-1", "completed");
            created["resultType"] = json!("task");
            return Some(complete(req, created));
        }
        polls(req).then(|| {
            let mut status = task_status("t-1", "completed");
            status["result"] = crate::server::echo_result("done");
            complete(req, status)
        })
    })
    .await;
    let client = builder(&server).build().unwrap();
    connected(&server, &client).await;
    let result = within(what, LIMIT, client.call_tool(echo("x")))
        .await
        .unwrap();
    assert_eq!(result.unwrap().text(), "done", "{what}");
    assert_eq!(server.count(polls), 1, "{what}");
    assert_eq!(server.count(tool_calls), 1, "{what}");
    assert_usable(what, &server, &client).await;
}

#[tokio::test]
async fn a_task_poll_answered_with_something_not_a_task_fails_the_call() {
    let what = "tasks/get answers no task";
    let (server, client) = task_case(
        what,
        |req| complete(req, json!({"status": 42, "whatever": [1, 2, 3]})),
        ErrorKind::Protocol,
    )
    .await;
    assert_eq!(server.count(polls), 1, "{what}");
    assert_usable(what, &server, &client).await;
}

#[tokio::test]
async fn a_task_whose_id_changes_between_polls_fails_the_call() {
    let what = "task id changes";
    let (server, client) = task_case(
        what,
        |req| {
            let mut done = task_status("t-2", "completed");
            done["result"] = crate::server::echo_result("someone else's");
            complete(req, done)
        },
        ErrorKind::Protocol,
    )
    .await;
    let polled = server.matching(polls);
    assert_eq!(polled.len(), 1, "{what}");
    assert_eq!(polled[0].params()["taskId"], "t-1", "{what}");
    assert_usable(what, &server, &client).await;
}

#[tokio::test]
async fn a_task_poll_answered_with_a_json_rpc_error_says_the_task_may_have_run() {
    let what = "tasks/get -32602";
    let (server, client) = task_case(
        what,
        |req| rpc_error(req, 200, -32602, json!(null)),
        ErrorKind::Rpc,
    )
    .await;
    assert_eq!(server.count(polls), 1, "{what}");
    assert_usable(what, &server, &client).await;
}

#[tokio::test]
async fn a_task_poll_refused_4xx_with_a_json_rpc_error_says_the_task_may_have_run() {
    let what = "tasks/get 400 -32602";
    let (server, client) = task_case(
        what,
        |req| rpc_error(req, 400, -32602, json!(null)),
        ErrorKind::Rpc,
    )
    .await;
    assert_eq!(server.count(polls), 1, "{what}");
    assert_usable(what, &server, &client).await;
}

/// A call that becomes task `t-1` whose first poll answers "failed" with `error`: the
/// call's error, within the limit, on a client whose body limit lets the answer in.
async fn failed_task(what: &str, error: Value) -> (ModernServer, mcp_resume::Error) {
    let server = ModernServer::start(move |req| {
        if tool_calls(req) {
            let mut created = task_status("t-1", "working");
            created["resultType"] = json!("task");
            return Some(complete(req, created));
        }
        polls(req).then(|| {
            let mut failed = task_status("t-1", "failed");
            failed["error"] = error.clone();
            complete(req, failed)
        })
    })
    .await;
    let client = builder(&server).max_body_size(4 * MIB).build().unwrap();
    connected(&server, &client).await;
    let (err, _) = failing(what, LIMIT, client.call_tool(echo("x"))).await;
    assert_usable(what, &server, &client).await;
    (server, err)
}

#[tokio::test]
async fn a_failed_tasks_megabyte_error_message_is_cut_as_a_json_rpc_errors_is() {
    let what = "task failed with a 1 MiB message";
    let (_server, err) =
        failed_task(what, json!({"code": -32000, "message": "x".repeat(MIB)})).await;
    assert_kind(what, &err, ErrorKind::Rpc);
    let rpc = err.rpc_error().unwrap();
    assert_eq!(rpc.code, -32000, "{what}");
    assert_eq!(rpc.message.len(), 1024, "{what}");
    assert!(
        err.message().len() <= 1100,
        "{what}: {} bytes",
        err.message().len()
    );
    assert!(err.to_string().len() <= 1100, "{what}");
}

#[tokio::test]
async fn a_task_id_of_a_megabyte_fails_the_call_before_it_is_announced_or_polled() {
    let what = "1 MiB task id";
    let server = ModernServer::start(|req| {
        tool_calls(req).then(|| {
            let mut created = task_status(&"t".repeat(MIB), "working");
            created["resultType"] = json!("task");
            complete(req, created)
        })
    })
    .await;
    let ledger = Arc::new(MemoryLedger::new());
    let client = builder(&server)
        .max_body_size(4 * MIB)
        .ledger(ledger.clone())
        .build()
        .unwrap();
    connected(&server, &client).await;
    let mut events = client.events();
    let (err, _) = failing(what, LIMIT, client.call_tool(echo("x"))).await;
    // The server broke the protocol, as with an over-long session or event id; the task it
    // made may run on, so the call may have run.
    assert_kind(what, &err, ErrorKind::Protocol);
    assert!(err.may_have_run(), "{what}: {err:?}");
    assert!(err.to_string().len() <= 1100, "{what}");
    assert_eq!(server.count(polls), 0, "{what}: {:?}", server.labels());
    assert!(pending_tasks(&ledger).await.is_empty(), "{what}");
    while let Some(Some(event)) = events.next().now_or_never() {
        assert!(
            !matches!(event, mcp_resume::SessionEvent::TaskCreated { .. }),
            "{what}: announced"
        );
    }
    assert_usable(what, &server, &client).await;
}

#[tokio::test]
async fn endless_task_inputs_end_after_the_round_limit() {
    let what = "endless task inputs";
    // Every poll asks for a new input: without a bound, the app's handler runs every 10 ms
    // until the deadline.
    let asked_for = Arc::new(AtomicUsize::new(0));
    let polled = asked_for.clone();
    let server = ModernServer::start(move |req| {
        if tool_calls(req) {
            let mut created = task_status("t-1", "working");
            created["resultType"] = json!("task");
            return Some(complete(req, created));
        }
        if req.is_rpc("tasks/update") {
            return Some(complete(req, json!({})));
        }
        polls(req).then(|| {
            let n = polled.fetch_add(1, Ordering::SeqCst);
            let mut status = task_status("t-1", "input_required");
            status["inputRequests"] = json!({ format!("k{n}"): {"method": "roots/list"} });
            complete(req, status)
        })
    })
    .await;
    let asked = Arc::new(AtomicUsize::new(0));
    let counter = asked.clone();
    let client = builder(&server)
        .on_server_request(move |_| {
            counter.fetch_add(1, Ordering::SeqCst);
            async { Ok(json!({"roots": []})) }
        })
        .build()
        .unwrap();
    connected(&server, &client).await;
    let (err, _) = failing(what, LIMIT, client.call_tool(echo("x"))).await;
    assert_kind(what, &err, ErrorKind::Protocol);
    let rounds = MAX_INPUT_ROUNDS as usize;
    assert!(
        asked.load(Ordering::SeqCst) <= rounds,
        "{what}: handler calls"
    );
    assert!(
        server.count(|r| r.is_rpc("tasks/update")) <= rounds,
        "{what}: {:?}",
        server.labels()
    );
    assert_usable(what, &server, &client).await;
}

/// A task id as long as the client takes (1,024 bytes) does not make the ids of its inputs
/// too long to hand to a handler: the input is answered and the task polled to its end.
#[tokio::test]
async fn a_task_with_a_long_id_has_its_inputs_answered() {
    let what = "task id of 1,020 bytes";
    let task_id = "t".repeat(1020);
    let polled = Arc::new(AtomicUsize::new(0));
    let server = ModernServer::start(move |req| {
        if tool_calls(req) {
            let mut created = task_status(&task_id, "working");
            created["resultType"] = json!("task");
            return Some(complete(req, created));
        }
        if req.is_rpc("tasks/update") || req.is_rpc("tasks/cancel") {
            return Some(complete(req, json!({})));
        }
        polls(req).then(|| {
            if polled.fetch_add(1, Ordering::SeqCst) == 0 {
                let mut status = task_status(&task_id, "input_required");
                status["inputRequests"] = json!({"k": {"method": "roots/list"}});
                complete(req, status)
            } else {
                let mut status = task_status(&task_id, "completed");
                status["result"] = json!({"content": []});
                complete(req, status)
            }
        })
    })
    .await;
    let asked = Arc::new(AtomicUsize::new(0));
    let counter = asked.clone();
    let client = builder(&server)
        .on_server_request(move |_| {
            counter.fetch_add(1, Ordering::SeqCst);
            async { Ok(json!({"roots": []})) }
        })
        .build()
        .unwrap();
    connected(&server, &client).await;
    let result = within(what, LIMIT, client.call_tool(echo("x")))
        .await
        .unwrap();
    assert!(result.is_ok(), "{what}: {result:?}");
    assert_eq!(asked.load(Ordering::SeqCst), 1, "{what}: handler calls");
    assert_eq!(
        server.count(|r| r.is_rpc("tasks/cancel")),
        0,
        "{what}: {:?}",
        server.labels()
    );
}

/// An MRTR input whose key is a kilobyte long reaches the handler like any other: the
/// server's key is not what bounds the id the client hands its handler.
#[tokio::test]
async fn an_input_with_a_long_key_is_answered() {
    let what = "MRTR input key of 1,020 bytes";
    let key = "k".repeat(1020);
    let server = ModernServer::start(move |req| {
        tool_calls(req).then(|| {
            if req.params()["inputResponses"].is_null() {
                complete(
                    req,
                    json!({"resultType": "input_required",
                        "inputRequests": { key.clone(): {"method": "roots/list"} }}),
                )
            } else {
                complete(req, json!({"content": [{"type": "text", "text": "done"}]}))
            }
        })
    })
    .await;
    let asked = Arc::new(AtomicUsize::new(0));
    let counter = asked.clone();
    let client = builder(&server)
        .on_server_request(move |_| {
            counter.fetch_add(1, Ordering::SeqCst);
            async { Ok(json!({"roots": []})) }
        })
        .build()
        .unwrap();
    connected(&server, &client).await;
    let result = within(what, LIMIT, client.call_tool(echo("x")))
        .await
        .unwrap();
    assert_eq!(
        result.map(|r| r.text()).ok().as_deref(),
        Some("done"),
        "{what}"
    );
    assert_eq!(asked.load(Ordering::SeqCst), 1, "{what}: handler calls");
}

#[tokio::test]
async fn header_mismatch_on_every_retry_refreshes_once_then_fails() {
    let what = "-32020 always";
    let server = ModernServer::start(|req| {
        tool_calls(req).then(|| rpc_error(req, 400, -32020, Value::Null))
    })
    .await;
    let client = builder(&server).build().unwrap();
    connected(&server, &client).await;
    let call = ToolCall::new("regional", json!({"region": "eu"}));
    let (err, _) = failing(what, LIMIT, client.call_tool(call)).await;
    assert_kind(what, &err, ErrorKind::Rpc);
    assert_eq!(err.rpc_error().map(|e| e.code), Some(-32020), "{what}");
    let labels = server.labels();
    assert_eq!(
        labels[1..],
        ["POST tools/call", "POST tools/list", "POST tools/call"],
        "{what}"
    );
    // The retry mirrored what the fresh list annotates.
    assert_eq!(
        server.matching(tool_calls)[1].header("mcp-param-region"),
        Some("eu")
    );
    assert_usable(what, &server, &client).await;
}

#[tokio::test]
async fn a_disjoint_version_list_at_discovery_fails_without_retrying() {
    let what = "-32022 disjoint at discovery";
    let server = ModernServer::start(|req| {
        discovers(req).then(|| {
            rpc_error(
                req,
                400,
                -32022,
                json!({"supported": ["1999-01-01", "2099-12-31"]}),
            )
        })
    })
    .await;
    let client = builder(&server).build().unwrap();
    let probe = Probe::start();
    let (err, _) = failing(what, LIMIT, client.connect()).await;
    assert_kind(what, &err, ErrorKind::Rpc);
    assert_eq!(err.rpc_error().map(|e| e.code), Some(-32022), "{what}");
    probe.assert_memory(what, MIB);
    assert_eq!(server.count(discovers), 1, "{what}: {:?}", server.labels());
    assert_modern_wire(what, &server);
    assert_usable(what, &server, &client).await;
}

#[tokio::test]
async fn a_disjoint_version_list_on_a_call_is_its_answer() {
    let what = "-32022 disjoint on a call";
    // Discovery lists our revision, the call is refused listing only others: a new
    // handshake would succeed and the call be refused again, until the session is lost.
    let server = ModernServer::start(|req| {
        tool_calls(req).then(|| rpc_error(req, 400, -32022, json!({"supported": ["1999-01-01"]})))
    })
    .await;
    let client = builder(&server).build().unwrap();
    connected(&server, &client).await;
    let probe = Probe::start();
    let (err, _) = failing(what, LIMIT, client.call_tool(echo("x"))).await;
    probe.assert_memory(what, MIB);
    assert_kind(what, &err, ErrorKind::Rpc);
    assert_eq!(err.rpc_error().map(|e| e.code), Some(-32022), "{what}");
    assert_eq!(
        server.labels(),
        ["POST server/discover", "POST tools/call"],
        "{what}"
    );
    assert_usable(what, &server, &client).await;
}

#[tokio::test]
async fn parameter_values_no_header_can_carry_are_encoded_or_left_out() {
    let what = "Mcp-Param values";
    let server = ModernServer::start(|_| None).await;
    let client = builder(&server).build().unwrap();
    within(what, LIMIT, client.list_tools())
        .await
        .unwrap()
        .unwrap();
    let values = [
        json!("line\r\nX-Injected: 1"),
        json!("\u{0}\u{7f}nul and del"),
        json!("=?base64?bm90IG1pbmU=?="),
        json!(12.5),
        json!({"nested": "object"}),
        json!(["array"]),
        json!(1u64 << 60),
    ];
    for value in &values {
        let call = ToolCall::new("regional", json!({"region": value, "text": "ok"}));
        let reply = within(what, LIMIT, client.call_tool(call))
            .await
            .unwrap()
            .unwrap_or_else(|err| panic!("{what}: {value}: {err}"));
        assert_eq!(reply.text(), "ok");
    }
    let calls = server.matching(tool_calls);
    assert_eq!(calls.len(), values.len(), "{what}");
    let sent: Vec<Option<&str>> = calls.iter().map(|c| c.header("mcp-param-region")).collect();
    assert_eq!(
        sent,
        [
            Some("=?base64?bGluZQ0KWC1JbmplY3RlZDogMQ==?="),
            Some("=?base64?AH9udWwgYW5kIGRlbA==?="),
            Some("=?base64?PT9iYXNlNjQ/Ym05MElHMXBibVU9Pz0=?="),
            None,
            None,
            None,
            None,
        ],
        "{what}"
    );
    assert!(
        calls.iter().all(|c| c.header_count("x-injected") == 0),
        "{what}: a header injected"
    );
}

#[tokio::test]
async fn a_parameter_too_long_for_a_header_fails_the_call_alone() {
    let what = "Mcp-Param too long";
    let server = ModernServer::start(|_| None).await;
    let client = builder(&server).build().unwrap();
    within(what, LIMIT, client.list_tools())
        .await
        .unwrap()
        .unwrap();
    let call = ToolCall::new("regional", json!({"region": "r".repeat(256 * 1024)}));
    let probe = Probe::start();
    let (err, _) = failing(what, LIMIT, client.call_tool(call)).await;
    probe.assert_memory(what, 4 * MIB);
    // Mirrored all the same (the specification wants every annotated value in its header);
    // the server refuses the head (431) before reading the call, and it is not sent again.
    // The server closes with the call's bytes unread, so its kernel may reset the connection
    // and the client's kernel drop the 431 still in flight: the client then sees only a
    // broken send, whose outcome it cannot know.
    match err.kind() {
        ErrorKind::Protocol => assert!(err.to_string().contains("431"), "{what}: {err}"),
        ErrorKind::OutcomeUnknown => {}
        other => panic!("{what}: {other:?}: {err}"),
    }
    assert_eq!(server.count(tool_calls), 0, "{what}: {:?}", server.labels());
    assert_usable(what, &server, &client).await;
}

#[tokio::test]
async fn a_discovery_ten_megabytes_long_is_cut_at_the_body_limit() {
    let what = "10 MB discover";
    let _heavy = heavy().await;
    let server = ModernServer::start(|req| {
        discovers(req).then(|| {
            let head = format!(
                "{{\"jsonrpc\":\"2.0\",\"id\":{},\"result\":{{\"supportedVersions\":[\"{MODERN}\"],\"instructions\":\"",
                req.rpc_id()
            );
            Reply::head(200, &[("Content-Type", "application/json")])
                .write(head)
                .then(Step::Fill(b'i', 10 * MIB as u64))
                .write("\"}}")
        })
    })
    .await;
    let client = builder(&server).build().unwrap();
    let probe = Probe::start();
    let (err, _) = failing(what, LIMIT, client.connect()).await;
    assert_kind(what, &err, ErrorKind::TooLarge);
    probe.assert_memory(what, 4 * MIB);
    let discover = server.wait_for(discovers).await;
    let outcome = server.wait_done(discover.seq, LIMIT).await;
    assert!(
        outcome.done.is_some(),
        "{what}: the connection is still held"
    );
    assert!(
        outcome.written < (MAX_BODY + 2 * MIB) as u64,
        "{what}: the server wrote {} bytes",
        outcome.written
    );
    assert_eq!(server.count(discovers), 1, "{what}: {:?}", server.labels());
    assert_usable(what, &server, &client).await;
}

#[tokio::test]
async fn a_result_type_neither_known_nor_absent_fails_the_call() {
    let what = "unknown resultType";
    for result_type in [
        json!("later"),
        json!(7),
        json!(null),
        json!({"complete": true}),
    ] {
        let answer = result_type.clone();
        let server = ModernServer::start(move |req| {
            tool_calls(req).then(|| {
                complete(
                    req,
                    json!({"resultType": answer, "content": [{"type": "text", "text": "x"}]}),
                )
            })
        })
        .await;
        let client = builder(&server).build().unwrap();
        connected(&server, &client).await;
        let (err, _) = failing(what, LIMIT, client.call_tool(echo("x"))).await;
        assert_kind(&format!("{what} {result_type}"), &err, ErrorKind::Protocol);
        assert_eq!(
            server.count(tool_calls),
            1,
            "{what} {result_type}: never re-sent"
        );
        assert_usable(what, &server, &client).await;
    }
}

#[tokio::test]
async fn a_notification_flood_on_subscriptions_listen_stays_bounded() {
    let what = "subscriptions/listen flood";
    let _heavy = heavy().await;
    let server = ModernServer::start(|req| {
        listens(req).then(|| {
            let flood: String = (0..64).map(|_| list_changed(req)).collect();
            Reply::sse_head().write(acknowledgement(req)).endless(flood)
        })
    })
    .await;
    let client = builder(&server).open_listen_stream(true).build().unwrap();
    let mut notes = client.notifications();
    let probe = Probe::start();
    connected(&server, &client).await;
    let first = within(what, LIMIT, notes.next()).await.unwrap().unwrap();
    assert_eq!(first.method, "notifications/tools/list_changed");
    // Calls go on beside the flood.
    for n in 0..5 {
        let text = format!("during {n}");
        let reply = within(what, LIMIT, client.call_tool(echo(&text)))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(reply.text(), text);
    }
    // Then a good part of the flood, read (or dropped for this slow reader) by the client.
    let flood = 40_000;
    let mut received = 0u64;
    within(what, LIMIT, async {
        while received + notes.missed() < flood {
            notes.next().await.expect("the client is alive");
            received += 1;
        }
    })
    .await
    .unwrap();
    let listen = server.wait_for(listens).await;
    let written = server.outcome(listen.seq).written;
    let event = list_changed(&listen).len() as u64;
    assert!(written >= flood * event, "{what}: {written} bytes");
    eprintln!(
        "{what}: {received} notifications received, {} missed, {} MiB written",
        notes.missed(),
        written / MIB as u64
    );
    probe.assert_memory(what, 4 * MIB);
    assert_eq!(server.count(listens), 1, "{what}: {:?}", server.labels());
    drop(notes);
    assert_usable(what, &server, &client).await;
}

/// One `subscriptions/listen` case: `reply` answers every subscription; returns how many
/// the client sent while calls went on, and within a window in which a storm would send
/// dozens.
async fn subscription_case(what: String, reply: Script) -> usize {
    let server = ModernServer::start(move |req| listens(req).then(|| reply(req))).await;
    let client = builder(&server).open_listen_stream(true).build().unwrap();
    connected(&server, &client).await;
    // Calls work all along.
    let answer = within(&what, LIMIT, client.call_tool(echo("beside")))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(answer.text(), "beside");
    // The fast policy backs off 10, 20, 40, 50 ms and gives up: well within the window.
    let storm = server
        .saw_within(Duration::from_millis(500), 8, listens)
        .await;
    assert!(!storm, "{what}: {:?}", server.labels());
    let sent = server.count(listens);
    assert_modern_wire(&what, &server);
    assert_usable(&what, &server, &client).await;
    sent
}

#[tokio::test]
async fn a_subscription_that_fails_or_stays_silent_is_not_reissued_in_a_storm() {
    let what = "subscriptions/listen";
    // A stream that fails is sent again until the policy's attempts are spent.
    let attempts = crate::harness::fast_policy().max_attempts as usize;
    let cases: [(&str, Script, usize); 5] = [
        ("held silent", |_| Reply::sse_head().hang(), 1),
        ("closed at once", |_| Reply::sse(""), attempts),
        ("refused 500", |_| Reply::status(500), attempts),
        (
            "acknowledged, then closed",
            |req| Reply::sse(acknowledgement(req)),
            attempts,
        ),
        (
            "one change, then closed",
            |req| Reply::sse(acknowledgement(req) + &list_changed(req)),
            attempts,
        ),
    ];
    // Side by side: each waits out its window.
    let sent = futures::future::join_all(
        cases
            .iter()
            .map(|(name, reply, _)| subscription_case(format!("{what}, {name}"), *reply)),
    )
    .await;
    for ((name, _, expected), sent) in cases.iter().zip(sent) {
        assert_eq!(sent, *expected, "{what}, {name}: subscriptions sent");
    }
}

/// A tool whose schema annotates `n` properties with `x-mcp-header`s, all distinct, as JSON.
fn heavily_annotated(n: usize) -> String {
    let properties: serde_json::Map<String, Value> = (0..n)
        .map(|i| {
            let property = json!({"type": "string", "x-mcp-header": format!("h{i}")});
            (format!("p{i}"), property)
        })
        .collect();
    json!({"name": "annotated", "inputSchema": {"type": "object", "properties": properties}})
        .to_string()
}

#[tokio::test]
async fn a_tool_list_annotating_every_property_is_read_in_linear_time() {
    let what = "x-mcp-header on 200,000 properties";
    // About 10 MiB: within the default body bound (not the harness's), written once.
    let tool = Arc::new(heavily_annotated(200_000));
    let server = ModernServer::start(move |req| {
        req.is_rpc("tools/list").then(|| {
            let id = req.rpc_id();
            let body = format!(
                r#"{{"jsonrpc":"2.0","id":{id},"result":{{"resultType":"complete","tools":[{tool}]}}}}"#
            );
            Reply::full(200, &[("Content-Type", "application/json")], body)
        })
    })
    .await;
    let client = builder(&server).max_body_size(16 * MIB).build().unwrap();
    connected(&server, &client).await;
    // (How fast such a list is read, linear in its annotations, is a benchmark's concern.)
    let listed = client.list_tools().await.unwrap();
    assert_eq!(listed.len(), 1, "{what}");
    assert_usable(what, &server, &client).await;
}

#[tokio::test]
async fn annotations_under_one_long_property_name_share_its_path() {
    let what = "2,000 annotations under a 64 KiB property name";
    // About 170 KiB of schema: every annotated leaf sits under the same long name, which a
    // copy of each leaf's path would hold 2,000 times (128 MiB).
    let leaves: serde_json::Map<String, Value> = (0..2_000)
        .map(|i| {
            let leaf = json!({"type": "string", "x-mcp-header": format!("a{i}")});
            (format!("a{i}"), leaf)
        })
        .collect();
    let long = "k".repeat(64 * 1024);
    let tool = Arc::new(
        json!({"name": "deep", "inputSchema": {"type": "object", "properties": {
            long: {"type": "object", "properties": leaves}}}})
        .to_string(),
    );
    let server = ModernServer::start(move |req| {
        req.is_rpc("tools/list").then(|| {
            let id = req.rpc_id();
            let body = format!(
                r#"{{"jsonrpc":"2.0","id":{id},"result":{{"resultType":"complete","tools":[{tool}]}}}}"#
            );
            Reply::full(200, &[("Content-Type", "application/json")], body)
        })
    })
    .await;
    let client = builder(&server).max_body_size(MIB).build().unwrap();
    connected(&server, &client).await;
    let probe = Probe::start();
    let listed = within(what, LIMIT, client.list_tools()).await.unwrap();
    assert_eq!(listed.unwrap().len(), 1, "{what}");
    probe.assert_memory(what, 8 * MIB);
    assert_usable(what, &server, &client).await;
}

#[tokio::test]
async fn a_list_whose_cursors_go_round_in_a_circle_ends_when_one_comes_back() {
    let what = "nextCursor A, B, A, …";
    let server = ModernServer::start(|req| {
        req.is_rpc("tools/list").then(|| {
            let cursor = req
                .json
                .as_ref()
                .and_then(|b| b["params"]["cursor"].as_str());
            let next = if cursor == Some("A") { "B" } else { "A" };
            complete(req, json!({"tools": tools()["tools"], "nextCursor": next}))
        })
    })
    .await;
    let client = builder(&server).build().unwrap();
    connected(&server, &client).await;
    within(what, LIMIT, client.list_tools())
        .await
        .unwrap()
        .unwrap();
    // The first page, then `A`, then `B`, which names `A` again.
    assert_eq!(server.count(|r| r.is_rpc("tools/list")), 3, "{what}");
}

#[tokio::test]
async fn lists_naming_new_annotated_tools_each_time_are_not_remembered_without_end() {
    let what = "40 lists of 5,000 new annotated tools";
    let listed = Arc::new(AtomicUsize::new(0));
    let server = ModernServer::start(move |req| {
        req.is_rpc("tools/list").then(|| {
            let round = listed.fetch_add(1, Ordering::SeqCst);
            let tools: Vec<String> = (0..5_000)
                .map(|i| {
                    format!(
                        r#"{{"name":"t{round}-{i}","inputSchema":{{"type":"object","properties":{{"r":{{"type":"string","x-mcp-header":"R"}}}}}}}}"#
                    )
                })
                .collect();
            let body = format!(
                r#"{{"jsonrpc":"2.0","id":{},"result":{{"resultType":"complete","tools":[{}]}}}}"#,
                req.rpc_id(),
                tools.join(",")
            );
            Reply::full(200, &[("Content-Type", "application/json")], body)
        })
    })
    .await;
    let client = builder(&server).max_body_size(16 * MIB).build().unwrap();
    connected(&server, &client).await;
    let probe = Probe::start();
    for _ in 0..40 {
        let tools = within(what, LIMIT, client.list_tools()).await.unwrap();
        assert_eq!(tools.unwrap().len(), 5_000, "{what}");
    }
    // Reading one list peaks at some 40 MiB; remembering the 200,000 tools' annotations
    // took about 65 MiB more.
    probe.assert_memory(what, 72 * MIB);
    assert_usable(what, &server, &client).await;
}
