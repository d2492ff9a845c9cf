//! Host requests as mcp-resume calls: one call each, the host's id on the answer, its
//! cancellation, its idempotency key, and the opt-in annotation policy.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use rustc_hash::FxHashMap;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit};
use tokio::time::Instant;

use super::codes::{self, to_rpc};
use super::message::{id_key, response};
use super::session_state::SessionState;
use super::{lock, ANNOTATED_RESENDS, IDEMPOTENCY_META_KEY};
use crate::client::Client;
use crate::error::{Error, ErrorKind, RpcError};
use crate::ids::IdempotencyKey;
use crate::proto::CallRequest;

/// The least time a re-send is given: less than this left of the deadline, the outcome
/// that ended the last send is the answer.
const MIN_SEND: Duration = Duration::from_millis(10);

/// The host's requests in flight, and what the bridge remembers of the tools.
pub(crate) struct HostCalls {
    trust_annotations: bool,
    /// Messages towards the host.
    out: mpsc::Sender<Value>,
    /// The host's requests by id: in flight, and waiting for a place.
    ids: Mutex<Ids>,
    /// Numbers the host's requests.
    started: AtomicU64,
    /// Tools the last `tools/list` annotated read-only or idempotent.
    safe_tools: Mutex<SafeTools>,
    /// What the host set on its session, for the next one.
    pub(crate) session_state: SessionState,
    /// Asks the notification pump to forward what the client published so far.
    flush: OnceLock<mpsc::Sender<oneshot::Sender<()>>>,
    /// The secret keys of each request's [`fingerprint`].
    prints: RandomState,
}

/// The host's requests by id, under one lock: a request goes from waiting to in flight
/// without a moment where the host's cancel finds it in neither.
#[derive(Default)]
struct Ids {
    /// Each in-flight request's cancel switch, by host id, with the number of the request
    /// that holds the id (a cancelled id may be taken again before its first request ends)
    /// and the [`fingerprint`] of its method and params (the same request handed over again
    /// is told from another under the id).
    in_flight: FxHashMap<String, (u64, oneshot::Sender<()>, u64)>,
    /// The requests waiting in `Bridge::send` for a place, by host id, with their numbers and
    /// cancel switches (a host may send an id again before the first is taken).
    waiting: FxHashMap<String, Vec<(u64, oneshot::Sender<()>)>>,
}

/// A host request's id while the request waits for a place: the host's cancel reaches it
/// from its creation until it is taken ([`HostCalls::take`], [`HostCalls::start`]). Dropped
/// untaken, it is forgotten.
pub(crate) struct Waiting {
    calls: Arc<HostCalls>,
    id: Value,
    key: String,
    number: u64,
    cancelled: oneshot::Receiver<()>,
    taken: bool,
    /// The [`fingerprint`] of its method and params.
    print: u64,
    /// The same request (its id, method and params) was in flight when this one was handed
    /// over: this one is that request handed over again, never to be run, however long it
    /// waits for its place (the first one's answer may be queued by then).
    twin: bool,
}

impl Waiting {
    /// Resolves once the host cancels the request.
    pub(crate) async fn cancelled(&mut self) {
        if (&mut self.cancelled).await.is_err() {
            // The switch is only dropped with the bridge.
            std::future::pending::<()>().await;
        }
    }

    /// Takes the request out of the waiting ones: its id, or `None` when the host cancelled
    /// it.
    fn take(mut self, ids: &mut Ids) -> Option<Value> {
        self.taken = true;
        let waiting = ids.waiting.get_mut(&self.key)?;
        let at = waiting.iter().position(|(n, _)| *n == self.number)?;
        waiting.swap_remove(at);
        if waiting.is_empty() {
            ids.waiting.remove(&self.key);
        }
        Some(std::mem::take(&mut self.id))
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if !self.taken {
            let number = self.number;
            let mut ids = lock(&self.calls.ids);
            if let Some(waiting) = ids.waiting.get_mut(&self.key) {
                waiting.retain(|(n, _)| *n != number);
                if waiting.is_empty() {
                    ids.waiting.remove(&self.key);
                }
            }
        }
    }
}

impl HostCalls {
    pub(crate) fn new(trust_annotations: bool, out: mpsc::Sender<Value>) -> Self {
        HostCalls {
            trust_annotations,
            out,
            ids: Mutex::new(Ids::default()),
            started: AtomicU64::new(0),
            safe_tools: Mutex::new(SafeTools::default()),
            session_state: SessionState::default(),
            flush: OnceLock::new(),
            prints: RandomState::new(),
        }
    }

