//! Checkpoints and pick-ups in the sans-IO core: a "process" (a `Session` and the checkpoints
//! it reported) dies with calls in flight, and a new one picks them up from those checkpoints
//! alone, against a scripted stateless server (2026-07-28) that keeps the truth: what ran,
//! how many times, and what each request carried.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use http::HeaderMap;
use mcp_resume::ids::IdempotencyKey;
use mcp_resume::proto::{
    CallId, CallRequest, CallStage, Checkpoint, Era, HttpId, HttpMethod, HttpRequest, Output,
    ServerRequest, Session, SessionConfig, SessionEvent, Transmit,
};
use mcp_resume::{Error, ErrorKind, LedgerEntry};
use serde_json::{json, Value};

const MODERN: &str = "2026-07-28";
const KEY_META: &str = "io.github.mcp-resume/idempotency-key";

/// The scripted stateless server. Tools: `act` (a side effect, deduplicated by key when
/// `dedups`), `ask` (MRTR: asks one input, then runs), `job` (a task, completed when
/// polled). A tag in `hold` is answered never: the request reached the server and ran, the
/// answer is lost with the process.
#[derive(Default)]
struct Server {
    dedups: bool,
    hold: Vec<String>,
    /// Polls reach the server and are never answered.
    hold_polls: bool,
    /// Side effects run, per tag.
    runs: HashMap<String, u32>,
    /// `tools/call` POSTs received, per tag, with their params.
    posts: HashMap<String, Vec<Value>>,
    /// `tasks/get` polls received, per task id.
    polls: HashMap<String, u32>,
    stored: HashMap<String, Value>,
    /// The next `tools/call` POST of a tag is refused with this status and a JSON-RPC error
    /// body, before anything runs (no Retry-After: a refusal that proves it never ran).
    refuse: HashMap<String, u16>,
}

enum Reply {
    Json(Value),
    /// Another status than 200, with a JSON-RPC error body.
    Status(u16, Value),
    Silence,
}

impl Server {
    fn handle(&mut self, req: &HttpRequest) -> Reply {
        assert_eq!(req.method, HttpMethod::Post, "only POSTs in this era");
        let body: Value = serde_json::from_slice(req.body.as_deref().unwrap()).unwrap();
        let id = body["id"].clone();
        let ok = |result: Value| Reply::Json(json!({"jsonrpc": "2.0", "id": id, "result": result}));
        let params = &body["params"];
        match body["method"].as_str().unwrap_or_default() {
            "server/discover" => {
                let mut caps = json!({"tools": {}});
                if self.dedups {
                    caps["extensions"] =
                        json!({"io.github.mcp-resume/resume-safety": {"idempotency": {}}});
                }
                ok(
                    json!({"resultType": "complete", "supportedVersions": [MODERN],
                    "capabilities": caps}),
                )
            }
            "tools/list" => ok(json!({"resultType": "complete", "tools": []})),
            "tasks/get" => {
                let task = params["taskId"].as_str().unwrap().to_owned();
                *self.polls.entry(task.clone()).or_default() += 1;
                if self.hold_polls {
                    return Reply::Silence;
                }
                ok(
                    json!({"resultType": "complete", "taskId": task, "status": "completed",
                    "result": {"content": [{"type": "text", "text": format!("done {task}")}]}}),
                )
            }
            "tools/call" => {
                let tag = params["arguments"]["tag"].as_str().unwrap().to_owned();
                self.posts
                    .entry(tag.clone())
                    .or_default()
                    .push(params.clone());
                if let Some(status) = self.refuse.remove(&tag) {
                    return Reply::Status(
                        status,
                        json!({"jsonrpc": "2.0", "id": id,
                            "error": {"code": -32000, "message": "slow down"}}),
                    );
                }
                let key = params["_meta"][KEY_META].as_str().map(str::to_owned);
                if let Some(stored) = key
                    .as_ref()
                    .filter(|_| self.dedups)
                    .and_then(|k| self.stored.get(k))
                {
                    return ok(stored.clone());
                }
                let result = match params["name"].as_str().unwrap() {
                    "ask" if params.get("inputResponses").is_none() => json!({
                        "resultType": "input_required",
                        "inputRequests": {"ok": {"method": "elicitation/create",
                            "params": {"message": "go?"}}},
                        "requestState": format!("state-{tag}"),
                    }),
                    "ask" => {
                        assert_eq!(params["requestState"], format!("state-{tag}"));
                        *self.runs.entry(tag.clone()).or_default() += 1;
                        json!({"resultType": "complete", "content": [{"type": "text",
                            "text": format!("{tag} {}", params["inputResponses"]["ok"])}]})
                    }
                    "job" => {
                        *self.runs.entry(tag.clone()).or_default() += 1;
                        json!({"resultType": "task", "taskId": format!("task-{tag}"),
                            "status": "working", "pollIntervalMs": 10})
                    }
                    _ => {
                        *self.runs.entry(tag.clone()).or_default() += 1;
                        json!({"resultType": "complete",
                            "content": [{"type": "text", "text": tag.clone()}]})
                    }
                };
                if let (Some(k), true) = (&key, self.dedups) {
                    self.stored.insert(k.clone(), result.clone());
                }
                if self.hold.contains(&tag) {
                    return Reply::Silence;
                }
                ok(result)
            }
            other => panic!("unexpected {other}"),
        }
    }
}

