//! A spec-exact, bounded, sans-IO decoder of `text/event-stream` (WHATWG HTML, "event stream
//! interpretation").
//!
//! Where this decoder departs from a browser's `EventSource`, it does so because resumption
//! needs it:
//! - A block is dispatched when it carried **any** of `data`, `id`, `event` or `retry`, not only
//!   when its data is non-empty: priming events (an `id` and empty data) and `retry`-only blocks
//!   must reach the session, which advances its cursor from `id` and never parses empty data.
//! - [`SseEvent::id`] is the id field of *that* block only. The spec's "last event ID buffer"
//!   persists across blocks; keeping that cursor is the session's job, per stream.
//! - When the stream ends inside a block, the block is discarded as the spec says, but a `retry`
//!   it carried is still reported, because the spec applies `retry` as soon as it is parsed.
//!   An unterminated last line is discarded: it may have been cut (`retry: 50` of `retry: 5000`).
//! - Invalid UTF-8 is decoded lossily (each invalid sequence becomes U+FFFD), as the spec's
//!   "UTF-8 decode" does, instead of failing the stream. Line structure is found on bytes first,
//!   so a multi-byte character split across chunks is decoded whole.
//!
//! Memory: the decoder holds at most `max_event_size` bytes and a few bytes of state. The limit
//! applies to the current block (its data, id and event type so far) plus the line being read,
//! field name included; a stream that would exceed it yields [`SseError::TooLarge`], whether the
//! offending line arrived whole or in pieces. Chunks are scanned in place; only the unterminated
//! tail of a chunk is copied, so the work per byte does not depend on how the stream is cut.

use std::borrow::Cow;

#[cfg(test)]
mod tests;

const BOM: &[u8] = b"\xEF\xBB\xBF";

/// One dispatched SSE event block.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    /// The `id` field of this block, if it had one (the last one wins). `Some("")` resets
    /// the cursor per the spec.
    pub id: Option<String>,
    /// The `event` field (type), if any. An empty `event` field means the default type
    /// (`message`) and is reported as `None`.
    pub event: Option<String>,
    /// The data lines joined by `\n`; may be empty (priming events). Never parse empty data.
    pub data: String,
    /// The `retry` field in milliseconds, if this block had a valid one (all ASCII digits;
    /// values beyond `u64` saturate).
    pub retry: Option<u64>,
}

/// Why decoding failed. After an error the decoder is poisoned: the stream must be abandoned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SseError {
    /// An event (or a single line) exceeded the configured maximum size.
    #[error("SSE event larger than the maximum of {max} bytes")]
    TooLarge {
        /// The configured maximum in bytes.
        max: usize,
    },
}

/// Incremental decoder. Memory stays bounded by `max_event_size` plus the chunk in hand.
#[derive(Debug)]
pub struct SseDecoder {
    max: usize,
    /// The unterminated tail of the last chunk: the start of the current line.
    line: Vec<u8>,
    block: Block,
    /// The last chunk ended in CR: a LF starting the next chunk completes that CRLF.
    after_cr: bool,
    /// Nothing has been decoded yet: the first bytes may be a (possibly split) BOM, held in
    /// `line` until they can be told apart from content.
    at_start: bool,
    poisoned: Option<SseError>,
}

/// The event block being accumulated.
#[derive(Debug, Default)]
struct Block {
    data: String,
    /// At least one `data` line was seen (the data may still be empty).
    has_data: bool,
    event: Option<String>,
    id: Option<String>,
    retry: Option<u64>,
    /// At least one field that makes the block worth dispatching was seen.
    dispatchable: bool,
}

impl Block {
    fn size(&self) -> usize {
        self.data.len()
            + self.event.as_ref().map_or(0, String::len)
            + self.id.as_ref().map_or(0, String::len)
    }
}

impl SseDecoder {
    /// A decoder that rejects events larger than `max_event_size` bytes.
    pub fn new(max_event_size: usize) -> Self {
        SseDecoder {
            max: max_event_size,
            line: Vec::new(),
            block: Block::default(),
            after_cr: false,
            at_start: true,
            poisoned: None,
        }
    }

