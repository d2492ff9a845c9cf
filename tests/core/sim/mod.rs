//! A deterministic simulator: the sans-IO [`Session`], a scripted in-memory MCP server that
//! speaks the HTTP-level inputs (heads with headers, SSE bytes, ends, errors), and virtual
//! time. Everything that happens is recorded so tests assert on what the server observed.
#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Duration, Instant};

use http::{HeaderMap, HeaderName, HeaderValue};
use mcp_resume::ids::IdempotencyKey;
use mcp_resume::proto::Session;
use mcp_resume::proto::{
    CallId, CallRequest, HttpId, HttpMethod, HttpRequest, Output, SessionConfig, SessionEvent,
    Transmit, TransportFailure,
};
use mcp_resume::Error;
use serde_json::{json, Value};

pub(crate) const META_KEY: &str = "io.github.mcp-resume/idempotency-key";
pub(crate) const HASH_META_KEY: &str = "io.github.mcp-resume/capability-hash";
pub(crate) const WRONG_HASH: &str = "sha256:bad0bad0";

/// Prints the seed when a test panics, so a failing schedule can be replayed.
pub(crate) struct SeedGuard(pub u64);

impl Drop for SeedGuard {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("simulation failed with seed {} (0x{:x})", self.0, self.0);
        }
    }
}

/// What the server does to one exchange touching a call (its POST or a resume GET of its
/// stream). Consumed in order; an exhausted script means "behave".
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Fault {
    /// Behave normally.
    None,
    // --- for a POST ---
    /// Connection refused: the server never sees the request.
    Refuse,
    /// The server forgot the session: 404 with a JSON-RPC error, nothing executed.
    NotFound,
    /// A 400 naming the session (one stock server's 404), nothing executed.
    BadRequestSession,
    /// A proxy's 404 for this one request: the session is fine, nothing executed.
    ProxyNotFound,
    /// A 400 whose body merely contains the word "session" (a tool's own parameter error):
    /// the session is fine, nothing executed.
    BadRequestWord,
    /// Connection lost before the head; `executed` says whether the call ran.
    LoseBeforeHead { executed: bool },
    /// SSE: priming event, then the connection breaks (the call runs; its response stays
    /// in the event log).
    CutAfterPriming,
    /// SSE: priming event, then a clean end (2025-11-25 polling server).
    EndAfterPriming,
    /// SSE head, then the connection breaks before any event (the call runs).
    CutBeforeEvents,
    /// The call runs on an instance with another negotiated context (hash header differs).
    WrongContext,
    /// Like `WrongContext`, from an instance that does not stamp its results: only the
    /// response head shows the other context.
    WrongContextHeaderOnly,
    /// The call's result is replayed from a store where it was produced under another hash.
    WrongResultHash,
    /// Nothing runs: the key's first execution still holds it (`IDEMPOTENCY_KEY_IN_USE`).
    KeyInUse,
    /// Nothing runs: the key's first execution was lost (`IDEMPOTENCY_OUTCOME_UNKNOWN`).
    KeyOutcomeLost,
    /// `KeyInUse` answered with `id: null` (a server that did not attribute its refusal).
    KeyInUseWithoutId,
    /// Answered `status` with these headers and a JSON-RPC error body (the extension's
    /// rejection body when a header is `mcp-resume-rejected`); the call runs first when
    /// `executed`.
    Status {
        status: u16,
        headers: &'static [(&'static str, &'static str)],
        executed: bool,
    },
    // --- for a resume GET ---
    /// 404 with a plain JSON-RPC error body.
    ResumeNotFound,
    /// 404 with the extension's rejection body and header.
    ResumeRejected(&'static str),
    /// 405.
    Resume405,
    /// Answered `status` with these headers and a plain JSON-RPC error body.
    ResumeStatus {
        status: u16,
        headers: &'static [(&'static str, &'static str)],
    },
    /// Connection refused.
    ResumeRefuse,
    /// 200, nothing replayed, clean end (the naive replaying instance with no continuation).
    ResumeNaiveCleanEnd,
    /// 200 under another capability hash.
    ResumeHashChanged,
    /// 200, the next event id skips ahead.
    ResumeGap,
    /// 200, replays a response to a request the client never sent.
    ResumeOrphan,
    /// 200, then the connection breaks before any event: no progress.
    ResumeCutNoProgress,
    /// 200, one progress notification, then the connection breaks.
    ResumeProgressThenCut,
    /// 200, one progress notification, then a clean end.
    ResumeProgressThenEnd,
}

/// What a faulty `initialize` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InitFault {
    Refuse,
    ServerError,
}

/// Headers a test gives a reply.
pub(crate) type Headers = &'static [(&'static str, &'static str)];

