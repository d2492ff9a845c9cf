//! Never a hang, whatever the runtime or application code does: a driver that never ran, a
//! driver task stalled by application code, handlers whose runtime went away, and token
//! providers that panic or ask for a re-send they have no reason for.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use http::{HeaderMap, Method};
use mcp_resume::{
    Client, ErrorKind, Presentation, Request, RpcError, TokenProvider, TokenRequest, ToolCall,
};
use reqwest::Url;
use serde_json::{json, Value};
use tokio::sync::Notify;

use crate::support::*;

fn multi(workers: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .unwrap()
}

fn current() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// The plain server, with tools/call never answered.
fn hang_on_tool_calls(req: &Recorded) -> axum::response::Response {
    if req.is_rpc("tools/call") {
        return hang();
    }
    default_reply(req)
}

/// A driver spawned on a runtime that never polled it, then shut down: the client is
/// stopped, so the next call fails `Closed` at once instead of waiting out its deadline.
#[test]
fn a_driver_never_polled_stops_the_client_when_its_runtime_goes() {
    let servers = multi(1);
    let server = servers.block_on(TestServer::start(default_reply));
    let client = Client::builder(&server.url)
        .call_timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let never = current();
    {
        let _inside = never.enter();
        // Spawns the driver on `never`, which is never run.
        client.notify("notifications/x", None).unwrap();
    }
    drop(never);

    let callers = current();
    let started = Instant::now();
    let err = callers
        .block_on(guarded(client.ping()))
        .expect_err("the driver is gone");
    assert_eq!(err.kind(), ErrorKind::Closed, "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "failed after {:?}",
        started.elapsed()
    );
}

/// A token provider whose application code misbehaves presenting a GET's credentials (on
/// whatever task runs the GET): `on_get` runs after `reached` is notified.
struct OnGets {
    reached: Arc<Notify>,
    on_get: fn(),
}

impl TokenProvider for OnGets {
    fn token(&self, _: TokenRequest) -> BoxFuture<'static, Result<String, mcp_resume::Error>> {
        Box::pin(async { Ok("t-1".to_owned()) })
    }

    fn present(
        &self,
        token: &str,
        method: &Method,
        _: &Url,
    ) -> Result<Presentation, mcp_resume::Error> {
        if method == Method::GET {
            self.reached.notify_one();
            (self.on_get)();
        }
        Presentation::bearer(token)
    }
}

/// Application code stalls whatever task runs the standalone stream's GET for 10 s; a
/// 500 ms call awaited on another worker of the same runtime still ends by its deadline.
#[test]
fn a_call_ends_by_its_deadline_while_application_code_stalls_the_driver() {
    let servers = multi(1);
    let server = servers.block_on(TestServer::start(|req| {
        if req.method == Method::GET {
            return sse_open(": open\n\n");
        }
        hang_on_tool_calls(req)
    }));
    let stalled = Arc::new(Notify::new());
    let client = Client::builder(&server.url)
        .auth(OnGets {
            reached: stalled.clone(),
            on_get: || std::thread::sleep(Duration::from_secs(10)),
        })
        .build()
        .unwrap();
    let runtime = multi(2);
    let took = runtime.block_on(async {
        guarded(client.connect()).await.unwrap();
        guarded(stalled.notified()).await;
        let started = Instant::now();
        let call = ToolCall::new("slow", json!({})).timeout(Duration::from_millis(500));
        let err = guarded(client.call_tool(call))
            .await
            .expect_err("the server never answers");
        assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
        started.elapsed()
    });
    assert!(
        took < Duration::from_secs(3),
        "a 500 ms call ended after {took:?}"
    );
    runtime.shutdown_background();
}

