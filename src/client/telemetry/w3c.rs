//! W3C Trace Context (`traceparent`, `tracestate`): written on every HTTP request of a call,
//! and in a request's `params._meta`, where the MCP conventions put it; read from
//! `params._meta` when a request arrives with it (through the bridge, or a binding).

use std::str::FromStr;

use http::header::{HeaderMap, HeaderName, HeaderValue};
use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use opentelemetry::Context;
use serde_json::{Map, Value};

const TRACEPARENT: &str = "traceparent";
const TRACESTATE: &str = "tracestate";

/// `span`'s `traceparent` value (version 00).
pub(crate) fn traceparent(span: &SpanContext) -> String {
    format!(
        "00-{:032x}-{:016x}-{:02x}",
        u128::from_be_bytes(span.trace_id().to_bytes()),
        u64::from_be_bytes(span.span_id().to_bytes()),
        span.trace_flags().to_u8()
    )
}

/// A `traceparent` value, read as the W3C recommendation says: a known version's exact
/// shape, or a later version's first four fields; all-zero ids and version `ff` refused.
pub(crate) fn parse_traceparent(value: &str) -> Option<(TraceId, SpanId, TraceFlags)> {
    let value = value.trim();
    let mut parts = value.splitn(5, '-');
    let (version, trace, span, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let rest = parts.next();
    if version.len() != 2 || !is_lower_hex(version) || version == "ff" {
        return None;
    }
    // Version 00 has exactly four fields; a later one may append more.
    if version == "00" && rest.is_some() {
        return None;
    }
    if trace.len() != 32 || span.len() != 16 || flags.len() != 2 {
        return None;
    }
    if !(is_lower_hex(trace) && is_lower_hex(span) && is_lower_hex(flags)) {
        return None;
    }
    let trace = u128::from_str_radix(trace, 16).ok()?;
    let span = u64::from_str_radix(span, 16).ok()?;
    let flags = u8::from_str_radix(flags, 16).ok()?;
    if trace == 0 || span == 0 {
        return None;
    }
    Some((
        TraceId::from_bytes(trace.to_be_bytes()),
        SpanId::from_bytes(span.to_be_bytes()),
        // Only the sampled flag is defined; the others are not passed on.
        TraceFlags::new(flags & TraceFlags::SAMPLED.to_u8()),
    ))
}

fn is_lower_hex(s: &str) -> bool {
    s.bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// The remote context a request's `params._meta` carries, when it has a valid `traceparent`.
pub(crate) fn extract_meta(params: Option<&Value>) -> Option<Context> {
    let meta = params?.get("_meta")?.as_object()?;
    let (trace, span, flags) = parse_traceparent(meta.get(TRACEPARENT)?.as_str()?)?;
    let state = meta
        .get(TRACESTATE)
        .and_then(Value::as_str)
        .and_then(|s| TraceState::from_str(s).ok())
        .unwrap_or_default();
    let remote = SpanContext::new(trace, span, flags, true, state);
    Some(Context::new().with_remote_span_context(remote))
}

/// Writes `span`'s context into `params._meta` (making `params` an object when it is absent),
/// replacing a `traceparent` already there: the request's own span is the server's parent,
/// beneath whatever context the caller had. Params that are not an object (an array, a
/// scalar) or a `_meta` that is not one are left alone.
pub(crate) fn inject_meta(params: &mut Option<Value>, span: &SpanContext) {
    let params = params.get_or_insert_with(|| Value::Object(Map::new()));
    if params.is_null() {
        *params = Value::Object(Map::new());
    }
    let Some(object) = params.as_object_mut() else {
        return;
    };
    let meta = object
        .entry("_meta")
        .or_insert_with(|| Value::Object(Map::new()));
    let Some(meta) = meta.as_object_mut() else {
        return;
    };
    meta.insert(TRACEPARENT.to_owned(), Value::String(traceparent(span)));
    let state = span.trace_state().header();
    if state.is_empty() {
        meta.remove(TRACESTATE);
    } else {
        meta.insert(TRACESTATE.to_owned(), Value::String(state));
    }
}

/// Writes `span`'s context into an HTTP request's headers (replacing any already there).
pub(crate) fn inject_headers(headers: &mut HeaderMap, span: &SpanContext) {
    if let Ok(value) = HeaderValue::from_str(&traceparent(span)) {
        headers.insert(HeaderName::from_static(TRACEPARENT), value);
    }
    let state = span.trace_state().header();
    match HeaderValue::from_str(&state) {
        Ok(value) if !state.is_empty() => {
            headers.insert(HeaderName::from_static(TRACESTATE), value);
        }
        _ => {
            headers.remove(TRACESTATE);
        }
    }
}

/// The span context `cx` carries, when it is one worth propagating.
pub(crate) fn valid_span(cx: &Context) -> Option<SpanContext> {
    let span = cx.span().span_context().clone();
    span.is_valid().then_some(span)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const EXAMPLE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn traceparent_round_trips() {
        let (trace, span, flags) = parse_traceparent(EXAMPLE).expect("the spec's example");
        let context = SpanContext::new(trace, span, flags, true, TraceState::NONE);
        assert_eq!(traceparent(&context), EXAMPLE);
    }

    /// Each way a `traceparent` can be malformed is refused, not half-read.
    #[test]
    fn malformed_traceparents_are_refused() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
            "0x-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            assert!(parse_traceparent(bad).is_none(), "{bad:?} accepted");
        }
        // A later version may append fields.
        let later = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-comes";
        assert!(parse_traceparent(later).is_some());
    }

    #[test]
    fn meta_is_read_and_replaced() {
        let params = json!({"name": "echo", "_meta": {"traceparent": EXAMPLE, "tracestate": "rojo=00f067aa0ba902b7", "progressToken": 7}});
        let cx = extract_meta(Some(&params)).expect("a remote parent");
        let remote = cx.span().span_context().clone();
        assert!(remote.is_remote() && remote.is_sampled());
        assert_eq!(remote.trace_state().get("rojo"), Some("00f067aa0ba902b7"));

        let ours = SpanContext::new(
            remote.trace_id(),
            SpanId::from_bytes([1; 8]),
            TraceFlags::SAMPLED,
            false,
            TraceState::NONE,
        );
        let mut params = Some(params);
        inject_meta(&mut params, &ours);
        let meta = &params.as_ref().unwrap()["_meta"];
        assert_eq!(
            meta["traceparent"],
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0101010101010101-01"
        );
        assert!(meta.get("tracestate").is_none(), "ours has no state");
        assert_eq!(meta["progressToken"], 7, "the rest of _meta is kept");
    }

    #[test]
    fn absent_params_become_an_object_and_odd_ones_are_left_alone() {
        let (trace, span, flags) = parse_traceparent(EXAMPLE).unwrap();
        let ours = SpanContext::new(trace, span, flags, false, TraceState::NONE);
        let mut none = None;
        inject_meta(&mut none, &ours);
        assert_eq!(none, Some(json!({"_meta": {"traceparent": EXAMPLE}})));
        let mut array = Some(json!([1, 2]));
        inject_meta(&mut array, &ours);
        assert_eq!(array, Some(json!([1, 2])));
        let mut odd_meta = Some(json!({"_meta": "x"}));
        inject_meta(&mut odd_meta, &ours);
        assert_eq!(odd_meta, Some(json!({"_meta": "x"})));
        assert!(extract_meta(Some(&json!({"_meta": {"traceparent": 5}}))).is_none());
    }
}
