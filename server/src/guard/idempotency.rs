//! Idempotency keys: where a `tools/call` carries one, and what a claim's outcome means for
//! the request that asked.

use std::borrow::Cow;
use std::collections::BTreeMap;

use http::HeaderMap;
use serde_json::value::RawValue;
use serde_json::{json, Value};

use super::answer::{error_body, Answer};
use super::records::ClaimOutcome;
use crate::ids::{CapabilityHash, IdempotencyKey};
use crate::wire::{codes, rpc_codes, IDEMPOTENCY_META_KEY, RESULT_HASH_META_KEY};

/// Where a key was found, when it was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum KeyFound {
    /// The call carries no key: it runs unguarded, as without the guard.
    None,
    /// One key (the same wherever it was given).
    Key(IdempotencyKey),
    /// A key that is not valid, or two different keys: refused, nothing runs.
    Invalid(&'static str),
}

/// The key of a `tools/call`, from `params._meta["io.github.mcp-resume/idempotency-key"]`,
/// the `Idempotency-Key` header, or SEP-3182's `params.idempotencyKey`. Each place that
/// names one must name the same.
pub(crate) fn key_of(params: Option<&Value>, headers: &HeaderMap) -> KeyFound {
    let meta = params
        .and_then(|p| p.get("_meta"))
        .and_then(|m| m.get(IDEMPOTENCY_META_KEY));
    let standard = params.and_then(|p| p.get("idempotencyKey"));
    key_from(meta, standard, headers)
}

/// The key a `tools/call` carries, read as the guard reads it (`params`: the call's params):
/// `Ok(None)` when it carries none; `Err` is the guard's refusal (400
/// `IDEMPOTENCY_KEY_INVALID`, nothing runs) of a key that is not valid, or of two different
/// keys. A server that honours keys itself reads them by this rule, to answer as the guard.
pub fn call_key(
    id: &Value,
    params: Option<&Value>,
    headers: &HeaderMap,
) -> Result<Option<IdempotencyKey>, Answer> {
    match key_of(params, headers) {
        KeyFound::None => Ok(None),
        KeyFound::Key(key) => Ok(Some(key)),
        KeyFound::Invalid(why) => Err(Answer::invalid_key(id, why)),
    }
}

/// Whether a body the guard cannot read names a key's member (see [`names_a_key`]), as its
/// bytes are or as the text they are when they are UTF-16 or UTF-32 (told as RFC 4627 and
/// Python's `json.loads` tell them: by a byte order mark, else by the NULs among the first four
/// bytes), which lenient readers take and `serde_json` does not.
pub(crate) fn body_names_a_key(body: &[u8]) -> bool {
    names_a_key(body) || wide_text(body).is_some_and(|text| names_a_key(text.as_bytes()))
}

/// A UTF-16 or UTF-32 body as UTF-8 (what cannot be decoded replaced), `None` for any other;
/// at most half again as long as the body, which is itself within the guard's bound. A body
/// cut short (the first bytes of one over the bound) loses only its last partial unit.
fn wide_text(body: &[u8]) -> Option<String> {
    let (width, big, mark) = match body {
        [0, 0, 0xFE, 0xFF, ..] => (4, true, 4),
        [0xFF, 0xFE, 0, 0, ..] => (4, false, 4),
        [0xFE, 0xFF, ..] => (2, true, 2),
        [0xFF, 0xFE, ..] => (2, false, 2),
        [0, 0, _, _, ..] => (4, true, 0),
        [0, _, _, _, ..] => (2, true, 0),
        [_, 0, 0, 0, ..] => (4, false, 0),
        [_, 0, _, _, ..] => (2, false, 0),
        _ => return None,
    };
    let units = body[mark..].chunks_exact(width);
    let text = if width == 2 {
        let units = units.map(|u| {
            let u = [u[0], u[1]];
            if big {
                u16::from_be_bytes(u)
            } else {
                u16::from_le_bytes(u)
            }
        });
        char::decode_utf16(units)
            .map(|c| c.unwrap_or(char::REPLACEMENT_CHARACTER))
            .collect()
    } else {
        units
            .map(|u| {
                let u = [u[0], u[1], u[2], u[3]];
                let c = if big {
                    u32::from_be_bytes(u)
                } else {
                    u32::from_le_bytes(u)
                };
                char::from_u32(c).unwrap_or(char::REPLACEMENT_CHARACTER)
            })
            .collect()
    };
    Some(text)
}

