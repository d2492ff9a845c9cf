//! SSE framing for what the instances write.

use bytes::Bytes;

/// Formats one event. `data` may hold newlines; empty data still yields a `data:` field
/// (the priming event is "an id and empty data").
pub(crate) fn event(id: Option<&str>, retry_ms: Option<u64>, data: &str) -> Bytes {
    let mut out = String::with_capacity(data.len() + 48);
    if let Some(id) = id {
        out.push_str("id: ");
        out.push_str(id);
        out.push('\n');
    }
    if let Some(ms) = retry_ms {
        out.push_str("retry: ");
        out.push_str(&ms.to_string());
        out.push('\n');
    }
    for line in data.split('\n') {
        out.push_str("data: ");
        out.push_str(line);
        out.push('\n');
    }
    out.push('\n');
    Bytes::from(out)
}

/// A `retry:`-only block: sets the client's reconnection delay without dispatching an event.
pub(crate) fn retry_only(ms: u64) -> Bytes {
    Bytes::from(format!("retry: {ms}\n\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames() {
        assert_eq!(
            &event(Some("s-1"), Some(50), "")[..],
            b"id: s-1\nretry: 50\ndata: \n\n"
        );
        assert_eq!(&event(None, None, "a\nb")[..], b"data: a\ndata: b\n\n");
    }
}
