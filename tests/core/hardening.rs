//! Defects found by running the client against servers nobody here wrote and against
//! deliberately broken ones, pinned at the level of the sans-IO core (virtual time, scripted
//! server). The end-to-end side of each, through the real driver and a raw TCP server, is in
//! `tests/hostile.rs`.

use crate::sim;

use std::time::{Duration, Instant};

use http::HeaderMap;
use mcp_resume::proto::limits::MAX_INPUT_ROUNDS;
use mcp_resume::proto::{
    CallId, CallRequest, Era, HttpMethod, Output, ReinitReason, ResendPolicy, ServerRequest,
    Session, SessionConfig, SessionEvent, Transmit,
};
use mcp_resume::{ErrorKind, ReconnectPolicy};
use serde_json::{json, Value};
use sim::{Fault, SeedGuard, ServerConfig, Sim};

const SEC: Duration = Duration::from_secs(1);

fn connected(config: SessionConfig, server: ServerConfig, seed: u64) -> Sim {
    let mut s = Sim::new(config, server, seed);
    let c = s.connect();
    s.run_until_complete(c, SEC);
    assert!(s.result(c).is_ok(), "connect failed: {:?}", s.result(c));
    s
}

fn initialize_times(s: &Sim) -> Vec<Duration> {
    s.server
        .seen
        .iter()
        .filter(|x| x.rpc_method.as_deref() == Some("initialize"))
        .map(|x| x.at)
        .collect()
}

/// Defect 1: a server that accepts `initialize` and refuses everything after it (404, or a
/// 400 naming the session) used to make the client re-initialize in a tight loop for the
/// whole deadline. A re-initialization that nothing confirmed counts as failed, so they back
/// off exponentially; and the call's re-sends are bounded by `max_attempts` (issue 24, gap 7:
/// it used to end in a terminal `SessionLost` after `max_reinit_failures` instead), after
/// which it fails alone and the client stays usable.
#[test]
fn defect_01_reinit_storm_is_bounded_and_backs_off() {
    for (seed, fault) in [(101, Fault::NotFound), (102, Fault::BadRequestSession)] {
        let _g = SeedGuard(seed);
        let config = SessionConfig::default().with_call_timeout(60 * SEC);
        let mut s = connected(config, ServerConfig::default(), seed);
        s.server
            .fault("a", std::iter::repeat_n(fault.clone(), 1000));
        let c = s.call("a", None);
        s.run_until_complete(c, 60 * SEC);
        assert_eq!(
            s.result(c).as_ref().unwrap_err().kind(),
            ErrorKind::SessionLost
        );
        let policy = ReconnectPolicy::default();
        assert_eq!(s.server.posts_of("a").len() as u32, policy.max_attempts);
        let inits = initialize_times(&s);
        // The first connect, then one re-initialization per failed attempt but the last.
        assert_eq!(inits.len() as u32, policy.max_attempts, "{fault:?}");
        assert!(
            s.server.seen.len() <= 4 * inits.len() + 1,
            "{}",
            s.server.seen.len()
        );
        // Exponential backoff between attempts (the first re-initialization included).
        let gaps: Vec<Duration> = inits.windows(2).map(|w| w[1] - w[0]).collect();
        for (i, gap) in gaps.iter().enumerate().skip(1) {
            let floor = policy.initial_delay * 2u32.pow(i as u32);
            assert!(*gap >= floor, "gap {i} {gap:?} < {floor:?}: {gaps:?}");
        }
        assert!(gaps[0] >= policy.initial_delay, "{gaps:?}");
        // Not terminal: the client still works for a call the server answers (after the
        // backoff reached, now `max_delay`: the server's session is gone again).
        assert!(!s.session.is_lost() && !s.session.is_terminated());
        let b = s.call("b", None);
        s.run_until_complete(b, 15 * SEC);
        assert!(s.result(b).is_ok(), "{:?}", s.result(b));
    }
}

/// The session confirmed by a call, then a rolling deploy: the server forgets it (404) and
/// for 1.5 s the balancer answers `initialize` with 502.
fn rolling_deploy(seed: u64) -> (Sim, Duration) {
    let mut s = connected(SessionConfig::default(), ServerConfig::default(), seed);
    let warm = s.call("warm", None);
    s.run_until_complete(warm, SEC);
    assert!(s.result(warm).is_ok());
    let t0 = s.elapsed();
    s.server.forget_sessions();
    s.server.init_down_until = Some(t0 + 1500 * MS);
    (s, t0)
}

const MS: Duration = Duration::from_millis(1);

/// Issue 24, defect 5: a call waiting through a rolling deploy used to fail `SessionLost`
/// after 0.34 s (5 `initialize`s) although its deadline was 3 s. Re-initialization keeps
/// trying, backing off, while the call waits: it succeeds once the server is back, or ends
/// at its own deadline with the 502 as its cause.
#[test]
fn defect_05_waiting_call_outlives_a_rolling_deploy() {
    let _g = SeedGuard(111);
    let (mut s, t0) = rolling_deploy(111);
    let c = s.call_with("d", None, Some(3 * SEC));
    s.run_until_complete(c, 5 * SEC);
    let took = s.elapsed() - t0;
    match s.result(c) {
        Ok(_) => {
            assert_eq!(s.server.executions_of("d"), 1);
            assert!(took >= 1500 * MS, "{took:?}");
        }
        Err(e) => {
            assert_eq!(e.kind(), ErrorKind::SessionLost, "{e}");
            assert!(took >= 3 * SEC - 10 * MS, "ended after {took:?}: {e}");
            assert!(format!("{e:#}").contains("502"), "{e:#}");
        }
    }
    // Bounded by the backoff: each gap between attempts at least twice the one before.
    let inits: Vec<Duration> = initialize_times(&s)
        .into_iter()
        .filter(|t| *t >= t0)
        .collect();
    assert!(inits.len() >= 7 && inits.len() <= 9, "{inits:?}");
    let gaps: Vec<Duration> = inits.windows(2).map(|w| w[1] - w[0]).collect();
    for (i, gap) in gaps.iter().enumerate() {
        let floor = ReconnectPolicy::default().initial_delay * 2u32.pow(i as u32);
        assert!(*gap >= floor, "gap {i} {gap:?} < {floor:?}: {gaps:?}");
    }
    assert!(!s.session.is_lost());
}

/// Issue 24, defect 5: `SessionLost` used to be terminal: a call made once the server was
/// healthy again still failed at once. A call whose deadline passes during the outage fails
/// `SessionLost` at that deadline; with no call left the client stops after
/// `max_reinit_failures` and reports the session lost; the next call reconnects, no sooner
/// than the backoff reached, and succeeds.
#[test]
fn defect_05_session_lost_is_not_terminal() {
    let _g = SeedGuard(112);
    let (mut s, t0) = rolling_deploy(112);
    let short = s.call_with("short", None, Some(500 * MS));
    s.run_until_complete(short, 2 * SEC);
    let took = s.elapsed() - t0;
    let err = s.result(short).as_ref().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::SessionLost, "{err}");
    assert!(took >= 500 * MS && took < 600 * MS, "{took:?}");
    assert!(format!("{err:#}").contains("502"), "{err:#}");
    // No call waits: the client gives up after `max_reinit_failures` failures in a row.
    s.run_for(t0 + SEC);
    assert!(s.session.is_lost());
    assert!(s
        .events()
        .iter()
        .any(|e| matches!(e, SessionEvent::SessionLost)));
    let failed = initialize_times(&s);
    let last_failed = *failed.last().unwrap();
    let policy = ReconnectPolicy::default();
    assert_eq!(
        failed.iter().filter(|t| **t >= t0).count() as u32,
        policy.max_reinit_failures + 1
    );
    // Nothing is sent while nobody calls.
    s.run_for(t0 + 1200 * MS);
    assert_eq!(initialize_times(&s).len(), failed.len());

    let after = s.call_with("after", None, Some(5 * SEC));
    s.run_until_complete(after, 6 * SEC);
    assert!(s.result(after).is_ok(), "{:?}", s.result(after));
    assert_eq!(s.server.executions_of("after"), 1);
    // The backoff reached was kept: the first attempt for the new call waited it out.
    let revived = initialize_times(&s)[failed.len()];
    let reached = policy.initial_delay * 2u32.pow(policy.max_reinit_failures);
    assert!(
        revived - last_failed >= reached,
        "{:?} after the last failure, backoff reached {reached:?}",
        revived - last_failed
    );
    assert!(!s.session.is_lost());
}

/// Issue 24, gap 7: a 400 whose body merely contains the word "session" is the call's own
/// answer (never executed, nothing to re-initialize), not "session gone".
#[test]
fn defect_07_a_400_mentioning_a_session_is_the_calls_answer() {
    let _g = SeedGuard(113);
    let mut s = connected(SessionConfig::default(), ServerConfig::default(), 113);
    s.server.fault("w", [Fault::BadRequestWord]);
    let c = s.call("w", None);
    s.run_until_complete(c, 5 * SEC);
    let err = s.result(c).as_ref().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Rpc, "{err}");
    assert_eq!(err.rpc_error().map(|e| e.code), Some(-32602));
    assert_eq!(s.server.posts_of("w").len(), 1);
    assert_eq!(s.server.initializes(), 1);
}

/// Issue 24, gap 7: a request that keeps drawing a proxy's 404 used to re-initialize the
/// whole client until `SessionLost`, failing every other call. Its re-sends are bounded by
/// `max_attempts`; then it fails alone and the other call in flight is answered.
#[test]
fn defect_07_repeated_404_on_one_call_is_bounded_by_max_attempts() {
    let _g = SeedGuard(114);
    let config =
        SessionConfig::default().with_reconnect(ReconnectPolicy::default().with_max_attempts(3));
    let mut s = connected(config, ServerConfig::default(), 114);
    let warm = s.call("warm", None);
    s.run_until_complete(warm, SEC);
    s.server
        .fault("a", std::iter::repeat_n(Fault::ProxyNotFound, 1000));
    s.server.slow.insert("b".into(), 300 * MS);
    let a = s.call("a", None);
    let b = s.call("b", None);
    s.run_until_complete(a, 10 * SEC);
    s.run_until_complete(b, 10 * SEC);
    let err = s.result(a).as_ref().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::SessionLost, "{err}");
    assert_eq!(s.server.posts_of("a").len(), 3);
    assert_eq!(s.server.executions_of("a"), 0);
    assert!(s.result(b).is_ok(), "{:?}", s.result(b));
    assert_eq!(s.server.executions_of("b"), 1);
    assert!(s.server.initializes() <= 3, "{}", s.server.initializes());
    assert!(!s
        .events()
        .iter()
        .any(|e| matches!(e, SessionEvent::SessionLost)));
}

/// Defect 1, the other side: a session that works is never counted against the bound, however
/// many times the server forgets it.
#[test]
fn defect_01_confirmed_sessions_reinitialize_without_limit() {
    let _g = SeedGuard(103);
    let mut s = connected(SessionConfig::default(), ServerConfig::default(), 103);
    for round in 0..12 {
        let tag = format!("r{round}");
        s.server.fault(&tag, [Fault::NotFound]);
        let c = s.call(&tag, None);
        s.run_until_complete(c, 5 * SEC);
        assert!(s.result(c).is_ok(), "round {round}: {:?}", s.result(c));
    }
    assert_eq!(initialize_times(&s).len(), 13);
}

/// Defect 2: an idempotency key exists only where it travels on the wire. Every keyed
/// request the client sends carries its key in `_meta` and in the header, and a request that
/// cannot carry one is never re-sent after an unknown outcome, whatever the policy.
#[test]
fn defect_02_only_keys_on_the_wire_make_a_request_resend_safe() {
    let _g = SeedGuard(104);
    let config =
        SessionConfig::default().with_resend_policy(ResendPolicy::AssumeServerDeduplicates);
    let mut s = connected(config, ServerConfig::default(), 104);
    s.server
        .fault("k", [Fault::LoseBeforeHead { executed: true }]);
    let keyed = s.call("k", Some("key-1"));
    s.run_until_complete(keyed, 5 * SEC);
    assert!(s.result(keyed).is_ok());
    for post in s.server.posts_of("k") {
        assert_eq!(post.idempotency_header.as_deref(), Some("key-1"));
        assert_eq!(post.idempotency_meta.as_deref(), Some("key-1"));
    }
    assert_eq!(s.server.posts_of("k").len(), 2);

    // A request of another method has no way to carry a key: an interruption leaves its
    // outcome unknown and it is sent once.
    s.server
        .fault("u", [Fault::LoseBeforeHead { executed: true }]);
    let request = CallRequest::new(
        "tools/call",
        Some(serde_json::json!({"name": "echo", "arguments": {"tag": "u"}})),
    );
    assert!(request.idempotency_key().is_none());
    let unkeyed = CallId::next();
    s.session.submit(unkeyed, request, s.now);
    s.pump();
    s.run_until_complete(unkeyed, 5 * SEC);
    assert_eq!(
        s.result(unkeyed).as_ref().unwrap_err().kind(),
        ErrorKind::OutcomeUnknown
    );
    assert_eq!(s.server.posts_of("u").len(), 1);
}

