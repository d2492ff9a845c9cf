//! [`Request`]: any request under construction, and the timing rules every request shares
//! with [`ToolCall`](super::ToolCall).

use std::time::Duration;

use serde_json::{Map, Value};

use crate::error::{Error, ErrorKind};
use crate::ids::RequestId;
use crate::proto::{CallId, CallRequest};

/// A request of any method: its params and how long it may take.
///
/// ```
/// use std::time::Duration;
/// use mcp_resume::Request;
/// use serde_json::json;
///
/// let request = Request::new("resources/read", json!({"uri": "file:///notes.txt"}))
///     .timeout(Duration::from_secs(5))
///     .reset_timeout_on_progress(true)
///     .max_total_timeout(Duration::from_secs(120));
/// assert_eq!(request.method(), "resources/read");
/// ```
///
/// Such a request carries no idempotency key, so it is never re-sent after an interruption
/// whose outcome is unknown; [`ToolCall`](super::ToolCall) is the request that can be.
///
/// A clone is another request: it copies everything but the [`Request::id`], and gets an id
/// of its own.
#[derive(Debug)]
#[must_use = "a Request does nothing until passed to Client::request or Client::start"]
pub struct Request {
    id: CallId,
    method: String,
    params: Value,
    meta: Map<String, Value>,
    pub(crate) timing: Timing,
}

/// The same method, params, meta and timing under a fresh [`CallId`]: one id names one call,
/// and two calls in flight under one id would receive each other's answers.
impl Clone for Request {
    fn clone(&self) -> Self {
        Request {
            id: CallId::next(),
            method: self.method.clone(),
            params: self.params.clone(),
            meta: self.meta.clone(),
            timing: self.timing,
        }
    }
}

impl Request {
    /// A request of `method` with `params`: a JSON object, or `None` (or `null`) for none.
    pub fn new(method: impl Into<String>, params: impl Into<Option<Value>>) -> Self {
        Request {
            id: CallId::next(),
            method: method.into(),
            params: params.into().unwrap_or(Value::Null),
            meta: Map::new(),
            timing: Timing::default(),
        }
    }

    /// Adds an entry to `params._meta`.
    pub fn meta(mut self, key: impl Into<String>, value: Value) -> Self {
        self.meta.insert(key.into(), value);
        self
    }

    /// Asks for progress notifications under `token` (`_meta.progressToken`: a string or an
    /// integer, else the request fails `InvalidConfig` unsent). A request started as a
    /// [`CallHandle`](super::CallHandle) gets a token of its own when it has none.
    pub fn progress_token(self, token: impl Into<Value>) -> Self {
        self.meta("progressToken", token.into())
    }

    /// How long the request may take (default: the client's `call_timeout`), spanning every
    /// resume; with [`Request::reset_timeout_on_progress`], how long it may go without
    /// progress.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timing.timeout = Some(timeout);
        self
    }

    /// Restarts the timeout at each progress notification of this request, so a long job
    /// that keeps reporting progress is not cut (default: `false`). A progress token is added
    /// when the request has none. The whole request stays bounded by
    /// [`Request::max_total_timeout`], when set.
    pub fn reset_timeout_on_progress(mut self, reset: bool) -> Self {
        self.timing.reset_on_progress = reset;
        self
    }

    /// Bound on the whole request, however much progress it reports (default: none beyond
    /// the timeout; with [`Request::reset_timeout_on_progress`], none at all).
    pub fn max_total_timeout(mut self, timeout: Duration) -> Self {
        self.timing.max_total = Some(timeout);
        self
    }

    /// The id this request goes by in [`Client::events`](super::Client::events) and
    /// [`Client::notifications`](super::Client::notifications), known before it is sent. A
    /// clone gets an id of its own.
    pub fn id(&self) -> CallId {
        self.id
    }

    /// The method.
    pub fn method(&self) -> &str {
        &self.method
    }

    pub(crate) fn into_submission(self, default_timeout: Duration) -> Result<Submission, Error> {
        let params = with_meta(self.params, self.meta)?;
        let request = CallRequest::new(self.method, params);
        Submission::of_app(self.id, request, self.timing, default_timeout)
    }
}

/// When a request gives up.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Timing {
    pub(crate) timeout: Option<Duration>,
    pub(crate) reset_on_progress: bool,
    pub(crate) max_total: Option<Duration>,
}

/// A request ready for the driver: the core's request (whose deadline bounds the whole call),
/// and the driver's part of the timing.
#[derive(Debug)]
pub(crate) struct Submission {
    pub(crate) id: CallId,
    pub(crate) request: CallRequest,
    /// Longest time without progress, for a call that resets its timeout on progress.
    pub(crate) idle: Option<Duration>,
    /// The whole call's bound, if any (the handle's hang guard adds a grace to it).
    pub(crate) total: Option<Duration>,
    /// Whether the call's progress is wanted (a handle's progress stream, or the idle timer).
    pub(crate) wants_progress: bool,
}

