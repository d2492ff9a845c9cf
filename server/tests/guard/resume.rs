//! Resume authorization: the report's `authorize_resume`, row by row, then end to end
//! through the guard (translation of the cursor, verification of the replay).

use mcp_resume_server::guard::{
    authorize_resume, CursorFacts, GuardConfig, RejectReason, ResumeFacts, SseFlow, StoreOp,
    StreamFacts,
};
use mcp_resume_server::ids::{CapabilityHash, SessionId};
use serde_json::json;

use crate::harness::*;

fn h(s: &str) -> CapabilityHash {
    CapabilityHash::from_stored(s)
}

/// A resume every check passes: a session record, a cursor this instance issued inside what
/// was issued, no lost request, the same hash.
fn good() -> ResumeFacts {
    ResumeFacts {
        session: Some(h("sha256:aa")),
        cursor: Some(CursorFacts {
            seq: 3,
            owned_here: true,
        }),
        stream: Some(StreamFacts {
            of_session: true,
            head: 5,
            earliest: 1,
            broken: false,
            orphans: false,
            hash: h("sha256:aa"),
        }),
    }
}

fn with(change: impl FnOnce(&mut ResumeFacts)) -> ResumeFacts {
    let mut f = good();
    change(&mut f);
    f
}

fn stream(f: &mut ResumeFacts) -> &mut StreamFacts {
    f.stream.as_mut().unwrap()
}

fn at(seq: u64) -> ResumeFacts {
    with(|f| f.cursor.as_mut().unwrap().seq = seq)
}

#[test]
fn all_four_conditions_hold() {
    assert_eq!(authorize_resume(&good()), Ok(()));
    assert_eq!(authorize_resume(&at(5)), Ok(()), "cursor at the head");
    assert_eq!(authorize_resume(&at(1)), Ok(()));
}

// 1. Session ownership: the record, and the stream.
#[test]
fn no_session_record_is_unknown_session() {
    let f = with(|f| f.session = None);
    assert_eq!(authorize_resume(&f), Err(RejectReason::UnknownSession));
}

#[test]
fn a_stream_opened_by_another_instance_is_not_owner() {
    let f = with(|f| {
        f.cursor.as_mut().unwrap().owned_here = false;
        f.stream = None;
    });
    assert_eq!(authorize_resume(&f), Err(RejectReason::NotOwner));
}

// 2. Event-log continuity.
#[test]
fn a_cursor_no_guard_issued_is_a_gap() {
    assert_eq!(
        authorize_resume(&with(|f| f.cursor = None)),
        Err(RejectReason::EventGap)
    );
    assert_eq!(
        authorize_resume(&with(|f| f.stream = None)),
        Err(RejectReason::EventGap)
    );
    assert_eq!(authorize_resume(&at(0)), Err(RejectReason::EventGap));
}

#[test]
fn a_stream_of_another_session_is_a_gap() {
    let f = with(|f| stream(f).of_session = false);
    assert_eq!(authorize_resume(&f), Err(RejectReason::EventGap));
}

#[test]
fn a_cursor_beyond_the_head_is_a_gap() {
    assert_eq!(authorize_resume(&at(6)), Err(RejectReason::EventGap));
}

#[test]
fn positions_forgotten_since_the_cursor_are_a_gap() {
    let f = with(|f| stream(f).earliest = 4);
    assert_eq!(authorize_resume(&f), Err(RejectReason::EventGap));
    let f = with(|f| stream(f).earliest = 3);
    assert_eq!(
        authorize_resume(&f),
        Ok(()),
        "the cursor's own id is still known"
    );
}

#[test]
fn a_broken_stream_is_a_gap() {
    let f = with(|f| stream(f).broken = true);
    assert_eq!(authorize_resume(&f), Err(RejectReason::EventGap));
}

// 3. Request-context presence.
#[test]
fn a_lost_request_is_orphaned() {
    let f = with(|f| stream(f).orphans = true);
    assert_eq!(authorize_resume(&f), Err(RejectReason::OrphanedRequest));
}

// 4. Capability hash unchanged.
#[test]
fn another_hash_in_force_is_a_capability_mismatch() {
    let f = with(|f| stream(f).hash = h("sha256:bb"));
    assert_eq!(authorize_resume(&f), Err(RejectReason::CapabilityMismatch));
}