/// Defect 9: the session id is a bearer secret; no `Debug` of the core shows it in full.
#[test]
fn defect_09_debug_never_shows_the_session_id() {
    let _g = SeedGuard(105);
    let mut s = connected(SessionConfig::default(), ServerConfig::default(), 105);
    let sid = s.server.session_ids()[0].clone();
    // Queue a request without draining it, so the session holds it in its queue too.
    s.session
        .submit(CallId::next(), CallRequest::new("ping", None), s.now);
    let dumped = format!("{:?}", s.session);
    assert!(!dumped.contains(&sid), "session id in Session's Debug");
    let transmit = s.session.poll_transmit().expect("a request to send");
    let dumped = format!("{transmit:?}");
    assert!(dumped.contains("mcp-session-id"), "{dumped}");
    assert!(
        !dumped.contains(&sid),
        "session id in Transmit's Debug: {dumped}"
    );
    for (_, request) in &s.sent {
        assert!(!format!("{request:?}").contains(&sid));
    }
}

/// The standalone stream classifies like every other exchange: a 404 to its GET
/// re-initializes through the recovery decision (not a private path), and a re-initialization
/// that keeps being refused the same way stops listening instead of looping.
#[test]
fn listen_stream_session_gone_reinitializes_once() {
    let _g = SeedGuard(106);
    // The first standalone stream is cut after one event, so the client reconnects it.
    let server = ServerConfig {
        listen_events: 1,
        ..ServerConfig::default()
    };
    let mut s = connected(SessionConfig::default(), server, 106);
    // The server forgets the session: the next GET of the standalone stream gets a 404.
    s.server.forget_sessions();
    s.run_for(5 * SEC);
    assert_eq!(
        s.events()
            .iter()
            .filter(|e| matches!(
                e,
                SessionEvent::Reinitialized {
                    reason: ReinitReason::SessionNotFound,
                    ..
                }
            ))
            .count(),
        1,
        "{:?}",
        s.events()
    );
    let gets: Vec<_> = s
        .server
        .seen
        .iter()
        .filter(|x| x.method == HttpMethod::Get)
        .collect();
    let last = gets.last().expect("GETs");
    assert_eq!(
        last.session_id.as_deref(),
        s.server.session_ids().last().map(|x| x.as_str())
    );
}

// --- Issue 24: input rounds, refusals, trust in signals ---------------------------------

const MODERN: &str = "2026-07-28";

/// The sans-IO session against a modern (2026-07-28) server scripted per request and
/// answering at once, in virtual time. The script sees each POST's JSON-RPC body and returns
/// its status and JSON body.
struct Modern {
    session: Session,
    now: Instant,
    /// Every POST body, in order: what the server saw.
    seen: Vec<Value>,
    outputs: Vec<Output>,
}

impl Modern {
    fn new(config: SessionConfig) -> Self {
        Self::auto(config.with_era(Era::Modern))
    }

    /// The same harness with the era as `config` has it (`Era::Auto` by default): the script
    /// answers the probe, and `initialize` if it comes to that.
    fn auto(config: SessionConfig) -> Self {
        let now = Instant::now();
        Modern {
            session: Session::new(config.with_open_listen_stream(false), now),
            now,
            seen: Vec::new(),
            outputs: Vec::new(),
        }
    }

    /// Sends what the session sends, answers through `script`, fires timers due within
    /// `limit`, until nothing is left to do.
    fn run(&mut self, script: &mut dyn FnMut(&Value) -> (u16, Value), limit: Duration) {
        let end = self.now + limit;
        loop {
            let mut progressed = false;
            while let Some(transmit) = self.session.poll_transmit() {
                progressed = true;
                let Transmit::Send(request) = transmit else {
                    continue;
                };
                let body: Value =
                    serde_json::from_slice(request.body.as_deref().unwrap_or(b"null")).unwrap();
                self.seen.push(body.clone());
                let (status, answer) = script(&body);
                let mut headers = HeaderMap::new();
                headers.insert("content-type", "application/json".parse().unwrap());
                let bytes = serde_json::to_vec(&answer).unwrap();
                self.session
                    .handle_head(request.id, status, &headers, self.now);
                self.session.handle_data(request.id, &bytes, self.now);
                self.session.handle_end(request.id, self.now);
            }
            while let Some(output) = self.session.poll_output() {
                progressed = true;
                self.outputs.push(output);
            }
            if progressed {
                continue;
            }
            match self.session.poll_timeout() {
                Some(at) if at <= end => {
                    self.now = self.now.max(at);
                    self.session.handle_timeout(self.now);
                }
                _ => break,
            }
        }
    }

    fn submit(&mut self, tag: &str) -> CallId {
        let request = CallRequest::new(
            "tools/call",
            Some(json!({"name": "act", "arguments": {"tag": tag}})),
        );
        let id = CallId::next();
        self.session.submit(id, request, self.now);
        id
    }

    fn posts_of(&self, tag: &str) -> Vec<&Value> {
        self.seen
            .iter()
            .filter(|b| b["method"] == "tools/call" && b["params"]["arguments"]["tag"] == tag)
            .collect()
    }

    fn server_requests(&self) -> Vec<&ServerRequest> {
        self.outputs
            .iter()
            .filter_map(|o| match o {
                Output::ServerRequest(r) => Some(r),
                _ => None,
            })
            .collect()
    }

    fn events(&self) -> Vec<&SessionEvent> {
        self.outputs
            .iter()
            .filter_map(|o| match o {
                Output::Event(e) => Some(e),
                _ => None,
            })
            .collect()
    }

    fn result(&self, call: CallId) -> Option<&Result<Value, mcp_resume::Error>> {
        self.outputs.iter().find_map(|o| match o {
            Output::Completed { call: c, result } if *c == call => Some(result),
            _ => None,
        })
    }
}

fn ok(body: &Value, result: Value) -> (u16, Value) {
    (
        200,
        json!({"jsonrpc": "2.0", "id": body["id"], "result": result}),
    )
}

