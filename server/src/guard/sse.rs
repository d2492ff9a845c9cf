//! SSE blocks as they pass: split, read (`id`, `data`), written back with another `id`.
//!
//! The guard does not re-encode what it does not change: a block is kept as its raw lines,
//! and only its `id:` line is replaced. A block is read where it lies, in the chunk that
//! completed it; only a block split across chunks is copied (until its end arrives). Blocks
//! are bounded; one over the bound ends the splitting (the caller passes the rest through
//! untouched).

use std::borrow::Cow;

use bytes::{Buf, BufMut, Bytes, BytesMut};

use super::scan;

/// One SSE block (the lines up to a blank line): an event, or a `retry:`/comment-only block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Block<'a> {
    raw: &'a [u8],
    id: Option<Field>,
    data: Option<Field>,
    /// `raw[start..end]` is the block's only `id` line with its `\n`, when the block has one
    /// and no `\r` anywhere: the block is then rewritten by splicing, not line by line.
    lone_id_line: Option<(usize, usize)>,
    /// Bytes before its first line: the byte order mark a stream may open with (the first
    /// block's), which is no part of any line.
    lead: usize,
}

/// A field's value: most are one line, read in place from the block's bytes (no copy per
/// event); data over several lines is joined once.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Field {
    /// `raw[start..end]`.
    Span(usize, usize),
    Joined(Vec<u8>),
}

impl Field {
    fn bytes<'a>(&'a self, raw: &'a [u8]) -> &'a [u8] {
        match self {
            Field::Span(start, end) => &raw[*start..*end],
            Field::Joined(bytes) => bytes,
        }
    }
}

impl Block<'_> {
    /// The `id` field's value, when the block sets one (the last one wins, as in the
    /// specification; a value containing NUL is ignored, as there), as UTF-8.
    pub(crate) fn id(&self) -> Option<Cow<'_, [u8]>> {
        self.id.as_ref().map(|f| {
            let bytes = f.bytes(self.raw);
            // Most are ASCII (the cheapest check), or else UTF-8; the others read as a client
            // decodes them.
            if bytes.is_ascii() || std::str::from_utf8(bytes).is_ok() {
                Cow::Borrowed(bytes)
            } else {
                Cow::Owned(String::from_utf8_lossy(bytes).into_owned().into_bytes())
            }
        })
    }

    /// The `data` fields joined by `\n`, as bytes (a JSON parser reads them as they are, its
    /// strings checked as it goes: no pass over them to check their UTF-8 first); `None` when
    /// the block has no data line.
    pub(crate) fn data(&self) -> Option<&[u8]> {
        self.data.as_ref().map(|f| f.bytes(self.raw))
    }

    /// The block as received, with its terminating blank line.
    pub(crate) fn raw(&self) -> &[u8] {
        self.raw
    }

    /// Writes the block with `id` as its only `id` line (first), and `data` replacing its
    /// data lines when given; every other line as received, `\n`-terminated.
    pub(crate) fn write_with(&self, id: Option<&[u8]>, data: Option<&str>, out: &mut BytesMut) {
        // A byte order mark stays where a client looks for it: first in the stream.
        out.put_slice(&self.raw[..self.lead]);
        if let Some(id) = id {
            out.put_slice(b"id: ");
            out.put_slice(id);
            out.put_u8(b'\n');
        }
        if let (Some(_), None, Some((start, end))) = (id, data, self.lone_id_line) {
            // Every other line is written as received: the bytes around the id line.
            out.put_slice(&self.raw[self.lead..start]);
            out.put_slice(&self.raw[end..]);
            return;
        }
        let mut data_written = false;
        for line in lines(&self.raw[self.lead..]) {
            if line.is_empty() {
                continue;
            }
            match field_name(line) {
                b"id" => continue,
                b"data" if data.is_some() => {
                    if !data_written {
                        for part in data.unwrap_or_default().split('\n') {
                            out.put_slice(b"data: ");
                            out.put_slice(part.as_bytes());
                            out.put_u8(b'\n');
                        }
                        data_written = true;
                    }
                    continue;
                }
                _ => {}
            }
            out.put_slice(line);
            out.put_u8(b'\n');
        }
        out.put_u8(b'\n');
    }
}