    pub(crate) fn set_flush(&self, flush: mpsc::Sender<oneshot::Sender<()>>) {
        let _ = self.flush.set(flush);
    }

    /// Waits until the notifications the client published before now are queued for the
    /// host: a call's progress, published before its result, then precedes its answer.
    async fn flush_notifications(&self) {
        let Some(flush) = self.flush.get() else {
            return;
        };
        let (done, flushed) = oneshot::channel();
        if flush.send(done).await.is_ok() {
            let _ = flushed.await;
        }
    }

    /// A host request with this id is about to wait for a place: from now on the host's
    /// cancel reaches it. `print` is its [`HostCalls::fingerprint`].
    pub(crate) fn wait(self: &Arc<Self>, id: Value, print: u64) -> Waiting {
        let key = id_key(&id);
        let number = self.started.fetch_add(1, Ordering::Relaxed);
        let (cancel, cancelled) = oneshot::channel();
        let twin = {
            let mut ids = lock(&self.ids);
            ids.waiting
                .entry(key.clone())
                .or_default()
                .push((number, cancel));
            ids.in_flight
                .get(&key)
                .is_some_and(|(_, _, held)| *held == print)
        };
        Waiting {
            print,
            twin,
            calls: self.clone(),
            id,
            key,
            number,
            cancelled,
            taken: false,
        }
    }

    /// The [`fingerprint`] of a host request, for [`HostCalls::wait`].
    pub(crate) fn fingerprint(&self, method: &str, params: Option<&Value>) -> u64 {
        fingerprint(&self.prints, method, params)
    }

    /// Takes a waiting request the bridge answers itself: its id, or `None` when the host
    /// cancelled it (it is then neither run nor answered).
    pub(crate) fn take(&self, waiting: Waiting) -> Option<Value> {
        waiting.take(&mut lock(&self.ids))
    }

    /// Runs one host request as one call and queues its answer under the host's id, unless
    /// the host cancels it first (while it waited for its place too). The permit is held
    /// until the answer is queued.
    pub(crate) fn start(
        self: &Arc<Self>,
        runtime: &tokio::runtime::Handle,
        client: Client,
        waiting: Waiting,
        method: String,
        params: Option<Value>,
        permit: OwnedSemaphorePermit,
    ) {
        let key = waiting.key.clone();
        let number = waiting.number;
        let (cancel, cancelled) = oneshot::channel();
        let (print, twin) = (waiting.print, waiting.twin);
        let id = {
            let mut ids = lock(&self.ids);
            // Taken and put in flight under one lock: a cancel finds it in one or the other.
            let Some(id) = waiting.take(&mut ids) else {
                return;
            };
            let held = ids.in_flight.get(&key);
            if twin || held.is_some_and(|(_, _, held)| *held == print) {
                // The request in flight handed over again (a host or skin that sends a
                // message twice): the host made one request and gets one answer, that call's,
                // even when this copy got its place only after that answer. A refusal would
                // reach the host first, saying "invalid request" of a call that runs; a run
                // would make the call twice.
                return;
            }
            if let Some((holder, ..)) = held {
                // JSON-RPC ids name one request at a time: the one in flight keeps the id and
                // gets its own answer; this one is refused at once, never sent.
                let holder = *holder;
                drop(ids);
                let this = Arc::clone(self);
                let refusal = RpcError::new(
                    codes::INVALID_REQUEST,
                    format!("request id {id} is already in flight"),
                );
                runtime.spawn(async move {
                    let _permit = permit;
                    let room = this.out.reserve().await;
                    // Only while the request it names still holds the id: once that one's
                    // answer is queued (or the host cancelled it) the id is the host's again,
                    // and a refusal behind it would answer the host's next request under it.
                    let ids = lock(&this.ids);
                    if ids.in_flight.get(&key).is_some_and(|(n, ..)| *n == holder) {
                        if let Ok(room) = room {
                            room.send(response(id, Err(refusal)));
                        }
                    }
                });
                return;
            }
            ids.in_flight.insert(key.clone(), (number, cancel, print));
            id
        };
        let this = Arc::clone(self);
        let wants_progress = params
            .as_ref()
            .and_then(|p| p.get("_meta"))
            .and_then(|m| m.get("progressToken"))
            .is_some();
        runtime.spawn(async move {
            let _permit = permit;
            let answer = async {
                let result = this.run(&client, &method, params).await;
                if wants_progress {
                    this.flush_notifications().await;
                }
                // The answer is queued, and the id freed, under the lock a cancel takes: a
                // reuse of the id before that is refused, and after a cancel the answer is
                // dropped however far it got, so it never reaches a later request that took
                // the id (the cancel freed it).
                let room = this.out.reserve().await;
                let mut ids = lock(&this.ids);
                if ids.in_flight.get(&key).is_some_and(|(n, ..)| *n == number) {
                    ids.in_flight.remove(&key);
                    if let Ok(room) = room {
                        room.send(response(id, result.map_err(|e| to_rpc(&e))));
                    }
                }
            };
            // Dropping the call's future abandons it: the client tells the server and stops
            // every resume and re-send.
            tokio::select! {
                () = answer => {}
                Ok(()) = cancelled => {}
            }
        });
    }

