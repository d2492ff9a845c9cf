use super::*;

const MAX: usize = 1024;

fn decode(input: &[u8]) -> Vec<SseEvent> {
    let mut decoder = SseDecoder::new(MAX);
    let mut out = Vec::new();
    decoder.feed(input, &mut out).expect("within limits");
    decoder.finish(&mut out);
    out
}

fn decode_chunks(chunks: &[&[u8]]) -> Vec<SseEvent> {
    let mut decoder = SseDecoder::new(MAX);
    let mut out = Vec::new();
    for chunk in chunks {
        decoder.feed(chunk, &mut out).expect("within limits");
    }
    decoder.finish(&mut out);
    out
}

fn data(text: &str) -> SseEvent {
    SseEvent {
        data: text.to_owned(),
        ..SseEvent::default()
    }
}

#[test]
fn data_line_dispatched_on_blank_line() {
    assert_eq!(decode(b"data: hello\n\n"), vec![data("hello")]);
}

#[test]
fn lines_may_end_in_lf_crlf_or_lone_cr() {
    let expected = vec![data("a"), data("b"), data("c")];
    assert_eq!(decode(b"data: a\n\ndata: b\r\n\r\ndata: c\r\r"), expected);
    assert_eq!(decode(b"data: a\r\rdata: b\n\ndata: c\r\n\n"), expected);
}

#[test]
fn crlf_split_across_chunks_is_one_line_end() {
    // Had the LF counted as a second line end, the block would dispatch after `data: a` and
    // `data: b` would be a block of its own.
    let events = decode_chunks(&[b"data: a\r", b"\ndata: b\r", b"\n\r", b"\n"]);
    assert_eq!(events, vec![data("a\nb")]);
}

#[test]
fn lone_cr_at_chunk_end_followed_by_other_byte_is_a_line_end() {
    let events = decode_chunks(&[b"data: a\r", b"data: b\r", b"\r"]);
    assert_eq!(events, vec![data("a\nb")]);
}

#[test]
fn lone_cr_at_chunk_end_then_empty_chunk_then_lf_is_still_crlf() {
    let events = decode_chunks(&[b"data: a\r", b"", b"\ndata: b\n\n"]);
    assert_eq!(events, vec![data("a\nb")]);
}

#[test]
fn bom_at_stream_start_is_skipped_once() {
    assert_eq!(decode(b"\xEF\xBB\xBFdata: x\n\n"), vec![data("x")]);
    // A second BOM is part of the field name, which then is unknown.
    assert_eq!(decode(b"\xEF\xBB\xBF\xEF\xBB\xBFdata: x\n\n"), vec![]);
}

#[test]
fn bom_split_across_chunks_is_skipped() {
    let events = decode_chunks(&[b"\xEF", b"\xBB", b"\xBFdata: x\n\n"]);
    assert_eq!(events, vec![data("x")]);
}

#[test]
fn bom_prefix_that_is_not_a_bom_is_content() {
    // An invalid sequence starting like a BOM is kept (lossily) and the line still parses.
    let events = decode_chunks(&[b"\xEF", b"\n", b"data: y\n\n"]);
    assert_eq!(events, vec![data("y")]);
    let events = decode_chunks(&[b"d", b"ata: z\n\n"]);
    assert_eq!(events, vec![data("z")]);
}

#[test]
fn bom_not_at_start_is_not_skipped() {
    assert_eq!(
        decode(b"data: a\n\n\xEF\xBB\xBFdata: b\n\n"),
        vec![data("a")],
        "the BOM makes the field name unknown"
    );
}

#[test]
fn comment_lines_are_ignored() {
    assert_eq!(
        decode(b": keep-alive\ndata: x\n:another\n\n"),
        vec![data("x")]
    );
}

#[test]
fn comment_only_block_dispatches_nothing() {
    assert_eq!(decode(b": ping\n\n: ping\n\n"), vec![]);
}

