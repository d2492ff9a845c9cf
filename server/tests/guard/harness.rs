//! Drives a [`Guard`] as a skin would, with a synchronous in-memory store that follows
//! [`claims`] (the same transitions every store implements), and time passed in.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use mcp_resume_server::guard::claims::{self, KeyState};
use mcp_resume_server::guard::{
    Answer, Body, BodyPlan, ClaimOutcome, Guard, GuardConfig, SessionRecord, SseFlow, Step,
    StoreOp, StoreUnavailable, Watch,
};
use mcp_resume_server::ids::{IdempotencyKey, SessionId};
use serde_json::{json, Value};

pub(crate) const V: &str = "2025-11-25";
pub(crate) const KEY_META: &str = "io.github.mcp-resume/idempotency-key";

/// The store every instance of a test shares.
#[derive(Default)]
pub(crate) struct Store {
    pub(crate) sessions: HashMap<SessionId, SessionRecord>,
    pub(crate) keys: HashMap<IdempotencyKey, Option<KeyState>>,
    /// Every operation run, in order.
    pub(crate) log: Vec<StoreOp>,
    /// While set, every operation fails.
    pub(crate) down: bool,
    /// While set, a claim is taken but its reply is lost (a timeout after the store acted).
    pub(crate) claim_replies_lost: bool,
    /// While set, reading a session record fails (and only that).
    pub(crate) loads_fail: bool,
    /// How many of the next `Finish` operations fail (and only those).
    pub(crate) finishes_fail: usize,
    /// When set, a session record expires this long after its last write (as the real
    /// stores keep it); a record past its expiry reads as absent.
    pub(crate) retention: Option<Duration>,
    /// When each session record expires (with a retention set).
    pub(crate) expires: HashMap<SessionId, Instant>,
}

impl Store {
    fn run(&mut self, op: &StoreOp, now: Instant) -> Result<Option<Reported>, StoreUnavailable> {
        self.log.push(op.clone());
        if self.down {
            return Err(StoreUnavailable);
        }
        if self.loads_fail && matches!(op, StoreOp::LoadSession(_)) {
            return Err(StoreUnavailable);
        }
        if self.finishes_fail > 0 && matches!(op, StoreOp::Finish { .. }) {
            self.finishes_fail -= 1;
            return Err(StoreUnavailable);
        }
        Ok(match op {
            StoreOp::PutSession(r) => {
                self.sessions.insert(r.session().clone(), r.clone());
                if let Some(retention) = self.retention {
                    self.expires.insert(r.session().clone(), now + retention);
                }
                None
            }
            StoreOp::LoadSession(id) => {
                self.expire(now);
                Some(Reported::Session(self.sessions.get(id).cloned()))
            }
            StoreOp::ForgetSession(id) => {
                self.sessions.remove(id);
                self.expires.remove(id);
                None
            }
            StoreOp::TouchSession(id) => {
                self.expire(now);
                if let (Some(retention), true) = (self.retention, self.sessions.contains_key(id)) {
                    self.expires.insert(id.clone(), now + retention);
                }
                None
            }
            StoreOp::Claim(c) => {
                let entry = self.keys.entry(c.key().clone()).or_default();
                let out = claims::claim(entry, c, now);
                if self.claim_replies_lost {
                    return Err(StoreUnavailable);
                }
                Some(Reported::Claim(out))
            }
            StoreOp::Renew { key, token, lease } => {
                let entry = self.keys.entry(key.clone()).or_default();
                claims::renew(entry, token, *lease, now);
                None
            }
            StoreOp::Finish {
                key,
                token,
                outcome,
            } => {
                let entry = self.keys.entry(key.clone()).or_default();
                claims::finish(entry, token, outcome.clone());
                None
            }
            StoreOp::Release { key, token } => {
                let entry = self.keys.entry(key.clone()).or_default();
                claims::release(entry, token);
                None
            }
            StoreOp::MarkLost { key, token } => {
                let entry = self.keys.entry(key.clone()).or_default();
                claims::mark_lost(entry, token);
                None
            }
            _ => None,
        })
    }

    /// Drops the session records expired at `now`.
    pub(crate) fn expire(&mut self, now: Instant) {
        let gone: Vec<SessionId> = self
            .expires
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(id, _)| id.clone())
            .collect();
        for id in gone {
            self.sessions.remove(&id);
            self.expires.remove(&id);
        }
    }

    pub(crate) fn ops(&self, pred: impl Fn(&StoreOp) -> bool) -> usize {
        self.log.iter().filter(|op| pred(op)).count()
    }
}

enum Reported {
    Session(Option<SessionRecord>),
    Claim(ClaimOutcome),
}

/// What became of a request.
#[derive(Debug)]
pub(crate) enum Fate {
    /// Forwarded untouched, its response untouched.
    Passed,
    /// Forwarded; its response goes through the watch.
    Forwarded {
        last_event_id: Option<String>,
        watch: Box<Watch>,
    },
    /// Answered by the guard.
    Answered(Answer),
}