/// Whether raw body bytes name a key's member (`_meta`'s or SEP-3182's) in a string followed
/// by `:`, its name written plainly or with escapes (`\/`, `\u…`): what the guard can tell of
/// a body too long or too odd to read whole, which an inner server may read all the same.
pub(crate) fn names_a_key(body: &[u8]) -> bool {
    let is_key = |name: &[u8]| {
        name == IDEMPOTENCY_META_KEY.as_bytes() || name == b"idempotencyKey".as_slice()
    };
    let mut at = 0;
    while let Some(open) = memchr::memchr(b'"', &body[at..]).map(|i| at + i) {
        // The string's end: the next quote not escaped. Strings are read from the first
        // quote on, so a quote inside one is never taken for a start.
        let mut end = open + 1;
        let mut escaped = false;
        loop {
            // A body cut after a backslash leaves nothing to search.
            let rest = body.get(end..).unwrap_or_default();
            match memchr::memchr2(b'"', b'\\', rest).map(|i| end + i) {
                None => return false,
                Some(i) if body[i] == b'\\' => {
                    escaped = true;
                    end = i + 2;
                }
                Some(i) => {
                    end = i;
                    break;
                }
            }
        }
        let member = body[end + 1..]
            .iter()
            .find(|b| !b.is_ascii_whitespace())
            .is_some_and(|&b| b == b':');
        if member {
            let name = &body[open + 1..end];
            let named = if escaped {
                serde_json::from_slice::<String>(&body[open..=end])
                    .is_ok_and(|n| is_key(n.as_bytes()))
            } else {
                is_key(name)
            };
            if named {
                return true;
            }
        }
        at = end + 1;
    }
    false
}

/// [`key_of`] from the two places in the body, already read.
pub(crate) fn key_from(
    meta: Option<&Value>,
    standard: Option<&Value>,
    headers: &HeaderMap,
) -> KeyFound {
    let header = headers.get(crate::wire::names::IDEMPOTENCY_KEY);
    let mut found: Option<IdempotencyKey> = None;
    for candidate in [meta, standard] {
        let Some(v) = candidate else { continue };
        let Some(text) = v.as_str() else {
            return KeyFound::Invalid("the idempotency key must be a string");
        };
        match merge(&mut found, text) {
            Ok(()) => {}
            Err(why) => return KeyFound::Invalid(why),
        }
    }
    if let Some(h) = header {
        let Ok(text) = h.to_str() else {
            return KeyFound::Invalid("the Idempotency-Key header is not printable ASCII");
        };
        if let Err(why) = merge(&mut found, text) {
            return KeyFound::Invalid(why);
        }
    }
    match found {
        Some(k) => KeyFound::Key(k),
        None => KeyFound::None,
    }
}

fn merge(found: &mut Option<IdempotencyKey>, text: &str) -> Result<(), &'static str> {
    let key = IdempotencyKey::new(text).map_err(|e| e.reason())?;
    match found {
        Some(k) if *k != key => Err("the request names two different idempotency keys"),
        Some(_) => Ok(()),
        None => {
            *found = Some(key);
            Ok(())
        }
    }
}

/// What a claim's outcome means for the request that asked.
#[derive(Debug, Clone, PartialEq)]
pub enum ClaimVerdict {
    /// Run the call: the key is held.
    Run,
    /// Answer without running.
    Answer(Answer),
}

/// The verdict for the request `id` whose key claim came back `outcome`; `hash` is the
/// capability hash of the request's session, put on the answer's head.
pub fn claim_verdict(
    outcome: ClaimOutcome,
    id: &Value,
    hash: Option<&CapabilityHash>,
) -> ClaimVerdict {
    match outcome {
        ClaimOutcome::Granted => ClaimVerdict::Run,
        // The stored text goes out as it was kept, not through a `Value`.
        ClaimOutcome::Done(stored) => {
            ClaimVerdict::Answer(Answer::rpc_text(stored.addressed_to(id)).with_hash(hash))
        }
        refused => match refusal(refused, id) {
            Some(message) => ClaimVerdict::Answer(Answer::rpc(&message).with_hash(hash)),
            None => ClaimVerdict::Run,
        },
    }
}