/// Splits a byte stream into [`Block`]s, at most `max_block` bytes each.
///
/// Positions are kept from the start of the block being read: in `buf` when it was carried
/// over from an earlier chunk, else in the chunk being fed.
#[derive(Debug)]
pub(crate) struct Splitter {
    /// An incomplete block's bytes, carried over to the next chunk.
    buf: BytesMut,
    /// Where the current line starts.
    line_start: usize,
    /// Bytes already scanned for line ends.
    scanned: usize,
    /// The last byte scanned was a `\r`: a `\n` right after it belongs to the same line end.
    after_cr: bool,
    max_block: usize,
    id: Option<Field>,
    data: Option<Field>,
    /// The current block's `id` lines: how many, the span of the last one; and whether it
    /// has a `\r`.
    id_lines: (u32, usize, usize),
    has_cr: bool,
    /// No line of the stream has ended yet: the first may open with a byte order mark.
    first_line: bool,
    /// The current block opens with a byte order mark this long.
    lead: usize,
}

/// UTF-8's byte order mark: an SSE stream may open with one, which a client skips (as any
/// decoder of the `text/event-stream` type does), so the first line is read past it.
const BOM: &[u8] = b"\xEF\xBB\xBF";

/// A block grew over the bound: splitting stops; `pending` are the bytes held so far, to be
/// passed on untouched with everything after them.
#[derive(Debug)]
pub(crate) struct Overflow {
    /// What the splitter held.
    pub pending: Bytes,
}

impl Splitter {
    /// A splitter refusing blocks over `max_block` bytes.
    pub(crate) fn new(max_block: usize) -> Self {
        Self {
            buf: BytesMut::new(),
            line_start: 0,
            scanned: 0,
            after_cr: false,
            max_block,
            id: None,
            data: None,
            id_lines: (0, 0, 0),
            has_cr: false,
            first_line: true,
            lead: 0,
        }
    }

    /// Feeds bytes: each block they complete goes to `each`, in order, until it returns
    /// false (the rest of the chunk is then dropped: the caller stops splitting).
    pub(crate) fn feed(
        &mut self,
        chunk: &[u8],
        mut each: impl FnMut(Block<'_>) -> bool,
    ) -> Result<(), Overflow> {
        if self.buf.is_empty() {
            let (done, go_on) = self.scan(chunk, &mut each);
            if go_on {
                self.buf.extend_from_slice(&chunk[done..]);
            }
        } else {
            self.buf.extend_from_slice(chunk);
            let mut buf = std::mem::take(&mut self.buf);
            let (done, go_on) = self.scan(&buf, &mut each);
            if go_on {
                buf.advance(done);
                self.buf = buf;
            }
        }
        if self.buf.len() > self.max_block {
            let pending = std::mem::take(&mut self.buf).freeze();
            return Err(Overflow { pending });
        }
        Ok(())
    }

    /// Bytes held that do not make a complete block (a stream that ended mid-block).
    pub(crate) fn remainder(&mut self) -> Bytes {
        self.line_start = 0;
        self.scanned = 0;
        std::mem::take(&mut self.buf).freeze()
    }

    /// Scans `src`, whose first byte is the current block's; says how many bytes the blocks
    /// given out took, and whether `each` wants more. One turn per line: its end is searched
    /// for from where the scan stands, and the line is read or ends the block.
    fn scan(&mut self, src: &[u8], each: &mut impl FnMut(Block<'_>) -> bool) -> (usize, bool) {
        let mut base = 0;
        loop {
            let block = &src[base..];
            if self.after_cr {
                let Some(&b) = block.get(self.scanned) else {
                    break;
                };
                self.after_cr = false;
                if b == b'\n' {
                    // The `\n` of a `\r\n`: the line already ended at the `\r`.
                    self.scanned += 1;
                    self.line_start = self.scanned;
                    continue;
                }
            }
            let Some(i) = block
                .get(self.scanned..)
                .and_then(|rest| scan::find2(b'\n', b'\r', rest))
            else {
                self.scanned = block.len();
                break;
            };
            let end = self.scanned + i;
            self.scanned = end + 1;
            self.after_cr = block[end] == b'\r';
            self.has_cr |= self.after_cr;
            if std::mem::take(&mut self.first_line) && block[..end].starts_with(BOM) {
                // Unread, the mark would hide the first line's field (`id`, `data`) from the
                // guard, not from the client.
                self.line_start = BOM.len();
                self.lead = BOM.len();
            }
            if self.line_start == end {
                let done = self.take_block(&block[..end + 1]);
                base += end + 1;
                if !each(done) {
                    return (base, false);
                }
            } else {
                self.read_field(block, end);
                self.line_start = self.scanned;
            }
        }
        (base, true)
    }

    fn take_block<'a>(&mut self, raw: &'a [u8]) -> Block<'a> {
        self.line_start = 0;
        self.scanned = 0;
        let lone_id_line = match (std::mem::take(&mut self.id_lines), self.has_cr) {
            ((1, start, end), false) => Some((start, end)),
            _ => None,
        };
        // A block that ended at a `\r` may leave the `\n` of its `\r\n` to the next one.
        self.has_cr = self.after_cr;
        Block {
            raw,
            id: self.id.take(),
            data: self.data.take(),
            lone_id_line,
            lead: std::mem::take(&mut self.lead),
        }
    }