#[derive(Debug, Clone)]
pub(crate) struct ServerConfig {
    /// Advertise and enforce the resume-safety extension.
    pub ext: bool,
    /// Advertise idempotency (and deduplicate keyed calls).
    pub idempotency: bool,
    /// Deduplicate keyed calls even without advertising it.
    pub silent_dedup: bool,
    /// Answer calls with SSE (else JSON).
    pub sse: bool,
    /// `retry` sent with priming events, in ms.
    pub retry_ms: Option<u64>,
    /// Protocol version answered.
    pub protocol_version: String,
    /// Offer the standalone GET stream (else 405).
    pub listen: bool,
    /// Keep a resumed GET open after the replay (stock servers do).
    pub keep_resumed_open: bool,
    /// The capability hash of the negotiated context (a digest of it, so the same for every
    /// session with the same context; change it to model a changed context).
    pub hash: String,
    /// Notifications sent on the first standalone GET stream before it is cut.
    pub listen_events: u32,
    /// Answer a GET without `Last-Event-ID` with 404 instead of 405 when `listen` is off.
    pub listen_404: bool,
    /// Answer `initialize` with an SSE stream (priming event first) instead of JSON.
    pub init_sse: bool,
    /// Answer JSON responses as one-element batches (only valid under 2025-03-26).
    pub batch: bool,
    /// Answer so many GETs without `Last-Event-ID` with this status and these headers (a
    /// server refusing the stream's credentials).
    pub listen_refusal: Option<(u16, Headers, u32)>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            ext: true,
            idempotency: true,
            silent_dedup: false,
            sse: true,
            retry_ms: None,
            protocol_version: "2025-11-25".into(),
            listen: true,
            keep_resumed_open: true,
            hash: "sha256:abc0".into(),
            listen_events: 0,
            listen_404: false,
            init_sse: false,
            batch: false,
            listen_refusal: None,
        }
    }
}

/// One request as the server received it.
#[derive(Debug, Clone)]
pub(crate) struct Seen {
    pub at: Duration,
    pub http: HttpId,
    pub method: HttpMethod,
    pub session_id: Option<String>,
    /// Whether that session id was the newest one the server had issued.
    pub session_id_current: bool,
    pub protocol_version: Option<String>,
    pub last_event_id: Option<String>,
    pub rpc_method: Option<String>,
    pub rpc_id: Option<Value>,
    pub tag: Option<String>,
    pub idempotency_header: Option<String>,
    pub idempotency_meta: Option<String>,
    pub accept: Option<String>,
    pub content_type: Option<String>,
    pub body: Option<Value>,
    /// Answered without being accepted (404/400: the request provably did not run).
    pub not_accepted: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Head,
    Data,
    End,
    Lost,
    Refused,
}

#[derive(Debug, Clone)]
struct Reply {
    status: u16,
    headers: Vec<(&'static str, String)>,
    /// Body chunks, each delivered as one `handle_data`.
    chunks: Vec<Vec<u8>>,
    /// How it finishes: `End`, `Lost`, or `None` to hold the stream open.
    finish: Option<Step>,
    /// Refused / lost before the head.
    early: Option<Step>,
    /// Extra time before the head (a slow instance).
    delay: Duration,
}

impl Reply {
    fn status(status: u16) -> Self {
        Reply {
            status,
            headers: Vec::new(),
            chunks: Vec::new(),
            finish: Some(Step::End),
            early: None,
            delay: Duration::ZERO,
        }
    }
    fn early(step: Step) -> Self {
        Reply {
            early: Some(step),
            ..Reply::status(0)
        }
    }
    fn json(status: u16, body: Value) -> Self {
        let mut r = Reply::status(status);
        r.headers.push(("content-type", "application/json".into()));
        r.chunks.push(serde_json::to_vec(&body).unwrap());
        r
    }
    fn sse() -> Self {
        let mut r = Reply::status(200);
        r.headers.push(("content-type", "text/event-stream".into()));
        r
    }
}

#[derive(Debug, Clone)]
struct StreamLog {
    tag: Option<String>,
    /// (seq, data) of every event with an id.
    events: Vec<(u64, String)>,
}

#[derive(Debug, Clone)]
struct SrvSession {
    sid: String,
    hash: String,
    alive: bool,
}

/// The scripted server model.
#[derive(Debug)]
pub(crate) struct Server {
    pub cfg: ServerConfig,
    /// Per call tag, the faults of its successive exchanges.
    pub faults: HashMap<String, VecDeque<Fault>>,
    pub init_faults: VecDeque<InitFault>,
    /// A rolling deploy: until this time the balancer answers `initialize` with 502.
    pub init_down_until: Option<Duration>,
    /// Extra reply latency for the POSTs of these call tags.
    pub slow: HashMap<String, Duration>,
    pub seen: Vec<Seen>,
    /// Executions per call tag: the truth about side effects.
    pub executions: HashMap<String, u32>,
    /// Executions under a context other than the session's.
    pub wrong_context_executions: HashMap<String, u32>,
    sessions: Vec<SrvSession>,
    streams: HashMap<String, StreamLog>,
    idem: HashMap<String, Value>,
    next_stream: u32,
    listen_cut_done: bool,
}

impl Server {
    pub(crate) fn new(cfg: ServerConfig) -> Self {
        Server {
            cfg,
            faults: HashMap::new(),
            init_faults: VecDeque::new(),
            init_down_until: None,
            slow: HashMap::new(),
            seen: Vec::new(),
            executions: HashMap::new(),
            wrong_context_executions: HashMap::new(),
            sessions: Vec::new(),
            streams: HashMap::new(),
            idem: HashMap::new(),
            next_stream: 0,
            listen_cut_done: false,
        }
    }

