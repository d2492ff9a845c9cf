//! Sessions: the advertisement, the capability hash on every response, sequenced event ids.

use http::{HeaderValue, Method};
use mcp_resume_server::guard::{GuardConfig, SseFlow};
use mcp_resume_server::wire::capability_hash;
use serde_json::{json, Value};

use crate::harness::*;

fn instance() -> Instance {
    Instance::new(GuardConfig::default(), 1)
}

// | `initialize` answered as JSON | the result gains `experimental.resumeSafety` (every part
// enforced), the head `Mcp-Capability-Hash` of (version, client caps, server caps as sent),
// and the session record (owner: this instance) goes to the store |
#[test]
fn initialize_json_is_advertised_hashed_and_recorded() {
    let mut w = World::new();
    let mut a = instance();
    let caps = json!({"experimental": {"sampling": {"temperature": 0.2}}});
    let seen = w.initialize(&mut a, "s1", caps.clone());
    let result = &seen.json()["result"];
    let adv = &result["capabilities"]["experimental"]["resumeSafety"];
    assert_eq!(adv, &mock_server::context::resume_safety_capability());
    let want = capability_hash(V, &caps, &result["capabilities"]);
    assert_eq!(seen.header("mcp-capability-hash"), Some(want.as_str()));
    let sid = mcp_resume_server::ids::SessionId::parse(b"s1").unwrap();
    let record = &w.store.sessions[&sid];
    assert_eq!(record.owner(), a.guard.config().instance());
    assert_eq!(record.hash(), &want);
}

// | `initialize` answered as SSE | the head waits for the result; the result event gains
// the advertisement; the stream's ids are sequenced |
#[test]
fn initialize_sse_holds_the_head_until_its_result() {
    let mut w = World::new();
    let mut a = instance();
    let fate = w.post(&mut a, None, &init_body(json!({})), &[]);
    let (_, mut watch) = fate.watch();
    let mut head = sse_head();
    head.insert("mcp-session-id", "s1".parse().unwrap());
    let plan = watch.handle_head(&mut a.guard, http::StatusCode::OK, &mut head);
    assert_eq!(plan, mcp_resume_server::guard::BodyPlan::Sse);
    let mut out = bytes::BytesMut::new();
    watch.handle_sse(&mut a.guard, b"id: 0\nretry: 3000\ndata: \n\n", &mut out);
    assert!(
        !watch.head_ready(),
        "the hash is not known before the result"
    );
    let data = String::from_utf8(init_result(1)).unwrap();
    watch.handle_sse(
        &mut a.guard,
        format!("data: {data}\n\n").as_bytes(),
        &mut out,
    );
    assert!(watch.head_ready());
    watch.finish_head(&mut head);
    assert!(head.contains_key("mcp-capability-hash"));
    let events = sse_events(&String::from_utf8_lossy(&out));
    assert!(events[0].0.as_deref().unwrap().ends_with("-1"));
    let msg: Value = serde_json::from_str(&events[1].1).unwrap();
    assert_eq!(
        msg["result"]["capabilities"]["experimental"]["resumeSafety"]["version"],
        1
    );
}

// | `initialize` without a session id in the answer | only idempotency is advertised, no
// hash, no record |
#[test]
fn a_sessionless_initialize_advertises_keys_only() {
    let mut w = World::new();
    let mut a = instance();
    let fate = w.post(&mut a, None, &init_body(json!({})), &[]);
    let (_, mut watch) = fate.watch();
    let seen = a.respond(
        &mut w.store,
        w.now,
        &mut watch,
        200,
        json_head(),
        Response::Json(&init_result(1)),
    );
    let adv = &seen.json()["result"]["capabilities"]["experimental"]["resumeSafety"];
    assert!(adv.get("capabilityHash").is_none() && adv.get("sequencedEventIds").is_none());
    assert!(adv["idempotency"].is_object());
    assert_eq!(seen.header("mcp-capability-hash"), None);
    assert!(w.store.sessions.is_empty());
}

