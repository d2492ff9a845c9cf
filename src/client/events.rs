//! Streams the application subscribes to: lifecycle events and server notifications.
//!
//! Both are fan-out (every subscriber sees every item sent after it subscribed) over a bounded
//! buffer: a subscriber that falls more than [`EVENT_BUFFER`] items behind loses the oldest
//! ones instead of holding memory for them. The loss is counted ([`EventStream::missed`]) and
//! logged, never silent. Memory held for a lagging subscriber is therefore bounded by
//! [`EVENT_BUFFER`] items, each bounded by the configured maximum event size.

use crate::ids::SessionId;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use futures::stream::{BoxStream, Stream, StreamExt};
use serde_json::Value;
use tokio::sync::broadcast;

use super::models::TypedNotification;
use crate::proto::{CallId, Era, ExtensionStatus, SessionEvent};

/// Items buffered per subscriber before the oldest are dropped.
pub const EVENT_BUFFER: usize = 256;

/// A notification from the server (`notifications/progress`, `notifications/message`, …).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ServerNotification {
    /// The call it is about: for progress, the call whose `progressToken` it names; for
    /// any other notification, the call whose own response stream carried it. `None` for
    /// notifications on the standalone stream or on a resumed one (a server may replay other
    /// calls' messages there).
    pub call: Option<CallId>,
    /// The method, e.g. `notifications/progress`.
    pub method: String,
    /// The params, as sent.
    pub params: Option<Value>,
}

impl ServerNotification {
    /// The notification, typed: progress, log message, resource update, list change,
    /// cancellation, or [`TypedNotification::Other`] for anything else.
    ///
    /// ```no_run
    /// # async fn run(client: mcp_resume::Client) -> mcp_resume::Result<()> {
    /// use mcp_resume::client::models::{ListKind, TypedNotification};
    ///
    /// let mut notifications = client.notifications();
    /// while let Some(n) = notifications.recv().await {
    ///     match n.typed() {
    ///         TypedNotification::ListChanged(ListKind::Tools) => {
    ///             let tools = client.list_tools().await?;
    ///             println!("{} tools now", tools.len());
    ///         }
    ///         TypedNotification::Progress(p) => println!("call {:?}: {}", n.call, p.progress),
    ///         _ => {}
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub fn typed(&self) -> TypedNotification {
        TypedNotification::parse(&self.method, self.params.as_ref())
    }

    /// `params.progressToken` of a progress notification.
    pub fn progress_token(&self) -> Option<&Value> {
        self.params.as_ref()?.get("progressToken")
    }
}

/// What the driver publishes for the application: lifecycle events, notifications and the
/// extension status. A channel is created by its first subscriber: a client nobody listens to
/// holds no buffers, and what is sent before anyone subscribes reaches nobody either way.
#[derive(Default)]
pub(crate) struct Published {
    events: Channel<SessionEvent>,
    notifications: Channel<ServerNotification>,
    status: Mutex<Option<ExtensionStatus>>,
    era: Mutex<Option<Era>>,
    session_id: Mutex<Option<SessionId>>,
    /// Re-initializations that found the server's capabilities changed.
    capability_changes: AtomicU64,
}

/// A broadcast channel made by its first subscriber and ended by the client's close.
struct Channel<T> {
    state: Mutex<ChannelState<T>>,
}

struct ChannelState<T> {
    tx: Option<broadcast::Sender<T>>,
    closed: bool,
}

impl<T: Clone> Channel<T> {
    fn state(&self) -> std::sync::MutexGuard<'_, ChannelState<T>> {
        // Nothing here can panic half-way through an update.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn subscribe(&self) -> broadcast::Receiver<T> {
        let mut state = self.state();
        if state.closed {
            // A receiver whose sender is gone: it ends at once.
            return broadcast::channel(1).1;
        }
        state
            .tx
            .get_or_insert_with(|| broadcast::channel(EVENT_BUFFER).0)
            .subscribe()
    }

    fn send(&self, item: T) {
        if let Some(tx) = &self.state().tx {
            let _ = tx.send(item);
        }
    }

    fn close(&self) {
        let mut state = self.state();
        state.closed = true;
        state.tx = None;
    }
}

impl<T> Default for Channel<T> {
    fn default() -> Self {
        Channel {
            state: Mutex::new(ChannelState {
                tx: None,
                closed: false,
            }),
        }
    }
}

impl Published {
    /// Counts a re-initialization that found the server's capabilities changed.
    pub(crate) fn capabilities_changed(&self) {
        self.capability_changes.fetch_add(1, Ordering::Relaxed);
    }

    /// Re-initializations so far that found the server's capabilities changed.
    pub(crate) fn capability_changes(&self) -> u64 {
        self.capability_changes.load(Ordering::Relaxed)
    }

    pub(crate) fn subscribe_events(&self) -> EventStream {
        EventStream::new(self.events.subscribe())
    }

    pub(crate) fn subscribe_notifications(&self) -> NotificationStream {
        NotificationStream::new(self.notifications.subscribe())
    }

    /// Sends to the event subscribers, if any (nobody listening is not an error).
    pub(crate) fn event(&self, event: SessionEvent) {
        self.events.send(event);
    }

    /// Sends to the notification subscribers, if any.
    pub(crate) fn notification(&self, notification: ServerNotification) {
        self.notifications.send(notification);
    }

    /// The client was closed, or its driver stopped: its streams end once their subscribers
    /// have what was sent before, and later ones end at once.
    pub(crate) fn close(&self) {
        self.events.close();
        self.notifications.close();
    }

    pub(crate) fn set_status(&self, status: Option<ExtensionStatus>) {
        match self.status.lock() {
            Ok(mut s) => *s = status,
            Err(poisoned) => *poisoned.into_inner() = status,
        }
    }

    pub(crate) fn status(&self) -> Option<ExtensionStatus> {
        match self.status.lock() {
            Ok(s) => *s,
            Err(poisoned) => *poisoned.into_inner(),
        }
    }

    pub(crate) fn set_era(&self, era: Era) {
        match self.era.lock() {
            Ok(mut e) => *e = Some(era),
            Err(poisoned) => *poisoned.into_inner() = Some(era),
        }
    }

    pub(crate) fn set_session_id(&self, id: Option<SessionId>) {
        match self.session_id.lock() {
            Ok(mut s) => *s = id,
            Err(poisoned) => *poisoned.into_inner() = id,
        }
    }

    pub(crate) fn session_id(&self) -> Option<SessionId> {
        match self.session_id.lock() {
            Ok(s) => s.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    pub(crate) fn era(&self) -> Option<Era> {
        match self.era.lock() {
            Ok(e) => *e,
            Err(poisoned) => *poisoned.into_inner(),
        }
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

            /// The next item; `None` once the client is closed or its driver stopped (its
            /// runtime shut down), after the items sent before, or once it and its driver
            /// are gone.
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