// The report's order: the first failed check names the rejection.
#[test]
fn the_first_failed_check_wins() {
    let all_bad = ResumeFacts {
        session: Some(h("sha256:aa")),
        cursor: Some(CursorFacts {
            seq: 9,
            owned_here: false,
        }),
        stream: Some(StreamFacts {
            of_session: true,
            head: 1,
            earliest: 1,
            broken: true,
            orphans: true,
            hash: h("sha256:bb"),
        }),
    };
    assert_eq!(authorize_resume(&all_bad), Err(RejectReason::NotOwner));
    let mut f = all_bad.clone();
    f.cursor.as_mut().unwrap().owned_here = true;
    assert_eq!(authorize_resume(&f), Err(RejectReason::EventGap));
    let s = f.stream.as_mut().unwrap();
    s.broken = false;
    s.head = 9;
    assert_eq!(authorize_resume(&f), Err(RejectReason::OrphanedRequest));
    f.stream.as_mut().unwrap().orphans = false;
    assert_eq!(authorize_resume(&f), Err(RejectReason::CapabilityMismatch));
    f.session = None;
    assert_eq!(authorize_resume(&f), Err(RejectReason::UnknownSession));
}

// ---- End to end through the guard ----

struct Setup {
    w: World,
    a: Instance,
    /// The client's view of the call's stream: its ids as sent.
    ids: Vec<String>,
}

/// A session on instance `a` whose call stream carried the inner events `0/0`, `1/0`,
/// `2/0` (priming, a notification, and — when `answered` — the response).
fn setup(answered: bool, clean: bool) -> Setup {
    let mut w = World::new();
    let mut a = Instance::new(GuardConfig::default(), 1);
    w.initialize(&mut a, "s1", json!({}));
    let call = call_body(2, "echo", json!({}), None);
    let (_, mut watch) = w.post(&mut a, Some("s1"), &call, &[]).watch();
    let note = r#"{"jsonrpc":"2.0","method":"notifications/message","params":{}}"#;
    let mut chunks = vec![
        "id: 0/0\ndata: \n\n".to_owned(),
        format!("id: 1/0\ndata: {note}\n\n"),
    ];
    if answered {
        chunks.push(format!("id: 2/0\ndata: {}\n\n", result(2, "ok")));
    }
    let refs: Vec<&str> = chunks.iter().map(String::as_str).collect();
    let seen = a.respond(
        &mut w.store,
        w.now,
        &mut watch,
        200,
        sse_head(),
        Response::Sse(refs, clean),
    );
    let ids = seen
        .events()
        .into_iter()
        .map(|(id, _)| id.unwrap())
        .collect();
    Setup { w, a, ids }
}

fn sid() -> SessionId {
    SessionId::parse(b"s1").unwrap()
}

// | resume on the owner, inside what was issued | forwarded with the inner server's own
// id for the cursor; its replay passes with the client's ids, continuing them |
#[test]
fn an_authorized_resume_is_translated_and_its_replay_renumbered() {
    let Setup { mut w, mut a, ids } = setup(false, true);
    let (inner, mut watch) = w.get(&mut a, "s1", Some(&ids[0])).watch();
    assert_eq!(
        inner.as_deref(),
        Some("0/0"),
        "the inner server's id for the cursor"
    );
    let live = result(2, "ok");
    let replay = format!("id: 0/0\ndata: \n\nid: 1/0\ndata: {{}}\n\nid: 2/0\ndata: {live}\n\n");
    let seen = a.respond(
        &mut w.store,
        w.now,
        &mut watch,
        200,
        sse_head(),
        Response::Sse(vec![&replay], true),
    );
    assert!(seen.refusal.is_none());
    let got: Vec<_> = seen
        .events()
        .into_iter()
        .map(|(id, _)| id.unwrap())
        .collect();
    let stream = ids[0].split('-').next().unwrap();
    assert_eq!(
        got,
        [format!("{stream}-2"), format!("{stream}-3")],
        "the cursor's own event is not sent again"
    );
    assert!(seen.header("mcp-capability-hash").is_some());
}

