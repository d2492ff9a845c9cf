//! The skin every binding drives (`mcp_resume_server::skin`), driven here as a binding does:
//! request head and body in, the response pushed in piece by piece, what to send taken out.
//! What is checked is the skin's own contract (store operations before what they guard, a
//! keyed call's lease, a response head held and released); the rules are the guard's tests'.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::header::{HeaderValue, CONTENT_TYPE};
use http::{HeaderMap, Method, StatusCode};
use mcp_resume_server::guard::{Body, Claim, ClaimOutcome, SessionRecord, StoredOutcome};
use mcp_resume_server::ids::{ClaimToken, IdempotencyKey, SessionId};
use mcp_resume_server::skin::{
    End, GuardBuilder, Inbound, Next, Ops, Outbound, SharedGuard, ToClient,
};
use mcp_resume_server::store::{Store, StoreFuture};
use mcp_resume_server::MemoryStore;
use serde_json::{json, Value};
use tokio::sync::Notify;

use crate::stores::{EachStep, Gate, Silent, WaitsOnce};

fn guard(store: &MemoryStore, lease: Duration) -> SharedGuard {
    GuardBuilder::new(store.clone())
        .lease(lease)
        .seed(3)
        .build()
}

fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (name, value) in pairs {
        h.insert(*name, HeaderValue::from_str(value).unwrap());
    }
    h
}

fn keyed_call(id: i64, key: &str) -> (HeaderMap, Vec<u8>) {
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "bump", "arguments": {"tag": "t"},
                   "_meta": {"io.github.mcp-resume/idempotency-key": key}}});
    (
        headers(&[("content-type", "application/json")]),
        body.to_string().into_bytes(),
    )
}

/// A request through the inbound, as far as the skin's next step.
async fn request(guard: &SharedGuard, method: Method, head: &HeaderMap, body: &[u8]) -> Next {
    let mut inbound: Inbound = guard.begin(&method, head);
    loop {
        match inbound.next().await {
            Next::ReadBody { .. } => inbound.handle_body(Body::Complete(body), head),
            other => return other,
        }
    }
}

async fn forwarded(guard: &SharedGuard, id: i64, key: &str) -> Outbound {
    let (head, body) = keyed_call(id, key);
    match request(guard, Method::POST, &head, &body).await {
        Next::Forward(out) => out,
        other => panic!("not forwarded: {other:?}"),
    }
}

/// The JSON-RPC error `data.code` of a guard's own answer.
async fn refusal_code(guard: &SharedGuard, id: i64, key: &str) -> Option<String> {
    let (head, body) = keyed_call(id, key);
    match request(guard, Method::POST, &head, &body).await {
        Next::Answer(answer) => {
            let json = answer.json();
            Some(
                json.pointer("/error/data/code")
                    .and_then(Value::as_str)
                    .unwrap_or("answered")
                    .to_owned(),
            )
        }
        Next::Forward(_) => None,
        other => panic!("{other:?}"),
    }
}

fn json_head() -> HeaderMap {
    headers(&[("content-type", "application/json")])
}

fn answer_of(id: i64, text: &str) -> Vec<u8> {
    json!({"jsonrpc": "2.0", "id": id, "result": {"content": [{"type": "text", "text": text}]}})
        .to_string()
        .into_bytes()
}