/// Server requests whose callers' runtimes went away are still answered: their handlers run
/// on the driver's runtime, not on the runtime of the call whose stream brought the request,
/// so no slot of the 32 the client handles at once is lost. After 33 such requests, the
/// next one is still answered by its handler.
#[test]
fn handlers_outlive_the_runtimes_that_brought_their_requests() {
    const CALLS: usize = 33;
    let servers = multi(1);
    let server = servers.block_on(TestServer::start(|req| {
        if req.is_rpc("tools/call") {
            let n = req.params()["arguments"]["n"].as_u64().unwrap_or(0);
            let ask = json!({"jsonrpc": "2.0", "id": format!("ask-{n}"),
                "method": "test/ask", "params": {"n": n}});
            return sse_open(sse_event(None, &ask));
        }
        default_reply(req)
    }));
    let (started, handlers_started) = tokio::sync::watch::channel(0usize);
    let client = Client::builder(&server.url)
        .call_timeout(Duration::from_secs(30))
        .on_server_request(move |req| {
            started.send_modify(|n| *n += 1);
            async move { Ok::<Value, RpcError>(json!({"answered": req.params})) }
        })
        .build()
        .unwrap();
    let drivers = multi(1);
    drivers.block_on(guarded(client.connect())).unwrap();

    for n in 0..CALLS {
        // The request reaches its handler through the caller's own POST; the caller's
        // runtime is then dropped under it.
        let callers = current();
        callers.block_on(async {
            let mut handlers = handlers_started.clone();
            tokio::select! {
                _ = client.call_tool(ToolCall::new("ask", json!({"n": n}))) => {
                    panic!("the call ended before its server request was handled")
                }
                started = guarded(handlers.wait_for(|started| *started > n)) => {
                    started.unwrap();
                }
            }
        });
        drop(callers);
    }

    let answered = |n: usize| {
        move |r: &Recorded| {
            r.body
                .as_ref()
                .is_some_and(|b| b["id"] == format!("ask-{n}") && b.get("result").is_some())
        }
    };
    let last = CALLS;
    let callers = current();
    callers.block_on(async {
        // Every handler answered, although the runtime of the call that brought its request
        // is gone.
        for n in 0..CALLS {
            server.wait_for(answered(n)).await;
        }
        let asking = client
            .start(ToolCall::new("ask", json!({"n": last})))
            .unwrap();
        let answer = server
            .wait_for(|r| {
                r.body
                    .as_ref()
                    .is_some_and(|b| b["id"] == format!("ask-{last}"))
            })
            .await;
        let body = answer.body.unwrap();
        assert_eq!(
            body["result"]["answered"]["n"], last,
            "the server request was not answered by its handler: {body}"
        );
        drop(asking);
    });
}

/// A panic in application code run for the standalone stream fails that stream's request,
/// never the client: `ping` works afterwards.
#[tokio::test]
async fn a_provider_panicking_on_a_get_leaves_the_client_working() {
    let server = TestServer::start(|req| {
        if req.method == Method::GET {
            return sse_open(": open\n\n");
        }
        default_reply(req)
    })
    .await;
    let panicked = Arc::new(Notify::new());
    let client = Client::builder(&server.url)
        .auth(OnGets {
            reached: panicked.clone(),
            on_get: || panic!("a token provider's bug"),
        })
        .build()
        .unwrap();
    guarded(client.connect()).await.unwrap();
    guarded(panicked.notified()).await;
    guarded(client.ping())
        .await
        .expect("the client survives a provider's panic");
    let result = guarded(client.call_tool(ToolCall::new("echo", json!({"text": "still"}))))
        .await
        .unwrap();
    assert_eq!(result.text(), "still");
}

/// A provider whose `token` panics before it hands out its future, once told to.
struct PanicsWhenTold {
    told: Arc<AtomicBool>,
}

impl TokenProvider for PanicsWhenTold {
    fn token(&self, _: TokenRequest) -> BoxFuture<'static, Result<String, mcp_resume::Error>> {
        assert!(!self.told.load(Ordering::SeqCst), "a token provider's bug");
        Box::pin(async { Ok("t-1".to_owned()) })
    }
}

/// With `told` set (application code then panics), a call made from the caller's own task
/// fails without unwinding that task; unset again, the client answers the next call.
async fn fails_only_the_call_while_told(client: &Client, told: &AtomicBool) {
    guarded(client.connect()).await.unwrap();
    told.store(true, Ordering::SeqCst);
    let caller = client.clone();
    let joined = guarded(tokio::spawn(async move {
        caller
            .call_tool(ToolCall::new("echo", json!({"text": "x"})))
            .await
    }))
    .await;
    let result = joined.expect("the caller's task does not panic");
    assert!(result.is_err(), "{result:?}");
    told.store(false, Ordering::SeqCst);
    let result = guarded(client.call_tool(ToolCall::new("echo", json!({"text": "still"}))))
        .await
        .unwrap();
    assert_eq!(result.text(), "still");
}