// | the inner server's replay skips an event issued after the cursor | refused before
// anything is sent: 404 `event_gap`, the session forgotten |
#[test]
fn a_replay_that_skips_an_issued_event_is_refused() {
    let Setup { mut w, mut a, ids } = setup(false, true);
    let (_, mut watch) = w.get(&mut a, "s1", Some(&ids[0])).watch();
    let seen = a.respond(
        &mut w.store,
        w.now,
        &mut watch,
        200,
        sse_head(),
        Response::Sse(vec!["id: 2/0\ndata: {}\n\n"], true),
    );
    let refusal = seen.refusal.expect("a rejection instead of the stream");
    assert_eq!(refusal.status(), 404);
    assert_eq!(refusal.json()["error"]["data"]["reason"], "event_gap");
    assert!(!w.store.sessions.contains_key(&sid()));
    let body = br#"{"jsonrpc":"2.0","id":9,"method":"tools/list"}"#;
    assert_eq!(w.post(&mut a, Some("s1"), body, &[]).answer().status(), 404);
}

// | the replay ends before bringing back what was issued (rmcp forgets a finished request's
// stream) | refused: 404 `event_gap`, not an empty 200 |
#[test]
fn a_replay_that_ends_short_is_refused() {
    let Setup { mut w, mut a, ids } = setup(true, true);
    let (_, mut watch) = w.get(&mut a, "s1", Some(&ids[0])).watch();
    let seen = a.respond(
        &mut w.store,
        w.now,
        &mut watch,
        200,
        sse_head(),
        Response::Sse(vec![], true),
    );
    assert_eq!(
        seen.refusal.expect("rejected").json()["error"]["data"]["reason"],
        "event_gap"
    );
}

// | a resume the inner server answers with no stream (503, 405, a JSON body), its end
// reported as `BodyPlan::Untouched` allows | nothing was replayed, so nothing diverged: the
// stream is not broken, and the resume tried again is authorized |
#[test]
fn a_resume_answered_without_a_stream_breaks_nothing() {
    let Setup { mut w, mut a, ids } = setup(false, true);
    for (status, head) in [(503, json_head()), (405, json_head()), (200, json_head())] {
        let (_, mut watch) = w.get(&mut a, "s1", Some(&ids[0])).watch();
        let mut head = head;
        let plan = watch.handle_head(
            &mut a.guard,
            http::StatusCode::from_u16(status).unwrap(),
            &mut head,
        );
        assert_eq!(plan, mcp_resume_server::guard::BodyPlan::Untouched);
        watch.finish_head(&mut head);
        watch.handle_end(&mut a.guard, true, &mut bytes::BytesMut::new());
        assert!(watch.take_refusal().is_none());
        drain(&mut w.store, w.now, &mut watch);
        assert!(
            w.store.sessions.contains_key(&sid()),
            "{status}: not forgotten"
        );
    }
    let again = w.get(&mut a, "s1", Some(&ids[0]));
    assert!(
        matches!(again, Fate::Forwarded { .. }),
        "the resume tried again: {again:?}"
    );
}

// | the replay's first block is over the size bound (another stream replayed, say) | refused:
// 404 `event_gap`; nothing of it passes as if the resume were proven |
#[test]
fn a_replay_whose_block_cannot_be_read_is_refused() {
    let Setup { mut w, mut a, ids } = setup(false, true);
    let (_, mut watch) = w.get(&mut a, "s1", Some(&ids[0])).watch();
    let big = format!(
        "id: 9/9\ndata: {}\n\n",
        "x".repeat(GuardConfig::default().max_body() + 1)
    );
    // Over the bound before it ends: it cannot be read as a block.
    let (first, rest) = big.split_at(big.len() - 2);
    let seen = a.respond(
        &mut w.store,
        w.now,
        &mut watch,
        200,
        sse_head(),
        Response::Sse(vec![first, rest], true),
    );
    assert!(seen.body.is_empty(), "nothing of the replay passes");
    let refusal = seen.refusal.expect("a rejection instead of the stream");
    assert_eq!(refusal.json()["error"]["data"]["reason"], "event_gap");
    assert!(!w.store.sessions.contains_key(&sid()));
}

