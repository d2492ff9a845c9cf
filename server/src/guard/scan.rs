//! A look at a JSON object's members without parsing it: each member's key and where its
//! value lies. The rules read two or three members of the common messages (an unkeyed call,
//! an answer event); a deserializer would carry every byte through its visitor to get them.
//!
//! This follows the structure (strings, nesting) and checks nothing else: a caller only takes
//! its word for a message it would pass the same way whatever the rest held. Anything it
//! cannot follow plainly (a key written with escapes, a value left open, nesting deeper than
//! a deserializer would accept) is a give-up (`None`), and the caller reads the message the
//! long way.

use serde_json::Value;

/// Nesting deeper than this is left to the deserializer (whose own limit is the same).
const MAX_DEPTH: usize = 128;

/// Reads the object opening at `start`: for each member, `member` gets its key and where its
/// value starts, and says where the value ends (having read it, or passed over it with
/// [`skip`]); `None` gives up. Says where the object ends.
pub(crate) fn object<'a>(
    bytes: &'a [u8],
    start: usize,
    mut member: impl FnMut(&'a [u8], usize) -> Option<usize>,
) -> Option<usize> {
    if bytes.get(start) != Some(&b'{') {
        return None;
    }
    let mut at = skip_ws(bytes, start + 1);
    if bytes.get(at) == Some(&b'}') {
        return Some(at + 1);
    }
    loop {
        if bytes.get(at) != Some(&b'"') {
            return None;
        }
        let (key_end, escaped) = string_end(bytes, at)?;
        if escaped {
            return None;
        }
        let key = &bytes[at + 1..key_end - 1];
        at = skip_ws(bytes, key_end);
        if bytes.get(at) != Some(&b':') {
            return None;
        }
        let end = member(key, skip_ws(bytes, at + 1))?;
        at = skip_ws(bytes, end);
        match bytes.get(at) {
            Some(b',') => at = skip_ws(bytes, at + 1),
            Some(b'}') => return Some(at + 1),
            _ => return None,
        }
    }
}

/// Where the document's first value starts.
pub(crate) fn first(bytes: &[u8]) -> usize {
    skip_ws(bytes, 0)
}

/// A string value without escapes, as its bytes (UTF-8: ASCII needs no further check);
/// `None` for anything else.
pub(crate) fn plain_bytes(value: &[u8]) -> Option<&[u8]> {
    let inner = value.strip_prefix(b"\"")?.strip_suffix(b"\"")?;
    if inner.iter().any(|b| matches!(b, b'\\' | b'"')) {
        return None;
    }
    (inner.is_ascii() || std::str::from_utf8(inner).is_ok()).then_some(inner)
}

/// A string value without escapes, as text; `None` for anything else.
pub(crate) fn plain_str(value: &[u8]) -> Option<&str> {
    let inner = value.strip_prefix(b"\"")?.strip_suffix(b"\"")?;
    if inner.iter().any(|b| matches!(b, b'\\' | b'"')) {
        return None;
    }
    std::str::from_utf8(inner).ok()
}

/// A JSON-RPC id (a string or a number) as the deserializer would read it; `None` for any
/// other value (or one this cannot read plainly).
pub(crate) fn id(value: &[u8]) -> Option<Value> {
    match value.first()? {
        b'"' => plain_str(value).map(Value::from),
        b'-' | b'0'..=b'9' => {
            if value.len() <= 18 && !leading_zero(value) {
                // Plain digits: the common id, read without the deserializer, in one pass.
                let n = value.iter().try_fold(0u64, |n, &d| {
                    let d = d.wrapping_sub(b'0');
                    (d <= 9).then(|| n * 10 + u64::from(d))
                });
                if let Some(n) = n {
                    return Some(Value::from(n));
                }
            }
            match serde_json::from_slice::<Value>(value).ok()? {
                n @ Value::Number(_) => Some(n),
                _ => None,
            }
        }
        _ => None,
    }
}

fn leading_zero(digits: &[u8]) -> bool {
    digits.len() > 1 && digits[0] == b'0'
}

fn skip_ws(bytes: &[u8], mut at: usize) -> usize {
    // Most places have none: every byte past a space is not whitespace.
    while let Some(&b) = bytes.get(at) {
        if b > b' ' || !matches!(b, b' ' | b'\t' | b'\n' | b'\r') {
            break;
        }
        at += 1;
    }
    at
}