/// One process: a session with checkpoints on, the last checkpoint of each call, and what
/// it saw, in order.
struct Process {
    session: Session,
    checkpoints: HashMap<CallId, Checkpoint>,
    completed: HashMap<CallId, Vec<Result<Value, Error>>>,
    requests: Vec<ServerRequest>,
    events: Vec<SessionEvent>,
    /// `tools/call` POSTs sent, with the round its last checkpoint said before it left.
    sends: Vec<(CallId, Option<CallStage>)>,
    transmits: usize,
}

struct World {
    now: Instant,
    server: Server,
    queue: BTreeMap<(Instant, u64), (HttpId, u16, Value)>,
    seq: u64,
}

impl Process {
    fn start(now: Instant, checkpoints: bool) -> Process {
        let config = SessionConfig::default()
            .with_era(Era::Modern)
            .with_open_listen_stream(false)
            .with_call_timeout(Duration::from_secs(30))
            .with_checkpoints(checkpoints);
        Process {
            session: Session::new(config, now),
            checkpoints: HashMap::new(),
            completed: HashMap::new(),
            requests: Vec::new(),
            events: Vec::new(),
            sends: Vec::new(),
            transmits: 0,
        }
    }

    /// Drains the session as a driver that keeps a ledger does: outputs first.
    fn pump(&mut self, world: &mut World) {
        loop {
            let mut progressed = false;
            while let Some(output) = self.session.poll_output() {
                progressed = true;
                match output {
                    Output::Checkpoint { call, checkpoint } => {
                        self.checkpoints.insert(call, *checkpoint);
                    }
                    Output::Completed { call, result } => {
                        self.checkpoints.remove(&call);
                        self.completed.entry(call).or_default().push(result);
                    }
                    Output::ServerRequest(request) => self.requests.push(request),
                    Output::Event(event) => self.events.push(event),
                    _ => {}
                }
            }
            while let Some(transmit) = self.session.poll_transmit() {
                progressed = true;
                let Transmit::Send(req) = transmit else {
                    continue;
                };
                self.transmits += 1;
                if let Some(call) = self.session.exchange_call(req.id) {
                    let body: Value = serde_json::from_slice(req.body.as_deref().unwrap()).unwrap();
                    if body["method"] == "tools/call" {
                        let stage = self.checkpoints.get(&call).map(|c| c.stage.clone());
                        self.sends.push((call, stage));
                    }
                }
                let (status, answer) = match world.server.handle(&req) {
                    Reply::Json(answer) => (200, answer),
                    Reply::Status(status, answer) => (status, answer),
                    Reply::Silence => continue,
                };
                world.seq += 1;
                let at = world.now + Duration::from_millis(1);
                world
                    .queue
                    .insert((at, world.seq), (req.id, status, answer));
            }
            if !progressed {
                break;
            }
        }
    }

