//! Never a hang: a call ends by its deadline, or at once with its answer, whatever the
//! server does with the streams it no longer needs, and wherever the call is awaited.
//!
//! A call that moves on (to its next MRTR round, or to polling the task it became) while the
//! server holds its first stream open with keep-alive comments must not keep reading that
//! stream: the first exchange is finished when its answer arrives. And a stream that ends a
//! moment after its answer is read to its end in the background, briefly, so its connection
//! is reused rather than closed.

use std::time::Duration;

use mcp_resume::Client;
use serde_json::json;

use crate::harness::{echo, tool_calls, within};
use crate::modern_server::{builder, complete, result_event, task_status, ModernServer};
use crate::server::{echo_result, Reply, Request, Step};

const DEADLINE: Duration = Duration::from_secs(3);
/// Past every call's deadline here (3 s, and the harness's 5 s for legacy calls), with
/// slack: what has not ended by then hangs. That a call ends with its answer rather than at
/// its deadline is shown by its succeeding (it would fail `Timeout`).
const ENDS_BY: Duration = Duration::from_secs(7);

/// An SSE answer carrying `event`, then keep-alive comments on a stream held open.
fn held_open(event: String) -> Reply {
    Reply::sse_head().write(event).then(Step::Trickle {
        bytes: ": keep-alive\n\n".into(),
        every: Duration::from_millis(20),
        forever: true,
    })
}

/// Round 1 is `input_required` (its state only) on a stream held open; round 2 completes.
fn mrtr(req: &Request) -> Option<Reply> {
    if !tool_calls(req) {
        return None;
    }
    if req.params()["requestState"].is_string() {
        return Some(complete(req, echo_result("round two")));
    }
    let round = json!({"resultType": "input_required", "requestState": "r1"});
    Some(held_open(result_event(req, round)))
}

/// The call becomes a task on a stream held open; the first poll finds it completed.
fn task(req: &Request) -> Option<Reply> {
    if tool_calls(req) {
        let mut created = task_status("t-1", "working");
        created["resultType"] = json!("task");
        return Some(held_open(result_event(req, created)));
    }
    req.is_rpc("tasks/get").then(|| {
        let mut done = task_status("t-1", "completed");
        done["result"] = echo_result("round two");
        complete(req, done)
    })
}

/// The call returns its answer at once, and the client closed the first stream.
async fn answered_at_once(what: &str, server: &ModernServer, client: &Client) {
    let started = std::time::Instant::now();
    let result = within(what, ENDS_BY, client.call_tool(echo("x").timeout(DEADLINE)))
        .await
        .unwrap_or_else(|message| panic!("{message}; the server saw {:?}", server.labels()))
        .unwrap_or_else(|err| panic!("{what}: {err}"));
    assert_eq!(result.text(), "round two", "{what}");
    let first = server.wait_for(tool_calls).await;
    let outcome = server.wait_done(first.seq, ENDS_BY).await;
    assert!(
        outcome.peer_gone,
        "{what}: the first stream was left open ({:?} after the call)",
        started.elapsed()
    );
}

async fn moved_on_on_the_drivers_runtime(what: &str, script: fn(&Request) -> Option<Reply>) {
    let server = ModernServer::start(script).await;
    let client = builder(&server).build().unwrap();
    answered_at_once(what, &server, &client).await;
}

/// The driver runs on a runtime of its own; the call is awaited on the test's.
async fn moved_on_on_another_runtime(what: &str, script: fn(&Request) -> Option<Reply>) {
    let server = ModernServer::start(script).await;
    let client = builder(&server).build().unwrap();
    let drivers = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let connecting = client.clone();
    drivers
        .spawn(async move { connecting.connect().await })
        .await
        .unwrap()
        .unwrap();
    answered_at_once(what, &server, &client).await;
    drivers.shutdown_background();
}

#[tokio::test]
async fn an_mrtr_round_on_a_stream_held_open_does_not_hold_the_call() {
    moved_on_on_the_drivers_runtime("MRTR, driver's runtime", mrtr).await;
}

