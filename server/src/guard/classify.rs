//! Reading a POST body into what the rules care about (a [`Plan`]): the common request by
//! its members alone ([`scan`]), anything else by the deserializer, each giving the same plan.

use std::time::Duration;

use http::{HeaderMap, StatusCode};
use serde_json::value::RawValue;
use serde_json::Value;

use super::answer::Answer;
use super::idempotency::{self, KeyFound};
use super::ledger::RequestIds;
use super::records::Claim;
use super::{scan, KeyedPlan, Plan};
use crate::ids::{ClaimToken, IdempotencyKey};
use crate::wire::{self, names};

/// A keyed call's plan: its claim on the key, for these arguments (with a placeholder token:
/// the caller draws the real one).
/// `written`: the arguments' text, when it could be taken from the body (integers past 64
/// bits are told apart only there).
fn keyed_plan(
    id: Value,
    key: IdempotencyKey,
    name: &str,
    (args, written): (&Value, Option<&RawValue>),
    lease: Duration,
    params: Option<&Value>,
) -> Plan {
    let digest = written
        .and_then(|text| wire::arguments_digest_of_text(name, text.get().as_bytes()))
        .unwrap_or_else(|| wire::arguments_digest(name, args));
    // A 2026-07-28 request names its revision in `_meta`; earlier ones never do.
    let modern = params
        .and_then(|p| p.get("_meta"))
        .and_then(|m| m.get(wire::MODERN_VERSION_META_KEY))
        .is_some_and(Value::is_string);
    Plan::Keyed(Box::new(KeyedPlan {
        requests: RequestIds::one(id.clone()),
        id,
        claim: Claim::new(key, digest, ClaimToken::from_stored(""), lease),
        modern,
    }))
}

/// Reads a POST body: what it asks, as far as the rules care; `Err` is a refusal (a keyed
/// call the guard cannot guard, or an invalid key).
///
/// A keyed call's claim comes back with a placeholder token; the caller draws the real one.
/// `key_header`: the request's head names a key in `Idempotency-Key` (looked up once, with
/// the head).
pub(super) fn classify_post(
    keys: bool,
    key_header: bool,
    lease: Duration,
    body: &[u8],
    headers: &HeaderMap,
    in_session: bool,
) -> Result<Plan, Answer> {
    match plain_plan(keys, key_header, body, in_session) {
        Some(plan) => Ok(plan),
        None => read_post(keys, lease, body, headers, in_session),
    }
}

