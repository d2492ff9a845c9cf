//! [`CallHandle`]: a request in flight, with its id, its progress and its cancellation.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use futures::Stream;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tokio::time::{Instant, Sleep};

use super::driver::{Command, Core};
use super::models::Progress;
use crate::error::{Error, ErrorKind};
use crate::proto::CallId;

/// Added to a call's bound for the handle's own guard. The session enforces the deadline;
/// the guard only guarantees that a call polled off the driver's runtime never hangs,
/// whatever happens to that runtime.
pub(crate) const GUARD_GRACE: Duration = Duration::from_secs(2);

/// Progress notifications buffered per handle before the oldest unread are dropped.
pub(crate) const PROGRESS_BUFFER: usize = 64;

/// A request in flight, from [`Client::start`](super::Client::start) or
/// [`Client::start`](super::Client::start). Await it for the result.
///
/// - [`CallHandle::id`] names the call in events and notifications, and is known before the
///   request is sent.
/// - [`CallHandle::progress`] streams the call's own progress notifications (the request
///   carries a progress token of its own when it had none).
/// - [`CallHandle::cancel`] abandons the call with a reason; dropping the handle before it
///   completes abandons it too. Either way the server is sent `notifications/cancelled` if
///   the call may be running.
///
/// ```no_run
/// # async fn run(client: mcp_resume::Client) -> mcp_resume::Result<()> {
/// use futures::StreamExt;
/// use mcp_resume::ToolCall;
/// use serde_json::json;
///
/// let mut call = client.start(ToolCall::new("slow", json!({"steps": 5})))?;
/// let mut progress = call.progress();
/// loop {
///     tokio::select! {
///         result = &mut call => { println!("{}", result?.text()); break; }
///         Some(p) = progress.next() => println!("{} of {:?}", p.progress, p.total),
///     }
/// }
/// # Ok(()) }
/// ```
#[must_use = "dropping a CallHandle cancels its call"]
pub struct CallHandle<T> {
    id: CallId,
    waiting: Option<Waiting>,
    progress: Option<mpsc::Receiver<Progress>>,
    convert: fn(Value) -> Result<T, Error>,
}

struct Waiting {
    /// The call, what a cancellation names.
    call: CallId,
    core: Arc<Core>,
    rx: oneshot::Receiver<Result<Value, Error>>,
    /// When the guard fires, if the call has a bound at all: the end of its total bound,
    /// or of its allowed silence for a call that resets its timeout on progress.
    guard_at: Option<Instant>,
    /// The end of the total bound, when there is one.
    total_at: Option<Instant>,
    /// The call resets its timeout on progress: its guard follows the session's idle timer.
    idle: bool,
    guard: Option<Pin<Box<Sleep>>>,
}

impl<T> CallHandle<T> {
    /// A handle for `call`; `guard` and `idle` are the call's total bound and allowed
    /// silence when the handle is to keep its own guard (`None` for a call the driver's
    /// timer alone bounds).
    pub(crate) fn new(
        id: CallId,
        core: Arc<Core>,
        rx: oneshot::Receiver<Result<Value, Error>>,
        guard: Option<Duration>,
        idle: Option<Duration>,
        progress: Option<mpsc::Receiver<Progress>>,
        convert: fn(Value) -> Result<T, Error>,
    ) -> Self {
        let after = |t: Duration| Instant::now().checked_add(t.saturating_add(GUARD_GRACE));
        let total_at = guard.and_then(after);
        let idle_at = idle.and_then(after);
        let guard_at = match (total_at, idle_at) {
            (Some(total), Some(idle)) => Some(total.min(idle)),
            (total, idle) => total.or(idle),
        };
        CallHandle {
            id,
            waiting: Some(Waiting {
                call: id,
                core,
                rx,
                guard_at,
                total_at,
                idle: idle.is_some(),
                guard: None,
            }),
            progress,
            convert,
        }
    }

    /// The call's id, as in [`SessionEvent`](crate::SessionEvent)s and
    /// [`ServerNotification::call`](super::ServerNotification::call).
    pub fn id(&self) -> CallId {
        self.id
    }

    /// The call's progress notifications, in order; the stream ends when the call does. The
    /// first call takes the stream, later ones get an empty one. Reading it is optional: up to 64
    /// unread notifications are kept, later ones are dropped.
    pub fn progress(&mut self) -> ProgressStream {
        ProgressStream {
            rx: self.progress.take(),
        }
    }

    /// Abandons the call: the server is sent `notifications/cancelled` if the call may be
    /// running, and the call's result, if it still comes, is discarded. `reason` is logged
    /// with the call; the notification carries the client's standard reason.
    pub fn cancel(mut self, reason: impl Into<String>) {
        if let Some(waiting) = self.waiting.take() {
            let _ = waiting.core.command(Command::Cancel {
                call: waiting.call,
                reason: Some(reason.into()),
            });
        }
    }