    pub(crate) fn fault(&mut self, tag: &str, faults: impl IntoIterator<Item = Fault>) {
        self.faults
            .entry(tag.to_owned())
            .or_default()
            .extend(faults);
    }

    /// The server forgets every session it has (a restart): requests carrying their ids get
    /// 404 from now on.
    pub(crate) fn forget_sessions(&mut self) {
        for s in &mut self.sessions {
            s.alive = false;
        }
    }

    pub(crate) fn session_ids(&self) -> Vec<String> {
        self.sessions.iter().map(|s| s.sid.clone()).collect()
    }

    pub(crate) fn initializes(&self) -> usize {
        self.seen
            .iter()
            .filter(|s| s.rpc_method.as_deref() == Some("initialize"))
            .count()
    }

    pub(crate) fn posts_of(&self, tag: &str) -> Vec<&Seen> {
        self.seen
            .iter()
            .filter(|s| s.method == HttpMethod::Post && s.tag.as_deref() == Some(tag))
            .collect()
    }

    pub(crate) fn resumes(&self) -> Vec<&Seen> {
        self.seen
            .iter()
            .filter(|s| s.method == HttpMethod::Get && s.last_event_id.is_some())
            .collect()
    }

    pub(crate) fn executions_of(&self, tag: &str) -> u32 {
        self.executions.get(tag).copied().unwrap_or(0)
    }

    fn current(&self) -> Option<&SrvSession> {
        self.sessions.last()
    }

    fn hash_header(&self, hash: &str) -> Vec<(&'static str, String)> {
        if self.cfg.ext {
            vec![("mcp-capability-hash", hash.to_owned())]
        } else {
            Vec::new()
        }
    }

    fn next_fault(&mut self, tag: Option<&str>) -> Fault {
        tag.and_then(|t| self.faults.get_mut(t))
            .and_then(|q| q.pop_front())
            .unwrap_or(Fault::None)
    }