    /// Reads the line `block[line_start..line_end]`, whose terminator is at `line_end`. Only
    /// `id` and `data` matter: a line is one of those when it is the name alone or the name
    /// and a `:` (the name is what comes before the first `:`, and neither holds one).
    fn read_field(&mut self, block: &[u8], line_end: usize) {
        let line_start = self.line_start;
        let line = &block[line_start..line_end];
        let (is_id, name_len) = match line {
            [b'i', b'd', b':', ..] | [b'i', b'd'] => (true, 2),
            [b'd', b'a', b't', b'a', b':', ..] | [b'd', b'a', b't', b'a'] => (false, 4),
            _ => return,
        };
        let mut start = line_start + name_len;
        if block.get(start) == Some(&b':') && start < line_end {
            start += 1;
            if start < line_end && block[start] == b' ' {
                start += 1;
            }
        }
        let value = Field::Span(start, line_end);
        if is_id {
            // With its terminator (a `\n`: a block with a `\r` is not spliced).
            self.id_lines = (self.id_lines.0 + 1, line_start, line_end + 1);
            if !block[start..line_end].contains(&0) {
                self.id = Some(value);
            }
            return;
        }
        // Joined lines grow in place: each line is copied once, however many follow.
        let mut joined = match self.data.take() {
            None => {
                self.data = Some(value);
                return;
            }
            Some(Field::Joined(joined)) => joined,
            Some(Field::Span(s, e)) => block[s..e].to_vec(),
        };
        joined.push(b'\n');
        joined.extend_from_slice(&block[start..line_end]);
        self.data = Some(Field::Joined(joined));
    }
}

/// The field name of a line (empty for a comment, which starts with `:`).
fn field_name(line: &[u8]) -> &[u8] {
    match scan::find2(b':', b':', line) {
        Some(i) => &line[..i],
        None => line,
    }
}

