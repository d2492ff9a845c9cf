//! Idempotency, both eras: a keyed `tools/call` claimed once across instances; its answer
//! stored and replayed to the new JSON-RPC id; refusals for reuse, a running key, a lost one.

use std::time::Duration;

use mcp_resume_server::guard::{GuardConfig, StoreOp};
use mcp_resume_server::wire::RESULT_HASH_META_KEY;
use serde_json::{json, Value};

use crate::harness::*;

fn instance(seed: u64) -> Instance {
    Instance::new(GuardConfig::default(), seed)
}

/// A world with a session `s1` initialized on `a`; the session's hash.
fn session() -> (World, Instance, String) {
    let mut w = World::new();
    let mut a = instance(1);
    let seen = w.initialize(&mut a, "s1", json!({}));
    let hash = seen.header("mcp-capability-hash").unwrap().to_owned();
    (w, a, hash)
}

/// Runs a keyed call through `inst` to its JSON answer `text`: the answer the client saw.
fn run_keyed(w: &mut World, inst: &mut Instance, id: i64, key: &str, text: &str) -> Value {
    let call = call_body(id, "bump", json!({"n": 1}), Some(key));
    let (_, mut watch) = w
        .post(inst, Some("s1"), &call, &[("idempotency-key", key)])
        .watch();
    assert!(
        watch.must_drain(),
        "a keyed call's answer is read whoever waits"
    );
    let body = result(id, text);
    let seen = inst.respond(
        &mut w.store,
        w.now,
        &mut watch,
        200,
        json_head(),
        Response::Json(body.as_bytes()),
    );
    seen.json()
}

fn code(v: &Value) -> &str {
    v["error"]["data"]["code"].as_str().unwrap_or("")
}

// | first keyed call | claimed, forwarded; its answer stored before the client sees it,
// carrying the session's hash in `_meta` |
#[test]
fn a_first_keyed_call_runs_and_its_answer_is_stored() {
    let (mut w, mut a, hash) = session();
    let answer = run_keyed(&mut w, &mut a, 2, "k1", "done");
    assert_eq!(
        answer["result"]["_meta"][RESULT_HASH_META_KEY],
        hash.as_str()
    );
    assert_eq!(w.store.ops(|op| matches!(op, StoreOp::Claim(_))), 1);
    assert_eq!(w.store.ops(|op| matches!(op, StoreOp::Finish { .. })), 1);
}

// | a keyed result whose `_meta` is `null` (serializers writing an absent `Option`) | stamped
// as one without `_meta`: the stored answer names its context, so a client under another
// one refuses its replay; a result that cannot carry the mark (`_meta` not an object) is not
// stored unmarked: the key is lost |
#[test]
fn a_result_with_a_null_meta_is_stamped_and_one_that_cannot_be_is_not_stored() {
    let (mut w, mut a, hash) = session();
    let call = call_body(2, "bump", json!({}), Some("k1"));
    let (_, mut watch) = w.post(&mut a, Some("s1"), &call, &[]).watch();
    let body = json!({"jsonrpc": "2.0", "id": 2, "result": {"content": [], "_meta": null}});
    let body = body.to_string();
    let seen = a.respond(
        &mut w.store,
        w.now,
        &mut watch,
        200,
        json_head(),
        Response::Json(body.as_bytes()),
    );
    assert_eq!(
        seen.json()["result"]["_meta"][RESULT_HASH_META_KEY],
        hash.as_str()
    );
    let again = call_body(3, "bump", json!({}), Some("k1"));
    let v = w.post(&mut a, Some("s1"), &again, &[]).answer().json();
    assert_eq!(v["result"]["_meta"][RESULT_HASH_META_KEY], hash.as_str());

    let call = call_body(4, "bump", json!({}), Some("k2"));
    let (_, mut watch) = w.post(&mut a, Some("s1"), &call, &[]).watch();
    let body = json!({"jsonrpc": "2.0", "id": 4, "result": {"content": [], "_meta": "odd"}});
    let body = body.to_string();
    a.respond(
        &mut w.store,
        w.now,
        &mut watch,
        200,
        json_head(),
        Response::Json(body.as_bytes()),
    );
    let again = call_body(5, "bump", json!({}), Some("k2"));
    let v = w.post(&mut a, Some("s1"), &again, &[]).answer().json();
    assert_eq!(code(&v), "IDEMPOTENCY_OUTCOME_UNKNOWN");
}

// | the same key and arguments again, on any instance | answered from the store: the first
// answer re-addressed to the new id, its hash in `_meta`; the inner server never sees it |
#[test]
fn the_same_call_again_gets_the_stored_answer() {
    let (mut w, mut a, hash) = session();
    run_keyed(&mut w, &mut a, 2, "k1", "done");
    let mut b = instance(2);
    let call = call_body(7, "bump", json!({"n": 1}), Some("k1"));
    let answer = w.post(&mut b, Some("s1"), &call, &[]).answer();
    assert_eq!(answer.status(), 200);
    let v = answer.json();
    assert_eq!(v["id"], 7);
    assert_eq!(v["result"]["content"][0]["text"], "done");
    assert_eq!(v["result"]["_meta"][RESULT_HASH_META_KEY], hash.as_str());
    assert!(answer
        .headers()
        .iter()
        .any(|(n, v)| n == "mcp-capability-hash" && v == hash.as_str()));
}

// | the same key, other arguments | -32602 `IDEMPOTENCY_KEY_REUSED`, nothing runs |
#[test]
fn the_same_key_for_another_call_is_refused() {
    let (mut w, mut a, _) = session();
    run_keyed(&mut w, &mut a, 2, "k1", "done");
    let other = call_body(3, "bump", json!({"n": 2}), Some("k1"));
    let v = w.post(&mut a, Some("s1"), &other, &[]).answer().json();
    assert_eq!(code(&v), "IDEMPOTENCY_KEY_REUSED");
    assert_eq!(v["error"]["code"], -32602);
    let other_tool = call_body(4, "echo", json!({"n": 1}), Some("k1"));
    assert_eq!(
        code(&w.post(&mut a, Some("s1"), &other_tool, &[]).answer().json()),
        "IDEMPOTENCY_KEY_REUSED"
    );
}