    /// The host's `notifications/cancelled` for its request `request_id`: the one in flight
    /// is abandoned, and any still waiting for a place is never taken.
    pub(crate) fn cancel(&self, request_id: &Value) {
        let key = id_key(request_id);
        let mut ids = lock(&self.ids);
        if let Some((_, cancel, _)) = ids.in_flight.remove(&key) {
            let _ = cancel.send(());
        }
        for (_, cancel) in ids.waiting.remove(&key).into_iter().flatten() {
            let _ = cancel.send(());
        }
    }

    /// The bridge is gone: every call in flight is abandoned as the host's cancel abandons
    /// it, since nobody is left to take its answer, and each holds the session open (its
    /// client) until it ends.
    pub(crate) fn abandon_all(&self) {
        let mut ids = lock(&self.ids);
        for (_, (_, cancel, _)) in ids.in_flight.drain() {
            let _ = cancel.send(());
        }
        for (_, cancel) in ids.waiting.drain().flat_map(|(_, waiting)| waiting) {
            let _ = cancel.send(());
        }
    }

    /// The host's `notifications/cancelled` with these params: cancels the request it names,
    /// if it names one.
    pub(crate) fn cancel_named(&self, params: Option<&Value>) {
        if let Some(id) = params.and_then(|p| p.get("requestId")) {
            self.cancel(id);
        }
    }

    /// Forgets the annotations (the server's capabilities changed: its tools may have).
    pub(crate) fn forget_annotations(&self) {
        lock(&self.safe_tools).tools.clear();
    }

    async fn run(
        &self,
        client: &Client,
        method: &str,
        params: Option<Value>,
    ) -> Result<Value, Error> {
        if method == "tools/call" {
            return self.call_tool(client, params).await;
        }
        let first_page = params.as_ref().and_then(|p| p.get("cursor")).is_none();
        // Read before the list is asked for: a change while it is answered makes the
        // annotations stale at once, never fresher than they are.
        let changes = client.capability_changes();
        let result = client
            .send_core(CallRequest::new(method, params.clone()))
            .await
            .and_then(|answer| an_object(method, answer));
        if let Ok(answer) = &result {
            match method {
                "tools/list" => self.remember_annotations(answer, first_page, changes),
                _ => self.session_state.record(method, params.as_ref()),
            }
        }
        result
    }

    async fn call_tool(&self, client: &Client, params: Option<Value>) -> Result<Value, Error> {
        let (params, key) = take_key(params.unwrap_or(Value::Null))?;
        // The annotations' server, when they allow a re-send: the capability changes seen
        // when the tools were listed.
        let listed_at = if key.is_none() && self.trust_annotations {
            let name = params
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            lock(&self.safe_tools).allows_resend(name)
        } else {
            None
        };
        let request = CallRequest::tool_call(params, key);
        // One deadline spans the call and its re-sends, as it spans the client's own.
        let deadline = Instant::now().checked_add(client.call_timeout());
        let mut resends = 0;
        loop {
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            let send = match left {
                Some(left) => request.clone().with_timeout(left.max(MIN_SEND)),
                None => request.clone(),
            };
            let result = match client
                .send_core(send)
                .await
                .and_then(|answer| an_object("tools/call", answer))
            {
                // Whatever ended a re-send (a refusal, even one the server wrote as a JSON-RPC
                // error; a timeout; the tool's own error), an earlier send may have run the
                // call: only a result says more.
                Err(e) if resends > 0 => Err(e.with_may_have_run()),
                result => result,
            };
            let Some(listed_at) = listed_at else {
                return result;
            };
            // The time left is read after the send (and after any wait for the same
            // server): what the send used up is not there for a re-send. A call whose input
            // the host refused was not interrupted: a re-send would start it over and ask the
            // host the same thing again.
            match result {
                Err(e)
                    if e.kind() == ErrorKind::OutcomeUnknown
                        && !e.input_refused()
                        && resends < ANNOTATED_RESENDS
                        && time_for_resend(deadline, Instant::now())
                        && same_server(client, listed_at, deadline).await
                        && time_for_resend(deadline, Instant::now()) =>
                {
                    resends += 1;
                    tracing::info!(resends, "outcome unknown: sent again (annotated safe)");
                }
                result => return result,
            }
        }
    }