#[test]
fn one_leading_space_is_removed_from_value() {
    assert_eq!(decode(b"data:x\n\n"), vec![data("x")]);
    assert_eq!(decode(b"data: x\n\n"), vec![data("x")]);
    assert_eq!(decode(b"data:  x\n\n"), vec![data(" x")]);
    assert_eq!(decode(b"data:x \n\n"), vec![data("x ")]);
}

#[test]
fn value_may_contain_colons() {
    assert_eq!(
        decode(b"data: {\"a\":\"b:c\"}\n\n"),
        vec![data("{\"a\":\"b:c\"}")]
    );
}

#[test]
fn line_without_colon_is_field_with_empty_value() {
    // `data` alone appends an empty line; two of them give "\n".
    assert_eq!(decode(b"data\ndata\n\n"), vec![data("\n")]);
    assert_eq!(
        decode(b"id\n\n"),
        vec![SseEvent {
            id: Some(String::new()),
            ..SseEvent::default()
        }]
    );
}

#[test]
fn unknown_fields_are_ignored() {
    assert_eq!(decode(b"foo: bar\ndata: x\nDATA: y\n\n"), vec![data("x")]);
    assert_eq!(
        decode(b"foo: bar\n\n"),
        vec![],
        "no dispatch for unknown only"
    );
}

#[test]
fn data_lines_are_joined_with_lf() {
    assert_eq!(
        decode(b"data: a\ndata: b\ndata: c\n\n"),
        vec![data("a\nb\nc")]
    );
    assert_eq!(decode(b"data: a\ndata:\n\n"), vec![data("a\n")]);
    assert_eq!(decode(b"data:\ndata: a\n\n"), vec![data("\na")]);
}

#[test]
fn event_field_sets_the_type() {
    assert_eq!(
        decode(b"event: update\ndata: x\n\n"),
        vec![SseEvent {
            event: Some("update".into()),
            data: "x".into(),
            ..SseEvent::default()
        }]
    );
}

#[test]
fn last_event_field_wins_and_empty_type_means_default() {
    assert_eq!(
        decode(b"event: a\nevent: b\ndata: x\n\n")[0]
            .event
            .as_deref(),
        Some("b")
    );
    assert_eq!(decode(b"event: a\nevent:\ndata: x\n\n"), vec![data("x")]);
}

#[test]
fn event_type_does_not_leak_into_next_block() {
    let events = decode(b"event: a\ndata: 1\n\ndata: 2\n\n");
    assert_eq!(events[1], data("2"));
}

#[test]
fn id_applies_to_its_block_only() {
    let events = decode(b"id: 7\ndata: a\n\ndata: b\n\n");
    assert_eq!(events[0].id.as_deref(), Some("7"));
    assert_eq!(events[1].id, None);
}

#[test]
fn last_id_in_block_wins() {
    assert_eq!(
        decode(b"id: 1\nid: 2\ndata: x\n\n")[0].id.as_deref(),
        Some("2")
    );
}

#[test]
fn empty_id_is_reported_as_reset() {
    assert_eq!(decode(b"id:\ndata: x\n\n")[0].id.as_deref(), Some(""));
    assert_eq!(decode(b"id: \ndata: x\n\n")[0].id.as_deref(), Some(""));
}

#[test]
fn id_containing_nul_is_ignored() {
    assert_eq!(decode(b"id: a\0b\ndata: x\n\n"), vec![data("x")]);
    assert_eq!(
        decode(b"id: 1\nid: a\0b\ndata: x\n\n")[0].id.as_deref(),
        Some("1")
    );
    assert_eq!(
        decode(b"id: a\0b\n\n"),
        vec![],
        "an ignored id does not make a block"
    );
}

#[test]
fn retry_with_only_digits_is_taken() {
    assert_eq!(
        decode(b"retry: 3000\n\n"),
        vec![SseEvent {
            retry: Some(3000),
            ..SseEvent::default()
        }]
    );
}