// | a failed `initialize` (4xx, an error body) | passes untouched, nothing recorded |
#[test]
fn a_failed_initialize_passes_untouched() {
    let mut w = World::new();
    let mut a = instance();
    let (_, mut watch) = w.post(&mut a, None, &init_body(json!({})), &[]).watch();
    let body = br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"bad"}}"#;
    let seen = a.respond(
        &mut w.store,
        w.now,
        &mut watch,
        200,
        json_head(),
        Response::Json(body),
    );
    assert_eq!(seen.body, body);
    let (_, mut watch) = w.post(&mut a, None, &init_body(json!({})), &[]).watch();
    let seen = a.respond(
        &mut w.store,
        w.now,
        &mut watch,
        400,
        json_head(),
        Response::Json(b"x"),
    );
    assert_eq!(seen.body, b"x");
    assert!(w.store.sessions.is_empty());
}

// | any response of a known session (JSON, 202, errors) | carries the session's hash |
#[test]
fn every_response_of_the_session_carries_its_hash() {
    let mut w = World::new();
    let mut a = instance();
    let hash = w
        .initialize(&mut a, "s1", json!({}))
        .header("mcp-capability-hash")
        .unwrap()
        .to_owned();
    for (body, status) in [
        (
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            202,
        ),
        (
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
            200,
        ),
        (json!({"jsonrpc": "2.0", "id": 3, "method": "nope"}), 200),
    ] {
        let (_, mut watch) = w
            .post(&mut a, Some("s1"), body.to_string().as_bytes(), &[])
            .watch();
        let seen = a.respond(
            &mut w.store,
            w.now,
            &mut watch,
            status,
            json_head(),
            Response::Raw(b"{}"),
        );
        assert_eq!(seen.header("mcp-capability-hash"), Some(hash.as_str()));
        assert_eq!(
            seen.body, b"{}",
            "bodies of unkeyed requests pass untouched"
        );
    }
    assert_eq!(
        w.store
            .ops(|op| matches!(op, mcp_resume_server::guard::StoreOp::LoadSession(_))),
        0,
        "the instance that saw initialize needs no store read"
    );
}

// | a request of a session this instance never saw | the record is read from the store
// once, then known |
#[test]
fn another_instance_reads_the_record_once() {
    let mut w = World::new();
    let mut a = instance();
    let mut b = Instance::new(GuardConfig::default(), 2);
    let hash = w
        .initialize(&mut a, "s1", json!({}))
        .header("mcp-capability-hash")
        .unwrap()
        .to_owned();
    for id in 2..4 {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/list"}).to_string();
        let (_, mut watch) = w.post(&mut b, Some("s1"), body.as_bytes(), &[]).watch();
        let seen = b.respond(
            &mut w.store,
            w.now,
            &mut watch,
            200,
            json_head(),
            Response::Raw(b"{}"),
        );
        assert_eq!(seen.header("mcp-capability-hash"), Some(hash.as_str()));
    }
    use mcp_resume_server::guard::StoreOp;
    assert_eq!(w.store.ops(|op| matches!(op, StoreOp::LoadSession(_))), 1);
}

// | a session nobody recorded; the store down | passes untouched, no hash invented |
#[test]
fn unknown_sessions_and_a_down_store_pass_untouched() {
    let mut w = World::new();
    let mut a = instance();
    let body = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).to_string();
    assert!(w
        .post(&mut a, Some("nobody"), body.as_bytes(), &[])
        .is_passed());
    w.store.down = true;
    assert!(w
        .post(&mut a, Some("nobody"), body.as_bytes(), &[])
        .is_passed());
    let call = call_body(3, "echo", json!({}), None);
    assert!(
        w.post(&mut a, None, &call, &[]).is_passed(),
        "unkeyed sessionless traffic passes"
    );
}

// | an `initialize` answered compressed (passed unread: no record, nothing advertised) | the
// session's later requests, on this instance and another, pass untouched: a session the
// guard could not record must keep working without its protection, not be answered 404 on
// every request (its client would re-initialize into the same state forever) |
#[test]
fn a_session_whose_initialize_passed_unread_keeps_working() {
    let mut w = World::new();
    let mut a = instance();
    let mut b = instance();
    let (_, mut watch) = w.post(&mut a, None, &init_body(json!({})), &[]).watch();
    let mut head = json_head();
    head.insert("mcp-session-id", HeaderValue::from_static("s1"));
    head.insert("content-encoding", HeaderValue::from_static("gzip"));
    let gzipped = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03";
    a.respond(
        &mut w.store,
        w.now,
        &mut watch,
        200,
        head,
        Response::Json(gzipped),
    );
    assert!(w.store.sessions.is_empty(), "nothing could be recorded");
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).to_string();
    for inst in [&mut a, &mut b] {
        assert!(w.post(inst, Some("s1"), list.as_bytes(), &[]).is_passed());
    }
}