// | the same key, arguments told apart only by digits past 64 bits | refused as another
// call: two such integers are not one argument because a double cannot tell them apart |
#[test]
fn the_same_key_for_integers_apart_past_64_bits_is_refused() {
    let (mut w, mut a, _) = session();
    let call = |id: i64, n: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"bump","arguments":{{"n":{n}}},"_meta":{{"{KEY_META}":"k1"}}}}}}"#
        )
    };
    let first = call(2, "100000000000000000001");
    let (_, mut watch) = w.post(&mut a, Some("s1"), first.as_bytes(), &[]).watch();
    let body = result(2, "done");
    a.respond(
        &mut w.store,
        w.now,
        &mut watch,
        200,
        json_head(),
        Response::Json(body.as_bytes()),
    );
    let other = call(3, "100000000000000000002");
    let v = w
        .post(&mut a, Some("s1"), other.as_bytes(), &[])
        .answer()
        .json();
    assert_eq!(code(&v), "IDEMPOTENCY_KEY_REUSED");
    let again = call(4, "100000000000000000001");
    let v = w
        .post(&mut a, Some("s1"), again.as_bytes(), &[])
        .answer()
        .json();
    assert_eq!(v["result"]["content"][0]["text"], "done", "{v}");
}

// | storing the answer fails once | the lease is still renewed and the answer stored
// again: a re-send long after gets it, not `IDEMPOTENCY_OUTCOME_UNKNOWN` |
#[test]
fn an_answer_whose_storing_failed_is_stored_again_while_the_lease_is_held() {
    let (mut w, mut a, _) = session();
    w.store.finishes_fail = 1;
    let call = call_body(2, "bump", json!({"n": 1}), Some("k1"));
    let (_, mut watch) = w.post(&mut a, Some("s1"), &call, &[]).watch();
    watch.start(w.now);
    let body = result(2, "done");
    a.respond(
        &mut w.store,
        w.now,
        &mut watch,
        200,
        json_head(),
        Response::Json(body.as_bytes()),
    );
    assert!(watch.is_storing_again());
    let mut steps = 0;
    while let Some(at) = watch.poll_timeout() {
        steps += 1;
        assert!(steps < 100, "never settles");
        w.now = w.now.max(at);
        watch.handle_timeout(w.now);
        drain(&mut w.store, w.now, &mut watch);
    }
    assert!(!watch.is_storing_again());
    w.now += w.lease * 10;
    let again = call_body(3, "bump", json!({"n": 1}), Some("k1"));
    let v = w.post(&mut a, Some("s1"), &again, &[]).answer().json();
    assert_eq!(v["result"]["content"][0]["text"], "done", "{v}");
}

// | the same key while the first still runs | -32000 `IDEMPOTENCY_KEY_IN_USE` at once |
#[test]
fn a_running_key_is_in_use() {
    let (mut w, mut a, _) = session();
    let call = call_body(2, "bump", json!({}), Some("k1"));
    let (_, _running) = w.post(&mut a, Some("s1"), &call, &[]).watch();
    let again = call_body(3, "bump", json!({}), Some("k1"));
    let v = w.post(&mut a, Some("s1"), &again, &[]).answer().json();
    assert_eq!(code(&v), "IDEMPOTENCY_KEY_IN_USE");
    assert_eq!(v["id"], 3);
}

// | the holder renews its lease | the key stays in use past the first lease |
#[test]
fn renewals_keep_a_long_call_in_use() {
    let (mut w, mut a, _) = session();
    let call = call_body(2, "bump", json!({}), Some("k1"));
    let (_, mut running) = w.post(&mut a, Some("s1"), &call, &[]).watch();
    let start = w.now;
    for _ in 0..10 {
        let due = running.poll_timeout().expect("a running keyed call renews");
        assert!(due <= w.now + w.lease / 3);
        w.now = due;
        running.handle_timeout(w.now);
        drain(&mut w.store, w.now, &mut running);
    }
    assert!(w.now > start + w.lease * 3);
    let again = call_body(3, "bump", json!({}), Some("k1"));
    assert_eq!(
        code(&w.post(&mut a, Some("s1"), &again, &[]).answer().json()),
        "IDEMPOTENCY_KEY_IN_USE"
    );
}

// | the holder dies before an answer (its lease lapses) | -32000
// `IDEMPOTENCY_OUTCOME_UNKNOWN`, for good: the key never runs again |
#[test]
fn a_key_whose_holder_died_is_lost_for_good() {
    let (mut w, mut a, _) = session();
    let call = call_body(2, "bump", json!({}), Some("k1"));
    let (_, dead) = w.post(&mut a, Some("s1"), &call, &[]).watch();
    drop(dead); // the process died: no renewal, no answer
    w.now += w.lease + Duration::from_millis(1);
    let mut b = instance(2);
    for id in 3..6 {
        let again = call_body(id, "bump", json!({}), Some("k1"));
        let v = w.post(&mut b, Some("s1"), &again, &[]).answer().json();
        assert_eq!(code(&v), "IDEMPOTENCY_OUTCOME_UNKNOWN");
        w.now += w.lease * 2;
    }
    assert_eq!(
        w.store.ops(|op| matches!(op, StoreOp::Claim(_))),
        4,
        "one grant, three refusals"
    );
}

// | the inner server refuses the call with a status that proves it was not processed (400,
// 404, 429, 503 with `Retry-After`, …) | the key is released: the call provably did not run,
// and a retry runs it |
#[test]
fn a_refused_call_releases_its_key() {
    let json_later = || headers(&[("content-type", "application/json"), ("retry-after", "1")]);
    for (status, head) in [
        (400, json_head()),
        (404, json_head()),
        (429, json_head()),
        (503, json_later()),
    ] {
        let (mut w, mut a, _) = session();
        let call = call_body(2, "bump", json!({}), Some("k1"));
        let (_, mut watch) = w.post(&mut a, Some("s1"), &call, &[]).watch();
        a.respond(
            &mut w.store,
            w.now,
            &mut watch,
            status,
            head,
            Response::Raw(b"{}"),
        );
        assert_eq!(
            w.store.ops(|op| matches!(op, StoreOp::Release { .. })),
            1,
            "{status}"
        );
        let (_, retry) = w.post(&mut a, Some("s1"), &call, &[]).watch();
        assert!(retry.must_drain(), "{status}: the retry holds the key");
    }
}