#[test]
fn retry_with_non_digits_is_ignored() {
    for input in [
        &b"retry: 30s\n\n"[..],
        b"retry: -1\n\n",
        b"retry: 1.5\n\n",
        b"retry: +5\n\n",
        b"retry:  5\n\n",
        b"retry:\n\n",
        b"retry\n\n",
    ] {
        assert_eq!(
            decode(input),
            vec![],
            "{:?}",
            String::from_utf8_lossy(input)
        );
    }
    assert_eq!(decode(b"retry: 10\nretry: x\n\n")[0].retry, Some(10));
}

#[test]
fn retry_overflowing_u64_saturates() {
    assert_eq!(
        decode(b"retry: 99999999999999999999999\n\n")[0].retry,
        Some(u64::MAX)
    );
}

#[test]
fn block_with_only_id_is_dispatched_priming_event() {
    assert_eq!(
        decode(b"id: s-1\ndata:\n\n"),
        vec![SseEvent {
            id: Some("s-1".into()),
            ..SseEvent::default()
        }]
    );
    assert_eq!(
        decode(b"id: s-1\n\n"),
        vec![SseEvent {
            id: Some("s-1".into()),
            ..SseEvent::default()
        }]
    );
}

#[test]
fn block_with_only_retry_or_event_is_dispatched() {
    assert_eq!(decode(b"retry: 5\n\n")[0].retry, Some(5));
    assert_eq!(decode(b"event: x\n\n")[0].event.as_deref(), Some("x"));
}

#[test]
fn block_with_only_empty_data_is_dispatched() {
    assert_eq!(decode(b"data:\n\n"), vec![data("")]);
}

#[test]
fn blank_line_after_empty_block_emits_nothing() {
    assert_eq!(decode(b"\n\n\r\n\r\r"), vec![]);
    assert_eq!(decode(b"data: a\n\n\n\n"), vec![data("a")]);
}

#[test]
fn end_of_stream_discards_incomplete_block() {
    assert_eq!(decode(b"id: 5\ndata: partial\n"), vec![]);
    assert_eq!(decode(b"data: a\n\ndata: b"), vec![data("a")]);
}

#[test]
fn end_of_stream_keeps_retry_of_incomplete_block() {
    assert_eq!(
        decode(b"id: 5\nretry: 250\ndata: partial\n"),
        vec![SseEvent {
            retry: Some(250),
            ..SseEvent::default()
        }]
    );
}

#[test]
fn end_of_stream_discards_unterminated_retry_line() {
    // The line may have been cut short; `retry: 50` could be the start of `retry: 5000`.
    assert_eq!(decode(b"retry: 50"), vec![]);
}

#[test]
fn finish_makes_decoder_ready_for_new_stream() {
    let mut decoder = SseDecoder::new(MAX);
    let mut out = Vec::new();
    decoder.feed(b"data: a\n\ndata: partial", &mut out).unwrap();
    decoder.finish(&mut out);
    decoder.feed(b"\xEF\xBB\xBFdata: b\n\n", &mut out).unwrap();
    decoder.finish(&mut out);
    assert_eq!(out, vec![data("a"), data("b")]);
    assert_eq!(decoder.buffered_len(), 0);
}

#[test]
fn invalid_utf8_is_decoded_lossily() {
    assert_eq!(decode(b"data: a\xFFb\n\n"), vec![data("a\u{FFFD}b")]);
    assert_eq!(
        decode(b"id: \xC3\nevent: \xE2\x82\ndata: x\n\n"),
        vec![SseEvent {
            id: Some("\u{FFFD}".into()),
            event: Some("\u{FFFD}".into()),
            data: "x".into(),
            retry: None,
        }]
    );
}

#[test]
fn multibyte_utf8_split_across_chunks_is_decoded_whole() {
    let text = "data: h\u{e9}\u{20ac}\u{1F600}\n\n".as_bytes();
    for split in 0..text.len() {
        let (a, b) = text.split_at(split);
        assert_eq!(
            decode_chunks(&[a, b]),
            vec![data("h\u{e9}\u{20ac}\u{1F600}")]
        );
    }
}

#[test]
fn event_larger_than_max_is_an_error() {
    let mut decoder = SseDecoder::new(16);
    let mut out = Vec::new();
    assert_eq!(
        decoder.feed(b"data: 0123456789\ndata: 0123456789\n\n", &mut out),
        Err(SseError::TooLarge { max: 16 })
    );
    assert!(out.is_empty());
}