/// The core's deadline of a call that may run as long as it reports progress: far enough to
/// never fire first, and still a deadline.
const UNBOUNDED: Duration = Duration::from_secs(365 * 24 * 3600);

impl Submission {
    pub(crate) fn new(
        id: CallId,
        request: CallRequest,
        timing: Timing,
        default_timeout: Duration,
    ) -> Result<Self, Error> {
        if timing.timeout == Some(Duration::ZERO) || timing.max_total == Some(Duration::ZERO) {
            return Err(Error::new(
                ErrorKind::InvalidConfig,
                "a call timeout must be greater than zero",
            ));
        }
        let timeout = timing.timeout.unwrap_or(default_timeout);
        let (deadline, idle, total) = if timing.reset_on_progress {
            // The core keeps one deadline per call, spanning resumes and re-sends: it gets
            // the total bound, and the driver enforces the timeout between progress.
            let total = timing.max_total;
            (total.unwrap_or(UNBOUNDED), Some(timeout), total)
        } else {
            let bound = timing.max_total.map_or(timeout, |max| max.min(timeout));
            (bound, None, Some(bound))
        };
        Ok(Submission {
            id,
            request: request.with_timeout(deadline),
            idle,
            total,
            wants_progress: idle.is_some(),
        })
    }

    /// A request the application built (a [`Request`], a [`ToolCall`](super::ToolCall)):
    /// its progress token one the client can match the server's progress to (a string or an
    /// integer: a float or an integer past 64 bits would never match, and a call timed by its
    /// progress would be cut for a silence that is not one), and a token of its own added when
    /// its progress is wanted. A host's own request through the bridge keeps its token as
    /// sent, and goes through [`Submission::new`] alone.
    pub(crate) fn of_app(
        id: CallId,
        request: CallRequest,
        timing: Timing,
        default_timeout: Duration,
    ) -> Result<Self, Error> {
        let token = request
            .params()
            .and_then(|p| p.get("_meta"))
            .and_then(|m| m.get("progressToken"));
        if token.is_some_and(|t| RequestId::from_json(t).is_none()) {
            return Err(Error::new(
                ErrorKind::InvalidConfig,
                "a progress token must be a string or an integer",
            ));
        }
        let submission = Submission::new(id, request, timing, default_timeout)?;
        if submission.wants_progress {
            submission.with_progress()
        } else {
            Ok(submission)
        }
    }

    /// Makes sure the server sends this call's progress: a token of its own when it has none.
    pub(crate) fn with_progress(mut self) -> Result<Self, Error> {
        self.wants_progress = true;
        let has_token = self
            .request
            .params()
            .and_then(|p| p.get("_meta"))
            .and_then(|m| m.get("progressToken"))
            .is_some();
        if !has_token {
            let token = Value::String(format!("mcp-resume-{}-{}", process_tag(), self.id.0));
            self.request = self.request.with_meta_entry("progressToken", token)?;
        }
        Ok(self)
    }
}

/// The part of every automatic progress token that is this process's own: call ids restart at
/// 1 in every process, and a call picked up from the ledger keeps the token its first process
/// gave it, so without it a new call here could share a picked-up call's token (and get its
/// progress, and have its own silence timer reset by it).
fn process_tag() -> &'static str {
    static TAG: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TAG.get_or_init(|| {
        let (high, _) = uuid::Uuid::new_v4().as_u64_pair();
        format!("{high:016x}")
    })
}

/// `params` with `meta` merged into its `_meta`.
pub(crate) fn with_meta(params: Value, meta: Map<String, Value>) -> Result<Option<Value>, Error> {
    if meta.is_empty() {
        return Ok((!params.is_null()).then_some(params));
    }
    let mut params = match params {
        Value::Null => Map::new(),
        Value::Object(map) => map,
        _ => {
            return Err(Error::new(
                ErrorKind::InvalidConfig,
                "params must be a JSON object to carry _meta",
            ))
        }
    };
    match params
        .entry("_meta")
        .or_insert_with(|| Value::Object(Map::new()))
    {
        Value::Object(existing) => existing.extend(meta),
        _ => {
            return Err(Error::new(
                ErrorKind::InvalidConfig,
                "params._meta must be a JSON object",
            ))
        }
    }
    Ok(Some(Value::Object(params)))
}

/// Adding one `_meta` entry to a core request, keeping its method, key and deadline.
trait WithMeta: Sized {
    fn with_meta_entry(self, key: &str, value: Value) -> Result<Self, Error>;
}