// | the inner server fails after accepting it (500, a 2xx that does not answer it, a
// stream that ends without its answer), or refuses it in words that do not prove it did not
// run (a timeout layer's 408 after the handler started, 409, 422, a 503 without
// `Retry-After`) | the key is lost: its outcome is unknown |
#[test]
fn a_call_that_may_have_run_without_an_answer_is_lost() {
    let cases: Vec<(u16, http::HeaderMap, Response<'static>)> = vec![
        (500, json_head(), Response::Raw(b"oops")),
        (408, json_head(), Response::Raw(b"")),
        (409, json_head(), Response::Raw(b"{}")),
        (422, json_head(), Response::Raw(b"{}")),
        (503, json_head(), Response::Raw(b"draining")),
        (
            200,
            json_head(),
            Response::Json(br#"{"jsonrpc":"2.0","id":99,"result":{}}"#),
        ),
        (200, json_head(), Response::Json(b"not json")),
        (
            200,
            headers(&[("content-type", "text/plain")]),
            Response::Raw(b"?"),
        ),
        (
            200,
            sse_head(),
            Response::Sse(vec!["id: 0/0\ndata: \n\n"], true),
        ),
        (
            200,
            sse_head(),
            Response::Sse(vec!["id: 0/0\ndata: \n\n"], false),
        ),
    ];
    for (i, (status, head, body)) in cases.into_iter().enumerate() {
        let (mut w, mut a, _) = session();
        let call = call_body(2, "bump", json!({}), Some("k1"));
        let (_, mut watch) = w.post(&mut a, Some("s1"), &call, &[]).watch();
        a.respond(&mut w.store, w.now, &mut watch, status, head, body);
        assert_eq!(
            w.store.ops(|op| matches!(op, StoreOp::MarkLost { .. })),
            1,
            "case {i}"
        );
        let v = w.post(&mut a, Some("s1"), &call, &[]).answer().json();
        assert_eq!(code(&v), "IDEMPOTENCY_OUTCOME_UNKNOWN", "case {i}");
    }
}

// | an SSE answer | captured from the event with the call's id (stamped with the hash),
// numbered like any event of the session |
#[test]
fn an_sse_answer_is_captured_from_its_event() {
    let (mut w, mut a, hash) = session();
    let call = call_body(2, "bump", json!({}), Some("k1"));
    let (_, mut watch) = w.post(&mut a, Some("s1"), &call, &[]).watch();
    let other = result(77, "not ours");
    let ours = result(2, "ours");
    let chunks = [
        format!("id: 0/0\ndata: {other}\n\n"),
        format!("id: 1/0\ndata: {ours}\n\n"),
    ];
    let seen = a.respond(
        &mut w.store,
        w.now,
        &mut watch,
        200,
        sse_head(),
        Response::Sse(chunks.iter().map(String::as_str).collect(), true),
    );
    let events = seen.events();
    let delivered: Value = serde_json::from_str(&events[1].1).unwrap();
    assert_eq!(
        delivered["result"]["_meta"][RESULT_HASH_META_KEY],
        hash.as_str()
    );
    assert!(events[1].0.as_deref().unwrap().ends_with("-2"));
    let again = call_body(3, "bump", json!({}), Some("k1"));
    let v = w.post(&mut a, Some("s1"), &again, &[]).answer().json();
    assert_eq!(v["result"]["content"][0]["text"], "ours");
}

// | a keyed call's SSE answer in an event whose `id:` is empty (the inner server resets the
// client's cursor there), after a priming event | captured and stamped with the hash, and
// sent with its `id:` still empty, as the inner server wrote it: never given a number the
// client would resume from |
#[test]
fn an_sse_answer_in_an_event_with_an_empty_id_is_captured_and_keeps_it_empty() {
    let (mut w, mut a, hash) = session();
    let call = call_body(2, "bump", json!({}), Some("k1"));
    let (_, mut watch) = w.post(&mut a, Some("s1"), &call, &[]).watch();
    let ours = format!("id:\ndata: {}\n\n", result(2, "ours"));
    let seen = a.respond(
        &mut w.store,
        w.now,
        &mut watch,
        200,
        sse_head(),
        Response::Sse(vec!["id: 0/0\ndata: \n\n", &ours], true),
    );
    let events = seen.events();
    assert!(events[0].0.as_deref().unwrap().ends_with("-1"));
    assert_eq!(events[1].0.as_deref(), Some(""), "{events:?}");
    let delivered: Value = serde_json::from_str(&events[1].1).unwrap();
    assert_eq!(
        delivered["result"]["_meta"][RESULT_HASH_META_KEY],
        hash.as_str()
    );
    let again = call_body(3, "bump", json!({}), Some("k1"));
    let v = w.post(&mut a, Some("s1"), &again, &[]).answer().json();
    assert_eq!(v["result"]["content"][0]["text"], "ours");
}

// | before a keyed call's answer, events with its id that no client takes for its answer: a
// message with a `method` (a request or notification to the client, whatever else it
// holds), one without `jsonrpc: "2.0"`, one with both `result` and `error`, one whose
// `error` is not an object | passed, not captured: the answer stored is the one the client
// took, never one it ignored (served to every re-send as the call's answer) |
#[test]
fn only_what_a_client_takes_for_the_answer_is_captured() {
    let fake = json!({"content": [{"type": "text", "text": "fake"}]});
    let rows = [
        json!({"jsonrpc": "2.0", "id": 2, "method": "notifications/message",
            "params": {"level": "info", "data": "x"}, "result": fake}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "sampling/createMessage", "result": fake}),
        json!({"id": 2, "result": fake}),
        json!({"jsonrpc": "1.0", "id": 2, "result": fake}),
        json!({"jsonrpc": "2.0", "id": 2, "result": fake, "error": {"code": 1, "message": "x"}}),
        json!({"jsonrpc": "2.0", "id": 2, "result": fake, "error": null}),
        json!({"jsonrpc": "2.0", "id": 2, "error": "fake"}),
    ];
    for (n, not_an_answer) in rows.iter().enumerate() {
        let (mut w, mut a, _) = session();
        let key = format!("k{n}");
        let call = call_body(2, "bump", json!({}), Some(&key));
        let (_, mut watch) = w.post(&mut a, Some("s1"), &call, &[]).watch();
        let ours = result(2, "ours");
        let chunks = [
            format!("id: 0/0\ndata: {not_an_answer}\n\n"),
            format!("id: 1/0\ndata: {ours}\n\n"),
        ];
        a.respond(
            &mut w.store,
            w.now,
            &mut watch,
            200,
            sse_head(),
            Response::Sse(chunks.iter().map(String::as_str).collect(), true),
        );
        let again = call_body(3, "bump", json!({}), Some(&key));
        let v = w.post(&mut a, Some("s1"), &again, &[]).answer().json();
        assert_eq!(
            v["result"]["content"][0]["text"], "ours",
            "{not_an_answer}: the re-send got {v}"
        );
    }
}

