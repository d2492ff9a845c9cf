//! The message bridge: keep your SDK's client, get mcp-resume's recovery.
//!
//! A host SDK's client (rmcp, the Python `mcp` package, the TypeScript SDK, …) speaks JSON-RPC
//! messages. [`Bridge`] takes them ([`Bridge::send`]) and gives the answers back
//! ([`Bridge::recv`]); in between everything runs on a real mcp-resume [`Client`], with every
//! recovery rule of both eras. The skins (rmcp's `Transport`, the Python and Node bindings)
//! only convert their own typed messages to and from [`serde_json::Value`].
//!
//! ```no_run
//! # async fn run() -> mcp_resume::Result<()> {
//! use mcp_resume::bridge::Bridge;
//! use serde_json::json;
//!
//! let bridge = Bridge::builder("http://127.0.0.1:8080/mcp").build()?;
//! bridge.send(json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
//!     "protocolVersion": "2025-06-18", "capabilities": {},
//!     "clientInfo": {"name": "host", "version": "1"}}})).await?;
//! let initialized = bridge.recv().await; // the server's InitializeResult, id 0
//! # let _ = initialized; Ok(()) }
//! ```
//!
//! # The rules
//!
//! - **Lifecycle.** The host's `initialize` configures the real session: its
//!   `protocolVersion` (when it is a legacy version mcp-resume speaks), `capabilities` and
//!   `clientInfo`. The host receives the server's `InitializeResult` (legacy server), or one
//!   built from `server/discover` (2026-07-28 server) carrying the protocol version the host
//!   asked for, so a host that speaks only the legacy lifecycle reaches a 2026-07-28-only
//!   server (era translation). `notifications/initialized` is absorbed: the client sends its
//!   own. A host request other than `initialize`, `server/discover` and `ping` before
//!   `initialize` is answered with [`codes::INVALID_REQUEST`].
//! - **`server/discover` from the host** is answered with JSON-RPC error -32601 (method not
//!   found, [`codes::METHOD_NOT_FOUND`]), as a legacy server answers it: a dual-era host
//!   then falls back to `initialize`, and the bridge picks the server's era by itself.
//! - **Invisible recovery.** Resumes, re-initializations and re-sends never reach the host,
//!   with one exception: when a re-initialization changes the server's capabilities or
//!   capability hash ([`SessionEvent::Reinitialized`] with `capabilities_changed`), the host
//!   receives `notifications/tools/list_changed`, `notifications/resources/list_changed` and
//!   `notifications/prompts/list_changed` (those of the lists the server declared), so it
//!   refreshes what it cached. What the host set on its session and a new session lacks
//!   (the last `logging/setLevel`, the `resources/subscribe`d URIs) is set again on the new
//!   one. [`Bridge::events`] streams the session's events.
//! - **One host request, one call.** The answer carries the host's id. The host's
//!   `_meta.progressToken` travels unchanged, and the server's progress comes back under it.
//!   A host's `notifications/cancelled` abandons the call: the server is told, every resume
//!   and re-send of it stops, and the host gets no answer (as the specification asks), not
//!   even one already waiting for room; its id is free at once. A request still waiting for
//!   its place (see the bounds) is never sent.
//!   A call's deadline is the client's `call_timeout`
//!   ([`ClientBuilder::call_timeout`], set through [`BridgeBuilder::configure`]). A request
//!   sent on to the server that reuses the id of one still in flight (its answer not yet
//!   queued) is answered at once with [`codes::INVALID_REQUEST`] and never sent; the one in
//!   flight keeps the id and its answer. The same request handed over again (same method
//!   and params: a host or skin that sends a message twice) is neither sent nor refused,
//!   even when it gets its place (see the bounds) only after that one's answer: the host
//!   made one request, and gets one answer, the call's own. The refusal of another
//!   is queued only while the one in flight holds the id: one still waiting for room in the
//!   host's queue when that one's answer is queued (or the host cancels it) is dropped, so
//!   it never answers a later request that uses the id again. The requests the bridge
//!   answers itself (`initialize`, `server/discover`, those refused before `initialize`) are
//!   not held under their ids: a host that reuses the id of its `initialize` while `connect` runs gets
//!   two answers under it.
//! - **Errors.** A server's JSON-RPC error reaches the host unchanged. What JSON-RPC cannot
//!   say arrives as a JSON-RPC error with the code of its [`ErrorKind`] (see [`codes`]) and
//!   `data.kind` set to [`ErrorKind::as_str`] (e.g. `"outcome_unknown"`): never a success,
//!   never a hang. The message of an `outcome_unknown` or `context_mismatch` error says only
//!   that (the network's words that caused it are in `data.cause`), so that no framework
//!   that retries on messages like "connection closed" re-runs a call that may have run.
//!   A server's answer whose `result` is not a JSON object (`null`, a string, a number, an
//!   array: MCP results always are objects) is not handed on: the host gets the protocol
//!   error ([`codes::PROTOCOL`], `data.kind` `"protocol"`) with `data.mayHaveRun: true`, as
//!   the server answered, so the request ran. A host SDK cannot tell what such an answer is,
//!   and would leave its request waiting for its own timeout.
//! - **Idempotency.** A `tools/call` whose `params._meta` holds
//!   [`IDEMPOTENCY_META_KEY`] (`"io.github.mcp-resume/idempotency-key"`, a string) is a keyed
//!   call: re-sent after an interruption when the resend policy allows
//!   ([`ClientBuilder::resend_policy`]). The member is taken out of `_meta`; the client puts
//!   the key where the server expects it. A key ending in `.round` and digits is reserved
//!   (a multi-round call's later rounds are keyed so) and answered `invalid_config`.
//! - **Annotations** (opt-in, [`BridgeBuilder::trust_tool_annotations`]). The specification
//!   says annotations from untrusted servers must not drive decisions, so this is off by
//!   default. On, a `tools/call` without a key, to a tool the server's last `tools/list`
//!   (read through the bridge) marked `readOnlyHint: true` or `idempotentHint: true`, is sent
//!   again when its outcome is unknown, at most [`ANNOTATED_RESENDS`] times, all within
//!   the call's one deadline, and only to the server that listed it: a re-initialization
//!   that finds the server's capabilities changed forgets the annotations until the host
//!   lists the tools again, also for a call whose outcome that re-initialization made
//!   unknown (the re-send waits for it to end, to know). A 2026-07-28 call whose input the
//!   host refused (it answered the server's `elicitation/create` or sampling request with an
//!   error; [`Error::input_refused`](crate::Error::input_refused)) ends `outcome_unknown`
//!   too, but is not sent again: a re-send would start the call over and ask the host the
//!   same thing again.
//! - **Server requests** (sampling, elicitation, roots, and any other) go to the host with
//!   ids the bridge chooses (numbers from 1), and the host's answers go back to the server.
//!   They are not filtered by the capabilities the host's `initialize` declared (the server
//!   learned those from it): one for a capability the host did not declare reaches the host,
//!   whose SDK refuses it. A server that cancels one sends the host `notifications/cancelled`
//!   with the bridge's id. `ping`
//!   from the server is answered by the client itself. In the 2026-07-28 era the same
//!   forwarding answers multi round-trip rounds (`input_required`), and tasks are polled to
//!   completion: the host sees a plain result.
//! - **Notifications** from the server go to the host unchanged. A request that carries a
//!   `progressToken` has its answer queued only after the notifications the server sent
//!   before it, so the host sees all its progress first.
//!
//! # Bounds (back-pressure, not loss)
//!
//! - Host → server: at most `capacity` host requests are in flight (sent and not yet
//!   answered into the outgoing queue); [`Bridge::send`] of another request waits. The host's
//!   notifications and answers to server requests never wait, so a host answering an MRTR
//!   round is never blocked behind the calls waiting for it.
//! - Server → host: at most `capacity` messages wait for [`Bridge::recv`]; answers and
//!   forwarded server requests wait for room (and so hold their call's place in the first
//!   bound), which slows the host, never drops. Server notifications wait the same way;
//!   behind them the client buffers [`EVENT_BUFFER`] more, and
//!   a host that stops reading for longer loses the oldest of those (counted by
//!   [`Bridge::missed_notifications`]): notifications are informational, answers never are.
//! - Server requests the host has not answered. A legacy server's own requests: at most 32
//!   at once for the whole client (the bound of its server-request handlers, see
//!   [`crate::guide::client`]), whichever call they came with. One holds its place until the
//!   host answers, the server cancels it, the session is replaced or the bridge closes, not
//!   when the call it came with ends; past 32 the client answers the server's next requests
//!   with an error (-32603). A host that never answers them costs the server's requests
//!   that; it never holds a place of the first bound. The inputs a 2026-07-28 call asks the
//!   host for (an MRTR round's, or its task's) are not counted against those 32 (a refusal
//!   would not reach the server but end the call): at most 16 at once for each call (a
//!   round asking for more fails the call, `protocol`, before the host is asked), and they
//!   end with their call (its answer, its deadline, the host's cancel), the host sent
//!   `notifications/cancelled` for those it had.
//! - `capacity` defaults to [`DEFAULT_CAPACITY`]. Each message is bounded by the client's
//!   `max_event_size` / `max_body_size`.
//!
//! The host must read ([`Bridge::recv`]) concurrently with sending, as every SDK's transport
//! loop does.

