//! The one mapping of failures to JavaScript errors.
//!
//! The error classes are defined in JavaScript (`lib/errors.js`, one per `ErrorKind`, all
//! under `McpResumeError`), because a class made from Rust cannot extend `Error`. At load
//! time the JavaScript side registers a factory (`setErrorFactory`) taking one object as
//! JSON text (`kind`, `message`; `mayHaveRun` and `inputRefused` for the SDK's errors; and
//! `code`, `data`, `retryAfterMs`, `authChallenge` when the failure has them; text, as all
//! JSON crossing the boundary, see `convert`) and returning the instance; promises and
//! constructors reject and throw with that instance.

use std::cell::RefCell;
use std::future::Future;

use mcp_resume::{AuthChallenge, Error};
use napi::bindgen_prelude::{Function, FunctionRef, PromiseRaw, ToNapiValue, Unknown};
use napi::Env;
use serde_json::{json, Value};

/// Why a call of the addon failed.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The SDK's error, whatever its kind.
    Sdk(Error),
    /// A value the addon cannot hand to the SDK (an unknown era name, a negative duration):
    /// `invalid_config`, like the SDK's own configuration errors.
    Invalid(String),
    /// The call's `CancelToken` was cancelled; the JavaScript side rejects with its
    /// signal's reason instead.
    Aborted,
    /// JSON longer than a JavaScript string can be: `too_large`, like what is over the
    /// SDK's own limits.
    TooLarge(String),
}

impl From<Error> for Failure {
    fn from(error: Error) -> Self {
        Failure::Sdk(error)
    }
}

/// `Failure::Invalid` from any message.
pub(crate) fn invalid(message: impl Into<String>) -> Failure {
    Failure::Invalid(message.into())
}

type Factory = FunctionRef<String, Unknown<'static>>;

thread_local! {
    // One per JavaScript thread: each worker thread loads the module, and registers, anew.
    static FACTORY: RefCell<Option<Factory>> = const { RefCell::new(None) };
}

/// Registers the function that makes the typed errors (`setErrorFactory`).
pub(crate) fn register_factory(factory: Function<String, Unknown<'static>>) -> napi::Result<()> {
    let factory = factory.create_ref()?;
    let previous = FACTORY.with(|slot| slot.borrow_mut().replace(factory));
    drop(previous);
    Ok(())
}

/// What the factory receives for `failure`.
fn details(failure: &Failure) -> Value {
    match failure {
        Failure::Sdk(error) => sdk_details(error),
        Failure::Invalid(message) => json!({ "kind": "invalid_config", "message": message }),
        Failure::Aborted => json!({ "kind": "aborted", "message": "the call was aborted" }),
        // What JavaScript could not be given is an answer (or what a call returned): the
        // request it answers ran.
        Failure::TooLarge(message) => {
            json!({ "kind": "too_large", "message": message, "mayHaveRun": true })
        }
    }
}

fn sdk_details(error: &Error) -> Value {
    let mut details = json!({ "kind": error.kind().as_str(), "message": error.message() });
    if let Some(rpc) = error.rpc_error() {
        details["code"] = json!(rpc.code);
        details["rpcMessage"] = json!(rpc.message);
        if let Some(data) = &rpc.data {
            details["data"] = data.clone();
        }
    }
    if let Some(after) = error.retry_after() {
        details["retryAfterMs"] = json!(after.as_millis() as u64);
    }
    details["mayHaveRun"] = json!(error.may_have_run());
    details["inputRefused"] = json!(error.input_refused());
    if let Some(challenge) = error.auth_challenge() {
        details["authChallenge"] = challenge_json(challenge);
    }
    details
}

/// The server's `WWW-Authenticate` challenge, its parts named as in JavaScript.
pub(crate) fn challenge_json(challenge: &AuthChallenge) -> Value {
    json!({
        "status": challenge.status,
        "scheme": challenge.scheme,
        "error": challenge.error,
        "errorDescription": challenge.error_description,
        "scope": challenge.scope,
        "resourceMetadata": challenge.resource_metadata,
        "realm": challenge.realm,
    })
}

/// The JavaScript error for `failure`: the registered factory's instance, or a plain
/// `Error` naming the kind if none is registered (the addon used without `index.js`).
pub(crate) fn to_js(env: &Env, failure: &Failure) -> napi::Error {
    let details = details(failure);
    let made = FACTORY.with(|slot| {
        let slot = slot.borrow();
        let factory = slot.as_ref()?;
        Some(
            factory
                .borrow_back(env)
                .and_then(|f| f.call(details.to_string())),
        )
    });
    match made {
        Some(Ok(instance)) => napi::Error::from(instance),
        Some(Err(e)) => e,
        None => napi::Error::from_reason(format!(
            "{}: {}",
            details["kind"].as_str().unwrap_or("error"),
            details["message"].as_str().unwrap_or_default()
        )),
    }
}

/// `fut` as a promise that resolves with its value or rejects with the typed error.
pub(crate) fn promise<'env, T>(
    env: &'env Env,
    fut: impl Future<Output = Result<T, Failure>> + Send + 'static,
) -> napi::Result<PromiseRaw<'env, T>>
where
    T: ToNapiValue + Send + 'static,
{
    env.spawn_future_with_callback(async move { Ok(fut.await) }, |env, outcome| {
        outcome.map_err(|failure| to_js(env, &failure))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_too_long_for_javascript_says_its_request_may_have_run() {
        let details = details(&Failure::TooLarge("3 GB".to_owned()));
        assert_eq!(details["kind"], "too_large");
        assert_eq!(details["mayHaveRun"], true);
    }
}
