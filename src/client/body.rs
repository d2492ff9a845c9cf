//! A response body read as exchange events, decoded before the session's lock is taken.
//!
//! A success body of JSON or SSE is parsed here, in the task that reads it, with the
//! session's own bounds: a JSON body whole ([`ExchangeEvent::Json`]), an SSE body in the
//! events its chunks complete ([`ExchangeEvent::Events`]). The session then only applies what
//! the body says. Every other body (a refusal's, one of another type) is handed over as it
//! comes. What is taken in one go is bounded ([`BATCH_BYTES`]), so one report, and one hold
//! of the lock, covers a bounded part of a body however fast the server sends.

use std::time::Duration;

use bytes::Bytes;
use futures::{FutureExt, Stream, StreamExt};
use http::HeaderMap;

use super::http::{error_chain, ExchangeEvent};
use crate::proto::{
    read_ahead, BodyFormat, DecodedEvent, DecodedJson, HttpId, SseAhead, TransportFailure,
};

/// The most of a body taken in one go (one report to the session).
pub(crate) const BATCH_BYTES: usize = 256 * 1024;
/// How long a body nobody wants any more is read on for its end, so that its connection can
/// be reused (a server that ends an SSE answer a moment after its last event).
const LATE_END_WAIT: Duration = Duration::from_millis(100);
/// How much of such a body is read before giving up on its connection.
const LATE_END_BYTES: usize = 16 * 1024;

/// The session's bounds on what a body may hold.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// [`SessionConfig::max_event_size`](crate::proto::SessionConfig).
    pub(crate) max_event_size: usize,
    /// [`SessionConfig::max_body_size`](crate::proto::SessionConfig).
    pub(crate) max_body_size: usize,
}

/// How a body is read.
enum Reading {
    /// Handed over as it comes.
    Raw,
    /// Gathered whole, then decoded; handed over as it comes once past the bound (the
    /// session refuses it then).
    Json { buf: Vec<u8>, max: usize },
    /// Decoded chunk by chunk.
    Sse(Box<SseAhead>),
}

/// A response body, read as exchange events.
pub(crate) struct BodyReader<S> {
    id: HttpId,
    body: S,
    done: bool,
    reading: Reading,
}

