//! Property tests: random fault schedules against the Session in the simulator, checking
//! the recovery invariants on what the scripted server observed.

use crate::sim;

use std::collections::HashMap;
use std::time::Duration;

use mcp_resume::proto::{CallId, HttpMethod, ResendPolicy, SessionConfig, SessionEvent};
use mcp_resume::ErrorKind;
use proptest::prelude::*;
use sim::{Fault, InitFault, SeedGuard, ServerConfig, Sim};

#[derive(Debug, Clone)]
struct CallPlan {
    keyed: bool,
    start_ms: u64,
    /// Extra latency of this call's answers (a slow instance), so answers and
    /// re-initializations interleave.
    slow_ms: u64,
    faults: Vec<Fault>,
}

#[derive(Debug, Clone)]
struct Schedule {
    seed: u64,
    ext: bool,
    idempotency: bool,
    silent_dedup: bool,
    opt_in: bool,
    sse: bool,
    retry_ms: Option<u64>,
    version: &'static str,
    listen: bool,
    keep_resumed_open: bool,
    trust: bool,
    init_faults: Vec<InitFault>,
    calls: Vec<CallPlan>,
}

fn fault() -> impl Strategy<Value = Fault> {
    prop_oneof![
        3 => Just(Fault::None),
        1 => Just(Fault::Refuse),
        1 => Just(Fault::NotFound),
        1 => Just(Fault::BadRequestSession),
        1 => Just(Fault::LoseBeforeHead { executed: true }),
        1 => Just(Fault::LoseBeforeHead { executed: false }),
        3 => Just(Fault::CutAfterPriming),
        1 => Just(Fault::EndAfterPriming),
        1 => Just(Fault::CutBeforeEvents),
        1 => Just(Fault::WrongContext),
        1 => Just(Fault::WrongResultHash),
        1 => Just(Fault::WrongContextHeaderOnly),
        1 => Just(Fault::ResumeNotFound),
        1 => Just(Fault::ResumeRejected("not_owner")),
        1 => Just(Fault::ResumeRejected("event_gap")),
        1 => Just(Fault::Resume405),
        1 => Just(Fault::ResumeRefuse),
        2 => Just(Fault::ResumeNaiveCleanEnd),
        1 => Just(Fault::ResumeHashChanged),
        1 => Just(Fault::ResumeGap),
        1 => Just(Fault::ResumeOrphan),
        1 => Just(Fault::ResumeProgressThenCut),
        1 => Just(Fault::ResumeProgressThenEnd),
    ]
}

fn call_plan() -> impl Strategy<Value = CallPlan> {
    (
        any::<bool>(),
        0u64..3000,
        prop_oneof![3 => Just(0u64), 1 => 1u64..8],
        prop::collection::vec(fault(), 0..5),
    )
        .prop_map(|(keyed, start_ms, slow_ms, faults)| CallPlan {
            keyed,
            start_ms,
            slow_ms,
            faults,
        })
}

fn schedule() -> impl Strategy<Value = Schedule> {
    (
        (
            any::<u64>(),
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
            prop::bool::weighted(0.8),
            prop::option::of(0u64..2000),
            prop::sample::select(vec!["2025-11-25", "2025-06-18", "2025-03-26"]),
        ),
        (
            any::<bool>(),
            any::<bool>(),
            prop::bool::weighted(0.15),
            prop::collection::vec(
                prop_oneof![Just(InitFault::Refuse), Just(InitFault::ServerError)],
                // Up to 11: enough failures in a row that backing off outlasts a call's
                // deadline, the one way a waiting call ends `SessionLost`.
                0..12,
            ),
            prop::collection::vec(call_plan(), 1..5),
        ),
    )
        .prop_map(
            |(
                (seed, ext, idempotency, silent_dedup, opt_in, sse, retry_ms, version),
                (listen, keep_resumed_open, trust, init_faults, calls),
            )| Schedule {
                seed,
                ext,
                idempotency,
                silent_dedup,
                opt_in,
                sse,
                retry_ms,
                version,
                listen,
                keep_resumed_open,
                trust,
                init_faults,
                calls,
            },
        )
}