/// A provider panicking in its own code (not in the future it returns) on a call the caller's
/// task sends: the call fails, the caller's task does not unwind, the client goes on.
#[tokio::test]
async fn a_provider_panicking_before_its_future_fails_only_the_call() {
    let server = TestServer::start(default_reply).await;
    let told = Arc::new(AtomicBool::new(false));
    let client = Client::builder(&server.url)
        .open_listen_stream(false)
        .auth(PanicsWhenTold { told: told.clone() })
        // A provider's failure reads as a connection not made: tried again to the deadline.
        .call_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    fails_only_the_call_while_told(&client, &told).await;
}

/// A name resolver (application code inside the application's own `reqwest::Client`) that
/// resolves to loopback, or panics once told to.
struct ResolverPanicsWhenTold {
    told: Arc<AtomicBool>,
}

impl reqwest::dns::Resolve for ResolverPanicsWhenTold {
    fn resolve(&self, _: reqwest::dns::Name) -> reqwest::dns::Resolving {
        assert!(!self.told.load(Ordering::SeqCst), "a resolver's bug");
        let addrs: reqwest::dns::Addrs = Box::new(std::iter::once(std::net::SocketAddr::from((
            [127, 0, 0, 1],
            0,
        ))));
        Box::pin(async move { Ok(addrs) })
    }
}

/// The application's HTTP client panicking while a call's first POST is sent from the
/// caller's own task: the call fails, the caller's task does not unwind, the client goes on.
#[tokio::test]
async fn an_http_client_panicking_on_a_calls_own_post_fails_only_the_call() {
    let server = TestServer::start(default_reply).await;
    let told = Arc::new(AtomicBool::new(false));
    let http = reqwest::Client::builder()
        .dns_resolver(Arc::new(ResolverPanicsWhenTold { told: told.clone() }))
        // A connection per request: each one asks the resolver.
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let url = server.url.replace("127.0.0.1", "localhost");
    let client = Client::builder(&url)
        .http_client(http)
        .open_listen_stream(false)
        .call_timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    fails_only_the_call_while_told(&client, &told).await;
}

/// Panics as it is dropped, unless it is dropped by an unwinding panic already.
struct PanicsOnDrop;

impl Drop for PanicsOnDrop {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            panic!("a token provider's cleanup bug");
        }
    }
}

/// A provider whose token, once told, never comes, and whose future panics as it is dropped
/// unfinished.
struct NeverAnswersWhenTold {
    told: Arc<AtomicBool>,
}

impl TokenProvider for NeverAnswersWhenTold {
    fn token(&self, _: TokenRequest) -> BoxFuture<'static, Result<String, mcp_resume::Error>> {
        let never = self.told.load(Ordering::SeqCst);
        Box::pin(async move {
            if never {
                let _bomb = PanicsOnDrop;
                std::future::pending::<()>().await;
            }
            Ok("t-1".to_owned())
        })
    }
}

/// A token future that panics as the call's deadline drops it fails that call alone, with
/// its timeout: whether the driver's exchange runner drops it (a call started as a handle)
/// or the caller's own task (a call awaited where it is made). Unwinding from the drop
/// stopped the runner, and with it the client, or unwound the caller's task.
#[tokio::test]
async fn a_token_future_panicking_as_it_is_dropped_fails_only_its_call() {
    let server = TestServer::start(default_reply).await;
    let told = Arc::new(AtomicBool::new(false));
    let client = Client::builder(&server.url)
        .open_listen_stream(false)
        .auth(NeverAnswersWhenTold { told: told.clone() })
        .build()
        .unwrap();
    guarded(client.connect()).await.unwrap();
    told.store(true, Ordering::SeqCst);
    let call = || ToolCall::new("echo", json!({"text": "x"})).timeout(Duration::from_millis(300));

    let started = client.start(call()).unwrap();
    let err = guarded(started).await.expect_err("its token never comes");
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    told.store(false, Ordering::SeqCst);
    guarded(client.ping())
        .await
        .expect("the runner survives the token future's panic");

    told.store(true, Ordering::SeqCst);
    let caller = client.clone();
    let joined = guarded(tokio::spawn(async move { caller.call_tool(call()).await })).await;
    let err = joined
        .expect("the caller's task does not unwind")
        .expect_err("its token never comes");
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    told.store(false, Ordering::SeqCst);
    let result = guarded(client.call_tool(ToolCall::new("echo", json!({"text": "still"}))))
        .await
        .unwrap();
    assert_eq!(result.text(), "still");
}