    fn handle(&mut self, req: &HttpRequest, at: Duration) -> Reply {
        let header = |name: &str| {
            req.headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let body: Option<Value> = req
            .body
            .as_ref()
            .and_then(|b| serde_json::from_slice(b).ok());
        let rpc_method = body
            .as_ref()
            .and_then(|b| b.get("method"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let params = body.as_ref().and_then(|b| b.get("params")).cloned();
        let mut tag = params
            .as_ref()
            .and_then(|p| p.get("arguments"))
            .and_then(|a| a.get("tag"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let last_event_id = header("last-event-id");
        if tag.is_none() {
            if let Some(lei) = &last_event_id {
                let stream = lei
                    .rsplit_once('-')
                    .map(|(s, _)| s.to_owned())
                    .unwrap_or_default();
                tag = self.streams.get(&stream).and_then(|s| s.tag.clone());
            }
        }
        let sid = header("mcp-session-id");
        let session_id_current = match (&sid, self.current()) {
            (Some(s), Some(cur)) => *s == cur.sid,
            (None, _) => true,
            (Some(_), None) => false,
        };
        let fault = match (req.method, rpc_method.as_deref()) {
            (HttpMethod::Post, Some("tools/call")) => self.next_fault(tag.as_deref()),
            (HttpMethod::Get, _) if last_event_id.is_some() => self.next_fault(tag.as_deref()),
            _ => Fault::None,
        };
        let refused = matches!(fault, Fault::Refuse | Fault::ResumeRefuse)
            || (rpc_method.as_deref() == Some("initialize")
                && self.init_faults.front() == Some(&InitFault::Refuse));
        if !refused {
            self.seen.push(Seen {
                at,
                http: req.id,
                method: req.method,
                session_id: sid.clone(),
                session_id_current,
                protocol_version: header("mcp-protocol-version"),
                last_event_id: last_event_id.clone(),
                rpc_method: rpc_method.clone(),
                rpc_id: body.as_ref().and_then(|b| b.get("id")).cloned(),
                tag: tag.clone(),
                idempotency_header: header("idempotency-key"),
                idempotency_meta: params
                    .as_ref()
                    .and_then(|p| p.get("_meta"))
                    .and_then(|m| m.get(META_KEY))
                    .and_then(Value::as_str)
                    .map(str::to_owned),
                accept: header("accept"),
                content_type: header("content-type"),
                body: body.clone(),
                not_accepted: false,
            });
        }
        let slow = tag.as_ref().and_then(|t| self.slow.get(t)).copied();
        let mut reply = self.dispatch(req, at, sid, last_event_id, rpc_method, body, tag, fault);
        reply.delay = slow.unwrap_or_default();
        if !refused && matches!(reply.status, 400 | 404) {
            if let Some(last) = self.seen.last_mut() {
                last.not_accepted = true;
            }
        }
        reply
    }

    #[allow(clippy::too_many_arguments)]
    fn dispatch(
        &mut self,
        req: &HttpRequest,
        at: Duration,
        sid: Option<String>,
        last_event_id: Option<String>,
        rpc_method: Option<String>,
        body: Option<Value>,
        tag: Option<String>,
        fault: Fault,
    ) -> Reply {
        match req.method {
            HttpMethod::Delete => Reply::status(200),
            HttpMethod::Get => self.get(sid, last_event_id, fault),
            other if other != HttpMethod::Post => Reply::status(405),
            _ => {
                let body = body.unwrap_or(Value::Null);
                match rpc_method.as_deref() {
                    Some("initialize") if self.init_down_until.is_some_and(|t| at < t) => {
                        Reply::status(502)
                    }
                    Some("initialize") => self.initialize(&body),
                    _ if sid.is_none() || !self.alive(sid.as_deref()) => {
                        if sid.is_some() {
                            Reply::json(
                                404,
                                json!({"jsonrpc":"2.0","id":null,
                                "error":{"code":-32001,"message":"Session not found"}}),
                            )
                        } else {
                            Reply::status(400)
                        }
                    }
                    Some("tools/call") => self.tools_call(&body, tag, fault),
                    Some(_) if body.get("id").is_some() && body.get("method").is_some() => {
                        let id = body.get("id").cloned().unwrap_or(Value::Null);
                        self.answer(json!({"jsonrpc":"2.0","id":id,"result":{}}), None, false)
                    }
                    _ => Reply::status(202),
                }
            }
        }
    }

    fn alive(&self, sid: Option<&str>) -> bool {
        self.sessions
            .iter()
            .any(|s| Some(s.sid.as_str()) == sid && s.alive)
    }

    fn initialize(&mut self, body: &Value) -> Reply {
        match self.init_faults.pop_front() {
            Some(InitFault::Refuse) => return Reply::early(Step::Refused),
            Some(InitFault::ServerError) => return Reply::status(500),
            None => {}
        }
        for s in &mut self.sessions {
            s.alive = false;
        }
        let n = self.sessions.len() + 1;
        let sid = format!("sess-{n:04}-secret");
        let hash = self.cfg.hash.clone();
        self.sessions.push(SrvSession {
            sid: sid.clone(),
            hash: hash.clone(),
            alive: true,
        });
        let mut caps = json!({"tools": {}});
        if self.cfg.ext {
            let mut adv = json!({"version": 1, "sequencedEventIds": true, "capabilityHash": true});
            if self.cfg.idempotency {
                adv["idempotency"] = json!({"metaKey": META_KEY, "header": "Idempotency-Key"});
            }
            caps["experimental"] = json!({"resumeSafety": adv});
        } else if self.cfg.idempotency {
            caps["experimental"] = json!({"resumeSafety": {"idempotency": {"metaKey": META_KEY}}});
        }
        let id = body.get("id").cloned().unwrap_or(Value::Null);
        let result = json!({"jsonrpc": "2.0", "id": id, "result": {
            "protocolVersion": self.cfg.protocol_version,
            "capabilities": caps,
            "serverInfo": {"name": "sim", "version": "0"}}});
        let mut r = if self.cfg.init_sse {
            let mut r = Reply::sse();
            r.chunks.push(b"id: init-1\ndata:\n\n".to_vec());
            r.chunks
                .push(format!("id: init-2\ndata: {result}\n\n").into_bytes());
            r.finish = None;
            r
        } else {
            Reply::json(200, result)
        };
        r.headers.push(("mcp-session-id", sid));
        r.headers.extend(self.hash_header(&hash));
        r
    }

    fn dedups(&self) -> bool {
        self.cfg.idempotency || self.cfg.silent_dedup
    }

    fn tools_call(&mut self, body: &Value, tag: Option<String>, fault: Fault) -> Reply {
        let hash = self.current().map(|s| s.hash.clone()).unwrap_or_default();
        let id = body.get("id").cloned().unwrap_or(Value::Null);
        let key = body
            .get("params")
            .and_then(|p| p.get("_meta"))
            .and_then(|m| m.get(META_KEY))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let tag_s = tag.clone().unwrap_or_default();
        match fault {
            Fault::NotFound => {
                if let Some(s) = self.sessions.last_mut() {
                    s.alive = false;
                }
                return Reply::json(
                    404,
                    json!({"jsonrpc":"2.0","id":null,
                    "error":{"code":-32600,"message":"Session not found"}}),
                );
            }
            Fault::BadRequestSession => {
                if let Some(s) = self.sessions.last_mut() {
                    s.alive = false;
                }
                return Reply::json(
                    400,
                    json!({"jsonrpc":"2.0","id":null,
                    "error":{"code":-32000,"message":"Bad Request: No valid session ID provided"}}),
                );
            }
            Fault::ProxyNotFound => return Reply::status(404),
            Fault::BadRequestWord => {
                return Reply::json(
                    400,
                    json!({"jsonrpc":"2.0","id":id,
                    "error":{"code":-32602,"message":"invalid params: session_name is required"}}),
                );
            }
            Fault::KeyInUse | Fault::KeyOutcomeLost | Fault::KeyInUseWithoutId => {
                let id = if fault == Fault::KeyInUseWithoutId {
                    Value::Null
                } else {
                    id
                };
                let code = if fault != Fault::KeyOutcomeLost {
                    "IDEMPOTENCY_KEY_IN_USE"
                } else {
                    "IDEMPOTENCY_OUTCOME_UNKNOWN"
                };
                let refusal = json!({"jsonrpc": "2.0", "id": id, "error": {
                    "code": -32000, "message": "idempotency key refused", "data": {"code": code}}});
                return self.answer(refusal, tag, true);
            }
            Fault::LoseBeforeHead { executed: false } => return Reply::early(Step::Lost),
            Fault::Refuse => return Reply::early(Step::Refused),
            Fault::Status {
                status,
                headers,
                executed,
            } => {
                if executed {
                    *self.executions.entry(tag_s.clone()).or_default() += 1;
                }
                return status_reply(status, headers);
            }
            _ => {}
        }
        let wrong = matches!(fault, Fault::WrongContext | Fault::WrongContextHeaderOnly);
        let exec_hash = if wrong {
            WRONG_HASH.to_owned()
        } else {
            hash.clone()
        };
        // Execute (or replay a stored result for a known key).
        let mut result = match key
            .as_ref()
            .filter(|_| self.dedups())
            .and_then(|k| self.idem.get(k))
        {
            Some(stored) => stored.clone(),
            None => {
                *self.executions.entry(tag_s.clone()).or_default() += 1;
                if wrong {
                    *self
                        .wrong_context_executions
                        .entry(tag_s.clone())
                        .or_default() += 1;
                }
                let mut r = json!({"content": [{"type": "text", "text": tag_s}],
                    "ctx_ok": !wrong});
                if self.cfg.ext && fault != Fault::WrongContextHeaderOnly {
                    r["_meta"] = json!({HASH_META_KEY: exec_hash});
                }
                if let (Some(k), true) = (&key, self.dedups()) {
                    self.idem.insert(k.clone(), r.clone());
                }
                r
            }
        };
        if fault == Fault::WrongResultHash {
            result["_meta"] = json!({HASH_META_KEY: WRONG_HASH});
            result["ctx_ok"] = json!(false);
        }
        let response = json!({"jsonrpc": "2.0", "id": id, "result": result});
        if fault == (Fault::LoseBeforeHead { executed: true }) {
            // Executed, but the answer is lost with the connection: park it in a stream
            // nobody can name.
            return Reply::early(Step::Lost);
        }
        let head_hash = if wrong { WRONG_HASH.to_owned() } else { hash };
        let mut r = self.answer(response, tag, true);
        r.headers.retain(|(n, _)| *n != "mcp-capability-hash");
        r.headers.extend(self.hash_header(&head_hash));
        match fault {
            Fault::CutAfterPriming | Fault::EndAfterPriming | Fault::CutBeforeEvents
                if self.cfg.sse =>
            {
                let keep = if fault == Fault::CutBeforeEvents {
                    0
                } else {
                    1
                };
                r.chunks.truncate(keep);
                r.finish = Some(if fault == Fault::EndAfterPriming {
                    Step::End
                } else {
                    Step::Lost
                });
            }
            Fault::CutAfterPriming | Fault::CutBeforeEvents => {
                // JSON mode: the body is lost mid-way.
                r.chunks.clear();
                r.finish = Some(Step::Lost);
            }
            Fault::EndAfterPriming => {
                r.chunks.clear();
            }
            _ => {}
        }
        r
    }

    /// Answers a request in the configured mode; SSE answers get a logged stream.
    fn answer(&mut self, response: Value, tag: Option<String>, _call: bool) -> Reply {
        let hash = self.current().map(|s| s.hash.clone()).unwrap_or_default();
        if !self.cfg.sse {
            let body = if self.cfg.batch {
                json!([response])
            } else {
                response
            };
            let mut r = Reply::json(200, body);
            r.headers.extend(self.hash_header(&hash));
            return r;
        }
        // Calls tagged "req…" get a server request and a notification before the answer.
        let mut messages = Vec::new();
        if tag.as_deref().is_some_and(|t| t.starts_with("req")) {
            messages.push(json!({"jsonrpc":"2.0","id":"srv-ping","method":"ping"}));
            messages.push(json!({"jsonrpc":"2.0","id":"srv-roots","method":"roots/list"}));
            messages.push(json!({"jsonrpc":"2.0","method":"notifications/progress",
                "params":{"progressToken":tag,"progress":1}}));
        }
        messages.push(response);
        self.next_stream += 1;
        let name = format!("s{}", self.next_stream);
        let mut events = vec![(1, String::new())];
        for m in &messages {
            events.push((events.len() as u64 + 1, serde_json::to_string(m).unwrap()));
        }
        self.streams.insert(
            name.clone(),
            StreamLog {
                tag,
                events: events.clone(),
            },
        );
        let mut r = Reply::sse();
        r.headers.extend(self.hash_header(&hash));
        let retry = self
            .cfg
            .retry_ms
            .map(|ms| format!("retry: {ms}\n"))
            .unwrap_or_default();
        r.chunks
            .push(format!("id: {name}-1\n{retry}data:\n\n").into_bytes());
        // Everything else in one chunk, so "cut after priming" keeps only the first.
        let rest: String = events[1..]
            .iter()
            .map(|(seq, data)| format!("id: {name}-{seq}\ndata: {data}\n\n"))
            .collect();
        r.chunks.push(rest.into_bytes());
        r
    }

    fn get(&mut self, sid: Option<String>, last_event_id: Option<String>, fault: Fault) -> Reply {
        let hash = self.current().map(|s| s.hash.clone()).unwrap_or_default();
        if !self.alive(sid.as_deref()) {
            return Reply::json(
                404,
                json!({"jsonrpc":"2.0","id":null,
                "error":{"code":-32001,"message":"Session not found"}}),
            );
        }
        let Some(lei) = last_event_id else {
            if let Some((status, headers, left @ 1..)) = self.cfg.listen_refusal {
                self.cfg.listen_refusal = Some((status, headers, left - 1));
                return status_reply(status, headers);
            }
            if !self.cfg.listen {
                return Reply::status(if self.cfg.listen_404 { 404 } else { 405 });
            }
            let mut r = Reply::sse();
            r.headers.extend(self.hash_header(&hash));
            r.finish = None;
            if self.cfg.listen_events > 0 && !self.listen_cut_done {
                self.listen_cut_done = true;
                self.next_stream += 1;
                let name = format!("L{}", self.next_stream);
                let retry = self
                    .cfg
                    .retry_ms
                    .map(|ms| format!("retry: {ms}\n"))
                    .unwrap_or_default();
                let mut events = Vec::new();
                for i in 1..=self.cfg.listen_events {
                    let data = json!({"jsonrpc":"2.0","method":"notifications/message",
                        "params":{"level":"info","data":i}})
                    .to_string();
                    r.chunks
                        .push(format!("id: {name}-{i}\n{retry}data: {data}\n\n").into_bytes());
                    events.push((u64::from(i), data));
                }
                self.streams.insert(name, StreamLog { tag: None, events });
                r.finish = Some(Step::Lost);
            }
            return r;
        };
        let (stream, seq) = lei
            .rsplit_once('-')
            .map(|(s, n)| (s.to_owned(), n.parse::<u64>().unwrap_or(0)))
            .unwrap_or_default();
        match fault {
            Fault::ResumeNotFound => {
                return Reply::json(
                    404,
                    json!({"jsonrpc":"2.0","id":null,
                    "error":{"code":-32001,"message":"Session not found"}}),
                )
            }
            Fault::ResumeRejected(reason) => {
                if let Some(s) = self.sessions.last_mut() {
                    s.alive = false;
                }
                let mut r = Reply::json(
                    404,
                    json!({"jsonrpc":"2.0","id":null,
                    "error":{"code":-32001,"message":"resume rejected",
                    "data":{"code":"SESSION_RESUME_REJECTED","reason":reason}}}),
                );
                if self.cfg.ext {
                    r.headers.push(("mcp-resume-rejected", reason.to_owned()));
                }
                return r;
            }
            Fault::Resume405 => return Reply::status(405),
            Fault::ResumeStatus { status, headers } => return status_reply(status, headers),
            Fault::ResumeRefuse => return Reply::early(Step::Refused),
            _ => {}
        }
        let mut r = Reply::sse();
        let head_hash = if fault == Fault::ResumeHashChanged {
            WRONG_HASH.to_owned()
        } else {
            hash
        };
        r.headers.extend(self.hash_header(&head_hash));
        r.finish = if self.cfg.keep_resumed_open {
            None
        } else {
            Some(Step::End)
        };
        let log = self.streams.get(&stream).cloned();
        match fault {
            Fault::ResumeNaiveCleanEnd => {
                r.finish = Some(Step::End);
                return r;
            }
            Fault::ResumeCutNoProgress => {
                r.finish = Some(Step::Lost);
                return r;
            }
            Fault::ResumeGap => {
                r.chunks
                    .push(format!("id: {stream}-{}\ndata:\n\n", seq + 5).into_bytes());
                return r;
            }
            Fault::ResumeOrphan => {
                let data = json!({"jsonrpc":"2.0","id":987654,"result":{"content":[]}});
                r.chunks
                    .push(format!("id: {stream}-{}\ndata: {data}\n\n", seq + 1).into_bytes());
                return r;
            }
            Fault::ResumeProgressThenCut | Fault::ResumeProgressThenEnd => {
                // A new event appended to the stream: real progress.
                let next = log.as_ref().map_or(seq, |l| l.events.len() as u64) + 1;
                let token = log.as_ref().and_then(|l| l.tag.clone());
                let data = json!({"jsonrpc":"2.0","method":"notifications/progress",
                    "params":{"progressToken":token,"progress":next}});
                if let Some(l) = self.streams.get_mut(&stream) {
                    l.events.insert(l.events.len() - 1, (0, data.to_string()));
                    for (i, e) in l.events.iter_mut().enumerate() {
                        e.0 = i as u64 + 1;
                    }
                }
                r.chunks
                    .push(format!("id: {stream}-{}\ndata: {data}\n\n", seq + 1).into_bytes());
                r.finish = Some(if fault == Fault::ResumeProgressThenCut {
                    Step::Lost
                } else {
                    Step::End
                });
                return r;
            }
            _ => {}
        }
        if let Some(log) = log {
            for (s, data) in log.events.iter().filter(|(s, _)| *s > seq) {
                r.chunks
                    .push(format!("id: {stream}-{s}\ndata: {data}\n\n").into_bytes());
            }
        }
        r
    }
}

#[derive(Debug)]
enum Delivery {
    Head(u16, HeaderMap),
    Data(Vec<u8>),
    End,
    Error(TransportFailure),
}

/// Session + server + virtual time.
pub(crate) struct Sim {
    pub session: Session,
    pub server: Server,
    pub base: Instant,
    pub now: Instant,
    pub seed: u64,
    queue: BTreeMap<(Instant, u64), (HttpId, Delivery)>,
    seq: u64,
    /// Network latency of every delivery.
    pub latency: Duration,
    pub outputs: Vec<(Duration, Output)>,
    pub completions: HashMap<CallId, Vec<Result<Value, Error>>>,
    pub aborted: Vec<HttpId>,
    /// Exchanges whose end (or error) was delivered: the session owes them no abort.
    pub finished: Vec<HttpId>,
    pub sent: Vec<(Duration, HttpRequest)>,
    pub steps: u64,
}

impl Sim {
    pub(crate) fn new(mut config: SessionConfig, server: ServerConfig, seed: u64) -> Self {
        config.jitter_seed = seed;
        let base = Instant::now();
        Sim {
            session: Session::new(config, base),
            server: Server::new(server),
            base,
            now: base,
            seed,
            queue: BTreeMap::new(),
            seq: 0,
            latency: Duration::from_millis(1),
            outputs: Vec::new(),
            completions: HashMap::new(),
            aborted: Vec::new(),
            finished: Vec::new(),
            sent: Vec::new(),
            steps: 0,
        }
    }

    pub(crate) fn elapsed(&self) -> Duration {
        self.now - self.base
    }

    pub(crate) fn connect(&mut self) -> CallId {
        let id = self.session.connect(self.now);
        self.pump();
        id
    }

    pub(crate) fn call(&mut self, tag: &str, key: Option<&str>) -> CallId {
        self.call_with(tag, key, None)
    }

    pub(crate) fn call_with(
        &mut self,
        tag: &str,
        key: Option<&str>,
        timeout: Option<Duration>,
    ) -> CallId {
        // The tag doubles as the progress token: the server's progress names the call.
        let mut request = CallRequest::tool_call(
            json!({"name": "echo", "arguments": {"tag": tag}, "_meta": {"progressToken": tag}}),
            key.map(|k| IdempotencyKey::new(k).unwrap()),
        );
        if let Some(timeout) = timeout {
            request = request.with_timeout(timeout);
        }
        let id = CallId::next();
        self.session.submit(id, request, self.now);
        self.pump();
        id
    }

    pub(crate) fn close(&mut self) -> CallId {
        let id = self.session.close(self.now);
        self.pump();
        id
    }

    fn schedule(&mut self, at: Instant, http: HttpId, d: Delivery) {
        self.seq += 1;
        self.queue.insert((at, self.seq), (http, d));
    }

    /// Drains the session's transmits and outputs.
    pub(crate) fn pump(&mut self) {
        loop {
            let mut progressed = false;
            while let Some(t) = self.session.poll_transmit() {
                progressed = true;
                match t {
                    Transmit::Send(req) => {
                        let at = self.elapsed();
                        let reply = self.server.handle(&req, at);
                        self.sent.push((at, req.clone()));
                        self.enqueue(req.id, reply);
                    }
                    Transmit::Abort(http) => {
                        assert!(
                            !self.finished.contains(&http),
                            "abort of {http:?} after its end was delivered"
                        );
                        assert!(!self.aborted.contains(&http), "{http:?} aborted twice");
                        self.aborted.push(http);
                        self.queue.retain(|_, (h, _)| *h != http);
                    }
                    other => panic!("a transmit this simulator does not know: {other:?}"),
                }
            }
            while let Some(o) = self.session.poll_output() {
                progressed = true;
                if let Output::Completed { call, result } = &o {
                    self.completions
                        .entry(*call)
                        .or_default()
                        .push(result.clone());
                }
                self.outputs.push((self.elapsed(), o));
            }
            if !progressed {
                break;
            }
        }
    }

    fn enqueue(&mut self, http: HttpId, reply: Reply) {
        let mut t = self.now + self.latency + reply.delay;
        match reply.early {
            Some(Step::Refused) => {
                return self.schedule(
                    t,
                    http,
                    Delivery::Error(TransportFailure::Connect("refused".into())),
                )
            }
            Some(_) => {
                return self.schedule(
                    t,
                    http,
                    Delivery::Error(TransportFailure::Lost("reset".into())),
                )
            }
            None => {}
        }
        let mut headers = HeaderMap::new();
        for (n, v) in &reply.headers {
            headers.append(
                HeaderName::from_static(n),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        self.schedule(t, http, Delivery::Head(reply.status, headers));
        for chunk in reply.chunks {
            t += self.latency;
            self.schedule(t, http, Delivery::Data(chunk));
        }
        t += self.latency;
        match reply.finish {
            Some(Step::End) => self.schedule(t, http, Delivery::End),
            Some(_) => self.schedule(
                t,
                http,
                Delivery::Error(TransportFailure::Lost("cut".into())),
            ),
            None => {}
        }
    }

    /// Runs until nothing is scheduled before `limit` (virtual time from the start).
    pub(crate) fn run_for(&mut self, limit: Duration) {
        let end = self.base + limit;
        loop {
            self.pump();
            self.steps += 1;
            assert!(self.steps < 1_000_000, "simulation does not settle");
            let next_delivery = self.queue.keys().next().map(|(t, _)| *t);
            let next_timer = self.session.poll_timeout();
            let next = match (next_delivery, next_timer) {
                (Some(a), Some(b)) => a.min(b),
                (Some(a), None) => a,
                (None, Some(b)) => b,
                (None, None) => return,
            };
            if next > end {
                self.now = end;
                return;
            }
            self.now = self.now.max(next);
            if next_delivery.is_some_and(|d| d <= self.now) {
                let key = *self.queue.keys().next().unwrap();
                let (http, d) = self.queue.remove(&key).unwrap();
                match d {
                    Delivery::Head(s, h) => self.session.handle_head(http, s, &h, self.now),
                    Delivery::Data(b) => self.session.handle_data(http, &b, self.now),
                    Delivery::End => {
                        self.finished.push(http);
                        self.session.handle_end(http, self.now)
                    }
                    Delivery::Error(f) => {
                        self.finished.push(http);
                        self.session.handle_error(http, f, self.now)
                    }
                }
            } else {
                self.session.handle_timeout(self.now);
            }
        }
    }

    /// Runs until `call` completed (or virtual `limit` passed).
    pub(crate) fn run_until_complete(&mut self, call: CallId, limit: Duration) {
        let end = self.elapsed() + limit;
        while !self.completions.contains_key(&call) && self.elapsed() < end {
            let before = (self.now, self.steps);
            self.run_for(self.elapsed() + Duration::from_millis(10));
            if (self.now, self.steps) == before {
                break;
            }
        }
    }

    /// Lets follow-up work (re-initialization, reopened streams) finish.
    pub(crate) fn settle(&mut self) {
        self.run_for(self.elapsed() + Duration::from_secs(2));
    }

    pub(crate) fn result(&self, call: CallId) -> &Result<Value, Error> {
        let r = self
            .completions
            .get(&call)
            .unwrap_or_else(|| panic!("call {call:?} did not complete"));
        assert_eq!(r.len(), 1, "call {call:?} completed {} times", r.len());
        &r[0]
    }

    pub(crate) fn events(&self) -> Vec<SessionEvent> {
        self.outputs
            .iter()
            .filter_map(|(_, o)| match o {
                Output::Event(e) => Some(e.clone()),
                _ => None,
            })
            .collect()
    }
}

/// A refusal: `status`, `headers`, and a JSON-RPC error body (the extension's rejection body
/// when the headers carry its marker).
fn status_reply(status: u16, headers: &[(&'static str, &'static str)]) -> Reply {
    let rejected = headers
        .iter()
        .find(|(name, _)| *name == "mcp-resume-rejected")
        .map(|(_, reason)| *reason);
    let data = match rejected {
        Some(reason) => json!({"code": "SESSION_RESUME_REJECTED", "reason": reason}),
        None => Value::Null,
    };
    let mut r = Reply::json(
        status,
        json!({"jsonrpc": "2.0", "id": null,
            "error": {"code": -32000, "message": "refused", "data": data}}),
    );
    r.headers.extend(
        headers
            .iter()
            .map(|(name, value)| (*name, (*value).to_owned())),
    );
    r
}