fn cases() -> u32 {
    std::env::var("SESSION_PROPS_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000)
}

/// What one run exercised, to show the generator reaches every recovery path.
#[derive(Debug, Default)]
struct Coverage {
    outcomes: HashMap<String, u32>,
    resumes: u32,
    reinits: u32,
    resends: u32,
}

/// Runs one schedule and checks every invariant; panics (with the seed) on a violation.
fn check(plan: &Schedule) -> Coverage {
    let mut coverage = Coverage::default();
    let _guard = SeedGuard(plan.seed);
    let dedups = plan.idempotency || plan.silent_dedup;
    // An application only opts in for servers it knows deduplicate.
    let opt_in = plan.opt_in && dedups;
    let config = SessionConfig::default()
        .with_resend_policy(if opt_in {
            ResendPolicy::AssumeServerDeduplicates
        } else {
            ResendPolicy::ServerAdvertised
        })
        .with_dangerous_trust_replay(plan.trust)
        .with_call_timeout(Duration::from_secs(20));
    let server = ServerConfig {
        ext: plan.ext,
        idempotency: plan.idempotency,
        silent_dedup: plan.silent_dedup,
        sse: plan.sse,
        retry_ms: plan.retry_ms,
        protocol_version: plan.version.into(),
        listen: plan.listen,
        keep_resumed_open: plan.keep_resumed_open,
        ..ServerConfig::default()
    };
    let mut s = Sim::new(config, server, plan.seed);
    let connect = s.connect();
    s.run_until_complete(connect, Duration::from_secs(5));
    s.server
        .init_faults
        .extend(plan.init_faults.iter().copied());

    let mut order: Vec<(u64, usize)> = plan
        .calls
        .iter()
        .enumerate()
        .map(|(i, c)| (c.start_ms, i))
        .collect();
    order.sort();
    let mut ids: HashMap<CallId, usize> = HashMap::new();
    for (start, i) in order {
        s.run_for(Duration::from_millis(start).max(s.elapsed()));
        let tag = format!("t{i}");
        let key = format!("key-{i}");
        let c = &plan.calls[i];
        s.server.fault(&tag, c.faults.iter().cloned());
        if c.slow_ms > 0 {
            s.server
                .slow
                .insert(tag.clone(), Duration::from_millis(c.slow_ms));
        }
        let id = s.call(&tag, c.keyed.then_some(key.as_str()));
        ids.insert(id, i);
    }
    s.run_for(s.elapsed() + Duration::from_secs(120));

    // 1. Each call completes exactly once.
    for (id, i) in &ids {
        let n = s.completions.get(id).map_or(0, Vec::len);
        assert_eq!(n, 1, "call t{i} completed {n} times");
    }
    assert_eq!(s.session.pending_calls(), 0);

    let connected = s.completions[&connect][0].is_ok();
    for (id, i) in &ids {
        let tag = format!("t{i}");
        let plan_c = &plan.calls[*i];
        let result = &s.completions[id][0];
        let outcome = match result {
            Ok(_) => "ok".to_owned(),
            Err(e) => e.kind().to_string(),
        };
        if let Err(e) = result {
            if e.kind() == ErrorKind::Protocol && std::env::var("DBG").is_ok() {
                eprintln!("PROTO {e} {plan:?}");
            }
        }
        *coverage.outcomes.entry(outcome).or_default() += 1;
        let resend_safe = plan_c.keyed && (plan.idempotency || opt_in);

        // 2. An answer goes to its own call.
        if let Ok(v) = result {
            assert_eq!(
                v["content"][0]["text"],
                tag.as_str(),
                "answer delivered to the wrong call"
            );
            // 6. No call completes Ok under another capability hash.
            if !plan.trust && plan.ext {
                assert_eq!(v["ctx_ok"], true, "t{i} succeeded under another context");
            }
        }
        if !connected {
            assert!(result.is_err());
        }
        // 5. Nothing runs twice, and no unsafe call is sent twice unless provably not run.
        assert!(s.server.executions_of(&tag) <= 1, "t{i} executed twice");
        let accepted = s
            .server
            .posts_of(&tag)
            .iter()
            .filter(|p| !p.not_accepted)
            .count();
        if !resend_safe {
            assert!(accepted <= 1, "unsafe call t{i} sent {accepted} times");
        }
        // A keyed re-send carries the same key each time, with a new JSON-RPC id.
        let posts = s.server.posts_of(&tag);
        let mut rpc_ids: Vec<_> = posts.iter().map(|p| p.rpc_id.clone()).collect();
        rpc_ids.sort_by_key(|v| v.as_ref().map(|v| v.to_string()));
        rpc_ids.dedup();
        assert_eq!(rpc_ids.len(), posts.len(), "a JSON-RPC id was reused");
        if plan_c.keyed {
            for p in &posts {
                assert_eq!(
                    p.idempotency_header.as_deref(),
                    Some(format!("key-{i}").as_str())
                );
            }
        }
        match result {
            Err(e) if e.kind() == ErrorKind::OutcomeUnknown => {
                assert!(!posts.is_empty(), "t{i}: outcome unknown but never sent");
            }
            _ => {}
        }
    }

    // 3. A cursor never moves backwards.
    let mut last: HashMap<String, u64> = HashMap::new();
    for r in s.server.resumes() {
        let lei = r.last_event_id.as_deref().unwrap();
        let (stream, seq) = lei.rsplit_once('-').unwrap();
        let seq: u64 = seq.parse().unwrap();
        let prev = last.entry(stream.to_owned()).or_insert(0);
        assert!(
            seq >= *prev,
            "cursor of {stream} moved back from {prev} to {seq}"
        );
        *prev = seq;
    }

    // 4. Nothing is sent with a session id from a previous session; a fresh initialize never
    //    carries one.
    for seen in &s.server.seen {
        assert!(seen.session_id_current, "stale session id in {seen:?}");
        if seen.rpc_method.as_deref() == Some("initialize") {
            assert!(seen.session_id.is_none());
        }
        if seen.method == HttpMethod::Get {
            assert!(seen.body.is_none());
        }
    }

    coverage.resumes = s.server.resumes().len() as u32;
    coverage.reinits = s.server.initializes().saturating_sub(1) as u32;
    coverage.resends = s
        .events()
        .iter()
        .filter(|e| matches!(e, SessionEvent::Redispatched { .. }))
        .count() as u32;

    // Closing settles everything.
    let close = s.close();
    s.run_for(s.elapsed() + Duration::from_secs(5));
    assert_eq!(s.completions.get(&close).map_or(0, Vec::len), 1);
    coverage
}

/// The generator is not vacuous: over a fixed sample, every kind of ending and every
/// recovery path happens.
#[test]
fn schedules_reach_every_recovery_path() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
    let mut runner = TestRunner::new_with_rng(
        Config::default(),
        TestRng::from_seed(RngAlgorithm::ChaCha, &[7; 32]),
    );
    let mut total = Coverage::default();
    for _ in 0..2000 {
        let plan = schedule().new_tree(&mut runner).unwrap().current();
        let c = check(&plan);
        for (k, n) in c.outcomes {
            *total.outcomes.entry(k).or_default() += n;
        }
        total.resumes += c.resumes;
        total.reinits += c.reinits;
        total.resends += c.resends;
    }
    eprintln!("{total:?}");
    for kind in [
        "ok",
        "outcome_unknown",
        "context_mismatch",
        "session_lost",
        "timeout",
    ] {
        assert!(
            total.outcomes.get(kind).copied().unwrap_or(0) > 0,
            "no call ended {kind}: {total:?}"
        );
    }
    assert!(
        total.resumes > 0 && total.reinits > 0 && total.resends > 0,
        "{total:?}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        .. ProptestConfig::default()
    })]

    #[test]
    fn invariants_hold_under_random_fault_schedules(plan in schedule()) {
        let _ = check(&plan);
    }
}