pub mod codes;
mod host_calls;
mod lifecycle;
mod message;
mod pumps;
#[cfg(feature = "rmcp")]
pub mod rmcp;
mod server_requests;
mod session_state;

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::sync::{broadcast, mpsc, watch, Semaphore};
use tokio::task::JoinHandle;

use crate::client::{Client, ClientBuilder, EventStream, EVENT_BUFFER};
use crate::error::{Error, ErrorKind};
use crate::proto::SessionEvent;

use host_calls::HostCalls;
use message::HostMessage;
use server_requests::ServerRequests;

pub use crate::proto::config::DEFAULT_IDEMPOTENCY_META_KEY as IDEMPOTENCY_META_KEY;

/// Default of [`BridgeBuilder::capacity`]: host requests in flight, and messages waiting for
/// the host.
pub const DEFAULT_CAPACITY: usize = 64;

/// How many times a call made safe by the tool annotations is sent again after an unknown
/// outcome (with [`BridgeBuilder::trust_tool_annotations`]).
pub const ANNOTATED_RESENDS: u32 = 2;

/// The host's cancel of one of its requests.
const CANCELLED: &str = "notifications/cancelled";

/// A virtual MCP session towards a host SDK's client, over a real mcp-resume session towards
/// the server. See the [module docs](self) for the rules.
///
/// Cheap to clone: clones share the session. When the last clone is dropped the session is
/// closed (as when the last [`Client`] is dropped), the host's calls still in flight
/// abandoned first, as the host's `notifications/cancelled` abandons one (nobody is left to
/// read their answers).
#[derive(Clone)]
pub struct Bridge {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Bridge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bridge").finish_non_exhaustive()
    }
}