    /// Runs until nothing is left to happen but calls' deadlines.
    fn run(&mut self, world: &mut World) {
        loop {
            self.pump(world);
            let io = world.queue.keys().next().map(|(t, _)| *t);
            let timer = self.session.poll_timeout();
            let Some(next) = [io, timer].into_iter().flatten().min() else {
                return;
            };
            if io.is_none() && next > world.now + Duration::from_secs(5) {
                return;
            }
            world.now = world.now.max(next);
            if io == Some(next) {
                let key = *world.queue.keys().next().unwrap();
                let (http, status, answer) = world.queue.remove(&key).unwrap();
                let mut head = HeaderMap::new();
                head.insert("content-type", "application/json".parse().unwrap());
                self.session.handle_head(http, status, &head, world.now);
                self.session
                    .handle_data(http, &serde_json::to_vec(&answer).unwrap(), world.now);
                self.session.handle_end(http, world.now);
            } else {
                self.session.handle_timeout(world.now);
            }
        }
    }

    /// Answers every server request asked so far.
    fn answer_inputs(&mut self, world: &mut World) {
        for request in std::mem::take(&mut self.requests) {
            let answer = json!({"action": "accept", "content": {"go": true}});
            self.session.respond(request.id, Ok(answer), world.now);
        }
    }

    fn result(&self, call: CallId) -> &Result<Value, Error> {
        let results = self
            .completed
            .get(&call)
            .unwrap_or_else(|| panic!("{call:?} did not complete"));
        assert_eq!(
            results.len(),
            1,
            "{call:?} completed {} times",
            results.len()
        );
        &results[0]
    }

    /// The process dies: what survives is its last checkpoint of each call in flight.
    fn die(self, world: &mut World) -> Vec<Checkpoint> {
        world.queue.clear();
        let mut left: Vec<(CallId, Checkpoint)> = self.checkpoints.into_iter().collect();
        left.sort_by_key(|(id, _)| *id);
        left.into_iter().map(|(_, c)| c).collect()
    }
}

fn world(dedups: bool, hold: &[&str]) -> World {
    World {
        now: Instant::now(),
        server: Server {
            dedups,
            hold: hold.iter().map(|t| t.to_string()).collect(),
            ..Server::default()
        },
        queue: BTreeMap::new(),
        seq: 0,
    }
}

fn call(p: &mut Process, w: &mut World, tool: &str, tag: &str, key: Option<&str>) -> CallId {
    let id = CallId::next();
    let request = CallRequest::tool_call(
        json!({"name": tool, "arguments": {"tag": tag}}),
        key.map(|k| IdempotencyKey::new(k).unwrap()),
    );
    p.session.submit(id, request, w.now);
    p.pump(w);
    id
}

/// A new process picks up every checkpoint the dead one left; returns the new ids.
/// Picks `recorded` up in `next` and checks it ends `OutcomeUnknown` (may have run, the event
/// emitted) without a request: nothing transmitted, no POST tagged `tag` at the server.
fn reported_never_sent(next: &mut Process, w: &mut World, recorded: Checkpoint, tag: &str) {
    let ids = pick_up(next, w, vec![recorded]);
    next.run(w);
    assert_eq!(next.transmits, 0, "nothing sent");
    assert!(!w.server.posts.contains_key(tag));
    let err = next.result(ids[0]).as_ref().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::OutcomeUnknown, "{err}");
    assert!(err.may_have_run(), "{err}");
    assert!(next.events.iter().any(|e| matches!(e,
        SessionEvent::OutcomeUnknown { call, .. } if *call == ids[0])));
}

fn pick_up(p: &mut Process, w: &mut World, left: Vec<Checkpoint>) -> Vec<CallId> {
    let ids: Vec<CallId> = left
        .into_iter()
        .map(|mut checkpoint| {
            let id = CallId::next();
            checkpoint.deadline = w.now + Duration::from_secs(30);
            p.session.pick_up(id, checkpoint, w.now);
            id
        })
        .collect();
    p.pump(w);
    ids
}

