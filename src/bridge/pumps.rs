//! The two tasks that carry the real session's output to the host: server notifications,
//! and session events (republished; after a re-initialization, the host's session state is
//! set again, and a capability change is announced as `list_changed`).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::task::JoinHandle;

use super::message::request;
use super::{lock, Inner};
use crate::client::Client;
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
    let forward = runtime.spawn(async move {
        while let Some(n) = notifications.recv().await {
            missed.store(notifications.missed(), Ordering::Relaxed);
            // Names the server's own request id: the host learns of it from the forwarded
            // request's end instead (see `server_requests`).
            if n.method == "notifications/cancelled" {
                continue;
            }
            if out.send(request(None, &n.method, n.params)).await.is_err() {
                return;
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
        while let Some(event) = events.recv().await {
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
                    if declared && out.send(request(None, method, None)).await.is_err() {
                        return;
                    }
                }
            }
            // Nobody subscribed is not an error.
            let _ = republish.send(event);
        }
    });
    [forward, announce]
}