#[tokio::test]
async fn an_mrtr_round_on_a_stream_held_open_does_not_hold_a_call_on_another_runtime() {
    moved_on_on_another_runtime("MRTR, another runtime", mrtr).await;
}

#[tokio::test]
async fn a_task_on_a_stream_held_open_does_not_hold_the_call() {
    moved_on_on_the_drivers_runtime("task, driver's runtime", task).await;
}

#[tokio::test]
async fn a_task_on_a_stream_held_open_does_not_hold_a_call_on_another_runtime() {
    moved_on_on_another_runtime("task, another runtime", task).await;
}

/// A server that ends each SSE answer 20 ms after its response event (chunked, on a
/// connection kept alive): the client reads the end in the background, so connections go
/// back to the pool instead of one new connection per call.
#[tokio::test]
async fn sse_answers_ending_a_moment_late_keep_their_connection() {
    use crate::harness::builder as legacy_builder;
    use crate::server::{sse_event, Server};

    let server = Server::start(|req| {
        if !tool_calls(req) {
            return Reply::good();
        }
        let event = sse_event(
            None,
            &json!({"jsonrpc": "2.0", "id": req.rpc_id(), "result": echo_result("late")}),
        );
        let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\
                    Transfer-Encoding: chunked\r\n\r\n";
        Reply::raw(head)
            .write(format!("{:x}\r\n{event}\r\n", event.len()))
            .pause(Duration::from_millis(20))
            .write("0\r\n\r\n")
            .keep_alive()
    })
    .await;
    let client = legacy_builder(&server).build().unwrap();
    for n in 0..50 {
        let result = within("late end", ENDS_BY, client.call_tool(echo("x")))
            .await
            .unwrap()
            .unwrap_or_else(|err| panic!("call {n}: {err}"));
        assert_eq!(result.text(), "late");
        // The next call once the server has ended this answer (else a new connection is
        // the pool's right answer).
        let call = server.wait_nth(n + 1, tool_calls).await;
        server.wait_done(call.seq, ENDS_BY).await;
    }
    let mut connections: Vec<u64> = server.matching(tool_calls).iter().map(|r| r.conn).collect();
    connections.sort_unstable();
    connections.dedup();
    assert!(
        connections.len() <= 3,
        "{} connections for 50 calls",
        connections.len()
    );
}

/// A task store that panics recording a task: the panic costs the record, never the call or
/// the client (the store runs outside the session's lock, in no task that keeps deadlines).
#[tokio::test]
#[allow(deprecated)] // the task store's path, kept for migration
async fn a_task_store_that_panics_costs_its_record_only() {
    struct Panicking;
    impl mcp_resume::TaskStore for Panicking {
        fn created(&self, _: mcp_resume::StoredTask) {
            panic!("a task store's bug");
        }
        fn finished(&self, _: &str) {
            panic!("a task store's bug");
        }
        fn pending(&self) -> Vec<mcp_resume::StoredTask> {
            Vec::new()
        }
    }
    let server = ModernServer::start(|req| {
        if tool_calls(req) {
            let mut created = task_status("t-1", "working");
            created["resultType"] = json!("task");
            return Some(complete(req, created));
        }
        req.is_rpc("tasks/get").then(|| {
            let mut done = task_status("t-1", "completed");
            done["result"] = echo_result("done");
            complete(req, done)
        })
    })
    .await;
    let client = builder(&server)
        .task_store(std::sync::Arc::new(Panicking))
        .build()
        .unwrap();
    for _ in 0..2 {
        let result = within("panicking store", ENDS_BY, client.call_tool(echo("x")))
            .await
            .unwrap()
            .unwrap_or_else(|err| panic!("the call failed: {err}"));
        assert_eq!(result.text(), "done");
    }
    within("ping", ENDS_BY, client.ping())
        .await
        .unwrap()
        .unwrap();
}
