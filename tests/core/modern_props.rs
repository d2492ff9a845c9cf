//! Property tests of the modern era's recovery table: the sans-IO `Session` speaking
//! 2026-07-28 to a scripted stateless server in virtual time, under random fault schedules
//! (connections refused or lost, streams cut after the side effect ran, header mismatches,
//! version refusals, slow answers). The invariants are the section 4 ones that apply without
//! sessions: every call completes exactly once; no unkeyed call is ever sent twice; a keyed
//! call to a deduplicating server never runs twice; every request carries the request
//! metadata and mirrored headers, and nothing carries a session id; no GET, DELETE or
//! `notifications/cancelled` is ever sent.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use http::HeaderMap;
use mcp_resume::ids::IdempotencyKey;
use mcp_resume::proto::{
    CallId, CallRequest, Checkpoint, Era, HttpId, HttpMethod, HttpRequest, Output, Session,
    SessionConfig, Transmit, TransportFailure,
};
use proptest::prelude::*;
use serde_json::{json, Value};

const MODERN: &str = "2026-07-28";
const KEY_META: &str = "io.github.mcp-resume/idempotency-key";

/// What the server does to one `tools/call` request (consumed in order; then it behaves).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// Connection refused: nothing reaches the server.
    Refuse,
    /// The connection breaks before the head; `executed`: the side effect ran first.
    LoseBeforeHead { executed: bool },
    /// The side effect runs; the stream sends a progress event, then breaks.
    CutAfterEvent,
    /// 400 -32020: the headers do not match; nothing runs.
    Mismatch,
    /// 400 -32022 listing the version asked for; nothing runs.
    VersionRefused,
    /// 503 without `Retry-After`: the side effect may or may not run (it does here).
    ServerError,
}

fn fault() -> impl Strategy<Value = Fault> {
    prop_oneof![
        Just(Fault::Refuse),
        any::<bool>().prop_map(|executed| Fault::LoseBeforeHead { executed }),
        Just(Fault::CutAfterEvent),
        Just(Fault::Mismatch),
        Just(Fault::VersionRefused),
        Just(Fault::ServerError),
    ]
}

#[derive(Debug, Clone)]
struct CallPlan {
    keyed: bool,
    start_ms: u64,
    faults: Vec<Fault>,
}

#[derive(Debug, Clone)]
struct Plan {
    /// The server advertises idempotency (and deduplicates keyed calls).
    dedups: bool,
    sse: bool,
    calls: Vec<CallPlan>,
}

fn plan() -> impl Strategy<Value = Plan> {
    let call = (
        any::<bool>(),
        0u64..300,
        prop::collection::vec(fault(), 0..4),
    )
        .prop_map(|(keyed, start_ms, faults)| CallPlan {
            keyed,
            start_ms,
            faults,
        });
    (
        any::<bool>(),
        any::<bool>(),
        prop::collection::vec(call, 1..6),
    )
        .prop_map(|(dedups, sse, calls)| Plan { dedups, sse, calls })
}

/// The scripted stateless server.
struct Server {
    dedups: bool,
    sse: bool,
    faults: HashMap<String, Vec<Fault>>,
    /// Side effects run, per call tag.
    runs: HashMap<String, u32>,
    /// Stored results by idempotency key.
    stored: HashMap<String, Value>,
    /// `tools/call` POSTs that reached the server, per tag.
    posts: HashMap<String, u32>,
    violations: Vec<String>,
}

/// What the driver reports back for one exchange.
enum Reply {
    Refused,
    Lost,
    Answer {
        status: u16,
        content_type: &'static str,
        body: Vec<u8>,
        cut: bool,
    },
}