/// Builds a [`Bridge`]. Obtained from [`Bridge::builder`].
#[must_use = "a BridgeBuilder does nothing until build() is called"]
pub struct BridgeBuilder {
    client: ClientBuilder,
    trust_annotations: bool,
    capacity: usize,
}

impl std::fmt::Debug for BridgeBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BridgeBuilder")
            .field("client", &self.client)
            .field("trust_annotations", &self.trust_annotations)
            .field("capacity", &self.capacity)
            .finish()
    }
}

impl BridgeBuilder {
    /// Sets any mcp-resume option of the real session: reconnect policy, resend policy, era,
    /// authorization, headers, timeouts, … (defaults: [`ClientBuilder`]'s).
    ///
    /// The host's `initialize` sets the protocol version, client capabilities and client
    /// info, and the bridge answers server requests by forwarding them: what is set here for
    /// those is replaced. Do not register typed server-request handlers
    /// ([`ClientBuilder::on_sampling`], …): they would answer instead of the host.
    ///
    /// ```
    /// use std::time::Duration;
    /// use mcp_resume::{bridge::Bridge, ResendPolicy};
    ///
    /// let bridge = Bridge::builder("http://127.0.0.1:8080/mcp")
    ///     .configure(|c| c.call_timeout(Duration::from_secs(30))
    ///                     .resend_policy(ResendPolicy::AssumeServerDeduplicates))
    ///     .build()?;
    /// # Ok::<(), mcp_resume::Error>(())
    /// ```
    pub fn configure(mut self, f: impl FnOnce(ClientBuilder) -> ClientBuilder) -> Self {
        self.client = f(self.client);
        self
    }

    /// Whether tool annotations (`readOnlyHint`, `idempotentHint`) of the server's last
    /// `tools/list` may make an unkeyed call safe to send again after an unknown outcome.
    /// Default: `false`: the specification says annotations from untrusted servers must
    /// not drive decisions. Turn it on only for servers you trust. A call whose input the
    /// host refused ([`Error::input_refused`](crate::Error::input_refused)) is never sent
    /// again: the server would ask the host the same thing again.
    pub fn trust_tool_annotations(mut self, trust: bool) -> Self {
        self.trust_annotations = trust;
        self
    }

