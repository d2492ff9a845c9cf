//! One HTTP exchange, performed with reqwest in its own task and reported back to the driver
//! as the inputs the session expects (head, data, end, or a transport failure).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use http::header::HeaderMap;
use reqwest::Url;
use tokio::sync::mpsc;

use crate::proto::{HttpId, HttpMethod, HttpPurpose, HttpRequest, TransportFailure};

/// What happened to an exchange, in order: `Head`, any `Data`, then `End`; or `Failed` at
/// any point.
#[derive(Debug)]
pub(crate) enum ExchangeEvent {
    Head {
        id: HttpId,
        status: u16,
        headers: HeaderMap,
    },
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
}

impl ExchangeEvent {
    pub(crate) fn id(&self) -> HttpId {
        match self {
            ExchangeEvent::Head { id, .. }
            | ExchangeEvent::Data { id, .. }
            | ExchangeEvent::End { id }
            | ExchangeEvent::Failed { id, .. } => *id,
        }
    }
}

/// Everything an exchange task needs besides the request.
#[derive(Clone)]
pub(crate) struct Endpoint {
    pub(crate) http: reqwest::Client,
    pub(crate) url: Url,
    /// The application's headers (authorization, custom), sent on every request.
    pub(crate) headers: Arc<HeaderMap>,
    /// Bound on exchanges the session sets no deadline for (notifications, responses to the
    /// server, DELETE), so a server that never answers them cannot pile up connections.
    pub(crate) fire_and_forget_timeout: Duration,
}

impl Endpoint {
    /// Performs `request`, reporting on `tx`. Returns when the exchange is over or the driver
    /// is gone; the driver aborts the task to stop it early.
    pub(crate) async fn run(self, request: HttpRequest, tx: mpsc::Sender<ExchangeEvent>) {
        let id = request.id;
        match request.purpose {
            HttpPurpose::Notify | HttpPurpose::Terminate => {
                let limit = self.fire_and_forget_timeout;
                let exchange = self.exchange(request, tx.clone());
                if tokio::time::timeout(limit, exchange).await.is_err() {
                    tracing::debug!(http = id.0, "exchange timed out");
                    let failure = TransportFailure::Lost(format!("no answer within {limit:?}"));
                    let _ = tx.send(ExchangeEvent::Failed { id, failure }).await;
                }
            }
            // Requests, resumes and the listen stream are bounded by the session's deadlines
            // or are meant to stay open.
            _ => self.exchange(request, tx).await,
        }
    }

    async fn exchange(self, request: HttpRequest, tx: mpsc::Sender<ExchangeEvent>) {
        let id = request.id;
        let report = |event| {
            let tx = tx.clone();
            async move { tx.send(event).await.is_ok() }
        };
        let mut headers = request.headers;
        // The app's headers (authorization, custom) go beside the protocol's; the builder
        // refused any that would clash with one.
        for (name, value) in self.headers.iter() {
            headers.append(name.clone(), value.clone());
        }
        let method = match request.method {
            HttpMethod::Post => reqwest::Method::POST,
            HttpMethod::Get => reqwest::Method::GET,
            HttpMethod::Delete => reqwest::Method::DELETE,
        };
        let mut builder = self.http.request(method, self.url.clone()).headers(headers);
        if let Some(body) = request.body {
            builder = builder.body(body);
        }
        let mut response = match builder.send().await {
            Ok(response) => response,
            Err(err) => {
                let failure = classify(err);
                tracing::debug!(http = id.0, ?failure, "request failed");
                report(ExchangeEvent::Failed { id, failure }).await;
                return;
            }
        };
        let status = response.status().as_u16();
        tracing::trace!(http = id.0, status, "response head");
        let head = ExchangeEvent::Head {
            id,
            status,
            // Taken, not cloned: the body stream does not need them.
            headers: std::mem::take(response.headers_mut()),
        };
        if !report(head).await {
            return;
        }
        let mut body = response.bytes_stream();
        while let Some(chunk) = body.next().await {
            let event = match chunk {
                Ok(bytes) if bytes.is_empty() => continue,
                Ok(bytes) => ExchangeEvent::Data { id, bytes },
                Err(err) => {
                    let failure = TransportFailure::Lost(error_chain(&err.without_url()));
                    tracing::debug!(http = id.0, ?failure, "response body failed");
                    report(ExchangeEvent::Failed { id, failure }).await;
                    return;
                }
            };
            if !report(event).await {
                return;
            }
        }
        report(ExchangeEvent::End { id }).await;
    }
}

/// Only a failure to establish the connection proves the request was never sent.
///
/// The URL is left out of the message: its query may carry credentials, and the message ends
/// up in logs and in errors handed to the application.
fn classify(err: reqwest::Error) -> TransportFailure {
    let connect = err.is_connect();
    let message = error_chain(&err.without_url());
    if connect {
        TransportFailure::Connect(message)
    } else {
        TransportFailure::Lost(message)
    }
}

/// reqwest's `Display` omits the cause ("error sending request"); the cause is what helps.
fn error_chain(err: &dyn std::error::Error) -> String {
    let mut message = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    message
}
