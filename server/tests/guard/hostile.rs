//! Whatever the network sends, the guard neither panics nor grows without bound: random
//! bodies, headers and SSE bytes through every kind of exchange.

use http::{HeaderMap, HeaderValue, Method, StatusCode};
use mcp_resume_server::guard::{Body, BodyPlan, GuardConfig, Step};
use proptest::prelude::*;
use serde_json::json;

use crate::harness::*;

fn bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..300),
        // Near-misses of what the guard reads.
        prop::sample::select(vec![
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":{"io.github.mcp-resume/idempotency-key":"k"}}}"#.to_vec(),
            br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"capabilities":[]}}"#.to_vec(),
            br#"[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":7}]"#.to_vec(),
            br#"{"id":1,"result":{"capabilities":{"experimental":[]}}}"#.to_vec(),
            b"id: \r\r\rdata: {\"id\":1,\"result\":{}}\n\n".to_vec(),
            b"id: 0000000000000001-99999999999999999999\n".to_vec(),
        ]),
    ]
}

fn header_value() -> impl Strategy<Value = String> {
    "[ -~]{0,40}"
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    #[test]
    fn arbitrary_exchanges_never_panic(
        body in bytes(),
        session in prop::option::of(header_value()),
        key in prop::option::of(header_value()),
        last in prop::option::of(header_value()),
        get in any::<bool>(),
        status in prop::sample::select(vec![200u16, 202, 400, 404, 500, 503]),
        sse in any::<bool>(),
        chunks in prop::collection::vec(bytes(), 0..6),
    ) {
        let mut w = World::new();
        let mut a = Instance::new(GuardConfig::default(), 1);
        w.initialize(&mut a, "s1", json!({}));
        let mut h = HeaderMap::new();
        let mut put = |name: &'static str, v: &Option<String>| {
            if let Some(v) = v.as_ref().and_then(|v| HeaderValue::from_str(v).ok()) {
                h.insert(name, v);
            }
        };
        put("mcp-session-id", &session);
        put("idempotency-key", &key);
        put("last-event-id", &last);
        let method = if get { Method::GET } else { Method::POST };
        let mut ex = a.guard.begin(&method, &h, w.now);
        let mut fate = None;
        for _ in 0..8 {
            while ex.poll_op().is_some() {}
            match ex.step() {
                Step::ReadBody { limit } => {
                    let seen = if body.len() > limit { Body::TooLarge(&body) } else { Body::Complete(&body) };
                    ex.handle_body(&mut a.guard, seen, &h);
                }
                Step::Store(_) => ex.handle_session(&mut a.guard, Ok(None)),
                Step::Forward(f) => { fate = Some(f.into_watch()); break; }
                _ => break,
            }
        }
        if let Some(mut watch) = fate {
            let mut head = if sse { sse_head() } else { json_head() };
            let plan = watch.handle_head(&mut a.guard, StatusCode::from_u16(status).unwrap(), &mut head);
            let mut out = bytes::BytesMut::new();
            match plan {
                BodyPlan::Json { .. } => { let _ = watch.handle_json(&mut a.guard, &body); }
                BodyPlan::Sse => {
                    for c in &chunks {
                        let _ = watch.handle_sse(&mut a.guard, c, &mut out);
                    }
                    watch.handle_end(&mut a.guard, true, &mut out);
                }
                _ => {}
            }
            let _ = watch.take_refusal();
            watch.finish_head(&mut head);
            while watch.poll_op().is_some() {}
        }
    }
}

/// An SSE stream that never ends a block is held only up to the bound, then passed through.
#[test]
fn an_endless_block_is_bounded() {
    let mut w = World::new();
    let mut a = Instance::new(GuardConfig::default(), 1);
    w.initialize(&mut a, "s1", json!({}));
    let call = call_body(2, "echo", json!({}), None);
    let (_, mut watch) = w.post(&mut a, Some("s1"), &call, &[]).watch();
    watch.handle_head(&mut a.guard, StatusCode::OK, &mut sse_head());
    let chunk = vec![b'x'; 64 * 1024];
    let mut passed = 0usize;
    for _ in 0..(GuardConfig::default().max_body() / chunk.len() + 4) {
        let mut out = bytes::BytesMut::new();
        watch.handle_sse(&mut a.guard, &chunk, &mut out);
        passed += out.len();
    }
    assert!(
        passed > 0,
        "past the bound the bytes flow untouched instead of piling up"
    );
}

