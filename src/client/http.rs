//! One HTTP exchange, performed with reqwest as a future (polled by the driver, or by the
//! caller of a call), reported as the inputs the session expects (head, data, end, or a
//! transport failure).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::FutureExt;
use http::header::{HeaderMap, HeaderName, AUTHORIZATION};
use reqwest::Url;

use super::auth::{Presentation, TokenProvider, TokenRequest};
use super::body::{BodyReader, Limits};
use crate::auth::AuthChallenge;
use crate::error::Error;
use crate::proto::{
    DecodedEvent, DecodedJson, HttpId, HttpMethod, HttpPurpose, HttpRequest, TransportFailure,
};

/// What happened to an exchange, in order: `Head`, then the body's events (`Data`, `Json`,
/// `Events`), then `End`; or `Failed` at any point, or `TooLarge` where the body broke a
/// bound. A refusal of the credentials (after the one retry with a fresh token, when a
/// provider is configured) is an ordinary head: the session reads its challenge.
#[derive(Debug)]
pub(crate) enum ExchangeEvent {
    Head {
        id: HttpId,
        status: u16,
        headers: HeaderMap,
    },
    /// Body bytes as they came (a body not read ahead).
    Data {
        id: HttpId,
        bytes: Bytes,
    },
    End {
        id: HttpId,
    },
    Failed {
        id: HttpId,
        failure: TransportFailure,
    },
    /// A whole JSON body and the one message it decodes to: `Data` with `body`, then `End`.
    Json {
        id: HttpId,
        body: Bytes,
        decoded: DecodedJson,
    },
    /// The events an SSE body's chunks completed, decoded ahead.
    Events {
        id: HttpId,
        events: Vec<DecodedEvent>,
    },
    /// An SSE event grew past the bound: the body is abandoned.
    TooLarge {
        id: HttpId,
        error: Error,
    },
}

impl ExchangeEvent {
    pub(crate) fn id(&self) -> HttpId {
        match self {
            ExchangeEvent::Head { id, .. }
            | ExchangeEvent::Data { id, .. }
            | ExchangeEvent::End { id }
            | ExchangeEvent::Failed { id, .. }
            | ExchangeEvent::Json { id, .. }
            | ExchangeEvent::Events { id, .. }
            | ExchangeEvent::TooLarge { id, .. } => *id,
        }
    }
}

/// Where an exchange reports what happens to it.
pub(crate) trait ExchangeSink {
    /// Takes `events` (draining them), in order, in one report: what arrived together.
    /// `false` when the exchange is no longer wanted (aborted, or over): the exchange stops
    /// reading then, and events after the one that ended it are dropped.
    fn report(&self, events: &mut Vec<ExchangeEvent>) -> bool;

    /// Takes one event on its own.
    fn report_one(&self, event: ExchangeEvent) -> bool {
        self.report(&mut vec![event])
    }
}

/// An exchange to perform: the request, and (with `otel`) the span it is traced under.
pub(crate) struct Outgoing {
    pub(crate) request: HttpRequest,
    #[cfg(feature = "otel")]
    pub(crate) attempt: super::telemetry::Attempt,
}

/// Everything an exchange needs besides the request (shared by every exchange of a client).
pub(crate) struct Endpoint {
    pub(crate) http: reqwest::Client,
    pub(crate) url: Url,
    /// The application's headers (authorization, custom), sent on every request.
    pub(crate) headers: Arc<HeaderMap>,
    /// Asked for the bearer token of every request, when configured.
    pub(crate) auth: Option<Arc<dyn TokenProvider>>,
    /// The session's bounds on bodies, applied where bodies are read ahead.
    pub(crate) limits: Limits,
    /// Bound on exchanges the session sets no deadline for (notifications, responses to the
    /// server, DELETE), so a server that never answers them cannot pile up connections.
    pub(crate) fire_and_forget_timeout: Duration,
    #[cfg(feature = "otel")]
    pub(crate) telemetry: Option<super::telemetry::Instrumentation>,
}

