//! Deterministic simulation: the Session against a scripted server in virtual time, one
//! fault schedule per recovery-table row, asserting on what the server observed.

use crate::sim;

use std::time::Duration;

use mcp_resume::proto::{
    HttpMethod, ReinitReason, RejectReason, ResendPolicy, SessionConfig, SessionEvent,
};
use mcp_resume::{ErrorKind, ReconnectPolicy};
use serde_json::Value;
use sim::{Fault, InitFault, SeedGuard, ServerConfig, Sim};

const SEC: Duration = Duration::from_secs(1);

fn sim(server: ServerConfig, seed: u64) -> Sim {
    sim_with(SessionConfig::default(), server, seed)
}

fn sim_with(config: SessionConfig, server: ServerConfig, seed: u64) -> Sim {
    let mut s = Sim::new(config, server, seed);
    let c = s.connect();
    s.run_until_complete(c, SEC);
    assert!(s.result(c).is_ok(), "connect failed: {:?}", s.result(c));
    s
}

fn ok_tag(r: &Result<Value, mcp_resume::Error>) -> String {
    let v = r.as_ref().unwrap_or_else(|e| panic!("call failed: {e}"));
    v["content"][0]["text"].as_str().unwrap().to_owned()
}

fn kind(r: &Result<Value, mcp_resume::Error>) -> ErrorKind {
    r.as_ref().expect_err("call succeeded").kind()
}

fn reinitialized(s: &Sim) -> Vec<ReinitReason> {
    s.events()
        .into_iter()
        .filter_map(|e| match e {
            SessionEvent::Reinitialized { reason, .. } => Some(reason),
            _ => None,
        })
        .collect()
}

/// Every request that carried a session id carried the newest one.
fn assert_no_stale_session_id(s: &Sim) {
    for seen in &s.server.seen {
        assert!(
            seen.session_id_current,
            "request with a stale session id: {seen:?}"
        );
    }
}

// ---------------------------------------------------------------- happy paths

#[test]
fn happy_path_sse() {
    let _g = SeedGuard(1);
    let mut s = sim(ServerConfig::default(), 1);
    let c = s.call("a", None);
    s.run_until_complete(c, SEC);
    assert_eq!(ok_tag(s.result(c)), "a");
    assert_eq!(s.server.executions_of("a"), 1);
    // The era probe (a legacy server refuses it), initialize, initialized, GET listen, POST
    // call.
    let kinds: Vec<_> = s
        .server
        .seen
        .iter()
        .map(|x| (x.method, x.rpc_method.clone()))
        .collect();
    assert_eq!(
        kinds,
        vec![
            (HttpMethod::Post, Some("server/discover".into())),
            (HttpMethod::Post, Some("initialize".into())),
            (HttpMethod::Post, Some("notifications/initialized".into())),
            (HttpMethod::Get, None),
            (HttpMethod::Post, Some("tools/call".into())),
        ]
    );
    let init = &s.server.seen[1];
    assert_eq!(init.session_id, None);
    assert_eq!(
        init.accept.as_deref(),
        Some("application/json, text/event-stream")
    );
    assert_eq!(init.content_type.as_deref(), Some("application/json"));
    for seen in &s.server.seen[2..] {
        assert_eq!(seen.session_id.as_deref(), Some("sess-0001-secret"));
        assert_eq!(seen.protocol_version.as_deref(), Some("2025-11-25"));
    }
    // The POST stream is finished once its response arrived.
    let post = s.server.posts_of("a")[0].http;
    assert!(s.aborted.contains(&post));
    assert!(matches!(
        s.events()[0],
        SessionEvent::Connected { protocol_version } if protocol_version.as_str() == "2025-11-25"
    ));
}

#[test]
fn happy_path_json_and_close() {
    let _g = SeedGuard(2);
    let mut s = sim(
        ServerConfig {
            sse: false,
            ..ServerConfig::default()
        },
        2,
    );
    let c = s.call("a", None);
    s.run_until_complete(c, SEC);
    assert_eq!(ok_tag(s.result(c)), "a");
    let close = s.close();
    s.run_until_complete(close, SEC);
    assert!(s.result(close).is_ok());
    assert!(s.session.is_terminated());
    let delete = s.server.seen.last().unwrap();
    assert_eq!(delete.method, HttpMethod::Delete);
    assert_eq!(delete.session_id.as_deref(), Some("sess-0001-secret"));
}

#[test]
fn protocol_version_header_only_from_2025_06_18() {
    let _g = SeedGuard(3);
    let mut s = sim(
        ServerConfig {
            protocol_version: "2025-03-26".into(),
            ..ServerConfig::default()
        },
        3,
    );
    let c = s.call("a", None);
    s.run_until_complete(c, SEC);
    assert_eq!(ok_tag(s.result(c)), "a");
    // Only the era probe, a modern request, carries one.
    assert!(s
        .server
        .seen
        .iter()
        .filter(|x| x.rpc_method.as_deref() != Some("server/discover"))
        .all(|x| x.protocol_version.is_none()));
}

#[test]
fn unsupported_protocol_version_fails_connect() {
    let _g = SeedGuard(4);
    let mut s = Sim::new(
        SessionConfig::default(),
        ServerConfig {
            protocol_version: "2024-11-05".into(),
            ..ServerConfig::default()
        },
        4,
    );
    let c = s.connect();
    s.run_until_complete(c, SEC);
    assert_eq!(kind(s.result(c)), ErrorKind::Protocol);
}

/// The first call connects by itself, and waits for the handshake before it is sent.
#[test]
fn the_first_call_connects_and_waits_for_the_handshake() {
    let _g = SeedGuard(5);
    let mut s = Sim::new(SessionConfig::default(), ServerConfig::default(), 5);
    let c = s.call("early", None);
    let conn = s.connect();
    s.run_until_complete(c, SEC);
    assert!(s.result(conn).is_ok());
    assert_eq!(ok_tag(s.result(c)), "early");
    assert_eq!(s.server.initializes(), 1);
    let first_call = s
        .server
        .seen
        .iter()
        .position(|x| x.tag.as_deref() == Some("early"))
        .unwrap();
    let initialized = s
        .server
        .seen
        .iter()
        .position(|x| x.rpc_method.as_deref() == Some("notifications/initialized"))
        .unwrap();
    assert!(initialized < first_call, "{:?}", s.server.seen);
}

#[test]
fn listen_stream_405_is_not_an_error() {
    let _g = SeedGuard(6);
    let mut s = sim(
        ServerConfig {
            listen: false,
            ..ServerConfig::default()
        },
        6,
    );
    s.run_for(Duration::from_secs(30));
    let gets = s
        .server
        .seen
        .iter()
        .filter(|x| x.method == HttpMethod::Get)
        .count();
    assert_eq!(gets, 1, "a 405 GET stream must not be retried");
    let c = s.call("a", None);
    s.run_until_complete(c, SEC);
    assert_eq!(ok_tag(s.result(c)), "a");
}

#[test]
fn keyed_call_carries_key_in_meta_and_header() {
    let _g = SeedGuard(7);
    let mut s = sim(ServerConfig::default(), 7);
    let c = s.call("k", Some("key-1"));
    s.run_until_complete(c, SEC);
    assert_eq!(ok_tag(s.result(c)), "k");
    let post = s.server.posts_of("k")[0];
    assert_eq!(post.idempotency_header.as_deref(), Some("key-1"));
    assert_eq!(post.idempotency_meta.as_deref(), Some("key-1"));
}

fn unsafe_keys_server() -> ServerConfig {
    ServerConfig {
        idempotency: false,
        ..ServerConfig::default()
    }
}

fn outcome_unknown_reported(s: &Sim) -> bool {
    s.events()
        .iter()
        .any(|e| matches!(e, SessionEvent::OutcomeUnknown { .. }))
}

fn redispatched(s: &Sim) -> usize {
    s.events()
        .iter()
        .filter(|e| matches!(e, SessionEvent::Redispatched { .. }))
        .count()
}

// ---------------------------------------------------------------- §4 rows

