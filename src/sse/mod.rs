//! A spec-exact, bounded, sans-IO decoder of `text/event-stream` (WHATWG HTML §9.2.6).
//! (Interface fixed; implementation in progress.)

/// One dispatched SSE event block.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    /// The `id` field of this block, if it had one (the last one wins). `Some("")` resets
    /// the cursor per the spec.
    pub id: Option<String>,
    /// The `event` field (type), if any.
    pub event: Option<String>,
    /// The data lines joined by `\n`; may be empty (priming events). Never parse empty data.
    pub data: String,
    /// The `retry` field in milliseconds, if this block had a valid one.
    pub retry: Option<u64>,
}

/// Why decoding failed. After an error the decoder is poisoned: the stream must be abandoned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SseError {
    /// An event (or a single line) exceeded the configured maximum size.
    TooLarge {
        /// The configured maximum in bytes.
        max: usize,
    },
}

/// Incremental decoder. Memory stays bounded by `max_event_size` plus the chunk in hand.
#[derive(Debug)]
pub struct SseDecoder {
    _max: usize,
}

#[allow(unused_variables)]
impl SseDecoder {
    /// A decoder that rejects events larger than `max_event_size` bytes.
    pub fn new(max_event_size: usize) -> Self {
        SseDecoder { _max: max_event_size }
    }

    /// Feeds one chunk; pushes every completed event block (a block with any of data, id,
    /// event or retry) to `out`.
    pub fn feed(&mut self, chunk: &[u8], out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        todo!()
    }

    /// End of stream: an incomplete block is discarded (per spec), except that a `retry`
    /// it carried still counts; it is pushed as an event with only `retry` set.
    pub fn finish(&mut self, out: &mut Vec<SseEvent>) {
        todo!()
    }
}