impl Endpoint {
    /// Performs the request, reporting to `sink`. Returns when the exchange is over or the
    /// sink no longer wants it; dropping the future stops it early.
    pub(crate) async fn run(&self, outgoing: Outgoing, sink: &impl ExchangeSink) {
        let request = outgoing.request;
        let id = request.id;
        let bounded = matches!(
            request.purpose,
            HttpPurpose::Notify | HttpPurpose::Terminate
        );
        // Whether a copy of the request may be at the server: false while it waits for its
        // credentials (none went yet, or a refusal proved the one that went was not taken).
        let on_wire = AtomicBool::new(false);
        #[cfg(feature = "otel")]
        let traced = outgoing.attempt.begin();
        #[cfg(feature = "otel")]
        let exchange = self.exchange(request, &traced, sink, &on_wire);
        #[cfg(not(feature = "otel"))]
        let exchange = self.exchange(request, sink, &on_wire);
        // Requests, resumes and the listen stream are bounded by the session's deadlines or
        // are meant to stay open.
        if !bounded {
            return exchange.await;
        }
        let limit = self.fire_and_forget_timeout;
        if tokio::time::timeout(limit, exchange).await.is_err() {
            tracing::debug!(http = id.0, "exchange timed out");
            let failure = if on_wire.load(Ordering::Relaxed) {
                TransportFailure::Lost(format!("no answer within {limit:?}"))
            } else {
                // Never sent: the session sends it again, as after a refused connection.
                TransportFailure::Connect(format!("no credentials within {limit:?}"))
            };
            let event = ExchangeEvent::Failed { id, failure };
            #[cfg(feature = "otel")]
            traced.observe(std::slice::from_ref(&event));
            sink.report_one(event);
        }
    }

    async fn exchange(
        &self,
        mut request: HttpRequest,
        #[cfg(feature = "otel")] traced: &super::telemetry::Traced,
        sink: &impl ExchangeSink,
        on_wire: &AtomicBool,
    ) {
        let id = request.id;
        let mut headers = std::mem::take(&mut request.headers);
        // The app's headers (authorization, custom) go beside the protocol's; the builder
        // refused any that would clash with one.
        for (name, value) in self.headers.iter() {
            headers.append(name.clone(), value.clone());
        }
        #[cfg(feature = "otel")]
        traced.inject(&mut headers);
        let fail = |failure: TransportFailure| {
            tracing::debug!(http = id.0, ?failure, "request failed");
            let event = ExchangeEvent::Failed { id, failure };
            #[cfg(feature = "otel")]
            traced.observe(std::slice::from_ref(&event));
            sink.report_one(event);
        };
        let mut token = match self.token(None, None).await {
            Ok(token) => token,
            Err(failure) => {
                fail(failure);
                return;
            }
        };
        let mut retried = false;
        // A proof refused for want of the server's nonce is made again once, same token.
        let mut proof_retried = false;
        let mut response = loop {
            // A refusal is answered once, with a fresh token: a copy is kept only for that.
            let attempt = if self.auth.is_some() && !(retried && proof_retried) {
                headers.clone()
            } else {
                std::mem::take(&mut headers)
            };
            // Presented anew for each attempt: a DPoP proof is good for one request only.
            let credentials = match self.present(&request, token.as_deref()) {
                Ok(credentials) => credentials,
                Err(failure) => {
                    fail(failure);
                    return;
                }
            };
            on_wire.store(true, Ordering::Relaxed);
            let response = match self.send(&request, attempt, credentials).await {
                Ok(response) => response,
                Err(err) => {
                    fail(classify(err));
                    return;
                }
            };
            let status = response.status().as_u16();
            let challenge = AuthChallenge::from_response(status, response.headers());
            if let Some(provider) = &self.auth {
                let observed = catch_unwind(AssertUnwindSafe(|| {
                    provider.observe(&self.url, status, response.headers(), challenge.as_ref())
                }));
                let again = observed.unwrap_or_else(|_| {
                    tracing::error!(
                        http = id.0,
                        "the token provider panicked observing an answer"
                    );
                    false
                });
                // Only a refusal that carries a challenge proves the request was not
                // processed: a re-send after anything else could run the call twice.
                if again && challenge.is_some() && token.is_some() && !proof_retried {
                    proof_retried = true;
                    tracing::debug!(http = id.0, "the server wants a proof with its nonce");
                    continue;
                }
            }
            let Some(challenge) = challenge else {
                break response;
            };
            if self.auth.is_some() && !retried {
                // A refusal of the credentials proves the request was not processed: ask once
                // for a fresh token and send the same request again.
                retried = true;
                // The refusal proved the request was not taken: none is at the server while
                // the fresh token is awaited.
                on_wire.store(false, Ordering::Relaxed);
                tracing::debug!(http = id.0, %challenge, "credentials refused: asking for a fresh token");
                match self.token(Some(challenge.clone()), token.take()).await {
                    Ok(fresh) => {
                        token = fresh;
                        continue;
                    }
                    Err(failure) => {
                        tracing::debug!(http = id.0, ?failure, "no fresh token");
                    }
                }
            }
            tracing::debug!(http = id.0, %challenge, "credentials refused");
            break response;
        };
        let status = response.status().as_u16();
        tracing::trace!(http = id.0, status, "response head");
        #[cfg(feature = "otel")]
        traced.version(response.version());
        // Taken, not cloned: the body stream does not need them.
        let headers = std::mem::take(response.headers_mut());
        let stream = response.bytes_stream();
        #[cfg(feature = "otel")]
        let stream = traced.watch(status, &headers, stream);
        let mut body = BodyReader::new(id, stream, status, &headers, self.limits);
        let mut batch = vec![ExchangeEvent::Head {
            id,
            status,
            headers,
        }];
        // The head goes with what came with it (most answers are whole by then).
        body.ready(&mut batch);
        loop {
            #[cfg(feature = "otel")]
            traced.observe(&batch);
            if !batch.is_empty() && !sink.report(&mut batch) {
                body.release();
                return;
            }
            if body.is_done() {
                return;
            }
            body.next(&mut batch).await;
        }
    }
}

