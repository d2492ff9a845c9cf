//! Properties of the SSE decoder: no panics on any input, the same events whatever the chunk
//! boundaries, exactly the events that were serialized, and memory bounded by the limit.

use mcp_resume::sse::{SseDecoder, SseError, SseEvent};
use proptest::prelude::*;

/// Decodes `input` cut at `cuts` (sorted or not, out-of-range values clamped), checking the
/// memory bound after every chunk. Returns the events and the error, if any.
fn run_cut(input: &[u8], cuts: &[usize], max: usize) -> (Vec<SseEvent>, Option<SseError>) {
    let mut cuts: Vec<usize> = cuts.iter().map(|&c| c.min(input.len())).collect();
    cuts.sort_unstable();
    let mut decoder = SseDecoder::new(max);
    let mut out = Vec::new();
    let mut start = 0;
    for end in cuts.into_iter().chain([input.len()]) {
        let result = decoder.feed(&input[start..end], &mut out);
        assert!(
            decoder.buffered_len() <= max,
            "buffered {} > max {max}",
            decoder.buffered_len()
        );
        if let Err(err) = result {
            return (out, Some(err));
        }
        start = end;
    }
    decoder.finish(&mut out);
    assert_eq!(decoder.buffered_len(), 0);
    (out, None)
}

fn run_one_byte_chunks(input: &[u8], max: usize) -> (Vec<SseEvent>, Option<SseError>) {
    let cuts: Vec<usize> = (1..input.len()).collect();
    run_cut(input, &cuts, max)
}

/// Byte strings that look like SSE often enough to reach every branch of the decoder.
fn sse_like_bytes() -> impl Strategy<Value = Vec<u8>> {
    let token = prop_oneof![
        Just(b"data".to_vec()),
        Just(b"id".to_vec()),
        Just(b"event".to_vec()),
        Just(b"retry".to_vec()),
        Just(b":".to_vec()),
        Just(b": ".to_vec()),
        Just(b" ".to_vec()),
        Just(b"\n".to_vec()),
        Just(b"\r".to_vec()),
        Just(b"\r\n".to_vec()),
        Just(b"\xEF\xBB\xBF".to_vec()),
        Just(b"\xEF\xBB".to_vec()),
        Just(b"\0".to_vec()),
        Just(b"\xFF".to_vec()),
        Just("\u{e9}\u{20ac}\u{1F600}".as_bytes().to_vec()),
        "[0-9]{1,25}".prop_map(String::into_bytes),
        "[a-z]{1,8}".prop_map(String::into_bytes),
        prop::collection::vec(any::<u8>(), 1..8),
    ];
    prop::collection::vec(token, 0..60).prop_map(|tokens| tokens.concat())
}

/// One event to serialize, with what the decoder must report for it.
#[derive(Debug, Clone)]
struct Source {
    id: Option<String>,
    event: Option<String>,
    data: Option<Vec<String>>,
    retry: Option<u64>,
    comments: Vec<String>,
    /// Rotates the order of the field groups; data lines stay in order.
    rotation: usize,
}

impl Source {
    fn expected(&self) -> SseEvent {
        SseEvent {
            id: self.id.clone(),
            event: self.event.clone(),
            data: self
                .data
                .as_ref()
                .map(|lines| lines.join("\n"))
                .unwrap_or_default(),
            retry: self.retry,
        }
    }
}

fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        "[^\r\n\u{0}]{1,12}",
        "[ a-z:0-9]{1,12}",
        Just(" leading space".to_owned()),
    ]
}

fn source() -> impl Strategy<Value = Source> {
    (
        prop::option::of(value()),
        prop::option::of("[^\r\n\u{0}]{1,10}"),
        prop::option::of(prop::collection::vec(value(), 1..4)),
        prop::option::of(any::<u64>()),
        prop::collection::vec("[^\r\n]{0,10}", 0..2),
        0usize..4,
    )
        .prop_filter("a dispatchable block", |(id, event, data, retry, _, _)| {
            id.is_some() || event.is_some() || data.is_some() || retry.is_some()
        })
        .prop_map(|(id, event, data, retry, comments, rotation)| Source {
            id,
            event,
            data,
            retry,
            comments,
            rotation,
        })
}

/// How each line is written: the line ending (0 LF, 1 CRLF, 2 CR) and whether the optional
/// space after the colon is used.
#[derive(Debug, Clone)]
struct Style {
    endings: Vec<u8>,
    spaces: Vec<bool>,
    bom: bool,
}

fn style() -> impl Strategy<Value = Style> {
    (
        prop::collection::vec(0u8..3, 1..16),
        prop::collection::vec(any::<bool>(), 1..16),
        any::<bool>(),
    )
        .prop_map(|(endings, spaces, bom)| Style {
            endings,
            spaces,
            bom,
        })
}

