//! The era-detection table (`guide::eras`), one named test per row, against the pure
//! probe rule: what each answer to `server/discover` means.

use mcp_resume::proto::probe::{read_probe, says_era, ProbeAnswer, ProbeFacts, ProbeVerdict};
use mcp_resume::RpcError;
use serde_json::{json, Value};

use ProbeVerdict::*;

const FIRST: ProbeFacts = ProbeFacts::FIRST;
const MODERN: &str = "2026-07-28";

fn rpc(code: i64, data: Value) -> RpcError {
    RpcError::new(code, "whatever").with_data(data)
}

fn refused(status: u16, error: Option<RpcError>) -> ProbeAnswer {
    ProbeAnswer::Refused { status, error }
}

fn unsupported(versions: &[&str]) -> RpcError {
    rpc(-32022, json!({ "supported": versions }))
}

fn read(answer: ProbeAnswer) -> ProbeVerdict {
    read_probe(&answer, &FIRST)
}

// | a recognised discover result listing our modern revision | modern |
#[test]
fn discover_result_with_our_revision_is_modern() {
    let result = json!({"supportedVersions": [MODERN, "2025-11-25"], "capabilities": {}});
    assert_eq!(read(ProbeAnswer::Result(result)), Modern);
}

// | a discover result listing only legacy revisions | legacy |
#[test]
fn discover_result_listing_only_legacy_revisions_is_legacy() {
    let result = json!({"supportedVersions": ["2025-06-18", "2025-11-25"]});
    assert_eq!(read(ProbeAnswer::Result(result)), Legacy);
}

// | a discover result listing nothing we speak | reported |
#[test]
fn discover_result_listing_nothing_we_speak_is_reported() {
    let result = json!({"supportedVersions": ["2031-01-01"]});
    assert_eq!(read(ProbeAnswer::Result(result)), Report);
    assert_eq!(
        read(ProbeAnswer::Result(json!({"supportedVersions": []}))),
        Report
    );
}

// | a result that is not a discover result | legacy |
#[test]
fn other_result_is_legacy() {
    assert_eq!(read(ProbeAnswer::Result(json!({}))), Legacy);
    assert_eq!(read(ProbeAnswer::Result(json!("pong"))), Legacy);
}

// | any pre-session 4xx, JSON-RPC or plain text | legacy |
#[test]
fn any_4xx_is_legacy() {
    let not_initialized = rpc(-32000, json!("Bad Request: Server not initialized"));
    for status in [400, 401, 403, 404, 405, 406, 409, 415, 422, 429] {
        assert_eq!(read(refused(status, None)), Legacy, "{status} plain");
        assert_eq!(
            read(refused(status, Some(not_initialized.clone()))),
            Legacy,
            "{status} JSON-RPC"
        );
    }
}

// | 404 with -32601 (method not found) | legacy: legacy servers answer an unknown method so too |
#[test]
fn not_found_method_not_found_is_legacy_on_a_first_probe() {
    let answer = refused(404, Some(rpc(-32601, Value::Null)));
    assert_eq!(read(answer.clone()), Legacy);
    // … but once `initialize` was refused as by a modern server, it is a modern server
    // without the method.
    assert_eq!(read_probe(&answer, &FIRST.after_modern_refusal()), Modern);
}

// | a redirect (not followed) | legacy: `initialize` reports it |
#[test]
fn redirect_is_legacy() {
    assert_eq!(read(refused(307, None)), Legacy);
}

// | 200 with an empty or non-JSON-RPC body, an SSE stream with no event or no response | legacy |
#[test]
fn success_without_a_response_is_legacy() {
    assert_eq!(read(ProbeAnswer::NoResponse), Legacy);
}

// | a JSON-RPC error in a 2xx body that is no modern error | legacy |
#[test]
fn plain_jsonrpc_error_in_200_is_legacy() {
    assert_eq!(read(ProbeAnswer::Error(rpc(-32601, Value::Null))), Legacy);
    assert_eq!(read(ProbeAnswer::Error(rpc(-32000, Value::Null))), Legacy);
}

// | -32022 listing only legacy revisions | legacy |
#[test]
fn unsupported_version_listing_only_legacy_is_legacy() {
    let error = unsupported(&["2025-03-26", "2025-11-25"]);
    assert_eq!(read(refused(400, Some(error.clone()))), Legacy);
    assert_eq!(read(ProbeAnswer::Error(error)), Legacy);
}

// | -32022 listing our modern revision | probe again, a bounded number of times |
#[test]
fn unsupported_version_listing_ours_is_retried_then_reported() {
    let answer = refused(400, Some(unsupported(&[MODERN])));
    assert_eq!(read(answer.clone()), RetryVersion);
    assert_eq!(read_probe(&answer, &FIRST.version_retries(1)), RetryVersion);
    assert_eq!(read_probe(&answer, &FIRST.version_retries(2)), Report);
}

// | -32022 listing nothing we speak | reported |
#[test]
fn unsupported_version_listing_nothing_we_speak_is_reported() {
    assert_eq!(
        read(refused(400, Some(unsupported(&["1999-01-01"])))),
        Report
    );
}

