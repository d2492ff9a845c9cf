//! Deterministic simulation: the Session against a scripted server in virtual time, one
//! fault schedule per DESIGN.md §4 row, asserting on what the server observed.

mod sim;

use std::time::Duration;

use mcp_resume::proto::{
    HttpMethod, ReinitReason, RejectReason, ResendPolicy, SessionConfig, SessionEvent,
};
use mcp_resume::ErrorKind;
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
    // initialize, initialized, GET listen, POST call.
    let kinds: Vec<_> = s
        .server
        .seen
        .iter()
        .map(|x| (x.method, x.rpc_method.clone()))
        .collect();
    assert_eq!(
        kinds,
        vec![
            (HttpMethod::Post, Some("initialize".into())),
            (HttpMethod::Post, Some("notifications/initialized".into())),
            (HttpMethod::Get, None),
            (HttpMethod::Post, Some("tools/call".into())),
        ]
    );
    let init = &s.server.seen[0];
    assert_eq!(init.session_id, None);
    assert_eq!(
        init.accept.as_deref(),
        Some("application/json, text/event-stream")
    );
    assert_eq!(init.content_type.as_deref(), Some("application/json"));
    for seen in &s.server.seen[1..] {
        assert_eq!(seen.session_id.as_deref(), Some("sess-0001-secret"));
        assert_eq!(seen.protocol_version.as_deref(), Some("2025-11-25"));
    }
    // The POST stream is finished once its response arrived.
    let post = s.server.posts_of("a")[0].http;
    assert!(s.aborted.contains(&post));
    assert!(matches!(
        s.events()[0],
        SessionEvent::Connected { ref protocol_version } if protocol_version == "2025-11-25"
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
    assert!(s.server.seen.iter().all(|x| x.protocol_version.is_none()));
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

#[test]
fn calls_submitted_before_connect_wait_for_it() {
    let _g = SeedGuard(5);
    let mut s = Sim::new(SessionConfig::default(), ServerConfig::default(), 5);
    let c = s.call("early", None);
    assert!(s.server.seen.is_empty());
    let conn = s.connect();
    s.run_until_complete(c, SEC);
    assert!(s.result(conn).is_ok());
    assert_eq!(ok_tag(s.result(c)), "early");
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