// | an SSE response of the session | ids `<stream>-<seq>`, seq 1, 2, … per id-carrying
// event; events without an id keep none; bytes otherwise unchanged |
#[test]
fn sse_ids_are_sequenced_per_stream() {
    let mut w = World::new();
    let mut a = instance();
    w.initialize(&mut a, "s1", json!({}));
    let call = call_body(2, "echo", json!({"text": "x"}), None);
    let (_, mut watch) = w.post(&mut a, Some("s1"), &call, &[]).watch();
    let response = result(2, "x");
    let chunks = vec![
        "id: 0/0\nre",
        "try: 3000\ndata: \n\n: keep-alive\n\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{}}\n\n",
        "id: 1/0\n",
    ];
    let tail = format!("data: {response}\n\n");
    let mut all = chunks.clone();
    all.push(&tail);
    let seen = a.respond(
        &mut w.store,
        w.now,
        &mut watch,
        200,
        sse_head(),
        Response::Sse(all, true),
    );
    assert_eq!(seen.flow, SseFlow::Continue);
    let events = seen.events();
    let ids: Vec<_> = events.iter().map(|(id, _)| id.clone()).collect();
    let stream = ids[0]
        .as_deref()
        .unwrap()
        .split('-')
        .next()
        .unwrap()
        .to_owned();
    assert_eq!(
        ids,
        [
            Some(format!("{stream}-1")),
            None,
            Some(format!("{stream}-2"))
        ]
    );
    assert_eq!(events[2].1, response);
    assert!(String::from_utf8_lossy(&seen.body).contains(": keep-alive\n"));
}

// | an SSE response that opens with a byte order mark (which a client skips: no part of the
// first line) | its first event's id is numbered like the others, not passed as the inner
// server wrote it |
#[test]
fn a_stream_opening_with_a_byte_order_mark_is_sequenced_from_its_first_event() {
    let mut w = World::new();
    let mut a = instance();
    w.initialize(&mut a, "s1", json!({}));
    let call = call_body(2, "echo", json!({"text": "x"}), None);
    let (_, mut watch) = w.post(&mut a, Some("s1"), &call, &[]).watch();
    let response = result(2, "x");
    let tail = format!("id: 1/0\ndata: {response}\n\n");
    let seen = a.respond(
        &mut w.store,
        w.now,
        &mut watch,
        200,
        sse_head(),
        Response::Sse(vec!["\u{feff}id: 0/0\ndata: \n\n", &tail], true),
    );
    // Read as a client reads it: the mark skipped.
    let body = String::from_utf8(seen.body.clone()).unwrap();
    let events = sse_events(body.strip_prefix('\u{feff}').unwrap_or(&body));
    let ids: Vec<_> = events.iter().map(|(id, _)| id.clone().unwrap()).collect();
    assert_eq!(ids.len(), 2, "{body:?}");
    let stream = ids[1].strip_suffix("-2").expect("ours, second");
    assert_eq!(ids[0], format!("{stream}-1"), "{body:?}");
}

// | the GET listen stream | sequenced as a stream of its own |
#[test]
fn the_listen_stream_is_sequenced_too() {
    let mut w = World::new();
    let mut a = instance();
    w.initialize(&mut a, "s1", json!({}));
    let (last, mut watch) = w.get(&mut a, "s1", None).watch();
    assert_eq!(last, None);
    let seen = a.respond(
        &mut w.store,
        w.now,
        &mut watch,
        200,
        sse_head(),
        Response::Sse(vec!["id: 0\ndata: \n\nid: 1\ndata: {}\n\n"], true),
    );
    let ids: Vec<_> = seen
        .events()
        .into_iter()
        .map(|(id, _)| id.unwrap())
        .collect();
    assert!(ids[0].ends_with("-1") && ids[1].ends_with("-2"));
}