/// [`classify_post`] by the deserializer: any body.
fn read_post(
    keys: bool,
    lease: Duration,
    body: &[u8],
    headers: &HeaderMap,
    in_session: bool,
) -> Result<Plan, Answer> {
    let session_plan = |requests| session_plan(in_session, requests);
    // A single message, read without building it: only what the rules look at is kept
    // (method, id, the call's name and key); the rest is skipped. Only an object: a derived
    // struct also takes an array, by position, so a batch `[null, <keyed call>]` would read
    // as one message with no method and pass, the call in it run unguarded.
    let probe = (body.get(scan::first(body)) == Some(&b'{'))
        .then(|| serde_json::from_slice::<probe::Message<'_>>(body).ok())
        .flatten();
    if let Some(m) = probe {
        let id = match m.id {
            Some(id @ (Value::String(_) | Value::Number(_))) if m.method.is_some() => id,
            _ => return Ok(session_plan(RequestIds::none())),
        };
        let params = m.params.unwrap_or_default();
        return Ok(match m.method.as_deref() {
            Some("initialize") if !in_session => Plan::Initialize {
                id,
                client_capabilities: match params.capabilities {
                    Some(c @ Value::Object(_)) => c,
                    _ => Value::Object(serde_json::Map::new()),
                },
            },
            Some("server/discover") if !in_session => Plan::Discover { id },
            Some("tools/call") if keys => {
                let meta = params.meta.and_then(|m| m.key);
                match idempotency::key_from(meta.as_ref(), params.idempotency_key.as_ref(), headers)
                {
                    KeyFound::Key(key) => {
                        // Keyed: the arguments are read whole, for their digest. Arguments
                        // the reader refuses (nested past its depth bound) cannot be told
                        // apart from others: the call is refused, not digested as nothing.
                        let Ok(value) = serde_json::from_slice::<Value>(body) else {
                            return Err(Answer::unguardable(
                                StatusCode::BAD_REQUEST,
                                "a keyed call whose arguments cannot be read cannot be guarded",
                            ));
                        };
                        let name = params.name.as_deref().unwrap_or("");
                        let args = value.pointer("/params/arguments").unwrap_or(&Value::Null);
                        let read = value.get("params");
                        keyed_plan(id, key, name, (args, params.arguments), lease, read)
                    }
                    KeyFound::Invalid(why) => return Err(Answer::invalid_key(&id, why)),
                    KeyFound::None => session_plan(RequestIds::one(id)),
                }
            }
            _ => session_plan(RequestIds::one(id)),
        });
    }
    let Ok(value) = serde_json::from_slice::<Value>(body) else {
        // Keyed, and unreadable here (nested past the reader's bound; a BOM, `NaN`, UTF-16
        // or UTF-32, which lenient readers such as Python's take): an inner server that reads
        // it anyway would run it unguarded, on every re-send.
        if let Some(refusal) = keys
            .then(|| Answer::for_unguardable_body(headers, body, false))
            .flatten()
        {
            return Err(refusal);
        }
        // Unreadable here is not proof of no request: the inner server may read it.
        return Ok(session_plan(RequestIds::unread()));
    };
    let msg = match &value {
        Value::Object(msg) => msg,
        Value::Array(items) => {
            let is_call = |m: &Value| m.get("method").and_then(Value::as_str) == Some("tools/call");
            let keyed = items.iter().filter(|m| is_call(m)).any(|m| {
                headers.contains_key(names::IDEMPOTENCY_KEY)
                    || !matches!(
                        idempotency::key_of(m.get("params"), &HeaderMap::new()),
                        KeyFound::None
                    )
            });
            if keys && keyed {
                return Err(Answer::unguardable(
                    StatusCode::BAD_REQUEST,
                    "a keyed call in a batch cannot be guarded: send it alone",
                ));
            }
            return Ok(session_plan(items.iter().filter_map(request_id).collect()));
        }
        _ => return Ok(session_plan(RequestIds::none())),
    };
    // A single message whose shape the probe refused (odd params): read the long way.
    let Some(id) = request_id(&value) else {
        return Ok(session_plan(RequestIds::none()));
    };
    Ok(match msg.get("method").and_then(Value::as_str) {
        Some("tools/call") if keys => match idempotency::key_of(msg.get("params"), headers) {
            KeyFound::Invalid(why) => return Err(Answer::invalid_key(&id, why)),
            KeyFound::Key(key) => {
                let params = msg.get("params");
                let name = params
                    .and_then(|p| p.get("name"))
                    .and_then(Value::as_str)
                    .unwrap_or("");
                let args = params
                    .and_then(|p| p.get("arguments"))
                    .unwrap_or(&Value::Null);
                keyed_plan(id, key, name, (args, probe::arguments(body)), lease, params)
            }
            KeyFound::None => session_plan(RequestIds::one(id)),
        },
        _ => session_plan(RequestIds::one(id)),
    })
}

/// The plan of the most common POST, a single request that holds no key, read by its members
/// alone ([`scan`]); `None` leaves the body to the deserializer ([`read_post`]): anything
/// keyed or odd, and `initialize`/`server/discover`, whose plans need more of the body.
/// `key_header`: the request's head names a key in `Idempotency-Key`.
fn plain_plan(keys: bool, key_header: bool, body: &[u8], in_session: bool) -> Option<Plan> {
    let read = written_plainly(body).or_else(|| members(body))?;
    let method = scan::plain_bytes(read.method)?;
    let id = scan::id(read.id)?;
    match method {
        b"initialize" | b"server/discover" if !in_session => return None,
        b"tools/call" if keys && (read.keyed || key_header) => return None,
        _ => {}
    }
    Some(session_plan(in_session, RequestIds::one(id)))
}

/// What [`plain_plan`] reads of a request: its method's and id's values as written, and
/// whether its params name a key in either place (even a null or an invalid one: those are
/// the deserializer's to judge).
#[cfg_attr(test, derive(Debug, PartialEq))]
struct Members<'a> {
    method: &'a [u8],
    id: &'a [u8],
    keyed: bool,
}

