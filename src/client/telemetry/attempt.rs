//! One HTTP request's span, planned where the session asks for the request (under the lock,
//! where its MCP request and its ordinal are known) and started by the exchange that
//! performs it; it ends when the exchange ends or is dropped.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures::{Stream, StreamExt};
use http::header::HeaderMap;
use opentelemetry::trace::{SpanBuilder, SpanContext, Status, TraceContextExt, Tracer};
use opentelemetry::{Context, KeyValue};

use super::{isolate, names, w3c, Instrumentation};
use crate::client::http::ExchangeEvent;
use crate::ids::EventId;
use crate::proto::classify::{content_type, ContentType};
use crate::proto::TransportFailure;
use crate::sse::{SseDecoder, SseEvent};

/// The event ids a request's streams delivered last, newest last: what a resume of one of
/// them presents as `Last-Event-ID` tells which request it continues.
#[derive(Debug, Default)]
pub(super) struct Cursor(Mutex<VecDeque<String>>);

/// How many recent ids are kept: a resume names the last id the session applied, which can
/// trail what the stream delivered when an exchange is aborted mid-read.
const RECENT_IDS: usize = 4;

impl Cursor {
    fn advance(&self, id: &str) {
        let Ok(mut ids) = self.0.lock() else {
            return;
        };
        if id.is_empty() {
            // An empty id resets the stream's cursor.
            ids.clear();
            return;
        }
        if EventId::parse(id).is_err() {
            // The session refuses such an id, so no resume ever presents it: keeping it would
            // only hold up to an event's size (not an id's) per entry.
            return;
        }
        if ids.len() == RECENT_IDS {
            ids.pop_front();
        }
        ids.push_back(id.to_owned());
    }

    /// How recently `id` was seen: 0 for the last id, `None` if not among the recent ones.
    pub(super) fn age_of(&self, id: &str) -> Option<usize> {
        let ids = self.0.lock().ok()?;
        ids.iter().rev().position(|seen| seen == id)
    }
}

/// An HTTP request's span, planned: started by [`Attempt::begin`].
pub(crate) struct Attempt(Option<Box<Planned>>);

/// What an HTTP request is traced as.
enum Trace {
    /// A span of its own, a child of the context.
    Span(Instrumentation, SpanBuilder, Context),
    /// No span (its request's records nothing): it carries its request's context.
    Carry(Option<SpanContext>),
}

struct Planned {
    trace: Trace,
    /// The MCP span of a request the session makes itself (the handshake, a notification),
    /// which ends with this exchange.
    mcp: Option<Context>,
    /// Where the ids of a request's stream are recorded.
    cursor: Option<Arc<Cursor>>,
    max_event_size: usize,
}

impl Attempt {
    /// No span (telemetry disabled).
    pub(crate) fn none() -> Self {
        Attempt(None)
    }

    pub(super) fn planned(
        inst: Instrumentation,
        builder: SpanBuilder,
        parent: Context,
        mcp: Option<Context>,
        cursor: Option<Arc<Cursor>>,
        max_event_size: usize,
    ) -> Self {
        Attempt(Some(Box::new(Planned {
            trace: Trace::Span(inst, builder, parent),
            mcp,
            cursor,
            max_event_size,
        })))
    }

    /// No span of its own: the request of `cx`'s span records nothing. Its stream's ids are
    /// still watched (metrics attribute resumes to their request).
    pub(super) fn unrecorded(cx: &Context, cursor: Arc<Cursor>, max_event_size: usize) -> Self {
        Attempt(Some(Box::new(Planned {
            trace: Trace::Carry(w3c::valid_span(cx)),
            mcp: None,
            cursor: Some(cursor),
            max_event_size,
        })))
    }

    /// Starts the span: the exchange is under way.
    pub(crate) fn begin(self) -> Traced {
        let Some(planned) = self.0 else {
            return Traced::default();
        };
        let Planned {
            trace,
            mcp,
            cursor,
            max_event_size,
        } = *planned;
        let (cx, carried, inst) = match trace {
            Trace::Span(inst, builder, parent) => {
                // The application's span processors run as the span starts.
                let span = inst.contain(|| inst.tracer().build_with_context(builder, &parent));
                (span.map(|span| parent.with_span(span)), None, Some(inst))
            }
            Trace::Carry(carried) => (None, carried, None),
        };
        Traced {
            inst,
            cx,
            carried,
            mcp,
            cursor,
            max_event_size,
            failed: AtomicBool::new(false),
        }
    }
}

/// A started HTTP request's span. Ends when dropped.
#[derive(Default)]
pub(crate) struct Traced {
    /// Whose spans these are (what contains the application's code as they end).
    inst: Option<Instrumentation>,
    cx: Option<Context>,
    /// The context a request without a span of its own carries.
    carried: Option<SpanContext>,
    mcp: Option<Context>,
    cursor: Option<Arc<Cursor>>,
    max_event_size: usize,
    /// An error was recorded: the first one is what ended the request.
    failed: AtomicBool,
}