/// A JSON answer whose body comes `delay` after its head.
fn late_json(value: &Value, delay: Duration) -> axum::response::Response {
    let body = axum::body::Bytes::from(value.to_string());
    let late = futures::stream::once(async move {
        tokio::time::sleep(delay).await;
        Ok::<_, std::convert::Infallible>(body)
    });
    axum::response::Response::builder()
        .header("content-type", "application/json")
        .body(axum::body::Body::from_stream(late))
        .unwrap()
}

/// A server answering every page of a list well within the call timeout, each page naming
/// another: the list as a whole ends by the call timeout, as any call does, instead of taking
/// up to a call timeout per page for its thousand pages.
#[tokio::test]
async fn a_list_whose_pages_never_end_ends_by_the_call_timeout() {
    const TIMEOUT: Duration = Duration::from_millis(600);
    let server = TestServer::start(|req| {
        if req.is_rpc("tools/list") {
            let page = req.params()["cursor"]
                .as_str()
                .and_then(|c| c.parse::<u64>().ok())
                .unwrap_or(0);
            let answer = result_msg(
                req,
                json!({"tools": [], "nextCursor": format!("{}", page + 1)}),
            );
            return late_json(&answer, TIMEOUT / 4);
        }
        default_reply(req)
    })
    .await;
    let client = Client::builder(&server.url)
        .open_listen_stream(false)
        .call_timeout(TIMEOUT)
        .build()
        .unwrap();
    guarded(client.connect()).await.unwrap();
    let started = Instant::now();
    let err = guarded(client.list_tools())
        .await
        .expect_err("the list never ends");
    let took = started.elapsed();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    assert!(
        took < TIMEOUT * 3,
        "a list bounded by {TIMEOUT:?} ended after {took:?}"
    );
    let pages = server
        .requests()
        .iter()
        .filter(|r| r.is_rpc("tools/list"))
        .count();
    assert!(
        pages <= 5,
        "{pages} pages asked for within one call timeout"
    );
}

/// A provider that asks for a re-send after every answer.
struct ObservesEverything {
    observed: Arc<AtomicUsize>,
}

impl TokenProvider for ObservesEverything {
    fn token(&self, _: TokenRequest) -> BoxFuture<'static, Result<String, mcp_resume::Error>> {
        Box::pin(async { Ok("t-1".to_owned()) })
    }

    fn observe(
        &self,
        _: &Url,
        _: u16,
        _: &HeaderMap,
        _: Option<&mcp_resume::AuthChallenge>,
    ) -> bool {
        self.observed.fetch_add(1, Ordering::SeqCst);
        true
    }
}

/// `observe` asking for a re-send after a success is not obeyed: an unkeyed call answered
/// 200 is sent once.
#[tokio::test]
async fn observe_asking_for_a_resend_after_a_success_sends_the_call_once() {
    let server = TestServer::start(default_reply).await;
    let observed = Arc::new(AtomicUsize::new(0));
    let client = Client::builder(&server.url)
        .open_listen_stream(false)
        .auth(ObservesEverything {
            observed: observed.clone(),
        })
        .build()
        .unwrap();
    let result = guarded(client.call_tool(ToolCall::new("echo", json!({"text": "once"}))))
        .await
        .unwrap();
    assert_eq!(result.text(), "once");
    let _: Value = guarded(client.request(Request::new("ping", None)))
        .await
        .unwrap();
    assert!(observed.load(Ordering::SeqCst) > 0, "observe was asked");
    let sent = server
        .requests()
        .iter()
        .filter(|r| r.is_rpc("tools/call"))
        .count();
    assert_eq!(sent, 1, "the server saw {:?}", server.labels());
}

/// A call that resets its timeout on progress and has no total bound, awaited on a runtime
/// other than the driver's while the driver's runtime is never polled again: its own guard
/// follows its allowed silence, so it ends instead of waiting forever.
#[test]
fn an_idle_bounded_call_off_the_drivers_runtime_has_a_guard() {
    let servers = multi(1);
    let server = servers.block_on(TestServer::start(hang_on_tool_calls));
    let client = Client::builder(&server.url)
        .open_listen_stream(false)
        .build()
        .unwrap();
    // The driver starts here, and this runtime is never polled again.
    let drivers = current();
    drivers.block_on(guarded(client.connect())).unwrap();

    let callers = current();
    let started = Instant::now();
    let call = ToolCall::new("slow", json!({}))
        .timeout(Duration::from_millis(300))
        .reset_timeout_on_progress(true);
    let err = callers
        .block_on(guarded(client.call_tool(call)))
        .expect_err("the server never answers");
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    // The silence allowed, plus the guard's documented grace.
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "ended after {:?}",
        started.elapsed()
    );
    drop(drivers);
}