/// The members of a single object whose `method` and `id` are each given once; `None` for
/// anything else.
fn members(body: &[u8]) -> Option<Members<'_>> {
    let (mut method, mut id, mut params) = (None, None, None);
    let mut twice = false;
    let mut keyed = false;
    let end = scan::object(body, scan::first(body), |key, at| {
        if key == b"params" {
            let (end, names_key) = params_keyed(body, at)?;
            keyed = names_key;
            twice |= params.replace(()).is_some();
            return Some(end);
        }
        let end = scan::skip(body, at)?;
        let slot = match key {
            b"method" => &mut method,
            b"id" => &mut id,
            _ => return Some(end),
        };
        twice |= slot.replace(&body[at..end]).is_some();
        Some(end)
    })?;
    scan::at_end(body, end)?;
    if twice {
        return None;
    }
    Some(Members {
        method: method?,
        id: id?,
        keyed,
    })
}

/// [`members`] of a request written as most clients write one, with no space and these
/// members alone: `jsonrpc`, `id`, `method`, `params` (rmcp, the Python SDK), or the same
/// sorted (a serialized `serde_json::Value`). Its member names are matched where they must
/// lie, not searched for; the values are read as [`members`] reads them. `None`: not written
/// so (read the general way).
fn written_plainly(body: &[u8]) -> Option<Members<'_>> {
    const JSONRPC_FIRST: &[u8] = br#"{"jsonrpc":"2.0","id":"#;
    const ID_FIRST: &[u8] = br#"{"id":"#;
    const THEN_JSONRPC: &[u8] = br#","jsonrpc":"2.0""#;
    const THEN_METHOD: &[u8] = br#","method":"#;
    const THEN_PARAMS: &[u8] = br#","params":"#;
    let (id_at, sorted) = if body.starts_with(JSONRPC_FIRST) {
        (JSONRPC_FIRST.len(), false)
    } else if body.starts_with(ID_FIRST) {
        (ID_FIRST.len(), true)
    } else {
        return None;
    };
    let id_end = scan::skip(body, id_at)?;
    let mut at = id_end;
    if sorted {
        at = after(body, at, THEN_JSONRPC)?;
    }
    let method_at = after(body, at, THEN_METHOD)?;
    if body.get(method_at) != Some(&b'"') {
        return None;
    }
    let method_end = scan::skip(body, method_at)?;
    let params_at = after(body, method_end, THEN_PARAMS)?;
    let (end, keyed) = params_keyed(body, params_at)?;
    if body.get(end..) != Some(b"}") {
        return None;
    }
    Some(Members {
        method: &body[method_at..method_end],
        id: &body[id_at..id_end],
        keyed,
    })
}

/// Where `bytes[at..]` continues past `expected`, when it starts with it.
fn after(bytes: &[u8], at: usize, expected: &[u8]) -> Option<usize> {
    bytes
        .get(at..)?
        .starts_with(expected)
        .then_some(at + expected.len())
}

/// Reads the params object at `at` as it is passed over (its key places are all that matter
/// in it): where it ends, and whether it names a key.
fn params_keyed(body: &[u8], at: usize) -> Option<(usize, bool)> {
    if let Some(end) = call_params_plainly(body, at) {
        return Some((end, false));
    }
    let mut keyed = false;
    let end = scan::object(body, at, |key, at| {
        match key {
            b"idempotencyKey" => keyed = true,
            b"_meta" => {
                return scan::object(body, at, |key, at| {
                    keyed |= key == wire::IDEMPOTENCY_META_KEY.as_bytes();
                    scan::skip(body, at)
                })
            }
            _ => {}
        }
        scan::skip(body, at)
    })?;
    Some((end, keyed))
}

