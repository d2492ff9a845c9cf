//! Arguments canonicalized from their text as written: read into a [`Value`], an integer
//! past 64 bits becomes the nearest double, and two arguments told apart only by its last
//! digits would digest alike. Everything else is written as [`super::write_canonical`]
//! writes the value read from the same text.

use serde_json::Value;

/// Nesting deeper than this is not read (the deserializer's own limit).
const MAX_DEPTH: usize = 128;

/// A value read from text, its leaves already in canonical form.
enum Canon {
    Leaf(String),
    Array(Vec<Canon>),
    /// Members as written (sorted and de-duplicated when written out).
    Object(Vec<(String, Canon)>),
}

/// Writes the canonical form of the one JSON value `text` holds; `None` (nothing written
/// worth keeping) when it holds anything else.
pub(super) fn write(text: &[u8], out: &mut String) -> Option<()> {
    let (value, end) = read(text, ws(text, 0), 0)?;
    if ws(text, end) != text.len() {
        return None;
    }
    value.write(out);
    Some(())
}

fn ws(b: &[u8], mut at: usize) -> usize {
    while matches!(b.get(at), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        at += 1;
    }
    at
}

/// The value starting at `at`, and where it ends.
fn read(b: &[u8], at: usize, depth: usize) -> Option<(Canon, usize)> {
    if depth > MAX_DEPTH {
        return None;
    }
    match *b.get(at)? {
        b'{' => {
            let mut members = Vec::new();
            let mut at = ws(b, at + 1);
            if b.get(at) == Some(&b'}') {
                return Some((Canon::Object(members), at + 1));
            }
            loop {
                let (key, end) = string(b, at)?;
                at = ws(b, end);
                if b.get(at) != Some(&b':') {
                    return None;
                }
                let (value, end) = read(b, ws(b, at + 1), depth + 1)?;
                members.push((key, value));
                at = ws(b, end);
                match b.get(at)? {
                    b',' => at = ws(b, at + 1),
                    b'}' => return Some((Canon::Object(members), at + 1)),
                    _ => return None,
                }
            }
        }
        b'[' => {
            let mut items = Vec::new();
            let mut at = ws(b, at + 1);
            if b.get(at) == Some(&b']') {
                return Some((Canon::Array(items), at + 1));
            }
            loop {
                let (item, end) = read(b, at, depth + 1)?;
                items.push(item);
                at = ws(b, end);
                match b.get(at)? {
                    b',' => at = ws(b, at + 1),
                    b']' => return Some((Canon::Array(items), at + 1)),
                    _ => return None,
                }
            }
        }
        b'"' => {
            let (s, end) = string(b, at)?;
            Some((Canon::Leaf(Value::String(s).to_string()), end))
        }
        b't' | b'f' | b'n' => {
            let word: &[u8] = match b[at] {
                b't' => b"true",
                b'f' => b"false",
                _ => b"null",
            };
            let end = at + word.len();
            (b.get(at..end)? == word).then(|| {
                let text = std::str::from_utf8(word).unwrap_or("null");
                (Canon::Leaf(text.to_owned()), end)
            })
        }
        _ => {
            let mut end = at;
            while matches!(
                b.get(end),
                Some(b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E')
            ) {
                end += 1;
            }
            let span = std::str::from_utf8(&b[at..end]).ok()?;
            // Checked as JSON by the deserializer, whatever its size.
            let n: serde_json::Number = serde_json::from_str(span).ok()?;
            let digits = span.strip_prefix('-').unwrap_or(span);
            let integer = digits.bytes().all(|c| c.is_ascii_digit());
            let mut leaf = String::new();
            // `-0` is the one integer read as a double within 64 bits: it is zero.
            let past_64_bits = !(n.is_i64() || n.is_u64()) && n.as_f64() != Some(0.0);
            if integer && past_64_bits {
                // Past 64 bits: its digits as written (JSON allows no leading zeros, so one
                // integer has one spelling).
                leaf.push_str(span);
            } else {
                super::write_number(&n, &mut leaf);
            }
            Some((Canon::Leaf(leaf), end))
        }
    }
}

/// The string starting at `at`, decoded, and where it ends.
fn string(b: &[u8], at: usize) -> Option<(String, usize)> {
    if b.get(at) != Some(&b'"') {
        return None;
    }
    let mut i = at + 1;
    loop {
        match *b.get(i)? {
            b'\\' => i += 2,
            b'"' => break,
            _ => i += 1,
        }
    }
    let s = serde_json::from_slice::<String>(&b[at..=i]).ok()?;
    Some((s, i + 1))
}

impl Canon {
    fn write(self, out: &mut String) {
        match self {
            Canon::Leaf(text) => out.push_str(&text),
            Canon::Array(items) => {
                out.push('[');
                for (i, item) in items.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    item.write(out);
                }
                out.push(']');
            }
            Canon::Object(mut members) => {
                // As a map read from the text: a key given twice holds its last value.
                members.sort_by(|a, b| a.0.cmp(&b.0));
                let mut members = members.into_iter().peekable();
                out.push('{');
                let mut first = true;
                while let Some((key, value)) = members.next() {
                    if members.peek().is_some_and(|(next, _)| *next == key) {
                        continue;
                    }
                    if !first {
                        out.push(',');
                    }
                    first = false;
                    out.push_str(&Value::String(key).to_string());
                    out.push(':');
                    value.write(out);
                }
                out.push('}');
            }
        }
    }
}