fn text(result: &Result<Value, Error>) -> String {
    match result {
        Ok(v) => v["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        Err(e) => panic!("failed: {e}"),
    }
}

/// Each request is recorded before it leaves: a POST's last checkpoint, when it is sent, is
/// the stage `Sent` of the round it carries.
#[test]
fn each_request_is_checkpointed_before_it_leaves() {
    let mut w = world(true, &[]);
    let mut p = Process::start(w.now, true);
    let act = call(&mut p, &mut w, "act", "a", Some("k-a"));
    let ask = call(&mut p, &mut w, "ask", "q", None);
    p.run(&mut w);
    p.answer_inputs(&mut w);
    p.run(&mut w);
    assert_eq!(text(p.result(act)), "a");
    assert!(text(p.result(ask)).starts_with("q "));
    let rounds: Vec<(CallId, Option<CallStage>)> = p.sends.clone();
    assert_eq!(
        rounds,
        [
            (act, Some(CallStage::Sent { round: 0 })),
            (ask, Some(CallStage::Sent { round: 0 })),
            (ask, Some(CallStage::Sent { round: 1 })),
        ]
    );
    assert!(p.checkpoints.is_empty(), "ended calls keep no checkpoint");
}

/// Read-only methods get none; without `checkpoints` nothing at all is reported.
#[test]
fn reads_and_unconfigured_sessions_report_no_checkpoints() {
    let mut w = world(true, &[]);
    let mut p = Process::start(w.now, true);
    let id = CallId::next();
    p.session
        .submit(id, CallRequest::new("tools/list", Some(json!({}))), w.now);
    p.run(&mut w);
    assert!(p.result(id).is_ok());
    assert!(p.session.checkpoint(id).is_none());
    let mut off = Process::start(w.now, false);
    let act = call(&mut off, &mut w, "act", "a", Some("k"));
    assert!(off.checkpoints.is_empty());
    assert!(
        off.session.checkpoint(act).is_some(),
        "the accessor still answers"
    );
    off.run(&mut w);
    assert!(off.checkpoints.is_empty());
}

/// A keyed call in flight when its process died is re-sent under its own key by the next
/// one, reported as re-dispatched; the server's deduplication makes it run once.
#[test]
fn a_keyed_call_is_re_sent_under_its_key_and_runs_once() {
    let mut w = world(true, &["a"]);
    let mut p = Process::start(w.now, true);
    call(&mut p, &mut w, "act", "a", Some("k-a"));
    p.run(&mut w);
    let left = p.die(&mut w);
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].stage, CallStage::Sent { round: 0 });
    w.server.hold.clear();
    let mut next = Process::start(w.now, true);
    let ids = pick_up(&mut next, &mut w, left);
    next.run(&mut w);
    assert_eq!(text(next.result(ids[0])), "a");
    assert_eq!(w.server.runs["a"], 1, "the side effect ran once");
    let posts = &w.server.posts["a"];
    assert_eq!(posts.len(), 2);
    assert!(posts.iter().all(|p| p["_meta"][KEY_META] == "k-a"));
    assert!(next.events.iter().any(|e| matches!(e,
        SessionEvent::Redispatched { call, idempotency_key: Some(k), .. }
            if *call == ids[0] && k.as_str() == "k-a")));
}

/// A picked-up keyed call whose re-send is refused unprocessed with a JSON-RPC error (a 429
/// without Retry-After) was still perhaps run by the process that died: its error says so,
/// or the app would run it again under a new key.
#[test]
fn a_picked_up_call_whose_re_send_is_refused_may_still_have_run() {
    let mut w = world(true, &["a"]);
    let mut p = Process::start(w.now, true);
    call(&mut p, &mut w, "act", "a", Some("k-a"));
    p.run(&mut w);
    let left = p.die(&mut w);
    w.server.hold.clear();
    w.server.refuse.insert("a".into(), 429);
    let mut next = Process::start(w.now, true);
    let ids = pick_up(&mut next, &mut w, left);
    next.run(&mut w);
    let err = next.result(ids[0]).as_ref().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Rpc, "{err}");
    assert!(err.may_have_run(), "{err}");
    assert_eq!(w.server.posts["a"].len(), 2);

    // Sent once, and refused so: it never ran.
    w.server.refuse.insert("b".into(), 429);
    let b = call(&mut next, &mut w, "act", "b", Some("k-b"));
    next.run(&mut w);
    let err = next.result(b).as_ref().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Rpc, "{err}");
    assert!(!err.may_have_run(), "{err}");
    assert_eq!(w.server.posts["b"].len(), 1);
}