impl Fate {
    pub(crate) fn answer(self) -> Answer {
        match self {
            Fate::Answered(a) => a,
            other => panic!("expected an answer, got {other:?}"),
        }
    }

    pub(crate) fn watch(self) -> (Option<String>, Watch) {
        match self {
            Fate::Forwarded {
                last_event_id,
                watch,
            } => (last_event_id, *watch),
            other => panic!("expected a forward, got {other:?}"),
        }
    }

    pub(crate) fn is_passed(&self) -> bool {
        matches!(self, Fate::Passed)
    }
}

/// What a response became.
#[derive(Debug)]
pub(crate) struct Seen {
    pub(crate) headers: HeaderMap,
    pub(crate) body: Vec<u8>,
    pub(crate) flow: SseFlow,
    pub(crate) refusal: Option<Answer>,
}

impl Seen {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub(crate) fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("a JSON body")
    }

    /// SSE events as (id, data).
    pub(crate) fn events(&self) -> Vec<(Option<String>, String)> {
        sse_events(&String::from_utf8_lossy(&self.body))
    }
}

pub(crate) fn sse_events(text: &str) -> Vec<(Option<String>, String)> {
    let mut out = Vec::new();
    for block in text.split("\n\n") {
        let mut id = None;
        let mut data: Option<String> = None;
        for line in block.lines() {
            if let Some(v) = line.strip_prefix("id:") {
                id = Some(v.trim_start().to_owned());
            } else if let Some(v) = line.strip_prefix("data:") {
                let v = v.strip_prefix(' ').unwrap_or(v);
                data = Some(match data {
                    Some(d) => format!("{d}\n{v}"),
                    None => v.to_owned(),
                });
            }
        }
        if id.is_some() || data.is_some() {
            out.push((id, data.unwrap_or_default()));
        }
    }
    out
}

/// One instance's guard, sharing a store with other instances of the same test.
pub(crate) struct Instance {
    pub(crate) guard: Guard,
}

impl Instance {
    pub(crate) fn new(config: GuardConfig, seed: u64) -> Self {
        Self {
            guard: Guard::new(config, seed),
        }
    }

    /// Drives a request through the exchange.
    pub(crate) fn request(
        &mut self,
        store: &mut Store,
        now: Instant,
        method: Method,
        headers: &HeaderMap,
        body: Option<&[u8]>,
    ) -> Fate {
        let mut ex = self.guard.begin(&method, headers, now);
        loop {
            let step = ex.step();
            while let Some(op) = ex.poll_op() {
                let _ = store.run(&op, now);
            }
            match step {
                Step::ReadBody { limit } => {
                    let bytes = body.unwrap_or_default();
                    let seen = if bytes.len() > limit {
                        Body::TooLarge(bytes)
                    } else {
                        Body::Complete(bytes)
                    };
                    ex.handle_body(&mut self.guard, seen, headers);
                }
                Step::Store(op) => match (store.run(&op, now), &op) {
                    (Ok(Some(Reported::Session(r))), _) => {
                        ex.handle_session(&mut self.guard, Ok(r))
                    }
                    (Ok(Some(Reported::Claim(c))), _) => ex.handle_claim(&mut self.guard, Ok(c)),
                    (Err(e), StoreOp::LoadSession(_)) => ex.handle_session(&mut self.guard, Err(e)),
                    (Err(e), StoreOp::Claim(_)) => ex.handle_claim(&mut self.guard, Err(e)),
                    _ => panic!("an operation that needs no report was asked as a step"),
                },
                Step::Pass => return Fate::Passed,
                Step::Forward(f) => {
                    let last_event_id = f.last_event_id().map(|v| v.to_str().unwrap().to_owned());
                    let mut watch = f.into_watch();
                    watch.start(now);
                    return Fate::Forwarded {
                        last_event_id,
                        watch: Box::new(watch),
                    };
                }
                Step::Answer(a) => return Fate::Answered(a),
                _ => panic!("an unknown step"),
            }
        }
    }

    /// Feeds a response through a watch, as the tower skin does: SSE in `chunks`, JSON whole.
    pub(crate) fn respond(
        &mut self,
        store: &mut Store,
        now: Instant,
        watch: &mut Watch,
        status: u16,
        mut headers: HeaderMap,
        body: Response<'_>,
    ) -> Seen {
        let plan = watch.handle_head(
            &mut self.guard,
            StatusCode::from_u16(status).unwrap(),
            &mut headers,
        );
        drain(store, now, watch);
        let mut out = BytesMut::new();
        let mut flow = SseFlow::Continue;
        match (plan, body) {
            (BodyPlan::Untouched, Response::Json(b) | Response::Raw(b)) => out.extend_from_slice(b),
            (BodyPlan::Untouched, Response::Sse(chunks, _)) => {
                for c in chunks {
                    out.extend_from_slice(c.as_bytes());
                }
            }
            (BodyPlan::Json { limit }, Response::Json(b) | Response::Raw(b)) => {
                if b.len() > limit {
                    watch.handle_json_overflow();
                    out.extend_from_slice(b);
                } else {
                    match watch.handle_json(&mut self.guard, b) {
                        Some(new) => out.extend_from_slice(&new),
                        None => out.extend_from_slice(b),
                    }
                }
            }
            (BodyPlan::Sse, Response::Sse(chunks, clean)) => {
                // As the skin: the head goes once the watch lets it.
                let mut sent = false;
                for c in chunks {
                    if !sent && watch.head_ready() {
                        watch.finish_head(&mut headers);
                        sent = true;
                    }
                    flow = watch.handle_sse(&mut self.guard, c.as_bytes(), &mut out);
                    drain(store, now, watch);
                    if flow == SseFlow::Abort {
                        break;
                    }
                }
                if flow == SseFlow::Continue {
                    watch.handle_end(&mut self.guard, clean, &mut out);
                }
            }
            (plan, _) => panic!("unexpected body plan {plan:?}"),
        }
        let refusal = watch.take_refusal();
        watch.finish_head(&mut headers);
        drain(store, now, watch);
        Seen {
            headers,
            body: out.to_vec(),
            flow,
            refusal,
        }
    }
}