/// A legacy server's answers to the handshake (`initialize`, `notifications/initialized`);
/// anything else is `None`.
fn legacy_handshake(body: &Value) -> Option<(u16, Value)> {
    match body["method"].as_str()? {
        "initialize" => Some(ok(
            body,
            json!({"protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                "serverInfo": {"name": "legacy", "version": "1"}}),
        )),
        "notifications/initialized" => Some((202, Value::Null)),
        _ => None,
    }
}

/// JSON-RPC's "method not found" to `body`.
fn method_not_found(body: &Value) -> (u16, Value) {
    (
        200,
        json!({"jsonrpc": "2.0", "id": body["id"],
            "error": {"code": -32601, "message": "Method not found"}}),
    )
}

/// `body` refused by a server that speaks only the modern revision now (a redeploy).
fn modern_only(body: &Value) -> (u16, Value) {
    (
        400,
        json!({"jsonrpc": "2.0", "id": body["id"], "error": {"code": -32022,
            "message": "Unsupported protocol version",
            "data": {"supported": [MODERN]}}}),
    )
}

/// A server redeployed to speak only the modern revision: a legacy request refused, the
/// probe answered, a modern call run.
fn redeployed_modern_only(body: &Value) -> (u16, Value) {
    let enveloped = body["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] == MODERN;
    if !enveloped {
        return modern_only(body);
    }
    discover(body).unwrap_or_else(|| {
        ok(
            body,
            json!({"resultType": "complete", "content": [{"type": "text", "text": "ran"}]}),
        )
    })
}

/// `server/discover` answered (tasks extension included); anything else is `None`.
fn discover(body: &Value) -> Option<(u16, Value)> {
    (body["method"] == "server/discover").then(|| {
        ok(
            body,
            json!({"resultType": "complete", "supportedVersions": [MODERN],
                "capabilities": {"tools": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}}}),
        )
    })
}

/// Issue 24, defect 1: an MRTR call waiting for the application's input is not sent again by
/// a re-initialization (here: a version refusal on another call). Only `Waiting` calls go
/// out when the new session is established; the round goes out once, when answered.
#[test]
fn issue24_defect_1_a_reinitialization_does_not_resend_a_call_awaiting_input() {
    let mut m = Modern::new(SessionConfig::default());
    let mut refused_once = false;
    let mut script = |body: &Value| -> (u16, Value) {
        if let Some(answer) = discover(body) {
            return answer;
        }
        let tag = body["params"]["arguments"]["tag"]
            .as_str()
            .unwrap_or_default();
        match tag {
            "ask" if body["params"]["inputResponses"].is_null() => ok(
                body,
                json!({"resultType": "input_required", "requestState": "s1",
                    "inputRequests": {"q": {"method": "elicitation/create", "params": {}}}}),
            ),
            "other" if !refused_once => {
                refused_once = true;
                modern_only(body)
            }
            _ => ok(
                body,
                json!({"resultType": "complete", "content": [{"type": "text", "text": tag}]}),
            ),
        }
    };
    let ask = m.submit("ask");
    m.run(&mut script, SEC);
    assert_eq!(
        m.server_requests().len(),
        1,
        "the server's input is asked for"
    );
    let other = m.submit("other");
    m.run(&mut script, 10 * SEC);
    assert!(
        matches!(m.result(other), Some(Ok(_))),
        "{:?}",
        m.result(other)
    );
    assert_eq!(
        m.seen
            .iter()
            .filter(|b| b["method"] == "server/discover")
            .count(),
        2,
        "the version refusal re-initialized"
    );
    // The call awaiting input was not sent again, and no second round was opened.
    assert_eq!(m.posts_of("ask").len(), 1, "{:#?}", m.posts_of("ask"));
    assert_eq!(m.server_requests().len(), 1);
    assert!(m.result(ask).is_none());
    // The application answers: the round goes out once, with the answer.
    let input = m.server_requests()[0].id.clone();
    m.session
        .respond(input, Ok(json!({"action": "accept"})), m.now);
    m.run(&mut script, SEC);
    let posts = m.posts_of("ask");
    assert_eq!(posts.len(), 2);
    assert_eq!(posts[1]["params"]["requestState"], "s1");
    assert_eq!(
        posts[1]["params"]["inputResponses"]["q"]["action"],
        "accept"
    );
    assert!(matches!(m.result(ask), Some(Ok(_))), "{:?}", m.result(ask));
}

/// Issue 24, trust gap 8: a task's requests for input are bounded by the MRTR round limit,
/// not only by the deadline.
#[test]
fn issue24_gap_8_task_input_rounds_are_bounded() {
    let config = SessionConfig::default().with_call_timeout(Duration::from_secs(365 * 24 * 3600));
    let mut m = Modern::new(config);
    let mut asked = 0u32;
    let mut script = |body: &Value| -> (u16, Value) {
        if let Some(answer) = discover(body) {
            return answer;
        }
        match body["method"].as_str().unwrap_or_default() {
            "tools/call" => ok(
                body,
                json!({"resultType": "task", "taskId": "t-1", "status": "working",
                    "pollIntervalMs": 10}),
            ),
            "tasks/get" => {
                // Every poll asks for one more, fresh input.
                asked += 1;
                ok(
                    body,
                    json!({"resultType": "complete", "taskId": "t-1",
                        "status": "input_required", "pollIntervalMs": 10,
                        "inputRequests": {format!("k{asked}"):
                            {"method": "elicitation/create", "params": {}}}}),
                )
            }
            _ => ok(body, json!({"resultType": "complete"})),
        }
    };
    let call = m.submit("task");
    let mut answered = 0;
    for _ in 0..(2 * MAX_INPUT_ROUNDS) {
        m.run(&mut script, SEC);
        if m.result(call).is_some() {
            break;
        }
        let pending: Vec<_> = m
            .server_requests()
            .into_iter()
            .skip(answered)
            .map(|r| r.id.clone())
            .collect();
        for id in pending {
            answered += 1;
            m.session
                .respond(id, Ok(json!({"action": "accept"})), m.now);
        }
    }
    let result = m.result(call).expect("the call ended");
    assert_eq!(
        result.as_ref().unwrap_err().kind(),
        ErrorKind::Protocol,
        "{result:?}"
    );
    assert_eq!(m.server_requests().len() as u32, MAX_INPUT_ROUNDS);
    // The abandoned task is cancelled on the server.
    assert!(m.seen.iter().any(|b| b["method"] == "tasks/cancel"));
}

/// Issue 24, trust gap 8: `Session::resume_task` with a timeout beyond what the clock can
/// represent waits "practically forever", not "not at all".
#[test]
fn issue24_gap_8_resume_task_with_a_huge_timeout_does_not_expire_at_once() {
    let mut m = Modern::new(SessionConfig::default());
    let mut polls = 0;
    let mut script = |body: &Value| -> (u16, Value) {
        if let Some(answer) = discover(body) {
            return answer;
        }
        polls += 1;
        let status = if polls < 3 { "working" } else { "completed" };
        ok(
            body,
            json!({"resultType": "complete", "taskId": "t-9", "status": status,
                "pollIntervalMs": 1000, "result": {"content": []}}),
        )
    };
    let call = CallId::next();
    m.session
        .resume_task(call, "t-9", Some(Duration::MAX), m.now);
    m.run(&mut script, 10 * SEC);
    assert!(
        matches!(m.result(call), Some(Ok(_))),
        "{:?}",
        m.result(call)
    );
    assert_eq!(
        m.seen.iter().filter(|b| b["method"] == "tasks/get").count(),
        3
    );
}

/// `resume_task` is a submission like any other: on a closed session it is refused at once
/// (it used to be registered and wait for its deadline).
#[test]
fn resuming_a_task_on_a_closed_session_is_refused_at_once() {
    let mut m = Modern::new(SessionConfig::default());
    let mut script =
        |body: &Value| -> (u16, Value) { discover(body).unwrap_or_else(|| ok(body, json!({}))) };
    m.session.connect(m.now);
    m.run(&mut script, SEC);
    m.session.close(m.now);
    m.run(&mut script, SEC);
    let call = CallId::next();
    m.session.resume_task(call, "t-1", None, m.now);
    m.run(&mut script, 10 * SEC);
    let error = m
        .result(call)
        .expect("answered at once")
        .as_ref()
        .expect_err("refused");
    assert_eq!(error.kind(), ErrorKind::Closed, "{error}");
    assert!(!m.seen.iter().any(|b| b["method"] == "tasks/get"));
}

/// Issue 24, trust gap 6: the extension's rejection marker on a refused POST proves nothing
/// unless it comes where the extension defines it (a 404, from a session that negotiated the
/// extension). A 500 carrying it, from a server with or without the extension, leaves an
/// unkeyed call's outcome unknown: it ran, and is not sent again.
#[test]
fn issue24_gap_6_a_rejection_marker_on_a_500_does_not_resend_an_unkeyed_call() {
    const MARKED: &[(&str, &str)] = &[("mcp-resume-rejected", "not_owner")];
    for (seed, ext) in [(2401u64, false), (2402, true)] {
        let _g = SeedGuard(seed);
        let server = ServerConfig {
            ext,
            idempotency: ext,
            ..ServerConfig::default()
        };
        let mut s = connected(SessionConfig::default(), server, seed);
        s.server.fault(
            "u",
            [Fault::Status {
                status: 500,
                headers: MARKED,
                executed: true,
            }],
        );
        let c = s.call("u", None);
        s.run_until_complete(c, 5 * SEC);
        assert_eq!(
            s.result(c).as_ref().unwrap_err().kind(),
            ErrorKind::OutcomeUnknown,
            "ext {ext}: {:?}",
            s.result(c)
        );
        assert_eq!(s.server.posts_of("u").len(), 1, "ext {ext}");
        assert_eq!(s.server.executions_of("u"), 1, "ext {ext}");
        assert_eq!(s.server.initializes(), 1, "ext {ext}: no re-initialization");
    }
}

/// Issue 24, defect 2, at the core: a refusal of the credentials is the error of the call
/// whose own request was refused (`Unauthorized`, with the challenge), and of no other; a 401
/// on a resume GET leaves the interrupted call's outcome unknown (its POST may have run).
#[test]
fn issue24_defect_2_unauthorized_only_for_the_refused_request_itself() {
    const CHALLENGE: &[(&str, &str)] = &[(
        "www-authenticate",
        r#"Bearer error="invalid_token", resource_metadata="https://as.example/prm""#,
    )];
    let _g = SeedGuard(2403);
    let mut s = connected(SessionConfig::default(), ServerConfig::default(), 2403);
    s.server.fault(
        "refused",
        [Fault::Status {
            status: 401,
            headers: CHALLENGE,
            executed: false,
        }],
    );
    let c = s.call("refused", None);
    s.run_until_complete(c, 5 * SEC);
    let err = s.result(c).as_ref().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unauthorized, "{err}");
    let challenge = err.auth_challenge().expect("the challenge is on the error");
    assert_eq!(challenge.error.as_deref(), Some("invalid_token"));
    assert_eq!(s.server.posts_of("refused").len(), 1);

    // The POST ran and its stream broke; the resume GET is refused the credentials.
    s.server.fault(
        "cut",
        [
            Fault::CutAfterPriming,
            Fault::ResumeStatus {
                status: 401,
                headers: CHALLENGE,
            },
        ],
    );
    let c = s.call("cut", None);
    s.run_until_complete(c, 5 * SEC);
    let err = s.result(c).as_ref().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::OutcomeUnknown, "{err}");
    assert_eq!(s.server.executions_of("cut"), 1);
    assert_eq!(s.server.posts_of("cut").len(), 1);
}

/// Issue 24, trust gap 8: a 503 with `Retry-After` is "not processed" by default (the call is
/// sent again after the delay); an application can turn that off, and the 503 then leaves an
/// unkeyed call's outcome unknown.
#[test]
fn issue24_gap_8_a_503_with_retry_after_can_be_taken_as_may_have_run() {
    const UNAVAILABLE: &[(&str, &str)] = &[("retry-after", "1")];
    for (seed, not_processed) in [(2404u64, true), (2405, false)] {
        let _g = SeedGuard(seed);
        let config = SessionConfig::default().with_unavailable_not_processed(not_processed);
        let mut s = connected(config, ServerConfig::default(), seed);
        s.server.fault(
            "busy",
            [Fault::Status {
                status: 503,
                headers: UNAVAILABLE,
                executed: false,
            }],
        );
        let c = s.call("busy", None);
        s.run_until_complete(c, 10 * SEC);
        let posts = s.server.posts_of("busy").len();
        if not_processed {
            assert!(s.result(c).is_ok(), "{:?}", s.result(c));
            assert_eq!(posts, 2);
        } else {
            assert_eq!(
                s.result(c).as_ref().unwrap_err().kind(),
                ErrorKind::OutcomeUnknown
            );
            assert_eq!(posts, 1);
        }
    }
}

/// Issue 33, item 10: after a keyed call was re-sent on the same session, the application's
/// cancellation names every JSON-RPC id the call may still be running under, not only the
/// latest: the first execution is told too.
#[test]
fn issue33_a_cancellation_after_a_keyed_resend_names_every_send() {
    let _g = SeedGuard(133);
    let config =
        SessionConfig::default().with_resend_policy(ResendPolicy::AssumeServerDeduplicates);
    let mut s = connected(config, ServerConfig::default(), 133);
    s.server
        .fault("k", [Fault::LoseBeforeHead { executed: true }]);
    s.server.slow.insert("k".into(), 2 * SEC);
    let call = s.call("k", Some("key-1"));
    let start = s.elapsed();
    s.run_for(start + 3 * SEC);
    let mut sent: Vec<String> = s
        .server
        .posts_of("k")
        .iter()
        .map(|p| p.rpc_id.clone().unwrap().to_string())
        .collect();
    assert_eq!(sent.len(), 2, "the first send and its re-send are out");
    assert!(!s.completions.contains_key(&call), "still running");
    s.session.cancel(call, s.now);
    s.pump();
    let mut cancelled: Vec<String> = s
        .sent
        .iter()
        .filter_map(|(_, r)| serde_json::from_slice::<Value>(r.body.as_deref()?).ok())
        .filter(|b| b["method"] == "notifications/cancelled")
        .map(|b| b["params"]["requestId"].to_string())
        .collect();
    sent.sort();
    cancelled.sort();
    assert_eq!(cancelled, sent);
}

// --- Answers and notifications whose POST never left -------------------------------------

/// A legacy session made ready by a scripted handshake (no listen stream).
fn legacy_ready() -> (Session, Instant) {
    legacy_ready_with(json!({}))
}

/// [`legacy_ready`], its server's `initialize` answering `capabilities`.
fn legacy_ready_with(capabilities: Value) -> (Session, Instant) {
    let config = SessionConfig::default()
        .with_era(Era::Legacy)
        .with_open_listen_stream(false);
    let (session, now, _) = legacy_connected(config, capabilities);
    (session, now)
}

/// A legacy session on `config` through its handshake (`initialize` answering
/// `capabilities`, anything else 202), and the GET of its standalone stream, left unanswered,
/// if it opened one.
pub(crate) fn legacy_connected(
    config: SessionConfig,
    capabilities: Value,
) -> (Session, Instant, Option<mcp_resume::proto::HttpId>) {
    let now = Instant::now();
    let mut session = Session::new(config, now);
    session.connect(now);
    let mut get = None;
    while let Some(transmit) = session.poll_transmit() {
        let Transmit::Send(request) = transmit else {
            continue;
        };
        if request.method == HttpMethod::Get {
            get = Some(request.id);
            continue;
        }
        let body: Value = serde_json::from_slice(request.body.as_deref().unwrap_or(b"null"))
            .unwrap_or(Value::Null);
        let mut headers = HeaderMap::new();
        if body["method"] == "initialize" {
            headers.insert("content-type", "application/json".parse().unwrap());
            headers.insert("mcp-session-id", "s-1".parse().unwrap());
            let answer = json!({"jsonrpc": "2.0", "id": body["id"], "result": {
                "protocolVersion": "2025-11-25", "capabilities": capabilities,
                "serverInfo": {"name": "scripted", "version": "1"}}});
            session.handle_head(request.id, 200, &headers, now);
            session.handle_data(request.id, &serde_json::to_vec(&answer).unwrap(), now);
        } else {
            session.handle_head(request.id, 202, &headers, now);
        }
        session.handle_end(request.id, now);
    }
    (session, now, get)
}

/// The POSTs the session sends next: their exchange ids and bodies.
fn posts(session: &mut Session) -> Vec<(mcp_resume::proto::HttpId, Value)> {
    std::iter::from_fn(|| session.poll_transmit())
        .filter_map(|t| match t {
            Transmit::Send(r) if r.method == HttpMethod::Post => {
                let body = serde_json::from_slice(r.body.as_deref()?).ok()?;
                Some((r.id, body))
            }
            _ => None,
        })
        .collect()
}

/// The server sends requests `ids` on the SSE answer of a call it keeps open; the session
/// hands them to the app. Returns the call's exchange (still open).
fn server_asks(session: &mut Session, now: Instant, ids: &[&str]) -> mcp_resume::proto::HttpId {
    let call = CallId::next();
    session.submit(
        call,
        CallRequest::new("tools/call", Some(json!({"name": "ask"}))),
        now,
    );
    let (http, _) = posts(session).pop().expect("the call is sent");
    let mut headers = HeaderMap::new();
    headers.insert("content-type", "text/event-stream".parse().unwrap());
    session.handle_head(http, 200, &headers, now);
    for id in ids {
        let ask = json!({"jsonrpc": "2.0", "id": id, "method": "roots/list"});
        session.handle_data(http, format!("data: {ask}\n\n").as_bytes(), now);
    }
    http
}