impl Traced {
    /// Writes the span's context into the request's headers (`traceparent`, `tracestate`).
    pub(crate) fn inject(&self, headers: &mut HeaderMap) {
        let own = self.cx.as_ref().and_then(w3c::valid_span);
        if let Some(span) = own.as_ref().or(self.carried.as_ref()) {
            w3c::inject_headers(headers, span);
        }
    }

    /// What the exchange reports, as it reports it: the status, a failure.
    pub(crate) fn observe(&self, events: &[ExchangeEvent]) {
        let Some(cx) = &self.cx else {
            return;
        };
        for event in events {
            let error = match event {
                ExchangeEvent::Head { status, .. } => {
                    let status = i64::from(*status);
                    let kv = KeyValue::new(names::HTTP_RESPONSE_STATUS_CODE, status);
                    cx.span().set_attribute(kv);
                    // Client spans count 4xx as errors too: the request did not do its job.
                    // (A request's own span does not: its outcome is the JSON-RPC answer's.)
                    if status < 400 {
                        continue;
                    }
                    self.fail(cx, status.to_string());
                    continue;
                }
                ExchangeEvent::Failed { failure, .. } => match failure {
                    TransportFailure::Connect(_) => "connect_failed",
                    _ => "connection_lost",
                },
                ExchangeEvent::TooLarge { .. } => "too_large",
                _ => continue,
            };
            if let Some(mcp) = &self.mcp {
                set_error(mcp, error.to_owned());
            }
            self.fail(cx, error.to_owned());
        }
    }

    /// Records the error that ended the request (the first one only).
    fn fail(&self, cx: &Context, error: String) {
        if !self.failed.swap(true, Ordering::Relaxed) {
            set_error(cx, error);
        }
    }

    /// `network.protocol.version` of the answer.
    pub(crate) fn version(&self, version: http::Version) {
        let Some(cx) = &self.cx else {
            return;
        };
        let name = match version {
            http::Version::HTTP_09 => "0.9",
            http::Version::HTTP_10 => "1.0",
            http::Version::HTTP_11 => "1.1",
            http::Version::HTTP_2 => "2",
            http::Version::HTTP_3 => "3",
            _ => return,
        };
        cx.span()
            .set_attribute(KeyValue::new(names::NETWORK_PROTOCOL_VERSION, name));
    }

    /// The body, with the ids of a request's event stream recorded as they pass.
    pub(crate) fn watch<S, E>(
        &self,
        status: u16,
        headers: &HeaderMap,
        body: S,
    ) -> impl Stream<Item = Result<Bytes, E>>
    where
        S: Stream<Item = Result<Bytes, E>>,
    {
        let mut watching = self
            .cursor
            .clone()
            .filter(|_| (200..300).contains(&status) && content_type(headers) == ContentType::Sse)
            .map(|cursor| (cursor, SseDecoder::new(self.max_event_size), Vec::new()));
        body.inspect(move |chunk| {
            let (Some((cursor, decoder, events)), Ok(chunk)) = (&mut watching, chunk) else {
                return;
            };
            if decoder.feed(chunk, events).is_err() {
                // Past the bound: the session abandons the stream anyway.
                watching = None;
                return;
            }
            for SseEvent { id, .. } in events.drain(..) {
                if let Some(id) = id {
                    cursor.advance(&id);
                }
            }
        })
    }
}

impl Drop for Traced {
    fn drop(&mut self) {
        // The application's span processors run as the spans end; the contexts go with them
        // (the last reference to a span ends it too).
        for cx in [self.cx.take(), self.mcp.take()].into_iter().flatten() {
            let end = move || {
                cx.span().end();
                drop(cx);
            };
            match &self.inst {
                Some(inst) => inst.caught(end),
                None => isolate(end),
            };
        }
    }
}

fn set_error(cx: &Context, error: String) {
    let span = cx.span();
    span.set_status(Status::error(error.clone()));
    span.set_attribute(KeyValue::new(names::ERROR_TYPE, error));
}

#[cfg(test)]
mod tests {
    use futures::stream;
    use http::header::{HeaderValue, CONTENT_TYPE};

    use super::*;

    /// Ids the session refuses are never the `Last-Event-ID` of a resume: the cursor keeps
    /// none of them, however large the stream's events may be.
    #[tokio::test]
    async fn the_cursor_keeps_no_id_the_session_refuses() {
        let cursor = Arc::new(Cursor::default());
        let traced = Attempt::unrecorded(&Context::new(), cursor.clone(), 16 << 20).begin();
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
        let huge = "x".repeat(4 << 20);
        let chunks = (0..4).map(|_| Ok::<_, ()>(Bytes::from(format!("id: {huge}\ndata:\n\n"))));
        let body = traced.watch(200, &headers, stream::iter(chunks));
        let _: Vec<_> = body.collect().await;

        let kept: usize = cursor.0.lock().unwrap().iter().map(String::len).sum();
        assert!(kept <= RECENT_IDS * EventId::MAX_LEN, "{kept} bytes kept");
    }
}
