//! Our SSE decoder against `eventsource-stream` 0.2.3.
//!
//! On well-formed streams inside what `eventsource-stream` handles correctly, both agree on
//! data, type, id and retry. The named tests after that pin down where it goes wrong for
//! resumption, asserting that our decoder is right there and that theirs differs: the evidence
//! behind replacing it (see CONTRIBUTING.md, "Dependencies and why").

use std::convert::Infallible;

use bytes::Bytes;
use eventsource_stream::{Event, EventStream, EventStreamError};
use futures::executor::block_on;
use futures::StreamExt;
use mcp_resume::sse::{SseDecoder, SseError, SseEvent};
use proptest::prelude::*;

const MAX: usize = 1 << 20;

fn ours(chunks: &[&[u8]], max: usize) -> (Vec<SseEvent>, Option<SseError>) {
    let mut decoder = SseDecoder::new(max);
    let mut out = Vec::new();
    for chunk in chunks {
        if let Err(err) = decoder.feed(chunk, &mut out) {
            return (out, Some(err));
        }
    }
    decoder.finish(&mut out);
    (out, None)
}

struct Theirs {
    events: Vec<Event>,
    error: Option<String>,
    last_event_id: String,
}

fn theirs(chunks: &[&[u8]]) -> Theirs {
    let items: Vec<Result<Bytes, Infallible>> = chunks
        .iter()
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    let mut stream = EventStream::new(futures::stream::iter(items));
    let mut events = Vec::new();
    let mut error = None;
    block_on(async {
        while let Some(item) = stream.next().await {
            match item {
                Ok(event) => events.push(event),
                Err(err) => {
                    error = Some(match err {
                        EventStreamError::Utf8(e) => format!("utf8: {e}"),
                        EventStreamError::Parser(e) => format!("parser: {e:?}"),
                        EventStreamError::Transport(never) => match never {},
                    });
                    break;
                }
            }
        }
    });
    Theirs {
        events,
        error,
        last_event_id: stream.last_event_id().to_owned(),
    }
}