/// Where a `tools/call`'s params at `at` end, when they are written with no space and hold
/// `name` and `arguments` alone, in either order: no key in them.
fn call_params_plainly(body: &[u8], at: usize) -> Option<usize> {
    const NAME_FIRST: &[u8] = br#"{"name":"#;
    const THEN_ARGUMENTS: &[u8] = br#","arguments":"#;
    const ARGUMENTS_FIRST: &[u8] = br#"{"arguments":"#;
    const THEN_NAME: &[u8] = br#","name":"#;
    let end = if let Some(name_at) = after(body, at, NAME_FIRST) {
        let arguments_at = after(body, scan::skip(body, name_at)?, THEN_ARGUMENTS)?;
        scan::skip(body, arguments_at)?
    } else {
        let arguments_at = after(body, at, ARGUMENTS_FIRST)?;
        let name_at = after(body, scan::skip(body, arguments_at)?, THEN_NAME)?;
        scan::skip(body, name_at)?
    };
    (body.get(end) == Some(&b'}')).then_some(end + 1)
}

/// The plan of a request that is not the guard's to answer or claim: a session's (its
/// responses numbered, `requests` the JSON-RPC ids it carries), or nothing outside one.
fn session_plan(in_session: bool, requests: RequestIds) -> Plan {
    if in_session {
        Plan::Session { requests }
    } else {
        Plan::Pass
    }
}

/// Shapes read off a POST body without building it.
mod probe {
    use std::borrow::Cow;

    use serde::Deserialize;
    use serde_json::value::RawValue;
    use serde_json::Value;

    #[derive(Deserialize)]
    pub(super) struct Message<'a> {
        #[serde(borrow, default)]
        pub(super) method: Option<Cow<'a, str>>,
        #[serde(default)]
        pub(super) id: Option<Value>,
        #[serde(borrow, default)]
        pub(super) params: Option<Params<'a>>,
    }

    #[derive(Deserialize, Default)]
    pub(super) struct Params<'a> {
        #[serde(borrow, default)]
        pub(super) name: Option<Cow<'a, str>>,
        #[serde(borrow, default)]
        pub(super) arguments: Option<&'a RawValue>,
        #[serde(default, rename = "_meta")]
        pub(super) meta: Option<Meta>,
        #[serde(default, rename = "idempotencyKey")]
        pub(super) idempotency_key: Option<Value>,
        #[serde(default)]
        pub(super) capabilities: Option<Value>,
    }

    /// The text of a single message's `params.arguments`, read alone (a message whose other
    /// members the probe refused).
    pub(super) fn arguments(body: &[u8]) -> Option<&RawValue> {
        #[derive(Deserialize)]
        struct Message<'a> {
            #[serde(borrow)]
            params: Params<'a>,
        }
        #[derive(Deserialize)]
        struct Params<'a> {
            #[serde(borrow)]
            arguments: Option<&'a RawValue>,
        }
        serde_json::from_slice::<Message<'_>>(body)
            .ok()?
            .params
            .arguments
    }

    #[derive(Deserialize)]
    pub(super) struct Meta {
        #[serde(default, rename = "io.github.mcp-resume/idempotency-key")]
        pub(super) key: Option<Value>,
    }
}