#[tokio::test]
async fn a_keyed_answer_is_given_out_with_the_operation_that_stores_it() {
    let store = MemoryStore::default();
    let guard = guard(&store, Duration::from_secs(10));
    let mut out = forwarded(&guard, 1, "k-store").await;
    assert!(out.must_drain() && out.is_keyed());
    // A JSON answer: the head waits for the whole body (its length may change).
    let sent = out.handle_head(StatusCode::OK, json_head());
    assert!(sent.head.is_none() && sent.end.is_none());
    let sent = out.handle_body(&answer_of(1, "t:1"));
    assert!(sent.head.is_none());
    let ToClient {
        head, body, end, ..
    } = out.handle_end(true);
    let (status, _) = head.expect("the head comes with the whole body");
    assert_eq!(status, StatusCode::OK);
    assert_eq!(end, Some(End::Complete));
    let sent: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(sent["result"]["content"][0]["text"], "t:1");
    // Until the step's operations ran, the key is still running: a re-send is told so.
    let ops = out.take_ops();
    assert!(!ops.is_empty());
    assert_eq!(
        refusal_code(&guard, 2, "k-store").await.as_deref(),
        Some("IDEMPOTENCY_KEY_IN_USE")
    );
    ops.run().await;
    assert!(!out.must_drain());
    // Then the same call again gets the stored answer, re-addressed, without running.
    let (head, body) = keyed_call(3, "k-store");
    let Next::Answer(answer) = request(&guard, Method::POST, &head, &body).await else {
        panic!("the stored answer is given");
    };
    assert_eq!(answer.json()["id"], 3);
    assert_eq!(answer.json()["result"]["content"][0]["text"], "t:1");
}

#[tokio::test(start_paused = true)]
async fn a_keyed_calls_lease_is_renewed_while_it_runs() {
    let store = MemoryStore::default();
    let guard = guard(&store, Duration::from_millis(90));
    let out = forwarded(&guard, 1, "k-lease").await;
    // Ten leases long, with no output: only the outbound's own task keeps the claim.
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert_eq!(
        refusal_code(&guard, 2, "k-lease").await.as_deref(),
        Some("IDEMPOTENCY_KEY_IN_USE")
    );
    drop(out);
}

#[tokio::test(start_paused = true)]
async fn a_keyed_call_whose_outbound_is_dropped_is_lost_at_once() {
    let store = MemoryStore::default();
    let guard = guard(&store, Duration::from_secs(10));
    let out = forwarded(&guard, 1, "k-drop").await;
    drop(out);
    // The drop's operation runs on the runtime: let it.
    tokio::task::yield_now().await;
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert_eq!(
        refusal_code(&guard, 2, "k-drop").await.as_deref(),
        Some("IDEMPOTENCY_OUTCOME_UNKNOWN")
    );
}

#[tokio::test]
async fn a_failed_answer_passes_untouched_and_frees_the_key() {
    let store = MemoryStore::default();
    let guard = guard(&store, Duration::from_secs(10));
    let mut out = forwarded(&guard, 1, "k-refused").await;
    let sent = out.handle_head(StatusCode::BAD_REQUEST, json_head());
    assert_eq!(sent.head.map(|(s, _)| s), Some(StatusCode::BAD_REQUEST));
    // The skin may send the rest as it comes.
    assert!(out.is_untouched());
    assert_eq!(&out.handle_body(b"{}").body[..], b"{}");
    out.take_ops().run().await;
    // Refused by the inner server: it did not run, so the key is free again.
    assert_eq!(refusal_code(&guard, 2, "k-refused").await, None);
}

/// An `initialize` answered with SSE: its head is held until the result passed (it carries
/// the hash of what the result negotiated), what came before it is held with it.
#[tokio::test]
async fn an_initialize_streams_its_head_only_with_its_result() {
    let store = MemoryStore::default();
    let guard = guard(&store, Duration::from_secs(10));
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "t", "version": "1"}}});
    let head = json_head();
    let Next::Forward(mut out) =
        request(&guard, Method::POST, &head, init.to_string().as_bytes()).await
    else {
        panic!("initialize is forwarded");
    };
    let mut sse = HeaderMap::new();
    sse.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    sse.insert("mcp-session-id", HeaderValue::from_static("s-1"));
    sse.insert("content-length", HeaderValue::from_static("999"));
    let sent = out.handle_head(StatusCode::OK, sse);
    assert!(sent.head.is_none());
    let sent = out.handle_body(b": priming\n\n");
    assert!(sent.head.is_none() && sent.body.is_empty());
    let result = json!({"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": "2025-11-25",
        "capabilities": {"tools": {}}, "serverInfo": {"name": "s", "version": "1"}}});
    let event = format!("data: {result}\n\n");
    let sent = out.handle_body(&event.as_bytes()[..10]);
    assert!(sent.head.is_none());
    let sent = out.handle_body(&event.as_bytes()[10..]);
    let (status, headers) = sent.head.expect("released with the result");
    assert_eq!(status, StatusCode::OK);
    assert!(headers["mcp-capability-hash"]
        .to_str()
        .unwrap()
        .starts_with("sha256:"));
    assert!(headers.get("content-length").is_none(), "{headers:?}");
    let text = String::from_utf8(sent.body.to_vec()).unwrap();
    assert!(text.starts_with(": priming\n\n"), "{text}");
    assert!(text.contains("resumeSafety"), "{text}");
    // The session's record goes to the store with it.
    assert!(!out.take_ops().is_empty());
    let sent = out.handle_end(true);
    assert_eq!(sent.end, Some(End::Complete));
}

