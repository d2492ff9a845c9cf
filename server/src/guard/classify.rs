//! Reading a POST body into what the rules care about (a [`Plan`]): the common request by
//! its members alone ([`scan`]), anything else by the deserializer, each giving the same plan.

use std::time::Duration;

use http::{HeaderMap, StatusCode};
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
fn keyed_plan(id: Value, key: IdempotencyKey, name: &str, args: &Value, lease: Duration) -> Plan {
    let digest = wire::arguments_digest(name, args);
    Plan::Keyed(Box::new(KeyedPlan {
        requests: RequestIds::one(id.clone()),
        id,
        claim: Claim::new(key, digest, ClaimToken::from_stored(""), lease),
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
    // (method, id, the call's name and key); the rest is skipped.
    if let Ok(m) = serde_json::from_slice::<probe::Message<'_>>(body) {
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
                        keyed_plan(id, key, name, args, lease)
                    }
                    KeyFound::Invalid(why) => return Err(Answer::invalid_key(&id, why)),
                    KeyFound::None => session_plan(RequestIds::one(id)),
                }
            }
            _ => session_plan(RequestIds::one(id)),
        });
    }
    let Ok(value) = serde_json::from_slice::<Value>(body) else {
        if keys && headers.contains_key(names::IDEMPOTENCY_KEY) {
            // Keyed by its header, and unreadable here (nested past the reader's bound): an
            // inner server that reads it anyway would run it unguarded.
            return Err(Answer::unguardable(
                StatusCode::BAD_REQUEST,
                "a keyed call whose body cannot be read cannot be guarded",
            ));
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
                keyed_plan(id, key, name, args, lease)
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
    let (mut method, mut id, mut params) = (None, None, None);
    let mut twice = false;
    // Whether the params name a key in either place (even a null or an invalid one: those
    // are the deserializer's to judge).
    let mut keyed = false;
    let end = scan::object(body, scan::first(body), |key, at| {
        if key == b"params" {
            // Read as it is passed over: its key places are all that matter in it.
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
    let method = scan::plain_bytes(method?)?;
    let id = scan::id(id?)?;
    match method {
        b"initialize" | b"server/discover" if !in_session => return None,
        b"tools/call" if keys && (keyed || key_header) => return None,
        _ => {}
    }
    Some(session_plan(in_session, RequestIds::one(id)))
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

    use serde::de::IgnoredAny;
    use serde::Deserialize;
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
        #[serde(default, rename = "arguments")]
        _arguments: Option<IgnoredAny>,
        #[serde(default, rename = "_meta")]
        pub(super) meta: Option<Meta>,
        #[serde(default, rename = "idempotencyKey")]
        pub(super) idempotency_key: Option<Value>,
        #[serde(default)]
        pub(super) capabilities: Option<Value>,
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
        let params = (key, args)
            .prop_map(|(key, args)| format!(r#"{{"name":"echo","arguments":{args}{key}}}"#));
        let params = prop_oneof![params, Just("null".to_owned()), Just("[]".to_owned())];
        let rarely = || prop::bool::weighted(0.15);
        let flags = (any::<bool>(), rarely(), rarely(), any::<bool>());
        (method, id, params, flags).prop_map(|(method, id, params, (a, b, c, d))| {
            let mut members = vec![
                format!(r#""jsonrpc":"2.0""#),
                format!(r#""method":{method}"#),
                format!(r#""id":{id}"#),
                format!(r#""params":{params}"#),
            ];
            if a {
                members.swap(1, 3);
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
    }
}