impl Endpoint {
    /// Tells the token provider, if any, that its client has stopped
    /// ([`TokenProvider::close`]). Its panic is caught: it costs the provider's own cleanup,
    /// not the rest of a close (the ledger's claims let go) nor the task that closes, which
    /// may be a driver task already unwinding, where a second panic aborts the process.
    pub(crate) fn close_auth(&self) {
        let Some(provider) = &self.auth else {
            return;
        };
        if catch_unwind(AssertUnwindSafe(|| provider.close())).is_err() {
            tracing::error!("the token provider panicked as its client stopped");
        }
    }

    /// The provider's token, if one is configured and it has one; a provider's failure means
    /// the request is never sent. `challenge` and `refused_token` come from a refusal. The
    /// request is built only for a provider: a client without one pays nothing per exchange.
    async fn token(
        &self,
        challenge: Option<AuthChallenge>,
        refused_token: Option<String>,
    ) -> Result<Option<String>, TransportFailure> {
        let Some(provider) = &self.auth else {
            return Ok(None);
        };
        let request = TokenRequest {
            challenge,
            refused_token,
            url: Some(self.url.as_str().to_owned()),
        };
        // The request is not sent without its credential: a provider that fails, panics
        // included, fails it as a connection that could not be made. The provider is called
        // inside the guarded future: what it runs before handing out its own future is
        // guarded too.
        let credential =
            AssertUnwindSafe(async { provider.credential(request).await }).catch_unwind();
        match credential.await {
            Ok(Ok(token)) => Ok(token),
            Ok(Err(err)) => Err(TransportFailure::Connect(format!(
                "the token provider failed: {err}"
            ))),
            Err(_) => Err(provider_panicked()),
        }
    }

    /// How `token` is presented on this one request (`Bearer`, or `DPoP` with a fresh
    /// proof), as the provider says; a provider's failure means the request is never sent.
    fn present(
        &self,
        request: &HttpRequest,
        token: Option<&str>,
    ) -> Result<Option<Presentation>, TransportFailure> {
        let (Some(provider), Some(token)) = (&self.auth, token) else {
            return Ok(None);
        };
        let presented = catch_unwind(AssertUnwindSafe(|| {
            provider.present(token, &method(request.method), &self.url)
        }));
        match presented {
            Ok(presented) => presented.map(Some).map_err(|err| {
                TransportFailure::Connect(format!("the token provider failed: {err}"))
            }),
            Err(_) => Err(provider_panicked()),
        }
    }