// | POST answered 404 and it carried a session id |
#[test]
fn row_post_404_reinitializes_and_resends_unkeyed_call() {
    let _g = SeedGuard(10);
    let mut s = sim(ServerConfig::default(), 10);
    s.server.fault("a", [Fault::NotFound]);
    let c = s.call("a", None);
    s.run_until_complete(c, 5 * SEC);
    s.settle();
    assert_eq!(ok_tag(s.result(c)), "a");
    assert_eq!(s.server.executions_of("a"), 1);
    assert_eq!(s.server.initializes(), 2);
    let posts = s.server.posts_of("a");
    assert_eq!(posts.len(), 2);
    assert_eq!(posts[0].session_id.as_deref(), Some("sess-0001-secret"));
    assert_eq!(posts[1].session_id.as_deref(), Some("sess-0002-secret"));
    assert_ne!(
        posts[0].rpc_id, posts[1].rpc_id,
        "a re-sent request gets a new id"
    );
    // The fresh initialize carries no session id.
    let inits: Vec<_> = s
        .server
        .seen
        .iter()
        .filter(|x| x.rpc_method.as_deref() == Some("initialize"))
        .collect();
    assert!(inits.iter().all(|x| x.session_id.is_none()));
    assert_eq!(reinitialized(&s), vec![ReinitReason::SessionNotFound]);
    assert_eq!(redispatched(&s), 1);
    assert_no_stale_session_id(&s);
    // Same version, capabilities and hash: nothing changed.
    assert!(s.events().iter().any(|e| matches!(
        e,
        SessionEvent::Reinitialized {
            capabilities_changed: false,
            ..
        }
    )));
}

#[test]
fn row_post_400_naming_the_session_is_treated_as_404() {
    let _g = SeedGuard(11);
    let mut s = sim(ServerConfig::default(), 11);
    s.server.fault("a", [Fault::BadRequestSession]);
    let c = s.call("a", None);
    s.run_until_complete(c, 5 * SEC);
    s.settle();
    assert_eq!(ok_tag(s.result(c)), "a");
    assert_eq!(s.server.initializes(), 2);
    assert_eq!(s.server.executions_of("a"), 1);
}

// | POST could not even connect |
#[test]
fn row_post_connect_refused_is_resent_after_backoff() {
    let _g = SeedGuard(12);
    let mut s = sim(ServerConfig::default(), 12);
    s.server.fault("a", [Fault::Refuse, Fault::Refuse]);
    let start = s.elapsed();
    let c = s.call("a", None);
    s.run_until_complete(c, 5 * SEC);
    s.settle();
    assert_eq!(ok_tag(s.result(c)), "a");
    let posts = s.server.posts_of("a");
    assert_eq!(posts.len(), 1, "refused attempts never reach the server");
    // Two backoffs of the default policy: >= 20 ms + 40 ms.
    assert!(posts[0].at - start >= Duration::from_millis(60));
    assert_eq!(s.server.initializes(), 1);
}

// | POST connection lost after sending, before a response head |
#[test]
fn row_post_lost_unkeyed_is_outcome_unknown_and_never_resent() {
    let _g = SeedGuard(13);
    let mut s = sim(ServerConfig::default(), 13);
    s.server
        .fault("a", [Fault::LoseBeforeHead { executed: true }]);
    let c = s.call("a", None);
    s.run_until_complete(c, 5 * SEC);
    s.settle();
    assert_eq!(kind(s.result(c)), ErrorKind::OutcomeUnknown);
    assert!(outcome_unknown_reported(&s));
    assert_eq!(s.server.posts_of("a").len(), 1);
    assert_eq!(s.server.executions_of("a"), 1);
}

#[test]
fn row_post_lost_safe_keyed_is_resent_with_new_id_same_key() {
    let _g = SeedGuard(14);
    let mut s = sim(ServerConfig::default(), 14);
    s.server
        .fault("a", [Fault::LoseBeforeHead { executed: true }]);
    let c = s.call("a", Some("k-a"));
    s.run_until_complete(c, 5 * SEC);
    s.settle();
    assert_eq!(ok_tag(s.result(c)), "a");
    let posts = s.server.posts_of("a");
    assert_eq!(posts.len(), 2);
    assert_ne!(posts[0].rpc_id, posts[1].rpc_id);
    assert_eq!(posts[1].idempotency_header.as_deref(), Some("k-a"));
    assert_eq!(posts[1].idempotency_meta.as_deref(), Some("k-a"));
    assert_eq!(s.server.executions_of("a"), 1, "the server deduplicated");
    assert_eq!(s.server.initializes(), 1);
    assert_eq!(redispatched(&s), 1);
}

#[test]
fn row_post_lost_keyed_but_server_ignores_keys_is_outcome_unknown() {
    let _g = SeedGuard(15);
    let mut s = sim(unsafe_keys_server(), 15);
    s.server
        .fault("a", [Fault::LoseBeforeHead { executed: true }]);
    let c = s.call("a", Some("k-a"));
    s.run_until_complete(c, 5 * SEC);
    s.settle();
    assert_eq!(kind(s.result(c)), ErrorKind::OutcomeUnknown);
    assert_eq!(s.server.posts_of("a").len(), 1);
}

#[test]
fn row_post_lost_keyed_with_app_opt_in_is_resent() {
    let _g = SeedGuard(16);
    let config =
        SessionConfig::default().with_resend_policy(ResendPolicy::AssumeServerDeduplicates);
    let mut s = sim_with(
        config,
        ServerConfig {
            idempotency: false,
            silent_dedup: true,
            ..ServerConfig::default()
        },
        16,
    );
    s.server
        .fault("a", [Fault::LoseBeforeHead { executed: true }]);
    let c = s.call("a", Some("k-a"));
    s.run_until_complete(c, 5 * SEC);
    s.settle();
    assert_eq!(ok_tag(s.result(c)), "a");
    assert_eq!(s.server.posts_of("a").len(), 2);
    assert_eq!(s.server.executions_of("a"), 1);
}

// | POST lost before its head, keyed, the application assumes the server deduplicates; the
// re-send refused as its key's first run still holds it, then as lost | the refusals read
// as they are when the server advertises keys: wait for the stored result; an unknown
// outcome that may have run (a plain server error would say it never ran); an "in use"
// refusal without an id, on the call's own POST, is that call's and read so too |
#[test]
fn row_post_lost_keyed_with_app_opt_in_reads_the_resends_key_refusals() {
    let config =
        SessionConfig::default().with_resend_policy(ResendPolicy::AssumeServerDeduplicates);
    let server = || ServerConfig {
        idempotency: false,
        silent_dedup: true,
        ..ServerConfig::default()
    };
    let _g = SeedGuard(16);
    for in_use in [Fault::KeyInUse, Fault::KeyInUseWithoutId] {
        let mut s = sim_with(config.clone(), server(), 16);
        s.server
            .fault("a", [Fault::LoseBeforeHead { executed: true }, in_use]);
        let c = s.call("a", Some("k-a"));
        s.run_until_complete(c, 5 * SEC);
        s.settle();
        assert_eq!(ok_tag(s.result(c)), "a");
        assert_eq!(s.server.posts_of("a").len(), 3);
        assert_eq!(s.server.executions_of("a"), 1);
    }

    let mut s = sim_with(config, server(), 16);
    s.server.fault(
        "a",
        [
            Fault::LoseBeforeHead { executed: true },
            Fault::KeyOutcomeLost,
        ],
    );
    let c = s.call("a", Some("k-a"));
    s.run_until_complete(c, 5 * SEC);
    s.settle();
    let error = s.result(c).clone().unwrap_err();
    assert_eq!(error.kind(), ErrorKind::OutcomeUnknown, "{error}");
    assert!(error.may_have_run());
    assert_eq!(s.server.posts_of("a").len(), 2);
}