impl WithMeta for CallRequest {
    fn with_meta_entry(self, key: &str, value: Value) -> Result<Self, Error> {
        let mut meta = Map::new();
        meta.insert(key.to_owned(), value);
        let params = with_meta(self.params().cloned().unwrap_or(Value::Null), meta)?;
        let rebuilt = match self.idempotency_key() {
            Some(k) => CallRequest::tool_call(params.unwrap_or(Value::Null), Some(k.clone())),
            None => CallRequest::new(self.method(), params),
        };
        Ok(match self.timeout() {
            Some(d) => rebuilt.with_timeout(d),
            None => rebuilt,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const DEFAULT: Duration = Duration::from_secs(60);

    #[test]
    fn timing_plans_the_core_deadline_and_the_idle_timer() {
        let plan = |timing: Timing| {
            let s =
                Submission::new(CallId(1), CallRequest::new("m", None), timing, DEFAULT).unwrap();
            (s.request.timeout(), s.idle, s.total)
        };
        let secs = Duration::from_secs;
        assert_eq!(
            plan(Timing::default()),
            (Some(DEFAULT), None, Some(DEFAULT))
        );
        let t = Timing {
            timeout: Some(secs(5)),
            max_total: Some(secs(3)),
            reset_on_progress: false,
        };
        assert_eq!(plan(t), (Some(secs(3)), None, Some(secs(3))));
        let t = Timing {
            timeout: Some(secs(5)),
            max_total: Some(secs(30)),
            reset_on_progress: true,
        };
        assert_eq!(plan(t), (Some(secs(30)), Some(secs(5)), Some(secs(30))));
        let t = Timing {
            reset_on_progress: true,
            ..Timing::default()
        };
        assert_eq!(plan(t), (Some(UNBOUNDED), Some(DEFAULT), None));
        let zero = Timing {
            timeout: Some(Duration::ZERO),
            ..Timing::default()
        };
        assert!(Submission::new(CallId(1), CallRequest::new("m", None), zero, DEFAULT).is_err());
    }

    /// The token a call under `CallId(1)` gets in this process.
    fn first_calls_token() -> String {
        let s = Submission::new(
            CallId(1),
            CallRequest::new("m", None),
            Timing::default(),
            DEFAULT,
        )
        .unwrap()
        .with_progress()
        .unwrap();
        s.request.params().unwrap()["_meta"]["progressToken"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// Call ids restart at 1 in every process, and a call picked up from the ledger keeps the
    /// token its first process gave it: two processes' automatic tokens for the same call id
    /// must differ, or the picked-up call's progress goes to a new call of the same id.
    #[test]
    fn automatic_progress_tokens_differ_between_processes() {
        const CHILD: &str = "MCP_RESUME_PRINT_FIRST_TOKEN";
        if std::env::var_os(CHILD).is_some() {
            println!("token={}", first_calls_token());
            return;
        }
        let ours = first_calls_token();
        assert_eq!(
            ours,
            first_calls_token(),
            "one token per call id in a process"
        );
        let output = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "client::request::tests::automatic_progress_tokens_differ_between_processes",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD, "1")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        let theirs = stdout
            .lines()
            .find_map(|l| l.split("token=").nth(1))
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("the other process printed no token: {stdout}"));
        assert!(theirs.starts_with("mcp-resume-"), "{theirs}");
        assert_ne!(ours, theirs, "another process's call 1 has another token");
    }

    #[test]
    fn progress_tokens_are_added_once_and_meta_merges() {
        let r = Request::new("x/y", json!({"a": 1, "_meta": {"k": 1}})).meta("tag", json!(2));
        let id = r.id();
        let s = r.into_submission(DEFAULT).unwrap().with_progress().unwrap();
        assert_eq!(
            s.request.params(),
            Some(&json!({"a": 1, "_meta": {"k": 1, "tag": 2,
                                            "progressToken": format!("mcp-resume-{}-{}", process_tag(), id.0)}}))
        );
        let s = Request::new("x/y", Value::Null)
            .progress_token(7)
            .into_submission(DEFAULT)
            .unwrap()
            .with_progress()
            .unwrap();
        assert_eq!(
            s.request.params(),
            Some(&json!({"_meta": {"progressToken": 7}}))
        );
        assert!(Request::new("x", json!([1]))
            .meta("k", json!(1))
            .into_submission(DEFAULT)
            .is_err());
        for token in [
            json!({"t": 1}),
            json!([1]),
            json!(true),
            Value::Null,
            json!(1.5),
            json!(u64::MAX),
        ] {
            let refused = Request::new("x/y", Value::Null)
                .progress_token(token.clone())
                .into_submission(DEFAULT)
                .err()
                .map(|e| e.kind());
            assert_eq!(refused, Some(ErrorKind::InvalidConfig), "{token}");
        }
        for token in [json!("t"), json!(-3), json!(i64::MAX)] {
            assert!(Request::new("x/y", Value::Null)
                .progress_token(token)
                .into_submission(DEFAULT)
                .is_ok());
        }
        assert_eq!(
            Request::new("ping", Value::Null)
                .into_submission(DEFAULT)
                .unwrap()
                .request
                .params(),
            None
        );
    }
}