    /// Sends the request once, with `headers` (the protocol's and the application's) and the
    /// credentials.
    async fn send(
        &self,
        request: &HttpRequest,
        mut headers: HeaderMap,
        credentials: Option<Presentation>,
    ) -> Result<reqwest::Response, reqwest::Error> {
        if let Some(credentials) = credentials {
            headers.insert(AUTHORIZATION, credentials.authorization);
            if let Some(proof) = credentials.proof {
                headers.insert(HeaderName::from_static("dpop"), proof);
            }
        }
        let mut http = reqwest::Request::new(method(request.method), self.url.clone());
        *http.headers_mut() = headers;
        if let Some(body) = &request.body {
            *http.body_mut() = Some(body.clone().into());
        }
        self.http.execute(http).await
    }
}

/// A token provider's panic before the request left: logged, and the request not sent.
fn provider_panicked() -> TransportFailure {
    tracing::error!("the token provider panicked: the request is not sent");
    TransportFailure::Connect("the token provider panicked".to_owned())
}

fn method(method: HttpMethod) -> reqwest::Method {
    match method {
        HttpMethod::Post => reqwest::Method::POST,
        HttpMethod::Get => reqwest::Method::GET,
        HttpMethod::Delete => reqwest::Method::DELETE,
    }
}

/// `url` without what may carry credentials (user info, query string, fragment), for logs
/// and `Debug`: scheme, host, port and path.
pub(crate) fn redacted_url(url: &str) -> String {
    match Url::parse(url) {
        Ok(url) => {
            let port = url.port().map(|p| format!(":{p}")).unwrap_or_default();
            format!(
                "{}://{}{port}{}",
                url.scheme(),
                url.host_str().unwrap_or_default(),
                url.path()
            )
        }
        Err(_) => "<unparseable URL>".to_owned(),
    }
}

/// Only a failure to establish the connection proves the request was never sent.
///
/// The URL is left out of the message: its query may carry credentials, and the message ends
/// up in logs and in errors handed to the application.
fn classify(err: reqwest::Error) -> TransportFailure {
    let (connect, abandoned) = (err.is_connect(), abandoned(&err));
    let message = error_chain(&err.without_url());
    if connect {
        TransportFailure::Connect(message)
    } else if abandoned {
        TransportFailure::Abandoned(message)
    } else {
        TransportFailure::Lost(message)
    }
}

/// A pooled connection's task ran on a runtime that has shut down since (a caller's, whose
/// call made the connection), and hyper says so. Its dispatcher had taken the request: it may
/// have written it before it was dropped (hyper 1's dispatcher encodes and flushes a request
/// in the poll that takes it), so this proves nothing about whether it left.
fn abandoned(err: &(dyn std::error::Error + 'static)) -> bool {
    const DISPATCH_GONE: &str = "dispatch task is gone";
    let mut source: Option<&dyn std::error::Error> = Some(err);
    while let Some(e) = source {
        if e.to_string().contains(DISPATCH_GONE) {
            return true;
        }
        source = e.source();
    }
    false
}

/// reqwest's `Display` omits the cause ("error sending request"); the cause is what helps.
pub(crate) fn error_chain(err: &dyn std::error::Error) -> String {
    let mut message = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    message
}

#[cfg(test)]
mod tests {
    use super::abandoned;

    /// An error whose cause is `cause`, as reqwest wraps hyper's.
    #[derive(Debug)]
    struct Wrapped(&'static str, Option<Box<Wrapped>>);

    impl std::fmt::Display for Wrapped {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }

    impl std::error::Error for Wrapped {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|e| e as _)
        }
    }

    #[test]
    fn a_pooled_connection_whose_runtime_is_gone_abandoned_the_request() {
        let gone = Wrapped(
            "error sending request",
            Some(Box::new(Wrapped(
                "client error (SendRequest)",
                Some(Box::new(Wrapped(
                    "dispatch task is gone: runtime dropped the dispatch task",
                    None,
                ))),
            ))),
        );
        assert!(abandoned(&gone));
        let cut = Wrapped(
            "error sending request",
            Some(Box::new(Wrapped(
                "connection closed before message completed",
                None,
            ))),
        );
        assert!(!abandoned(&cut));
    }
}