/// A memory store that can hold its first claim after it lands (saying so, `landed`) until
/// `open`; lose the answer of its first claim that lands (the store gone mid-command); and
/// hold its first release (saying so, `releasing`) until `open`. It says when a key is
/// released.
#[derive(Clone, Default)]
struct Gated {
    inner: MemoryStore,
    hold_claim: Arc<AtomicBool>,
    lose_claim_reply: Arc<AtomicBool>,
    hold_release: Arc<AtomicBool>,
    landed: Arc<Notify>,
    releasing: Arc<Notify>,
    open: Arc<Notify>,
    released: Arc<Notify>,
}

impl Gated {
    fn holding_its_claim() -> Self {
        let store = Self::default();
        store.hold_claim.store(true, Ordering::SeqCst);
        store
    }

    fn losing_a_claim_reply_then_holding_its_release() -> Self {
        let store = Self::default();
        store.lose_claim_reply.store(true, Ordering::SeqCst);
        store.hold_release.store(true, Ordering::SeqCst);
        store
    }
}

impl Store for Gated {
    fn put_session<'a>(&'a self, r: &'a SessionRecord) -> StoreFuture<'a, ()> {
        self.inner.put_session(r)
    }
    fn session<'a>(&'a self, id: &'a SessionId) -> StoreFuture<'a, Option<SessionRecord>> {
        self.inner.session(id)
    }
    fn forget_session<'a>(&'a self, id: &'a SessionId) -> StoreFuture<'a, ()> {
        self.inner.forget_session(id)
    }
    fn touch_session<'a>(&'a self, id: &'a SessionId) -> StoreFuture<'a, ()> {
        self.inner.touch_session(id)
    }
    fn claim<'a>(&'a self, claim: &'a Claim) -> StoreFuture<'a, ClaimOutcome> {
        Box::pin(async move {
            let outcome = self.inner.claim(claim).await;
            if self.hold_claim.swap(false, Ordering::SeqCst) {
                self.landed.notify_one();
                self.open.notified().await;
            }
            let granted = matches!(outcome, Ok(ClaimOutcome::Granted));
            if granted && self.lose_claim_reply.swap(false, Ordering::SeqCst) {
                return Err(mcp_resume_server::Error::store_unavailable(
                    std::io::Error::other("the answer was lost"),
                ));
            }
            outcome
        })
    }
    fn renew<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        token: &'a ClaimToken,
        lease: Duration,
    ) -> StoreFuture<'a, bool> {
        self.inner.renew(key, token, lease)
    }
    fn finish<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        token: &'a ClaimToken,
        outcome: &'a StoredOutcome,
    ) -> StoreFuture<'a, bool> {
        self.inner.finish(key, token, outcome)
    }
    fn release<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        token: &'a ClaimToken,
    ) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            if self.hold_release.swap(false, Ordering::SeqCst) {
                self.releasing.notify_one();
                self.open.notified().await;
            }
            let done = self.inner.release(key, token).await;
            self.released.notify_one();
            done
        })
    }
    fn mark_lost<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        token: &'a ClaimToken,
    ) -> StoreFuture<'a, ()> {
        self.inner.mark_lost(key, token)
    }
}