/// A token provider that takes `delay` to give the first token asked for once `slow` is set.
struct SlowOnce {
    slow: Arc<AtomicBool>,
    delay: Duration,
}

impl TokenProvider for SlowOnce {
    fn token(&self, _: TokenRequest) -> BoxFuture<'static, Result<String, mcp_resume::Error>> {
        let wait = self
            .slow
            .swap(false, Ordering::SeqCst)
            .then_some(self.delay);
        Box::pin(async move {
            if let Some(wait) = wait {
                tokio::time::sleep(wait).await;
            }
            Ok("t-1".to_owned())
        })
    }
}

/// A notification whose token comes later than the bound on fire-and-forget requests was
/// never sent: it is sent again, not given up as one the server may have had (a lost answer
/// to a server request, or a lost `tasks/cancel`, leaves the server waiting).
#[test]
fn a_notification_that_waited_past_its_bound_for_a_token_is_sent_again() {
    let runtime = multi(2);
    let server = runtime.block_on(TestServer::start(default_reply));
    let slow = Arc::new(AtomicBool::new(false));
    let client = Client::builder(&server.url)
        .auth(SlowOnce {
            slow: slow.clone(),
            delay: Duration::from_millis(1500),
        })
        .open_listen_stream(false)
        .call_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    runtime.block_on(async {
        guarded(client.connect()).await.unwrap();
        slow.store(true, Ordering::SeqCst);
        client
            .notify("notifications/app_event", Some(json!({})))
            .unwrap();
        guarded(server.wait_for(|r| r.is_rpc("notifications/app_event"))).await;
    });
}

/// A call whose allowed silence lapses says it may have run only if it was sent: one held
/// back behind a handshake that never ends says what a call at its deadline there says.
#[tokio::test]
async fn a_silence_timeout_says_whether_the_call_was_sent() {
    let hangs_initialize = TestServer::start(|req| {
        if req.is_rpc("initialize") {
            return hang();
        }
        default_reply(req)
    })
    .await;
    let hangs_calls = TestServer::start(hang_on_tool_calls).await;
    for (server, sent) in [(&hangs_initialize, false), (&hangs_calls, true)] {
        let client = Client::builder(&server.url)
            .open_listen_stream(false)
            .build()
            .unwrap();
        for idle in [false, true] {
            let call = ToolCall::new("slow", json!({}))
                .timeout(Duration::from_millis(300))
                .reset_timeout_on_progress(idle);
            let err = guarded(client.call_tool(call))
                .await
                .expect_err("nothing answers");
            assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
            assert_eq!(
                err.may_have_run(),
                sent,
                "sent: {sent}, reset on progress: {idle}: {err}"
            );
        }
    }
}

/// A deadline so far off that the session's clock can hold it and the wall clock cannot (the
/// wall clock is decades ahead of the monotonic one): the ledger dates the call's entry as
/// far as it goes instead of overflowing under the session's lock, which would stop the
/// client. The call is answered, and so is the next.
#[tokio::test]
async fn a_deadline_past_the_wall_clocks_range_is_kept_with_a_ledger() {
    let server = TestServer::start(default_reply).await;
    let ledger = Arc::new(mcp_resume::MemoryLedger::new());
    let client = Client::builder(&server.url)
        .ledger(ledger.clone())
        .build()
        .unwrap();
    // Within `Instant`'s range (seconds since boot) but past `SystemTime`'s (since 1970).
    let far = Duration::from_secs(i64::MAX as u64 - 1_000_000_000);
    let call = ToolCall::new("echo", json!({"text": "far"})).timeout(far);
    let result = guarded(client.call_tool(call))
        .await
        .expect("a far deadline is a deadline");
    assert_eq!(result.text(), "far");
    let next = ToolCall::new("echo", json!({"text": "next"}));
    let result = guarded(client.call_tool(next))
        .await
        .expect("the client goes on");
    assert_eq!(result.text(), "next");
}