// | POST lost before its head, keyed, re-sent; the re-send refused unprocessed with a JSON-RPC
// error body (a 400; a 429 without Retry-After) | the refusal proves only the re-send never
// ran: the first send may have, so the error says it may have run. Sent once and refused so,
// it says the call never ran |
#[test]
fn row_post_lost_keyed_then_resend_refused_with_a_jsonrpc_error_may_have_run() {
    let refused_429 = Fault::Status {
        status: 429,
        headers: &[],
        executed: false,
    };
    for (seed, refusal) in [(71, Fault::BadRequestWord), (72, refused_429)] {
        let _g = SeedGuard(seed);
        let mut s = sim(ServerConfig::default(), seed);
        s.server.fault(
            "a",
            [Fault::LoseBeforeHead { executed: true }, refusal.clone()],
        );
        let c = s.call("a", Some("k-a"));
        s.run_until_complete(c, 5 * SEC);
        s.settle();
        let error = s.result(c).clone().unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Rpc, "{refusal:?}: {error}");
        assert!(error.may_have_run(), "{refusal:?}: {error}");
        assert_eq!(s.server.posts_of("a").len(), 2);
        assert_eq!(s.server.executions_of("a"), 1);

        let mut s = sim(ServerConfig::default(), seed);
        s.server.fault("a", [refusal.clone()]);
        let c = s.call("a", Some("k-a"));
        s.run_until_complete(c, 5 * SEC);
        s.settle();
        let error = s.result(c).clone().unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Rpc, "{refusal:?}: {error}");
        assert!(!error.may_have_run(), "{refusal:?}: {error}");
        assert_eq!(s.server.posts_of("a").len(), 1);
    }
}

// | response stream ends before the pending response, no event id seen |
#[test]
fn row_stream_end_without_event_id_unkeyed_is_outcome_unknown() {
    let _g = SeedGuard(17);
    let mut s = sim(ServerConfig::default(), 17);
    s.server.fault("a", [Fault::CutBeforeEvents]);
    let c = s.call("a", None);
    s.run_until_complete(c, 5 * SEC);
    s.settle();
    assert_eq!(kind(s.result(c)), ErrorKind::OutcomeUnknown);
    assert_eq!(s.server.posts_of("a").len(), 1);
    assert!(s.server.resumes().is_empty());
}

#[test]
fn row_stream_end_without_event_id_safe_keyed_is_resent() {
    let _g = SeedGuard(18);
    let mut s = sim(ServerConfig::default(), 18);
    s.server.fault("a", [Fault::CutBeforeEvents]);
    let c = s.call("a", Some("k"));
    s.run_until_complete(c, 5 * SEC);
    s.settle();
    assert_eq!(ok_tag(s.result(c)), "a");
    assert_eq!(s.server.posts_of("a").len(), 2);
    assert_eq!(s.server.executions_of("a"), 1);
}

// | … with an event id seen | resume after `retry` ms, never earlier |
#[test]
fn row_stream_end_with_event_id_resumes_after_retry() {
    let _g = SeedGuard(19);
    let mut s = sim(
        ServerConfig {
            retry_ms: Some(500),
            ..ServerConfig::default()
        },
        19,
    );
    s.server.fault("a", [Fault::CutAfterPriming]);
    let c = s.call("a", None);
    s.run_until_complete(c, 5 * SEC);
    s.settle();
    assert_eq!(ok_tag(s.result(c)), "a");
    assert_eq!(s.server.executions_of("a"), 1);
    assert_eq!(s.server.posts_of("a").len(), 1);
    let resumes = s.server.resumes();
    assert_eq!(resumes.len(), 1);
    assert_eq!(resumes[0].last_event_id.as_deref(), Some("s1-1"));
    assert_eq!(resumes[0].session_id.as_deref(), Some("sess-0001-secret"));
    // The cut is delivered after head + priming (3 ms after the POST).
    let post_at = s.server.posts_of("a")[0].at;
    let waited = resumes[0].at - post_at - Duration::from_millis(3);
    assert!(
        waited >= Duration::from_millis(500),
        "resumed after {waited:?}"
    );
    // Jitter on top is a fraction (20 %) of the server's time.
    assert!(
        waited <= Duration::from_millis(600),
        "resumed after {waited:?}"
    );
    // The server keeps the resumed GET open; the client closes it once answered.
    assert!(s.aborted.contains(&resumes[0].http));
    assert!(s.events().iter().any(
        |e| matches!(e, SessionEvent::Resumed { last_event_id } if last_event_id.as_str() == "s1-1")
    ));
}

#[test]
fn row_polling_server_clean_end_after_priming_resumes() {
    let _g = SeedGuard(20);
    let mut s = sim(ServerConfig::default(), 20);
    s.server.fault("a", [Fault::EndAfterPriming]);
    let c = s.call("a", None);
    s.run_until_complete(c, 5 * SEC);
    s.settle();
    assert_eq!(ok_tag(s.result(c)), "a");
    assert_eq!(s.server.resumes().len(), 1);
    assert_eq!(s.server.initializes(), 1);
}

// | resume GET answered 404 (any body) |
#[test]
fn row_resume_404_reinitializes_unkeyed_is_outcome_unknown() {
    let _g = SeedGuard(21);
    let mut s = sim(ServerConfig::default(), 21);
    s.server
        .fault("a", [Fault::CutAfterPriming, Fault::ResumeNotFound]);
    let c = s.call("a", None);
    s.run_until_complete(c, 5 * SEC);
    s.settle();
    assert_eq!(kind(s.result(c)), ErrorKind::OutcomeUnknown);
    assert_eq!(s.server.posts_of("a").len(), 1);
    assert_eq!(reinitialized(&s), vec![ReinitReason::SessionNotFound]);
    assert!(s
        .events()
        .iter()
        .any(|e| matches!(e, SessionEvent::ResumeRejected { reason: None })));
    assert_no_stale_session_id(&s);
}

#[test]
fn row_resume_404_safe_keyed_is_resent_on_new_session() {
    let _g = SeedGuard(22);
    let mut s = sim(ServerConfig::default(), 22);
    s.server
        .fault("a", [Fault::CutAfterPriming, Fault::ResumeNotFound]);
    let c = s.call("a", Some("k"));
    s.run_until_complete(c, 5 * SEC);
    s.settle();
    assert_eq!(ok_tag(s.result(c)), "a");
    let posts = s.server.posts_of("a");
    assert_eq!(posts.len(), 2);
    assert_eq!(posts[1].session_id.as_deref(), Some("sess-0002-secret"));
    assert_eq!(s.server.executions_of("a"), 1);
    assert_no_stale_session_id(&s);
}

// | re-initialization keeps "succeeding" into sessions that never work |
#[test]
fn row_reinit_into_sessions_whose_calls_are_only_cut_backs_off() {
    // Every call's POST is answered 200 with a priming event and cut, and its resume finds
    // the session unknown: each session is replaced, and none ever answers a call. A 2xx head
    // is no proof that a session works (only a success answer, a message, or 5 s of life
    // are): each re-initialization backs off, longer each time, instead of re-initializing
    // as fast as the server answers.
    let _g = SeedGuard(71);
    let mut s = sim(ServerConfig::default(), 71);
    let tags = ["a", "b", "c"];
    for tag in tags {
        s.server
            .fault(tag, [Fault::CutAfterPriming, Fault::ResumeNotFound]);
    }
    for tag in tags {
        let c = s.call(tag, None);
        s.run_until_complete(c, 30 * SEC);
        assert_eq!(kind(s.result(c)), ErrorKind::OutcomeUnknown);
    }
    s.run_for(SEC);
    assert_eq!(reinitialized(&s).len(), tags.len());
    let initializes: Vec<Duration> = s
        .server
        .seen
        .iter()
        .filter(|r| r.rpc_method.as_deref() == Some("initialize"))
        .map(|r| r.at)
        .collect();
    let refused: Vec<Duration> = s
        .server
        .seen
        .iter()
        .filter(|r| r.last_event_id.is_some())
        .map(|r| r.at)
        .collect();
    assert_eq!(refused.len(), tags.len());
    let initial = ReconnectPolicy::default().initial_delay;
    for (i, resume) in refused.iter().enumerate() {
        let next = initializes
            .iter()
            .find(|at| *at > resume)
            .expect("re-initialized");
        let waited = *next - *resume;
        assert!(
            waited >= initial * (1 << i),
            "re-initialization {} came {waited:?} after the refused resume",
            i + 1
        );
    }
}