/// The ids of the server requests the session handed to the app since last asked.
fn handed(session: &mut Session) -> Vec<String> {
    std::iter::from_fn(|| session.poll_output())
        .filter_map(|o| match o {
            Output::ServerRequest(r) => Some(r.id.to_string().trim_matches('"').to_owned()),
            _ => None,
        })
        .collect()
}

/// An answer to a server request whose POST never left (a connection that could not be made,
/// or a pooled one whose runtime had shut down) is sent again: nothing else would send it, and
/// the server would wait for it forever. Only while it never left, and a bounded number of
/// times; a POST lost after it may have left is not repeated.
#[test]
fn an_answer_whose_post_never_left_is_sent_again() {
    use mcp_resume::proto::TransportFailure;
    use mcp_resume::RequestId;
    let (mut session, now) = legacy_ready();
    assert!(posts(&mut session).is_empty(), "the handshake is over");
    server_asks(&mut session, now, &["ask-1", "ask-2"]);
    let ask = RequestId::from_json(&json!("ask-1")).unwrap();
    session.respond(ask, Ok(json!({"answered": true})), now);
    let mut sent = posts(&mut session);
    assert_eq!(sent.len(), 1);
    let first = sent[0].1.clone();
    assert_eq!(first["id"], "ask-1");
    // Never left, three times: sent three times in all, then given up.
    for _ in 0..3 {
        let (http, body) = sent.pop().expect("sent again");
        assert_eq!(body, first);
        session.handle_error(http, TransportFailure::Connect("gone".into()), now);
        sent = posts(&mut session);
    }
    assert!(sent.is_empty(), "{sent:?}");
    // Lost after it may have left: not repeated.
    let ask = RequestId::from_json(&json!("ask-2")).unwrap();
    session.respond(ask, Ok(json!({"answered": true})), now);
    let (http, _) = posts(&mut session).pop().expect("sent");
    session.handle_error(http, TransportFailure::Lost("cut".into()), now);
    assert!(posts(&mut session).is_empty());
    // Abandoned by a connection whose runtime went (written or not): sent again.
    server_asks(&mut session, now, &["ask-3"]);
    session.respond(
        RequestId::from_json(&json!("ask-3")).unwrap(),
        Ok(json!({})),
        now,
    );
    let (http, first) = posts(&mut session).pop().expect("sent");
    session.handle_error(http, TransportFailure::Abandoned("gone".into()), now);
    let again = posts(&mut session);
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].1, first);
    // A notification alike.
    session.notify(
        "notifications/progress",
        Some(json!({"progressToken": 1})),
        now,
    );
    let (http, body) = posts(&mut session).pop().expect("sent");
    assert_eq!(body["method"], "notifications/progress");
    session.handle_error(http, TransportFailure::Connect("gone".into()), now);
    let again = posts(&mut session);
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].1, body);
}

/// A call of the ready session `s-1` is refused with 404: the session is re-initialized as
/// `s-2` (its `initialize` and `notifications/initialized` answered; re-sent calls left open).
/// `s-1` never answered a call, so the re-initialization backs off first: the time after it.
fn reinit_to_s2(session: &mut Session, now: Instant) -> Instant {
    let call = CallId::next();
    session.submit(
        call,
        CallRequest::new("tools/call", Some(json!({"name": "x"}))),
        now,
    );
    let (http, _) = posts(session).pop().expect("sent");
    session.handle_head(http, 404, &HeaderMap::new(), now);
    session.handle_end(http, now);
    serve_reinit_as_s2(session, now)
}

/// Serves a re-initialization under way as `s-2`, its backoff run out first; the time then.
fn serve_reinit_as_s2(session: &mut Session, mut now: Instant) -> Instant {
    let mut initialized = serve_as_s2(session, now).0;
    for _ in 0..4 {
        if session.is_ready() && initialized {
            break;
        }
        if let Some(at) = session.poll_timeout().filter(|at| *at > now) {
            now = at;
            session.handle_timeout(now);
        }
        initialized |= serve_as_s2(session, now).0;
    }
    assert!(initialized, "a new session was initialized");
    assert!(session.is_ready());
    now
}

/// A session whose call was answered with a JSON-RPC error works: the server holds it and
/// answered. Its replacement (another call's 404) is not a failed re-initialization, and
/// goes out at once, where a session none of whose calls was ever answered backs off.
#[test]
fn an_error_answer_proves_a_session_works() {
    for answered in [true, false] {
        let (mut session, now) = legacy_ready();
        let _ = posts(&mut session);
        let first = CallId::next();
        session.submit(
            first,
            CallRequest::new("tools/call", Some(json!({"name": "a"}))),
            now,
        );
        let (http, body) = posts(&mut session).pop().expect("sent");
        let mut json = HeaderMap::new();
        json.insert("content-type", "application/json".parse().unwrap());
        if answered {
            let error = json!({"jsonrpc": "2.0", "id": body["id"],
                "error": {"code": -32602, "message": "no such argument"}});
            session.handle_head(http, 200, &json, now);
            session.handle_data(http, &serde_json::to_vec(&error).unwrap(), now);
        } else {
            session.handle_head(http, 200, &json, now);
        }
        session.handle_end(http, now);
        let other = CallId::next();
        session.submit(
            other,
            CallRequest::new("tools/call", Some(json!({"name": "b"}))),
            now,
        );
        let (refused, _) = posts(&mut session).pop().expect("sent");
        session.handle_head(refused, 404, &HeaderMap::new(), now);
        session.handle_end(refused, now);
        let at_once = posts(&mut session)
            .iter()
            .any(|(_, b)| b["method"] == "initialize");
        assert_eq!(at_once, answered, "answered: {answered}");
    }
}

/// Runs the session in virtual time, `serve` answering what it sends, until `call` ends (or
/// nothing is left to do): its result, if it ended.
fn until_ended(
    session: &mut Session,
    call: CallId,
    now: &mut Instant,
    mut serve: impl FnMut(&mut Session, Instant),
) -> Option<Result<Value, mcp_resume::Error>> {
    for _ in 0..64 {
        serve(session, *now);
        while let Some(output) = session.poll_output() {
            if let Output::Completed { call: c, result } = output {
                if c == call {
                    return Some(result);
                }
            }
        }
        let at = session.poll_timeout()?;
        *now = (*now).max(at);
        session.handle_timeout(*now);
    }
    None
}

/// Answers what the session has to send as a server whose new session is `s-2` (no
/// capabilities): `initialize` answered, the rest accepted, a `tools/call` left open. Whether
/// an `initialize` was answered, and how many `tools/call` POSTs went out.
fn serve_as_s2(session: &mut Session, now: Instant) -> (bool, usize) {
    let (mut initialized, mut calls) = (false, 0);
    while let Some(transmit) = session.poll_transmit() {
        let Transmit::Send(request) = transmit else {
            continue;
        };
        let body: Value =
            serde_json::from_slice(request.body.as_deref().unwrap_or(b"null")).unwrap();
        let mut headers = HeaderMap::new();
        if body["method"] == "initialize" {
            headers.insert("content-type", "application/json".parse().unwrap());
            headers.insert("mcp-session-id", "s-2".parse().unwrap());
            let answer = json!({"jsonrpc": "2.0", "id": body["id"], "result": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "serverInfo": {"name": "scripted", "version": "1"}}});
            session.handle_head(request.id, 200, &headers, now);
            session.handle_data(request.id, &serde_json::to_vec(&answer).unwrap(), now);
            initialized = true;
        } else if body["method"] == "tools/call" {
            calls += 1;
            continue;
        } else {
            session.handle_head(request.id, 202, &headers, now);
        }
        session.handle_end(request.id, now);
    }
    (initialized, calls)
}

/// Each server request is answered once, and only in the session that delivered it: a second
/// answer, an answer to an id the server never sent, and a late answer to a request of a
/// session since replaced are dropped; the replacement's server gets only answers to its own
/// requests, even under an id an earlier request had.
#[test]
fn an_answer_reaches_only_the_session_whose_server_asked() {
    use mcp_resume::RequestId;
    let (mut session, now) = legacy_ready();
    let _ = posts(&mut session);
    let id = |s: &str| RequestId::from_json(&json!(s)).unwrap();
    let answer = |n: u32| Ok(json!({"roots": [], "n": n}));

    server_asks(&mut session, now, &["a", "b", "a"]);
    assert_eq!(
        handed(&mut session),
        ["a", "b"],
        "an id waiting already is not handed again"
    );
    session.respond(id("a"), answer(1), now);
    session.respond(id("a"), answer(2), now);
    session.respond(id("never-asked"), answer(3), now);
    let sent = posts(&mut session);
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0].1["id"], "a");
    assert_eq!(sent[0].1["result"]["n"], 1);

    // The session is replaced (its server forgot it); the new one's server asks under "b",
    // an id the old one's request still waiting for an answer had.
    let now = reinit_to_s2(&mut session, now);
    let _ = handed(&mut session);
    session.respond(id("b"), answer(4), now);
    assert!(
        posts(&mut session).is_empty(),
        "the old session's request is not answered in the new one"
    );

    server_asks(&mut session, now, &["b"]);
    assert_eq!(
        handed(&mut session),
        ["b"],
        "the new session's own request under that id"
    );
    session.respond(id("b"), answer(5), now);
    let sent = posts(&mut session);
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0].1["result"]["n"], 5);
}

/// The server requests waiting for the app's answer are bounded: past the bound a request is
/// refused with an error at once, not handed on.
#[test]
fn server_requests_waiting_for_an_answer_are_bounded() {
    use mcp_resume::proto::limits::MAX_OPEN_SERVER_REQUESTS;
    let (mut session, now) = legacy_ready();
    let _ = posts(&mut session);
    let ids: Vec<String> = (0..=MAX_OPEN_SERVER_REQUESTS)
        .map(|n| format!("q{n}"))
        .collect();
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    server_asks(&mut session, now, &ids);
    assert_eq!(handed(&mut session).len(), MAX_OPEN_SERVER_REQUESTS);
    let refused: Vec<Value> = posts(&mut session).into_iter().map(|(_, b)| b).collect();
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0]["id"], format!("q{MAX_OPEN_SERVER_REQUESTS}"));
    assert_eq!(refused[0]["error"]["code"], -32603);
}

/// What concerns a replaced session stays with it, though a stream of its may still be open
/// (a replica still streaming the old session after another one's 404): the old server's
/// requests, a ping included, are neither handed to the app nor answered into the new
/// session; its event ids do not hide the new session's events; a late refusal of one of its
/// POSTs does not tear the new session down, and an answer of its whose POST never left is
/// not sent into the new one. The requests the app still owed it are withdrawn.
#[test]
fn what_arrives_for_a_replaced_session_stays_with_it() {
    use mcp_resume::proto::TransportFailure;
    use mcp_resume::RequestId;
    let id = |s: &str| RequestId::from_json(&json!(s)).unwrap();
    let (mut session, now) = legacy_ready();
    let _ = posts(&mut session);
    let old = server_asks(&mut session, now, &["a", "w"]);
    assert_eq!(handed(&mut session), ["a", "w"]);
    session.respond(id("a"), Ok(json!({"roots": []})), now);
    let (answer_post, _) = posts(&mut session).pop().expect("the answer is sent");
    session.notify(
        "notifications/progress",
        Some(json!({"progressToken": 1})),
        now,
    );
    let (note_post, _) = posts(&mut session).pop().expect("the notification is sent");

    let now = reinit_to_s2(&mut session, now);
    let withdrawn: Vec<RequestId> = std::iter::from_fn(|| session.poll_output())
        .filter_map(|o| match o {
            Output::ServerRequestWithdrawn(id) => Some(id),
            _ => None,
        })
        .collect();
    assert_eq!(withdrawn, [id("w")], "the request still owed is withdrawn");

    // The old stream asks, and numbers its event 1.
    let ask = json!({"jsonrpc": "2.0", "id": "x", "method": "roots/list"});
    let ping = json!({"jsonrpc": "2.0", "id": "p", "method": "ping"});
    session.handle_data(
        old,
        format!("id: 1\ndata: {ask}\n\ndata: {ping}\n\n").as_bytes(),
        now,
    );
    assert!(handed(&mut session).is_empty(), "not handed to the app");
    session.respond(id("x"), Ok(json!({"roots": []})), now);
    assert!(posts(&mut session).is_empty(), "nothing answered into s-2");

    // The new session's stream numbers its event 1 too: another event, delivered.
    let new = server_asks(&mut session, now, &[]);
    let ask = json!({"jsonrpc": "2.0", "id": "y", "method": "roots/list"});
    session.handle_data(new, format!("id: 1\ndata: {ask}\n\n").as_bytes(), now);
    assert_eq!(handed(&mut session), ["y"]);

    // The old session's notification POST is refused as of a session gone, late: s-2 stays.
    session.handle_head(note_post, 404, &HeaderMap::new(), now);
    session.handle_end(note_post, now);
    assert!(session.is_ready(), "the new session is kept");
    // The old answer's POST never left: not sent again into s-2.
    session.handle_error(
        answer_post,
        TransportFailure::Connect("refused".into()),
        now,
    );
    let sent = posts(&mut session);
    assert!(sent.is_empty(), "{sent:?}");
}