// | the replay diverges after the head was sent (an event numbered meanwhile by another
// stream of the same inner request comes out of order) | the stream is aborted, and the
// next resume of it is refused |
#[test]
fn a_divergence_after_the_head_breaks_the_stream() {
    use http::StatusCode;
    let Setup { mut w, mut a, ids } = setup(false, true);
    let (_, mut y) = w.get(&mut a, "s1", Some(&ids[1])).watch();
    let (_, mut x) = w.get(&mut a, "s1", Some(&ids[1])).watch();
    let mut head = sse_head();
    y.handle_head(&mut a.guard, StatusCode::OK, &mut head);
    x.handle_head(&mut a.guard, StatusCode::OK, &mut sse_head());
    assert!(y.head_ready(), "nothing was issued after the cursor");
    y.finish_head(&mut head);
    let mut out = bytes::BytesMut::new();
    // x numbers two new events: 3 and 4.
    x.handle_sse(
        &mut a.guard,
        b"id: 6/0\ndata: {}\n\nid: 7/0\ndata: {}\n\n",
        &mut out,
    );
    // y, expecting 3, gets 4 first.
    let flow = y.handle_sse(&mut a.guard, b"id: 7/0\ndata: {}\n\n", &mut out);
    assert_eq!(flow, SseFlow::Abort);
    assert!(
        y.take_refusal().is_none(),
        "the head was sent: the stream breaks instead"
    );
    let fate = w.get(&mut a, "s1", Some(&ids[1]));
    assert_eq!(fate.answer().json()["error"]["data"]["reason"], "event_gap");
}

// | resume on another instance (the session's record is shared: any instance may serve its
// POSTs) | 404 `not_owner`, the session forgotten in the store |
#[test]
fn a_resume_on_another_instance_is_not_owner() {
    let Setup { mut w, ids, .. } = setup(false, true);
    let mut b = Instance::new(GuardConfig::default(), 2);
    let answer = w.get(&mut b, "s1", Some(&ids[0])).answer();
    assert_eq!(answer.status(), 404);
    assert_eq!(
        answer
            .headers()
            .iter()
            .find(|(n, _)| n == "mcp-resume-rejected")
            .unwrap()
            .1,
        "not_owner"
    );
    assert_eq!(
        answer.json()["error"]["data"]["code"],
        "SESSION_RESUME_REJECTED"
    );
    assert!(w
        .store
        .log
        .iter()
        .any(|op| matches!(op, StoreOp::ForgetSession(_))));
    assert!(!w.store.sessions.contains_key(&sid()));
}

// | a resume naming a session no store holds (a made-up id) | 404 `unknown_session`, and
// nothing to forget: no store write, no tombstone kept |
#[test]
fn a_resume_of_an_unknown_session_forgets_nothing() {
    let mut w = World::new();
    let mut a = Instance::new(GuardConfig::default(), 1);
    for n in 0..3 {
        let sid = format!("made-up-{n}");
        let answer = w.get(&mut a, &sid, Some("0000000000000001-1")).answer();
        assert_eq!(answer.json()["error"]["data"]["reason"], "unknown_session");
    }
    assert_eq!(w.store.ops(|op| matches!(op, StoreOp::ForgetSession(_))), 0);
    let body = br#"{"jsonrpc":"2.0","id":9,"method":"tools/list"}"#;
    assert!(
        w.post(&mut a, Some("made-up-0"), body, &[]).is_passed(),
        "no tombstone: the inner server says what the id is"
    );
}

#[test]
fn a_resume_of_an_unknown_session_is_unknown_session() {
    let mut w = World::new();
    let mut a = Instance::new(GuardConfig::default(), 1);
    let answer = w.get(&mut a, "nobody", Some("0000000000000001-1")).answer();
    assert_eq!(answer.json()["error"]["data"]["reason"], "unknown_session");
}

#[test]
fn cursors_not_issued_here_are_refused() {
    for (case, reason) in [
        ("foreign", "event_gap"),
        ("beyond", "event_gap"),
        ("other", "not_owner"),
    ] {
        let Setup { mut w, mut a, ids } = setup(false, true);
        let stream = ids[0].split('-').next().unwrap().to_owned();
        let bad = match case {
            "foreign" => "0/0".to_owned(),
            "beyond" => format!("{stream}-9"),
            _ => "ffffffffffffffff-1".to_owned(),
        };
        let answer = w.get(&mut a, "s1", Some(&bad)).answer();
        assert_eq!(answer.json()["error"]["data"]["reason"], reason, "{bad}");
        // Rejected once, the session is gone for good here: a plain 404 after.
        let again = w.get(&mut a, "s1", None).answer();
        assert_eq!(again.status(), 404);
        assert_eq!(again.json()["error"]["code"], -32001);
    }
}

// | the inner server failed the stream before answering a request on it | 404
// `orphaned_request` |
#[test]
fn a_request_lost_with_its_stream_is_orphaned() {
    let Setup { mut w, mut a, ids } = setup(false, false);
    let answer = w.get(&mut a, "s1", Some(&ids[0])).answer();
    assert_eq!(answer.json()["error"]["data"]["reason"], "orphaned_request");
}