impl Server {
    fn handle(&mut self, req: &HttpRequest) -> Reply {
        if req.method != HttpMethod::Post {
            self.violations.push(format!("{:?} sent", req.method));
            return Reply::Answer {
                status: 405,
                content_type: "text/plain",
                body: Vec::new(),
                cut: false,
            };
        }
        let body: Value = serde_json::from_slice(req.body.as_deref().unwrap_or(b"{}")).unwrap();
        let method = body["method"].as_str().unwrap_or_default().to_owned();
        let params = &body["params"];
        let header = |name: &str| req.headers.get(name).and_then(|v| v.to_str().ok());
        if method.starts_with("notifications/") {
            self.violations.push(format!("notification {method} sent"));
        }
        if header("mcp-session-id").is_some() {
            self.violations.push("a session id was sent".into());
        }
        if header("mcp-protocol-version") != Some(MODERN)
            || params["_meta"]["io.modelcontextprotocol/protocolVersion"] != MODERN
            || header("mcp-method") != Some(method.as_str())
        {
            self.violations
                .push(format!("{method} without the request metadata"));
        }
        let id = body["id"].clone();
        let ok = |result: Value| {
            serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": id, "result": result})).unwrap()
        };
        match method.as_str() {
            "server/discover" => {
                let mut caps = json!({"tools": {}});
                if self.dedups {
                    caps["extensions"] =
                        json!({"io.github.mcp-resume/resume-safety": {"idempotency": {}}});
                }
                return Reply::Answer {
                    status: 200,
                    content_type: "application/json",
                    body: ok(
                        json!({"resultType": "complete", "supportedVersions": [MODERN],
                        "capabilities": caps}),
                    ),
                    cut: false,
                };
            }
            "tools/list" => {
                return Reply::Answer {
                    status: 200,
                    content_type: "application/json",
                    body: ok(json!({"resultType": "complete", "tools": [{"name": "act",
                        "inputSchema": {"type": "object"}}]})),
                    cut: false,
                }
            }
            "tools/call" => {}
            other => {
                self.violations.push(format!("unexpected {other}"));
                return Reply::Lost;
            }
        }
        if header("mcp-name") != Some("act") {
            self.violations.push("tools/call without Mcp-Name".into());
        }
        let tag = params["arguments"]["tag"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let key = params["_meta"][KEY_META].as_str().map(str::to_owned);
        let fault = self.faults.get_mut(&tag).and_then(|f| {
            if f.is_empty() {
                None
            } else {
                Some(f.remove(0))
            }
        });
        if fault == Some(Fault::Refuse) {
            return Reply::Refused;
        }
        *self.posts.entry(tag.clone()).or_default() += 1;
        let error = |code: i64| {
            serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": id, "error": {"code": code,
                "message": "refused", "data": {"supported": [MODERN]}}}))
            .unwrap()
        };
        match fault {
            Some(Fault::Mismatch) => {
                return Reply::Answer {
                    status: 400,
                    content_type: "application/json",
                    body: error(-32020),
                    cut: false,
                }
            }
            Some(Fault::VersionRefused) => {
                return Reply::Answer {
                    status: 400,
                    content_type: "application/json",
                    body: error(-32022),
                    cut: false,
                }
            }
            Some(Fault::LoseBeforeHead { executed: false }) => return Reply::Lost,
            _ => {}
        }
        // The side effect, deduplicated by key when the server says it does.
        let result = match key
            .as_ref()
            .and_then(|k| self.stored.get(k))
            .filter(|_| self.dedups)
        {
            Some(stored) => stored.clone(),
            None => {
                *self.runs.entry(tag.clone()).or_default() += 1;
                let result = json!({"resultType": "complete",
                    "content": [{"type": "text", "text": tag}]});
                if let (Some(k), true) = (&key, self.dedups) {
                    self.stored.insert(k.clone(), result.clone());
                }
                result
            }
        };
        match fault {
            Some(Fault::LoseBeforeHead { executed: true }) => Reply::Lost,
            Some(Fault::ServerError) => Reply::Answer {
                status: 503,
                content_type: "text/plain",
                body: b"busy".to_vec(),
                cut: false,
            },
            Some(Fault::CutAfterEvent) => Reply::Answer {
                status: 200,
                content_type: "text/event-stream",
                body: b"data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":1,\"progress\":1}}\n\n".to_vec(),
                cut: true,
            },
            _ if self.sse => Reply::Answer {
                status: 200,
                content_type: "text/event-stream",
                body: format!("data: {}\n\n", String::from_utf8(ok(result)).unwrap()).into_bytes(),
                cut: false,
            },
            _ => Reply::Answer {
                status: 200,
                content_type: "application/json",
                body: ok(result),
                cut: false,
            },
        }
    }
}