    /// Feeds one chunk; pushes every completed event block (a block with any of data, id,
    /// event or retry) to `out`.
    ///
    /// On error, the events completed before the offending line are in `out`, and the decoder
    /// is poisoned: every later call returns the same error.
    pub fn feed(&mut self, chunk: &[u8], out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        if let Some(err) = &self.poisoned {
            return Err(err.clone());
        }
        let result = if self.at_start {
            self.feed_start(chunk, out)
        } else {
            self.scan(chunk, out)
        };
        if let Err(err) = &result {
            self.poisoned = Some(err.clone());
            // Give the memory back at once: a poisoned decoder is only waiting to be dropped.
            self.line = Vec::new();
            self.block = Block::default();
        }
        result
    }

    /// End of stream: an incomplete block is discarded (per spec), except that a `retry`
    /// it carried still counts; it is pushed as an event with only `retry` set.
    ///
    /// An unterminated last line is discarded too. Afterwards the decoder is ready for a new
    /// stream, unless it is poisoned (then it stays poisoned and pushes nothing).
    pub fn finish(&mut self, out: &mut Vec<SseEvent>) {
        if self.poisoned.is_some() {
            return;
        }
        let retry = self.block.retry;
        *self = SseDecoder::new(self.max);
        if let Some(retry) = retry {
            out.push(SseEvent {
                retry: Some(retry),
                ..SseEvent::default()
            });
        }
    }

    /// Whether nothing has been fed yet (or everything since was finished): a new stream.
    pub(crate) fn is_fresh(&self) -> bool {
        self.at_start && self.line.is_empty() && self.poisoned.is_none()
    }

    /// Bytes currently held (block so far plus the unterminated line); never more than
    /// `max_event_size`, except for up to two bytes of a BOM split at the start of a stream.
    #[doc(hidden)]
    pub fn buffered_len(&self) -> usize {
        self.line.len() + self.block.size()
    }

    fn feed_start(&mut self, chunk: &[u8], out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        let take = (BOM.len() - self.line.len()).min(chunk.len());
        self.line.extend_from_slice(&chunk[..take]);
        let rest = &chunk[take..];
        if self.line.len() < BOM.len() && BOM.starts_with(&self.line) {
            return Ok(());
        }
        self.at_start = false;
        let head = std::mem::take(&mut self.line);
        if head != BOM {
            self.scan(&head, out)?;
        }
        self.scan(rest, out)
    }

    fn scan(&mut self, chunk: &[u8], out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        let mut pos = 0;
        if self.after_cr && !chunk.is_empty() {
            self.after_cr = false;
            if chunk[0] == b'\n' {
                pos = 1;
            }
        }
        while let Some(found) = memchr::memchr2(b'\n', b'\r', &chunk[pos..]) {
            let end = pos + found;
            if self.line.is_empty() {
                self.complete_line(&chunk[pos..end], out)?;
            } else {
                self.check_line(self.line.len() + (end - pos))?;
                self.line.extend_from_slice(&chunk[pos..end]);
                let line = std::mem::take(&mut self.line);
                let result = self.complete_line(&line, out);
                // Keep the allocation for the next split line.
                self.line = line;
                self.line.clear();
                result?;
            }
            pos = end + 1;
            if chunk[end] == b'\r' {
                match chunk.get(pos) {
                    Some(b'\n') => pos += 1,
                    Some(_) => {}
                    None => self.after_cr = true,
                }
            }
        }
        let tail = &chunk[pos..];
        if !tail.is_empty() {
            let needed = self.line.len() + tail.len();
            self.check_line(needed)?;
            reserve_within(
                &mut self.line,
                tail.len(),
                self.max.saturating_sub(self.block.size()),
            );
            self.line.extend_from_slice(tail);
        }
        Ok(())
    }

    /// A line of `line_len` bytes, added to the block so far, must fit.
    fn check_line(&self, line_len: usize) -> Result<(), SseError> {
        self.check_grow(line_len)
    }

    fn check_grow(&self, additional: usize) -> Result<(), SseError> {
        if self.block.size().saturating_add(additional) > self.max {
            Err(SseError::TooLarge { max: self.max })
        } else {
            Ok(())
        }
    }

