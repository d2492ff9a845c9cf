//! [`ClientBuilder`]: configuration, validated in one place at [`ClientBuilder::build`].

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use http::header::{HeaderMap, HeaderName, HeaderValue, AUTHORIZATION};
use reqwest::Url;
use serde_json::Value;

use super::auth::TokenProvider;
use super::client::Client;
use super::era_cache::EraCache;
use super::handlers::{merge_capabilities, Handlers, RequestContext};
use super::ledger::{Ledger, MemoryLedger};
use super::models::{CreateMessageRequest, CreateMessageResult, ElicitRequest, ElicitResult, Root};
#[allow(deprecated)]
use super::task_store::TaskStore;
use crate::error::{Error, ErrorKind, RpcError};
use crate::policy::ReconnectPolicy;
use crate::proto::version::ProtocolVersion;
use crate::proto::{Era, ResendPolicy, ServerRequest, SessionConfig};

/// Default TCP connect timeout of the built-in HTTP client.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Headers the protocol owns: an application value would corrupt the exchange.
const RESERVED_HEADERS: &[&str] = &[
    "accept",
    "content-type",
    "content-length",
    "host",
    "mcp-session-id",
    "mcp-protocol-version",
    "last-event-id",
    "idempotency-key",
    "transfer-encoding",
    "connection",
    // The 2026-07-28 era's mirrors of a request's method and name (and, below, its annotated
    // arguments): an application's copy would go out beside the protocol's and contradict the
    // body (a server joining repeated headers refuses the call, a gateway may route on it).
    "mcp-method",
    "mcp-name",
];

/// The prefix of the headers mirroring a tool's annotated arguments (2026-07-28).
const RESERVED_PREFIX: &str = "mcp-param-";

/// Everything the driver needs, validated.
pub(crate) struct ClientConfig {
    pub(crate) url: Url,
    /// Authorization and custom headers, added to every request.
    pub(crate) headers: HeaderMap,
    pub(crate) session: SessionConfig,
    pub(crate) http: reqwest::Client,
    pub(crate) era_cache: EraCache,
    #[allow(deprecated)]
    pub(crate) task_store: Option<Arc<dyn TaskStore>>,
    pub(crate) ledger: Option<Arc<dyn Ledger>>,
    /// Whether the ledger is the client's own (no one else can read it).
    pub(crate) private_ledger: bool,
    pub(crate) record_session_ids: bool,
    pub(crate) handlers: Handlers,
    pub(crate) auth: Option<Arc<dyn TokenProvider>>,
    #[cfg(feature = "otel")]
    pub(crate) telemetry: Option<super::telemetry::Instrumentation>,
}

/// Builds a [`Client`]. Obtained from [`Client::builder`].
///
/// Setters never fail; every problem (bad URL, bad header, zero sizes or timeouts, an
/// unsupported protocol version) is reported by [`ClientBuilder::build`] as
/// [`ErrorKind::InvalidConfig`].
///
/// Cheap to clone (handlers, providers and stores are shared): a template configured once can
/// build any number of clients, as the language bindings do.
#[must_use = "a ClientBuilder does nothing until build() is called"]
#[derive(Clone)]
pub struct ClientBuilder {
    url: String,
    session: SessionConfig,
    protocol_version: Option<ProtocolVersion>,
    jitter_seed: Option<u64>,
    bearer: Option<String>,
    headers: Vec<(String, String)>,
    connect_timeout: Duration,
    http: Option<reqwest::Client>,
    era_cache: Option<EraCache>,
    #[allow(deprecated)]
    task_store: Option<Arc<dyn TaskStore>>,
    ledger: LedgerChoice,
    record_session_ids: bool,
    handlers: Handlers,
    auth: Option<Arc<dyn TokenProvider>>,
    #[cfg(feature = "otel")]
    telemetry: super::Telemetry,
}

/// Which ledger a client keeps.
#[derive(Clone)]
enum LedgerChoice {
    /// A [`MemoryLedger`] of its own.
    Own,
    Shared(Arc<dyn Ledger>),
    None,
}