    fn remember_annotations(&self, list: &Value, first_page: bool, changes: u64) {
        let Some(tools) = list.get("tools").and_then(Value::as_array) else {
            return;
        };
        let mut safe = lock(&self.safe_tools);
        if first_page || safe.listed_at != changes {
            safe.tools.clear();
        }
        safe.listed_at = changes;
        let safe = &mut safe.tools;
        for tool in tools {
            let Some(name) = tool.get("name").and_then(Value::as_str) else {
                continue;
            };
            let hint = |h: &str| {
                tool.get("annotations")
                    .and_then(|a| a.get(h))
                    .and_then(Value::as_bool)
                    .unwrap_or(false)
            };
            safe.insert(
                name.to_owned(),
                hint("readOnlyHint") || hint("idempotentHint"),
            );
        }
    }
}

/// What the last `tools/list` annotated, and of which server.
#[derive(Default)]
struct SafeTools {
    /// [`Client::capability_changes`] before the list was asked for.
    listed_at: u64,
    /// Read-only or idempotent, by tool name.
    tools: FxHashMap<String, bool>,
}

impl SafeTools {
    /// When the tool's annotation allows re-sending a call of unknown outcome: the
    /// capability changes seen when it was listed.
    fn allows_resend(&self, tool: &str) -> Option<u64> {
        self.tools
            .get(tool)
            .copied()
            .unwrap_or(false)
            .then_some(self.listed_at)
    }
}

/// Whether the server a re-send would reach is the one whose `tools/list` was read after
/// `listed_at` capability changes. The outcome that calls for the re-send may come from a
/// session being replaced (a resume refused, a 404): waits for the replacement first (within
/// the call's deadline), so that a change it finds is counted before the answer.
async fn same_server(client: &Client, listed_at: u64, deadline: Option<Instant>) -> bool {
    let ready = client.connect();
    let ready = match deadline {
        Some(deadline) => tokio::time::timeout_at(deadline, ready)
            .await
            .unwrap_or_else(|_| Err(Error::new(ErrorKind::Timeout, "connect"))),
        None => ready.await,
    };
    ready.is_ok() && client.capability_changes() == listed_at
}

/// A digest of a request's method and params: equal for the same request handed over again.
/// Keyed with secret `keys` (SipHash): two requests whose digests are equal are taken for one
/// and the second is left unanswered, so two that differ must not be made to collide, as
/// their arguments (a model's, a user's) could be under an unkeyed hash.
fn fingerprint(keys: &RandomState, method: &str, params: Option<&Value>) -> u64 {
    fn walk(value: &Value, hasher: &mut impl Hasher) {
        match value {
            Value::Null => hasher.write_u8(0),
            Value::Bool(b) => {
                hasher.write_u8(1);
                hasher.write_u8(u8::from(*b));
            }
            Value::Number(n) => {
                hasher.write_u8(2);
                match (n.as_u64(), n.as_i64(), n.as_f64()) {
                    (Some(u), ..) => hasher.write_u64(u),
                    (None, Some(i), _) => hasher.write_i64(i),
                    (None, None, f) => hasher.write_u64(f.unwrap_or(f64::NAN).to_bits()),
                }
            }
            Value::String(s) => {
                hasher.write_u8(3);
                s.hash(hasher);
            }
            Value::Array(items) => {
                hasher.write_u8(4);
                hasher.write_usize(items.len());
                for item in items {
                    walk(item, hasher);
                }
            }
            Value::Object(members) => {
                hasher.write_u8(5);
                hasher.write_usize(members.len());
                for (name, member) in members {
                    name.hash(hasher);
                    walk(member, hasher);
                }
            }
        }
    }
    let mut hasher = keys.build_hasher();
    method.hash(&mut hasher);
    match params {
        Some(params) => walk(params, &mut hasher),
        None => hasher.write_u8(6),
    }
    hasher.finish()
}

/// Whether a re-send still has its least time ([`MIN_SEND`]) before `deadline`, read `now`.
fn time_for_resend(deadline: Option<Instant>, now: Instant) -> bool {
    deadline.is_none_or(|deadline| deadline.saturating_duration_since(now) > MIN_SEND)
}

