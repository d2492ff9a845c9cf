//! SSE decoding throughput: our decoder against `eventsource-stream` 0.2.3 on the same input,
//! side by side in one run.
//!
//! Cases: 1 KiB events in 64 KiB chunks (8 MiB, the target case) and 64 B events in 64 KiB
//! chunks (1 MiB: `eventsource-stream` re-copies the rest of its buffer for every line, so its
//! cost grows with lines per chunk and a larger input would take minutes).
//!
//! Both decoders produce owned events from the same `Bytes` chunks; `eventsource-stream` is
//! driven as the stream it is, over an in-memory `futures::stream::iter` with `block_on`, which
//! never waits. After the criterion groups, a plain summary prints MB/s, events/s and the
//! ratio ours/theirs.

use std::convert::Infallible;
use std::hint::black_box;
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{Criterion, SamplingMode, Throughput};
use eventsource_stream::EventStream;
use futures::executor::block_on;
use futures::StreamExt;
use mcp_resume::sse::SseDecoder;

const CHUNK: usize = 64 * 1024;
const MAX_EVENT: usize = 4 * 1024 * 1024;

struct Case {
    name: &'static str,
    chunks: Vec<Bytes>,
    bytes: usize,
    events: usize,
}

/// `count` events of exactly `event_size` bytes each, shaped like MCP traffic: an id, an event
/// type and one line of JSON data; cut into 64 KiB chunks regardless of event boundaries.
fn case(name: &'static str, event_size: usize, total: usize) -> Case {
    let count = total / event_size;
    let mut stream = Vec::with_capacity(total);
    for i in 0..count {
        let head = format!("id: s-{i}\nevent: message\ndata: {{\"jsonrpc\":\"2.0\",\"x\":\"");
        let tail = "\"}\n\n";
        let pad = event_size - head.len() - tail.len();
        stream.extend_from_slice(head.as_bytes());
        stream.extend(std::iter::repeat_n(b'a', pad));
        stream.extend_from_slice(tail.as_bytes());
    }
    let bytes = stream.len();
    let stream = Bytes::from(stream);
    let chunks = (0..bytes)
        .step_by(CHUNK)
        .map(|start| stream.slice(start..(start + CHUNK).min(bytes)))
        .collect();
    Case {
        name,
        chunks,
        bytes,
        events: count,
    }
}

fn decode_ours(chunks: &[Bytes]) -> usize {
    let mut decoder = SseDecoder::new(MAX_EVENT);
    let mut out = Vec::new();
    let mut events = 0;
    for chunk in chunks {
        decoder.feed(chunk, &mut out).expect("well-formed input");
        events += out.len();
        for event in out.drain(..) {
            black_box(event);
        }
    }
    decoder.finish(&mut out);
    events + out.len()
}

fn decode_theirs(chunks: &[Bytes]) -> usize {
    let items = futures::stream::iter(chunks.iter().cloned().map(Ok::<_, Infallible>));
    let mut stream = EventStream::new(items);
    block_on(async {
        let mut events = 0;
        while let Some(event) = stream.next().await {
            black_box(event.expect("well-formed input"));
            events += 1;
        }
        events
    })
}

type Decode = fn(&[Bytes]) -> usize;

const DECODERS: [(&str, Decode); 2] =
    [("ours", decode_ours), ("eventsource-stream", decode_theirs)];

fn cases() -> Vec<Case> {
    vec![
        case("1KiB-events-64KiB-chunks", 1024, 8 * 1024 * 1024),
        case("64B-events-64KiB-chunks", 64, 1024 * 1024),
    ]
}

fn criterion_groups(c: &mut Criterion, cases: &[Case]) {
    for case in cases {
        for (_, decode) in DECODERS {
            assert_eq!(decode(&case.chunks), case.events, "{}", case.name);
        }
        let mut group = c.benchmark_group(case.name);
        group.throughput(Throughput::Bytes(case.bytes as u64));
        group.sampling_mode(SamplingMode::Flat);
        for (name, decode) in DECODERS {
            group.bench_function(name, |b| b.iter(|| decode(black_box(&case.chunks))));
        }
        group.finish();
    }
}

/// Median seconds per whole-input decode for each decoder. Runs alternate between the
/// decoders, so a change in machine load hits both alike and the ratio stays fair.
fn median_secs(case: &Case, budget: Duration) -> [f64; 2] {
    let mut times = [Vec::new(), Vec::new()];
    let start = Instant::now();
    while times[0].len() < 5 || (start.elapsed() < budget && times[0].len() < 1000) {
        for (i, (_, decode)) in DECODERS.iter().enumerate() {
            let t = Instant::now();
            black_box(decode(&case.chunks));
            times[i].push(t.elapsed().as_secs_f64());
        }
    }
    times.map(|mut t| {
        t.sort_by(f64::total_cmp);
        t[t.len() / 2]
    })
}

fn summary(cases: &[Case]) {
    println!();
    println!("SSE decode summary (median of alternating whole-input decodes)");
    println!(
        "{:<26} {:<20} {:>10} {:>14} {:>12}",
        "case", "decoder", "MB/s", "events/s", "ours/theirs"
    );
    for case in cases {
        let secs = median_secs(case, Duration::from_secs(4));
        for ((name, _), secs) in DECODERS.iter().zip(secs) {
            println!(
                "{:<26} {:<20} {:>10.1} {:>14.0} {:>12}",
                case.name,
                name,
                case.bytes as f64 / secs / 1e6,
                case.events as f64 / secs,
                ""
            );
        }
        println!(
            "{:<26} {:<20} {:>10} {:>14} {:>11.1}x",
            case.name,
            "ratio",
            "",
            "",
            secs[1] / secs[0]
        );
    }
}

fn main() {
    let cases = cases();
    let mut c = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    criterion_groups(&mut c, &cases);
    c.final_summary();

    // `cargo bench` passes `--bench`; `cargo test --benches` and `--list` do not want timings.
    let args: Vec<String> = std::env::args().collect();
    let benchmarking =
        args.iter().any(|a| a == "--bench") && !args.iter().any(|a| a == "--test" || a == "--list");
    if benchmarking {
        summary(&cases);
    }
}