impl std::fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The bearer token and header values may be secrets, and so may the URL's user info
        // and query.
        f.debug_struct("ClientBuilder")
            .field("url", &super::http::redacted_url(&self.url))
            .field("session", &self.session)
            .field("bearer", &self.bearer.as_ref().map(|_| "<redacted>"))
            .field("auth", &self.auth.as_ref().map(|_| "<token provider>"))
            .field(
                "headers",
                &self.headers.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl ClientBuilder {
    pub(crate) fn new(url: impl Into<String>) -> Self {
        ClientBuilder {
            url: url.into(),
            session: SessionConfig::default(),
            protocol_version: None,
            jitter_seed: None,
            bearer: None,
            headers: Vec::new(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            http: None,
            era_cache: None,
            task_store: None,
            ledger: LedgerChoice::Own,
            record_session_ids: false,
            handlers: Handlers::default(),
            auth: None,
            #[cfg(feature = "otel")]
            telemetry: super::Telemetry::new(),
        }
    }

    /// Where the client's OpenTelemetry spans and metrics go, and what they may say (the
    /// `otel` feature; [`telemetry`](super::telemetry) lists what is exported). Default: the
    /// global tracer and meter providers as they are at `build()`, the session id hashed.
    #[cfg(feature = "otel")]
    pub fn telemetry(mut self, telemetry: super::Telemetry) -> Self {
        self.telemetry = telemetry;
        self
    }

    /// Client capabilities sent at `initialize` (a JSON object). Default: `{}`, plus what
    /// the registered handlers imply ([`ClientBuilder::on_sampling`],
    /// [`ClientBuilder::on_elicitation`], [`ClientBuilder::on_roots`]); a member set here
    /// wins over the implied one.
    pub fn client_capabilities(mut self, capabilities: Value) -> Self {
        self.session.client_capabilities = capabilities;
        self
    }

    /// `clientInfo` sent at `initialize`. Default: `mcp-resume` and this crate's version.
    pub fn client_info(mut self, name: impl Into<String>, version: impl Into<String>) -> Self {
        self.session.client_name = name.into();
        self.session.client_version = version.into();
        self
    }

    /// Legacy protocol version offered at `initialize` (e.g.
    /// `ProtocolVersion::V2025_06_18`, or `"2025-06-18".parse()?`); one of the legacy
    /// [`ProtocolVersion::SUPPORTED`]. Default: [`ProtocolVersion::LATEST`]. (The modern
    /// revision has no `initialize`; the era is chosen with `era`: giving it here is a
    /// configuration error at [`ClientBuilder::build`].)
    pub fn protocol_version(mut self, version: ProtocolVersion) -> Self {
        self.protocol_version = Some(version);
        self
    }

    /// Sends `Authorization: Bearer <token>` on every request (resumes and DELETE included).
    /// The value is marked sensitive and never logged. For tokens that expire, use
    /// [`ClientBuilder::auth`] instead (setting both is a configuration error).
    pub fn bearer_token(mut self, token: impl Into<String>) -> Self {
        self.bearer = Some(token.into());
        self
    }

    /// Adds a header to every request (resumes and DELETE included). Protocol headers
    /// (`Accept`, `Content-Type`, `Mcp-Session-Id`, `MCP-Protocol-Version`, `Last-Event-ID`,
    /// `Idempotency-Key`, …) cannot be set this way. Repeating a name sends it repeatedly.
    /// [`ClientBuilder::bearer_token`] replaces any `Authorization` set here.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Default deadline of a call, spanning all its resumes and re-sends. Default: 60 s.
    pub fn call_timeout(mut self, timeout: Duration) -> Self {
        self.session.call_timeout = timeout;
        self
    }

    /// Which era of the protocol to speak. Default: [`Era::Auto`]: probe with
    /// `server/discover` and fall back to `initialize` for a legacy server, remembering the
    /// answer per origin in the [`EraCache`].
    pub fn era(mut self, era: Era) -> Self {
        self.session.era = era;
        self
    }

    /// Shares this cache of which era each origin speaks. Default: [`EraCache::global`].
    pub fn era_cache(mut self, cache: EraCache) -> Self {
        self.era_cache = Some(cache);
        self
    }

    /// Also tells `store` of the calls that became tasks (modern era, tasks extension), as
    /// before the ledger. Default: none (the [ledger](ClientBuilder::ledger) keeps tasks).
    #[deprecated(
        since = "0.1.0",
        note = "the ledger records tasks with every other call in flight, and                 `Client::recover` polls them again: give the builder a durable `ledger`"
    )]
    #[allow(deprecated)]
    pub fn task_store(mut self, store: Arc<dyn TaskStore>) -> Self {
        self.task_store = Some(store);
        self
    }

    /// Where the client records its calls in flight, so that the process that replaces this
    /// one picks them up with [`Client::recover`]: a [`MemoryLedger`] shared with the client
    /// that takes over in this process, or a `RedisLedger` (the `redis` feature) named for
    /// this worker, for a fleet. See [`crate::client::ledger`]. Default: a [`MemoryLedger`]
    /// of this client's own, which only this client reads: it keeps the tasks its calls leave
    /// behind, for its own `recover`, and costs an ordinary call nothing.
    pub fn ledger(mut self, ledger: Arc<dyn Ledger>) -> Self {
        self.ledger = LedgerChoice::Shared(ledger);
        self
    }

    /// The ledger named as configuration (and the Python and Node bindings) name one:
    /// `"memory"` (the client's own, the default), `"none"` ([`ClientBuilder::no_ledger`]),
    /// or a `redis://`/`rediss://` URL with `identity`, the worker's stable name (a
    /// `RedisLedger`, the `redis` feature). An identity goes with a Redis URL only. Fails
    /// [`ErrorKind::InvalidConfig`] for anything else; the error names a refused string's
    /// scheme alone, since the rest of a URL may carry a password.
    pub fn ledger_named(self, name: &str, identity: Option<&str>) -> Result<Self, Error> {
        let redis = name.starts_with("redis://") || name.starts_with("rediss://");
        match (name, identity) {
            ("memory", None) => Ok(self),
            ("none", None) => Ok(self.no_ledger()),
            (url, Some(identity)) if redis => {
                #[cfg(feature = "redis")]
                {
                    let ledger = super::ledger::RedisLedger::new(url, identity)?;
                    Ok(self.ledger(Arc::new(ledger)))
                }
                #[cfg(not(feature = "redis"))]
                {
                    let _ = (url, identity);
                    Err(invalid(
                        "a Redis ledger needs the `redis` feature".to_owned(),
                    ))
                }
            }
            (_, None) if redis => Err(invalid(
                "a Redis ledger needs an identity: the worker's stable name".to_owned(),
            )),
            (_, Some(_)) => Err(invalid(
                "an identity names a Redis ledger: give its redis:// URL".to_owned(),
            )),
            (other, None) => Err(invalid(format!(
                "unknown ledger{}: \"memory\", \"none\" or a redis:// URL",
                scheme_of(other)
            ))),
        }
    }

    /// Records no call at all: nothing is written, and [`Client::recover`] finds nothing.
    /// Default: a [`MemoryLedger`] of this client's own.
    pub fn no_ledger(mut self) -> Self {
        self.ledger = LedgerChoice::None;
        self
    }

    /// Whether ledger entries name the session each call went out on (legacy era). A session
    /// id is a credential of sorts: it is left out unless asked for. Default: `false`.
    pub fn record_session_ids(mut self, record: bool) -> Self {
        self.record_session_ids = record;
        self
    }

    /// Reconnect delays and caps. Default: [`ReconnectPolicy::default`].
    pub fn reconnect(mut self, policy: ReconnectPolicy) -> Self {
        self.session.reconnect = policy;
        self
    }

    /// Largest SSE event accepted; a larger one fails its stream with
    /// [`ErrorKind::TooLarge`]. Default: 16 MiB.
    pub fn max_event_size(mut self, bytes: usize) -> Self {
        self.session.max_event_size = bytes;
        self
    }

    /// Largest JSON response body accepted. Default: 16 MiB.
    pub fn max_body_size(mut self, bytes: usize) -> Self {
        self.session.max_body_size = bytes;
        self
    }

    /// Whether to open the standalone GET stream after `initialize`. Default: `true`.
    pub fn open_listen_stream(mut self, open: bool) -> Self {
        self.session.open_listen_stream = open;
        self
    }

    /// When a keyed tool call may be re-sent after an interruption. Default:
    /// [`ResendPolicy::ServerAdvertised`].
    pub fn resend_policy(mut self, policy: ResendPolicy) -> Self {
        self.session.resend_policy = policy;
        self
    }

    /// Whether a 503 with `Retry-After` in seconds proves a request was not processed, so the
    /// call is sent again after that delay, keyed or not (when the delay fits in its deadline;
    /// a `Retry-After` given as an HTTP date is not read, and the 503 leaves the outcome
    /// unknown).
    /// Default: `true`. Turn it off for a server that may answer 503 after it started
    /// processing: a 503 then leaves the outcome unknown, like any other 5xx. See
    /// [`SessionConfig::unavailable_not_processed`](crate::proto::SessionConfig::unavailable_not_processed).
    pub fn unavailable_not_processed(mut self, not_processed: bool) -> Self {
        self.session.unavailable_not_processed = not_processed;
        self
    }

    /// Fixes the seed of the reconnect jitter (for reproducible tests). Default: from entropy.
    pub fn jitter_seed(mut self, seed: u64) -> Self {
        self.jitter_seed = Some(seed);
        self
    }

    /// **Unsafe: for comparison only.** Behaves like the stock SDKs: trusts replayed streams
    /// and clean ends, ignores capability hashes, sequenced event ids and rejection bodies.
    /// This reintroduces exactly the failure this crate exists to prevent (wrong answers
    /// with no error). Default: `false`.
    pub fn dangerous_trust_replay(mut self, trust: bool) -> Self {
        self.session.dangerous_trust_replay = trust;
        self
    }

    /// TCP connect timeout of the built-in HTTP client. Default: 10 s. Ignored with
    /// [`ClientBuilder::http_client`].
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Uses this HTTP client (TLS roots, proxies, …) instead of the built-in one. It should
    /// not follow redirects: a redirected POST could run twice. Nor should its default
    /// headers name a header the protocol sets (`Mcp-Session-Id`, `Idempotency-Key`,
    /// `Last-Event-ID`, `Mcp-*`, …): reqwest adds them to every request that lacks them, and
    /// the requests that lack them on purpose would carry them (an `Idempotency-Key` on every
    /// unkeyed call, answered from the first call's stored result). [`ClientBuilder::header`]
    /// refuses such names; these cannot be checked here.
    ///
    /// The built-in client does not follow redirects, connects with `TCP_NODELAY`, and
    /// for a plain `http://` endpoint loads no TLS trust anchors (they are most of an idle
    /// client's memory); reaching a plain endpoint through an `https://` proxy therefore
    /// needs a client of your own.
    pub fn http_client(mut self, client: reqwest::Client) -> Self {
        self.http = Some(client);
        self
    }

    /// Gets the bearer token of every request from `provider` (resumes, the standalone
    /// stream and DELETE included), and a fresh one, once, when the server refuses it: see
    /// [`TokenProvider`]. Default: none.
    pub fn auth(mut self, provider: impl TokenProvider) -> Self {
        self.auth = Some(Arc::new(provider));
        self
    }

    /// Answers the server's `sampling/createMessage` requests, and declares the `sampling`
    /// capability at `initialize`. The handler gets the typed request and a
    /// [`RequestContext`] (request id, cancellation by the server).
    ///
    /// ```no_run
    /// use mcp_resume::Client;
    /// use mcp_resume::client::models::CreateMessageResult;
    ///
    /// let client = Client::builder("http://127.0.0.1:8080/mcp")
    ///     .on_sampling(|request, _ctx| async move {
    ///         let prompt = request.messages.last().map(|m| m.text()).unwrap_or_default();
    ///         Ok(CreateMessageResult::new("my-model", format!("echo: {prompt}")))
    ///     })
    ///     .build()?;
    /// # Ok::<(), mcp_resume::Error>(())
    /// ```
    pub fn on_sampling<F, Fut>(mut self, handler: F) -> Self
    where
        F: Fn(CreateMessageRequest, RequestContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<CreateMessageResult, RpcError>> + Send + 'static,
    {
        self.handlers.set_sampling(handler);
        self
    }

    /// Answers the server's `elicitation/create` requests, and declares the `elicitation`
    /// capability (form mode) at `initialize`. To offer URL mode as well, add
    /// `{"elicitation": {"url": {}}}` with [`ClientBuilder::client_capabilities`].
    pub fn on_elicitation<F, Fut>(mut self, handler: F) -> Self
    where
        F: Fn(ElicitRequest, RequestContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<ElicitResult, RpcError>> + Send + 'static,
    {
        self.handlers.set_elicitation(handler);
        self
    }

    /// Answers the server's `roots/list` requests, and declares the `roots` capability (with
    /// `listChanged`: call [`Client::notify_roots_changed`] when they change) at `initialize`.
    pub fn on_roots<F, Fut>(mut self, handler: F) -> Self
    where
        F: Fn(RequestContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Vec<Root>, RpcError>> + Send + 'static,
    {
        self.handlers.set_roots(handler);
        self
    }

    /// Answers the server-to-client requests no typed handler takes (any method, e.g. one
    /// of an extension). Without any handler for a method, the server gets JSON-RPC error
    /// -32601 (method not found); `ping` is always answered by the client itself. This
    /// handler declares no capability: declare what it answers with
    /// [`ClientBuilder::client_capabilities`]. When the server cancels the request, its future
    /// is dropped and no answer is sent.
    pub fn on_server_request<F, Fut>(mut self, handler: F) -> Self
    where
        F: Fn(ServerRequest) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, RpcError>> + Send + 'static,
    {
        self.handlers
            .set_fallback(Arc::new(move |req| Box::pin(handler(req))));
        self
    }

    /// Validates the configuration and creates the client.
    ///
    /// Does not touch the network and does not need a tokio runtime: the driver task is
    /// spawned on the runtime of the first call that needs it (every async method of
    /// [`Client`] must run inside a tokio runtime with the time driver enabled).
    pub fn build(self) -> Result<Client, Error> {
        let config = self.validate()?;
        Ok(Client::from_config(config))
    }

    pub(crate) fn validate(self) -> Result<ClientConfig, Error> {
        let url = Url::parse(&self.url)
            .map_err(|e| Error::with_source(ErrorKind::InvalidConfig, "invalid endpoint URL", e))?;
        match url.scheme() {
            "http" => {}
            "https" if cfg!(feature = "rustls") || self.http.is_some() => {}
            "https" => {
                return Err(invalid(
                    "https:// endpoints need the `rustls` feature (on by default) or `http_client`",
                ))
            }
            other => return Err(invalid(format!("unsupported URL scheme `{other}`"))),
        }
        if !matches!(url.host_str(), Some(host) if !host.is_empty()) {
            return Err(invalid("endpoint URL has no host"));
        }

        let mut session = self.session;
        if let Some(version) = self.protocol_version {
            if version.is_modern() {
                return Err(invalid(format!(
                    "protocol version `{version}` has no `initialize`: choose the era with `era`"
                )));
            }
            session.protocol_version = version;
        }
        if !session.client_capabilities.is_object() {
            return Err(invalid("client capabilities must be a JSON object"));
        }
        merge_capabilities(
            &mut session.client_capabilities,
            self.handlers.capabilities(),
        );
        if session.call_timeout.is_zero() {
            return Err(invalid("call_timeout must be greater than zero"));
        }
        if session.max_event_size == 0 || session.max_body_size == 0 {
            return Err(invalid(
                "max_event_size and max_body_size must be greater than zero",
            ));
        }
        if session.client_name.is_empty() {
            return Err(invalid("client name must not be empty"));
        }
        session.reconnect.validate()?;
        if self.connect_timeout.is_zero() {
            return Err(invalid("connect_timeout must be greater than zero"));
        }
        session.jitter_seed = self
            .jitter_seed
            .unwrap_or_else(|| uuid::Uuid::new_v4().as_u64_pair().0);

        let mut headers = HeaderMap::new();
        for (name, value) in &self.headers {
            let name = HeaderName::from_bytes(name.as_bytes()).map_err(|e| {
                Error::with_source(
                    ErrorKind::InvalidConfig,
                    format!("invalid header name `{name}`"),
                    e,
                )
            })?;
            if RESERVED_HEADERS.contains(&name.as_str())
                || name.as_str().starts_with(RESERVED_PREFIX)
            {
                return Err(invalid(format!(
                    "header `{name}` is set by the protocol and cannot be overridden"
                )));
            }
            let value = HeaderValue::from_str(value).map_err(|e| {
                Error::with_source(
                    ErrorKind::InvalidConfig,
                    format!("invalid value for header `{name}`"),
                    e,
                )
            })?;
            headers.append(name, value);
        }
        if self.bearer.is_some() && self.auth.is_some() {
            return Err(invalid(
                "bearer_token and auth both set the Authorization header: choose one",
            ));
        }
        if let Some(token) = &self.bearer {
            if token.is_empty() {
                return Err(invalid("bearer token must not be empty"));
            }
            let mut value = HeaderValue::from_str(&format!("Bearer {token}"))
                .map_err(|_| invalid("bearer token is not a valid header value"))?;
            value.set_sensitive(true);
            headers.insert(AUTHORIZATION, value);
        }

        let http = match self.http {
            Some(client) => client,
            None => {
                let builder = reqwest::Client::builder()
                    // A redirected POST could execute twice; MCP endpoints do not redirect.
                    .redirect(reqwest::redirect::Policy::none())
                    .connect_timeout(self.connect_timeout)
                    .tcp_nodelay(true);
                // A plain-http endpoint never verifies a certificate, and the platform's
                // trust anchors are most of an idle client's memory (about 85 KB).
                #[cfg(feature = "rustls")]
                let builder = if url.scheme() == "http" {
                    builder.tls_certs_only([])
                } else {
                    builder
                };
                builder.build().map_err(|e| {
                    Error::with_source(ErrorKind::InvalidConfig, "cannot build the HTTP client", e)
                })?
            }
        };

        let private_ledger = matches!(self.ledger, LedgerChoice::Own);
        let ledger = match self.ledger {
            LedgerChoice::Own => Some(Arc::new(MemoryLedger::new()) as Arc<dyn Ledger>),
            LedgerChoice::Shared(ledger) => Some(ledger),
            LedgerChoice::None => None,
        };
        // A ledger only this client reads keeps the tasks its calls leave behind, and no
        // checkpoint of a call in flight: its own `recover` could never read one.
        session.checkpoints = ledger.is_some() && !private_ledger;
        #[cfg(feature = "otel")]
        let telemetry = self.telemetry.instrument(&url);
        Ok(ClientConfig {
            url,
            headers,
            session,
            http,
            era_cache: self.era_cache.unwrap_or_else(EraCache::global),
            task_store: self.task_store,
            ledger,
            private_ledger,
            record_session_ids: self.record_session_ids,
            handlers: self.handlers,
            // Each client its own instance where the provider keeps state per client (what
            // `TokenProvider::close` ends): a builder is a template for many clients.
            auth: self.auth.map(|auth| auth.for_client().unwrap_or(auth)),
            #[cfg(feature = "otel")]
            telemetry,
        })
    }
}

fn invalid(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidConfig, message)
}

/// What an error may say of a ledger string it refused: its scheme alone (` "valkey://"`),
/// or nothing. The rest of a URL may carry a password, and errors end up in logs.
fn scheme_of(text: &str) -> String {
    match text.split_once("://") {
        Some((scheme, _))
            if !scheme.is_empty()
                && scheme.len() <= 32
                && scheme
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.')) =>
        {
            format!(" {:?}", format!("{scheme}://"))
        }
        _ => String::new(),
    }
}