// | the store cannot be read for a session this instance does not hold | 503, retry later;
// nothing forgotten |
#[test]
fn a_resume_that_cannot_be_judged_now_is_deferred() {
    let Setup { mut w, ids, .. } = setup(false, true);
    let mut b = Instance::new(GuardConfig::default(), 2);
    w.store.down = true;
    let answer = w.get(&mut b, "s1", Some(&ids[0])).answer();
    assert_eq!(answer.status(), 503);
    w.store.down = false;
    assert!(w.store.sessions.contains_key(&sid()));
}

// | a session's listen stream, still in use, then more SSE responses of other sessions than
// the ledger holds logs | its events stay numbered and a resume of it is forwarded: the logs
// evicted are those unused the longest, not the oldest opened |
#[test]
fn a_stream_in_use_outlives_newer_traffic() {
    use http::StatusCode;
    let mut w = World::new();
    let mut a = Instance::new(GuardConfig::default(), 1);
    w.initialize(&mut a, "s1", json!({}));
    w.initialize(&mut a, "s2", json!({}));
    let (_, mut listen) = w.get(&mut a, "s1", None).watch();
    listen.handle_head(&mut a.guard, StatusCode::OK, &mut sse_head());
    let mut event = |a: &mut Instance, n: usize| {
        let mut out = bytes::BytesMut::new();
        let block = format!("id: {n}\ndata: {{}}\n\n");
        listen.handle_sse(&mut a.guard, block.as_bytes(), &mut out);
        sse_events(&String::from_utf8_lossy(&out))[0]
            .0
            .clone()
            .unwrap()
    };
    let first = event(&mut a, 0);
    let stream = first.split('-').next().unwrap().to_owned();
    let call = call_body(2, "echo", json!({}), None);
    let answer = format!("id: 0\ndata: {}\n\n", result(2, "ok"));
    // More responses than the ledger holds logs (10,000 by default); the listen stream
    // carries an event now and then.
    for n in 1..=10_500 {
        let (_, mut watch) = w.post(&mut a, Some("s2"), &call, &[]).watch();
        watch.handle_head(&mut a.guard, StatusCode::OK, &mut sse_head());
        let mut out = bytes::BytesMut::new();
        watch.handle_sse(&mut a.guard, answer.as_bytes(), &mut out);
        if n % 1000 == 0 {
            event(&mut a, n);
        }
    }
    let last = event(&mut a, 99);
    assert_eq!(last, format!("{stream}-12"), "still numbered");
    let (inner, _) = w.get(&mut a, "s1", Some(&last)).watch();
    assert_eq!(inner.as_deref(), Some("99"));
}

// | a call whose body the guard cannot read (over the size bound, nested past the reader's
// depth), its SSE stream failed before any answer | 404 `orphaned_request`: the stream may
// owe an answer its replay cannot bring |
#[test]
fn a_stream_of_an_unreadable_call_failed_before_answering_is_orphaned() {
    let big = call_body(
        2,
        "echo",
        json!({"text": "x".repeat(GuardConfig::default().max_body())}),
        None,
    );
    // A batch is read whole, and its reader stops at a depth an inner server may not.
    let deep = format!(
        r#"[{{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{{"name":"echo","arguments":{}{}}}}}]"#,
        "[".repeat(200),
        "]".repeat(200)
    )
    .into_bytes();
    for (case, body) in [("too large", big), ("too deep", deep)] {
        let mut w = World::new();
        let mut a = Instance::new(GuardConfig::default(), 1);
        w.initialize(&mut a, "s1", json!({}));
        let (_, mut watch) = w.post(&mut a, Some("s1"), &body, &[]).watch();
        let seen = a.respond(
            &mut w.store,
            w.now,
            &mut watch,
            200,
            sse_head(),
            Response::Sse(vec!["id: 0/0\ndata: \n\n"], false),
        );
        let id = seen.events()[0].0.clone().unwrap();
        let answer = w.get(&mut a, "s1", Some(&id)).answer();
        assert_eq!(
            answer.json()["error"]["data"]["reason"],
            "orphaned_request",
            "{case}"
        );
    }
}