/// The server's answer to a host request, when it is an object, as every MCP result is.
/// Another value (`null`, a string, a number, an array) is the protocol error, marked as one
/// that may have run (the server answered, so the request ran): handed on as it is, it is an
/// answer no host SDK can classify, whose request then waits for the SDK's own timeout, a
/// timeout that says nothing of a call having run.
fn an_object(method: &str, answer: Value) -> Result<Value, Error> {
    let what = match &answer {
        Value::Object(_) => return Ok(answer),
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
    };
    Err(Error::new(
        ErrorKind::Protocol,
        format!("the server answered {method} with {what}, not a result object"),
    )
    .with_may_have_run())
}

/// Takes the host's idempotency key out of `params._meta`.
fn take_key(mut params: Value) -> Result<(Value, Option<IdempotencyKey>), Error> {
    let Some(meta) = params.get_mut("_meta").and_then(Value::as_object_mut) else {
        return Ok((params, None));
    };
    let Some(key) = meta.remove(IDEMPOTENCY_META_KEY) else {
        return Ok((params, None));
    };
    if meta.is_empty() {
        if let Some(object) = params.as_object_mut() {
            object.remove("_meta");
        }
    }
    let key = match key {
        Value::String(key) => IdempotencyKey::new(key).map_err(|e| {
            Error::new(
                ErrorKind::InvalidConfig,
                format!("invalid idempotency key in _meta: {e}"),
            )
        })?,
        _ => {
            return Err(Error::new(
                ErrorKind::InvalidConfig,
                format!("_meta[\"{IDEMPOTENCY_META_KEY}\"] must be a string"),
            ))
        }
    };
    Ok((params, Some(key)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_resend_needs_its_least_time_left_when_it_would_go() {
        let now = Instant::now();
        assert!(time_for_resend(None, now));
        assert!(time_for_resend(Some(now + Duration::from_secs(1)), now));
        // The call's whole timeout was left when its first send went; 3 ms are left now.
        assert!(!time_for_resend(Some(now + Duration::from_millis(3)), now));
        assert!(!time_for_resend(Some(now), now + Duration::from_millis(1)));
    }

    #[test]
    fn the_same_request_has_the_same_fingerprint() {
        let keys = RandomState::new();
        let print = |method: &str, params: Option<&Value>| fingerprint(&keys, method, params);
        let params = json!({"name": "t", "arguments": {"n": [1, -2, 0.5, "x", null, true]}});
        let same = print("tools/call", Some(&params));
        assert_eq!(same, print("tools/call", Some(&params.clone())));
        assert_ne!(same, print("tools/list", Some(&params)));
        assert_ne!(same, print("tools/call", None));
        let other = json!({"name": "t", "arguments": {"n": [1, -2, 0.5, "x", null, false]}});
        assert_ne!(same, print("tools/call", Some(&other)));
        // A pair an unkeyed multiply-and-add hash (FxHash) takes for one.
        const K: u64 = 0xf1357aea2e62a9c5;
        let lookalike = 0u64.wrapping_sub(K.wrapping_mul(K));
        assert_ne!(
            print("tools/call", Some(&json!([0u64, 0u64]))),
            print("tools/call", Some(&json!([1u64, lookalike])))
        );
    }

    #[test]
    fn only_an_object_is_a_result() {
        assert_eq!(an_object("ping", json!({})).unwrap(), json!({}));
        for answer in [json!(null), json!("ok"), json!(5), json!(true), json!([])] {
            let error = an_object("tools/call", answer.clone()).unwrap_err();
            assert_eq!(error.kind(), ErrorKind::Protocol, "{answer}");
            assert!(error.may_have_run(), "{answer}");
        }
    }

    #[test]
    fn the_key_is_taken_out_of_meta() {
        let (params, key) = take_key(json!({"name": "t", "_meta": {
            IDEMPOTENCY_META_KEY: "k-1"}}))
        .unwrap();
        assert_eq!(params, json!({"name": "t"}));
        assert_eq!(key.unwrap().as_str(), "k-1");
        let (params, key) = take_key(json!({"name": "t", "_meta": {"progressToken": 1}})).unwrap();
        assert_eq!(params, json!({"name": "t", "_meta": {"progressToken": 1}}));
        assert!(key.is_none());
        assert!(take_key(json!({"_meta": {IDEMPOTENCY_META_KEY: 3}})).is_err());
    }
}