/// What a resuming client would send as `Last-Event-ID` after our events.
fn our_cursor(events: &[SseEvent]) -> String {
    events
        .iter()
        .filter_map(|e| e.id.clone())
        .next_back()
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------------------------
// Agreement on well-formed streams.

#[derive(Debug, Clone)]
struct Source {
    id: Option<String>,
    event: Option<String>,
    data: Vec<String>,
    retry: Option<u64>,
    comment: Option<String>,
}

fn source() -> impl Strategy<Value = Source> {
    (
        prop::option::of("[^\r\n\u{0}]{0,12}"),
        prop::option::of("[a-z_]{1,10}"),
        // eventsource-stream is only right for blocks with at least one data line.
        prop::collection::vec("[^\r\n]{0,40}", 1..4),
        prop::option::of(0u64..1_000_000),
        prop::option::of("[^\r\n]{0,10}"),
    )
        .prop_map(|(id, event, data, retry, comment)| Source {
            id,
            event,
            data,
            retry,
            comment,
        })
}

fn serialize(sources: &[Source], endings: &[u8], bom: bool) -> Vec<u8> {
    let mut out = Vec::new();
    if bom {
        out.extend_from_slice(b"\xEF\xBB\xBF");
    }
    let mut lines: Vec<String> = Vec::new();
    for source in sources {
        if let Some(comment) = &source.comment {
            lines.push(format!(":{comment}"));
        }
        if let Some(id) = &source.id {
            lines.push(format!("id: {id}"));
        }
        if let Some(event) = &source.event {
            lines.push(format!("event: {event}"));
        }
        for data in &source.data {
            lines.push(format!("data: {data}"));
        }
        if let Some(retry) = source.retry {
            lines.push(format!("retry: {retry}"));
        }
        lines.push(String::new());
    }
    let count = lines.len();
    let mut prev_cr = false;
    for (i, line) in lines.iter().enumerate() {
        out.extend_from_slice(line.as_bytes());
        let mut ending = endings[i % endings.len()];
        if i + 1 == count && ending == 2 {
            ending = 0; // eventsource-stream never dispatches a final lone-CR blank line
        }
        if prev_cr && line.is_empty() && ending == 0 {
            ending = 1; // would read as the LF of a CRLF
        }
        out.extend_from_slice(match ending {
            0 => b"\n".as_slice(),
            1 => b"\r\n",
            _ => b"\r",
        });
        prev_cr = ending == 2;
    }
    out
}

fn chunked<'a>(input: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (input.len() + 1)).collect();
    cuts.sort_unstable();
    let mut chunks = Vec::new();
    let mut start = 0;
    for end in cuts.into_iter().chain([input.len()]) {
        chunks.push(&input[start..end]);
        start = end;
    }
    chunks
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn both_decoders_agree_on_well_formed_streams(
        sources in prop::collection::vec(source(), 0..10),
        endings in prop::collection::vec(0u8..3, 1..8),
        cuts in prop::collection::vec(any::<usize>(), 0..10),
    ) {
        // No BOM: eventsource-stream panics on one (see below).
        let input = serialize(&sources, &endings, false);
        let chunks = chunked(&input, &cuts);
        let (mine, error) = ours(&chunks, MAX);
        prop_assert_eq!(error, None);
        let other = theirs(&chunks);
        prop_assert_eq!(other.error, None);
        prop_assert_eq!(mine.len(), sources.len());
        prop_assert_eq!(other.events.len(), mine.len());

        // eventsource-stream reports the persistent last-event-id; ours reports each block's id.
        let mut cursor = String::new();
        for (m, t) in mine.iter().zip(&other.events) {
            if let Some(id) = &m.id {
                cursor = id.clone();
            }
            prop_assert_eq!(&m.data, &t.data);
            prop_assert_eq!(m.event.as_deref().unwrap_or("message"), t.event.as_str());
            prop_assert_eq!(&cursor, &t.id);
            prop_assert_eq!(m.retry, t.retry.map(|d| d.as_millis() as u64));
        }
        prop_assert_eq!(our_cursor(&mine), other.last_event_id);
    }
}

// ---------------------------------------------------------------------------------------------
// Where eventsource-stream is wrong for resumption.

#[test]
fn retry_only_block_is_kept_by_ours_and_lost_by_eventsource_stream() {
    // A server asking the client to wait 3 s before reconnecting, in a block of its own.
    let input: &[u8] = b"retry: 3000\n\ndata: {}\n\n";
    let (mine, _) = ours(&[input], MAX);
    assert_eq!(mine[0].retry, Some(3000));
    assert_eq!(mine.len(), 2);

    let other = theirs(&[input]);
    assert_eq!(other.events.len(), 1, "the retry block is dropped");
    assert!(other.events.iter().all(|e| e.retry.is_none()), "retry lost");
}

#[test]
fn id_only_priming_event_is_kept_by_ours_and_dropped_by_eventsource_stream() {
    // A priming event carrying only an id, then the server closes the connection.
    let input: &[u8] = b"id: stream-1\n\n";
    let (mine, _) = ours(&[input], MAX);
    assert_eq!(
        mine,
        vec![SseEvent {
            id: Some("stream-1".into()),
            ..SseEvent::default()
        }]
    );
    let other = theirs(&[input]);
    assert!(other.events.is_empty());
    assert_eq!(
        other.last_event_id, "",
        "no cursor to resume from: the client would replay from the start or not resume"
    );
}

#[test]
fn last_id_updated_by_ours_when_stream_ends_after_id_only_event() {
    let input: &[u8] = b"id: s-1\ndata: {\"progress\":1}\n\nid: s-2\n\n";
    let (mine, _) = ours(&[input], MAX);
    assert_eq!(our_cursor(&mine), "s-2");

    let other = theirs(&[input]);
    assert_eq!(other.events.len(), 1);
    assert_eq!(
        other.last_event_id, "s-1",
        "stale cursor: a resume would replay s-2 again"
    );
}

