//! What every hostile case needs: a client aimed at the server, time and memory probes, and
//! the check that the client still works once the server behaves.
#![allow(dead_code)]

use std::future::Future;
use std::time::{Duration, Instant};

use mcp_resume::{Client, ClientBuilder, EraCache, Error, ErrorKind, ReconnectPolicy, ToolCall};
use serde_json::json;

use crate::server::{Reply, Request, Server};

pub(crate) const MIB: usize = 1024 * 1024;
/// Limits small enough that an oversized answer is obvious, large enough for real answers.
pub(crate) const MAX_EVENT: usize = 256 * 1024;
pub(crate) const MAX_BODY: usize = 256 * 1024;

static HEAVY: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Held by the cases that push the most bytes, so they do not compete for the two cores.
pub(crate) async fn heavy() -> tokio::sync::MutexGuard<'static, ()> {
    HEAVY.lock().await
}

pub(crate) fn fast_policy() -> ReconnectPolicy {
    ReconnectPolicy::default()
        .with_initial_delay(Duration::from_millis(10))
        .with_max_delay(Duration::from_millis(50))
        .with_max_attempts(4)
}

/// A client for `server`: 5 s deadline, fast reconnects, no standalone stream, small limits,
/// and an era cache of its own (the process-wide one would carry what one case's server
/// answered to the next server that gets the same port).
pub(crate) fn builder(server: &Server) -> ClientBuilder {
    Client::builder(&server.url)
        .era_cache(EraCache::new())
        .call_timeout(Duration::from_secs(5))
        .reconnect(fast_policy())
        .open_listen_stream(false)
        .max_event_size(MAX_EVENT)
        .max_body_size(MAX_BODY)
        .jitter_seed(11)
}

pub(crate) fn echo(text: &str) -> ToolCall {
    ToolCall::new("echo", json!({ "text": text }))
}

pub(crate) fn tool_calls(r: &Request) -> bool {
    r.is_rpc("tools/call")
}

pub(crate) fn initializes(r: &Request) -> bool {
    r.is_rpc("initialize")
}

/// A request of the handshake, which carries no session id: the era probe
/// (`server/discover`, refused by these legacy servers) or `initialize`.
pub(crate) fn handshake(r: &Request) -> bool {
    r.is_rpc("server/discover") || initializes(r)
}

/// Time and this thread's peak heap growth since [`Probe::start`].
pub(crate) struct Probe {
    started: Instant,
    base: isize,
}

impl Probe {
    pub(crate) fn start() -> Self {
        Probe {
            base: crate::reset_thread_peak(),
            started: Instant::now(),
        }
    }

    pub(crate) fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    pub(crate) fn peak_growth(&self) -> usize {
        (crate::thread_peak() - self.base).max(0) as usize
    }

    /// Panics with `what` when the peak grew beyond `bound`.
    pub(crate) fn assert_memory(&self, what: &str, bound: usize) {
        let grown = self.peak_growth();
        eprintln!(
            "{what}: {:?}, heap peak +{} KiB (bound {} KiB)",
            self.elapsed(),
            grown / 1024,
            bound / 1024
        );
        assert!(
            grown < bound,
            "{what}: heap peak grew by {} KiB, bound {} KiB (process peak {} KiB)",
            grown / 1024,
            bound / 1024,
            crate::process_peak() / 1024
        );
    }
}

/// `fut`, or `Err` naming `what` when it takes longer than `limit`.
pub(crate) async fn within<T>(
    what: &str,
    limit: Duration,
    fut: impl Future<Output = T>,
) -> Result<T, String> {
    tokio::time::timeout(limit, fut)
        .await
        .map_err(|_| format!("{what}: no answer within {limit:?}"))
}

/// Runs a call that must fail within `limit`; returns the error and how long it took.
pub(crate) async fn failing<T: std::fmt::Debug>(
    what: &str,
    limit: Duration,
    fut: impl Future<Output = Result<T, Error>>,
) -> (Error, Duration) {
    let started = Instant::now();
    match within(what, limit, fut).await {
        Ok(Ok(value)) => panic!("{what}: succeeded with {value:?}, expected an error"),
        Ok(Err(err)) => (err, started.elapsed()),
        Err(message) => panic!("{message}"),
    }
}

pub(crate) fn assert_kind(what: &str, err: &Error, kind: ErrorKind) {
    assert_eq!(err.kind(), kind, "{what}: {err}");
}

/// The server turns good; the same client must then ping and call a tool.
pub(crate) async fn assert_usable(what: &str, server: &Server, client: &Client) {
    server.behave();
    let limit = Duration::from_secs(5);
    match within(what, limit, client.ping()).await {
        Ok(Ok(())) => {}
        Ok(Err(err)) => panic!("{what}: client unusable afterwards, ping failed: {err}"),
        Err(message) => panic!("{message} (ping afterwards)"),
    }
    match within(what, limit, client.call_tool(echo("again"))).await {
        Ok(Ok(result)) => assert_eq!(result.text(), "again", "{what}"),
        Ok(Err(err)) => panic!("{what}: client unusable afterwards, call failed: {err}"),
        Err(message) => panic!("{message} (call afterwards)"),
    }
}