/// What each byte is to [`skip`] and [`nested_end`], one look-up per byte instead of a
/// comparison per kind.
static CLASS: [u8; 256] = {
    let mut class = [0; 256];
    // Ends a number or literal.
    class[b',' as usize] = SCALAR_END;
    class[b' ' as usize] = SCALAR_END;
    class[b'\t' as usize] = SCALAR_END;
    class[b'\n' as usize] = SCALAR_END;
    class[b'\r' as usize] = SCALAR_END;
    class[b'}' as usize] = SCALAR_END | NESTING;
    class[b']' as usize] = SCALAR_END | NESTING;
    // Opens or closes a string or a nested value.
    class[b'"' as usize] = NESTING;
    class[b'{' as usize] = NESTING;
    class[b'[' as usize] = NESTING;
    class
};
const SCALAR_END: u8 = 1;
const NESTING: u8 = 2;

/// The end of the document once a value ended at `end`: `Some` when only whitespace follows.
pub(crate) fn at_end(bytes: &[u8], end: usize) -> Option<()> {
    (skip_ws(bytes, end) == bytes.len()).then_some(())
}

/// Where the string opening at `start` (a `"`) ends, past its closing quote, and whether it
/// holds an escape.
fn string_end(bytes: &[u8], start: usize) -> Option<(usize, bool)> {
    let mut escaped = false;
    let mut at = start + 1;
    loop {
        at += find2(b'"', b'\\', bytes.get(at..)?)?;
        if bytes[at] == b'"' {
            return Some((at + 1, escaped));
        }
        // An escape: the next byte is its, whatever it is.
        escaped = true;
        at += 2;
    }
}

/// The first `a` or `b` in `hay` (`a` twice for one byte). Most of what is searched (a key, a
/// short value, an SSE line or its field name) ends within a few bytes: those are looked at a
/// word (8 bytes) at a time, which costs less than setting up a vector search; past the first
/// few words, `memchr` searches the rest.
pub(crate) fn find2(a: u8, b: u8, hay: &[u8]) -> Option<usize> {
    const SHORT: usize = 32;
    let head = hay.len().min(SHORT);
    if head < 8 {
        return hay.iter().position(|&c| c == a || c == b);
    }
    let mut at = 0;
    while at + 8 <= head {
        if let Some(i) = find2_word(a, b, &hay[at..at + 8]) {
            return Some(at + i);
        }
        at += 8;
    }
    if at < head {
        // The last bytes of the head, in a word that overlaps bytes already searched (none of
        // which matched, so none is reported).
        if let Some(i) = find2_word(a, b, &hay[head - 8..head]) {
            return Some(head - 8 + i);
        }
    }
    if hay.len() <= SHORT {
        return None;
    }
    memchr::memchr2(a, b, &hay[SHORT..]).map(|i| i + SHORT)
}

/// The first `a` or `b` in these 8 bytes. A byte equal to the one sought is zero once xored
/// with it; the lowest byte the zero test flags is always a true zero (a false flag needs a
/// borrow from a true zero below it).
fn find2_word(a: u8, b: u8, bytes: &[u8]) -> Option<usize> {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    let mut word = [0; 8];
    word.copy_from_slice(bytes);
    let word = u64::from_le_bytes(word);
    let (x, y) = (word ^ (LO * u64::from(a)), word ^ (LO * u64::from(b)));
    let zeros = ((x.wrapping_sub(LO) & !x) | (y.wrapping_sub(LO) & !y)) & HI;
    (zeros != 0).then(|| (zeros.trailing_zeros() / 8) as usize)
}

/// Where the value starting at `start` ends (it is passed over, not read).
pub(crate) fn skip(bytes: &[u8], start: usize) -> Option<usize> {
    match bytes.get(start)? {
        b'"' => string_end(bytes, start).map(|(end, _)| end),
        b'{' | b'[' => nested_end(bytes, start),
        _ => {
            let len = bytes[start..]
                .iter()
                .position(|&b| CLASS[usize::from(b)] & SCALAR_END != 0)
                .unwrap_or(bytes.len() - start);
            (len > 0).then_some(start + len)
        }
    }
}