// | resume GET answered with the resume-rejection body |
#[test]
fn row_resume_rejection_body_names_the_reason() {
    let _g = SeedGuard(23);
    let mut s = sim(ServerConfig::default(), 23);
    s.server.fault(
        "a",
        [Fault::CutAfterPriming, Fault::ResumeRejected("not_owner")],
    );
    let c = s.call("a", Some("k"));
    s.run_until_complete(c, 5 * SEC);
    s.settle();
    assert_eq!(ok_tag(s.result(c)), "a");
    assert_eq!(
        reinitialized(&s),
        vec![ReinitReason::ResumeRejected(RejectReason::NotOwner)]
    );
    assert!(s.events().iter().any(|e| matches!(
        e,
        SessionEvent::ResumeRejected {
            reason: Some(RejectReason::NotOwner)
        }
    )));
}

// | resume GET answered 405 |
#[test]
fn row_resume_405_safe_keyed_is_resent_on_same_session() {
    let _g = SeedGuard(24);
    let mut s = sim(ServerConfig::default(), 24);
    s.server
        .fault("a", [Fault::CutAfterPriming, Fault::Resume405]);
    let c = s.call("a", Some("k"));
    s.run_until_complete(c, 5 * SEC);
    s.settle();
    assert_eq!(ok_tag(s.result(c)), "a");
    assert_eq!(s.server.initializes(), 1);
    let posts = s.server.posts_of("a");
    assert_eq!(posts.len(), 2);
    assert_eq!(posts[1].session_id.as_deref(), Some("sess-0001-secret"));
}

#[test]
fn row_resume_405_unkeyed_is_outcome_unknown() {
    let _g = SeedGuard(25);
    let mut s = sim(ServerConfig::default(), 25);
    s.server
        .fault("a", [Fault::CutAfterPriming, Fault::Resume405]);
    let c = s.call("a", None);
    s.run_until_complete(c, 5 * SEC);
    s.settle();
    assert_eq!(kind(s.result(c)), ErrorKind::OutcomeUnknown);
    assert_eq!(s.server.posts_of("a").len(), 1);
}

// | resume GET answered 409 (the stream still held by the cut connection) |
#[test]
fn row_resume_409_resumes_again() {
    let _g = SeedGuard(25);
    let mut s = sim(ServerConfig::default(), 25);
    s.server.fault(
        "a",
        [
            Fault::CutAfterPriming,
            Fault::ResumeStatus {
                status: 409,
                headers: &[],
            },
        ],
    );
    let c = s.call("a", None);
    s.run_until_complete(c, 5 * SEC);
    s.settle();
    assert_eq!(ok_tag(s.result(c)), "a");
    assert_eq!(s.server.posts_of("a").len(), 1);
    assert_eq!(s.server.initializes(), 1);
}

// | resumed stream: capability hash header differs |
#[test]
fn row_resumed_stream_with_other_capability_hash_reinitializes() {
    let _g = SeedGuard(26);
    let mut s = sim(ServerConfig::default(), 26);
    s.server
        .fault("a", [Fault::CutAfterPriming, Fault::ResumeHashChanged]);
    let c = s.call("a", None);
    s.run_until_complete(c, 5 * SEC);
    s.settle();
    assert_eq!(kind(s.result(c)), ErrorKind::OutcomeUnknown);
    assert_eq!(reinitialized(&s), vec![ReinitReason::CapabilityMismatch]);
}

// | any other response carries another capability hash |
#[test]
fn row_post_under_other_capability_hash_is_context_mismatch() {
    let _g = SeedGuard(27);
    let mut s = sim(ServerConfig::default(), 27);
    s.server.fault("a", [Fault::WrongContext]);
    let c = s.call("a", Some("k"));
    s.run_until_complete(c, 5 * SEC);
    s.settle();
    assert_eq!(kind(s.result(c)), ErrorKind::ContextMismatch);
    assert_eq!(
        s.server.posts_of("a").len(),
        1,
        "never re-sent: it already ran"
    );
    assert_eq!(reinitialized(&s), vec![ReinitReason::CapabilityMismatch]);
    assert!(s
        .events()
        .iter()
        .any(|e| matches!(e, SessionEvent::ContextMismatch { .. })));
}

#[test]
fn row_json_response_under_other_capability_hash_is_context_mismatch() {
    let _g = SeedGuard(28);
    let mut s = sim(
        ServerConfig {
            sse: false,
            ..ServerConfig::default()
        },
        28,
    );
    s.server.fault("a", [Fault::WrongContext]);
    let c = s.call("a", None);
    s.run_until_complete(c, 5 * SEC);
    s.settle();
    assert_eq!(kind(s.result(c)), ErrorKind::ContextMismatch);
}

#[test]
fn row_replayed_result_under_other_hash_is_context_mismatch() {
    let _g = SeedGuard(29);
    let mut s = sim(ServerConfig::default(), 29);
    s.server.fault("a", [Fault::WrongResultHash]);
    let c = s.call("a", Some("k"));
    s.run_until_complete(c, 5 * SEC);
    s.settle();
    assert_eq!(kind(s.result(c)), ErrorKind::ContextMismatch);
    assert_eq!(s.server.posts_of("a").len(), 1);
}

// Idempotency refusals: a re-sent keyed call that races its first execution waits for the
// stored result; a key whose execution the server lost ends as an unknown outcome.
#[test]
fn key_in_use_is_resent_until_the_stored_result_is_ready() {
    let _g = SeedGuard(90);
    let mut s = sim(ServerConfig::default(), 90);
    s.server.fault("a", [Fault::KeyInUse, Fault::KeyInUse]);
    let c = s.call("a", Some("k-a"));
    s.run_until_complete(c, 10 * SEC);
    s.settle();
    assert_eq!(ok_tag(s.result(c)), "a");
    let posts = s.server.posts_of("a");
    assert_eq!(posts.len(), 3);
    assert!(posts
        .iter()
        .all(|p| p.idempotency_header.as_deref() == Some("k-a")));
    assert!(
        posts[1].at > posts[0].at && posts[2].at > posts[1].at,
        "backoff between"
    );
    assert_eq!(s.server.executions_of("a"), 1);
    assert_eq!(redispatched(&s), 2);
}

// A key held for longer than the backoff grows: the re-sends wait it out to the call's
// deadline (the server is reached and says "wait"; `max_attempts` bounds failures to reach
// it), backing off as failed attempts do, whether the refusal comes as JSON or on an SSE
// stream (whose priming event once restarted the backoff: a re-send every 20 ms).
#[test]
fn key_in_use_re_sends_back_off_to_the_deadline_in_both_content_types() {
    for sse in [false, true] {
        let _g = SeedGuard(93);
        let server = ServerConfig {
            sse,
            ..ServerConfig::default()
        };
        let mut s = sim(server, 93);
        s.server
            .fault("a", std::iter::repeat_n(Fault::KeyInUse, 1000));
        let c = s.call_with("a", Some("k-a"), Some(120 * SEC));
        s.run_until_complete(c, 200 * SEC);
        s.settle();
        let posts = s.server.posts_of("a");
        let policy = ReconnectPolicy::default();
        // About 10 in the first 20 s as the backoff grows to `max_delay` (10 s), then one per
        // 10 to 12 s to the deadline.
        assert!(
            posts.len() as u32 > policy.max_attempts && posts.len() < 30,
            "sse {sse}: {} posts",
            posts.len()
        );
        let gaps: Vec<Duration> = posts.windows(2).map(|w| w[1].at - w[0].at).collect();
        assert!(
            gaps.last().is_some_and(|g| *g >= policy.max_delay),
            "sse {sse}: the waits grow to max_delay: {gaps:?}"
        );
        let error = s.result(c).as_ref().expect_err("the key stayed in use");
        assert_eq!(error.kind(), ErrorKind::Timeout, "sse {sse}");
        assert_eq!(s.server.executions_of("a"), 0);
    }
}