/// A call an older release recorded under an app key ending in `.round<n>` (reserved since)
/// is never re-sent under it: a deduplicating server could take it for a round of another
/// call and answer with that round's result. It is reported `OutcomeUnknown`, as it may have
/// run, without a request.
#[test]
fn a_call_recorded_under_a_reserved_key_is_reported_never_re_sent() {
    let mut w = world(true, &[]);
    let mut next = Process::start(w.now, true);
    let recorded = Checkpoint::new(
        "tools/call",
        Some(json!({"name": "act", "arguments": {"tag": "r"}})),
        w.now + Duration::from_secs(30),
    )
    .with_idempotency_key(IdempotencyKey::new("k.round1").ok())
    .with_stage(CallStage::Sent { round: 0 })
    .with_server_dedups(true);
    reported_never_sent(&mut next, &mut w, recorded, "r");
}

/// A call an earlier release recorded under a key with a space at an edge (refused since:
/// HTTP strips it from the header, so the key reaches a server as two keys) is read back
/// from its entry and reported `OutcomeUnknown` at once, as it may have run, without a
/// request: a re-send could not be deduplicated against the run it may have had.
#[test]
fn a_call_recorded_under_a_key_with_edge_whitespace_is_reported_never_re_sent() {
    let params = json!({"name": "act", "arguments": {"tag": "e"}, "_meta": {(KEY_META): "k "}});
    let digest = params
        .to_string()
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        });
    let stored = json!({
        "v": 1,
        "id": "entry-e",
        "endpoint": "http://127.0.0.1:9/mcp",
        "method": "tools/call",
        "digest": format!("fnv1a64:{digest:016x}"),
        "params": params,
        "stage": "sent",
        "round": 0,
        "key": "k ",
        "serverDedups": true,
        "deadlineMs": 4_000_000_000_000_u64,
        "expiresMs": 4_000_000_000_000_u64,
    });
    let entry = LedgerEntry::from_json(&stored).expect("an earlier release's entry is read");
    let mut w = world(true, &[]);
    let mut next = Process::start(w.now, true);
    let recorded = Checkpoint::new("tools/call", entry.params().cloned(), w.now)
        .with_idempotency_key(entry.idempotency_key().cloned())
        .with_stage(entry.stage().clone())
        .with_server_dedups(true);
    reported_never_sent(&mut next, &mut w, recorded, "e");
}

/// An unkeyed call is never re-sent: the next process reports it `OutcomeUnknown` at once,
/// without a single request; so is a keyed one when the server does not deduplicate keys,
/// once the session says so.
#[test]
fn a_call_without_a_key_the_server_honours_is_reported_never_re_sent() {
    let mut w = world(false, &["u", "k"]);
    let mut p = Process::start(w.now, true);
    call(&mut p, &mut w, "act", "u", None);
    call(&mut p, &mut w, "act", "k", Some("k-k"));
    p.run(&mut w);
    let left = p.die(&mut w);
    let mut next = Process::start(w.now, true);
    let unkeyed = pick_up(&mut next, &mut w, left[..1].to_vec());
    assert_eq!(next.transmits, 0, "nothing sent for an unkeyed call");
    let err = next.result(unkeyed[0]).as_ref().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::OutcomeUnknown, "{err}");
    assert!(next.events.iter().any(|e| matches!(e,
        SessionEvent::OutcomeUnknown { call, method } if *call == unkeyed[0] && method == "tools/call")));
    let keyed = pick_up(&mut next, &mut w, left[1..].to_vec());
    next.run(&mut w);
    let err = next.result(keyed[0]).as_ref().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::OutcomeUnknown, "{err}");
    assert_eq!(w.server.posts["u"].len(), 1);
    assert_eq!(
        w.server.posts["k"].len(),
        1,
        "its key protects nothing here"
    );
}

/// A keyed call sent to a server that ignored its key may have run there unrecorded: the
/// next process reports it `OutcomeUnknown` without a request, even when the server it
/// finds deduplicates keys now (a guard rolled out meanwhile would run it a second time).
#[test]
fn a_keyed_call_sent_where_keys_were_ignored_is_not_re_sent_where_they_count() {
    let mut w = world(false, &["a"]);
    let mut p = Process::start(w.now, true);
    call(&mut p, &mut w, "act", "a", Some("k-a"));
    p.run(&mut w);
    let left = p.die(&mut w);
    w.server.dedups = true;
    w.server.hold.clear();
    let mut next = Process::start(w.now, true);
    let ids = pick_up(&mut next, &mut w, left);
    next.run(&mut w);
    let err = next.result(ids[0]).as_ref().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::OutcomeUnknown, "{err}");
    assert_eq!(w.server.runs["a"], 1, "the side effect ran once");
    assert_eq!(w.server.posts["a"].len(), 1, "not sent again");
}