/// The JSON-RPC response to the request `id` whose key claim came back `outcome`: the stored
/// answer re-addressed, or the refusal; `None` when the call may run. (For servers that
/// answer keyed calls inside their own streams, as the mock cluster does.) A stored answer
/// a `Value` cannot hold (nested past serde_json's 128 levels, or a number beyond `f64`) is
/// told as an `IDEMPOTENCY_OUTCOME_UNKNOWN` error here; [`claim_verdict`] sends it as text.
pub fn claim_message(outcome: ClaimOutcome, id: &Value) -> Option<Value> {
    match outcome {
        // Never `None`: that would let a finished call run again. A stored answer a `Value`
        // cannot hold (a number beyond `f64`, kept as the inner server wrote it, or a result
        // nested past serde_json's 128 levels) is told as an outcome this caller cannot be
        // given.
        ClaimOutcome::Done(stored) => Some(
            serde_json::from_str(&stored.addressed_to(id)).unwrap_or_else(|_| {
                error_body(
                    id,
                    rpc_codes::SERVER,
                    "The call with this idempotency key ran; its stored answer cannot be \
                     re-sent here and it will not run again",
                    Some(json!({"code": codes::IDEMPOTENCY_OUTCOME_UNKNOWN})),
                )
            }),
        ),
        refused => refusal(refused, id),
    }
}

/// The error answer of a claim that may not run; `None` for one that may (or a stored answer).
fn refusal(outcome: ClaimOutcome, id: &Value) -> Option<Value> {
    Some(match outcome {
        ClaimOutcome::Granted | ClaimOutcome::Done(_) => return None,
        ClaimOutcome::InUse => error_body(
            id,
            rpc_codes::SERVER,
            "A call with this idempotency key is still running",
            Some(json!({"code": codes::IDEMPOTENCY_KEY_IN_USE})),
        ),
        ClaimOutcome::Lost => error_body(
            id,
            rpc_codes::SERVER,
            "The call with this idempotency key may have run, but no answer of it was stored \
             (its instance failed, or its answer could not be kept); its outcome is unknown and \
             it will not run again",
            Some(json!({"code": codes::IDEMPOTENCY_OUTCOME_UNKNOWN})),
        ),
        ClaimOutcome::Mismatch => error_body(
            id,
            rpc_codes::INVALID_PARAMS,
            "This idempotency key was used for a different call",
            Some(json!({"code": codes::IDEMPOTENCY_KEY_REUSED})),
        ),
    })
}

/// What marking a keyed call's answer with its hash gave (see [`stamp_result`]).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Stamp {
    /// The message with the mark.
    Marked(String),
    /// Not a result (an error answer): it names no context and is kept as it is.
    NotAResult,
    /// A result that cannot carry the mark (not an object, or a `_meta` that is not one): kept
    /// unmarked, a client under another context would take its replay for its own.
    Unmarkable,
}

/// Marks a keyed call's result with the hash it was produced under (the extension's rule: a
/// replayed result names its context, so a client under another one refuses it). The
/// result's other members are kept as the inner server wrote them; a `_meta` of `null` (how
/// some serializers write an absent one) is taken as absent.
pub(crate) fn stamp_result(message: &str, hash: &CapabilityHash) -> Stamp {
    let Ok(top) = serde_json::from_str::<Members<'_>>(message) else {
        return Stamp::Unmarkable;
    };
    let Some(result) = top.get("result").copied() else {
        return Stamp::NotAResult;
    };
    mark(top, result, hash).map_or(Stamp::Unmarkable, Stamp::Marked)
}

/// A JSON object's members as written.
type Members<'a> = BTreeMap<Cow<'a, str>, &'a RawValue>;