#[test]
fn retry_of_incomplete_last_block_is_kept_by_ours_and_lost_by_eventsource_stream() {
    let input: &[u8] = b"data: a\n\nretry: 500\ndata: partial\n";
    let (mine, _) = ours(&[input], MAX);
    assert_eq!(mine.last().and_then(|e| e.retry), Some(500));

    let other = theirs(&[input]);
    assert!(other.events.iter().all(|e| e.retry.is_none()));
}

#[test]
fn endless_line_is_refused_by_ours_and_buffered_without_limit_by_eventsource_stream() {
    // 8 MiB of one line without a terminator, in 64 KiB chunks.
    let chunk = vec![b'x'; 64 * 1024];
    let chunks: Vec<&[u8]> = std::iter::once(&b"data: "[..])
        .chain(std::iter::repeat_n(chunk.as_slice(), 128))
        .collect();

    let max = 1 << 20;
    let mut decoder = SseDecoder::new(max);
    let mut out = Vec::new();
    let mut fed = 0;
    let mut result = Ok(());
    for chunk in &chunks {
        result = decoder.feed(chunk, &mut out);
        if result.is_err() {
            break;
        }
        fed += chunk.len();
        assert!(decoder.buffered_len() <= max);
    }
    assert_eq!(result, Err(SseError::TooLarge { max }));
    assert!(fed <= max);

    // eventsource-stream takes all 8 MiB in without complaint: nothing bounds its buffer.
    let other = theirs(&chunks);
    assert!(other.events.is_empty());
    assert_eq!(other.error, None);
}

#[test]
fn final_blank_line_ending_in_lone_cr_dispatches_in_ours_only() {
    let input: &[u8] = b"id: 9\rdata: last\r\r";
    let (mine, _) = ours(&[input], MAX);
    assert_eq!(mine.len(), 1);
    assert_eq!(mine[0].data, "last");

    let other = theirs(&[input]);
    assert!(
        other.events.is_empty(),
        "it waits for a LF that never comes"
    );
}

#[test]
fn invalid_utf8_is_replaced_by_ours_and_stalls_eventsource_stream() {
    // One bad byte: ours replaces it and keeps going; eventsource-stream holds back every
    // following event until the stream ends, then fails.
    let chunks: [&[u8]; 2] = [b"data: a\xFF\n\n", b"data: ok\n\n"];
    let (mine, error) = ours(&chunks, MAX);
    assert_eq!(error, None);
    assert_eq!(
        mine.iter().map(|e| e.data.as_str()).collect::<Vec<_>>(),
        ["a\u{FFFD}", "ok"]
    );

    let other = theirs(&chunks);
    assert!(other.events.iter().all(|e| e.data != "ok"));
    assert!(other.error.is_some());
}

#[test]
fn retry_with_plus_sign_is_ignored_by_ours_per_spec() {
    // The spec accepts only ASCII digits; eventsource-stream uses `str::parse`, which accepts
    // a leading `+`.
    let input: &[u8] = b"retry: +5\ndata: x\n\n";
    let (mine, _) = ours(&[input], MAX);
    assert_eq!(mine[0].retry, None);
    let other = theirs(&[input]);
    assert_eq!(other.events[0].retry.map(|d| d.as_millis()), Some(5));
}

#[test]
fn bom_is_skipped_by_ours_and_panics_eventsource_stream() {
    // It slices the BOM off as if it were one byte long; U+FEFF is three bytes in UTF-8.
    let input: &[u8] = b"\xEF\xBB\xBFdata: x\n\n";
    let (mine, _) = ours(&[input], MAX);
    assert_eq!(mine.len(), 1);
    assert_eq!(mine[0].data, "x");

    let panicked = std::panic::catch_unwind(|| theirs(&[input])).is_err();
    assert!(
        panicked,
        "a BOM at the start of the stream panics eventsource-stream"
    );
}
