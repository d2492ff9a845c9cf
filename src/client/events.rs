//! Streams the application subscribes to: lifecycle events and server notifications.
//!
//! Both are fan-out (every subscriber sees every item sent after it subscribed) over a bounded
//! buffer: a subscriber that falls more than [`EVENT_BUFFER`] items behind loses the oldest
//! ones instead of holding memory for them. The loss is counted ([`EventStream::missed`]) and
//! logged, never silent. Memory held for a lagging subscriber is therefore bounded by
//! [`EVENT_BUFFER`] items, each bounded by the configured maximum event size.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::stream::{BoxStream, Stream, StreamExt};
use serde_json::Value;
use tokio::sync::broadcast;

use crate::proto::{CallId, SessionEvent};

/// Items buffered per subscriber before the oldest are dropped.
pub const EVENT_BUFFER: usize = 256;

/// A notification from the server (`notifications/progress`, `notifications/message`, …).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ServerNotification {
    /// The call whose response stream carried it, when it came on one (e.g. progress).
    pub call: Option<CallId>,
    /// The method, e.g. `notifications/progress`.
    pub method: String,
    /// The params, as sent.
    pub params: Option<Value>,
}

impl ServerNotification {
    /// `params.progressToken` of a progress notification.
    pub fn progress_token(&self) -> Option<&Value> {
        self.params.as_ref()?.get("progressToken")
    }
}

/// Stream of [`SessionEvent`]s, from [`Client::events`](super::Client::events).
pub struct EventStream {
    inner: Lossy<SessionEvent>,
}

/// Stream of [`ServerNotification`]s, from
/// [`Client::notifications`](super::Client::notifications).
pub struct NotificationStream {
    inner: Lossy<ServerNotification>,
}

macro_rules! lossy_stream {
    ($ty:ident, $item:ty, $what:literal) => {
        impl $ty {
            pub(crate) fn new(rx: broadcast::Receiver<$item>) -> Self {
                $ty {
                    inner: Lossy::new(rx, $what),
                }
            }

            /// The next item; `None` once the client and its driver are gone.
            pub async fn recv(&mut self) -> Option<$item> {
                self.next().await
            }

            /// How many items this subscriber lost because it fell behind.
            pub fn missed(&self) -> u64 {
                self.inner.missed.load(Ordering::Relaxed)
            }
        }

        impl Stream for $ty {
            type Item = $item;

            fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<$item>> {
                self.inner.stream.poll_next_unpin(cx)
            }
        }

        impl std::fmt::Debug for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($ty))
                    .field("missed", &self.missed())
                    .finish_non_exhaustive()
            }
        }
    };
}

lossy_stream!(EventStream, SessionEvent, "session events");
lossy_stream!(NotificationStream, ServerNotification, "notifications");

struct Lossy<T> {
    stream: BoxStream<'static, T>,
    missed: Arc<AtomicU64>,
}

impl<T: Clone + Send + 'static> Lossy<T> {
    fn new(rx: broadcast::Receiver<T>, what: &'static str) -> Self {
        let missed = Arc::new(AtomicU64::new(0));
        let counter = missed.clone();
        let stream = futures::stream::unfold(rx, move |mut rx| {
            let counter = counter.clone();
            async move {
                loop {
                    match rx.recv().await {
                        Ok(item) => return Some((item, rx)),
                        Err(broadcast::error::RecvError::Lagged(n)) => {
                            counter.fetch_add(n, Ordering::Relaxed);
                            tracing::warn!(missed = n, "subscriber fell behind: {what} dropped");
                        }
                        Err(broadcast::error::RecvError::Closed) => return None,
                    }
                }
            }
        })
        .boxed();
        Lossy { stream, missed }
    }
}