/// `top` with `result` marked; `None` when it cannot carry the mark.
fn mark(top: Members<'_>, result: &RawValue, hash: &CapabilityHash) -> Option<String> {
    // Shortened to this function's borrows (the map is covariant): the new members live here.
    let mut top: Members<'_> = top;
    let mut result: Members<'_> = serde_json::from_str(result.get()).ok()?;
    let mut meta: Members<'_> = match result.get("_meta").copied() {
        Some(meta) if meta.get() != "null" => serde_json::from_str(meta.get()).ok()?,
        _ => Members::new(),
    };
    let hash = serde_json::value::to_raw_value(hash.as_str()).ok()?;
    meta.insert(RESULT_HASH_META_KEY.into(), &hash);
    let meta = serde_json::value::to_raw_value(&meta).ok()?;
    result.insert("_meta".into(), &meta);
    let result = serde_json::value::to_raw_value(&result).ok()?;
    top.insert("result".into(), &result);
    serde_json::to_string(&top).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(key: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Some(k) = key {
            h.insert(crate::wire::IDEMPOTENCY_KEY_HEADER, k.parse().unwrap());
        }
        h
    }

    fn key(k: &str) -> KeyFound {
        KeyFound::Key(IdempotencyKey::new(k).unwrap())
    }

    #[test]
    fn a_key_member_is_named_plainly_or_with_escapes_and_only_as_a_member() {
        let rows: &[(&[u8], bool)] = &[
            (br#"{"idempotencyKey":"k"}"#, true),
            (br#"{"idempotencyKey" : "k"}"#, true),
            (
                br#"{"_meta":{"io.github.mcp-resume\/idempotency-key":"k"}}"#,
                true,
            ),
            (br#"{"\u0069dempotencyKey":"k"}"#, true),
            // A value, or text inside another string, names nothing.
            (br#"{"text":"idempotencyKey"}"#, false),
            (br#"{"text":"say \"idempotencyKey\": no"}"#, false),
            // Cut anywhere, even after a backslash: no panic, nothing named.
            (br#"{"idempotencyKey"#, false),
            (br#"{"a\"#, false),
            (b"\\", false),
            (b"", false),
        ];
        for (body, named) in rows {
            assert_eq!(
                names_a_key(body),
                *named,
                "{}",
                String::from_utf8_lossy(body)
            );
        }
    }

    #[test]
    fn a_key_member_is_seen_in_utf16_and_utf32_with_or_without_a_mark() {
        let text = r#"{"params":{"idempotencyKey":"k"}}"#;
        let u16s = || text.encode_utf16();
        let u32s = || text.chars().map(u32::from);
        let rows: &[(&str, Vec<u8>)] = &[
            ("16le", u16s().flat_map(u16::to_le_bytes).collect()),
            ("16be", u16s().flat_map(u16::to_be_bytes).collect()),
            ("32le", u32s().flat_map(u32::to_le_bytes).collect()),
            ("32be", u32s().flat_map(u32::to_be_bytes).collect()),
        ];
        for (name, body) in rows {
            assert!(body_names_a_key(body), "{name}");
            let mark: &[u8] = match *name {
                "16le" => b"\xFF\xFE",
                "16be" => b"\xFE\xFF",
                "32le" => b"\xFF\xFE\0\0",
                _ => b"\0\0\xFE\xFF",
            };
            assert!(body_names_a_key(&[mark, body].concat()), "{name} marked");
            // Cut inside a unit: what came before is still read.
            assert!(body_names_a_key(&body[..body.len() - 1]), "{name} cut");
        }
        let unkeyed: Vec<u8> =
            r#"{"text":"idempotencyKey"}"#.encode_utf16().flat_map(u16::to_le_bytes).collect();
        assert!(!body_names_a_key(&unkeyed));
        assert!(!body_names_a_key(b"\0"));
    }

    #[test]
    fn keys_are_found_in_each_place_and_must_agree() {
        let meta = json!({"_meta": {IDEMPOTENCY_META_KEY: "k-1"}});
        let standard = json!({"idempotencyKey": "k-1"});
        let both = json!({"_meta": {IDEMPOTENCY_META_KEY: "k-1"}, "idempotencyKey": "k-1"});
        let rows: &[(Option<&Value>, Option<&str>, KeyFound)] = &[
            (None, None, KeyFound::None),
            (Some(&meta), None, key("k-1")),
            (Some(&standard), None, key("k-1")),
            (None, Some("k-1"), key("k-1")),
            (Some(&meta), Some("k-1"), key("k-1")),
            (Some(&both), Some("k-1"), key("k-1")),
            (
                Some(&meta),
                Some("k-2"),
                KeyFound::Invalid("the request names two different idempotency keys"),
            ),
        ];
        for (params, header, want) in rows {
            assert_eq!(
                &key_of(*params, &headers(*header)),
                want,
                "{params:?} {header:?}"
            );
        }
        let bad = json!({"_meta": {IDEMPOTENCY_META_KEY: 7}});
        assert!(matches!(
            key_of(Some(&bad), &headers(None)),
            KeyFound::Invalid(_)
        ));
        let empty = json!({"_meta": {IDEMPOTENCY_META_KEY: ""}});
        assert!(matches!(
            key_of(Some(&empty), &headers(None)),
            KeyFound::Invalid(_)
        ));
    }

    #[test]
    fn a_finished_key_is_never_a_call_that_may_run() {
        use crate::guard::StoredOutcome;
        let stored = StoredOutcome::from_stored(r#"{"result":{"x":1e400}}"#).unwrap();
        let message = claim_message(ClaimOutcome::Done(stored), &json!(7)).unwrap();
        assert_eq!(message["id"], 7);
        assert_eq!(
            message["error"]["data"]["code"],
            codes::IDEMPOTENCY_OUTCOME_UNKNOWN
        );
        let stored = StoredOutcome::from_stored(r#"{"result":{"x":1}}"#).unwrap();
        let message = claim_message(ClaimOutcome::Done(stored), &json!(8)).unwrap();
        assert_eq!(message["result"]["x"], 1);
    }

    #[test]
    fn stamping_marks_results_only() {
        let h = CapabilityHash::from_stored("sha256:ab");
        let marked = |message: &str| match stamp_result(message, &h) {
            Stamp::Marked(text) => serde_json::from_str::<Value>(&text).unwrap(),
            other => panic!("{message}: {other:?}"),
        };
        let ok = marked(r#"{"jsonrpc":"2.0","id":1,"result":{"content":[]}}"#);
        assert_eq!(ok["result"]["_meta"][RESULT_HASH_META_KEY], "sha256:ab");
        assert_eq!(ok["result"]["content"], json!([]));
        let null_meta = marked(r#"{"id":1,"result":{"_meta":null}}"#);
        assert_eq!(
            null_meta["result"]["_meta"][RESULT_HASH_META_KEY],
            "sha256:ab"
        );
        let err = r#"{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"x"}}"#;
        assert_eq!(stamp_result(err, &h), Stamp::NotAResult);
        assert_eq!(
            stamp_result(r#"{"id":1,"result":7}"#, &h),
            Stamp::Unmarkable
        );
        assert_eq!(
            stamp_result(r#"{"id":1,"result":{"_meta":[]}}"#, &h),
            Stamp::Unmarkable
        );
    }

    #[test]
    fn stamping_keeps_the_results_members_as_written() {
        let h = CapabilityHash::from_stored("sha256:ab");
        let message = r#"{"jsonrpc":"2.0","id":"a","result":{"n":123456789012345678901234567890,"x":0.10000000000000000555,"_meta":{"k":1e400,"other":"kept"}}}"#;
        let Stamp::Marked(stamped) = stamp_result(message, &h) else {
            panic!("not marked");
        };
        assert!(
            stamped.contains(r#""n":123456789012345678901234567890"#),
            "{stamped}"
        );
        assert!(
            stamped.contains(r#""x":0.10000000000000000555"#),
            "{stamped}"
        );
        assert!(stamped.contains(r#""k":1e400"#), "{stamped}");
        assert!(stamped.contains(r#""other":"kept""#), "{stamped}");
        let mark = format!(r#""{RESULT_HASH_META_KEY}":"sha256:ab""#);
        assert!(stamped.contains(&mark), "{stamped}");
    }
}