// | -32021 (missing capability), -32020 (header mismatch) | reported: a modern server refused |
#[test]
fn other_modern_errors_are_reported() {
    assert_eq!(read(refused(400, Some(rpc(-32021, json!({}))))), Report);
    assert_eq!(read(refused(400, Some(rpc(-32020, Value::Null)))), Report);
    assert_eq!(read(ProbeAnswer::Error(rpc(-32020, Value::Null))), Report);
}

// | transport failure | probe again (read-only) until the attempts run out, then reported |
#[test]
fn transport_failure_is_retried_then_reported() {
    assert_eq!(read(ProbeAnswer::Transport), Retry);
    assert_eq!(
        read_probe(&ProbeAnswer::Transport, &FIRST.unanswered(9)),
        Retry
    );
    assert_eq!(
        read_probe(&ProbeAnswer::Transport, &FIRST.unanswered(10)),
        Report
    );
}

// | 5xx, whatever the body, from a server that answers at all | `initialize`, once: some legacy
// servers answer an unknown method so, and a 2026-07-28 server refuses a legacy `initialize`
// with a modern error, which is read forward |
#[test]
fn server_error_falls_back_to_initialize() {
    for status in [500, 501, 502, 503, 504] {
        assert_eq!(read(refused(status, None)), FallBack, "{status}");
        let with_body = refused(status, Some(rpc(-32603, Value::Null)));
        assert_eq!(read(with_body.clone()), FallBack, "{status} JSON-RPC");
        // The fallback is `initialize` itself: it does not count against the attempts.
        assert_eq!(
            read_probe(&with_body, &FIRST.unanswered(10)),
            FallBack,
            "{status}"
        );
    }
}

// | 5xx when `initialize` is no way out (era forced to modern, or `initialize` already refused as
// by a modern server) | probe again until the attempts run out, then reported |
#[test]
fn server_error_with_no_way_to_initialize_is_retried_then_reported() {
    for facts in [FIRST.forced_modern(), FIRST.after_modern_refusal()] {
        for status in [500, 503] {
            assert_eq!(
                read_probe(&refused(status, None), &facts),
                Retry,
                "{status}"
            );
            assert_eq!(
                read_probe(&refused(status, None), &facts.unanswered(10)),
                Report,
                "{status}"
            );
        }
    }
}

// | era forced to modern: an answer that means legacy | reported |
#[test]
fn forced_modern_reports_what_means_legacy() {
    let forced = FIRST.forced_modern();
    assert_eq!(read_probe(&refused(400, None), &forced), Report);
    assert_eq!(read_probe(&ProbeAnswer::NoResponse, &forced), Report);
    let modern = json!({"supportedVersions": [MODERN]});
    assert_eq!(read_probe(&ProbeAnswer::Result(modern), &forced), Modern);
    assert_eq!(read_probe(&ProbeAnswer::Transport, &forced), Retry);
}

// | after `initialize` was refused as by a modern server: an answer that means legacy | reported
// (never back to `initialize`: the two answers would send the handshake round in circles) |
#[test]
fn after_a_modern_refusal_what_means_legacy_is_reported() {
    let forward = FIRST.after_modern_refusal();
    assert_eq!(read_probe(&refused(400, None), &forward), Report);
    assert_eq!(read_probe(&ProbeAnswer::NoResponse, &forward), Report);
    let modern = json!({"supportedVersions": [MODERN]});
    assert_eq!(read_probe(&ProbeAnswer::Result(modern), &forward), Modern);
}

// | an answer that comes the same from a server of either era: none, a 5xx, a 401, 403, 407, 408
// or 429 whose body is no modern error | the era it leads to is this connection's, not
// remembered for the origin; every other answer is |
#[test]
fn only_an_answer_that_says_the_era_is_remembered() {
    let plain = rpc(-32000, json!("Too many requests"));
    for status in [401, 403, 407, 408, 429, 500, 502, 503, 504] {
        assert!(!says_era(&refused(status, None)), "{status} plain");
        assert!(
            !says_era(&refused(status, Some(plain.clone()))),
            "{status} JSON-RPC"
        );
    }
    assert!(!says_era(&ProbeAnswer::Transport));
    // A modern error says it, whatever the status (short of a 5xx, which is read as none).
    assert!(says_era(&refused(429, Some(unsupported(&[MODERN])))));
    assert!(says_era(&refused(401, Some(rpc(-32021, json!({}))))));
    for status in [307, 400, 404, 405, 406, 409, 415, 422] {
        assert!(says_era(&refused(status, None)), "{status} plain");
        assert!(says_era(&refused(status, Some(plain.clone()))), "{status}");
    }
    assert!(says_era(&ProbeAnswer::NoResponse));
    assert!(says_era(&ProbeAnswer::Error(rpc(-32601, Value::Null))));
    assert!(says_era(&ProbeAnswer::Result(
        json!({"supportedVersions": [MODERN]})
    )));
    assert!(says_era(&ProbeAnswer::Result(json!({}))));
}