    /// The bound of each direction, in messages: host requests in flight, and messages
    /// waiting for [`Bridge::recv`]. Default: [`DEFAULT_CAPACITY`]. Must be at least 1.
    pub fn capacity(mut self, messages: usize) -> Self {
        self.capacity = messages;
        self
    }

    /// Validates the bridge's options and creates the bridge. The session's own options are
    /// validated when the host's `initialize` builds it (an invalid one answers that
    /// `initialize` with [`codes::INVALID_CONFIG`]). Touches no network and needs no runtime;
    /// [`Bridge::send`] and [`Bridge::recv`] must run inside a tokio runtime.
    pub fn build(self) -> Result<Bridge, Error> {
        if self.capacity == 0 {
            return Err(Error::new(
                ErrorKind::InvalidConfig,
                "the bridge's capacity must be at least 1",
            ));
        }
        Ok(self.assemble())
    }

    /// Creates the bridge; the capacity is at least 1 (checked by [`BridgeBuilder::build`],
    /// or left at its default).
    pub(crate) fn assemble(self) -> Bridge {
        let (out_tx, out_rx) = mpsc::channel(self.capacity);
        let (closed, _) = watch::channel(false);
        let (events, _) = broadcast::channel(EVENT_BUFFER);
        Bridge {
            inner: Arc::new(Inner {
                phase: Mutex::new(Phase::Idle(Box::new(self.client))),
                out: out_tx.clone(),
                out_rx: tokio::sync::Mutex::new(out_rx),
                permits: Arc::new(Semaphore::new(self.capacity)),
                calls: Arc::new(HostCalls::new(self.trust_annotations, out_tx.clone())),
                server_requests: Arc::new(ServerRequests::new(out_tx)),
                events,
                closed,
                missed: Arc::new(AtomicU64::new(0)),
                server_capabilities: Arc::new(Mutex::new(None)),
                pumps: Mutex::new(Vec::new()),
            }),
        }
    }
}

/// Where the real session is.
enum Phase {
    /// No `initialize` yet: the configuration waits for the host's.
    Idle(Box<ClientBuilder>),
    /// The real client, built from the host's `initialize`.
    Ready(Client),
    /// The host's `initialize` could not build the client: every request gets this.
    Failed(Error),
    /// Closed by [`Bridge::close`].
    Closed,
}

pub(crate) struct Inner {
    phase: Mutex<Phase>,
    /// Messages towards the host.
    out: mpsc::Sender<Value>,
    out_rx: tokio::sync::Mutex<mpsc::Receiver<Value>>,
    /// One per host request in flight.
    permits: Arc<Semaphore>,
    calls: Arc<HostCalls>,
    server_requests: Arc<ServerRequests>,
    /// The session's events, republished (the client exists only after `initialize`).
    events: broadcast::Sender<SessionEvent>,
    closed: watch::Sender<bool>,
    missed: Arc<AtomicU64>,
    /// The server's capabilities as the host was told them (for `list_changed`).
    server_capabilities: Arc<Mutex<Option<Value>>>,
    pumps: Mutex<Vec<JoinHandle<()>>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        for pump in lock(&self.pumps).drain(..) {
            pump.abort();
        }
        // Each call's task holds the client: left running, it would keep the session open
        // (and its resumes and re-sends going) until its deadline, for an answer no one reads.
        self.calls.abandon_all();
    }
}

/// Locks a mutex whose data stays consistent even if a holder panicked.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match mutex.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}

impl Bridge {
    /// Starts configuring a bridge to the MCP endpoint at `url`.
    pub fn builder(url: impl Into<String>) -> BridgeBuilder {
        BridgeBuilder {
            client: Client::builder(url),
            trust_annotations: false,
            capacity: DEFAULT_CAPACITY,
        }
    }