/// A request that goes away (its client left, a timeout around the service) while the store
/// takes its claim lets the claim go: the re-send of a call that never ran runs, instead of
/// finding the key held, then lost for good.
#[tokio::test]
async fn a_claim_whose_request_went_away_is_let_go() {
    let store = Gated::holding_its_claim();
    let guard = GuardBuilder::new(store.clone()).seed(3).build();
    let (head, body) = keyed_call(1, "k-left");
    let first = guard.clone();
    let gone = tokio::spawn(async move {
        request(&first, Method::POST, &head, &body).await;
    });
    let wait = Duration::from_secs(5);
    tokio::time::timeout(wait, store.landed.notified())
        .await
        .expect("the claim landed");
    gone.abort();
    let _ = gone.await;
    tokio::time::timeout(wait, store.released.notified())
        .await
        .expect("the claim is let go");
    let _ = forwarded(&guard, 2, "k-left").await;
}

/// A claim lands but its answer is lost: the guard refuses the call (503) and lets the claim
/// go. A request that goes away while that release waits on the store (its client left, a
/// timeout around the service) still has it run: the re-send of the call, which never ran,
/// runs, instead of finding the key held by nobody.
#[tokio::test]
async fn a_release_whose_request_went_away_still_runs() {
    let store = Gated::losing_a_claim_reply_then_holding_its_release();
    let guard = GuardBuilder::new(store.clone()).seed(5).build();
    let (head, body) = keyed_call(1, "k-lost");
    let first = guard.clone();
    let gone = tokio::spawn(async move {
        request(&first, Method::POST, &head, &body).await;
    });
    let wait = Duration::from_secs(5);
    tokio::time::timeout(wait, store.releasing.notified())
        .await
        .expect("the claim is being let go");
    gone.abort();
    let _ = gone.await;
    tokio::time::timeout(wait, store.released.notified())
        .await
        .expect("the claim is let go all the same");
    let _ = forwarded(&guard, 2, "k-lost").await;
}

/// A store that never answers holds no request past the guard's own bound on a store step:
/// a keyed call is refused 503 (retryable, never run), a request of a session the instance
/// does not hold passes.
#[tokio::test]
async fn a_store_that_never_answers_holds_no_request() {
    let guard = GuardBuilder::new(EachStep::new(Silent))
        .store_timeout(Duration::from_millis(50))
        .build();
    let bound = Duration::from_secs(5);
    let (head, body) = keyed_call(1, "k-silent");
    match tokio::time::timeout(bound, request(&guard, Method::POST, &head, &body))
        .await
        .expect("a keyed call ends")
    {
        Next::Answer(answer) => assert_eq!(answer.status(), StatusCode::SERVICE_UNAVAILABLE),
        other => panic!("not refused: {other:?}"),
    }
    let body = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).to_string();
    let head = headers(&[
        ("content-type", "application/json"),
        ("mcp-session-id", "s-unknown"),
    ]);
    let next = tokio::time::timeout(bound, request(&guard, Method::POST, &head, body.as_bytes()))
        .await
        .expect("an unkeyed request ends");
    assert!(matches!(next, Next::Pass | Next::Forward(_)), "{next:?}");
}

/// The guard's bound on a store step needs no timer of the runtime's: on a runtime built
/// without timers, a step that waits is bounded and answered as on any other (a session's
/// record read by a second instance, its request stamped with the session's hash).
#[test]
fn store_steps_are_bounded_on_a_runtime_without_timers() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        let store = EachStep::new(WaitsOnce);
        let first = GuardBuilder::new(store.0.clone()).build();
        let second = GuardBuilder::new(store).build();
        // A session known to the store only: the second guard must read its record.
        let hash = initialize(&first, "s-1").await;
        assert_eq!(unkeyed_hash(&second, 1).await, Some(hash));
    });
}

