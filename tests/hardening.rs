//! Defects found by running the client against servers nobody here wrote and against
//! deliberately broken ones, pinned at the level of the sans-IO core (virtual time, scripted
//! server). The end-to-end side of each, through the real driver and a raw TCP server, is in
//! `tests/hostile.rs`.

mod sim;

use std::time::Duration;

use mcp_resume::proto::{
    CallRequest, HttpMethod, ReinitReason, ResendPolicy, SessionConfig, SessionEvent,
};
use mcp_resume::{ErrorKind, ReconnectPolicy};
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
/// whole deadline. A re-initialization that nothing confirmed counts as failed: backoff
/// between attempts, and `SessionLost` after `max_reinit_failures`.
#[test]
fn defect_01_reinit_storm_is_bounded_and_backs_off() {
    for (seed, fault) in [(101, Fault::NotFound), (102, Fault::BadRequestSession)] {
        let _g = SeedGuard(seed);
        let config = SessionConfig {
            call_timeout: 60 * SEC,
            ..SessionConfig::default()
        };
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
        let inits = initialize_times(&s);
        // The first connect, then one re-initialization per allowed failure but the last.
        assert_eq!(inits.len() as u32, policy.max_reinit_failures, "{fault:?}");
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
        assert!(s
            .events()
            .iter()
            .any(|e| matches!(e, SessionEvent::SessionLost)));
        // Ended well before the deadline.
        assert!(s.elapsed() < 10 * SEC, "{:?}", s.elapsed());
    }
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
    let config = SessionConfig {
        resend: ResendPolicy::AssumeServerDeduplicates,
        ..SessionConfig::default()
    };
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
    let unkeyed = s.session.submit(request, s.now);
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
    let _ = s.session.submit(CallRequest::new("ping", None), s.now);
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