    /// Host → server: one JSON-RPC message (request, notification, response or error
    /// response) as JSON.
    ///
    /// Returns once the message is taken: a request's answer comes later through
    /// [`Bridge::recv`]. Waits while `capacity` host requests are in flight
    /// (back-pressure); the host's `notifications/cancelled` for a request waiting here ends
    /// the wait with `Ok`, the request not taken (never sent, never answered). Fails with
    /// [`ErrorKind::Protocol`] for something that is not a JSON-RPC message, and with
    /// [`ErrorKind::Closed`] after [`Bridge::close`].
    /// Cancel-safe: dropped while it waits for room, the message was not taken.
    ///
    /// A request is known to the bridge from this call on, before the future is first
    /// polled, and the host's `notifications/cancelled` acts in this call too: a cancel
    /// reaches exactly the requests handed over before it, whichever of the futures runs
    /// first (a host SDK's skin that spawns each message's future runs them in any order). A
    /// request handed over after it, under the same id, is not cancelled (a stale cancel of
    /// an answered request does not reach a new one that reuses the id).
    pub fn send(&self, message: Value) -> impl Future<Output = Result<(), Error>> + Send + 'static {
        let inner = self.inner.clone();
        let taken = if *inner.closed.borrow() {
            Err(closed())
        } else {
            HostMessage::parse(message).map(|message| {
                if let HostMessage::Notification { method, params } = &message {
                    if method == CANCELLED {
                        inner.calls.cancel_named(params.as_ref());
                    }
                }
                let print = match &message {
                    HostMessage::Request { method, params, .. } => {
                        inner.calls.fingerprint(method, params.as_ref())
                    }
                    _ => 0,
                };
                message.with_request_id(|id| inner.calls.wait(id, print))
            })
        };
        async move {
            match taken? {
                HostMessage::Request {
                    id: mut waiting,
                    method,
                    params,
                } => {
                    let permit = tokio::select! {
                        permit = inner.permits.clone().acquire_owned() => {
                            permit.map_err(|_| closed())?
                        }
                        // As for a call in flight: never sent, and no answer.
                        () = waiting.cancelled() => return Ok(()),
                    };
                    inner.request(waiting, method, params, permit)
                }
                HostMessage::Notification { method, params } => {
                    inner.notification(&method, params).await
                }
                HostMessage::Response { id, result } => {
                    inner.server_requests.answer(&id, result);
                    Ok(())
                }
            }
        }
    }

    /// Server → host: the next JSON-RPC message; `None` once the bridge is closed.
    /// Cancel-safe (usable in `select!`): dropped while it waits, no message is lost.
    pub async fn recv(&self) -> Option<Value> {
        let mut closed = self.inner.closed.subscribe();
        if *closed.borrow_and_update() {
            return None;
        }
        let mut rx = self.inner.out_rx.lock().await;
        tokio::select! {
            message = rx.recv() => message,
            _ = closed.wait_for(|c| *c) => None,
        }
    }

    /// The real session's [`SessionEvent`]s: resumes, re-initializations, re-sends, unknown
    /// outcomes. Sees the events sent after it was created; buffered as
    /// [`Client::events`].
    pub fn events(&self) -> EventStream {
        EventStream::new(self.inner.events.subscribe())
    }

    /// The real session's id (`Mcp-Session-Id`, legacy era), if any; see
    /// [`Client::session_id`].
    pub fn session_id(&self) -> Option<crate::ids::SessionId> {
        self.inner.client().and_then(|c| c.session_id())
    }

    /// The real client, once the host's `initialize` built it: for what the host SDK cannot
    /// ask (the era, the extension status).
    pub fn client(&self) -> Option<Client> {
        self.inner.client()
    }

    /// Server notifications the host lost because it stopped reading for too long (see the
    /// bounds in the [module docs](self)).
    pub fn missed_notifications(&self) -> u64 {
        self.inner.missed.load(Ordering::Relaxed)
    }

    /// Closes the bridge and its session (see [`Client::close`]): [`Bridge::recv`] returns
    /// `None`, [`Bridge::send`] fails with [`ErrorKind::Closed`] (one waiting for a place
    /// too).
    pub async fn close(&self) -> Result<(), Error> {
        let previous = std::mem::replace(&mut *lock(&self.inner.phase), Phase::Closed);
        self.inner.closed.send_replace(true);
        // A place may never free (a call's answer waiting for room nobody reads).
        self.inner.permits.close();
        self.inner.server_requests.close();
        match previous {
            Phase::Ready(client) => client.close().await,
            Phase::Idle(_) | Phase::Failed(_) | Phase::Closed => Ok(()),
        }
    }
}

fn closed() -> Error {
    Error::new(ErrorKind::Closed, "the bridge is closed")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Skins hold the bridge in `Send + Sync` transports and await it from spawned tasks.
    #[test]
    fn the_bridge_and_its_futures_are_send() {
        fn shared<T: Send + Sync + 'static>() {}
        fn send<T: Send>(_: T) {}
        shared::<Bridge>();
        let bridge = Bridge::builder("http://127.0.0.1:1/mcp").build().unwrap();
        send(bridge.send(Value::Null));
        send(bridge.recv());
        send(bridge.close());
    }
}