enum Step {
    Head(u16, &'static str),
    Data(Vec<u8>),
    End,
    Failed(TransportFailure),
}

/// Runs `plan`; with `crash`, the process dies at that time (its session and everything in
/// flight gone) and a new one picks up the last checkpoint of each call it left.
fn check(plan: &Plan, crash: Option<Duration>) -> Result<(), TestCaseError> {
    let base = Instant::now();
    let mut now = base;
    let config = SessionConfig::default()
        .with_era(Era::Modern)
        .with_open_listen_stream(false)
        .with_call_timeout(Duration::from_secs(30))
        .with_checkpoints(crash.is_some());
    let mut session = Session::new(config.clone(), now);
    let mut crash = crash.map(|at| base + at);
    let mut checkpoints: HashMap<CallId, Checkpoint> = HashMap::new();
    let mut server = Server {
        dedups: plan.dedups,
        sse: plan.sse,
        faults: HashMap::new(),
        runs: HashMap::new(),
        stored: HashMap::new(),
        posts: HashMap::new(),
        violations: Vec::new(),
    };
    let mut queue: BTreeMap<(Instant, u64), (HttpId, Step)> = BTreeMap::new();
    let mut seq = 0u64;
    let mut completed: HashMap<CallId, u32> = HashMap::new();
    let mut ok: HashMap<CallId, String> = HashMap::new();
    let mut tags: HashMap<CallId, (String, bool)> = HashMap::new();
    let mut starts: Vec<(u64, usize)> = plan
        .calls
        .iter()
        .enumerate()
        .map(|(i, c)| (c.start_ms, i))
        .collect();
    starts.sort();
    let mut next_start = 0;
    let latency = Duration::from_millis(1);
    loop {
        // Drain the session.
        while let Some(t) = session.poll_transmit() {
            if let Transmit::Send(req) = t {
                let at = now + latency;
                let mut push = |step: Step, queue: &mut BTreeMap<_, _>| {
                    seq += 1;
                    queue.insert((at, seq), (req.id, step));
                };
                match server.handle(&req) {
                    Reply::Refused => push(
                        Step::Failed(TransportFailure::Connect("refused".into())),
                        &mut queue,
                    ),
                    Reply::Lost => push(
                        Step::Failed(TransportFailure::Lost("lost".into())),
                        &mut queue,
                    ),
                    Reply::Answer {
                        status,
                        content_type,
                        body,
                        cut,
                    } => {
                        push(Step::Head(status, content_type), &mut queue);
                        push(Step::Data(body), &mut queue);
                        push(
                            if cut {
                                Step::Failed(TransportFailure::Lost("cut".into()))
                            } else {
                                Step::End
                            },
                            &mut queue,
                        );
                    }
                }
            }
        }
        while let Some(o) = session.poll_output() {
            match o {
                Output::Checkpoint { call, checkpoint } => {
                    checkpoints.insert(call, *checkpoint);
                }
                Output::Completed { call, result } => {
                    checkpoints.remove(&call);
                    *completed.entry(call).or_default() += 1;
                    if let Ok(v) = result {
                        if let Some(t) = v["content"][0]["text"].as_str() {
                            ok.insert(call, t.to_owned());
                        }
                    }
                }
                Output::ServerRequest(r) => {
                    server
                        .violations
                        .push(format!("server request {} surfaced", r.method));
                }
                _ => {}
            }
        }
        // The process dies: what it sent may have run, what it was told is lost with it. The
        // next one picks up the last checkpoint of each call it left.
        if crash.is_some_and(|at| at <= now) {
            crash = None;
            queue.clear();
            session = Session::new(config.clone(), now);
            let mut left: Vec<(CallId, Checkpoint)> = checkpoints.drain().collect();
            left.sort_by_key(|(id, _)| *id);
            for (old, mut checkpoint) in left {
                let id = CallId::next();
                checkpoint.deadline = now + Duration::from_secs(30);
                let tag = tags[&old].clone();
                tags.insert(id, tag);
                session.pick_up(id, checkpoint, now);
            }
            continue;
        }
        // Start the calls that are due.
        if next_start < starts.len() && starts[next_start].0 <= (now - base).as_millis() as u64 {
            let i = starts[next_start].1;
            next_start += 1;
            let tag = format!("t{i}");
            let c = &plan.calls[i];
            server.faults.insert(tag.clone(), c.faults.clone());
            let key = c
                .keyed
                .then(|| IdempotencyKey::new(format!("key-{i}")).unwrap());
            let id = CallId::next();
            session.submit(
                id,
                CallRequest::tool_call(json!({"name": "act", "arguments": {"tag": tag}}), key),
                now,
            );
            tags.insert(id, (tag, c.keyed));
            continue;
        }
        // Advance virtual time to the next thing that happens.
        let next_io = queue.keys().next().map(|(t, _)| *t);
        let next_timer = session.poll_timeout();
        let next_call = starts
            .get(next_start)
            .map(|(ms, _)| base + Duration::from_millis(*ms));
        let Some(next) = [next_io, next_timer, next_call, crash]
            .into_iter()
            .flatten()
            .min()
        else {
            break;
        };
        if next - base > Duration::from_secs(120) {
            break;
        }
        now = now.max(next);
        if crash == Some(next) {
            continue;
        }
        if next_io == Some(next) {
            let key = *queue.keys().next().unwrap();
            let (http, step) = queue.remove(&key).unwrap();
            match step {
                Step::Head(status, ct) => {
                    let mut h = HeaderMap::new();
                    h.insert("content-type", ct.parse().unwrap());
                    session.handle_head(http, status, &h, now);
                }
                Step::Data(bytes) => session.handle_data(http, &bytes, now),
                Step::End => session.handle_end(http, now),
                Step::Failed(f) => session.handle_error(http, f, now),
            }
        } else if next_timer == Some(next) {
            session.handle_timeout(now);
        }
    }
    prop_assert!(server.violations.is_empty(), "{:?}", server.violations);
    // Every call ends once, in the process that made it or in the one that picked it up;
    // one that never left (it waited for the session when the process died) is not
    // recovered, and the server never saw it.
    let mut ends: HashMap<&str, u32> = HashMap::new();
    for (id, (tag, _)) in &tags {
        *ends.entry(tag.as_str()).or_default() += completed.get(id).copied().unwrap_or(0);
    }
    for (tag, n) in &ends {
        let posts = server.posts.get(*tag).copied().unwrap_or(0);
        prop_assert!(
            *n == 1 || (*n == 0 && posts == 0),
            "{} ended {} times, sent {} times",
            tag,
            n,
            posts
        );
    }
    for (id, (tag, keyed)) in &tags {
        let posts = server.posts.get(tag).copied().unwrap_or(0);
        let runs = server.runs.get(tag).copied().unwrap_or(0);
        if !keyed {
            // Refusals that prove nothing ran (-32020, -32022) may be followed by a send.
            let refusals = plan.calls[tag[1..].parse::<usize>().unwrap()]
                .faults
                .iter()
                .filter(|f| matches!(f, Fault::Mismatch | Fault::VersionRefused))
                .count() as u32;
            prop_assert!(runs <= 1, "unkeyed {} ran {} times", tag, runs);
            prop_assert!(
                posts <= 1 + refusals,
                "unkeyed {} sent {} times",
                tag,
                posts
            );
        } else if plan.dedups {
            prop_assert!(
                runs <= 1,
                "keyed {} ran {} times on a deduplicating server",
                tag,
                runs
            );
        } else {
            prop_assert!(
                runs <= 1,
                "keyed {} ran {} times: its key protects nothing",
                tag,
                runs
            );
        }
        if let Some(text) = ok.get(id) {
            prop_assert_eq!(text, tag, "a result reached the call that sent it");
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("MODERN_PROPS_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(2000),
        failure_persistence: None,
        .. ProptestConfig::default()
    })]

    #[test]
    fn modern_recovery_keeps_the_invariants(plan in plan()) {
        check(&plan, None)?;
    }

    /// The same schedules with the process killed at a random moment and a new one picking
    /// up the checkpoints it left: the invariants hold across both.
    #[test]
    fn modern_recovery_across_a_restart_keeps_the_invariants(
        plan in plan(),
        crash_ms in 0u64..400,
    ) {
        check(&plan, Some(Duration::from_millis(crash_ms)))?;
    }
}