// A call that fails without the server's answer says whether it may have run: a framework
// retrying a timed-out call must be able to tell one the server may be running from one it
// never saw.
#[test]
fn a_failed_call_says_whether_it_may_have_run() {
    let config = SessionConfig::default()
        .with_call_timeout(2 * SEC)
        .with_reconnect(ReconnectPolicy::default().with_max_attempts(1000));
    let cut_then = |first: Fault, then: Fault| -> Vec<Fault> {
        [Fault::CutAfterPriming, first]
            .into_iter()
            .chain(std::iter::repeat_n(then, 1000))
            .collect()
    };
    // (faults of its exchanges, keyed, how it ends, may it have run)
    let rows = [
        // Never reached the server: refused connections until the deadline.
        (vec![Fault::Refuse; 1000], false, ErrorKind::Timeout, false),
        // The server forgot the session each time: nothing ran.
        (
            vec![Fault::NotFound; 1000],
            false,
            ErrorKind::SessionLost,
            false,
        ),
        // Sent, its stream cut, every resume refused until the deadline.
        (
            cut_then(Fault::ResumeRefuse, Fault::ResumeRefuse),
            true,
            ErrorKind::Timeout,
            true,
        ),
        // Sent, its stream cut, its session gone on the resume and every re-send after.
        (
            cut_then(Fault::ResumeNotFound, Fault::NotFound),
            true,
            ErrorKind::SessionLost,
            true,
        ),
        // Sent and lost before the head.
        (
            vec![Fault::LoseBeforeHead { executed: true }],
            false,
            ErrorKind::OutcomeUnknown,
            true,
        ),
    ];
    for (i, (faults, keyed, kind, may_have_run)) in rows.into_iter().enumerate() {
        let _g = SeedGuard(94);
        let mut s = sim_with(config.clone(), ServerConfig::default(), 94);
        s.server.fault("a", faults);
        let c = s.call("a", keyed.then_some("k-a"));
        s.run_until_complete(c, 10 * SEC);
        let error = s.result(c).as_ref().expect_err("the call failed");
        assert_eq!(error.kind(), kind, "row {i}: {error:?}");
        assert_eq!(error.may_have_run(), may_have_run, "row {i}: {error:?}");
    }
}

#[test]
fn key_outcome_lost_is_outcome_unknown_and_not_resent() {
    let _g = SeedGuard(91);
    let mut s = sim(ServerConfig::default(), 91);
    s.server.fault("a", [Fault::KeyOutcomeLost]);
    let c = s.call("a", Some("k-a"));
    s.run_until_complete(c, 5 * SEC);
    s.settle();
    assert_eq!(kind(s.result(c)), ErrorKind::OutcomeUnknown);
    assert!(outcome_unknown_reported(&s));
    assert_eq!(s.server.posts_of("a").len(), 1);
}

#[test]
fn key_refusal_from_a_server_without_idempotency_is_the_servers_answer() {
    let _g = SeedGuard(92);
    let mut s = sim(unsafe_keys_server(), 92);
    s.server.fault("a", [Fault::KeyInUse]);
    let c = s.call("a", Some("k-a"));
    s.run_until_complete(c, 5 * SEC);
    s.settle();
    assert_eq!(kind(s.result(c)), ErrorKind::Rpc);
    assert_eq!(s.server.posts_of("a").len(), 1);
}

// | resumed stream: event ids not contiguous |
#[test]
fn row_resumed_stream_gap_reinitializes() {
    let _g = SeedGuard(30);
    let mut s = sim(ServerConfig::default(), 30);
    s.server
        .fault("a", [Fault::CutAfterPriming, Fault::ResumeGap]);
    let c = s.call("a", Some("k"));
    s.run_until_complete(c, 5 * SEC);
    s.settle();
    assert_eq!(ok_tag(s.result(c)), "a");
    assert_eq!(reinitialized(&s), vec![ReinitReason::EventGap]);
    assert_eq!(s.server.executions_of("a"), 1);
}

// | resumed stream delivers a response to a request that is not pending |
#[test]
fn row_resumed_stream_orphaned_response_reinitializes() {
    let _g = SeedGuard(31);
    let mut s = sim(ServerConfig::default(), 31);
    s.server
        .fault("a", [Fault::CutAfterPriming, Fault::ResumeOrphan]);
    let c = s.call("a", None);
    s.run_until_complete(c, 5 * SEC);
    s.settle();
    assert_eq!(kind(s.result(c)), ErrorKind::OutcomeUnknown);
    assert_eq!(reinitialized(&s), vec![ReinitReason::OrphanedResponse]);
}

#[test]
fn duplicate_of_an_answered_response_is_dropped_silently() {
    let _g = SeedGuard(32);
    let mut s = sim(ServerConfig::default(), 32);
    let a = s.call("a", None);
    s.run_until_complete(a, SEC);
    assert_eq!(ok_tag(s.result(a)), "a");
    // "b" resumes from its priming event; the server replays "a"'s answer on it too.
    s.server.fault("b", [Fault::CutAfterPriming]);
    let b = s.call("b", None);
    s.run_until_complete(b, 5 * SEC);
    assert_eq!(ok_tag(s.result(b)), "b");
    assert_eq!(s.completions[&a].len(), 1);
    assert!(reinitialized(&s).is_empty());
}

// | resumed stream ends cleanly without the pending response and made no progress |
#[test]
fn row_unverifiable_clean_end_reinitializes_unkeyed_outcome_unknown() {
    let _g = SeedGuard(33);
    let mut s = sim(ServerConfig::default(), 33);
    s.server
        .fault("a", [Fault::CutAfterPriming, Fault::ResumeNaiveCleanEnd]);
    let c = s.call("a", None);
    s.run_until_complete(c, 5 * SEC);
    s.settle();
    assert_eq!(kind(s.result(c)), ErrorKind::OutcomeUnknown);
    assert_eq!(reinitialized(&s), vec![ReinitReason::UnverifiableCleanEnd]);
    assert_eq!(s.server.posts_of("a").len(), 1);
}

#[test]
fn row_unverifiable_clean_end_safe_keyed_is_resent() {
    let _g = SeedGuard(34);
    let mut s = sim(ServerConfig::default(), 34);
    s.server
        .fault("a", [Fault::CutAfterPriming, Fault::ResumeNaiveCleanEnd]);
    let c = s.call("a", Some("k"));
    s.run_until_complete(c, 5 * SEC);
    s.settle();
    assert_eq!(ok_tag(s.result(c)), "a");
    assert_eq!(s.server.executions_of("a"), 1);
    assert_eq!(s.server.posts_of("a").len(), 2);
}

#[test]
fn unverifiable_clean_end_is_detected_without_the_extension_too() {
    let _g = SeedGuard(35);
    let mut s = sim(
        ServerConfig {
            ext: false,
            idempotency: false,
            ..ServerConfig::default()
        },
        35,
    );
    s.server
        .fault("a", [Fault::CutAfterPriming, Fault::ResumeNaiveCleanEnd]);
    let c = s.call("a", None);
    s.run_until_complete(c, 5 * SEC);
    s.settle();
    assert_eq!(kind(s.result(c)), ErrorKind::OutcomeUnknown);
    assert_eq!(reinitialized(&s), vec![ReinitReason::UnverifiableCleanEnd]);
}

// | … but new events arrived (polling server) |
#[test]
fn row_polling_server_with_progress_is_resumed_again() {
    let _g = SeedGuard(36);
    let mut s = sim(ServerConfig::default(), 36);
    s.server.fault(
        "a",
        [
            Fault::CutAfterPriming,
            Fault::ResumeProgressThenEnd,
            Fault::ResumeProgressThenCut,
        ],
    );
    let c = s.call("a", None);
    s.run_until_complete(c, 10 * SEC);
    assert_eq!(ok_tag(s.result(c)), "a");
    let ids: Vec<_> = s
        .server
        .resumes()
        .iter()
        .map(|r| r.last_event_id.clone().unwrap())
        .collect();
    assert_eq!(ids, vec!["s1-1", "s1-2", "s1-3"], "cursor moves forward");
    assert!(reinitialized(&s).is_empty());
    let progress = s
        .outputs
        .iter()
        .filter(|(_, o)| matches!(o, mcp_resume::proto::Output::Notification { call: Some(x), .. } if *x == c))
        .count();
    assert_eq!(progress, 2);
}