/// The id of a JSON-RPC request (a message with a method and a string or number id).
fn request_id(message: &Value) -> Option<Value> {
    message.get("method")?;
    match message.get("id")? {
        id @ (Value::String(_) | Value::Number(_)) => Some(id.clone()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;
    use proptest::prelude::*;

    /// A POST body put together from parts the rules look at, written in the ways a client
    /// may write them.
    fn body() -> impl Strategy<Value = String> {
        let method = prop::sample::select(vec![
            r#""tools/call""#,
            r#""tools/call""#,
            r#""tools/call""#,
            r#""initialize""#,
            r#""server/discover""#,
            r#""tools/list""#,
            r#""tools\/call""#,
            "7",
        ]);
        let id = prop::sample::select(vec![
            "1",
            "-2",
            "0.5",
            r#""a""#,
            r#""a\"b""#,
            "null",
            "{}",
            "01",
        ]);
        let key = prop::sample::select(vec![
            "",
            r#","idempotencyKey":"k1""#,
            r#","idempotencyKey":null"#,
            r#","idempotencyKey":5"#,
            r#","_meta":{"io.github.mcp-resume/idempotency-key":"k1"}"#,
            r#","_meta":{"io.github.mcp-resume\/idempotency-key":"k1"}"#,
            r#","_meta":{"other":1}"#,
            r#","_meta":null"#,
            r#","_meta":{"a":1},"_meta":{"io.github.mcp-resume/idempotency-key":"k1"}"#,
        ]);
        let args = prop::sample::select(vec![
            r#"{"text":"bench"}"#,
            r#"{"text":"\"idempotencyKey\":\"}"}"#,
            "[1,{}]",
            "null",
        ]);
        let params = (key, args, any::<bool>()).prop_map(|(key, args, sorted)| {
            if sorted {
                format!(r#"{{"arguments":{args},"name":"echo"{key}}}"#)
            } else {
                format!(r#"{{"name":"echo","arguments":{args}{key}}}"#)
            }
        });
        let params = prop_oneof![params, Just("null".to_owned()), Just("[]".to_owned())];
        let rarely = || prop::bool::weighted(0.15);
        let flags = (0..4usize, rarely(), rarely(), any::<bool>());
        (method, id, params, flags).prop_map(|(method, id, params, (order, b, c, d))| {
            let mut members = vec![
                format!(r#""jsonrpc":"2.0""#),
                format!(r#""method":{method}"#),
                format!(r#""id":{id}"#),
                format!(r#""params":{params}"#),
            ];
            match order {
                // As most clients write them: `jsonrpc` first, or sorted.
                1 => members.swap(1, 2),
                2 => members = [2, 0, 1, 3].map(|i| members[i].clone()).to_vec(),
                3 => members.swap(1, 3),
                _ => {}
            }
            if b {
                members.remove(2);
            }
            if c {
                members.push(format!(r#""id":{id}"#));
            }
            let sep = if d { " , " } else { "," };
            format!("{{{}}}", members.join(sep))
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]

        /// The members-only reading gives the deserializer's plan or stands aside.
        #[test]
        fn the_plain_plan_is_the_deserializers_or_none(
            body in body(),
            keys in any::<bool>(),
            in_session in any::<bool>(),
            header in any::<bool>(),
        ) {
            let mut headers = HeaderMap::new();
            if header {
                headers.insert(wire::IDEMPOTENCY_KEY_HEADER, HeaderValue::from_static("k1"));
            }
            let lease = Duration::from_secs(10);
            if let Some(fast) = written_plainly(body.as_bytes()) {
                prop_assert_eq!(Some(fast), members(body.as_bytes()));
            }
            if let Some(plain) = plain_plan(keys, header, body.as_bytes(), in_session) {
                let read = read_post(keys, lease, body.as_bytes(), &headers, in_session);
                prop_assert_eq!(format!("{:?}", Ok::<_, ()>(plain)), format!("{:?}", read.map_err(|_| ())));
            }
        }
    }

    #[test]
    fn an_unkeyed_call_is_read_plainly_and_anything_keyed_is_not() {
        let plain = |body: &str| plain_plan(true, false, body.as_bytes(), true);
        let call = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"}}}"#;
        assert!(
            matches!(plain(call), Some(Plan::Session { requests }) if requests.iter().eq([Value::from(2)].iter()))
        );
        let keyed = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{},"_meta":{"io.github.mcp-resume/idempotency-key":"k"}}}"#;
        assert!(plain(keyed).is_none());
        let standard =
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"idempotencyKey":"k"}}"#;
        assert!(plain(standard).is_none());
        // Written as most clients write them: read where the members must lie.
        let sorted = r#"{"id":2,"jsonrpc":"2.0","method":"tools/call","params":{"arguments":{"text":"x"},"name":"echo"}}"#;
        for body in [call, sorted, keyed, standard] {
            assert!(written_plainly(body.as_bytes()).is_some(), "{body}");
        }
        assert!(matches!(plain(sorted), Some(Plan::Session { .. })));
    }
}