// | a call whose body the guard cannot read, its SSE stream ended cleanly | resumable: a clean
// end leaves no request lost |
#[test]
fn a_stream_of_an_unreadable_call_ended_cleanly_resumes() {
    let mut w = World::new();
    let mut a = Instance::new(GuardConfig::default(), 1);
    w.initialize(&mut a, "s1", json!({}));
    let big = call_body(
        2,
        "echo",
        json!({"text": "x".repeat(GuardConfig::default().max_body())}),
        None,
    );
    let (_, mut watch) = w.post(&mut a, Some("s1"), &big, &[]).watch();
    let seen = a.respond(
        &mut w.store,
        w.now,
        &mut watch,
        200,
        sse_head(),
        Response::Sse(vec!["id: 0/0\ndata: \n\n"], true),
    );
    let id = seen.events()[0].0.clone().unwrap();
    let (inner, _) = w.get(&mut a, "s1", Some(&id)).watch();
    assert_eq!(inner.as_deref(), Some("0/0"));
}

// | a fresh stream on which the inner server uses an event id again (`x`, `y`, then `x`
// with the answer) | each event numbered one past the last (a repeated id taking its old
// number would take the client's cursor back), and each number names its own event's inner
// id for a resume |
#[test]
fn a_repeated_inner_id_on_a_fresh_stream_is_numbered_as_a_new_event() {
    let mut w = World::new();
    let mut a = Instance::new(GuardConfig::default(), 1);
    w.initialize(&mut a, "s1", json!({}));
    let call = call_body(2, "echo", json!({}), None);
    let (_, mut watch) = w.post(&mut a, Some("s1"), &call, &[]).watch();
    let note = r#"{"jsonrpc":"2.0","method":"notifications/message","params":{}}"#;
    let events = format!(
        "id: x\ndata: {note}\n\nid: y\ndata: {note}\n\nid: x\ndata: {}\n\n",
        result(2, "ok")
    );
    let seen = a.respond(
        &mut w.store,
        w.now,
        &mut watch,
        200,
        sse_head(),
        Response::Sse(vec![&events], true),
    );
    let ids: Vec<String> = seen
        .events()
        .into_iter()
        .map(|(id, _)| id.unwrap())
        .collect();
    let stream = ids[0].split('-').next().unwrap().to_owned();
    assert_eq!(
        ids,
        [1, 2, 3].map(|n| format!("{stream}-{n}")),
        "every event one past the last"
    );
    for (cursor, inner_id) in [(&ids[1], "y"), (&ids[2], "x")] {
        let (inner, _) = w.get(&mut a, "s1", Some(cursor)).watch();
        assert_eq!(inner.as_deref(), Some(inner_id), "resumed from {cursor}");
    }
}

// | the inner server gives every event the same id (the session id, as some do); after the
// resume is proven, an event comes with that id again | a new event, numbered next and sent:
// dropped as already sent, the answer it carries would never reach the client |
#[test]
fn a_repeated_inner_id_after_the_replay_is_proven_is_a_new_event() {
    let mut w = World::new();
    let mut a = Instance::new(GuardConfig::default(), 1);
    w.initialize(&mut a, "s1", json!({}));
    let call = call_body(2, "echo", json!({}), None);
    let (_, mut watch) = w.post(&mut a, Some("s1"), &call, &[]).watch();
    let note = r#"{"jsonrpc":"2.0","method":"notifications/message","params":{}}"#;
    let first = format!("id: s1\ndata: {note}\n\n");
    let seen = a.respond(
        &mut w.store,
        w.now,
        &mut watch,
        200,
        sse_head(),
        Response::Sse(vec![&first], true),
    );
    let cursor = seen.events()[0].0.clone().unwrap();
    let (inner, mut watch) = w.get(&mut a, "s1", Some(&cursor)).watch();
    assert_eq!(inner.as_deref(), Some("s1"));
    // The priming event again (no message: dropped), then two new messages.
    let live = format!(
        "id: s1\ndata: \n\nid: s1\ndata: {note}\n\nid: s1\ndata: {}\n\n",
        result(2, "ok")
    );
    let seen = a.respond(
        &mut w.store,
        w.now,
        &mut watch,
        200,
        sse_head(),
        Response::Sse(vec![&live], true),
    );
    assert_eq!(seen.flow, SseFlow::Continue);
    assert!(seen.refusal.is_none());
    let stream = cursor.split('-').next().unwrap();
    let got: Vec<_> = seen
        .events()
        .into_iter()
        .map(|(id, _)| id.unwrap())
        .collect();
    assert_eq!(got, [format!("{stream}-2"), format!("{stream}-3")]);
    assert!(seen.events()[1].1.contains("\"result\""));
}