/// A round awaiting the application's answers was never sent: the next process asks its own
/// handlers and sends it, unkeyed as it is, with the server's state echoed; it runs once.
#[test]
fn a_round_awaiting_input_is_continued_by_the_next_process() {
    let mut w = world(false, &[]);
    let mut p = Process::start(w.now, true);
    call(&mut p, &mut w, "ask", "q", None);
    p.run(&mut w);
    assert_eq!(p.requests.len(), 1, "the input was asked");
    let left = p.die(&mut w);
    let CallStage::AwaitingInput {
        round,
        request_state,
        input_requests,
    } = &left[0].stage
    else {
        panic!("{:?}", left[0].stage);
    };
    assert_eq!(*round, 1);
    assert_eq!(request_state.as_deref(), Some("state-q"));
    assert!(input_requests.contains_key("ok"));
    let mut next = Process::start(w.now, true);
    let ids = pick_up(&mut next, &mut w, left);
    next.run(&mut w);
    assert_eq!(next.requests.len(), 1, "asked again");
    assert_eq!(next.requests[0].method, "elicitation/create");
    next.answer_inputs(&mut w);
    next.run(&mut w);
    assert!(text(next.result(ids[0])).starts_with("q "));
    assert_eq!(w.server.runs["q"], 1);
    let last = w.server.posts["q"].last().unwrap().clone();
    assert_eq!(last["requestState"], "state-q");
    assert_eq!(last["inputResponses"]["ok"]["action"], "accept");
    assert_eq!(
        w.server.posts["q"].len(),
        2,
        "the first request and the round"
    );
}

/// A keyed MRTR round in flight when the process died is re-sent under the round's own key
/// (derived from the call's), with its answers and state: it runs once.
#[test]
fn a_keyed_round_in_flight_is_re_sent_under_the_rounds_key() {
    let mut w = world(true, &[]);
    let mut p = Process::start(w.now, true);
    call(&mut p, &mut w, "ask", "q", Some("k-q"));
    p.run(&mut w);
    w.server.hold.push("q".into());
    p.answer_inputs(&mut w);
    p.run(&mut w);
    let left = p.die(&mut w);
    assert_eq!(left[0].stage, CallStage::Sent { round: 1 });
    assert_eq!(left[0].idempotency_key.as_ref().unwrap().as_str(), "k-q");
    w.server.hold.clear();
    let mut next = Process::start(w.now, true);
    let ids = pick_up(&mut next, &mut w, left);
    next.run(&mut w);
    assert!(text(next.result(ids[0])).starts_with("q "));
    assert!(next.requests.is_empty(), "nothing asked again");
    assert_eq!(w.server.runs["q"], 1, "the round ran once");
    let posts = &w.server.posts["q"];
    assert_eq!(posts.len(), 3);
    assert_eq!(posts[1]["_meta"][KEY_META], "k-q.round1");
    assert_eq!(posts[2]["_meta"][KEY_META], "k-q.round1");
    assert_eq!(posts[2]["requestState"], "state-q");
}

/// A task is polled by the next process; the call that made it is not sent again.
#[test]
fn a_task_is_polled_by_the_next_process() {
    let mut w = world(false, &[]);
    let mut p = Process::start(w.now, true);
    w.server.hold_polls = true;
    call(&mut p, &mut w, "job", "j", None);
    p.run(&mut w);
    let left = p.die(&mut w);
    assert_eq!(
        left[0].stage,
        CallStage::Task {
            task_id: "task-j".into()
        }
    );
    w.server.hold_polls = false;
    let mut next = Process::start(w.now, true);
    let ids = pick_up(&mut next, &mut w, left);
    next.run(&mut w);
    assert_eq!(text(next.result(ids[0])), "done task-j");
    assert_eq!(w.server.posts["j"].len(), 1, "the call itself not re-sent");
    assert_eq!(w.server.runs["j"], 1);
    assert!(w.server.polls["task-j"] >= 1);
}