    fn complete_line(&mut self, line: &[u8], out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        if line.is_empty() {
            self.dispatch(out);
            return Ok(());
        }
        // Checked here too so that the outcome does not depend on whether the line arrived
        // whole or in pieces.
        self.check_line(line.len())?;
        let (name, value) = match memchr::memchr(b':', line) {
            Some(0) => return Ok(()), // comment
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &[][..]),
        };
        match name {
            b"data" => {
                let text = utf8_lossy(value);
                let separator = usize::from(self.block.has_data);
                self.check_grow(text.len() + separator)?;
                let limit = self
                    .max
                    .saturating_sub(self.block.size() - self.block.data.len());
                let data = &mut self.block.data;
                if data.is_empty() && !self.block.has_data {
                    // The common single-line case: take the decoded line as is.
                    *data = text.into_owned();
                } else {
                    reserve_within_string(data, text.len() + separator, limit);
                    if self.block.has_data {
                        data.push('\n');
                    }
                    data.push_str(&text);
                }
                self.block.has_data = true;
                self.block.dispatchable = true;
            }
            b"event" => {
                let text = utf8_lossy(value);
                // The new type replaces the old one; only the new one counts against the limit.
                self.block.event = None;
                self.check_grow(text.len())?;
                self.block.event = non_empty(text);
                self.block.dispatchable = true;
            }
            // An id containing NUL is ignored (falls through to the unknown-field arm).
            b"id" if !value.contains(&0) => {
                let text = utf8_lossy(value);
                self.block.id = None;
                self.check_grow(text.len())?;
                self.block.id = Some(text.into_owned());
                self.block.dispatchable = true;
            }
            b"retry" => {
                if let Some(ms) = parse_retry(value) {
                    self.block.retry = Some(ms);
                    self.block.dispatchable = true;
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn dispatch(&mut self, out: &mut Vec<SseEvent>) {
        let block = std::mem::take(&mut self.block);
        if block.dispatchable {
            out.push(SseEvent {
                id: block.id,
                event: block.event,
                data: block.data,
                retry: block.retry,
            });
        }
    }
}

/// The spec's "UTF-8 decode": valid text as is, each invalid sequence as U+FFFD. Valid text,
/// nearly all of it, takes the standard library's word-at-a-time check rather than the
/// per-character walk `from_utf8_lossy` makes.
fn utf8_lossy(bytes: &[u8]) -> Cow<'_, str> {
    match std::str::from_utf8(bytes) {
        Ok(text) => Cow::Borrowed(text),
        Err(_) => String::from_utf8_lossy(bytes),
    }
}

fn non_empty(text: Cow<'_, str>) -> Option<String> {
    if text.is_empty() {
        None
    } else {
        Some(text.into_owned())
    }
}

/// `retry` counts only if it is all ASCII digits; an absurdly long value saturates rather than
/// being dropped, so the server's wish to back off is still honoured (the policy caps it).
fn parse_retry(value: &[u8]) -> Option<u64> {
    if value.is_empty() || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(value.iter().fold(0u64, |acc, digit| {
        acc.saturating_mul(10)
            .saturating_add(u64::from(digit - b'0'))
    }))
}

/// Grows like `Vec::reserve` (amortized doubling) but never past `limit` bytes of capacity
/// when the content itself fits in `limit`, so the bound holds for allocations too.
fn reserve_within(buf: &mut Vec<u8>, additional: usize, limit: usize) {
    if let Some(extra) = extra_within(buf.len(), buf.capacity(), additional, limit) {
        buf.reserve_exact(extra);
    }
}

/// [`reserve_within`] for a `String`.
fn reserve_within_string(buf: &mut String, additional: usize, limit: usize) {
    if let Some(extra) = extra_within(buf.len(), buf.capacity(), additional, limit) {
        buf.reserve_exact(extra);
    }
}

/// How much to reserve beyond `len` for `additional` more bytes, if the capacity is short.
fn extra_within(len: usize, capacity: usize, additional: usize, limit: usize) -> Option<usize> {
    let needed = len + additional;
    (needed > capacity).then(|| {
        needed
            .max(capacity.saturating_mul(2))
            .min(limit.max(needed))
            - len
    })
}
