//! The two tasks that carry the real session's output to the host: server notifications,
//! and session events (republished; after a re-initialization, the host's session state is
//! set again, and a capability change is announced as `list_changed`).

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use futures::{FutureExt, StreamExt};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use super::message::request;
use super::{lock, Inner};
use crate::client::{Client, ServerNotification};
use crate::proto::SessionEvent;

/// The lists a host caches, by capability: what it is told to refresh.
const LISTS: [(&str, &str); 3] = [
    ("tools", "notifications/tools/list_changed"),
    ("resources", "notifications/resources/list_changed"),
    ("prompts", "notifications/prompts/list_changed"),
];

pub(crate) fn start(
    runtime: &tokio::runtime::Handle,
    client: &Client,
    inner: &Inner,
) -> [JoinHandle<()>; 2] {
    let mut notifications = client.notifications();
    let out = inner.out.clone();
    let missed = Arc::clone(&inner.missed);
    let (flush_tx, mut flushes) = mpsc::channel::<oneshot::Sender<()>>(1);
    inner.calls.set_flush(flush_tx);
    let forward = runtime.spawn(async move {
        loop {
            tokio::select! {
                n = notifications.next() => {
                    let Some(n) = n else { return };
                    missed.store(notifications.missed(), Ordering::Relaxed);
                    if !forward(&out, n).await {
                        return;
                    }
                }
                Some(done) = flushes.recv() => {
                    // Whatever the client published before the flush was asked is buffered
                    // here already: forward it, then let the answer go.
                    while let Some(Some(n)) = notifications.next().now_or_never() {
                        if !forward(&out, n).await {
                            return;
                        }
                    }
                    let _ = done.send(());
                }
            }
        }
    });

    let mut events = client.events();
    let session = client.clone();
    let out = inner.out.clone();
    let republish = inner.events.clone();
    let calls = Arc::clone(&inner.calls);
    let server_capabilities = Arc::clone(&inner.server_capabilities);
    let announce = runtime.spawn(async move {
        // Announcements owed to the host, waiting for room in its queue. The events go on
        // meanwhile (a pump blocked on the host would fall behind the lossy event stream and
        // miss a later re-initialization: its session state never set again); a list
        // already owed is not owed twice (`list_changed` says "list again").
        let mut owed: VecDeque<&'static str> = VecDeque::new();
        loop {
            tokio::select! {
                event = events.recv() => {
                    let Some(event) = event else { return };
                    if matches!(event, SessionEvent::Reinitialized { .. }) {
                        calls.session_state.restore(&session);
                    }
                    if let SessionEvent::Reinitialized {
                        capabilities_changed: true,
                        ..
                    } = &event
                    {
                        calls.forget_annotations();
                        let known = lock(&server_capabilities).clone();
                        for (capability, method) in LISTS {
                            let declared = match &known {
                                Some(caps) => caps.get(capability).is_some_and(|c| !c.is_null()),
                                None => true,
                            };
                            if declared && !owed.contains(&method) {
                                owed.push_back(method);
                            }
                        }
                    }
                    // Nobody subscribed is not an error.
                    let _ = republish.send(event);
                }
                room = out.reserve(), if !owed.is_empty() => {
                    let Ok(room) = room else { return };
                    if let Some(method) = owed.pop_front() {
                        room.send(request(None, method, None));
                    }
                }
            }
        }
    });
    [forward, announce]
}

/// Forwards one server notification; `false` once the host side is gone.
async fn forward(out: &mpsc::Sender<Value>, n: ServerNotification) -> bool {
    // Names the server's own request id: the host learns of it from the forwarded request's
    // end instead (see `server_requests`).
    if n.method == "notifications/cancelled" {
        return true;
    }
    out.send(request(None, &n.method, n.params)).await.is_ok()
}