impl<S> BodyReader<S>
where
    S: Stream<Item = reqwest::Result<Bytes>> + Unpin,
{
    /// A reader for the body of a response with `status` and `headers`.
    pub(crate) fn new(
        id: HttpId,
        body: S,
        status: u16,
        headers: &HeaderMap,
        limits: Limits,
    ) -> Self {
        let reading = match read_ahead(status, headers) {
            Some(BodyFormat::Json) => Reading::Json {
                buf: Vec::new(),
                max: limits.max_body_size,
            },
            Some(BodyFormat::Sse) => Reading::Sse(Box::new(SseAhead::new(limits.max_event_size))),
            _ => Reading::Raw,
        };
        BodyReader {
            id,
            body,
            done: false,
            reading,
        }
    }

    /// Whether the body is over (ended, failed, or refused).
    pub(crate) fn is_done(&self) -> bool {
        self.done
    }

    /// Waits for the body's next chunk (or its end), then takes whatever else is already
    /// there, within [`BATCH_BYTES`]: the events they make go to `out`. `out` may stay empty
    /// (a JSON body still being gathered).
    pub(crate) async fn next(&mut self, out: &mut Vec<ExchangeEvent>) {
        if self.done {
            return;
        }
        let item = self.body.next().await;
        let taken = self.take(item, out);
        self.take_ready(taken, out);
    }

    /// Takes what is already there, within [`BATCH_BYTES`], without waiting.
    pub(crate) fn ready(&mut self, out: &mut Vec<ExchangeEvent>) {
        self.take_ready(0, out);
    }

    fn take_ready(&mut self, mut taken: usize, out: &mut Vec<ExchangeEvent>) {
        while !self.done && taken < BATCH_BYTES {
            let Some(item) = self.body.next().now_or_never() else {
                return;
            };
            taken = taken.saturating_add(self.take(item, out));
        }
    }

    /// What one body item means; returns its size.
    fn take(
        &mut self,
        item: Option<reqwest::Result<Bytes>>,
        out: &mut Vec<ExchangeEvent>,
    ) -> usize {
        let id = self.id;
        match item {
            Some(Ok(bytes)) => {
                let size = bytes.len();
                self.chunk(bytes, out);
                size
            }
            Some(Err(err)) => {
                self.done = true;
                let failure = TransportFailure::Lost(error_chain(&err.without_url()));
                tracing::debug!(http = id.0, ?failure, "response body failed");
                out.push(ExchangeEvent::Failed { id, failure });
                0
            }
            None => {
                self.done = true;
                self.end(out);
                0
            }
        }
    }

    fn chunk(&mut self, bytes: Bytes, out: &mut Vec<ExchangeEvent>) {
        let id = self.id;
        if bytes.is_empty() {
            return;
        }
        match &mut self.reading {
            Reading::Raw => out.push(ExchangeEvent::Data { id, bytes }),
            Reading::Json { buf, max } => {
                buf.extend_from_slice(&bytes);
                if buf.len() > *max {
                    // Past the bound: the session refuses it as it comes.
                    let bytes = Bytes::from(std::mem::take(buf));
                    self.reading = Reading::Raw;
                    out.push(ExchangeEvent::Data { id, bytes });
                }
            }
            Reading::Sse(reader) => {
                let mut events = Vec::new();
                let fed = reader.feed(&bytes, &mut events);
                push_events(id, events, out);
                if let Err(error) = fed {
                    self.done = true;
                    out.push(ExchangeEvent::TooLarge { id, error });
                }
            }
        }
    }

    fn end(&mut self, out: &mut Vec<ExchangeEvent>) {
        let id = self.id;
        match &mut self.reading {
            Reading::Raw => {}
            Reading::Json { buf, .. } => {
                let body = Bytes::from(std::mem::take(buf));
                match DecodedJson::decode(&body) {
                    Some(decoded) => {
                        return out.push(ExchangeEvent::Json { id, body, decoded });
                    }
                    None if !body.is_empty() => out.push(ExchangeEvent::Data { id, bytes: body }),
                    None => {}
                }
            }
            Reading::Sse(reader) => {
                let mut tail = Vec::new();
                reader.finish(&mut tail);
                push_events(id, tail, out);
            }
        }
        out.push(ExchangeEvent::End { id });
    }

    /// Reads what is already there of a body nobody wants any more (a stream whose answer
    /// came, its end usually right behind): a body read to its end leaves its connection to
    /// the pool, a body dropped before closes it. A few chunks at most, never waiting.
    fn discard_ready(&mut self) {
        for _ in 0..4 {
            if self.done {
                return;
            }
            match self.body.next().now_or_never() {
                Some(Some(Ok(_))) => {}
                Some(_) => self.done = true,
                None => return,
            }
        }
    }
}