/// Where the object or array opening at `start` ends, past its closing bracket.
fn nested_end(bytes: &[u8], start: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut at = start;
    loop {
        let i = bytes[at..]
            .iter()
            .position(|&b| CLASS[usize::from(b)] & NESTING != 0)?;
        at += i;
        match bytes[at] {
            b'"' => {
                at = string_end(bytes, at)?.0;
                continue;
            }
            b'{' | b'[' => {
                depth += 1;
                if depth > MAX_DEPTH {
                    return None;
                }
            }
            _ => {
                depth -= 1;
                if depth == 0 {
                    return Some(at + 1);
                }
            }
        }
        at += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Calls `member` with each member's key (without its quotes) and value (its bytes, trimmed)
    /// of the object `bytes` holds. `None` when it gave up.
    fn members<'a>(bytes: &'a [u8], mut member: impl FnMut(&'a [u8], &'a [u8])) -> Option<()> {
        let end = object(bytes, skip_ws(bytes, 0), |key, at| {
            let end = skip(bytes, at)?;
            member(key, &bytes[at..end]);
            Some(end)
        })?;
        at_end(bytes, end)
    }

    fn all(bytes: &[u8]) -> Option<Vec<(String, String)>> {
        let mut out = Vec::new();
        members(bytes, |k, v| {
            out.push((
                String::from_utf8_lossy(k).into_owned(),
                String::from_utf8_lossy(v).into_owned(),
            ));
        })?;
        Some(out)
    }

    #[test]
    fn members_are_read_with_their_values_whatever_those_hold() {
        let got =
            all(br#" { "a" : 1 , "b":{"c":["}",{"d":"\"]"}]},"e":"x\\","f":-2.5e3,"g":null} "#)
                .unwrap();
        let want = [
            ("a", "1"),
            ("b", r#"{"c":["}",{"d":"\"]"}]}"#),
            ("e", r#""x\\""#),
            ("f", "-2.5e3"),
            ("g", "null"),
        ];
        let want: Vec<_> = want
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(got, want);
        assert_eq!(all(b"{}"), Some(vec![]));
        // Strings past the first bytes a plain loop looks at.
        let long = format!(
            r#"{{"{k}":"{v}\"{v}","b":[1]}}"#,
            k = "k".repeat(40),
            v = "v".repeat(30)
        );
        let got = all(long.as_bytes()).unwrap();
        assert_eq!(got[0].1, format!(r#""{v}\"{v}""#, v = "v".repeat(30)));
        assert_eq!(got[1].1, "[1]");
    }

    #[test]
    fn what_it_cannot_follow_plainly_is_given_up() {
        for bad in [
            &b"[1]"[..],
            b"{\"a\":1",
            b"{\"a\":1}x",
            b"{\"a\":{\"b\":1}",
            b"{\"a\":\"open}",
            b"{\"\\u0069d\":1}",
            b"{\"a\" 1}",
            b"{\"a\":}",
            b"{\"a\":1,}",
            b"",
        ] {
            assert_eq!(all(bad), None, "{}", String::from_utf8_lossy(bad));
        }
        let deep = format!("{{\"a\":{}{}}}", "[".repeat(200), "]".repeat(200));
        assert_eq!(all(deep.as_bytes()), None);
    }

    #[test]
    fn find2_finds_what_memchr2_finds() {
        // Every other byte value around the ones sought (a word search's false flags come
        // from bytes next to them and from high bytes), the sought ones placed anywhere.
        for (a, b) in [
            (b'"', b'\\'),
            (b'\n', b'\r'),
            (b':', b':'),
            (0, 0xff),
            (0x80, 0x7f),
        ] {
            for seed in 0..4usize {
                let mut hay: Vec<u8> = (0..80usize)
                    .map(|i| ((i * 37 + seed * 101) % 256) as u8)
                    .map(|c| if c == a || c == b { c ^ 0x40 } else { c })
                    .collect();
                assert_eq!(find2(a, b, &hay), None);
                for at in [0, 1, 6, 7, 8, 9, 15, 23, 24, 30, 31, 32, 33, 40, 79] {
                    for c in [a, b] {
                        let kept = hay[at];
                        hay[at] = c;
                        for start in [0, 1, 3, 8] {
                            for end in start..=hay.len() {
                                let part = &hay[start..end];
                                let want = memchr::memchr2(a, b, part);
                                assert_eq!(find2(a, b, part), want, "{a} {b} {at} {start} {end}");
                            }
                        }
                        hay[at] = kept;
                    }
                }
            }
        }
    }

    #[test]
    fn plain_strings_are_unescaped_utf8() {
        assert_eq!(plain_bytes(br#""tools/call""#), Some(&b"tools/call"[..]));
        assert_eq!(plain_bytes("\"é\"".as_bytes()), Some("é".as_bytes()));
        for bad in [&b"\"a\xffb\""[..], br#""a\"b""#, b"\"open", b"7"] {
            assert_eq!(plain_bytes(bad), None);
            assert_eq!(plain_str(bad), None);
        }
    }

    #[test]
    fn ids_read_as_the_deserializer_reads_them() {
        for text in ["7", "0", "-3", "1.5", "123456789012345678901", "\"a-1\""] {
            let want: Value = serde_json::from_str(text).unwrap();
            assert_eq!(id(text.as_bytes()), Some(want), "{text}");
        }
        for text in ["null", "{}", "[]", "true", "\"a\\\"b\"", "01", "-"] {
            assert_eq!(id(text.as_bytes()), None, "{text}");
        }
    }
}