#[test]
fn row_resumes_without_progress_are_bounded() {
    let _g = SeedGuard(37);
    let mut s = sim(ServerConfig::default(), 37);
    s.server.fault("a", [Fault::CutAfterPriming]);
    // Resumes that land and break before any event: no progress, every one.
    s.server
        .fault("a", std::iter::repeat_n(Fault::ResumeCutNoProgress, 10));
    let c = s.call("a", None);
    s.run_until_complete(c, 10 * SEC);
    // The session answered no call: its re-initialization backs off, and comes after.
    s.run_for(SEC);
    // `max_resumes_without_progress` (3) resumes, then the one that shows the bound is
    // reached: the session is re-initialized, and the unkeyed call (which ran) is not
    // re-sent. Unbounded, the resumes would go on until the faults ran out and the stream
    // delivered the answer.
    assert_eq!(s.server.resumes().len(), 4);
    assert_eq!(reinitialized(&s), [ReinitReason::UnverifiableCleanEnd]);
    assert_eq!(kind(s.result(c)), ErrorKind::OutcomeUnknown);
}

#[test]
fn row_refused_resumes_are_retried_then_the_response_fetched() {
    let _g = SeedGuard(37);
    let mut s = sim(ServerConfig::default(), 37);
    s.server.fault("a", [Fault::CutAfterPriming]);
    s.server
        .fault("a", std::iter::repeat_n(Fault::ResumeRefuse, 3));
    let c = s.call("a", None);
    s.run_until_complete(c, 10 * SEC);
    // Refused resumes are retried within max_attempts and then the response is fetched.
    assert_eq!(ok_tag(s.result(c)), "a");
    assert_eq!(s.server.resumes().len(), 1);
}

// | re-initialize | compare and report `capabilities_changed`; reopen the GET stream |
#[test]
fn reinitialize_reports_changed_capability_hash_and_reopens_listen() {
    let _g = SeedGuard(38);
    let mut s = sim(ServerConfig::default(), 38);
    s.server.fault("a", [Fault::NotFound]);
    s.server.cfg.hash = "sha256:abc1".into();
    let c = s.call("a", None);
    s.run_until_complete(c, 5 * SEC);
    s.settle();
    assert!(s.events().iter().any(|e| matches!(
        e,
        SessionEvent::Reinitialized {
            capabilities_changed: true,
            ..
        }
    )));
    let listens: Vec<_> = s
        .server
        .seen
        .iter()
        .filter(|x| x.method == HttpMethod::Get && x.last_event_id.is_none())
        .map(|x| x.session_id.clone().unwrap())
        .collect();
    assert_eq!(listens, vec!["sess-0001-secret", "sess-0002-secret"]);
}

// | re-initialize keeps failing | while calls wait it keeps trying, backing off; each call
// ends at its own deadline (`SessionLost`, the last failure as its cause); with none left
// the client gives up until the next call, which reconnects |
/// A call in flight on the old session whose deadline passes while another call's
/// re-initialization keeps failing was not waiting for that re-initialization: it timed out.
#[test]
fn row_a_call_in_flight_during_failing_reinits_times_out() {
    let _g = SeedGuard(39);
    let mut s = sim(ServerConfig::default(), 39);
    s.server.slow.insert("a".to_owned(), 10 * SEC);
    s.server.fault("b", [Fault::NotFound]);
    s.server
        .init_faults
        .extend(std::iter::repeat_n(InitFault::ServerError, 12));
    s.connect();
    let a = s.call_with("a", None, Some(3 * SEC));
    let b = s.call_with("b", None, Some(2 * SEC));
    s.run_until_complete(b, 60 * SEC);
    assert_eq!(kind(s.result(b)), ErrorKind::SessionLost);
    s.run_until_complete(a, 60 * SEC);
    let err = s.result(a).as_ref().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err:#}");
}

#[test]
fn row_reinit_failures_wait_for_the_deadline_then_session_lost() {
    let _g = SeedGuard(39);
    let mut s = sim(ServerConfig::default(), 39);
    s.server.fault("a", [Fault::NotFound]);
    s.server
        .init_faults
        .extend(std::iter::repeat_n(InitFault::ServerError, 12));
    let a = s.call_with("a", None, Some(2 * SEC));
    let b = s.call_with("b", Some("k"), Some(3 * SEC));
    s.run_until_complete(a, 60 * SEC);
    assert!(s.elapsed() >= 2 * SEC, "{:?}", s.elapsed());
    s.run_until_complete(b, 60 * SEC);
    assert!(s.elapsed() >= 3 * SEC, "{:?}", s.elapsed());
    for c in [a, b] {
        let err = s.result(c).as_ref().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::SessionLost, "{err}");
        assert!(format!("{err:#}").contains("500"), "{err:#}");
    }
    // The attempt in backoff when the last call ended fails too: then the client stops.
    s.run_for(s.elapsed() + 15 * SEC);
    assert!(s.session.is_lost() && !s.session.is_terminated());
    assert!(s
        .events()
        .iter()
        .any(|e| matches!(e, SessionEvent::SessionLost)));
    // The next call reconnects once `initialize` works again.
    s.server.init_faults.clear();
    let c = s.call("c", None);
    s.run_until_complete(c, 60 * SEC);
    assert_eq!(ok_tag(s.result(c)), "c");
}

#[test]
fn reinit_recovers_after_fewer_failures() {
    let _g = SeedGuard(40);
    let mut s = sim(ServerConfig::default(), 40);
    s.server.fault("a", [Fault::NotFound]);
    s.server
        .init_faults
        .extend([InitFault::Refuse, InitFault::ServerError]);
    let a = s.call("a", None);
    s.run_until_complete(a, 60 * SEC);
    assert_eq!(ok_tag(s.result(a)), "a");
    assert_eq!(s.server.executions_of("a"), 1);
}

// | any call: one deadline spans all its resumes and re-sends |
#[test]
fn row_deadline_spans_resumes_and_cancels() {
    let _g = SeedGuard(41);
    let mut s = sim(ServerConfig::default(), 41);
    s.server.fault(
        "a",
        std::iter::once(Fault::CutAfterPriming)
            .chain(std::iter::repeat_n(Fault::ResumeProgressThenCut, 100)),
    );
    let c = s.call_with("a", None, Some(Duration::from_millis(1500)));
    let start = s.elapsed();
    s.run_until_complete(c, 10 * SEC);
    assert_eq!(kind(s.result(c)), ErrorKind::Timeout);
    let done_at = s
        .outputs
        .iter()
        .find_map(|(t, o)| match o {
            mcp_resume::proto::Output::Completed { call, .. } if *call == c => Some(*t),
            _ => None,
        })
        .unwrap();
    assert_eq!(done_at - start, Duration::from_millis(1500));
    let cancelled = s
        .server
        .seen
        .iter()
        .find(|x| x.rpc_method.as_deref() == Some("notifications/cancelled"))
        .expect("notifications/cancelled sent");
    let body = cancelled.body.as_ref().unwrap();
    assert_eq!(
        body["params"]["requestId"],
        s.server.posts_of("a")[0].rpc_id.clone().unwrap()
    );
    assert!(s.server.resumes().len() >= 2);
}

#[test]
fn cancel_posts_notifications_cancelled_and_reports_nothing() {
    let _g = SeedGuard(42);
    let mut s = sim(ServerConfig::default(), 42);
    s.server.fault(
        "a",
        [
            Fault::CutAfterPriming,
            Fault::ResumeRefuse,
            Fault::ResumeRefuse,
        ],
    );
    let c = s.call("a", None);
    s.run_for(s.elapsed() + Duration::from_millis(5));
    s.session.cancel(c, s.now);
    s.pump();
    s.run_for(s.elapsed() + 5 * SEC);
    assert!(!s.completions.contains_key(&c));
    assert!(s
        .server
        .seen
        .iter()
        .any(|x| x.rpc_method.as_deref() == Some("notifications/cancelled")));
    assert!(s.server.resumes().is_empty());
}

/// The `notifications/cancelled` bodies the server saw, in order.
fn cancels_seen(s: &Sim) -> Vec<Value> {
    s.server
        .seen
        .iter()
        .filter(|x| x.rpc_method.as_deref() == Some("notifications/cancelled"))
        .map(|x| x.body.clone().expect("a notification has a body"))
        .collect()
}