// | a keyed call's SSE answer in the first event of a stream opening with a byte order mark
// (which a client skips) | captured: its re-send gets it, not "outcome unknown" |
#[test]
fn an_sse_answer_after_a_byte_order_mark_is_captured() {
    let (mut w, mut a, _) = session();
    let call = call_body(2, "bump", json!({}), Some("k1"));
    let (_, mut watch) = w.post(&mut a, Some("s1"), &call, &[]).watch();
    let first = format!("\u{feff}data: {}\n\n", result(2, "ours"));
    a.respond(
        &mut w.store,
        w.now,
        &mut watch,
        200,
        sse_head(),
        Response::Sse(vec![&first], true),
    );
    let again = call_body(3, "bump", json!({}), Some("k1"));
    let v = w.post(&mut a, Some("s1"), &again, &[]).answer().json();
    assert_eq!(v["result"]["content"][0]["text"], "ours", "{v}");
}

// | a keyed answer with numbers a `f64` cannot hold (beyond 64 bits, long decimals) | the
// client sees them as the inner server wrote them, first from the server (JSON and SSE) and
// again from the store; only the hash is added |
#[test]
fn a_keyed_answers_numbers_pass_as_written() {
    let exact = r#""structuredContent":{"big":123456789012345678901234567890,"fine":0.10000000000000000555}"#;
    for sse in [false, true] {
        let (mut w, mut a, hash) = session();
        let call = call_body(2, "bump", json!({}), Some("k1"));
        let (_, mut watch) = w.post(&mut a, Some("s1"), &call, &[]).watch();
        let answer = format!(r#"{{"jsonrpc":"2.0","id":2,"result":{{"content":[],{exact}}}}}"#);
        let chunk = format!("id: 0/0\ndata: {answer}\n\n");
        let (head, body) = match sse {
            true => (sse_head(), Response::Sse(vec![chunk.as_str()], true)),
            false => (json_head(), Response::Json(answer.as_bytes())),
        };
        let seen = a.respond(&mut w.store, w.now, &mut watch, 200, head, body);
        let delivered = match sse {
            true => seen.events().remove(0).1,
            false => String::from_utf8(seen.body.clone()).unwrap(),
        };
        assert!(delivered.contains(exact), "sse {sse}: {delivered}");
        let stamped: Value = serde_json::from_str(&delivered).unwrap();
        assert_eq!(
            stamped["result"]["_meta"][RESULT_HASH_META_KEY],
            hash.as_str()
        );
        let again = call_body(3, "bump", json!({}), Some("k1"));
        let replayed = w.post(&mut a, Some("s1"), &again, &[]).answer();
        let replayed = String::from_utf8(replayed.body().to_vec()).unwrap();
        assert!(replayed.contains(exact), "sse {sse}: {replayed}");
        assert!(replayed.contains(r#""id":3"#), "{replayed}");
    }
}

// | the call's stream forgotten while it runs (a refused resume of the session on this
// instance, or the stream evicted) | its answer is still captured and stored: the re-send
// gets it, not `IDEMPOTENCY_OUTCOME_UNKNOWN` |
#[test]
fn an_answer_on_a_forgotten_stream_is_still_captured() {
    let (mut w, mut a, _) = session();
    let call = call_body(2, "bump", json!({}), Some("k1"));
    let (_, mut watch) = w.post(&mut a, Some("s1"), &call, &[]).watch();
    let mut head = sse_head();
    watch.handle_head(&mut a.guard, http::StatusCode::OK, &mut head);
    watch.finish_head(&mut head);
    // A resume with a cursor no guard issued is refused, and the session forgotten here.
    assert_eq!(w.get(&mut a, "s1", Some("0/0")).answer().status(), 404);
    let ours = result(2, "ours");
    let mut out = bytes::BytesMut::new();
    let chunk = format!("id: 0/0\ndata: {ours}\n\n");
    watch.handle_sse(&mut a.guard, chunk.as_bytes(), &mut out);
    watch.handle_end(&mut a.guard, true, &mut out);
    drain(&mut w.store, w.now, &mut watch);
    w.initialize(&mut a, "s2", json!({}));
    let again = call_body(3, "bump", json!({}), Some("k1"));
    let v = w.post(&mut a, Some("s2"), &again, &[]).answer().json();
    assert_eq!(v["result"]["content"][0]["text"], "ours", "{v}");
}

// | an error answer | stored and replayed as it was (no `_meta` added to an error) |
#[test]
fn an_error_answer_is_stored_as_it_is() {
    let (mut w, mut a, _) = session();
    let call = call_body(2, "bump", json!({}), Some("k1"));
    let (_, mut watch) = w.post(&mut a, Some("s1"), &call, &[]).watch();
    let err = br#"{"jsonrpc":"2.0","id":2,"error":{"code":-32602,"message":"bad args"}}"#;
    let seen = a.respond(
        &mut w.store,
        w.now,
        &mut watch,
        200,
        json_head(),
        Response::Json(err),
    );
    assert_eq!(seen.body, err, "the body passes unchanged");
    let v = w
        .post(
            &mut a,
            Some("s1"),
            &call_body(3, "bump", json!({}), Some("k1")),
            &[],
        )
        .answer()
        .json();
    assert_eq!(
        v,
        json!({"jsonrpc": "2.0", "id": 3, "error": {"code": -32602, "message": "bad args"}})
    );
}

// | the store cannot be reached | 503 + `Retry-After`, `IDEMPOTENCY_STORE_UNAVAILABLE`;
// never forwarded unguarded |
#[test]
fn a_keyed_call_is_never_run_unguarded() {
    let (mut w, mut a, _) = session();
    w.store.down = true;
    let answer = w
        .post(
            &mut a,
            Some("s1"),
            &call_body(2, "bump", json!({}), Some("k1")),
            &[],
        )
        .answer();
    assert_eq!(answer.status(), 503);
    assert!(answer
        .headers()
        .iter()
        .any(|(n, v)| n == "retry-after" && v == "1"));
    assert_eq!(code(&answer.json()), "IDEMPOTENCY_STORE_UNAVAILABLE");
    assert_eq!(answer.json()["id"], 2);
}

// | a key that is not valid, or two different keys | 400 `IDEMPOTENCY_KEY_INVALID` |
#[test]
fn invalid_and_conflicting_keys_are_refused() {
    let (mut w, mut a, _) = session();
    let body = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "bump", "_meta": {KEY_META: 5}}})
    .to_string();
    let answer = w.post(&mut a, Some("s1"), body.as_bytes(), &[]).answer();
    assert_eq!(answer.status(), 400);
    assert_eq!(code(&answer.json()), "IDEMPOTENCY_KEY_INVALID");
    let call = call_body(3, "bump", json!({}), Some("k1"));
    let answer = w
        .post(&mut a, Some("s1"), &call, &[("idempotency-key", "k2")])
        .answer();
    assert_eq!(code(&answer.json()), "IDEMPOTENCY_KEY_INVALID");
}