fn serialize(sources: &[Source], style: &Style) -> Vec<u8> {
    let mut out = Vec::new();
    if style.bom {
        out.extend_from_slice(b"\xEF\xBB\xBF");
    }
    let mut n = 0usize;
    let mut prev_cr = false;
    let mut line = |out: &mut Vec<u8>, content: &[u8]| {
        out.extend_from_slice(content);
        let mut ending = style.endings[n % style.endings.len()];
        // After a lone CR, an empty line ending in LF would read as the LF of a CRLF.
        if prev_cr && content.is_empty() && ending == 0 {
            ending = 1;
        }
        out.extend_from_slice(match ending {
            0 => b"\n".as_slice(),
            1 => b"\r\n",
            _ => b"\r",
        });
        prev_cr = ending == 2;
        n += 1;
    };
    let field = |name: &str, value: &str, n: usize| -> Vec<u8> {
        let space = style.spaces[n % style.spaces.len()];
        if value.is_empty() && !space {
            return name.as_bytes().to_vec();
        }
        // A value starting with a space needs the optional space written out.
        if space || value.starts_with(' ') {
            format!("{name}: {value}").into_bytes()
        } else {
            format!("{name}:{value}").into_bytes()
        }
    };
    for (i, source) in sources.iter().enumerate() {
        let mut groups: Vec<Vec<Vec<u8>>> = Vec::new();
        if let Some(id) = &source.id {
            groups.push(vec![field("id", id, i)]);
        }
        if let Some(event) = &source.event {
            groups.push(vec![field("event", event, i + 1)]);
        }
        if let Some(lines) = &source.data {
            groups.push(
                lines
                    .iter()
                    .enumerate()
                    .map(|(j, l)| field("data", l, i + j))
                    .collect(),
            );
        }
        if let Some(retry) = source.retry {
            groups.push(vec![field("retry", &retry.to_string(), i)]);
        }
        for comment in &source.comments {
            groups.push(vec![format!(":{comment}").into_bytes()]);
        }
        let rotation = source.rotation % groups.len();
        groups.rotate_left(rotation);
        for content in groups.iter().flatten() {
            line(&mut out, content);
        }
        line(&mut out, b"");
    }
    out
}

const BIG: usize = 1 << 20;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(5000))]

    #[test]
    fn arbitrary_bytes_never_panic(
        input in prop::collection::vec(any::<u8>(), 0..512),
        cuts in prop::collection::vec(any::<usize>(), 0..8),
        max in 8usize..256,
    ) {
        let cuts: Vec<usize> = cuts.iter().map(|c| c % (input.len() + 1)).collect();
        run_cut(&input, &cuts, max);
        run_cut(&input, &cuts, BIG);
    }

    #[test]
    fn sse_like_bytes_decode_the_same_whatever_the_chunking(
        input in sse_like_bytes(),
        cuts in prop::collection::vec(any::<usize>(), 0..12),
        max in 8usize..128,
    ) {
        let cuts: Vec<usize> = cuts.iter().map(|c| c % (input.len() + 1)).collect();
        for max in [max, BIG] {
            let whole = run_cut(&input, &[], max);
            prop_assert_eq!(&run_cut(&input, &cuts, max), &whole);
            prop_assert_eq!(&run_one_byte_chunks(&input, max), &whole);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn serialized_events_decode_to_the_source_whatever_the_chunking(
        sources in prop::collection::vec(source(), 0..8),
        style in style(),
        cuts in prop::collection::vec(any::<usize>(), 0..16),
    ) {
        let input = serialize(&sources, &style);
        let expected: Vec<SseEvent> = sources.iter().map(Source::expected).collect();
        let cuts: Vec<usize> = cuts.iter().map(|c| c % (input.len() + 1)).collect();

        prop_assert_eq!(run_cut(&input, &[], BIG), (expected.clone(), None));
        prop_assert_eq!(run_cut(&input, &cuts, BIG), (expected.clone(), None));
        prop_assert_eq!(run_one_byte_chunks(&input, BIG), (expected, None));
    }

    #[test]
    fn every_two_way_split_gives_the_same_events(
        sources in prop::collection::vec(source(), 1..3),
        style in style(),
    ) {
        // Exhaustive over split points: covers a cut inside every CRLF, every multi-byte
        // character and the BOM.
        let input = serialize(&sources, &style);
        let expected: Vec<SseEvent> = sources.iter().map(Source::expected).collect();
        for cut in 0..=input.len() {
            prop_assert_eq!(run_cut(&input, &[cut], BIG), (expected.clone(), None), "cut at {}", cut);
        }
    }

    #[test]
    fn endless_line_errors_and_memory_stays_bounded(
        max in 1usize..4096,
        piece in prop::collection::vec(any::<u8>().prop_filter("no line end", |b| *b != b'\n' && *b != b'\r'), 1..300),
        prefix in prop::sample::select(vec![&b""[..], b"data: ", b":", b"id: ", b"data: a\ndata: "]),
    ) {
        let mut decoder = SseDecoder::new(max);
        let mut out = Vec::new();
        let mut fed = 0usize;
        let mut result = decoder.feed(prefix, &mut out);
        while result.is_ok() {
            result = decoder.feed(&piece, &mut out);
            fed += piece.len();
            prop_assert!(decoder.buffered_len() <= max.max(2));
            // More than `max` bytes of one line accepted would break the bound (+3: a BOM
            // starting the stream is not content).
            if result.is_ok() {
                prop_assert!(fed <= max + 3, "fed {} bytes without an error", fed);
            }
        }
        prop_assert_eq!(result, Err(SseError::TooLarge { max }));
        prop_assert_eq!(decoder.feed(b"\n\n", &mut out), Err(SseError::TooLarge { max }));
        prop_assert!(out.is_empty());
    }

    #[test]
    fn many_lines_never_hold_more_than_max(
        max in 16usize..512,
        lines in prop::collection::vec("[a-z]{0,40}", 1..200),
    ) {
        // A block of many data lines: the accumulated data counts too.
        let mut decoder = SseDecoder::new(max);
        let mut out = Vec::new();
        let mut total = 0usize;
        let mut result = Ok(());
        for line in &lines {
            result = decoder.feed(format!("data:{line}\n").as_bytes(), &mut out);
            prop_assert!(decoder.buffered_len() <= max);
            if result.is_err() {
                break;
            }
            total += line.len() + 1;
        }
        if result.is_ok() {
            prop_assert!(total <= max + 1);
            decoder.feed(b"\n", &mut out).unwrap();
            prop_assert_eq!(out.len(), 1);
        } else {
            prop_assert_eq!(result, Err(SseError::TooLarge { max }));
        }
    }
}
