//! The application's futures run where they are, their panics kept inside them.

use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::task::{Context, Poll};

/// A future of the application's code (a token provider's, the HTTP client's, a ledger's),
/// run in place, whose panics stay inside it: one in a poll is its outcome (`Err`), one as
/// it is dropped, finished or not (an exchange past its call's deadline, a ledger write past
/// its timeout, a cancellation), is logged. Unwinding from a drop would reach whoever
/// dropped it: a task every later exchange or write of the client goes through (the
/// exchange runner, the ledger's writer), or a caller awaiting its call or its `recover`.
///
/// It holds the future's slot, not the future, so that one borrowing its surroundings is
/// dropped here, under the catch, rather than where the slot lives.
pub(crate) struct Contained<'a, F> {
    work: Pin<&'a mut Option<F>>,
    /// What runs, for the log.
    what: &'static str,
}

impl<'a, F> Contained<'a, F> {
    /// Runs the future in `work` (`what`, for the log): pin `Some(future)` where it is
    /// awaited.
    pub(crate) fn new(work: Pin<&'a mut Option<F>>, what: &'static str) -> Self {
        Contained { work, what }
    }

    /// Drops the future where a panic of its drop is caught.
    fn let_go(&mut self) {
        if self.work.is_none() {
            return;
        }
        let mut slot = self.work.as_mut();
        if catch_unwind(AssertUnwindSafe(|| slot.set(None))).is_err() {
            tracing::error!("{} panicked as it was dropped", self.what);
        }
    }
}

impl<F: Future> Future for Contained<'_, F> {
    type Output = Result<F::Output, ()>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let Some(work) = self.work.as_mut().as_pin_mut() else {
            return Poll::Ready(Err(()));
        };
        let outcome = match catch_unwind(AssertUnwindSafe(|| work.poll(cx))) {
            Ok(Poll::Pending) => return Poll::Pending,
            Ok(Poll::Ready(out)) => Ok(out),
            Err(_) => Err(()),
        };
        self.let_go();
        Poll::Ready(outcome)
    }
}

impl<F> Drop for Contained<'_, F> {
    fn drop(&mut self) {
        self.let_go();
    }
}