/// An unkeyed call's stream (id 2) that carried `message` after its priming event, then
/// failed or ended as `clean` says; the client's id of the priming event.
fn call_stream_with(message: &str, clean: bool) -> (World, Instance, String) {
    let mut w = World::new();
    let mut a = Instance::new(GuardConfig::default(), 1);
    w.initialize(&mut a, "s1", json!({}));
    let call = call_body(2, "echo", json!({}), None);
    let (_, mut watch) = w.post(&mut a, Some("s1"), &call, &[]).watch();
    let second = format!("id: 1/0\ndata: {message}\n\n");
    let seen = a.respond(
        &mut w.store,
        w.now,
        &mut watch,
        200,
        sse_head(),
        Response::Sse(vec!["id: 0/0\ndata: \n\n", &second], clean),
    );
    let id = seen.events()[0].0.clone().unwrap();
    (w, a, id)
}

// | an unkeyed call's stream carries a message with the call's id that a client does not
// take for its answer (an error that is no object, no `jsonrpc` "2.0", a `method`), then
// the inner server fails the stream | 404 `orphaned_request`: the client still waits for
// the answer, which a replay would never bring |
#[test]
fn a_message_no_client_takes_for_the_answer_answers_nothing() {
    for message in [
        r#"{"jsonrpc":"2.0","id":2,"error":"boom"}"#,
        r#"{"jsonrpc":"2.0","id":2,"error":7}"#,
        r#"{"id":2,"result":{}}"#,
        r#"{"jsonrpc":"1.0","id":2,"result":{}}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"ping","result":{}}"#,
        r#"{"method":"ping","jsonrpc":"2.0","id":2,"result":{}}"#,
        r#"{"jsonrpc":"2.0", "id":2, "error":"boom"}"#,
        r#"{"jsonrpc":"2.0","id":"\u0032","error":"boom"}"#,
    ] {
        let (mut w, mut a, id) = call_stream_with(message, false);
        let answer = w.get(&mut a, "s1", Some(&id)).answer();
        assert_eq!(
            answer.json()["error"]["data"]["reason"],
            "orphaned_request",
            "{message}"
        );
    }
}

// | an unkeyed call's stream carries its answer `"result": null` (a client takes it for the
// answer), then the inner server fails the stream | resumable: nothing on it is owed, and
// the session is not forgotten |
#[test]
fn a_null_result_answers_its_call() {
    for message in [
        r#"{"jsonrpc":"2.0","id":2,"result":null}"#,
        r#"{"id":2,"jsonrpc":"2.0","result":null}"#,
    ] {
        let (mut w, mut a, id) = call_stream_with(message, false);
        let (inner, _) = w.get(&mut a, "s1", Some(&id)).watch();
        assert_eq!(inner.as_deref(), Some("0/0"), "{message}");
    }
}

/// A call's stream (id 2) carrying, after its priming event `0/0`, the event `reset` whose
/// `id:` is empty, then `after` with the inner id `1/0`; ended as `clean` says. The client's
/// view: the body as sent and its ids.
fn stream_with_reset(reset: &str, after: &str, clean: bool) -> (World, Instance, Seen) {
    let mut w = World::new();
    let mut a = Instance::new(GuardConfig::default(), 1);
    w.initialize(&mut a, "s1", json!({}));
    let call = call_body(2, "echo", json!({}), None);
    let (_, mut watch) = w.post(&mut a, Some("s1"), &call, &[]).watch();
    let reset = format!("id:\ndata: {reset}\n\n");
    let after = format!("id: 1/0\ndata: {after}\n\n");
    let seen = a.respond(
        &mut w.store,
        w.now,
        &mut watch,
        200,
        sse_head(),
        Response::Sse(vec!["id: 0/0\ndata: \n\n", &reset, &after], clean),
    );
    (w, a, seen)
}

const NOTE: &str = r#"{"jsonrpc":"2.0","method":"notifications/message","params":{}}"#;