// ---------------------------------------------------------------- hostile input

#[derive(Debug, Clone)]
enum Op {
    Submit {
        keyed: bool,
    },
    Cancel(u8),
    Head {
        http: u8,
        status: u16,
        ct: u8,
        sid: u8,
        hash: u8,
    },
    Data {
        http: u8,
        bytes: Vec<u8>,
    },
    SseEvent {
        http: u8,
        id: Option<String>,
        data: String,
    },
    End(u8),
    Error {
        http: u8,
        connect: bool,
    },
    Advance(u16),
}

fn op() -> impl Strategy<Value = Op> {
    let json_ish = prop_oneof![
        Just(r#"{"jsonrpc":"2.0","id":2,"result":{}}"#.to_owned()),
        Just(r#"{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25","capabilities":{"experimental":{"resumeSafety":{"capabilityHash":true,"sequencedEventIds":true}}}}}"#.to_owned()),
        Just(r#"{"jsonrpc":"2.0","id":3,"error":{"code":-1,"message":"x"}}"#.to_owned()),
        Just(r#"{"jsonrpc":"2.0","id":5,"result":{"_meta":{"io.github.mcp-resume/capability-hash":"sha256:01"}}}"#.to_owned()),
        Just(r#"[{"jsonrpc":"2.0","id":4,"result":1},{"jsonrpc":"2.0","method":"ping","id":"p"}]"#.to_owned()),
        Just(r#"{"jsonrpc":"2.0","id":99999,"result":{}}"#.to_owned()),
        Just(r#"{"jsonrpc":"2.0","method":"notifications/progress"}"#.to_owned()),
        ".{0,40}",
    ];
    prop_oneof![
        2 => any::<bool>().prop_map(|keyed| Op::Submit { keyed }),
        1 => any::<u8>().prop_map(Op::Cancel),
        4 => (0u8..12, prop::sample::select(vec![200u16, 202, 400, 404, 405, 500, 503]), 0u8..4, 0u8..4, 0u8..3)
            .prop_map(|(http, status, ct, sid, hash)| Op::Head { http, status, ct, sid, hash }),
        3 => (0u8..12, prop::collection::vec(any::<u8>(), 0..64)).prop_map(|(http, bytes)| Op::Data { http, bytes }),
        4 => (0u8..12, prop::option::of(prop_oneof![Just("s-1".to_owned()), Just("s-3".to_owned()), Just(String::new()), "[a-z0-9-]{0,6}"]), json_ish)
            .prop_map(|(http, id, data)| Op::SseEvent { http, id, data }),
        2 => (0u8..12).prop_map(Op::End),
        1 => (0u8..12, any::<bool>()).prop_map(|(http, connect)| Op::Error { http, connect }),
        2 => (0u16..5000).prop_map(Op::Advance),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases() / 5,
        failure_persistence: None,
        .. ProptestConfig::default()
    })]

    /// Whatever arrives, in whatever order, for whatever exchange: no panic, no call
    /// completed twice, and closing completes every call.
    #[test]
    fn hostile_input_never_panics_or_double_completes(
        ops in prop::collection::vec(op(), 1..80),
        trust in any::<bool>(),
        handshake in prop::bool::weighted(0.8),
    ) {
        use http::{HeaderMap, HeaderValue};
        use mcp_resume::ids::IdempotencyKey;
        use mcp_resume::proto::{CallRequest, HttpId, Output, Session, Transmit, TransportFailure};
        let base = std::time::Instant::now();
        let mut now = base;
        // The script performs a legacy handshake.
        let config = SessionConfig::default().with_dangerous_trust_replay(trust).with_era(mcp_resume::Era::Legacy);
        let mut session = Session::new(config, now);
        let mut calls: Vec<CallId> = vec![session.connect(now)];
        let mut completed: HashMap<CallId, u32> = HashMap::new();
        let mut cancelled: Vec<CallId> = Vec::new();
        let mut https: Vec<HttpId> = Vec::new();
        // An id this session never issued.
        let foreign = HttpId::from_raw(u64::MAX);
        let drain = |session: &mut Session, https: &mut Vec<HttpId>, completed: &mut HashMap<CallId, u32>| {
            while let Some(t) = session.poll_transmit() {
                if let Transmit::Send(r) = t {
                    https.push(r.id);
                }
            }
            while let Some(o) = session.poll_output() {
                if let Output::Completed { call, .. } = o {
                    *completed.entry(call).or_default() += 1;
                }
            }
        };
        drain(&mut session, &mut https, &mut completed);
        if handshake {
            // Most cases start from an established session, so the random input hits the
            // paths of a ready session rather than only the handshake's.
            let mut h = HeaderMap::new();
            h.insert("content-type", HeaderValue::from_static("application/json"));
            h.insert("mcp-session-id", HeaderValue::from_static("abc"));
            h.insert("mcp-capability-hash", HeaderValue::from_static("sha256:00"));
            let init = br#"{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25","capabilities":{"experimental":{"resumeSafety":{"capabilityHash":true,"sequencedEventIds":true,"idempotency":{}}}}}}"#;
            let initialize = https[0];
            session.handle_head(initialize, 200, &h, now);
            session.handle_data(initialize, init, now);
            session.handle_end(initialize, now);
            drain(&mut session, &mut https, &mut completed);
            session.handle_head(https[1], 202, &HeaderMap::new(), now);
            drain(&mut session, &mut https, &mut completed);
            prop_assert!(session.is_ready());
        }
        for op in ops {
            let pick = |i: u8| https.get(i as usize % https.len().max(1)).copied().unwrap_or(foreign);
            match op {
                Op::Submit { keyed } => {
                    let call = CallId::next();
                    session.submit(call, CallRequest::tool_call(
                        serde_json::json!({"name": "x"}),
                        keyed.then(|| IdempotencyKey::new("k").unwrap()),
                    ).with_timeout(Duration::from_secs(3)), now);
                    calls.push(call);
                }
                Op::Cancel(i) => {
                    if let Some(c) = calls.get(i as usize % calls.len()).copied() {
                        session.cancel(c, now);
                        cancelled.push(c);
                    }
                }
                Op::Head { http, status, ct, sid, hash } => {
                    let mut h = HeaderMap::new();
                    match ct {
                        0 => { h.insert("content-type", HeaderValue::from_static("application/json")); }
                        1 => { h.insert("content-type", HeaderValue::from_static("text/event-stream; charset=utf-8")); }
                        2 => { h.insert("content-type", HeaderValue::from_static("text/html")); }
                        _ => {}
                    }
                    match sid {
                        0 => { h.insert("mcp-session-id", HeaderValue::from_static("abc")); }
                        1 => { h.insert("mcp-session-id", HeaderValue::from_bytes(b"bad id\xff").unwrap()); }
                        _ => {}
                    }
                    match hash {
                        0 => { h.insert("mcp-capability-hash", HeaderValue::from_static("sha256:00")); }
                        1 => { h.insert("mcp-capability-hash", HeaderValue::from_static("garbage")); }
                        _ => {}
                    }
                    session.handle_head(pick(http), status, &h, now);
                }
                Op::Data { http, bytes } => session.handle_data(pick(http), &bytes, now),
                Op::SseEvent { http, id, data } => {
                    let mut ev = String::new();
                    if let Some(id) = id { ev.push_str(&format!("id: {id}\n")); }
                    ev.push_str(&format!("data: {}\n\n", data.replace('\n', " ")));
                    session.handle_data(pick(http), ev.as_bytes(), now);
                }
                Op::End(http) => session.handle_end(pick(http), now),
                Op::Error { http, connect } => session.handle_error(
                    pick(http),
                    if connect { TransportFailure::Connect("x".into()) } else { TransportFailure::Lost("x".into()) },
                    now,
                ),
                Op::Advance(ms) => {
                    now += Duration::from_millis(ms as u64);
                    session.handle_timeout(now);
                }
            }
            drain(&mut session, &mut https, &mut completed);
            for (c, n) in &completed {
                prop_assert!(*n <= 1, "call {c:?} completed {n} times");
            }
            if let Some(t) = session.poll_timeout() {
                prop_assert!(t >= base);
            }
        }
        calls.push(session.close(now));
        drain(&mut session, &mut https, &mut completed);
        // A DELETE may still be out; answer it.
        if let Some(last) = https.last().copied() {
            session.handle_head(last, 200, &HeaderMap::new(), now);
            drain(&mut session, &mut https, &mut completed);
        }
        for c in &calls {
            if cancelled.contains(c) {
                continue;
            }
            let n = completed.get(c).copied().unwrap_or(0);
            prop_assert_eq!(n, 1, "call {:?} completed {} times", c, n);
        }
    }
}