/// The lines of a block's raw bytes, without their terminators.
fn lines(raw: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = raw;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let end = scan::find2(b'\n', b'\r', rest).unwrap_or(rest.len());
        let line = &rest[..end];
        let mut next = (end + 1).min(rest.len());
        if rest.get(end) == Some(&b'\r') && rest.get(end + 1) == Some(&b'\n') {
            next = end + 2;
        }
        rest = &rest[next..];
        Some(line)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A block kept past the chunk that completed it.
    #[derive(Debug, PartialEq, Eq)]
    struct Kept {
        raw: Vec<u8>,
        id: Option<Field>,
        data: Option<Field>,
        lone_id_line: Option<(usize, usize)>,
        lead: usize,
    }

    impl Kept {
        fn block(&self) -> Block<'_> {
            Block {
                raw: &self.raw,
                id: self.id.clone(),
                data: self.data.clone(),
                lone_id_line: self.lone_id_line,
                lead: self.lead,
            }
        }
    }

    fn keep(out: &mut Vec<Kept>) -> impl FnMut(Block<'_>) -> bool + '_ {
        |b| {
            out.push(Kept {
                raw: b.raw.to_vec(),
                id: b.id,
                data: b.data,
                lone_id_line: b.lone_id_line,
                lead: b.lead,
            });
            true
        }
    }

    fn split_all(input: &[u8], chunk: usize) -> Vec<Kept> {
        let mut s = Splitter::new(1024);
        let mut out = Vec::new();
        for part in input.chunks(chunk.max(1)) {
            s.feed(part, keep(&mut out)).unwrap();
        }
        out
    }

    #[test]
    fn blocks_split_alike_whatever_the_chunking_and_line_ends() {
        let input = b"id: a\ndata: x\n\nretry: 5\r\n\r\n: ping\r\rid: b\r\ndata: 1\ndata: 2\n\n";
        let whole = split_all(input, input.len());
        for chunk in 1..input.len() {
            assert_eq!(split_all(input, chunk), whole, "chunk {chunk}");
        }
        assert_eq!(whole.len(), 4);
        assert_eq!(whole[0].block().id().as_deref(), Some(&b"a"[..]));
        assert_eq!(whole[0].block().data(), Some(&b"x"[..]));
        assert_eq!(whole[1].block().id().as_deref(), None);
        // A block ends at its blank line's first byte; the stream of bytes is unchanged.
        assert_eq!(whole[1].block().raw(), b"retry: 5\r\n\r");
        assert_eq!(whole[2].block().raw(), b"\n: ping\r\r");
        let joined: Vec<u8> = whole.iter().flat_map(|b| b.raw.clone()).collect();
        assert_eq!(joined, input);
        assert_eq!(whole[3].block().id().as_deref(), Some(&b"b"[..]));
        assert_eq!(whole[3].block().data(), Some(&b"1\n2"[..]));
    }

    #[test]
    fn a_block_is_written_back_with_another_id_and_nothing_else_changed() {
        let kept = &split_all(b"event: message\nid: inner/7\nretry: 10\ndata: {}\n\n", 3)[0];
        let b = kept.block();
        let mut out = BytesMut::new();
        b.write_with(Some(b"s-1"), None, &mut out);
        assert_eq!(
            &out[..],
            b"id: s-1\nevent: message\nretry: 10\ndata: {}\n\n"
        );
        let mut out = BytesMut::new();
        b.write_with(Some(b"s-2"), Some("{\"a\":1}"), &mut out);
        assert_eq!(
            &out[..],
            b"id: s-2\nevent: message\nretry: 10\ndata: {\"a\":1}\n\n"
        );
    }

    #[test]
    fn a_spliced_block_is_written_as_line_by_line() {
        let input: &[u8] = b"id: a\ndata: x\n\n: c\nid: b\nevent: e\n\nid\n\nid: 1\nid: 2\ndata: y\n\nevent: f\r\nid: g\r\n\r\ndata: z\nid: h\n\n";
        let blocks = split_all(input, 5);
        let spliced = blocks.iter().filter(|b| b.lone_id_line.is_some()).count();
        assert_eq!(spliced, 3, "one id line and no \\r: spliced");
        for kept in &blocks {
            let block = kept.block();
            let (mut fast, mut slow) = (BytesMut::new(), BytesMut::new());
            block.write_with(Some(b"s-9"), None, &mut fast);
            let by_lines = Block {
                lone_id_line: None,
                ..block.clone()
            };
            by_lines.write_with(Some(b"s-9"), None, &mut slow);
            assert_eq!(fast, slow, "{:?}", block.raw());
        }
    }

    // | a stream opening with a byte order mark, cut anywhere; a mark later on, or bytes that
    // only begin one | the first line read past the mark (as a client reads it), the mark
    // kept first when the block is written with another id; anywhere else, or not whole, it
    // is the line's own bytes |
    #[test]
    fn a_byte_order_mark_opening_the_stream_is_read_past_and_kept() {
        let input = b"\xEF\xBB\xBFid: a\ndata: x\n\n\xEF\xBB\xBFid: b\n\n";
        for chunk in 1..input.len() {
            let blocks = split_all(input, chunk);
            assert_eq!(blocks.len(), 2, "chunk {chunk}");
            let first = blocks[0].block();
            assert_eq!(first.id().as_deref(), Some(&b"a"[..]), "chunk {chunk}");
            assert_eq!(first.data(), Some(&b"x"[..]));
            assert_eq!(
                blocks[1].block().id(),
                None,
                "a mark past the start is no mark"
            );
            for spliced in [true, false] {
                let block = Block {
                    lone_id_line: first.lone_id_line.filter(|_| spliced),
                    ..first.clone()
                };
                let mut out = BytesMut::new();
                block.write_with(Some(b"s-1"), None, &mut out);
                assert_eq!(&out[..], b"\xEF\xBB\xBFid: s-1\ndata: x\n\n");
            }
        }
        let blank = split_all(b"\xEF\xBB\xBF\nid: c\n\n", 1);
        assert_eq!(
            blank[0].block().raw(),
            b"\xEF\xBB\xBF\n",
            "a mark alone is a blank line"
        );
        assert_eq!(blank[1].block().id().as_deref(), Some(&b"c"[..]));
        let almost = split_all(b"\xEF\xBBid: d\n\n", 1);
        assert_eq!(almost[0].block().id(), None);
    }

    // | an event whose data spans many lines | its lines joined by `\n`, each copied once
    // (joining them anew per line was quadratic in the block) |
    #[test]
    fn many_data_lines_are_joined_whole() {
        let lines = 100_000;
        let input = format!("id: a\n{}\n", "data: x\n".repeat(lines));
        let mut s = Splitter::new(input.len());
        let mut data = None;
        s.feed(input.as_bytes(), |b| {
            data = b.data().map(<[u8]>::to_vec);
            true
        })
        .unwrap();
        let data = data.expect("one event");
        assert_eq!(data.len(), 2 * lines - 1);
        assert!(data.chunks(2).all(|c| c == b"x\n" || c == b"x"));
    }

    #[test]
    fn empty_data_and_ids_without_data_are_kept() {
        let b = &split_all(b"id: p\ndata:\n\n", 1)[0];
        assert_eq!(b.block().id().as_deref(), Some(&b"p"[..]));
        assert_eq!(b.block().data(), Some(&b""[..]));
        let b = &split_all(b"id: q\n\n", 1)[0];
        assert_eq!(b.block().data(), None);
    }

    #[test]
    fn an_oversized_block_stops_the_splitting() {
        let mut s = Splitter::new(8);
        let mut out = Vec::new();
        s.feed(b"data: 1\n\n", keep(&mut out)).unwrap();
        let err = s.feed(b"data: 0123456789", keep(&mut out)).unwrap_err();
        assert_eq!(&err.pending[..], b"data: 0123456789");
        assert_eq!(out.len(), 1);
    }

    #[test]
    fn a_block_split_across_chunks_is_carried_and_a_stop_is_honoured() {
        let mut s = Splitter::new(1024);
        let mut out = Vec::new();
        s.feed(b"id: a\ndata: x\n\nid: b\nda", keep(&mut out))
            .unwrap();
        assert_eq!(out.len(), 1);
        s.feed(b"ta: y\n\nid: c\n\nid: d\n\n", keep(&mut out))
            .unwrap();
        let ids: Vec<_> = out
            .iter()
            .map(|k| String::from_utf8(k.block().id().unwrap().into_owned()).unwrap())
            .collect();
        assert_eq!(ids, ["a", "b", "c", "d"]);
        assert_eq!(out[1].block().data(), Some(&b"y"[..]));
        let mut seen = 0;
        s.feed(b"id: e\n\nid: f\n\n", |_| {
            seen += 1;
            false
        })
        .unwrap();
        assert_eq!(seen, 1, "no block after the one that said stop");
    }
}