/// Where in what the server saw its first DELETE is.
fn delete_seen_at(s: &Sim) -> usize {
    s.server
        .seen
        .iter()
        .position(|x| x.method == HttpMethod::Delete)
        .expect("the DELETE was sent")
}

/// Closing a legacy session tells the server of a call still running on it, before the
/// DELETE: a server that keeps the session (one that answers DELETE 405) would otherwise run
/// the tool on for nobody.
#[test]
fn close_cancels_a_call_still_running() {
    let _g = SeedGuard(43);
    let mut s = sim(ServerConfig::default(), 43);
    s.server.slow.insert("a".into(), 10 * SEC);
    let c = s.call("a", None);
    s.run_for(s.elapsed() + Duration::from_millis(50));
    assert!(!s.completions.contains_key(&c), "the tool is still running");
    let close = s.close();
    s.run_until_complete(close, SEC);
    assert!(s.result(close).is_ok());
    assert_eq!(kind(s.result(c)), ErrorKind::Closed);
    let cancels = cancels_seen(&s);
    assert_eq!(cancels.len(), 1, "{cancels:?}");
    let rpc = s.server.posts_of("a")[0].rpc_id.clone().unwrap();
    assert_eq!(cancels[0]["params"]["requestId"], rpc);
    let cancel_at = s
        .server
        .seen
        .iter()
        .position(|x| x.rpc_method.as_deref() == Some("notifications/cancelled"))
        .unwrap();
    assert!(
        cancel_at < delete_seen_at(&s),
        "the cancel goes before the DELETE"
    );
}

/// A call dropped just before the session closes keeps the cancellation it queued: closing
/// does not take it back.
#[test]
fn a_cancel_queued_just_before_close_is_still_sent() {
    let _g = SeedGuard(44);
    let mut s = sim(ServerConfig::default(), 44);
    s.server.slow.insert("a".into(), 10 * SEC);
    let c = s.call("a", None);
    s.run_for(s.elapsed() + Duration::from_millis(50));
    s.session.cancel(c, s.now);
    let close = s.session.close(s.now);
    s.pump();
    s.run_until_complete(close, SEC);
    assert!(s.result(close).is_ok());
    assert!(
        !s.completions.contains_key(&c),
        "a cancelled call reports nothing"
    );
    let cancels = cancels_seen(&s);
    assert_eq!(cancels.len(), 1, "one cancellation: {cancels:?}");
    let rpc = s.server.posts_of("a")[0].rpc_id.clone().unwrap();
    assert_eq!(cancels[0]["params"]["requestId"], rpc);
    delete_seen_at(&s);
}

/// A call whose POST had not left when the session closed never ran: the server is told
/// nothing of it.
#[test]
fn close_says_nothing_of_a_call_whose_post_never_left() {
    let _g = SeedGuard(45);
    let mut s = sim(ServerConfig::default(), 45);
    let c = mcp_resume::proto::CallId::next();
    let request = mcp_resume::proto::CallRequest::tool_call(
        serde_json::json!({"name": "echo", "arguments": {"tag": "a"}}),
        None,
    );
    s.session.submit(c, request, s.now);
    let close = s.session.close(s.now);
    s.pump();
    s.run_until_complete(close, SEC);
    assert!(s.result(close).is_ok());
    assert_eq!(kind(s.result(c)), ErrorKind::Closed);
    assert!(s.server.posts_of("a").is_empty());
    assert!(cancels_seen(&s).is_empty(), "{:?}", cancels_seen(&s));
    delete_seen_at(&s);
}

// ---------------------------------------------------------------- dangerous_trust_replay

fn trusting() -> SessionConfig {
    SessionConfig::default().with_dangerous_trust_replay(true)
}

#[test]
fn trusting_mode_returns_a_wrong_context_answer_as_success() {
    let _g = SeedGuard(50);
    let mut s = sim_with(trusting(), ServerConfig::default(), 50);
    s.server.fault("a", [Fault::WrongContext]);
    let c = s.call("a", None);
    s.run_until_complete(c, 5 * SEC);
    s.settle();
    let v = s.result(c).as_ref().unwrap();
    assert_eq!(
        v["ctx_ok"], false,
        "the unsafe mode trusts the wrong answer"
    );
}

#[test]
fn trusting_mode_resumes_clean_ends_until_attempts_run_out() {
    let _g = SeedGuard(51);
    let mut s = sim_with(trusting(), ServerConfig::default(), 51);
    s.server.fault(
        "a",
        std::iter::once(Fault::CutAfterPriming)
            .chain(std::iter::repeat_n(Fault::ResumeNaiveCleanEnd, 20)),
    );
    let c = s.call("a", None);
    s.run_until_complete(c, 60 * SEC);
    assert_eq!(kind(s.result(c)), ErrorKind::Transport);
    // The cut POST counts as the first of max_attempts (10) failed attempts.
    assert_eq!(s.server.resumes().len(), 9);
    assert!(reinitialized(&s).is_empty());
}

// ---------------------------------------------------------------- streams and messages

#[test]
fn listen_stream_is_resumed_with_last_event_id_after_retry() {
    let _g = SeedGuard(60);
    let mut s = sim(
        ServerConfig {
            listen_events: 3,
            retry_ms: Some(700),
            ..ServerConfig::default()
        },
        60,
    );
    s.settle();
    let gets: Vec<_> = s
        .server
        .seen
        .iter()
        .filter(|x| x.method == HttpMethod::Get)
        .collect();
    assert_eq!(gets.len(), 2, "{gets:?}");
    assert_eq!(gets[0].last_event_id, None);
    assert_eq!(gets[1].last_event_id.as_deref(), Some("L1-3"));
    // Three events and the cut arrive 1 ms apart after the head.
    let waited = gets[1].at - gets[0].at - Duration::from_millis(5);
    assert!(
        waited >= Duration::from_millis(700),
        "reconnected after {waited:?}"
    );
    let notes = s
        .outputs
        .iter()
        .filter(|(_, o)| {
            matches!(o, mcp_resume::proto::Output::Notification { call: None, notification }
                if notification.method == "notifications/message")
        })
        .count();
    assert_eq!(notes, 3);
}

#[test]
fn server_requests_and_notifications_reach_the_app_and_ping_is_answered() {
    let _g = SeedGuard(61);
    let mut s = sim(ServerConfig::default(), 61);
    let c = s.call("req1", None);
    s.run_until_complete(c, SEC);
    assert_eq!(ok_tag(s.result(c)), "req1");
    // ping is answered by the session itself.
    let answer = s
        .server
        .seen
        .iter()
        .find(|x| x.body.as_ref().is_some_and(|b| b["id"] == "srv-ping"))
        .expect("ping answered");
    assert_eq!(
        answer.body.as_ref().unwrap()["result"],
        serde_json::json!({})
    );
    assert_eq!(answer.session_id.as_deref(), Some("sess-0001-secret"));
    // Other requests go to the app, which answers through respond().
    let req = s
        .outputs
        .iter()
        .find_map(|(_, o)| match o {
            mcp_resume::proto::Output::ServerRequest(r) => Some(r.clone()),
            _ => None,
        })
        .expect("server request delivered");
    assert_eq!(req.method, "roots/list");
    s.session
        .respond(req.id, Ok(serde_json::json!({"roots": []})), s.now);
    s.pump();
    assert!(s.server.seen.iter().any(|x| x
        .body
        .as_ref()
        .is_some_and(|b| b["id"] == "srv-roots" && b["result"]["roots"].is_array())));
    // The progress notification is attributed to the call whose stream carried it.
    assert!(s.outputs.iter().any(|(_, o)| matches!(
        o,
        mcp_resume::proto::Output::Notification { call: Some(x), notification }
            if *x == c && notification.method == "notifications/progress"
    )));
}

#[test]
fn batches_are_accepted_under_2025_03_26() {
    let _g = SeedGuard(62);
    let mut s = sim(
        ServerConfig {
            protocol_version: "2025-03-26".into(),
            sse: false,
            batch: true,
            ..ServerConfig::default()
        },
        62,
    );
    let c = s.call("a", None);
    s.run_until_complete(c, SEC);
    assert_eq!(ok_tag(s.result(c)), "a");
}