    /// Whether the call has completed (its result was returned by awaiting the handle).
    pub fn is_finished(&self) -> bool {
        self.waiting.is_none()
    }
}

impl CallHandle<Value> {
    /// The same call, with its result read as `U` (a result that does not fit is a
    /// [`ErrorKind::Protocol`] error).
    pub fn typed<U: DeserializeOwned>(mut self) -> CallHandle<U> {
        CallHandle {
            id: self.id,
            waiting: self.waiting.take(),
            progress: self.progress.take(),
            convert: super::models::from_result::<U>,
        }
    }
}

impl<T> Future for CallHandle<T> {
    type Output = Result<T, Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let Some(waiting) = this.waiting.as_mut() else {
            return Poll::Ready(Err(Error::new(
                ErrorKind::Closed,
                "the call's result was already taken",
            )));
        };
        if let Poll::Ready(outcome) = Pin::new(&mut waiting.rx).poll(cx) {
            this.waiting = None;
            return Poll::Ready(match outcome {
                // A result that cannot be read as its type is still the server's answer: the
                // request ran.
                Ok(result) => {
                    result.and_then(|value| (this.convert)(value).map_err(Error::with_may_have_run))
                }
                Err(_) => Err(Error::new(
                    ErrorKind::Closed,
                    "the client's driver stopped before the call completed",
                )
                .with_may_have_run()),
            });
        }
        ready!(waiting.poll_guard(cx));
        // Dropping the waiting part cancels the call, which posts `notifications/cancelled`.
        if let Some(waiting) = this.waiting.take() {
            let _ = waiting.core.command(Command::Cancel {
                call: waiting.call,
                reason: None,
            });
        }
        // The core did not end it by its deadline: whether it was sent cannot be told here.
        Poll::Ready(Err(Error::new(
            ErrorKind::Timeout,
            "the call's deadline passed",
        )
        .with_may_have_run()))
    }
}

impl Waiting {
    /// Ready once the guard has fired; never, for a call without a guard. A call that resets
    /// its timeout on progress is guarded up to the end of its current silence: when the
    /// guard fires early because progress moved that end, it is armed again for it.
    fn poll_guard(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            let Some(at) = self.guard_at else {
                return Poll::Pending;
            };
            let sleep = self
                .guard
                .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(at)));
            ready!(sleep.as_mut().poll(cx));
            let silence = self
                .idle
                .then(|| self.core.idle_end(self.call))
                .flatten()
                .and_then(|end| end.checked_add(GUARD_GRACE));
            let next = match (silence, self.total_at) {
                (Some(silence), Some(total)) => Some(silence.min(total)),
                (silence, _) => silence,
            };
            match next {
                Some(next) if next > at => {
                    self.guard_at = Some(next);
                    sleep.as_mut().reset(next);
                }
                _ => return Poll::Ready(()),
            }
        }
    }
}

impl<T> CallHandle<T> {
    /// Runs `exchange`, the call's own POST performed by the caller, until it ends or the
    /// guard fires; then the handle is awaited as usual.
    ///
    /// The reply is not polled meanwhile: the answer is applied by the exchange's own
    /// report, in this task, and a reply waking the task that sends it makes the runtime
    /// poll that task once more for nothing (with more than one worker it also wakes another
    /// worker to take it, and the call's data moves between cores). Whatever else ends the
    /// call while its POST is open (its deadline, a cancellation, the client's stop) aborts
    /// the exchange, which ends this.
    pub(crate) async fn alongside(&mut self, exchange: impl Future<Output = ()>) {
        let mut exchange = std::pin::pin!(exchange);
        std::future::poll_fn(|cx| {
            if exchange.as_mut().poll(cx).is_ready() {
                return Poll::Ready(());
            }
            match self.waiting.as_mut() {
                Some(waiting) => waiting.poll_guard(cx),
                None => Poll::Ready(()),
            }
        })
        .await
    }
}

impl<T> Drop for CallHandle<T> {
    fn drop(&mut self) {
        if let Some(waiting) = self.waiting.take() {
            let _ = waiting.core.command(Command::Cancel {
                call: waiting.call,
                reason: None,
            });
        }
    }
}

impl<T> std::fmt::Debug for CallHandle<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallHandle")
            .field("id", &self.id)
            .field("finished", &self.is_finished())
            .finish_non_exhaustive()
    }
}

/// The progress notifications of one call, from [`CallHandle::progress`].
#[derive(Debug)]
pub struct ProgressStream {
    rx: Option<mpsc::Receiver<Progress>>,
}

impl ProgressStream {
    /// The next progress notification; `None` once the call has ended.
    pub async fn recv(&mut self) -> Option<Progress> {
        match &mut self.rx {
            Some(rx) => rx.recv().await,
            None => None,
        }
    }
}

impl Stream for ProgressStream {
    type Item = Progress;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Progress>> {
        match &mut self.rx {
            Some(rx) => rx.poll_recv(cx),
            None => Poll::Ready(None),
        }
    }
}
