//! Cancellation from JavaScript: an `AbortSignal`'s abort reaches a call's future.
//!
//! The JavaScript side makes a `CancelToken` per call that has a signal and cancels it on
//! `abort`; the call's future then loses the race against the token and is dropped, which is
//! how the Rust SDK cancels a call (`notifications/cancelled`, no resume or re-send after).

use std::future::Future;
use std::sync::Arc;

use napi_derive::napi;
use tokio::sync::watch;

use crate::errors::Failure;

/// A one-way switch: `cancel()` from JavaScript, observed by the futures given it.
#[napi]
pub struct CancelToken {
    cancelled: Arc<watch::Sender<bool>>,
}

#[napi]
impl CancelToken {
    /// A token not yet cancelled.
    #[napi(constructor, catch_unwind)]
    pub fn new() -> Self {
        CancelToken {
            cancelled: Arc::new(watch::channel(false).0),
        }
    }

    /// Cancels every future given this token, now and later.
    #[napi(catch_unwind)]
    pub fn cancel(&self) {
        self.cancelled.send_replace(true);
    }

    /// Whether `cancel()` was called.
    #[napi(getter, catch_unwind)]
    pub fn cancelled(&self) -> bool {
        *self.cancelled.borrow()
    }
}

impl Default for CancelToken {
    fn default() -> Self {
        CancelToken::new()
    }
}

/// What a future waits on to learn it was cancelled; `None` never fires.
pub(crate) struct Cancellation(Option<watch::Receiver<bool>>);

impl Cancellation {
    /// The cancellation of `token`, if any.
    pub(crate) fn of(token: Option<&CancelToken>) -> Self {
        Cancellation(token.map(|t| t.cancelled.subscribe()))
    }

    /// Resolves once cancelled; never without a token.
    pub(crate) async fn fired(&mut self) {
        match &mut self.0 {
            // An error means the token is gone, and with it any way to cancel.
            Some(rx) => {
                if rx.wait_for(|c| *c).await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
            None => std::future::pending().await,
        }
    }

    /// `fut`'s outcome, or [`Failure::Aborted`] once cancelled (dropping `fut`).
    pub(crate) async fn run<T>(
        mut self,
        fut: impl Future<Output = Result<T, Failure>>,
    ) -> Result<T, Failure> {
        tokio::select! {
            biased;
            _ = self.fired() => Err(Failure::Aborted),
            outcome = fut => outcome,
        }
    }
}