/// A resume's replay is held with the head until it is proven; a client that asks for a long
/// one (its cursor far back) must not make the guard hold all of it: past one event's bound
/// the head goes and the rest is still checked as it passes, a divergence then cutting the
/// stream (and breaking it for the next resume) instead of answering 404.
#[test]
fn a_long_replay_is_not_held_whole() {
    let mut w = World::new();
    let mut a = Instance::new(GuardConfig::default(), 1);
    w.initialize(&mut a, "s1", json!({}));
    let call = call_body(2, "echo", json!({}), None);
    let (_, mut watch) = w.post(&mut a, Some("s1"), &call, &[]).watch();
    let max = GuardConfig::default().max_body();
    let note = |n: usize| {
        let text = "x".repeat(max / 2);
        format!(
            "id: {n}/0\ndata: {}\n\n",
            json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"data": text}})
        )
    };
    let chunks: Vec<String> = std::iter::once("id: 0/0\ndata: \n\n".to_owned())
        .chain((1..=6).map(note))
        .collect();
    let refs: Vec<&str> = chunks.iter().map(String::as_str).collect();
    let seen = a.respond(
        &mut w.store,
        w.now,
        &mut watch,
        200,
        sse_head(),
        Response::Sse(refs, true),
    );
    let first = seen.events()[0].0.clone().unwrap();

    for diverge in [false, true] {
        let (_, mut replay) = w.get(&mut a, "s1", Some(&first)).watch();
        replay.handle_head(&mut a.guard, StatusCode::OK, &mut sse_head());
        let mut held = 0;
        let mut flows = Vec::new();
        for (i, chunk) in chunks[1..].iter().enumerate() {
            // The diverging replay skips its fifth event.
            if diverge && i == 4 {
                continue;
            }
            let mut out = bytes::BytesMut::new();
            flows.push(replay.handle_sse(&mut a.guard, chunk.as_bytes(), &mut out));
            if replay.head_ready() {
                break;
            }
            held += out.len();
        }
        assert!(replay.head_ready(), "the head went before the replay ended");
        assert!(held <= max + 64 * 1024, "held {held} bytes");
        let mut head = sse_head();
        replay.finish_head(&mut head);
        let mut flow = mcp_resume_server::guard::SseFlow::Continue;
        for (i, chunk) in chunks[1..].iter().enumerate().skip(flows.len()) {
            if diverge && i == 4 {
                continue;
            }
            flow = replay.handle_sse(&mut a.guard, chunk.as_bytes(), &mut bytes::BytesMut::new());
            if flow != mcp_resume_server::guard::SseFlow::Continue {
                break;
            }
        }
        assert!(replay.take_refusal().is_none(), "the head went: no 404 now");
        if diverge {
            assert_eq!(flow, mcp_resume_server::guard::SseFlow::Abort);
            let again = w.get(&mut a, "s1", Some(&first)).answer();
            assert_eq!(again.status(), 404, "the broken stream's next resume");
        } else {
            assert_eq!(flow, mcp_resume_server::guard::SseFlow::Continue);
        }
    }
}

/// An `initialize` answered with SSE holds its head until its result: an inner server that
/// sends notification after notification first must not make the guard hold them all. Past
/// the bound the head goes without the hash (none is known) and the session is not recorded,
/// as when a block over the bound comes.
#[test]
fn an_initialize_held_past_the_bound_lets_its_head_go_unmarked() {
    let mut w = World::new();
    let mut a = Instance::new(GuardConfig::default(), 1);
    let (_, mut watch) = w.post(&mut a, None, &init_body(json!({})), &[]).watch();
    let mut head = sse_head();
    head.insert("mcp-session-id", "s1".parse().unwrap());
    watch.handle_head(&mut a.guard, StatusCode::OK, &mut head);
    let max = GuardConfig::default().max_body();
    let text = "x".repeat(16 * 1024);
    let note = format!(
        "data: {}\n\n",
        json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"data": text}})
    );
    let mut held = 0;
    while !watch.head_ready() {
        assert!(held <= max + 64 * 1024, "held {held} bytes");
        let mut out = bytes::BytesMut::new();
        watch.handle_sse(&mut a.guard, note.as_bytes(), &mut out);
        held += out.len();
    }
    watch.finish_head(&mut head);
    assert!(!head.contains_key("mcp-capability-hash"));
    let data = String::from_utf8(init_result(1)).unwrap();
    let mut out = bytes::BytesMut::new();
    watch.handle_sse(
        &mut a.guard,
        format!("data: {data}\n\n").as_bytes(),
        &mut out,
    );
    drain(&mut w.store, w.now, &mut watch);
    assert!(
        w.store.sessions.is_empty(),
        "no record for a context not stamped"
    );
    assert!(
        !String::from_utf8_lossy(&out).contains("resumeSafety"),
        "nothing advertised that the head did not carry"
    );
}