/// A response of `guard` to an unkeyed request of session `s-1`, driven through the skin
/// (its store operations run): the capability hash it carries.
async fn unkeyed_hash(guard: &SharedGuard, id: i64) -> Option<String> {
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/list"}).to_string();
    let head = headers(&[
        ("content-type", "application/json"),
        ("mcp-session-id", "s-1"),
    ]);
    let Next::Forward(mut out) = request(guard, Method::POST, &head, body.as_bytes()).await else {
        return None;
    };
    let mut sent = out.handle_head(StatusCode::OK, json_head());
    if sent.head.is_none() {
        out.handle_body(&answer_of(id, "tools"));
        sent = out.handle_end(true);
    }
    out.take_ops().run().await;
    let (_, headers) = sent.head.expect("a head");
    headers
        .get("mcp-capability-hash")
        .map(|v| v.to_str().unwrap().to_owned())
}

/// Session `session` initialized through `guard` (its record stored): its capability hash.
async fn initialize(guard: &SharedGuard, session: &str) -> String {
    let (ops, hash) = initialized(guard, session).await;
    ops.run().await;
    hash
}

/// Session `session` initialized through `guard` as far as its answer: the operations that
/// store its record, not run yet, and its capability hash.
async fn initialized(guard: &SharedGuard, session: &str) -> (Ops, String) {
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "t", "version": "1"}}});
    let Next::Forward(mut out) = request(
        guard,
        Method::POST,
        &json_head(),
        init.to_string().as_bytes(),
    )
    .await
    else {
        panic!("initialize is forwarded");
    };
    let head = headers(&[
        ("content-type", "application/json"),
        ("mcp-session-id", session),
    ]);
    out.handle_head(StatusCode::OK, head);
    let result = json!({"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": "2025-11-25",
        "capabilities": {"tools": {}}, "serverInfo": {"name": "s", "version": "1"}}});
    out.handle_body(result.to_string().as_bytes());
    let (_, sent) = out.handle_end(true).head.expect("the head");
    let hash = sent["mcp-capability-hash"].to_str().unwrap().to_owned();
    (out.take_ops(), hash)
}

// | two guards sharing a `MemoryStore` of retention R; a session initialized on the first,
// used there at 0.9 R, then on the second at 1.5 R | the second finds its record and stamps
// its hash: the skin passes the guard its clock, and the guard touches the record at half
// the store's own retention |
#[tokio::test(start_paused = true)]
async fn a_session_in_use_keeps_its_record_through_the_skin() {
    let retention = Duration::from_secs(3600);
    let store = MemoryStore::with_limits(16, retention);
    let (a, b) = (
        guard(&store, Duration::from_secs(10)),
        guard(&store, Duration::from_secs(10)),
    );
    assert_eq!(a.config().session_refresh(), retention / 2);
    let hash = initialize(&a, "s-1").await;
    tokio::time::advance(retention.mul_f64(0.9)).await;
    assert_eq!(unkeyed_hash(&a, 1).await.as_deref(), Some(hash.as_str()));
    tokio::time::advance(retention.mul_f64(0.6)).await;
    assert_eq!(unkeyed_hash(&b, 2).await.as_deref(), Some(hash.as_str()));
}

/// A skin that drops its outbound once the answer is out, before running the operations
/// that store it (as the Node binding does): a first `finish` that fails is still retried,
/// the lease still renewed, so a re-send long past the lease gets the stored answer.
#[tokio::test(start_paused = true)]
async fn an_answer_whose_outbound_was_dropped_before_its_ops_is_stored_again() {
    let lease = Duration::from_millis(300);
    let store = crate::stores::FinishFailsOnce::default();
    let guard = GuardBuilder::new(store.clone())
        .lease(lease)
        .seed(3)
        .build();
    let mut out = forwarded(&guard, 1, "k-again").await;
    out.handle_head(StatusCode::OK, json_head());
    out.handle_body(&answer_of(1, "t:1"));
    let sent = out.handle_end(true);
    assert_eq!(sent.end, Some(End::Complete));
    let ops = out.take_ops();
    drop(out);
    ops.run().await;
    assert!(store.has_failed(), "the first finish failed");
    tokio::time::sleep(lease * 6).await;
    let (head, body) = keyed_call(2, "k-again");
    let Next::Answer(answer) = request(&guard, Method::POST, &head, &body).await else {
        panic!("the stored answer is given");
    };
    let json = answer.json();
    assert_eq!(json["result"]["content"][0]["text"], "t:1", "{json}");
}