#[test]
fn batches_are_refused_under_later_versions() {
    let _g = SeedGuard(63);
    let mut s = sim(
        ServerConfig {
            sse: false,
            batch: true,
            ..ServerConfig::default()
        },
        63,
    );
    let c = s.call("a", None);
    s.run_until_complete(c, SEC);
    assert!(s.result(c).is_err());
}

#[test]
fn oversized_bodies_and_events_fail_with_too_large() {
    for sse in [false, true] {
        let _g = SeedGuard(64);
        let config = SessionConfig::default()
            .with_max_body_size(600)
            .with_max_event_size(600);
        let mut s = sim_with(
            config,
            ServerConfig {
                sse,
                ..ServerConfig::default()
            },
            64,
        );
        let c = s.call(&"x".repeat(1000), None);
        s.run_until_complete(c, SEC);
        assert_eq!(kind(s.result(c)), ErrorKind::TooLarge, "sse={sse}");
    }
}

#[test]
fn session_id_is_never_shown_in_full() {
    let _g = SeedGuard(65);
    let s = sim(ServerConfig::default(), 65);
    let id = s.session.session_id().unwrap();
    assert_eq!(id.expose(), "sess-0001-secret");
    assert!(!format!("{id} {id:?}").contains("secret"));
}

#[test]
fn a_get_endpoint_that_says_404_for_405_does_not_loop_reinitializing() {
    let _g = SeedGuard(66);
    let mut s = sim(
        ServerConfig {
            listen: false,
            listen_404: true,
            ..ServerConfig::default()
        },
        66,
    );
    s.run_for(Duration::from_secs(60));
    assert_eq!(s.server.initializes(), 2);
    let c = s.call("a", None);
    s.run_until_complete(c, SEC);
    assert_eq!(ok_tag(s.result(c)), "a");
    assert_no_stale_session_id(&s);
}

#[test]
fn cancelling_a_call_that_never_left_sends_nothing() {
    let _g = SeedGuard(67);
    let mut s = Sim::new(SessionConfig::default(), ServerConfig::default(), 67);
    let c = s.call("a", None);
    s.session.cancel(c, s.now);
    let conn = s.connect();
    s.run_until_complete(conn, SEC);
    s.settle();
    assert!(s.server.posts_of("a").is_empty());
    assert!(!s
        .server
        .seen
        .iter()
        .any(|x| x.rpc_method.as_deref() == Some("notifications/cancelled")));
    assert!(!s.completions.contains_key(&c));
}

#[test]
fn initialize_answered_over_sse_captures_the_session_id_from_its_head() {
    let _g = SeedGuard(68);
    let mut s = sim(
        ServerConfig {
            init_sse: true,
            ..ServerConfig::default()
        },
        68,
    );
    let c = s.call("a", None);
    s.run_until_complete(c, SEC);
    assert_eq!(ok_tag(s.result(c)), "a");
    assert_eq!(
        s.server.posts_of("a")[0].session_id.as_deref(),
        Some("sess-0001-secret")
    );
    // The initialize stream was held open by the server: the client closed it.
    let initialize = s
        .server
        .seen
        .iter()
        .find(|x| x.rpc_method.as_deref() == Some("initialize"))
        .unwrap();
    assert!(s.aborted.contains(&initialize.http));
}

#[test]
fn concurrent_calls_on_a_vanished_session_are_each_resent_once() {
    let _g = SeedGuard(69);
    let mut s = sim(ServerConfig::default(), 69);
    s.server.fault("a", [Fault::NotFound]);
    let a = s.call("a", None);
    let b = s.call("b", None);
    let c = s.call("c", Some("kc"));
    for id in [a, b, c] {
        s.run_until_complete(id, 5 * SEC);
    }
    s.settle();
    for (id, tag) in [(a, "a"), (b, "b"), (c, "c")] {
        assert_eq!(ok_tag(s.result(id)), tag);
        assert_eq!(s.server.executions_of(tag), 1, "{tag}");
        let accepted = s
            .server
            .posts_of(tag)
            .iter()
            .filter(|p| !p.not_accepted)
            .count();
        assert_eq!(accepted, 1, "{tag}");
    }
    assert_eq!(s.server.initializes(), 2, "one re-initialization for all");
    assert_no_stale_session_id(&s);
}

#[test]
fn a_response_arriving_during_reinitialization_is_still_checked_against_its_session() {
    let _g = SeedGuard(70);
    let mut s = sim(ServerConfig::default(), 70);
    // "a" is answered 404 first, which starts a re-initialization; "b" was already running
    // on an instance with another context and its head arrives while the session is
    // re-initializing.
    s.server.fault("a", [Fault::NotFound]);
    s.server.fault("b", [Fault::WrongContextHeaderOnly]);
    s.server.slow.insert("b".into(), Duration::from_millis(2));
    let b = s.call("b", None);
    let a = s.call("a", None);
    s.run_until_complete(a, 5 * SEC);
    s.run_until_complete(b, 5 * SEC);
    assert_eq!(ok_tag(s.result(a)), "a");
    assert_eq!(kind(s.result(b)), ErrorKind::ContextMismatch);
}

// ---------------------------------------------------------------- cancellation of unsent POSTs

/// A driver that took a call's POST from `poll_transmit` and drops it unstarted tells the
/// session so with `cancel_unsent`: the request never left, so the server is told nothing,
/// and nothing of the call goes out afterwards. `cancel` of the same situation (the driver
/// cannot tell) assumes the POST may have run and sends `notifications/cancelled`.
#[test]
fn a_post_given_back_unsent_is_cancelled_without_a_word_to_the_server() {
    for unsent in [true, false] {
        let mut s = sim(ServerConfig::default(), 31);
        let request = mcp_resume::proto::CallRequest::tool_call(
            serde_json::json!({"name": "echo", "arguments": {"tag": "dropped"}}),
            None,
        );
        let call = mcp_resume::CallId::next();
        s.session.submit(call, request, s.now);
        let post = match s.session.poll_transmit() {
            Some(mcp_resume::proto::Transmit::Send(post)) => post,
            other => panic!("the call's POST, not {other:?}"),
        };
        assert_eq!(s.session.exchange_call(post.id), Some(call));
        if unsent {
            s.session.cancel_unsent(call, post.id, s.now);
        } else {
            s.session.cancel(call, s.now);
        }
        let mut bodies = Vec::new();
        while let Some(t) = s.session.poll_transmit() {
            if let mcp_resume::proto::Transmit::Send(req) = t {
                bodies
                    .push(String::from_utf8_lossy(req.body.as_deref().unwrap_or(b"")).into_owned());
            }
        }
        let cancelled = bodies
            .iter()
            .filter(|b| b.contains("notifications/cancelled"))
            .count();
        assert_eq!(
            cancelled,
            usize::from(!unsent),
            "unsent {unsent}: {bodies:?}"
        );
        assert!(
            !bodies.iter().any(|b| b.contains("tools/call")),
            "the call is never sent again: {bodies:?}"
        );
    }
}

// | a keyed call refused unprocessed (404) is re-sent on a session whose server keeps keys
// otherwise than the first one | its record is written again before the re-send: a new
// process reads whether the server that may have run it deduplicates keys, not the first's |
#[test]
fn a_re_send_to_a_server_that_keeps_keys_otherwise_is_recorded_first() {
    let _g = SeedGuard(41);
    let mut s = sim_with(
        SessionConfig::default().with_checkpoints(true),
        ServerConfig::default(),
        41,
    );
    s.server.fault("a", [Fault::NotFound]);
    // The session the 404 leads to is one whose server ignores keys.
    s.server.cfg.idempotency = false;
    let c = s.call("a", Some("k-a"));
    s.run_until_complete(c, 5 * SEC);
    assert_eq!(ok_tag(s.result(c)), "a");
    let recorded: Vec<bool> = s
        .outputs
        .iter()
        .filter_map(|(_, o)| match o {
            mcp_resume::proto::Output::Checkpoint { call, checkpoint } if *call == c => {
                Some(checkpoint.server_dedups)
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        recorded,
        [true, false],
        "one record per server, before its send"
    );
}