// | a key with a space at either edge | 400 `IDEMPOTENCY_KEY_INVALID`: HTTP strips a header
// value's edge whitespace, so its header would name another key than its body |
#[test]
fn keys_with_edge_whitespace_are_refused() {
    let (mut w, mut a, _) = session();
    let call = call_body(2, "bump", json!({}), Some("order-1 "));
    let answer = w.post(&mut a, Some("s1"), &call, &[]).answer();
    assert_eq!(answer.status(), 400);
    assert_eq!(code(&answer.json()), "IDEMPOTENCY_KEY_INVALID");
    // As it arrives over HTTP/1, the header stripped and the body's key not: the key itself
    // is refused, not the two places' disagreement.
    let call = call_body(3, "bump", json!({}), Some(" order-1"));
    let answer = w
        .post(&mut a, Some("s1"), &call, &[("idempotency-key", "order-1")])
        .answer();
    assert_eq!(answer.status(), 400);
    let body = answer.json();
    assert_eq!(code(&body), "IDEMPOTENCY_KEY_INVALID");
    let message = body["error"]["message"].as_str().unwrap_or("");
    assert!(message.contains("begin or end"), "{message}");
}

// | a keyed call in a batch; a keyed body over the bound | refused (400, 413), never
// forwarded unguarded |
#[test]
fn keyed_calls_the_guard_cannot_see_whole_are_refused() {
    let (mut w, mut a, _) = session();
    let one: Value = serde_json::from_slice(&call_body(2, "bump", json!({}), Some("k1"))).unwrap();
    let batch = Value::Array(vec![
        one,
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}),
    ]);
    let answer = w
        .post(&mut a, Some("s1"), batch.to_string().as_bytes(), &[])
        .answer();
    assert_eq!(
        (answer.status().as_u16(), code(&answer.json())),
        (400, "IDEMPOTENCY_UNGUARDABLE")
    );
    let big = vec![b' '; GuardConfig::default().max_body() + 1];
    let answer = w
        .post(&mut a, Some("s1"), &big, &[("idempotency-key", "k1")])
        .answer();
    assert_eq!(answer.status(), 413);
    let unkeyed_batch = json!([{"jsonrpc": "2.0", "id": 3, "method": "tools/list"}]).to_string();
    assert!(matches!(
        w.post(&mut a, Some("s1"), unkeyed_batch.as_bytes(), &[]),
        Fate::Forwarded { .. }
    ));
    assert!(
        w.post(&mut a, None, &big, &[]).is_passed(),
        "an unkeyed body over the bound passes"
    );
    // Keyed only in the body (`_meta`, or SEP-3182's member), within what was read of it.
    let pad = "x".repeat(GuardConfig::default().max_body());
    let in_meta = call_body(4, "upload", json!({"blob": pad}), Some("k-big"));
    let standard = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
        "params": {"idempotencyKey": "k-big2", "name": "upload", "arguments": {"blob": pad}}})
    .to_string();
    for body in [in_meta, standard.into_bytes()] {
        let answer = w.post(&mut a, None, &body, &[]).answer();
        assert_eq!(answer.status(), 413);
    }
    assert_eq!(w.store.ops(|op| matches!(op, StoreOp::Claim(_))), 0);
}

// | a batch whose first element is `null` or a string, a keyed call after it (an array the
// deserializer would take, by position, for one message's members) | refused 400 as any
// keyed call in a batch, never forwarded unguarded |
#[test]
fn a_keyed_call_in_a_batch_read_by_position_is_refused() {
    let (mut w, mut a, _) = session();
    let keyed: Value =
        serde_json::from_slice(&call_body(2, "bump", json!({}), Some("k1"))).unwrap();
    let unkeyed: Value = serde_json::from_slice(&call_body(3, "bump", json!({}), None)).unwrap();
    let rows: [(Value, &[(&str, &str)]); 4] = [
        (json!([null, keyed]), &[]),
        (json!(["tools/call", keyed]), &[]),
        (
            json!([null, keyed, {"jsonrpc": "2.0", "id": 4, "method": "ping"}]),
            &[],
        ),
        (json!([null, unkeyed]), &[("idempotency-key", "k2")]),
    ];
    for (batch, extra) in rows {
        let fate = w.post(&mut a, Some("s1"), batch.to_string().as_bytes(), extra);
        let Fate::Answered(answer) = fate else {
            panic!("{batch}: forwarded unguarded: {fate:?}");
        };
        assert_eq!(
            (answer.status().as_u16(), code(&answer.json())),
            (400, "IDEMPOTENCY_UNGUARDABLE"),
            "{batch}"
        );
    }
    assert_eq!(w.store.ops(|op| matches!(op, StoreOp::Claim(_))), 0);
}

// | 2026-07-28: no session, the key in the header, in `_meta`, or SEP-3182's
// `params.idempotencyKey` | claimed alike; the answer carries no hash (there is no session) |
#[test]
fn sessionless_keyed_calls_are_deduplicated_too() {
    let modern = |id: i64| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": "bump", "arguments": {}, "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}})
    };
    let mut w = World::new();
    let mut a = instance(1);
    let (_, mut watch) = w
        .post(
            &mut a,
            None,
            modern(1).to_string().as_bytes(),
            &[("idempotency-key", "m1")],
        )
        .watch();
    let seen = a.respond(
        &mut w.store,
        w.now,
        &mut watch,
        200,
        json_head(),
        Response::Json(result(1, "once").as_bytes()),
    );
    assert!(seen.json()["result"].get("_meta").is_none());
    let mut standard = modern(2);
    standard["params"]["idempotencyKey"] = json!("m1");
    let v = w
        .post(&mut a, None, standard.to_string().as_bytes(), &[])
        .answer()
        .json();
    assert_eq!(
        (v["id"].as_i64(), v["result"]["content"][0]["text"].as_str()),
        (Some(2), Some("once"))
    );
    let mut meta = modern(3);
    meta["params"]["_meta"][KEY_META] = json!("m1");
    let v = w
        .post(&mut a, None, meta.to_string().as_bytes(), &[])
        .answer()
        .json();
    assert_eq!(v["id"], 3);
}