#[test]
fn limit_counts_block_so_far_plus_current_line() {
    // After the first line the block holds 10 bytes; the second line is 9 bytes (field name
    // included): 19 bytes must fit, whatever the final data size (15 bytes).
    let input = b"data:0123456789\ndata:0123\n\n";
    let mut decoder = SseDecoder::new(19);
    let mut out = Vec::new();
    decoder.feed(input, &mut out).unwrap();
    assert_eq!(out, vec![data("0123456789\n0123")]);
    let mut decoder = SseDecoder::new(18);
    assert_eq!(
        decoder.feed(input, &mut Vec::new()),
        Err(SseError::TooLarge { max: 18 })
    );
}

#[test]
fn unterminated_line_larger_than_max_is_an_error() {
    let mut decoder = SseDecoder::new(64);
    let mut out = Vec::new();
    let mut result = Ok(());
    for _ in 0..100 {
        result = decoder.feed(b": xxxxxxxxxxxxxxxx", &mut out);
        assert!(decoder.buffered_len() <= 64);
        if result.is_err() {
            break;
        }
    }
    assert_eq!(result, Err(SseError::TooLarge { max: 64 }));
}

#[test]
fn long_comment_line_is_an_error_whole_or_split() {
    let line = [b":".as_slice(), &[b'x'; 100], b"\n"].concat();
    let mut whole = SseDecoder::new(64);
    assert!(whole.feed(&line, &mut Vec::new()).is_err());
    let mut split = SseDecoder::new(64);
    let first = split.feed(&line[..50], &mut Vec::new());
    assert!(first.is_ok());
    assert!(split.feed(&line[50..], &mut Vec::new()).is_err());
}

#[test]
fn events_before_the_oversized_one_are_delivered() {
    let mut decoder = SseDecoder::new(32);
    let mut out = Vec::new();
    let mut input = b"data: ok\n\ndata: ".to_vec();
    input.extend_from_slice(&[b'x'; 64]);
    assert!(decoder.feed(&input, &mut out).is_err());
    assert_eq!(out, vec![data("ok")]);
}

#[test]
fn lossy_expansion_counts_against_the_limit() {
    // 10 invalid bytes become 10 U+FFFD (30 bytes) > 20.
    let mut decoder = SseDecoder::new(20);
    let input = [b"data:".as_slice(), &[0xFF; 10], b"\n\n"].concat();
    assert_eq!(
        decoder.feed(&input, &mut Vec::new()),
        Err(SseError::TooLarge { max: 20 })
    );
}

#[test]
fn decoder_is_poisoned_after_an_error() {
    let mut decoder = SseDecoder::new(8);
    let mut out = Vec::new();
    let err = decoder.feed(b"data: 0123456789\n\n", &mut out).unwrap_err();
    assert_eq!(decoder.feed(b"data: a\n\n", &mut out), Err(err.clone()));
    assert_eq!(decoder.feed(b"", &mut out), Err(err));
    decoder.finish(&mut out);
    assert!(out.is_empty());
    assert_eq!(decoder.buffered_len(), 0, "memory released");
}

#[test]
fn partial_line_is_buffered_across_chunks() {
    let events = decode_chunks(&[b"da", b"ta: hel", b"lo\n", b"\n"]);
    assert_eq!(events, vec![data("hello")]);
}

#[test]
fn one_byte_chunks_give_the_same_events() {
    let input =
        b"\xEF\xBB\xBFretry: 10\r\nid: 1\r\n: c\r\nevent: e\rdata: a\ndata: b\r\n\r\nid:\n\n";
    let chunks: Vec<&[u8]> = input.chunks(1).collect();
    assert_eq!(decode_chunks(&chunks), decode(input));
    assert_eq!(decode(input).len(), 2);
}

#[test]
fn error_display_names_the_limit() {
    assert!(SseError::TooLarge { max: 42 }.to_string().contains("42"));
}