// | an inner event whose `id:` is empty (the inner server resets the client's cursor: no
// resume point there) between two with ids | it reaches the client with its `id:` empty,
// as the inner server wrote it, and takes no number: the events around it are `<stream>-1`
// and `<stream>-2`; a resume from `<stream>-2` is forwarded with the inner server's own
// `1/0`, and a resume from `<stream>-1`, before the reset, is refused `event_gap` (the
// inner server gave no point to replay across the reset from: nothing proves its replay
// would bring the reset event back) |
#[test]
fn an_empty_inner_id_resets_the_clients_cursor_and_takes_no_number() {
    let answer = result(2, "ok");
    let (mut w, mut a, seen) = stream_with_reset(NOTE, &answer, true);
    let ids: Vec<_> = seen.events().into_iter().map(|(id, _)| id).collect();
    let first = ids[0].clone().unwrap();
    let stream = first.strip_suffix("-1").expect("ours, first").to_owned();
    assert_eq!(
        String::from_utf8(seen.body.clone()).unwrap(),
        format!(
            "id: {stream}-1\ndata: \n\nid:\ndata: {NOTE}\n\nid: {stream}-2\ndata: {answer}\n\n"
        ),
        "the reset passes as written; the numbering skips it"
    );
    let (inner, _) = w.get(&mut a, "s1", Some(&format!("{stream}-2"))).watch();
    assert_eq!(
        inner.as_deref(),
        Some("1/0"),
        "never an empty Last-Event-ID"
    );
    let refused = w.get(&mut a, "s1", Some(&first)).answer();
    assert_eq!(refused.json()["error"]["data"]["reason"], "event_gap");
}

// | a call's answer comes in the event with the empty id, then an event with an id, then
// the inner server fails the stream | a resume from the cursor after the reset is
// forwarded: the answer passed (the client has it, and no replay from after it owes it),
// so the call is not orphaned |
#[test]
fn an_answer_in_an_event_with_an_empty_id_answers_its_call() {
    let (mut w, mut a, seen) = stream_with_reset(&result(2, "ok"), NOTE, false);
    let events = seen.events();
    assert_eq!(events[1].0.as_deref(), Some(""));
    let cursor = events[2].0.clone().unwrap();
    assert!(cursor.ends_with("-2"), "{cursor}");
    let (inner, _) = w.get(&mut a, "s1", Some(&cursor)).watch();
    assert_eq!(inner.as_deref(), Some("1/0"));
}

// | a resumed stream: the inner server's replay sends an event with an empty id before
// bringing back what was issued; or, once the replay is proven, a live one | the first is
// no event that was issued after the cursor (each had an id): refused `event_gap` before
// anything is sent. The second passes with its `id:` empty and takes no number, the next
// event numbered one past the last issued; a resume from before it is refused |
#[test]
fn an_empty_inner_id_on_a_resumed_stream() {
    let (mut w, mut a, seen) = stream_with_reset(NOTE, NOTE, true);
    let ids: Vec<String> = seen.events().into_iter().filter_map(|(id, _)| id).collect();
    let stream = ids[0].strip_suffix("-1").unwrap().to_owned();
    let (inner, mut watch) = w.get(&mut a, "s1", Some(&ids[2])).watch();
    assert_eq!(inner.as_deref(), Some("1/0"));
    let answer = result(2, "ok");
    let live = format!("id: 1/0\ndata: \n\nid:\ndata: {NOTE}\n\nid: 2/0\ndata: {answer}\n\n");
    let seen = a.respond(
        &mut w.store,
        w.now,
        &mut watch,
        200,
        sse_head(),
        Response::Sse(vec![&live], true),
    );
    assert!(seen.refusal.is_none());
    assert_eq!(
        String::from_utf8(seen.body.clone()).unwrap(),
        format!("id:\ndata: {NOTE}\n\nid: {stream}-3\ndata: {answer}\n\n")
    );
    let (inner, _) = w.get(&mut a, "s1", Some(&format!("{stream}-3"))).watch();
    assert_eq!(inner.as_deref(), Some("2/0"));
    let refused = w.get(&mut a, "s1", Some(&ids[2])).answer();
    assert_eq!(refused.json()["error"]["data"]["reason"], "event_gap");

    // Resumed from `<stream>-1`? Refused (the reset lies after it). From a stream with
    // events issued after the cursor, a replay opening with a reset diverges.
    let Setup { mut w, mut a, ids } = setup(false, true);
    let (_, mut watch) = w.get(&mut a, "s1", Some(&ids[0])).watch();
    let replay = format!("id:\ndata: {NOTE}\n\nid: 1/0\ndata: {NOTE}\n\n");
    let seen = a.respond(
        &mut w.store,
        w.now,
        &mut watch,
        200,
        sse_head(),
        Response::Sse(vec![&replay], true),
    );
    assert!(seen.body.is_empty(), "nothing of the replay passes");
    let refusal = seen.refusal.expect("a rejection instead of the stream");
    assert_eq!(refusal.json()["error"]["data"]["reason"], "event_gap");
}