impl<S> BodyReader<S>
where
    S: Stream<Item = reqwest::Result<Bytes>> + Unpin + Send + 'static,
{
    /// Lets go of a body nobody wants any more. What is already there is read at once; a
    /// body whose end is not, is read on in a task of its own for a moment (its end often
    /// comes just behind the answer), within [`LATE_END_WAIT`] and [`LATE_END_BYTES`], so
    /// that its connection goes back to the pool; then it is dropped, closing it.
    pub(crate) fn release(mut self) {
        self.discard_ready();
        if self.done {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let mut body = self.body;
        runtime.spawn(async move {
            let drained = async {
                let mut read = 0usize;
                while let Some(Ok(chunk)) = body.next().await {
                    read = read.saturating_add(chunk.len());
                    if read > LATE_END_BYTES {
                        return;
                    }
                }
            };
            let _ = tokio::time::timeout(LATE_END_WAIT, drained).await;
        });
    }
}

/// Appends decoded events, to the last `Events` of `out` when it is the last one there.
fn push_events(id: HttpId, mut events: Vec<DecodedEvent>, out: &mut Vec<ExchangeEvent>) {
    if events.is_empty() {
        return;
    }
    if let Some(ExchangeEvent::Events { events: last, .. }) = out.last_mut() {
        last.append(&mut events);
    } else {
        out.push(ExchangeEvent::Events { id, events });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;
    use serde_json::json;

    const LIMITS: Limits = Limits {
        max_event_size: 1024 * 1024,
        max_body_size: 4 * 1024 * 1024,
    };

    fn headers(content_type: &'static str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("content-type", HeaderValue::from_static(content_type));
        h
    }

    type Chunks = futures::stream::Iter<std::vec::IntoIter<reqwest::Result<Bytes>>>;

    fn reader(status: u16, content_type: &'static str, chunks: Vec<Vec<u8>>) -> BodyReader<Chunks> {
        let items: Vec<reqwest::Result<Bytes>> =
            chunks.into_iter().map(|c| Ok(Bytes::from(c))).collect();
        BodyReader::new(
            HttpId(1),
            futures::stream::iter(items),
            status,
            &headers(content_type),
            LIMITS,
        )
    }

    /// Every report of `reader`'s body, as the exchange makes them.
    fn reports(mut reader: BodyReader<Chunks>) -> Vec<Vec<ExchangeEvent>> {
        let mut reports = Vec::new();
        let mut batch = Vec::new();
        reader.ready(&mut batch);
        loop {
            if !batch.is_empty() {
                reports.push(std::mem::take(&mut batch));
            }
            if reader.is_done() {
                return reports;
            }
            reader
                .next(&mut batch)
                .now_or_never()
                .expect("a ready body");
        }
    }

    fn raw_bytes(report: &[ExchangeEvent]) -> usize {
        report
            .iter()
            .map(|e| match e {
                ExchangeEvent::Data { bytes, .. } => bytes.len(),
                ExchangeEvent::Json { body, .. } => body.len(),
                _ => 0,
            })
            .sum()
    }

    /// An SSE body already there in 64 chunks of 64 KiB reaches the session as decoded
    /// events only, in reports of at most a batch each (plus the chunk that crossed it):
    /// never parsed under the session's lock, never drained in one hold of it.
    #[test]
    fn an_sse_body_is_decoded_here_and_handed_over_in_bounded_batches() {
        let event = format!(
            "data: {}\n\n",
            json!({"jsonrpc": "2.0", "method": "notifications/message",
                "params": {"data": "x".repeat(64 * 1024 - 100)}})
        );
        let chunks: Vec<Vec<u8>> = (0..64).map(|_| event.clone().into_bytes()).collect();
        let chunk = chunks[0].len();
        let reports = reports(reader(200, "text/event-stream", chunks));
        let mut events = 0;
        for report in &reports {
            assert_eq!(raw_bytes(report), 0, "raw bytes handed over");
            let decoded: usize = report
                .iter()
                .map(|e| match e {
                    ExchangeEvent::Events { events, .. } => events.len(),
                    _ => 0,
                })
                .sum();
            assert!(
                decoded * chunk <= BATCH_BYTES + chunk,
                "{decoded} events in one report"
            );
            events += decoded;
        }
        assert_eq!(events, 64);
        assert!(reports.len() >= 64 * chunk / (BATCH_BYTES + chunk));
        assert!(matches!(
            reports.last().and_then(|r| r.last()),
            Some(ExchangeEvent::End { .. })
        ));
    }

    /// A JSON body over many chunks is handed over once, whole and decoded.
    #[test]
    fn a_json_body_is_gathered_and_decoded_here() {
        let body = serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 1,
            "result": {"pad": "x".repeat(1024 * 1024)}}))
        .unwrap();
        let chunks: Vec<Vec<u8>> = body.chunks(16 * 1024).map(<[u8]>::to_vec).collect();
        let reports = reports(reader(200, "application/json", chunks));
        let events: Vec<&ExchangeEvent> = reports.iter().flatten().collect();
        // `Json` is the body and its end at once.
        assert!(
            matches!(events[..], [ExchangeEvent::Json { .. }]),
            "{} events",
            events.len()
        );
    }

    /// A JSON body past the bound is handed over as bytes for the session to refuse; a
    /// refusal's body, or one of another type, as it comes.
    #[test]
    fn other_bodies_are_handed_over_as_they_come() {
        let big = vec![b'x'; LIMITS.max_body_size + 1];
        let reports = reports(reader(200, "application/json", vec![big]));
        assert_eq!(raw_bytes(&reports[0]), LIMITS.max_body_size + 1);
        let refused = reports_of(reader(404, "application/json", vec![b"{}".to_vec()]));
        assert!(matches!(
            refused[..],
            [ExchangeEvent::Data { .. }, ExchangeEvent::End { .. }]
        ));
        let html = reports_of(reader(200, "text/html", vec![b"<p>".to_vec()]));
        assert!(matches!(
            html[..],
            [ExchangeEvent::Data { .. }, ExchangeEvent::End { .. }]
        ));
    }

    /// An SSE event past the bound ends the body with the session's refusal.
    #[test]
    fn an_sse_event_past_the_bound_is_refused_here() {
        let huge = format!("data: {}\n\n", "x".repeat(LIMITS.max_event_size + 1));
        let events = reports_of(reader(200, "text/event-stream", vec![huge.into_bytes()]));
        assert!(
            matches!(events[..], [ExchangeEvent::TooLarge { .. }]),
            "{} events",
            events.len()
        );
    }

    fn reports_of(reader: BodyReader<Chunks>) -> Vec<ExchangeEvent> {
        reports(reader).into_iter().flatten().collect()
    }
}