// | a DELETE answered 2xx | the session is forgotten here and in the store |
#[test]
fn delete_forgets_the_session() {
    let mut w = World::new();
    let mut a = instance();
    w.initialize(&mut a, "s1", json!({}));
    let fate = a.request(
        &mut w.store,
        w.now,
        Method::DELETE,
        &headers(&[("mcp-session-id", "s1")]),
        None,
    );
    let (_, mut watch) = fate.watch();
    a.respond(
        &mut w.store,
        w.now,
        &mut watch,
        200,
        json_head(),
        Response::Raw(b""),
    );
    assert!(w.store.sessions.is_empty());
}

// | `server/discover` (2026-07-28) | its result gains the extension's idempotency part
// under `capabilities.extensions`, nothing about hashes |
#[test]
fn discover_is_advertised_with_keys_only() {
    let mut w = World::new();
    let mut a = instance();
    let body =
        json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {}}).to_string();
    let (_, mut watch) = w.post(&mut a, None, body.as_bytes(), &[]).watch();
    let answer = json!({"jsonrpc": "2.0", "id": 1, "result": {"supportedVersions": ["2026-07-28"],
        "capabilities": {"tools": {}}}})
    .to_string();
    let seen = a.respond(
        &mut w.store,
        w.now,
        &mut watch,
        200,
        json_head(),
        Response::Json(answer.as_bytes()),
    );
    let ext =
        &seen.json()["result"]["capabilities"]["extensions"]["io.github.mcp-resume/resume-safety"];
    assert_eq!(
        ext,
        &mock_server::context::modern_resume_safety_capability()
    );
    assert_eq!(seen.header("mcp-capability-hash"), None);
}

// | bodies that are not JSON-RPC, non-MCP methods | pass untouched |
#[test]
fn what_the_guard_does_not_understand_passes() {
    let mut w = World::new();
    let mut a = instance();
    assert!(w.post(&mut a, None, b"not json", &[]).is_passed());
    assert!(w.post(&mut a, None, b"[1,2]", &[]).is_passed());
    assert!(w
        .post(
            &mut a,
            None,
            br#"{"jsonrpc":"2.0","id":{},"method":"x"}"#,
            &[]
        )
        .is_passed());
    let fate = a.request(&mut w.store, w.now, Method::OPTIONS, &headers(&[]), None);
    assert!(fate.is_passed());
    let fate = a.request(
        &mut w.store,
        w.now,
        Method::PUT,
        &headers(&[("mcp-session-id", "s")]),
        None,
    );
    assert!(fate.is_passed());
}

// | a keyed call of a session this instance does not hold, its record unreadable (the store
// failed the read) | 503 `IDEMPOTENCY_STORE_UNAVAILABLE`, nothing claimed, nothing run: run
// without the record, its answer would go unstamped and the client refuse a call that ran |
#[test]
fn a_keyed_call_whose_session_cannot_be_read_is_refused_for_now() {
    use mcp_resume_server::guard::StoreOp;
    let mut w = World::new();
    let mut a = instance();
    let mut b = Instance::new(GuardConfig::default(), 2);
    w.initialize(&mut a, "s1", json!({}));
    w.store.loads_fail = true;
    let call = call_body(2, "echo", json!({"text": "x"}), Some("k-1"));
    let answer = w.post(&mut b, Some("s1"), &call, &[]).answer();
    assert_eq!(answer.status(), 503);
    assert_eq!(
        answer.json()["error"]["data"]["code"],
        "IDEMPOTENCY_STORE_UNAVAILABLE"
    );
    assert!(answer.headers().iter().any(|(n, _)| n == "retry-after"));
    assert_eq!(w.store.ops(|op| matches!(op, StoreOp::Claim(_))), 0);
    w.store.loads_fail = false;
    let (_, mut watch) = w.post(&mut b, Some("s1"), &call, &[]).watch();
    let seen = b.respond(
        &mut w.store,
        w.now,
        &mut watch,
        200,
        json_head(),
        Response::Json(result(2, "x").as_bytes()),
    );
    assert!(
        seen.header("mcp-capability-hash").is_some(),
        "once the record is read, the call runs guarded"
    );
}