/// Failures of a table of sub-cases, reported together.
#[derive(Default)]
pub(crate) struct Failures(Vec<String>);

impl Failures {
    pub(crate) fn check(&mut self, ok: bool, message: impl FnOnce() -> String) {
        if !ok {
            self.0.push(message());
        }
    }

    pub(crate) fn push(&mut self, message: String) {
        self.0.push(message);
    }

    pub(crate) fn finish(self, what: &str) {
        assert!(
            self.0.is_empty(),
            "{what}: {} failure(s):\n  {}",
            self.0.len(),
            self.0.join("\n  ")
        );
    }
}

/// What the call must end with.
pub(crate) enum Expect {
    Err(ErrorKind),
    /// Any of these kinds: where more than one reading of the server's answer is defensible.
    ErrAny(&'static [ErrorKind]),
    /// Success whose text satisfies the check.
    Ok(fn(&str) -> bool),
}

pub(crate) struct Case {
    pub name: &'static str,
    /// The answer to the (first) `tools/call`.
    pub reply: fn(&Request) -> Reply,
    pub expect: Expect,
    /// Deadline of the call.
    pub timeout: Duration,
    /// The call must return within this.
    pub limit: Duration,
    /// And no sooner than this (a deadline that passed early would be a bug too).
    pub at_least: Duration,
    pub memory: usize,
    /// Bound on what the server could write before the client stopped reading.
    pub written: Option<u64>,
}

impl Case {
    pub(crate) fn new(name: &'static str, reply: fn(&Request) -> Reply, expect: Expect) -> Self {
        Case {
            name,
            reply,
            expect,
            timeout: Duration::from_secs(5),
            limit: Duration::from_secs(2),
            at_least: Duration::ZERO,
            memory: 4 * MIB,
            written: None,
        }
    }

    pub(crate) fn written_below(mut self, bytes: u64) -> Self {
        self.written = Some(bytes);
        self
    }

    pub(crate) fn timing(mut self, timeout: Duration, at_least: Duration, limit: Duration) -> Self {
        self.timeout = timeout;
        self.at_least = at_least;
        self.limit = limit;
        self
    }
}

pub(crate) async fn run(case: Case) {
    let Case {
        name,
        reply,
        expect,
        timeout,
        limit,
        at_least,
        memory,
        written,
    } = case;
    let server = Server::start(move |req| {
        if tool_calls(req) {
            reply(req)
        } else {
            Reply::good()
        }
    })
    .await;
    let client = builder(&server).call_timeout(timeout).build().unwrap();
    within(name, limit, client.connect())
        .await
        .unwrap()
        .unwrap();

    let probe = Probe::start();
    let outcome = within(name, limit, client.call_tool(echo("x")))
        .await
        .unwrap_or_else(|message| panic!("{message}; the server saw {:?}", server.labels()));
    let took = probe.elapsed();
    match (&expect, &outcome) {
        (Expect::Err(kind), Err(err)) => assert_kind(name, err, *kind),
        (Expect::Err(kind), Ok(r)) => panic!("{name}: succeeded ({:?}), expected {kind}", r.text()),
        (Expect::ErrAny(kinds), Err(err)) => {
            assert!(
                kinds.contains(&err.kind()),
                "{name}: {err}, expected one of {kinds:?}"
            )
        }
        (Expect::ErrAny(kinds), Ok(r)) => {
            panic!(
                "{name}: succeeded ({:?}), expected one of {kinds:?}",
                r.text()
            )
        }
        (Expect::Ok(check), Ok(r)) => assert!(check(&r.text()), "{name}: got {:?}", r.text()),
        (Expect::Ok(_), Err(err)) => panic!("{name}: failed: {err}"),
    }
    assert!(
        took >= at_least,
        "{name}: returned after {took:?}, too soon"
    );
    probe.assert_memory(name, memory);
    assert_eq!(
        server.count(tool_calls),
        1,
        "{name}: never re-sent; the server saw {:?}",
        server.labels()
    );
    if let Some(bound) = written {
        let call = server.wait_for(tool_calls).await;
        // The client must have let go of the connection, not just stopped reading.
        let outcome = server.wait_done(call.seq, Duration::from_secs(3)).await;
        assert!(
            outcome.done.is_some(),
            "{name}: the client still holds the connection ({} bytes written)",
            outcome.written
        );
        assert!(
            outcome.written < bound,
            "{name}: the server wrote {} bytes before the client stopped; bound {bound}",
            outcome.written
        );
    }
    assert_usable(name, &server, &client).await;
}