/// A keyed call's JSON body, written as `args` spells its arguments (raw JSON text).
fn spelled_call(id: i64, key: &str, args: &str) -> Vec<u8> {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"pay","arguments":{args},"_meta":{{"{KEY_META}":"{key}"}}}}}}"#
    )
    .into_bytes()
}

/// Runs `body` (a keyed call with JSON id `id`, sent with `extra` headers) through `inst` to
/// the JSON answer `text`.
fn run_body(
    w: &mut World,
    inst: &mut Instance,
    body: &[u8],
    extra: &[(&str, &str)],
    id: i64,
    text: &str,
) {
    let (_, mut watch) = w.post(inst, None, body, extra).watch();
    let answer = result(id, text);
    inst.respond(
        &mut w.store,
        w.now,
        &mut watch,
        200,
        json_head(),
        Response::Json(answer.as_bytes()),
    );
}

// | the same arguments spelled another way (`1`, `1.0`, `1e0`; key order) | the same call:
// the stored answer |
#[test]
fn a_resend_spelling_its_numbers_otherwise_is_the_same_call() {
    let mut w = World::new();
    let mut a = instance(1);
    run_body(
        &mut w,
        &mut a,
        &spelled_call(1, "p1", r#"{"amount":1.0,"to":"x"}"#),
        &[],
        1,
        "paid",
    );
    for (id, args) in [
        (2, r#"{"to":"x","amount":1}"#),
        (3, r#"{"amount":1e0,"to":"x"}"#),
    ] {
        let answer = w
            .post(&mut a, None, &spelled_call(id, "p1", args), &[])
            .answer();
        assert_eq!(
            answer.json()["result"]["content"][0]["text"],
            "paid",
            "{args}"
        );
    }
    let answer = w
        .post(
            &mut a,
            None,
            &spelled_call(4, "p1", r#"{"amount":2,"to":"x"}"#),
            &[],
        )
        .answer();
    assert_eq!(code(&answer.json()), "IDEMPOTENCY_KEY_REUSED");
}

// | keyed arguments the reader refuses (nested past its depth bound) | 400
// `IDEMPOTENCY_UNGUARDABLE`: not digested as nothing, where every such call would collide |
#[test]
fn keyed_arguments_too_deep_to_read_are_refused() {
    let mut w = World::new();
    let mut a = instance(1);
    let deep = format!("{}1{}", "[".repeat(200), "]".repeat(200));
    let answer = w
        .post(&mut a, None, &spelled_call(1, "kd", &deep), &[])
        .answer();
    assert_eq!(
        (answer.status().as_u16(), code(&answer.json())),
        (400, "IDEMPOTENCY_UNGUARDABLE")
    );
    let body = format!(r#"{{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{deep}}}"#);
    let answer = w
        .post(&mut a, None, body.as_bytes(), &[("idempotency-key", "kd")])
        .answer();
    assert_eq!(code(&answer.json()), "IDEMPOTENCY_UNGUARDABLE");
    assert_eq!(w.store.ops(|op| matches!(op, StoreOp::Claim(_))), 0);
}

// | the store took a claim but its reply was lost | 503 as when it is down, and the claim is
// let go: the re-send runs once, not `IDEMPOTENCY_KEY_IN_USE` then `…_OUTCOME_UNKNOWN` for a
// call that never ran |
#[test]
fn a_claim_whose_reply_was_lost_is_let_go() {
    let mut w = World::new();
    let mut a = instance(1);
    w.store.claim_replies_lost = true;
    let call = call_body(1, "bump", json!({}), Some("k1"));
    let answer = w.post(&mut a, None, &call, &[]).answer();
    assert_eq!(code(&answer.json()), "IDEMPOTENCY_STORE_UNAVAILABLE");
    w.store.claim_replies_lost = false;
    assert!(
        matches!(w.post(&mut a, None, &call, &[]), Fate::Forwarded { .. }),
        "the re-send runs"
    );
}

// | the inner server echoes the id in another spelling (`1.0` as `1`) | its answer is still
// the call's: stored, not lost |
#[test]
fn an_answer_whose_id_is_respelled_is_still_captured() {
    let mut w = World::new();
    let mut a = instance(1);
    let first = br#"{"jsonrpc":"2.0","id":1.0,"method":"tools/call","params":{"name":"bump","arguments":{},"_meta":{"io.github.mcp-resume/idempotency-key":"k5"}}}"#;
    run_body(&mut w, &mut a, first, &[], 1, "done");
    let again = call_body(2, "bump", json!({}), Some("k5"));
    let answer = w.post(&mut a, None, &again, &[]).answer();
    assert_eq!(answer.json()["result"]["content"][0]["text"], "done");
}

/// An instance whose keys are scoped by the `x-client` header.
fn scoped_instance() -> Instance {
    use mcp_resume_server::skin::GuardBuilder;
    use mcp_resume_server::MemoryStore;
    let builder = GuardBuilder::new(MemoryStore::default())
        .key_scope_header(http::HeaderName::from_static("x-client"));
    Instance::new(builder.config().clone(), 1)
}

// | keys scoped by a client header: the same key text from another client | another key:
// its own run, never the first client's stored answer; a keyed call without the header is
// refused |
#[test]
fn scoped_keys_are_one_clients_own() {
    let mut w = World::new();
    let mut a = scoped_instance();
    let call = |id| call_body(id, "statement", json!({"month": "2025-01"}), Some("stmt-1"));
    run_body(
        &mut w,
        &mut a,
        &call(1),
        &[("x-client", "alice")],
        1,
        "alice's statement",
    );
    // Bob, same key text and arguments: his call runs.
    assert!(matches!(
        w.post(&mut a, None, &call(2), &[("x-client", "bob")]),
        Fate::Forwarded { .. }
    ));
    // Alice again: her stored answer.
    let answer = w
        .post(&mut a, None, &call(3), &[("x-client", "alice")])
        .answer();
    assert_eq!(
        answer.json()["result"]["content"][0]["text"],
        "alice's statement"
    );
    // Without the header: refused, nothing claimed.
    let claims = w.store.ops(|op| matches!(op, StoreOp::Claim(_)));
    let answer = w.post(&mut a, None, &call(4), &[]).answer();
    assert_eq!(
        (answer.status().as_u16(), code(&answer.json())),
        (400, "IDEMPOTENCY_UNGUARDABLE")
    );
    assert_eq!(w.store.ops(|op| matches!(op, StoreOp::Claim(_))), claims);
}

// | keys unscoped (the default) | one namespace per store: the same key and arguments from
// another client get the stored answer (documented; clients draw keys at random) |
#[test]
fn unscoped_keys_are_shared_by_every_client() {
    let mut w = World::new();
    let mut a = instance(1);
    let call = |id| call_body(id, "statement", json!({}), Some("shared"));
    run_body(
        &mut w,
        &mut a,
        &call(1),
        &[("x-client", "alice")],
        1,
        "first",
    );
    let answer = w
        .post(&mut a, None, &call(2), &[("x-client", "bob")])
        .answer();
    assert_eq!(answer.json()["result"]["content"][0]["text"], "first");
}

// | a keyed call the guard's reader refuses but a lenient inner server reads (a BOM, `NaN`,
// as Python's `json.loads` takes them), keyed only in its body | 400
// `IDEMPOTENCY_UNGUARDABLE`: passed unread, it ran on every re-send |
#[test]
fn keyed_bodies_the_reader_refuses_are_refused() {
    let mut w = World::new();
    let mut a = instance(1);
    let mut bom = b"\xEF\xBB\xBF".to_vec();
    bom.extend_from_slice(&spelled_call(1, "kb", r#"{"x":1}"#));
    let standard = br#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"idempotencyKey":"ks","name":"pay","arguments":{"x":Infinity}}}"#;
    for body in [
        bom,
        spelled_call(2, "kn", r#"{"x":NaN}"#),
        standard.to_vec(),
    ] {
        let answer = w.post(&mut a, None, &body, &[]).answer();
        assert_eq!(
            (answer.status().as_u16(), code(&answer.json())),
            (400, "IDEMPOTENCY_UNGUARDABLE"),
            "{}",
            String::from_utf8_lossy(&body)
        );
    }
    // Unreadable and naming no key: passes, as before.
    let unkeyed = br#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"pay","arguments":{"x":NaN}}}"#;
    assert!(w.post(&mut a, None, unkeyed, &[]).is_passed());
    assert_eq!(w.store.ops(|op| matches!(op, StoreOp::Claim(_))), 0);
}

// | a call keyed in its body only, written in UTF-16 (either order, with or without a BOM) or
// UTF-32 with a BOM, as Python's `json.loads` reads them | 400 `IDEMPOTENCY_UNGUARDABLE`,
// nothing claimed: an inner server that reads it would run it on every re-send; unkeyed, it
// passes as before |
#[test]
fn keyed_bodies_in_utf16_or_utf32_are_refused() {
    let mut w = World::new();
    let mut a = instance(1);
    let text = String::from_utf8(spelled_call(1, "k16", r#"{"x":1}"#)).unwrap();
    let standard = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"pay","arguments":{},"idempotencyKey":"ks"}}"#;
    let le = |t: &str| {
        t.encode_utf16()
            .flat_map(u16::to_le_bytes)
            .collect::<Vec<u8>>()
    };
    let be = |t: &str| {
        t.encode_utf16()
            .flat_map(u16::to_be_bytes)
            .collect::<Vec<u8>>()
    };
    let bom = |mark: &[u8], rest: Vec<u8>| [mark.to_vec(), rest].concat();
    let utf32le = |t: &str| t.chars().flat_map(|c| u32::from(c).to_le_bytes()).collect();
    for body in [
        bom(b"\xFF\xFE", le(&text)),
        le(&text),
        le(standard),
        bom(b"\xFE\xFF", be(&text)),
        be(&text),
        bom(b"\xFF\xFE\x00\x00", utf32le(&text)),
    ] {
        let answer = w.post(&mut a, None, &body, &[]).answer();
        assert_eq!(
            (answer.status().as_u16(), code(&answer.json())),
            (400, "IDEMPOTENCY_UNGUARDABLE"),
            "{:?}",
            &body[..8]
        );
    }
    let unkeyed = call_body(3, "pay", json!({"x": 1}), None);
    let unkeyed = String::from_utf8(unkeyed).unwrap();
    assert!(w.post(&mut a, None, &le(&unkeyed), &[]).is_passed());
    assert!(w
        .post(&mut a, None, &bom(b"\xFE\xFF", be(&unkeyed)), &[])
        .is_passed());
    assert_eq!(w.store.ops(|op| matches!(op, StoreOp::Claim(_))), 0);
}

// | a UTF-16 body over the bound whose first bytes name a key | 413, as in UTF-8 |
#[test]
fn a_key_named_in_utf16_is_seen_in_a_body_over_the_bound() {
    let mut w = World::new();
    let mut a = instance(1);
    let pad = "x".repeat(GuardConfig::default().max_body());
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"idempotencyKey":"kb","name":"upload","arguments":{{"blob":"{pad}"}}}}}}"#
    );
    let body: Vec<u8> = body.encode_utf16().flat_map(u16::to_le_bytes).collect();
    let answer = w.post(&mut a, None, &body, &[]).answer();
    assert_eq!(answer.status(), 413);
    assert_eq!(w.store.ops(|op| matches!(op, StoreOp::Claim(_))), 0);
}

// | a POST with a `Content-Encoding` (gzip, keyed in its body or not) | 415
// `IDEMPOTENCY_UNGUARDABLE` with `Accept-Encoding: identity`, nothing claimed, nothing run:
// the guard cannot tell whether it is keyed, and a decompressing layer inside it would run it
// unguarded; `identity` is no encoding |
#[test]
fn a_compressed_request_body_is_refused() {
    let mut w = World::new();
    let mut a = instance(1);
    // `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"pay","arguments":{},
    // "idempotencyKey":"kz"}}`, gzipped.
    let keyed: &[u8] = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\x03\x15\xcc\x41\x0e\xc3\x20\x0c\x04\xc0\xbf\xec\x19\x25\x55\x6e\xe1\x0b\x79\x85\x45\xad\x36\x2d\xc6\x08\xc8\x81\x46\xfc\xbd\xe6\xb6\xda\x59\xed\x8d\x4f\xd5\x54\x72\x80\xc7\xb6\x3c\xe0\x70\x3e\xe1\x77\x07\xe1\xf6\x56\x8b\x68\xaa\xb1\xae\x81\x62\x34\xcc\x54\x48\x2a\xfc\x8d\x44\xc2\xa6\x99\xba\xd5\x54\x5e\x97\x70\x6a\x53\xc6\xbc\x60\xc9\xda\x38\x85\x7e\x70\xb7\xd5\xf7\x87\x31\xfe\xc5\xfb\xa9\xb4\x6b\x00\x00\x00";
    for (body, coding) in [
        (keyed, "gzip"),
        (keyed, "identity, GZIP"),
        (b"\x1f\x8b\x08\x00 anything".as_slice(), "br"),
    ] {
        let answer = w
            .post(&mut a, Some("s1"), body, &[("content-encoding", coding)])
            .answer();
        assert_eq!(
            (answer.status().as_u16(), code(&answer.json())),
            (415, "IDEMPOTENCY_UNGUARDABLE"),
            "{coding}"
        );
        let accepted = answer
            .headers()
            .iter()
            .find(|(n, _)| n == "accept-encoding");
        assert_eq!(accepted.map(|(_, v)| v.as_bytes()), Some(&b"identity"[..]));
    }
    let plain = call_body(4, "pay", json!({}), None);
    let fate = w.post(&mut a, None, &plain, &[("content-encoding", "identity")]);
    assert!(fate.is_passed());
    assert_eq!(w.store.ops(|op| matches!(op, StoreOp::Claim(_))), 0);
}

// | a keyed body over the bound whose key member's name is written with escapes (`\/`, as
// PHP's `json_encode` writes it; `\u` escapes) | 413, as when it is written plainly |
#[test]
fn a_key_member_named_with_escapes_is_seen_in_a_body_over_the_bound() {
    let mut w = World::new();
    let mut a = instance(1);
    let pad = "x".repeat(GuardConfig::default().max_body());
    for name in [
        KEY_META.replace('/', "\\/"),
        KEY_META.replace('/', "\\u002f"),
        "\\u0069dempotencyKey".to_string(),
    ] {
        let meta = if name.contains("dempotencyKey") {
            format!(r#""{name}":"k-esc""#)
        } else {
            format!(r#""_meta":{{"{name}":"k-esc"}}"#)
        };
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{{meta},"name":"upload","arguments":{{"blob":"{pad}"}}}}}}"#
        );
        let answer = w.post(&mut a, None, body.as_bytes(), &[]).answer();
        assert_eq!(answer.status(), 413, "{name}");
    }
    assert_eq!(w.store.ops(|op| matches!(op, StoreOp::Claim(_))), 0);
}

// | a 2026-07-28 refusal in a 200 answer (-32020 header mismatch, -32022 unsupported version)
// | the key is let go, not stored: the client, told the call never ran, sends it again
// corrected, and it runs instead of being served the refusal for ever; in an earlier
// revision the same codes are a server's own error, stored as the call's answer |
#[test]
fn a_modern_refusal_in_a_200_answer_lets_the_key_go() {
    for (n, code, modern) in [(1, -32020, true), (2, -32022, true), (3, -32020, false)] {
        let mut w = World::new();
        let mut a = instance(n);
        let key = format!("km{n}");
        let call = |id| {
            let mut body: Value =
                serde_json::from_slice(&call_body(id, "bump", json!({}), Some(&key))).unwrap();
            if modern {
                body["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] =
                    json!("2026-07-28");
            }
            body.to_string().into_bytes()
        };
        let (_, mut watch) = w.post(&mut a, None, &call(1), &[]).watch();
        let refusal = json!({"jsonrpc": "2.0", "id": 1,
            "error": {"code": code, "message": "refused"}})
        .to_string();
        a.respond(
            &mut w.store,
            w.now,
            &mut watch,
            200,
            json_head(),
            Response::Json(refusal.as_bytes()),
        );
        let again = w.post(&mut a, None, &call(2), &[]);
        if modern {
            assert!(
                matches!(again, Fate::Forwarded { .. }),
                "{code}: the re-send runs"
            );
            assert_eq!(w.store.ops(|op| matches!(op, StoreOp::Finish { .. })), 0);
        } else {
            let v = again.answer().json();
            assert_eq!(
                (v["id"].as_i64(), v["error"]["code"].as_i64()),
                (Some(2), Some(code)),
                "{v}"
            );
        }
    }
}

// | a keyed call whose result nests 200 levels deep (past a JSON reader's usual 128), answered
// as JSON and as SSE | marked and stored: the client sees its context's mark, and the same
// call again gets the stored answer re-addressed, not `IDEMPOTENCY_OUTCOME_UNKNOWN` |
#[test]
fn a_deeply_nested_result_is_marked_and_stored() {
    let (mut w, mut a, hash) = session();
    let deep = format!("{}1{}", "[".repeat(200), "]".repeat(200));
    let mark = format!("\"{RESULT_HASH_META_KEY}\":\"{hash}\"");
    for (n, sse) in [(0, false), (1, true)] {
        let key = format!("k{n}");
        let id = 2 + 10 * n;
        let call = call_body(id, "bump", json!({"n": 1}), Some(&key));
        let (_, mut watch) = w.post(&mut a, Some("s1"), &call, &[]).watch();
        let body = format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{"content":{deep}}}}}"#);
        let event = format!("id: e1\ndata: {body}\n\n");
        let (head, response) = if sse {
            (sse_head(), Response::Sse(vec![event.as_str()], true))
        } else {
            (json_head(), Response::Json(body.as_bytes()))
        };
        let seen = a.respond(&mut w.store, w.now, &mut watch, 200, head, response);
        let seen = String::from_utf8_lossy(&seen.body).into_owned();
        assert!(
            seen.contains(&mark),
            "sse {sse}: the first answer is marked"
        );
        assert!(seen.contains(&deep), "sse {sse}: its result as written");
        let again = call_body(id + 1, "bump", json!({"n": 1}), Some(&key));
        let answer = w.post(&mut a, Some("s1"), &again, &[]).answer();
        let text = String::from_utf8_lossy(answer.body()).into_owned();
        assert!(
            !text.contains("IDEMPOTENCY_OUTCOME_UNKNOWN"),
            "sse {sse}: {text}"
        );
        assert!(text.contains(&format!("\"id\":{}", id + 1)), "{text}");
        assert!(text.contains(&mark) && text.contains(&deep), "sse {sse}");
    }
}