/// A compressed answer (an inner app that compresses its own responses) is not read: its
/// bytes pass as they are, even a line that reads as an event id, and a keyed call so
/// answered has its key marked lost, as any answer the guard cannot read.
#[tokio::test]
async fn a_compressed_answer_passes_byte_for_byte_and_its_key_is_lost() {
    let store = MemoryStore::default();
    let guard = guard(&store, Duration::from_secs(10));
    let mut out = forwarded(&guard, 1, "k-gzip").await;
    let head = headers(&[
        ("content-type", "text/event-stream"),
        ("content-encoding", "gzip"),
    ]);
    let sent = out.handle_head(StatusCode::OK, head);
    let (status, sent_head) = sent.head.expect("the head passes at once");
    assert_eq!(status, StatusCode::OK);
    assert_eq!(sent_head["content-encoding"], "gzip");
    assert!(out.is_untouched());
    let chunk: &[u8] = b"\x1f\x8b\x08\x00\xffid: 7\n\n\x03\x00data: \xfe\n\n";
    let sent = out.handle_body(chunk);
    assert_eq!(&sent.body[..], chunk);
    let sent = out.handle_end(true);
    assert_eq!(sent.end, Some(End::Complete));
    assert!(sent.body.is_empty());
    out.take_ops().run().await;
    assert_eq!(
        refusal_code(&guard, 2, "k-gzip").await.as_deref(),
        Some("IDEMPOTENCY_OUTCOME_UNKNOWN")
    );
}

/// Two guards built from one seeded builder (the same settings, the same instance id, the
/// same seed: a configuration cloned for two servers, or two workers of one) draw their
/// stream ids alike, but never each other's claim tokens: a key one of them runs is in use
/// for the other, not granted to it as its own.
#[tokio::test]
async fn guards_built_from_one_seeded_builder_do_not_share_their_claims() {
    let store = MemoryStore::default();
    let builder = GuardBuilder::new(store.clone())
        .lease(Duration::from_secs(10))
        .seed(3);
    let (first, second) = (builder.clone().build(), builder.build());
    let _running = forwarded(&first, 1, "k-twins").await;
    assert_eq!(
        refusal_code(&second, 2, "k-twins").await.as_deref(),
        Some("IDEMPOTENCY_KEY_IN_USE")
    );
}

/// Operations that answer nobody (here a session's record, written as its `initialize` is
/// answered) still run when the request carrying them goes away mid-step (its client left):
/// before, the write was dropped with the request, and the session had no record for good
/// (its keyed calls refused 404 on every other instance, its unkeyed ones unstamped).
#[tokio::test]
async fn a_store_write_whose_request_goes_away_still_lands() {
    let gate = Gate::default();
    let store = EachStep::new(gate.clone());
    let memory = store.0.clone();
    let guard = GuardBuilder::new(store).build();
    let (ops, _) = initialized(&guard, "s-cut").await;
    let mut run = Box::pin(ops.run());
    tokio::select! {
        _ = &mut run => panic!("the record's write waits at the gate"),
        _ = gate.arrived.notified() => {}
    }
    drop(run);
    gate.open();
    let id = SessionId::parse(b"s-cut").unwrap();
    let stored = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            if memory.session(&id).await.unwrap().is_some() {
                return;
            }
            tokio::task::yield_now().await;
        }
    })
    .await;
    assert!(stored.is_ok(), "the session's record was never written");
}