/// A response body to feed.
pub(crate) enum Response<'a> {
    /// `application/json`, whole.
    Json(&'a [u8]),
    /// Any other body, whole.
    Raw(&'a [u8]),
    /// `text/event-stream` in these chunks; `true` for a clean end.
    Sse(Vec<&'a str>, bool),
}

/// Runs what the watch handed out, telling it what failed.
pub(crate) fn drain(store: &mut Store, now: Instant, watch: &mut Watch) {
    while let Some(op) = watch.poll_op() {
        if store.run(&op, now).is_err() {
            watch.handle_op_failed(op, now);
        }
    }
}

pub(crate) fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.append(
            HeaderName::from_bytes(k.as_bytes()).unwrap(),
            HeaderValue::from_str(v).unwrap(),
        );
    }
    h
}

pub(crate) fn json_head() -> HeaderMap {
    headers(&[("content-type", "application/json")])
}

pub(crate) fn sse_head() -> HeaderMap {
    headers(&[("content-type", "text/event-stream")])
}

pub(crate) fn init_body(caps: Value) -> Vec<u8> {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": V, "capabilities": caps, "clientInfo": {"name": "t", "version": "1"}}})
    .to_string()
    .into_bytes()
}

pub(crate) fn init_result(id: i64) -> Vec<u8> {
    json!({"jsonrpc": "2.0", "id": id, "result": {"protocolVersion": V,
        "capabilities": {"tools": {}}, "serverInfo": {"name": "inner", "version": "1"}}})
    .to_string()
    .into_bytes()
}

pub(crate) fn call_body(id: i64, tool: &str, args: Value, key: Option<&str>) -> Vec<u8> {
    let mut params = json!({"name": tool, "arguments": args});
    if let Some(k) = key {
        params["_meta"] = json!({KEY_META: k});
    }
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})
        .to_string()
        .into_bytes()
}

pub(crate) fn result(id: i64, text: &str) -> String {
    json!({"jsonrpc": "2.0", "id": id, "result": {"content": [{"type": "text", "text": text}]}})
        .to_string()
}

/// A test world: instances sharing a store, and a clock.
pub(crate) struct World {
    pub(crate) store: Store,
    pub(crate) now: Instant,
    pub(crate) lease: Duration,
}

impl World {
    pub(crate) fn new() -> Self {
        Self {
            store: Store::default(),
            now: Instant::now(),
            lease: GuardConfig::default().lease(),
        }
    }

    /// `initialize` through `inst`, answered as JSON by the inner server with session `sid`:
    /// the session's capability hash.
    pub(crate) fn initialize(&mut self, inst: &mut Instance, sid: &str, caps: Value) -> Seen {
        let fate = inst.request(
            &mut self.store,
            self.now,
            Method::POST,
            &json_head(),
            Some(&init_body(caps)),
        );
        let (_, mut watch) = fate.watch();
        let mut head = json_head();
        head.insert("mcp-session-id", HeaderValue::from_str(sid).unwrap());
        inst.respond(
            &mut self.store,
            self.now,
            &mut watch,
            200,
            head,
            Response::Json(&init_result(1)),
        )
    }

    pub(crate) fn post(
        &mut self,
        inst: &mut Instance,
        sid: Option<&str>,
        body: &[u8],
        extra: &[(&str, &str)],
    ) -> Fate {
        let mut pairs = vec![("content-type", "application/json")];
        if let Some(s) = sid {
            pairs.push(("mcp-session-id", s));
        }
        pairs.extend_from_slice(extra);
        inst.request(
            &mut self.store,
            self.now,
            Method::POST,
            &headers(&pairs),
            Some(body),
        )
    }

    pub(crate) fn get(&mut self, inst: &mut Instance, sid: &str, last: Option<&str>) -> Fate {
        let mut pairs = vec![("mcp-session-id", sid)];
        if let Some(l) = last {
            pairs.push(("last-event-id", l));
        }
        inst.request(
            &mut self.store,
            self.now,
            Method::GET,
            &headers(&pairs),
            None,
        )
    }
}