// | a keyed call names a session neither this instance nor the store knows (its record was
// evicted or expired) | answered 404 as the inner server answers an unknown session, so the
// client starts over; never run without its context's mark |
#[test]
fn a_keyed_call_of_a_session_nobody_knows_is_answered_not_found() {
    use mcp_resume_server::guard::StoreOp;
    let mut w = World::new();
    let mut a = instance();
    let mut b = Instance::new(GuardConfig::default(), 2);
    w.initialize(&mut a, "s1", json!({}));
    w.store
        .sessions
        .remove(&mcp_resume_server::ids::SessionId::parse(b"s1").unwrap());
    let call = call_body(2, "echo", json!({"text": "x"}), Some("k-1"));
    let answer = w.post(&mut b, Some("s1"), &call, &[]).answer();
    assert_eq!(answer.status(), 404);
    assert_eq!(w.store.ops(|op| matches!(op, StoreOp::Claim(_))), 0);
}

// | a session in use past the store's retention: unkeyed calls at 0.9× and 1.5× the
// retention after `initialize`, on the instance that saw it and on one that never did |
// each response carries the hash and the record is still in the store: a session in use
// keeps its record alive |
#[test]
fn a_session_in_use_keeps_its_record_past_the_retention() {
    let retention = std::time::Duration::from_secs(24 * 3600);
    let mut w = World::new();
    w.store.retention = Some(retention);
    let mut a = instance();
    let t0 = w.now;
    let hash = w
        .initialize(&mut a, "s1", json!({}))
        .header("mcp-capability-hash")
        .unwrap()
        .to_owned();
    let sid = mcp_resume_server::ids::SessionId::parse(b"s1").unwrap();
    let call = |w: &mut World, inst: &mut Instance, id: i64| {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "echo", "arguments": {}}})
        .to_string();
        let (_, mut watch) = w.post(inst, Some("s1"), body.as_bytes(), &[]).watch();
        let now = w.now;
        inst.respond(
            &mut w.store,
            now,
            &mut watch,
            200,
            json_head(),
            Response::Json(result(id, "ok").as_bytes()),
        )
    };
    // The instance that saw `initialize` (its ledger holds the session).
    w.now = t0 + retention.mul_f64(0.9);
    let seen = call(&mut w, &mut a, 2);
    assert_eq!(seen.header("mcp-capability-hash"), Some(hash.as_str()));
    // Another instance, past the retention of the record's first write.
    let mut b = Instance::new(GuardConfig::default(), 2);
    w.now = t0 + retention.mul_f64(1.5);
    let seen = call(&mut w, &mut b, 3);
    assert_eq!(seen.header("mcp-capability-hash"), Some(hash.as_str()));
    w.store.expire(w.now);
    assert!(w.store.sessions.contains_key(&sid), "the record is kept");
    // And a third one, later still: the second instance's load refreshed it too.
    let mut c = Instance::new(GuardConfig::default(), 3);
    w.now = t0 + retention.mul_f64(2.3);
    let seen = call(&mut w, &mut c, 4);
    assert_eq!(seen.header("mcp-capability-hash"), Some(hash.as_str()));
}

// | a session in use, on the instance that saw `initialize` | its record is touched once
// per half retention, not per call: calls cost no store operation in between |
#[test]
fn a_session_in_use_is_touched_once_per_half_retention() {
    use mcp_resume_server::guard::StoreOp;
    let retention = std::time::Duration::from_secs(24 * 3600);
    let mut w = World::new();
    w.store.retention = Some(retention);
    let mut a = instance();
    let t0 = w.now;
    w.initialize(&mut a, "s1", json!({}));
    let ops = |w: &World| w.store.log.len();
    let touches = |w: &World| {
        w.store
            .ops(|op| matches!(op, StoreOp::TouchSession(s) if s.expose() == "s1"))
    };
    let body = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).to_string();
    let before = ops(&w);
    for frac in [0.1, 0.3, 0.49] {
        w.now = t0 + retention.mul_f64(frac);
        let _ = w.post(&mut a, Some("s1"), body.as_bytes(), &[]).watch();
    }
    assert_eq!(
        ops(&w),
        before,
        "no store operation before half the retention"
    );
    for frac in [0.5, 0.6, 0.99] {
        w.now = t0 + retention.mul_f64(frac);
        let _ = w.post(&mut a, Some("s1"), body.as_bytes(), &[]).watch();
    }
    assert_eq!(touches(&w), 1);
    w.now = t0 + retention.mul_f64(1.0);
    let _ = w.post(&mut a, Some("s1"), body.as_bytes(), &[]).watch();
    assert_eq!(touches(&w), 2);
    assert_eq!(ops(&w), before + 2, "touches only");
}