/// A cancellation the replaced session's server sends on a stream of that session still open
/// names one of its own requests, not the new session's under the same id: it is not handed
/// out, so a driver that withdraws whatever a cancellation names cannot stop the new
/// session's request with it. One on the new session's stream is handed out.
#[test]
fn a_cancellation_on_a_replaced_sessions_stream_is_not_handed_out() {
    use mcp_resume::RequestId;
    let cancelled = |session: &mut Session| -> Vec<Value> {
        std::iter::from_fn(|| session.poll_output())
            .filter_map(|o| match o {
                Output::Notification { notification, .. }
                    if notification.method == "notifications/cancelled" =>
                {
                    notification.params
                }
                _ => None,
            })
            .collect()
    };
    let (mut session, now) = legacy_ready();
    let _ = posts(&mut session);
    let old = server_asks(&mut session, now, &["a"]);
    assert_eq!(handed(&mut session), ["a"]);
    let now = reinit_to_s2(&mut session, now);
    let _ = handed(&mut session);
    let new = server_asks(&mut session, now, &["a"]);
    assert_eq!(
        handed(&mut session),
        ["a"],
        "s-2's own request under that id"
    );

    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": "a"}});
    let note = json!({"jsonrpc": "2.0", "method": "notifications/message",
        "params": {"level": "info", "data": "working"}});
    session.handle_data(
        old,
        format!("data: {cancel}\n\ndata: {note}\n\n").as_bytes(),
        now,
    );
    let outputs: Vec<Output> = std::iter::from_fn(|| session.poll_output()).collect();
    let methods: Vec<&str> = outputs
        .iter()
        .filter_map(|o| match o {
            Output::Notification { notification, .. } => Some(notification.method.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(
        methods,
        ["notifications/message"],
        "only the old stream's other notification is handed out"
    );
    session.respond(
        RequestId::from_json(&json!("a")).unwrap(),
        Ok(json!({"roots": []})),
        now,
    );
    let sent = posts(&mut session);
    assert_eq!(sent.len(), 1, "s-2's request is still answered: {sent:?}");

    server_asks(&mut session, now, &["b"]);
    assert_eq!(handed(&mut session), ["b"]);
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": "b"}});
    session.handle_data(new, format!("data: {cancel}\n\n").as_bytes(), now);
    assert_eq!(
        cancelled(&mut session),
        [json!({"requestId": "b"})],
        "the current session's cancellation is handed out"
    );
}

/// A server request whose method is longer than any a handler takes is not handed out: it is
/// refused at once as a method not found, in an answer that names neither the method nor
/// anything else the server sent beyond the id. A method at the bound is handed out.
#[test]
fn a_server_request_with_an_overlong_method_is_refused_not_handed_out() {
    // The longest method handed out.
    const MAX_METHOD: usize = 256;
    let (mut session, now) = legacy_ready();
    let _ = posts(&mut session);
    let stream = server_asks(&mut session, now, &[]);
    let ask = |id: &str, len: usize| {
        let method = "m".repeat(len);
        let ask = json!({"jsonrpc": "2.0", "id": id, "method": method});
        format!("data: {ask}\n\n")
    };
    session.handle_data(stream, ask("long", 1 << 20).as_bytes(), now);
    assert!(handed(&mut session).is_empty(), "handed out");
    let sent = posts(&mut session);
    assert_eq!(sent.len(), 1, "answered at once: {sent:?}");
    let answer = &sent[0].1;
    assert_eq!(answer["id"], "long");
    assert_eq!(answer["error"]["code"], -32601);
    assert!(
        answer.to_string().len() < 1024,
        "the answer echoes the method: {} bytes",
        answer.to_string().len()
    );

    let at_bound = ask("ok", MAX_METHOD);
    session.handle_data(stream, at_bound.as_bytes(), now);
    assert_eq!(handed(&mut session), ["ok"]);
    assert!(posts(&mut session).is_empty());
}

/// A keyed call interrupted where it may have run is re-sent only to a server that
/// deduplicates its key: when the session it was to be re-sent on is replaced by one whose
/// server does not, it ends `OutcomeUnknown` instead of running a second time.
#[test]
fn a_keyed_resend_waits_for_a_server_that_deduplicates_or_ends_unknown() {
    use mcp_resume::proto::TransportFailure;
    use mcp_resume::IdempotencyKey;
    let dedups = json!({"experimental": {"resumeSafety": {"idempotency": {}}}});
    let (mut session, now) = legacy_ready_with(dedups);
    let _ = posts(&mut session);
    let keyed = CallId::next();
    let key = IdempotencyKey::new("key-1").unwrap();
    let request = CallRequest::tool_call(json!({"name": "pay", "arguments": {}}), Some(key));
    session.submit(keyed, request, now);
    let (http, _) = posts(&mut session).pop().expect("sent");
    // Its stream starts (the server runs it), then is cut before any answer.
    let mut headers = HeaderMap::new();
    headers.insert("content-type", "text/event-stream".parse().unwrap());
    session.handle_head(http, 200, &headers, now);
    let progress = json!({"jsonrpc": "2.0", "method": "notifications/message",
        "params": {"level": "info", "data": "working"}});
    session.handle_data(http, format!("data: {progress}\n\n").as_bytes(), now);
    session.handle_error(http, TransportFailure::Lost("cut".into()), now);
    // Before its re-send, the session is replaced by one whose server has no idempotency.
    reinit_to_s2(&mut session, now);
    let outputs: Vec<Output> = std::iter::from_fn(|| session.poll_output()).collect();
    let ended = outputs.iter().find_map(|o| match o {
        Output::Completed { call, result } if *call == keyed => Some(result),
        _ => None,
    });
    let error = ended
        .expect("the call ended")
        .as_ref()
        .expect_err("not a success");
    assert_eq!(error.kind(), ErrorKind::OutcomeUnknown, "{error}");
    assert!(
        !outputs.iter().any(|o| matches!(o,
            Output::Event(SessionEvent::Redispatched { call, .. }) if *call == keyed)),
        "not re-sent"
    );
}

/// "An earlier send may have run" outlives a later send refused unprocessed: a keyed call
/// whose first POST was cut where it may have run, and whose re-send met a 404, is not sent
/// to the replacement session when that one's server does not deduplicate keys; it ends
/// `OutcomeUnknown`.
#[test]
fn a_refused_resend_does_not_erase_that_an_earlier_send_may_have_run() {
    use mcp_resume::proto::TransportFailure;
    use mcp_resume::IdempotencyKey;
    let dedups = json!({"experimental": {"resumeSafety": {"idempotency": {}}}});
    let (mut session, mut now) = legacy_ready_with(dedups);
    let _ = posts(&mut session);
    let keyed = CallId::next();
    let key = IdempotencyKey::new("key-1").unwrap();
    let request = CallRequest::tool_call(json!({"name": "pay", "arguments": {}}), Some(key));
    session.submit(keyed, request, now);
    let (http, _) = posts(&mut session).pop().expect("sent");
    session.handle_error(http, TransportFailure::Lost("cut".into()), now);
    // Re-sent (the server deduplicates); the re-send lands where the session is gone.
    let resend = loop {
        if let Some((h, _)) = posts(&mut session).pop() {
            break h;
        }
        now = now.max(session.poll_timeout().expect("a re-send is due"));
        session.handle_timeout(now);
    };
    session.handle_head(resend, 404, &HeaderMap::new(), now);
    session.handle_end(resend, now);
    // The replacement session's server has no idempotency.
    let mut sent_to_s2 = 0;
    let ended = until_ended(&mut session, keyed, &mut now, |session, now| {
        sent_to_s2 += serve_as_s2(session, now).1;
    });
    assert_eq!(sent_to_s2, 0, "not sent to a server that ignores its key");
    let error = ended.expect("the call ended").expect_err("not a success");
    assert_eq!(error.kind(), ErrorKind::OutcomeUnknown, "{error}");
}

/// A call's POST abandoned by its connection (the runtime running it went, after it took the
/// request): it may have been written, so an unkeyed call ends `OutcomeUnknown` and is not
/// sent again; a connection that could not be made proves it never left, and it is re-sent.
#[test]
fn an_abandoned_call_post_may_have_run() {
    use mcp_resume::proto::TransportFailure;
    for (failure, resent) in [
        (
            TransportFailure::Abandoned("dispatch task is gone".into()),
            false,
        ),
        (TransportFailure::Connect("refused".into()), true),
    ] {
        let (mut session, now) = legacy_ready();
        let _ = posts(&mut session);
        let call = CallId::next();
        session.submit(
            call,
            CallRequest::new("tools/call", Some(json!({"name": "pay"}))),
            now,
        );
        let (http, _) = posts(&mut session).pop().expect("sent");
        session.handle_error(http, failure.clone(), now);
        let mut again = posts(&mut session);
        while let Some(at) = session
            .poll_timeout()
            .filter(|_| again.is_empty() && resent)
        {
            session.handle_timeout(at);
            again = posts(&mut session);
        }
        assert_eq!(!again.is_empty(), resent, "{failure:?}");
        if !resent {
            let ended = std::iter::from_fn(|| session.poll_output()).find_map(|o| match o {
                Output::Completed { call: c, result } if c == call => Some(result),
                _ => None,
            });
            let error = ended.expect("ended").expect_err("not a success");
            assert_eq!(error.kind(), ErrorKind::OutcomeUnknown, "{error}");
        }
    }
}

/// The app's notifications are POSTed a bounded number at a time: one that sends them faster
/// than the server takes them does not open a connection per notification; the rest wait
/// (bounded) and go as the earlier ones are answered.
#[test]
fn notifications_in_flight_are_bounded() {
    use mcp_resume::proto::limits::MAX_NOTIFICATIONS_IN_FLIGHT;
    let (mut session, now) = legacy_ready();
    let _ = posts(&mut session);
    for n in 0..20 {
        session.notify("notifications/progress", Some(json!({"n": n})), now);
    }
    let sent = posts(&mut session);
    assert_eq!(sent.len(), MAX_NOTIFICATIONS_IN_FLIGHT);
    let (http, _) = &sent[0];
    session.handle_head(*http, 202, &HeaderMap::new(), now);
    session.handle_end(*http, now);
    let next = posts(&mut session);
    assert_eq!(next.len(), 1, "one goes as one is answered");
    assert_eq!(next[0].1["params"]["n"], MAX_NOTIFICATIONS_IN_FLIGHT);
}

/// A call sent to a modern server is answered in the modern era's terms even when the answer
/// arrives after the client fell back to the legacy era (another call's version refusal made
/// it probe again, and that probe met a server that answers the legacy way): its
/// `input_required` is a request for input, never the call's result.
#[test]
fn a_modern_answer_after_a_fall_back_to_legacy_is_not_the_calls_result() {
    let mut now = Instant::now();
    let config = SessionConfig::default().with_open_listen_stream(false);
    let mut session = Session::new(config, now);
    session.connect(now);
    let mut discovers = 0;
    // Answers what the session sends until it waits for something else; a call tagged
    // `open` gets an SSE head and stays open. Returns those open calls: (exchange, JSON-RPC id).
    let mut pump = |session: &mut Session, now: &mut Instant| {
        let mut open = Vec::new();
        loop {
            let mut sent = false;
            while let Some(transmit) = session.poll_transmit() {
                let Transmit::Send(request) = transmit else {
                    continue;
                };
                sent = true;
                let body: Value =
                    serde_json::from_slice(request.body.as_deref().unwrap_or(b"null")).unwrap();
                let mut headers = HeaderMap::new();
                let (status, answer) = if body["method"] == "server/discover" {
                    discovers += 1;
                    if discovers == 1 {
                        discover(&body).unwrap()
                    } else {
                        // A rate limiter in front, in the legacy way: no JSON-RPC error.
                        headers.insert("content-type", "text/plain".parse().unwrap());
                        session.handle_head(request.id, 429, &headers, *now);
                        session.handle_data(request.id, b"slow down", *now);
                        session.handle_end(request.id, *now);
                        continue;
                    }
                } else if body["method"] == "initialize" {
                    headers.insert("mcp-session-id", "s-1".parse().unwrap());
                    ok(
                        &body,
                        json!({"protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                            "serverInfo": {"name": "dual", "version": "1"}}),
                    )
                } else if body["params"]["arguments"]["tag"] == "open" {
                    headers.insert("content-type", "text/event-stream".parse().unwrap());
                    session.handle_head(request.id, 200, &headers, *now);
                    open.push((request.id, body["id"].clone()));
                    continue;
                } else if body["params"]["arguments"]["tag"] == "refused" {
                    modern_only(&body)
                } else {
                    (202, Value::Null)
                };
                headers.insert("content-type", "application/json".parse().unwrap());
                session.handle_head(request.id, status, &headers, *now);
                if !answer.is_null() {
                    session.handle_data(request.id, &serde_json::to_vec(&answer).unwrap(), *now);
                }
                session.handle_end(request.id, *now);
            }
            if sent {
                continue;
            }
            match session.poll_timeout() {
                Some(at) if at <= *now + SEC => {
                    *now = (*now).max(at);
                    session.handle_timeout(*now);
                }
                _ => return open,
            }
        }
    };
    pump(&mut session, &mut now);
    let call = |tag: &str| {
        CallRequest::new(
            "tools/call",
            Some(json!({"name": "act", "arguments": {"tag": tag}})),
        )
    };
    let a = CallId::next();
    session.submit(a, call("open"), now);
    let open = pump(&mut session, &mut now);
    let [(stream, rpc)] = open.as_slice() else {
        panic!("the call's stream is open: {open:?}");
    };
    session.submit(CallId::next(), call("refused"), now);
    pump(&mut session, &mut now);
    assert_eq!(
        discovers, 2,
        "the version refusal made the client probe again"
    );
    let input = json!({"jsonrpc": "2.0", "id": rpc, "result": {"resultType": "input_required",
        "requestState": "s1", "inputRequests": {"q": {"method": "elicitation/create",
        "params": {"message": "sure?", "requestedSchema": {"type": "object"}}}}}});
    session.handle_data(*stream, format!("data: {input}\n\n").as_bytes(), now);
    let mut asked = 0;
    while let Some(output) = session.poll_output() {
        match output {
            Output::Completed { call, result } if call == a => {
                panic!("a request for input handed over as the call's result: {result:?}")
            }
            Output::ServerRequest(request) if request.method == "elicitation/create" => {
                asked += 1;
            }
            _ => {}
        }
    }
    assert_eq!(asked, 1, "the app is asked for the input");
}

/// The longest method of an input the session hands out, as of a server's own request.
const MAX_INPUT_METHOD: usize = 256;

/// An input a 2026-07-28 call's round asks for whose method is longer than any a handler
/// takes is the server's error, as a round asking too much is: the session hands out none of
/// the round's inputs (no handler holds a copy of the method) and ends the call `Protocol`,
/// saying it may have run (the server took the call before it asked), never sending the next
/// round. A method at the bound is handed out.
#[test]
fn a_rounds_input_with_an_overlong_method_fails_its_call_unasked() {
    for (len, refused) in [
        (1 << 20, true),
        (MAX_INPUT_METHOD + 1, true),
        (MAX_INPUT_METHOD, false),
    ] {
        let mut m = Modern::new(SessionConfig::default());
        let method = "m".repeat(len);
        let mut script = |body: &Value| -> (u16, Value) {
            if let Some(answer) = discover(body) {
                return answer;
            }
            if body["params"]["inputResponses"].is_null() {
                return ok(
                    body,
                    json!({"resultType": "input_required", "requestState": "s1",
                        "inputRequests": {
                            "a": {"method": "elicitation/create", "params": {}},
                            "b": {"method": method, "params": {}}}}),
                );
            }
            ok(body, json!({"resultType": "complete", "content": []}))
        };
        let call = m.submit("ask");
        m.run(&mut script, SEC);
        let asked: Vec<usize> = m.server_requests().iter().map(|r| r.method.len()).collect();
        if !refused {
            assert_eq!(asked.len(), 2, "both inputs handed out: {asked:?}");
            assert!(m.result(call).is_none(), "{:?}", m.result(call));
            continue;
        }
        assert!(asked.is_empty(), "inputs of {asked:?} bytes handed out");
        let Some(Err(err)) = m.result(call) else {
            panic!("the call did not fail: {:?}", m.result(call));
        };
        assert_eq!(err.kind(), ErrorKind::Protocol, "{err}");
        assert!(err.may_have_run(), "{err}");
        assert!(!err.input_refused(), "the app refused nothing: {err}");
        assert!(
            err.to_string().len() < 1024,
            "the error holds the method: {} bytes",
            err.to_string().len()
        );
        assert_eq!(m.posts_of("ask").len(), 1, "the next round was sent");
    }
}

/// The same for a task's input: none of the inputs it asks for at once is handed out, its
/// task is cancelled, and its call ends `Protocol`.
#[test]
fn a_tasks_input_with_an_overlong_method_fails_its_call_unasked() {
    let mut m = Modern::new(SessionConfig::default());
    let mut script = |body: &Value| -> (u16, Value) {
        if let Some(answer) = discover(body) {
            return answer;
        }
        match body["method"].as_str().unwrap_or_default() {
            "tools/call" => {
                let (status, mut answer) = task_is(body, "working");
                answer["result"]["resultType"] = json!("task");
                (status, answer)
            }
            "tasks/get" => {
                let (status, mut answer) = task_is(body, "input_required");
                answer["result"]["inputRequests"] = json!({
                    "a": {"method": "elicitation/create", "params": {}},
                    "b": {"method": "m".repeat(MAX_INPUT_METHOD + 1), "params": {}}});
                (status, answer)
            }
            _ => ok(body, json!({"resultType": "complete"})),
        }
    };
    let call = m.submit("task");
    m.run(&mut script, SEC);
    assert!(m.server_requests().is_empty(), "inputs handed out");
    let Some(Err(err)) = m.result(call) else {
        panic!("the call did not fail: {:?}", m.result(call));
    };
    assert_eq!(err.kind(), ErrorKind::Protocol, "{err}");
    assert!(err.may_have_run(), "{err}");
    assert!(!err.input_refused(), "{err}");
    assert!(
        m.seen.iter().any(|b| b["method"] == "tasks/cancel"),
        "the task was left running"
    );
}

/// A `tasks/get` answer of task `t-1` with status `status` (polled every 10 ms).
fn task_is(body: &Value, status: &str) -> (u16, Value) {
    ok(
        body,
        json!({"resultType": "complete", "taskId": "t-1", "status": status,
            "pollIntervalMs": 10}),
    )
}

/// An answer to a task's input whose `tasks/update` did not arrive (refused here by a
/// replica that had not seen the task ask; lost on the way alike) is sent again when the
/// task asks for it again, a bounded number of times: the task does not wait for it until
/// the call's deadline.
#[test]
fn a_task_update_that_did_not_arrive_is_sent_again() {
    let mut m = Modern::new(SessionConfig::default());
    let mut updates = 0;
    let mut script = |body: &Value| -> (u16, Value) {
        if let Some(answer) = discover(body) {
            return answer;
        }
        match body["method"].as_str().unwrap_or_default() {
            "tools/call" => {
                let (status, mut answer) = task_is(body, "working");
                answer["result"]["resultType"] = json!("task");
                (status, answer)
            }
            "tasks/get" if updates < 2 => {
                let (status, mut answer) = task_is(body, "input_required");
                answer["result"]["inputRequests"] =
                    json!({"k": {"method": "elicitation/create", "params": {}}});
                (status, answer)
            }
            "tasks/get" => {
                let (status, mut answer) = task_is(body, "completed");
                answer["result"]["result"] = json!({"content": []});
                (status, answer)
            }
            "tasks/update" => {
                updates += 1;
                if updates == 1 {
                    (
                        500,
                        json!({"jsonrpc": "2.0", "id": body["id"],
                        "error": {"code": -32603, "message": "no such input"}}),
                    )
                } else {
                    ok(body, json!({"resultType": "complete"}))
                }
            }
            _ => ok(body, json!({"resultType": "complete"})),
        }
    };
    let call = m.submit("task");
    m.run(&mut script, SEC);
    let input = m.server_requests()[0].id.clone();
    m.session
        .respond(input, Ok(json!({"action": "accept"})), m.now);
    m.run(&mut script, SEC);
    assert!(
        matches!(m.result(call), Some(Ok(_))),
        "{:?}",
        m.result(call)
    );
    let sent: Vec<&Value> = m
        .seen
        .iter()
        .filter(|b| b["method"] == "tasks/update")
        .collect();
    assert_eq!(sent.len(), 2, "{sent:#?}");
    assert!(sent
        .iter()
        .all(|b| b["params"]["inputResponses"]["k"]["action"] == "accept"));
    assert_eq!(m.server_requests().len(), 1, "the app was asked once");
}

/// A task's call given up while the session is re-establishing: its `tasks/cancel` waits
/// for the session and goes out then, and only then is the task finished for the app's
/// records (which would otherwise forget a task still running on the server).
#[test]
fn a_task_cancelled_while_the_session_is_away_is_cancelled_once_it_is_back() {
    use std::cell::Cell;
    let mut m = Modern::new(SessionConfig::default());
    let down = Cell::new(false);
    let mut script = |body: &Value| -> (u16, Value) {
        if down.get() {
            return (503, json!({}));
        }
        if let Some(answer) = discover(body) {
            return answer;
        }
        let tag = body["params"]["arguments"]["tag"].as_str();
        match (body["method"].as_str().unwrap_or_default(), tag) {
            ("tools/call", Some("task")) => {
                let (status, mut answer) = task_is(body, "working");
                answer["result"]["resultType"] = json!("task");
                (status, answer)
            }
            ("tools/call", Some("refused")) => {
                down.set(true);
                modern_only(body)
            }
            ("tasks/get", _) => task_is(body, "working"),
            _ => ok(body, json!({"resultType": "complete"})),
        }
    };
    let task = m.submit("task");
    m.run(&mut script, 50 * Duration::from_millis(1));
    m.submit("refused");
    m.run(&mut script, 50 * Duration::from_millis(1));
    let finished = |m: &Modern| {
        m.outputs
            .iter()
            .filter(|o| matches!(o, Output::Event(SessionEvent::TaskFinished { .. })))
            .count()
    };
    let cancels = |m: &Modern| {
        m.seen
            .iter()
            .filter(|b| b["method"] == "tasks/cancel")
            .count()
    };
    m.session.cancel(task, m.now);
    m.run(&mut script, 50 * Duration::from_millis(1));
    assert_eq!(cancels(&m), 0, "the session is away");
    assert_eq!(finished(&m), 0, "the task stays recorded meanwhile");
    down.set(false);
    m.run(&mut script, 30 * SEC);
    assert_eq!(cancels(&m), 1, "{:#?}", m.seen);
    assert_eq!(finished(&m), 1);
}

/// A `tasks/cancel` whose connection could not be made is sent again with the headers its
/// first send had: a modern server refuses one without `Mcp-Method` and `Mcp-Name`, and the
/// task would run on.
#[test]
fn a_task_cancel_sent_again_after_a_connect_failure_keeps_its_headers() {
    use mcp_resume::proto::TransportFailure;
    let mut m = Modern::new(SessionConfig::default());
    let mut script = |body: &Value| -> (u16, Value) {
        if let Some(answer) = discover(body) {
            return answer;
        }
        match body["method"].as_str().unwrap_or_default() {
            "tools/call" => {
                let (status, mut answer) = task_is(body, "working");
                answer["result"]["resultType"] = json!("task");
                (status, answer)
            }
            "tasks/get" => task_is(body, "working"),
            _ => ok(body, json!({"resultType": "complete"})),
        }
    };
    let task = m.submit("task");
    m.run(&mut script, 50 * Duration::from_millis(1));
    m.session.cancel(task, m.now);
    let mut cancels = Vec::new();
    while cancels.len() < 2 {
        let Some(Transmit::Send(request)) = m.session.poll_transmit() else {
            break;
        };
        let body: Value =
            serde_json::from_slice(request.body.as_deref().unwrap_or(b"null")).unwrap();
        if body["method"] != "tasks/cancel" {
            continue;
        }
        cancels.push(request.headers.clone());
        if cancels.len() == 1 {
            let refused = TransportFailure::Connect("connection refused".into());
            m.session.handle_error(request.id, refused, m.now);
        }
    }
    assert_eq!(cancels.len(), 2, "sent again");
    for (nth, headers) in cancels.iter().enumerate() {
        let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        assert_eq!(header("mcp-method"), Some("tasks/cancel"), "send {nth}");
        assert_eq!(header("mcp-name"), Some("t-1"), "send {nth}");
    }
}

/// A resumed stream whose last event resets the cursor (an empty `id:`) leaves nothing to
/// resume from: the call is treated as a broken stream without a cursor (an unkeyed one ends
/// `OutcomeUnknown` at once), not left waiting for its deadline.
#[test]
fn a_resumed_stream_that_resets_its_cursor_does_not_stall_the_call() {
    use mcp_resume::proto::TransportFailure;
    let (mut session, start) = legacy_ready();
    let mut now = start;
    let _ = posts(&mut session);
    let call = CallId::next();
    session.submit(
        call,
        CallRequest::new("tools/call", Some(json!({"name": "slow"}))),
        now,
    );
    let (http, _) = posts(&mut session).pop().expect("sent");
    let mut sse = HeaderMap::new();
    sse.insert("content-type", "text/event-stream".parse().unwrap());
    session.handle_head(http, 200, &sse, now);
    session.handle_data(http, b"id: s1-1\ndata:\n\n", now);
    session.handle_error(http, TransportFailure::Lost("cut".into()), now);
    let mut resumed = false;
    let ended = until_ended(&mut session, call, &mut now, |session, now| {
        while let Some(transmit) = session.poll_transmit() {
            let Transmit::Send(request) = transmit else {
                continue;
            };
            if request.method == HttpMethod::Get && !resumed {
                resumed = true;
                session.handle_head(request.id, 200, &sse, now);
                session.handle_data(request.id, b"id:\n\n", now);
            } else {
                session.handle_head(request.id, 202, &HeaderMap::new(), now);
            }
            session.handle_end(request.id, now);
        }
    });
    assert!(resumed, "the cut stream was resumed");
    let error = ended.expect("the call ended").expect_err("not a success");
    assert_eq!(error.kind(), ErrorKind::OutcomeUnknown, "{error}");
    assert!(now - start < 10 * SEC, "ended after {:?}", now - start);
}

/// A legacy session whose server was redeployed modern-only (the TypeScript SDK's modern mode:
/// 400 -32022 listing 2026-07-28 alone to anything without the modern envelope) used to fail
/// every call with that refusal, the session still ready. The refusal says the server speaks
/// the other era: a new handshake probes (not `initialize` again), and the call, which did not
/// run, goes out once more on the modern era.
#[test]
fn a_legacy_session_refused_as_by_a_modern_only_server_probes_again() {
    let mut m = Modern::auto(SessionConfig::default());
    // A legacy server does not know the probe.
    let mut script =
        |body: &Value| legacy_handshake(body).unwrap_or_else(|| method_not_found(body));
    let connect = m.session.connect(m.now);
    m.run(&mut script, SEC);
    assert!(
        matches!(m.result(connect), Some(Ok(_))),
        "{:?}",
        m.result(connect)
    );
    assert!(m
        .events()
        .iter()
        .any(|e| matches!(e, SessionEvent::EraDetected { era: Era::Legacy })));
    let before = m.seen.len();

    // Redeployed: the modern envelope or a refusal naming the modern revision.
    let mut script = redeployed_modern_only;
    let call = m.submit("act");
    m.run(&mut script, 10 * SEC);
    assert!(
        matches!(m.result(call), Some(Ok(_))),
        "{:?}",
        m.result(call)
    );
    let methods: Vec<&str> = m.seen[before..]
        .iter()
        .map(|b| b["method"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        methods,
        ["tools/call", "server/discover", "tools/call"],
        "the refused call, the probe, the call on the modern era"
    );
    let posts = m.posts_of("act");
    assert!(posts[0]["params"]["_meta"].is_null(), "sent legacy first");
    assert_eq!(
        posts[1]["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"],
        MODERN
    );
    let events = m.events();
    assert!(
        events
            .iter()
            .any(|e| matches!(e, SessionEvent::EraDetected { era: Era::Modern })),
        "{events:?}"
    );
    assert!(
        events.iter().any(|e| matches!(
            e,
            SessionEvent::Reinitialized {
                reason: ReinitReason::VersionRefused,
                ..
            }
        )),
        "{events:?}"
    );
}

/// The same refusal from a server whose probe still answers the legacy way (it answers the
/// probe and the calls in different eras): one probe, then the refusal is the call's answer,
/// not a handshake going round in circles until the deadline.
#[test]
fn a_modern_only_refusal_probes_once_when_the_probe_still_says_legacy() {
    let mut m = Modern::auto(SessionConfig::default());
    let mut script = |body: &Value| -> (u16, Value) {
        if let Some(answer) = legacy_handshake(body) {
            return answer;
        }
        match body["method"].as_str().unwrap_or_default() {
            "server/discover" => method_not_found(body),
            _ => modern_only(body),
        }
    };
    let connect = m.session.connect(m.now);
    m.run(&mut script, SEC);
    assert!(m.result(connect).is_some_and(|r| r.is_ok()));
    let call = m.submit("act");
    m.run(&mut script, 60 * SEC);
    let error = m
        .result(call)
        .expect("ended")
        .as_ref()
        .expect_err("refused");
    assert_eq!(error.rpc_error().map(|e| e.code), Some(-32022), "{error}");
    let count = |method: &str| m.seen.iter().filter(|b| b["method"] == method).count();
    assert_eq!(
        count("server/discover"),
        2,
        "the first connect's, then one more"
    );
    assert_eq!(count("initialize"), 2);
    assert_eq!(m.posts_of("act").len(), 2);
}

/// In the modern era too, a call answered with a JSON-RPC error proves the session works: a
/// version refusal of the next call probes again at once, where a session none of whose
/// calls was answered backs off first.
#[test]
fn a_modern_error_answer_proves_a_session_works() {
    for answered in [true, false] {
        let mut m = Modern::new(SessionConfig::default());
        let mut first = true;
        let mut script = |body: &Value| -> (u16, Value) {
            if let Some(answer) = discover(body) {
                return answer;
            }
            if std::mem::take(&mut first) && answered {
                return (
                    200,
                    json!({"jsonrpc": "2.0", "id": body["id"],
                        "error": {"code": -32602, "message": "no such argument"}}),
                );
            }
            modern_only(body)
        };
        let connect = m.session.connect(m.now);
        m.run(&mut script, SEC);
        assert!(m.result(connect).is_some_and(|r| r.is_ok()));
        if answered {
            let a = m.submit("a");
            m.run(&mut script, Duration::ZERO);
            assert!(m.result(a).is_some_and(|r| r.is_err()));
        }
        let before = m.seen.len();
        let _b = m.submit("b");
        m.run(&mut script, Duration::ZERO);
        let probed = m.seen[before..]
            .iter()
            .any(|b| b["method"] == "server/discover");
        assert_eq!(probed, answered, "answered: {answered}");
    }
}

/// A session set up after a version refusal (its probe still said legacy) whose call was
/// answered with an error, or not answered but that lived longer than a session takes to
/// prove itself: the server redeployed modern-only meanwhile, and the next refusal probes
/// again, instead of being taken for the earlier one's circle and failing every later call.
#[test]
fn a_refusal_long_after_a_probe_that_said_legacy_probes_again() {
    for (name, later) in [("error answer", SEC), ("no answer", 10 * SEC)] {
        let mut m = Modern::auto(SessionConfig::default());
        let refused = std::cell::Cell::new(false);
        let mut script = |body: &Value| -> (u16, Value) {
            if let Some(answer) = legacy_handshake(body) {
                return answer;
            }
            match body["method"].as_str().unwrap_or_default() {
                "server/discover" => method_not_found(body),
                _ if !refused.replace(true) => modern_only(body),
                _ if name == "no answer" => (202, Value::Null),
                _ => (
                    200,
                    json!({"jsonrpc": "2.0", "id": body["id"],
                        "error": {"code": -32602, "message": "no such argument"}}),
                ),
            }
        };
        let connect = m.session.connect(m.now);
        m.run(&mut script, SEC);
        assert!(m.result(connect).is_some_and(|r| r.is_ok()), "{name}");
        let first = m.submit("act");
        m.run(&mut script, SEC);
        assert!(m.result(first).is_some_and(|r| r.is_err()), "{name}");
        let before = m.seen.len();
        // Redeployed, `later` after: every legacy request refused, the probe answered.
        m.now += later;
        let mut script = redeployed_modern_only;
        let call = m.submit("next");
        m.run(&mut script, 10 * SEC);
        assert!(
            matches!(m.result(call), Some(Ok(_))),
            "{name}: {:?}",
            m.result(call)
        );
        let probes = m.seen[before..]
            .iter()
            .filter(|b| b["method"] == "server/discover")
            .count();
        assert_eq!(probes, 1, "{name}");
    }
}

/// An era read from an answer to the probe that says nothing about it (a rate limiter's 429,
/// a 5xx) is this session's, and not the era a driver remembers for the origin: before, a 429
/// to one client's probe pinned every later client of a dual-era origin to the legacy era. An
/// answer that says it (a legacy server's -32601, a discovery) is remembered.
#[test]
fn only_an_era_an_answer_says_is_to_be_remembered() {
    let cases: [(&str, u16, Option<Era>); 4] = [
        ("429", 429, None),
        ("503", 503, None),
        ("-32601", 200, Some(Era::Legacy)),
        ("discovery", 0, Some(Era::Modern)),
    ];
    for (name, probe_status, remembered) in cases {
        let mut m = Modern::auto(SessionConfig::default());
        let mut script = |body: &Value| -> (u16, Value) {
            match body["method"].as_str().unwrap_or_default() {
                "server/discover" if probe_status == 0 => discover(body).unwrap(),
                "server/discover" => (
                    probe_status,
                    json!({"jsonrpc": "2.0", "id": body["id"],
                        "error": {"code": -32601, "message": "no"}}),
                ),
                "initialize" => ok(
                    body,
                    json!({"protocolVersion": "2025-11-25", "capabilities": {},
                        "serverInfo": {"name": "dual", "version": "1"}}),
                ),
                _ => (202, Value::Null),
            }
        };
        let connect = m.session.connect(m.now);
        m.run(&mut script, SEC);
        assert!(m.result(connect).is_some_and(|r| r.is_ok()), "{name}");
        let detected = m.events().iter().find_map(|e| match e {
            SessionEvent::EraDetected { era } => Some(*era),
            _ => None,
        });
        let expected = if probe_status == 0 {
            Era::Modern
        } else {
            Era::Legacy
        };
        assert_eq!(detected, Some(expected), "{name}: the session's era");
        assert_eq!(m.session.era_to_remember(), remembered, "{name}");
    }
}

/// An MRTR round's request refused unprocessed (here a header mismatch, -32020) is re-sent
/// as any first send refused so is: the earlier round was answered, so nothing of it may
/// still run, and the round's own send provably never ran.
#[test]
fn a_refused_mrtr_round_is_sent_again_not_ended_unknown() {
    let mut m = Modern::new(SessionConfig::default());
    let mut refused = false;
    let mut script = |body: &Value| -> (u16, Value) {
        if let Some(answer) = discover(body) {
            return answer;
        }
        if body["method"] == "tools/list" {
            return ok(body, json!({"resultType": "complete", "tools": []}));
        }
        if body["params"]["inputResponses"].is_null() {
            return ok(
                body,
                json!({"resultType": "input_required", "requestState": "s1",
                    "inputRequests": {"q": {"method": "elicitation/create", "params": {}}}}),
            );
        }
        if !refused {
            refused = true;
            return (
                400,
                json!({"jsonrpc": "2.0", "id": body["id"], "error": {"code": -32020,
                    "message": "Header mismatch"}}),
            );
        }
        ok(
            body,
            json!({"resultType": "complete", "content": [{"type": "text", "text": "done"}]}),
        )
    };
    let ask = m.submit("ask");
    m.run(&mut script, SEC);
    let input = m.server_requests()[0].id.clone();
    m.session
        .respond(input, Ok(json!({"action": "accept"})), m.now);
    m.run(&mut script, 10 * SEC);
    assert!(matches!(m.result(ask), Some(Ok(_))), "{:?}", m.result(ask));
    assert_eq!(m.posts_of("ask").len(), 3, "{:#?}", m.posts_of("ask"));
}

/// An unkeyed call refused unprocessed (a header mismatch, -32020), whether the refusal
/// comes with status 400 or in a 200 answer's body: the refusal proves it never ran, so it is
/// sent again once the tools are fetched again, never ended as an unknown outcome.
#[test]
fn a_refusal_in_a_200_body_proves_the_call_never_ran_as_a_400_does() {
    for status in [400, 200] {
        let mut m = Modern::new(SessionConfig::default());
        let mut refused = false;
        let mut script = |body: &Value| -> (u16, Value) {
            if let Some(answer) = discover(body) {
                return answer;
            }
            if body["method"] == "tools/list" {
                return ok(body, json!({"resultType": "complete", "tools": []}));
            }
            if !refused {
                refused = true;
                return (
                    status,
                    json!({"jsonrpc": "2.0", "id": body["id"], "error": {"code": -32020,
                        "message": "Header mismatch"}}),
                );
            }
            ok(
                body,
                json!({"resultType": "complete", "content": [{"type": "text", "text": "done"}]}),
            )
        };
        let call = m.submit("x");
        m.run(&mut script, 10 * SEC);
        assert!(
            matches!(m.result(call), Some(Ok(_))),
            "status {status}: {:?}",
            m.result(call)
        );
        assert_eq!(m.posts_of("x").len(), 2, "status {status}");
    }
}

/// A task's input the app could not provide ends the call; the task, left waiting for that
/// input, is cancelled on the server, and until then it may have run: the error says so.
#[test]
fn a_task_input_the_app_cannot_provide_cancels_the_task() {
    let mut m = Modern::new(SessionConfig::default());
    let mut script = |body: &Value| -> (u16, Value) {
        if let Some(answer) = discover(body) {
            return answer;
        }
        match body["method"].as_str().unwrap_or_default() {
            "tools/call" => {
                let (status, mut answer) = task_is(body, "working");
                answer["result"]["resultType"] = json!("task");
                (status, answer)
            }
            "tasks/get" => {
                let (status, mut answer) = task_is(body, "input_required");
                answer["result"]["inputRequests"] =
                    json!({"k": {"method": "elicitation/create", "params": {}}});
                (status, answer)
            }
            _ => ok(body, json!({"resultType": "complete"})),
        }
    };
    let call = m.submit("task");
    m.run(&mut script, SEC);
    let input = m.server_requests()[0].id.clone();
    let refused = mcp_resume::RpcError::new(-32603, "no one to ask");
    m.session.respond(input, Err(refused), m.now);
    m.run(&mut script, SEC);
    let error = m.result(call).expect("ended").as_ref().expect_err("failed");
    assert!(error.may_have_run(), "{error:?}");
    let cancels: Vec<&Value> = m
        .seen
        .iter()
        .filter(|b| b["method"] == "tasks/cancel")
        .collect();
    assert_eq!(cancels.len(), 1, "{:#?}", m.seen);
    assert_eq!(cancels[0]["params"]["taskId"], "t-1");
}

/// An MRTR call that ends while the app still works out its input (here: the app cancels
/// it) withdraws that input: no round will take the answer, and its handler is to stop.
#[test]
fn an_mrtr_call_that_ends_withdraws_its_unanswered_inputs() {
    let mut m = Modern::new(SessionConfig::default());
    let mut script = |body: &Value| -> (u16, Value) {
        if let Some(answer) = discover(body) {
            return answer;
        }
        ok(
            body,
            json!({"resultType": "input_required", "requestState": "s1",
                "inputRequests": {"q": {"method": "elicitation/create", "params": {}}}}),
        )
    };
    let ask = m.submit("ask");
    m.run(&mut script, SEC);
    let input = m.server_requests()[0].id.clone();
    m.session.cancel(ask, m.now);
    m.run(&mut script, SEC);
    let withdrawn: Vec<_> = m
        .outputs
        .iter()
        .filter_map(|o| match o {
            Output::ServerRequestWithdrawn(id) => Some(id.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(withdrawn, [input]);
}

/// A second copy of an `input_required` answer (here on another call's POST, under the
/// first call's JSON-RPC id) is a duplicate: the round it opened is not opened again, so the
/// next round goes out once, not once per copy. Unkeyed, the second would run the tool's
/// final round twice.
#[test]
fn a_duplicate_input_required_does_not_send_the_next_round_twice() {
    let mut m = Modern::new(SessionConfig::default());
    let mut ask_rpc = Value::Null;
    let input_required = json!({"resultType": "input_required", "requestState": "s1",
        "inputRequests": {"q": {"method": "elicitation/create", "params": {}}}});
    let mut script = |body: &Value| -> (u16, Value) {
        if let Some(answer) = discover(body) {
            return answer;
        }
        let tag = body["params"]["arguments"]["tag"]
            .as_str()
            .unwrap_or_default();
        match tag {
            "ask" if body["params"]["inputResponses"].is_null() => {
                ask_rpc = body["id"].clone();
                ok(body, input_required.clone())
            }
            // The first call's answer again, on this call's POST.
            "dup" => (
                200,
                json!({"jsonrpc": "2.0", "id": ask_rpc, "result": input_required}),
            ),
            _ => ok(
                body,
                json!({"resultType": "complete", "content": [{"type": "text", "text": tag}]}),
            ),
        }
    };
    let ask = m.submit("ask");
    m.run(&mut script, SEC);
    assert_eq!(m.server_requests().len(), 1);
    m.submit("dup");
    m.run(&mut script, SEC);
    // Whatever the session asked the app, it is answered before anything more is sent.
    let inputs: Vec<_> = m.server_requests().iter().map(|r| r.id.clone()).collect();
    for input in inputs {
        m.session
            .respond(input, Ok(json!({"action": "accept"})), m.now);
    }
    m.run(&mut script, 10 * SEC);
    let rounds = m
        .posts_of("ask")
        .iter()
        .filter(|b| !b["params"]["inputResponses"].is_null())
        .count();
    assert_eq!(rounds, 1, "{:#?}", m.posts_of("ask"));
    assert!(matches!(m.result(ask), Some(Ok(_))), "{:?}", m.result(ask));
}

/// A call's stream resumed on a session that a re-initialization then replaces (the resume
/// was in flight when another call's 404 started it) still skips what it replays: the
/// notification the call's first stream delivered reaches the app once, whether the replay
/// comes while the new session is being set up or once it is.
#[test]
fn a_replay_on_a_replaced_sessions_resumed_stream_is_not_delivered_again() {
    use mcp_resume::proto::TransportFailure;
    for established in [false, true] {
        let (mut session, mut now) = legacy_ready();
        let _ = posts(&mut session);
        let call = CallId::next();
        session.submit(
            call,
            CallRequest::new("tools/call", Some(json!({"name": "a"}))),
            now,
        );
        let (post, body) = posts(&mut session).pop().expect("sent");
        let log = json!({"jsonrpc": "2.0", "method": "notifications/message",
            "params": {"level": "info", "data": "working"}});
        let mut sse = HeaderMap::new();
        sse.insert("content-type", "text/event-stream".parse().unwrap());
        session.handle_head(post, 200, &sse, now);
        session.handle_data(post, format!("id: e1\ndata: {log}\n\n").as_bytes(), now);
        session.handle_error(post, TransportFailure::Lost("cut".into()), now);
        // The resume goes out after its backoff.
        now = session.poll_timeout().expect("a resume is scheduled");
        session.handle_timeout(now);
        let get = std::iter::from_fn(|| session.poll_transmit())
            .find_map(|t| match t {
                Transmit::Send(r) if r.method == HttpMethod::Get => Some(r.id),
                _ => None,
            })
            .expect("the resume GET");
        // Another call's 404 starts a re-initialization meanwhile.
        let other = CallId::next();
        session.submit(
            other,
            CallRequest::new("tools/call", Some(json!({"name": "x"}))),
            now,
        );
        let (refused, _) = posts(&mut session).pop().expect("sent");
        session.handle_head(refused, 404, &HeaderMap::new(), now);
        session.handle_end(refused, now);
        if established {
            now = serve_reinit_as_s2(&mut session, now);
        }
        // The resume replays the whole stream, then the answer.
        let answer = json!({"jsonrpc": "2.0", "id": body["id"], "result": {"content": []}});
        session.handle_head(get, 200, &sse, now);
        session.handle_data(
            get,
            format!("id: e1\ndata: {log}\n\nid: e2\ndata: {answer}\n\n").as_bytes(),
            now,
        );
        let outputs: Vec<Output> = std::iter::from_fn(|| session.poll_output()).collect();
        let logs = outputs
            .iter()
            .filter(|o| {
                matches!(o, Output::Notification { notification, .. }
                    if notification.method == "notifications/message")
            })
            .count();
        assert_eq!(logs, 1, "established: {established}; {outputs:#?}");
        assert!(
            outputs
                .iter()
                .any(|o| matches!(o, Output::Completed { call: c, result: Ok(_) } if *c == call)),
            "established: {established}; {outputs:#?}"
        );
    }
}

/// A key ending in `.round<n>` is reserved for the rounds of multi-round calls: the session
/// itself refuses it, before anything is sent, whichever driver submits the call.
#[test]
fn a_key_shaped_like_a_round_key_is_refused_by_the_session() {
    let _g = SeedGuard(106);
    let mut s = connected(SessionConfig::default(), ServerConfig::default(), 106);
    let reserved = s.call("r", Some("order-7.round1"));
    s.run_until_complete(reserved, 5 * SEC);
    assert_eq!(
        s.result(reserved).as_ref().unwrap_err().kind(),
        ErrorKind::InvalidConfig
    );
    assert!(s.server.posts_of("r").is_empty());
    let free = s.call("f", Some("order-7.roundup"));
    s.run_until_complete(free, 5 * SEC);
    assert!(s.result(free).is_ok());
}

/// A standalone GET stream refused its credentials (a 401 with a challenge, which the
/// driver's one retry with a fresh token already met) is opened again only once a request of
/// the session is answered, at most `max_attempts` times in a row: tried again on a timer,
/// each try cost a token refresh, `max_attempts` of them within two seconds. Calls go on.
#[test]
fn a_listen_stream_refused_its_credentials_waits_for_them_to_work() {
    const CHALLENGE: &[(&str, &str)] = &[(
        "www-authenticate",
        r#"Bearer error="invalid_token", resource_metadata="https://as.example/prm""#,
    )];
    let max = ReconnectPolicy::default().max_attempts as usize;
    let gets = |s: &Sim| {
        s.server
            .seen
            .iter()
            .filter(|x| x.method == HttpMethod::Get)
            .count()
    };
    // | GETs refused | calls answered | GETs sent |
    let rows = [
        (u32::MAX, 0, 1),
        (u32::MAX, 3, 4),
        (u32::MAX, 2 * max, max),
        (1, 1, 2),
        (1, 3, 2),
    ];
    for (refused, calls, sent) in rows {
        let _g = SeedGuard(2417);
        let server = ServerConfig {
            listen_refusal: Some((401, CHALLENGE, refused)),
            ..ServerConfig::default()
        };
        let mut s = connected(SessionConfig::default(), server, 2417);
        s.run_for(Duration::from_secs(60));
        for n in 0..calls {
            let c = s.call(&format!("c{n}"), None);
            s.run_until_complete(c, SEC);
            assert!(s.result(c).is_ok(), "{:?}", s.result(c));
            s.run_for(Duration::from_secs(5));
        }
        assert_eq!(gets(&s), sent, "{refused} refused, {calls} calls");
    }
}
